/* forms_ab.c — the attention forms of a model timed alternately in one
 * process (issue 26: which form a short prompt should take), so that a load
 * that comes and goes on a shared machine hits them alike. Where the CPU has
 * avx512_bf16 the third form, streaming-bf16 (kiln_program_form_force 2),
 * takes its turn too.
 *
 * The model is loaded and compiled as kiln bench does it (both forms, the
 * tuning DB's schedules and form records, no search); then for R rounds, for
 * each prompt length, a prefill from position 0 in each form
 * (kiln_program_form_force 0: materialised, 1: streaming), the form that
 * goes first swapped every round. Prints per length each form's minimum and
 * median and the median (and range) of the per-round ratio streaming /
 * materialised: above 1.03 materialised is faster, below 0.97 streaming, in
 * between a tie (kiln_program_form_record's); with three forms also
 * streaming-bf16 / materialised and streaming-bf16 / streaming.
 *
 *   make && cc -O2 -Iinclude -Isrc/base -Isrc/ir -Isrc/model -Isrc/runtime -Isrc/sched \
 *       bench/forms_ab.c build/libkiln.a -lm -ldl -lpthread -o build/forms_ab
 *   KILN_TUNEDB=DB build/forms_ab MODEL.gguf THREADS ROUNDS [ROWS ...]   (rows default 256 512)
 */
#include <stdio.h>
#include <stdlib.h>

#include "base.h"
#include "kiln_compile.h"
#include "model.h"

#define MAX_ROUNDS 64
#define MAX_LENS 8

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: forms_ab MODEL.gguf THREADS ROUNDS [ROWS ...]\n");
        return 2;
    }
    int threads = atoi(argv[2]), rounds = atoi(argv[3]), lens[MAX_LENS] = {256, 512}, nl = 2;
    if (threads < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "forms_ab: THREADS >= 1, 1 <= ROUNDS <= %d\n", MAX_ROUNDS);
        return 2;
    }
    if (argc > 4) nl = 0;
    for (int i = 4; i < argc && nl < MAX_LENS; i++)
        if ((lens[nl++] = atoi(argv[i])) < 5) {
            fprintf(stderr, "forms_ab: a prompt of at least 5 rows (%s)\n", argv[i]);
            return 2;
        }
    model_options o = model_default_options();
    o.compiled = 1;
    o.threads = threads;
    o.search_budget = 0;
    model *m;
    char err[1024];
    if (model_load_ex(argv[1], &o, &m, err, sizeof err) != KILN_OK) {
        fprintf(stderr, "forms_ab: %s\n", err);
        return 1;
    }
    kiln_program *p = model_program(m);
    int maxlen = 0;
    for (int l = 0; l < nl; l++) maxlen = lens[l] > maxlen ? lens[l] : maxlen;
    if (!p || !kiln_program_form_force(p, 1) || maxlen > model_n_ctx(m)) {
        fprintf(stderr, "forms_ab: the model has no streaming form to compare, or a prompt exceeds its context\n");
        model_free(m);
        return 1;
    }
    int32_t *toks = malloc((size_t)maxlen * sizeof *toks);
    for (int i = 0; i < maxlen; i++) toks[i] = (int32_t)((7919u * (unsigned)i + 13u) % (unsigned)model_n_vocab(m));
    float *logits = malloc((size_t)model_n_vocab(m) * sizeof *logits);
    int nf = kiln_program_form_force(p, 2) ? 3 : 2;
    for (int f = 0; f < nf; f++) { /* warm-up: the weight copies, pages */
        kiln_program_form_force(p, f);
        model_forward(m, toks, 8, 0, logits);
    }
    static double t[MAX_LENS][3][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int l = 0; l < nl; l++)
            for (int i = 0; i < nf; i++) {
                int f = (i + r) % nf;
                kiln_program_form_force(p, f);
                double t0 = kiln_now_s();
                if (model_forward(m, toks, lens[l], 0, logits) != KILN_OK) {
                    fprintf(stderr, "forms_ab: %s\n", model_error(m));
                    return 1;
                }
                t[l][f][r] = kiln_now_s() - t0;
            }
    for (int l = 0; l < nl; l++) {
        double ratio[MAX_ROUNDS], rb[MAX_ROUNDS], rbs[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            ratio[r] = t[l][1][r] / t[l][0][r];
            if (nf == 3) rb[r] = t[l][2][r] / t[l][0][r], rbs[r] = t[l][2][r] / t[l][1][r];
        }
        qsort(ratio, (size_t)rounds, sizeof *ratio, cmp);
        if (nf == 3) qsort(rb, (size_t)rounds, sizeof *rb, cmp), qsort(rbs, (size_t)rounds, sizeof *rbs, cmp);
        for (int f = 0; f < nf; f++) qsort(t[l][f], (size_t)rounds, sizeof(double), cmp);
        printf("t=%d pp%d: materialised min %.1f median %.1f ms | streaming min %.1f median %.1f ms | "
               "streaming/materialised per round: median %.3f (%.3f-%.3f)\n",
               threads, lens[l], 1e3 * t[l][0][0], 1e3 * t[l][0][rounds / 2], 1e3 * t[l][1][0],
               1e3 * t[l][1][rounds / 2], ratio[rounds / 2], ratio[0], ratio[rounds - 1]);
        if (nf == 3)
            printf("t=%d pp%d: streaming-bf16 min %.1f median %.1f ms | bf16/materialised median %.3f (%.3f-%.3f) | "
                   "bf16/streaming median %.3f (%.3f-%.3f)\n",
                   threads, lens[l], 1e3 * t[l][2][0], 1e3 * t[l][2][rounds / 2], rb[rounds / 2], rb[0],
                   rb[rounds - 1], rbs[rounds / 2], rbs[0], rbs[rounds - 1]);
    }
    free(toks);
    free(logits);
    model_free(m);
    return 0;
}
