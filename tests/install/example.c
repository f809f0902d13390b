/* example.c — a program that generates text through include/kiln_llm.h, built
 * against an installed kiln with pkg-config by tests/py/test_install.py:
 *
 *     cc example.c $(pkg-config --cflags --libs kiln) -o example
 *     ./example MODEL.gguf "the cat" 8
 *
 * It prints kiln's version, the generated text streamed piece by piece, then
 * a line "ids: ..." with the generated ids and the statistics; exit 1 with
 * the error on stderr when anything fails.
 */
#include <stdio.h>
#include <stdlib.h>

#include <kiln_llm.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT N\n", argv[0]);
        return 2;
    }
    printf("kiln %s (header %d.%d.%d)\n", kiln_version(), KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH);
    kiln_llm_params lp = kiln_llm_default_params();
    lp.threads = 1;
    lp.tune_s = 0;
    kiln_llm *m = NULL;
    char err[1024];
    if (kiln_llm_load(argv[1], &lp, &m, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "example: %s\n", err);
        return 1;
    }
    kiln_gen_params gp = kiln_gen_default_params();
    gp.temperature = 0;
    gp.max_tokens = atoi(argv[3]);
    kiln_status s = kiln_llm_start(m, argv[2], &gp);
    kiln_piece pc = {0, "", 0, 0};
    while (s == KILN_OK && !pc.done) {
        s = kiln_llm_next(m, &pc);
        if (s == KILN_OK) fwrite(pc.text, 1, pc.len, stdout);
    }
    if (s != KILN_OK) {
        fprintf(stderr, "example: %s\n", kiln_llm_error(m));
        kiln_llm_free(m);
        return 1;
    }
    kiln_llm_stats st;
    kiln_llm_stats_get(m, &st);
    const int32_t *ids = kiln_llm_generated_ids(m);
    printf("\nids:");
    for (int i = 0; i < st.generated_tokens; i++) printf(" %d", ids[i]);
    printf("\nprompt %d tokens, generated %d (stop: %s), %.1f tokens/s\n", st.prompt_tokens, st.generated_tokens,
           st.stop, st.gen_tps);
    kiln_llm_free(m);
    return 0;
}
