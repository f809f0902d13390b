/* fuzz_onnx.c — libFuzzer target for the ONNX reader and importer: any byte
 * string must either load as a model or fail with a status and a message;
 * never crash, hang or read out of bounds. A model that loads is also run
 * through the reference interpreter with zero inputs (symbolic dims bound to
 * 2), so a graph the importer let through inconsistently would show up under
 * AddressSanitizer here. No external data is read (no folder is given).
 *
 *   make fuzz-onnx                 # 60 s from seeds tests/fuzz/make_onnx_corpus.py writes
 *   make fuzz-onnx FUZZ_SECONDS=600
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "kiln.h"
#include "kiln_onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    kiln_status st = KILN_OK;
    err[0] = 0;
    kiln_onnx_model *m = kiln_onnx_load_buffer(data, size, NULL, NULL, &st, err, sizeof err);
    if (!m) {
        if (st == KILN_OK || !err[0]) abort(); /* a failure must say what and why */
        return 0;
    }
    kiln_graph *g = kiln_onnx_graph(m);
    void *bufs[16] = {0};
    int ok = 1;
    for (int i = 0; i < kiln_onnx_input_count(m) && i < 16; i++) {
        int64_t dims[KILN_MAX_DIMS];
        const char *names[KILN_MAX_DIMS];
        int nd = kiln_onnx_input_dims(m, i, dims, names);
        int64_t n = 1;
        for (int d = 0; d < nd; d++) {
            if (names[d]) { kiln_bind_dim(g, names[d], 2); dims[d] = 2; }
            n *= dims[d];
        }
        if (n > (1 << 16)) { ok = 0; break; } /* keep each input small */
        size_t bytes = kiln_dtype_bytes(kiln_onnx_input_dtype(m, i), n);
        bufs[i] = calloc(1, bytes ? bytes : 1);
        if (!bufs[i]) { ok = 0; break; }
        kiln_bind_input(g, kiln_onnx_input_name(m, i), bufs[i], bytes);
    }
    if (ok && kiln_onnx_input_count(m) <= 16) (void)kiln_eval_reference(g);
    for (int i = 0; i < 16; i++) free(bufs[i]);
    kiln_onnx_free(m);
    return 0;
}
