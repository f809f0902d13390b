/* emit_gemm.c — the packed (outer-product) contraction form. Not written
 * yet: no schedule of this form is emittable, so the search never proposes
 * one and the dot form serves every contraction. */
#include "emit_gemm.h"

int cg_packed_ok(kiln_dtype t, const sch_contract_sched *s) {
    (void)t;
    (void)s;
    return 0;
}

void cg_emit_packed_tiles(kiln_dtype t, const sch_contract_sched *scheds, int n, char **s, size_t *len, size_t *cap) {
    (void)t;
    (void)scheds;
    (void)n;
    (void)s;
    (void)len;
    (void)cap;
}

void cg_emit_packed_schedule(const sch_program *p, const sch_kernel *k, const sch_contract_sched *sc, char **s,
                             size_t *len, size_t *cap) {
    (void)p;
    (void)k;
    (void)sc;
    (void)s;
    (void)len;
    (void)cap;
}
