/* family.h — the CPU contraction micro-kernel families as rows of one table.
 *
 * A family is one form x arithmetic of the contraction micro-kernel (the dot
 * form in f32 or int8, its int8 decode tiles on B's repacked copy, the packed
 * form in f32, int8 or bf16, its f32 decode tiles reading B in place, AMX int8
 * and bf16 tiles). Its row says everything sched and the runtime need to
 * know about it: which schedules are valid (tile limits, K blocks, B dtypes:
 * the emitters' own limits, stated here once), which CPU features it needs,
 * which shape bucket and operands it serves, its schedule space, its cost
 * model entry, and the scratch its kernels share. The emitter of a family is
 * the row of the same index in codegen's table (`cg_family_emitter`,
 * src/codegen/emit_contract.c), which sched cannot name (codegen sits above
 * sched).
 *
 * Invariants: sch_families[i].id == i; every schedule sch_space_contract
 * enumerates is valid for its row (sch_family_valid); sch_family_of maps a
 * schedule to at most one row (by form, arithmetic, rp and direct).
 * Adding a family: docs/ARCHITECTURE.md section 7 ("A micro-kernel family").
 */
#ifndef KILN_SCHED_FAMILY_H
#define KILN_SCHED_FAMILY_H

#include <stddef.h>
#include <stdint.h>

#include "loop.h"
#include "search.h"

typedef enum sch_family_id {
    SCH_FAM_DOT_F32 = 0,   /* dot form, f32 FMAs (emit_contract.c) */
    SCH_FAM_DOT_I8,        /* dot form, int8 vpdpbusd (emit_contract_i8.c) */
    SCH_FAM_DOT_I8_RP,     /* decode: the int8 1 x 8 tiles on B's repacked copy (rp=1) */
    SCH_FAM_PACKED_F32,    /* packed outer-product form, f32 (emit_gemm.c) */
    SCH_FAM_PACKED_DIRECT, /* decode: packed f32 tiles reading strided B in place (direct=1) */
    SCH_FAM_PACKED_BF16,   /* packed form, vdpbf16ps (emit_gemm_bf16.c) */
    SCH_FAM_PACKED_I8,     /* packed form, int8 VNNI strips (emit_gemm_i8.c) */
    SCH_FAM_AMX_I8,        /* AMX int8 tiles (emit_gemm_amx.c) */
    SCH_FAM_AMX_BF16,      /* AMX bf16 tiles (emit_gemm_amx_bf16.c) */
    SCH_FAM_COUNT
} sch_family_id;

/* CPU features a family's code needs (sch_family.needs) */
enum {
    SCH_NEED_VNNI = 1u << 0,     /* avx512_vnni */
    SCH_NEED_BF16 = 1u << 1,     /* avx512_bf16 */
    SCH_NEED_AMX_INT8 = 1u << 2, /* amx_tile and amx_int8 */
    SCH_NEED_AMX_BF16 = 1u << 3  /* amx_tile, amx_bf16 and avx512_bf16 */
};

/* which shape bucket a family's space serves */
typedef enum sch_family_bucket {
    SCH_FAM_ANY_M = 0, /* decode and prefill */
    SCH_FAM_SMALL_M,   /* M <= SCH_SMALL_M only */
    SCH_FAM_LARGE_M    /* M > SCH_SMALL_M only */
} sch_family_bucket;

/* B operands a family reads (sch_family.b_reads) */
enum {
    SCH_B_CONTIG = 1u << 0,  /* B contiguous along K (every contraction but one with b_kstride) */
    SCH_B_STRIDED = 1u << 1, /* f32 B strided along K, contiguous along n (sch_contract.b_kstride) */
    SCH_B_WEIGHT = 1u << 2   /* only a caller's bound weight, not an intermediate or state (rp's copy) */
};

typedef struct sch_family {
    sch_family_id id;
    const char *name;     /* "dot-f32", ...: kiln explain and tests */
    sch_form form;
    sch_arith arith;
    int rp, direct;       /* the values of sch_contract_sched.rp / .direct its schedules carry */
    unsigned needs;       /* SCH_NEED_* */
    sch_family_bucket bucket;
    unsigned b_reads;     /* SCH_B_*: contiguous, strided (then only), weights only */
    int serial;           /* on a pool of more than one thread, decode schedules also with serial=1 */
    /* 1 when B of dtype t is one this family's code reads */
    int (*dtype_ok)(kiln_dtype t);
    /* 1 when the schedule's tiles, blocks and prefetch are within the emitter's limits */
    int (*tile_ok)(const sch_contract_sched *s);
    /* appends the family's schedules for the shape (out NULL: counts them);
     * only valid ones (sch_family_valid), in a fixed order */
    int (*space)(const struct sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap);
    /* the cost model's seconds for one run (cost.c) */
    double (*cost)(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s);
    /* bytes of the scratch the threads of one launch share (A converted once
     * for all, the runtime's CG_KF_PREP launch) for M rows and K; NULL: none */
    size_t (*scratch)(kiln_dtype t, int64_t m, int64_t k);
    /* 1: a prefill launch may keep B's strips as a pack copy for the next
     * (sched/repack_layout.h's SCH_PACK_*, the runtime's pack_b) */
    int pack_copy;
    const char *about; /* its space and arithmetic in a line (kiln tune --space) */
} sch_family;

extern const sch_family sch_families[SCH_FAM_COUNT];

/* the family of schedule s (by form, arith, rp, direct), NULL when none */
const sch_family *sch_family_of(const sch_contract_sched *s);
/* 1 when f's row takes s's tile, and s's far prefetch (pf2) is nil or an rp
 * tile's beyond its near one: every check of a point goes through this */
int sch_family_tile_ok(const sch_family *f, const sch_contract_sched *s);
/* 1 when s belongs to a family that can emit it for B of dtype t */
int sch_family_valid(kiln_dtype t, const sch_contract_sched *s);
/* 1 when s is a schedule of row id and valid for B of dtype t (the emitters' test) */
int sch_family_is(const sch_contract_sched *s, sch_family_id id, kiln_dtype t);
/* 1 when s's family reads B in the layout given (strided: b_kstride set) */
int sch_family_reads_b(const sch_contract_sched *s, int strided);
/* the CPU features the shape's machine has, as SCH_NEED_* bits */
unsigned sch_family_have(const sch_contract_shape *sh);
/* whether family f's space joins the search for shape sh (bucket, features,
 * B's layout and dtype, and approximate arithmetic only on B the program
 * computed when B is f32) */
int sch_family_applies(const sch_family *f, const sch_contract_shape *sh);

/* the packed forms' tallest tiles (the emitters' tables are this size) */
#define SCH_PACKED_MAX_MR 14
#define SCH_PACKED_I8_MAX_MR 12

/* the schedule spaces of the rows (space_contract.c) and their cost models (cost.c) */
int sch_space_dot(const sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap);
int sch_space_packed(const sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap);
int sch_space_direct(const sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap);
int sch_space_amx(const sch_family *f, const sch_contract_shape *sh, sch_contract_sched *out, int cap);
double sch_cost_dot(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s);
double sch_cost_packed(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s);
double sch_cost_amx(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s);

#endif
