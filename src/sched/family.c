/* family.c — the table of contraction micro-kernel families (family.h): one
 * row per form x arithmetic, with the emitters' limits stated once.
 *
 * The limits (why each is what it is, in the emitter that depends on it):
 *  - dot form (emit_contract.c): mr x nr accumulators, 2 registers per B row
 *    (a 32-element chunk dequantised into two 16-lane halves) and 2 for A's
 *    chunk fit 32 zmm: mr*nr + 2*nr + 2 <= 32, mr <= 8, nr <= 16; B
 *    prefetched at most 64 chunks ahead.
 *  - its int8 arithmetic (emit_contract_i8.c): tiles of at most 4 x 8 and 16
 *    accumulators (int32 sums, A's lane sums and scales in the remaining
 *    registers); B of a block format with an int8 layout (DT_INT8).
 *  - rp=1 (emit_contract_i8.c, sched/repack_layout.h): the copy interleaves 8
 *    rows of B, read by tiles of 8 B rows for 1 to 4 rows of A (all of a
 *    decode's M, taken 4 at a time: the schedule's mr stays 1, the rows a
 *    tile takes are the M of the call, and each row's result is the 1-row
 *    tile's bit for bit).
 *  - packed form (emit_gemm.c, emit_gemm_bf16.c): strips of 16, 32, 48 or 64
 *    lanes, mr*(nr/16) accumulators + nr/16 strip registers + a broadcast
 *    <= 32 zmm, mr <= SCH_PACKED_MAX_MR; K blocks kc a multiple of 32 (block
 *    formats' chunks); f32 strip prefetch 0, 8 or 16 K steps ahead, bf16 0
 *    or 16.
 *  - packed int8 (emit_gemm_i8.c): int32 and f32 accumulators, two per tile
 *    entry, so 2*mr*nv + 2*nv + 2 <= 32, strips <= 48 lanes, mr <=
 *    SCH_PACKED_I8_MAX_MR; no prefetch variant.
 *  - AMX (emit_gemm_amx.c, emit_gemm_amx_bf16.c): 16 x 16 tiles, mr and nr
 *    16 or 32; A blocks mc a multiple of mr; no prefetch variant.
 */
#include <stddef.h>

#include "contract.h"
#include "dtype.h"
#include "family.h"

/* ---- B dtypes ---- */

static int dt_has(kiln_dtype t, unsigned flag) {
    return (int)t >= 0 && t < KILN_DTYPE_COUNT && (dtype_table[t].flags & flag) != 0;
}
static int dt_weight(kiln_dtype t) { return dt_has(t, DT_WEIGHT); }
static int dt_int8(kiln_dtype t) { return dt_has(t, DT_INT8); }
static int dt_f32(kiln_dtype t) { return t == KILN_F32; }
static int dt_f32_or_int8(kiln_dtype t) { return t == KILN_F32 || dt_int8(t); }

/* ---- tile limits ---- */

static int kc_ok(int kc) { return kc >= 0 && kc % 32 == 0 && kc <= (1 << 20); }

static int dot_f32_ok(const sch_contract_sched *s) {
    return s->mc >= 1 && s->nc >= 0 && s->mr >= 1 && s->nr >= 1 && s->mr <= 8 && s->nr <= 16 &&
           s->mr * s->nr + 2 * s->nr + 2 <= 32 && s->pf >= 0 && s->pf <= 64;
}

static int dot_i8_ok(const sch_contract_sched *s) {
    return dot_f32_ok(s) && s->mr <= 4 && s->nr <= 8 && s->mr * s->nr <= 16;
}

static int dot_i8_rp_ok(const sch_contract_sched *s) { return dot_i8_ok(s) && s->mr == 1 && s->nr == 8; }

/* the packed strips' common limits: nr lanes in 16s up to max_nr, mr rows
 * up to max_mr, regs_per(mr, nv) zmm */
static int packed_common_ok(const sch_contract_sched *s, int max_nr, int max_mr, int regs) {
    if (s->nr < 16 || s->nr > max_nr || s->nr % 16 != 0) return 0;
    if (s->mr < 1 || s->mr > max_mr || regs > 32) return 0;
    return kc_ok(s->kc) && s->mc >= 1 && s->nc >= 0;
}

static int packed_f32_ok(const sch_contract_sched *s) {
    int nv = s->nr / 16;
    return packed_common_ok(s, 64, SCH_PACKED_MAX_MR, s->mr * nv + nv + 1) && (s->pf == 0 || s->pf == 8 || s->pf == 16);
}

static int packed_bf16_ok(const sch_contract_sched *s) {
    int nv = s->nr / 16;
    return packed_common_ok(s, 64, SCH_PACKED_MAX_MR, s->mr * nv + nv + 1) && (s->pf == 0 || s->pf == 16);
}

static int packed_i8_ok(const sch_contract_sched *s) {
    int nv = s->nr / 16;
    return packed_common_ok(s, 48, SCH_PACKED_I8_MAX_MR, 2 * s->mr * nv + 2 * nv + 2) && s->pf == 0;
}

static int amx_ok(const sch_contract_sched *s) {
    if ((s->mr != 16 && s->mr != 32) || (s->nr != 16 && s->nr != 32)) return 0;
    return kc_ok(s->kc) && s->mc >= s->mr && s->mc % s->mr == 0 && s->nc >= 0 && s->pf == 0;
}

/* ---- scratch shared by a launch's threads ---- */

static size_t up64(size_t x) { return (x + 63) / 64 * 64; }

/* the packed and AMX int8 forms' quantised A (emit_gemm_i8.c's
 * emit_scratch_parts lays it out): rows padded to 16 plus 32 zero rows;
 * int8 values, then per 32 elements a scale and an exact sum, then per B
 * scale block the zero-point term */
static size_t i8_scratch(kiln_dtype t, int64_t m, int64_t k) {
    size_t rows = (size_t)((m + 15) / 16 * 16 + 32);
    int kb = dtype_table[t].scale_elems > 0 ? dtype_table[t].scale_elems : 32;
    return up64(rows * (size_t)k + 64) + 2 * up64((rows * (size_t)(k / 32) + 1) * sizeof(float)) +
           up64((rows * (size_t)(k / kb) + 1) * sizeof(int32_t));
}

/* the AMX bf16 form's converted A (emit_gemm_amx_bf16.c): 16-row groups,
 * two more zeroed, of K (f32 B: K rounded up to 32) bf16 values */
static size_t amx_bf16_scratch(kiln_dtype t, int64_t m, int64_t k) {
    int64_t kp = t == KILN_F32 ? (k + 31) / 32 * 32 : k;
    return (size_t)(((m + 15) / 16 + 2) * 16 * kp) * sizeof(uint16_t) + 64;
}

/* ---- the table ---- */

#define CONTIG SCH_B_CONTIG
#define BOTH (SCH_B_CONTIG | SCH_B_STRIDED)

const sch_family sch_families[SCH_FAM_COUNT] = {
    [SCH_FAM_DOT_F32] = {SCH_FAM_DOT_F32, "dot-f32", SCH_FORM_DOT, SCH_ARITH_F32, 0, 0, 0, SCH_FAM_ANY_M, CONTIG, 1,
                         dt_weight, dot_f32_ok, sch_space_dot, sch_cost_dot, NULL, 0,
        "mr x nr register tiles, mr in {1,2,3,4,6,8}, nr in {1,...,16}, within 32 zmm; mc in {16,64,256} rows"
        " of A per block; nc in {auto,4,16,64} tiles per item; B prefetched 0 to 32 chunks ahead"},
    [SCH_FAM_DOT_I8] = {SCH_FAM_DOT_I8, "dot-i8", SCH_FORM_DOT, SCH_ARITH_I8, 0, 0, SCH_NEED_VNNI, SCH_FAM_ANY_M,
                        CONTIG, 1, dt_int8, dot_i8_ok, sch_space_dot, sch_cost_dot, NULL, 0,
        "the dot tiles up to 4 x 8 on int8 dot products (VNNI, block formats; A quantised per 32: "
        "approximate)"},
    [SCH_FAM_DOT_I8_RP] = {SCH_FAM_DOT_I8_RP, "dot-i8-rp", SCH_FORM_DOT, SCH_ARITH_I8, 1, 0, SCH_NEED_VNNI,
                           SCH_FAM_SMALL_M, CONTIG | SCH_B_WEIGHT, 1, dt_int8, dot_i8_rp_ok, sch_space_dot,
                           sch_cost_dot, NULL, 0,
        "decode of a bound weight: int8 tiles of 8 B rows x all M <= 4 rows on a copy of B repacked once (8 rows "
        "interleaved)"},
    [SCH_FAM_PACKED_F32] = {SCH_FAM_PACKED_F32, "packed-f32", SCH_FORM_PACKED, SCH_ARITH_F32, 0, 0, 0, SCH_FAM_LARGE_M,
                            BOTH, 0, dt_weight, packed_f32_ok, sch_space_packed, sch_cost_packed, NULL, 0,
        "B dequantised into strips of nr in {16,32,48,64} lanes, mr x nr outer-product tiles, kc K per panel,"
        " mc, nc, strip prefetch"},
    [SCH_FAM_PACKED_DIRECT] = {SCH_FAM_PACKED_DIRECT, "packed-f32-direct", SCH_FORM_PACKED, SCH_ARITH_F32, 0, 1, 0,
                               SCH_FAM_SMALL_M, SCH_B_STRIDED, 1, dt_f32, packed_f32_ok, sch_space_direct,
                               sch_cost_packed, NULL, 0,
        "decode with f32 B strided along K (attention's values): the packed tiles read B's rows in place, mr "
        "in {1,2,4}"},
    [SCH_FAM_PACKED_BF16] = {SCH_FAM_PACKED_BF16, "packed-bf16", SCH_FORM_PACKED, SCH_ARITH_BF16, 0, 0, SCH_NEED_BF16,
                             SCH_FAM_LARGE_M, BOTH, 0, dt_f32, packed_bf16_ok, sch_space_packed, sch_cost_packed,
                             NULL, 0,
        "the packed tiles on vdpbf16ps (AVX-512 bf16) for f32 B the program computed (approximate)"},
    [SCH_FAM_PACKED_I8] = {SCH_FAM_PACKED_I8, "packed-i8", SCH_FORM_PACKED, SCH_ARITH_I8, 0, 0, SCH_NEED_VNNI,
                           SCH_FAM_LARGE_M, BOTH, 0, dt_int8, packed_i8_ok, sch_space_packed, sch_cost_packed,
                           i8_scratch, 1,
        "the packed tiles on vpdpbusd: B repacked to uint8 strips of <= 48 lanes, A quantised per 32 (VNNI, "
        "approximate)"},
    [SCH_FAM_AMX_I8] = {SCH_FAM_AMX_I8, "amx-i8", SCH_FORM_AMX, SCH_ARITH_I8, 0, 0, SCH_NEED_AMX_INT8, SCH_FAM_LARGE_M,
                        CONTIG, 0, dt_int8, amx_ok, sch_space_amx, sch_cost_amx, i8_scratch, 0,
        "16x16 int32 AMX tiles (tdpbssd), mr x nr in {16,32}^2, rescaled per block (approximate as int8)"},
    [SCH_FAM_AMX_BF16] = {SCH_FAM_AMX_BF16, "amx-bf16", SCH_FORM_AMX, SCH_ARITH_BF16, 0, 0, SCH_NEED_AMX_BF16,
                          SCH_FAM_LARGE_M, BOTH, 0, dt_f32_or_int8, amx_ok, sch_space_amx, sch_cost_amx,
                          amx_bf16_scratch, 0,
        "16x16 f32 AMX tiles (tdpbf16ps) for block formats and f32 B the program computed (approximate)"},
};

const sch_family *sch_family_of(const sch_contract_sched *s) {
    for (int i = 0; i < SCH_FAM_COUNT; i++) {
        const sch_family *f = &sch_families[i];
        if (f->form == s->form && f->arith == s->arith && f->rp == (s->rp != 0) && f->direct == (s->direct != 0))
            return f;
    }
    return NULL;
}

int sch_family_tile_ok(const sch_family *f, const sch_contract_sched *s) {
    if (!f->tile_ok(s)) return 0;
    /* the far prefetch level is the rp tiles' alone, beyond the near one */
    return s->pf2 == 0 || (f->id == SCH_FAM_DOT_I8_RP && s->pf > 0 && s->pf2 > s->pf && s->pf2 <= 256);
}

int sch_family_valid(kiln_dtype t, const sch_contract_sched *s) {
    const sch_family *f = sch_family_of(s);
    return f && f->dtype_ok(t) && sch_family_tile_ok(f, s);
}

int sch_family_is(const sch_contract_sched *s, sch_family_id id, kiln_dtype t) {
    const sch_family *f = sch_family_of(s);
    return f && f->id == id && f->dtype_ok(t) && sch_family_tile_ok(f, s);
}

int sch_family_reads_b(const sch_contract_sched *s, int strided) {
    const sch_family *f = sch_family_of(s);
    return f && (f->b_reads & (strided ? SCH_B_STRIDED : SCH_B_CONTIG)) != 0;
}

unsigned sch_family_have(const sch_contract_shape *sh) {
    return (sh->vnni ? SCH_NEED_VNNI : 0u) | (sh->bf16 ? SCH_NEED_BF16 : 0u) | (sh->amx ? SCH_NEED_AMX_INT8 : 0u) |
           (sh->amx_bf16 ? SCH_NEED_AMX_BF16 : 0u);
}

int sch_family_applies(const sch_family *f, const sch_contract_shape *sh) {
    int small = sh->m <= SCH_SMALL_M;
    if ((f->bucket == SCH_FAM_SMALL_M && !small) || (f->bucket == SCH_FAM_LARGE_M && small)) return 0;
    if (f->needs & ~sch_family_have(sh)) return 0;
    if (!(f->b_reads & (sh->b_strided ? SCH_B_STRIDED : SCH_B_CONTIG))) return 0;
    if ((f->b_reads & SCH_B_WEIGHT) && sh->b_activation) return 0;
    if (!f->dtype_ok(sh->b_dtype)) return 0;
    /* approximate arithmetic takes f32 B only where the program computed it
     * (an intermediate, the KV cache); a caller's f32 input stays exact */
    if (f->arith != SCH_ARITH_F32 && sh->b_dtype == KILN_F32 && !sh->b_activation) return 0;
    return 1;
}
