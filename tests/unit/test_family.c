/* test_family.c — the contraction family table (src/sched/family.h) and its
 * emitter rows (src/codegen/emit_contract.c).
 *
 * Every row is complete and in place, has an emitter, and serves some shape;
 * every schedule the search enumerates belongs to exactly the row that
 * enumerated it, is valid for that row, survives its text form, and is costed
 * by the row's own entry; the limits refuse what lies past them; the
 * scratch a row asks for grows with the rows of A it holds.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "contract.h"
#include "emit_contract.h"
#include "family.h"
#include "search.h"

static void test_rows_complete(void) {
    CASE_BEGIN("family_rows_complete");
    for (int i = 0; i < SCH_FAM_COUNT; i++) {
        const sch_family *f = &sch_families[i];
        CHECK((int)f->id == i, "row %d has id %d", i, (int)f->id);
        CHECK(f->name && f->name[0], "row %d has no name", i);
        CHECK(f->dtype_ok && f->tile_ok && f->space && f->cost && f->about && f->about[0], "row %s lacks a member",
              f->name);
        CHECK(cg_family_emitter_complete(i), "row %s has no emitter", f->name);
        CHECK(f->b_reads & (SCH_B_CONTIG | SCH_B_STRIDED), "row %s reads no B layout", f->name);
        for (int j = 0; j < i; j++) {
            CHECK(strcmp(f->name, sch_families[j].name) != 0, "two rows named %s", f->name);
            /* sch_family_of must tell every row apart */
            const sch_family *g = &sch_families[j];
            CHECK(!(f->form == g->form && f->arith == g->arith && f->rp == g->rp && f->direct == g->direct),
                  "rows %s and %s have the same key", f->name, g->name);
        }
    }
    CHECK(!cg_family_emitter_complete(SCH_FAM_COUNT) && !cg_family_emitter_complete(-1), "emitter past the table");
    CASE_END();
}

/* shapes that together reach every row: decode and prefill, weights in each
 * block format and f32, activations (strided or not), every CPU feature */
static int fill_shapes(sch_contract_shape *out) {
    static const kiln_dtype dts[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_Q8_0, KILN_Q4_0, KILN_Q5_0, KILN_Q4_K, KILN_Q6_K};
    static const int64_t ms[] = {1, 3, 64, 512};
    int n = 0;
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (size_t m = 0; m < sizeof ms / sizeof *ms; m++)
            for (int act = 0; act < 2; act++)
                for (int strided = 0; strided < 2; strided++) {
                    if (strided && dts[d] != KILN_F32) continue; /* only f32 B is ever strided */
                    sch_contract_shape sh = {ms[m], 640, 1024, 1, dts[d], 2, 1, 1, 1, act, 1, strided};
                    out[n++] = sh;
                }
    return n;
}

static void test_spaces_belong_to_rows(void) {
    CASE_BEGIN("family_spaces_belong_to_rows");
    sch_contract_shape shapes[128];
    int nsh = fill_shapes(shapes);
    int used[SCH_FAM_COUNT] = {0};
    sch_machine mc = sch_machine_default();
    for (int si = 0; si < nsh; si++) {
        const sch_contract_shape *sh = &shapes[si];
        int n = sch_space_contract(sh, NULL, 0);
        sch_contract_sched *sp = malloc((size_t)(n > 0 ? n : 1) * sizeof *sp);
        CHECK(sch_space_contract(sh, sp, n) == n, "shape %d: enumeration size differs", si);
        for (int i = 0; i < n; i++) {
            const sch_family *f = sch_family_of(&sp[i]);
            CHECK(f != NULL, "shape %d schedule %d has no family", si, i);
            if (!f) continue;
            used[f->id]++;
            CHECK(sch_family_valid(sh->b_dtype, &sp[i]), "shape %d: %s schedule %d invalid for its B", si, f->name, i);
            CHECK(sch_family_applies(f, sh), "shape %d: %s schedule %d from a row that does not apply", si, f->name, i);
            char text[160];
            sch_contract_sched back;
            sch_contract_sched_print(&sp[i], text, sizeof text);
            CHECK(sch_contract_sched_parse(text, &back) && sch_family_of(&back) == f && back.mr == sp[i].mr &&
                      back.nr == sp[i].nr && back.kc == sp[i].kc && back.pf == sp[i].pf,
                  "'%s' does not read back into %s", text, f->name);
            if (!sp[i].serial) {
                double a = sch_cost_contract(&mc, sh, &sp[i]), b = f->cost(&mc, sh, &sp[i]);
                CHECK(a == b && a > 0, "'%s': cost %g, its row's %g", text, a, b);
            }
        }
        free(sp);
    }
    for (int i = 0; i < SCH_FAM_COUNT; i++) CHECK(used[i] > 0, "row %s serves none of the shapes", sch_families[i].name);
    CASE_END();
}

static void test_limits_refuse(void) {
    CASE_BEGIN("family_limits_refuse");
    sch_contract_shape sh = {512, 640, 1024, 1, KILN_Q4_0, 1, 1, 1, 1, 0, 1, 0};
    int n = sch_space_contract(&sh, NULL, 0);
    sch_contract_sched *sp = malloc((size_t)n * sizeof *sp);
    sch_space_contract(&sh, sp, n);
    for (int i = 0; i < n; i++) {
        const sch_family *f = sch_family_of(&sp[i]);
        if (!f) continue;
        sch_contract_sched bad = sp[i];
        bad.mr = 64; /* past every form's register file */
        CHECK(!f->tile_ok(&bad), "%s takes mr=64", f->name);
        bad = sp[i];
        bad.mc = 0; /* a block of no rows never advances */
        CHECK(!f->tile_ok(&bad), "%s takes mc=0", f->name);
        CHECK(!sch_family_valid((kiln_dtype)KILN_DTYPE_COUNT, &sp[i]), "%s takes an unknown dtype", f->name);
    }
    free(sp);
    /* int8 rows only on int8 block layouts; bf16 outside AMX and packed has no row */
    sch_contract_sched s;
    memset(&s, 0, sizeof s);
    s.mr = 1, s.nr = 8, s.mc = 16, s.arith = SCH_ARITH_I8;
    CHECK(sch_family_valid(KILN_Q8_0, &s) && !sch_family_valid(KILN_F32, &s) && !sch_family_valid(KILN_F16, &s),
          "dot int8 dtypes");
    s.arith = SCH_ARITH_BF16;
    CHECK(sch_family_of(&s) == NULL, "a dot bf16 schedule has a family");
    s.arith = SCH_ARITH_F32;
    s.direct = 1;
    CHECK(sch_family_of(&s) == NULL, "a direct dot schedule has a family");
    CASE_END();
}

static void test_scratch(void) {
    CASE_BEGIN("family_scratch");
    int with = 0;
    for (int i = 0; i < SCH_FAM_COUNT; i++) {
        const sch_family *f = &sch_families[i];
        if (!f->scratch) continue;
        with++;
        kiln_dtype t = f->dtype_ok(KILN_Q8_0) ? KILN_Q8_0 : KILN_F32;
        size_t a = f->scratch(t, 16, 1024), b = f->scratch(t, 512, 1024);
        CHECK(a >= (size_t)16 * 1024 && b > a, "%s: scratch %zu at 16 rows, %zu at 512", f->name, a, b);
        CHECK(f->arith != SCH_ARITH_F32, "%s: f32 arithmetic converts no A", f->name);
    }
    CHECK(with == 3, "%d rows with scratch, want the packed/AMX int8 and AMX bf16", with);
    CASE_END();
}

/* a search's candidate unit timed on fewer rows than an rp tile takes emits
 * only those rows' tiles (cg_contract_rp_rows); the default emits all, the
 * multi-row ones with software prefetch where the schedule has none */
static void test_rp_rows(void) {
    CASE_BEGIN("rp_tiles_only_for_the_rows_run");
    sch_contract_sched sc;
    CHECK(sch_contract_sched_parse("mr=1 nr=8 nc=0 mc=16 arith=i8 rp=1", &sc), "schedule unreadable");
    for (int rows = 1; rows <= 5; rows += 4) {
        int was = cg_contract_rp_rows(rows == 5 ? 0 : rows);
        char *s = NULL;
        size_t len = 0, cap = 0;
        cg_emit_contract_tiles(KILN_Q4_K, &sc, 1, &s, &len, &cap);
        cg_contract_rp_rows(was);
        /* the 1-row tile at the schedule's prefetch distance (0), the
         * others at least 4 (emit_contract.c rp_tile_pf) */
        int one = s && strstr(s, "kcr_q4_k_1x8_p0(") != NULL, four = s && strstr(s, "kcr_q4_k_4x8_p4(") != NULL;
        if (rows == 1) CHECK(one && !four && !strstr(s, "kcr_q4_k_2x8"), "one row: the 1-row tile only");
        else CHECK(one && four, "the default: tiles for 1 to 4 rows");
        free(s);
    }
    CHECK(cg_contract_rp_rows(0) == 4, "the knob not back at its default");
    cg_contract_rp_rows(0);
    CASE_END();
}

int main(void) {
    test_rp_rows();
    test_rows_complete();
    test_spaces_belong_to_rows();
    test_limits_refuse();
    test_scratch();
    return check_exit();
}
