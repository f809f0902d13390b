/* fuzz_gguf.c — libFuzzer target for the GGUF reader: any byte string must
 * either open cleanly or fail with a message; never crash, hang or read out of
 * bounds. On success every accessor is exercised (metadata of every type,
 * every array element, every tensor, the JSON dump), so an inconsistency the
 * reader let through would show up under AddressSanitizer here.
 *
 *   make fuzz                 # 60 s from the seed corpus (tests/fuzz/corpus)
 *   make fuzz FUZZ_SECONDS=600
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    for (unsigned flags = 0; flags <= GGUF_OPEN_ALLOW_UNSUPPORTED; flags += GGUF_OPEN_ALLOW_UNSUPPORTED) {
        gguf_file *f = NULL;
        if (gguf_open_memory(data, size, flags, &f, err, sizeof err) != KILN_OK) {
            if (!err[0]) abort(); /* an error must come with a message */
            continue;
        }
        for (int64_t i = 0; i < gguf_kv_count(f); i++) {
            const gguf_kv *kv = gguf_kv_at(f, i);
            int64_t iv;
            double dv;
            gguf_str sv;
            for (uint64_t j = 0; j < 4; j++) {
                (void)gguf_arr_int(kv, j, &iv);
                (void)gguf_arr_float(kv, j, &dv);
                (void)gguf_arr_str(kv, j, &sv);
            }
        }
        for (int64_t i = 0; i < gguf_tensor_count(f); i++) {
            const gguf_tensor *t = gguf_tensor_at(f, i);
            if (!t) abort();
            if (t->bytes) { /* the reader vouched for [data, data + bytes) */
                volatile uint8_t first = ((const uint8_t *)t->data)[0];
                volatile uint8_t last = ((const uint8_t *)t->data)[t->bytes - 1];
                (void)first;
                (void)last;
            }
        }
        char *json = gguf_dump_json(f);
        free(json);
        gguf_close(f);
    }
    return 0;
}
