/* release.c — when a weight's 8-row interleaved copy (rp=1, runtime/repack.h)
 * replaces the weight for every kernel of the program, so that the weight's
 * own pages may go (DESIGN.md section 6: "a repacked layout the search
 * chose replaces the original once nothing reads the original, so resident
 * weights stay close to the file's size").
 *
 * B's copy replaces B when, for every kernel that reads B:
 *   - it is a contraction the CPU family emits (cg_contract_emittable) with
 *     B as its weight operand, not as A, and no other load of B (a fused
 *     epilogue, a stage);
 *   - its decode schedule reads the copy (family dot-i8-rp) and its prefill
 *     schedule is a packed or AMX int8 one or an AMX bf16 one (sched/family.h), whose
 *     packer reads the copy where there is one (cg_i8_copy_source: q8_0, q5_0, q4_k), unless its M
 *     is a constant of at most SCH_SMALL_M (an output head computing only the
 *     last row's logits), so that the prefill schedule never runs;
 *   - no bucket that runs still waits for a search (whose candidates may read B),
 *     and no search is coming (kiln_program_search_coming: the first-run
 *     search's warm-up and profile made the copies, then its winners read
 *     the weight in place from pages given back to the file, without huge
 *     pages: Llama-8B-shaped q8_0 decode 2.3-2.8 t/s where 3.9 from THP);
 * and the copy holds every row of B (whole groups of 8). Other kernels may
 * read B only as a gather's table (an embedding tied to the output head):
 * every load of B sits in the body of a LET (sched/loop.c's GATHER) and
 * its index uses that LET's variable, so a pass reads the rows its token
 * ids name, a few pages, and the rest of B's pages stay out of memory.
 * Any other generic read of B (a dense one) keeps B.
 *
 * Invariant: this only says the program's own code no longer reads B; the
 * owner's hook (kiln_graph_on_weight_release) must keep B readable, since a
 * later search, rebinding or the reference interpreter may read it.
 */
#include "release.h"

#include "program.h"
#include "emit_contract.h"
#include "emit_gemm_i8.h"
#include "family.h"

/* every load of buf in tree id is a gather's: inside the body of a LET
 * whose variable (the innermost one, var) its index uses */
static int gathered_only(const sch_program *p, int32_t id, int32_t buf, sym_id var, int in_let) {
    if (id < 0) return 1;
    const lx *x = &p->lx[id];
    if (x->kind == LX_LOAD && x->buf == buf) return in_let && sym_uses_var(p->g->syms, x->s, var);
    if (x->kind == LX_LET) return gathered_only(p, x->a, buf, var, in_let) && gathered_only(p, x->b, buf, x->s, 1);
    return gathered_only(p, x->a, buf, var, in_let) && gathered_only(p, x->b, buf, var, in_let);
}

/* a generic kernel that reads B only as a gather's table */
static int gathers_only(const sch_program *p, const sch_kernel *K, int32_t b) {
    if (K->contract || K->src_buf == b || !gathered_only(p, K->expr, b, 0, 0)) return 0;
    for (int32_t i = 0; i < K->nstages; i++)
        if (!gathered_only(p, K->stages[i].expr, b, 0, 0)) return 0;
    return 1;
}

/* whether the contraction's larger-M bucket can run: not when its M is a
 * constant of at most SCH_SMALL_M (an output head's one row of logits) */
static int big_runs(const sch_program *p, const sch_kernel *K) {
    int64_t m;
    if (K->contract->mdim < 0) return 0; /* M = 1 */
    return !(sym_is_const(p->g->syms, K->dim[K->contract->mdim], &m) && m <= SCH_SMALL_M);
}

/* the kernel reads B only as a contraction's weight, through the copy in
 * every bucket that runs */
static int reads_copy_only(const sch_program *p, const sch_kernel *K, int32_t b, cg_isa isa) {
    const sch_contract *c = K->contract;
    if (K->kind != SCH_K_REDUCE || !c || c->b_buf != b || c->a_buf == b || !cg_contract_emittable(p, K, isa)) return 0;
    for (int32_t i = 0; i < K->nstages; i++)
        if (sch_lx_reads(p, K->stages[i].expr, b)) return 0;
    kiln_dtype t = p->bufs[b].dtype;
    const sch_contract_sched *big = &c->sched[1];
    int packs_copy = cg_i8_copy_source(t) && (sch_family_is(big, SCH_FAM_PACKED_I8, t) || sch_family_is(big, SCH_FAM_AMX_I8, t) ||
                                              sch_family_is(big, SCH_FAM_AMX_BF16, t));
    return sch_family_is(&c->sched[0], SCH_FAM_DOT_I8_RP, t) && (packs_copy || !big_runs(p, K));
}

/* a search still to come for kernel k's bucket (exec.c's rule at a launch) */
static int pending(const kiln_program *prog, int32_t k, int bucket) {
    if (prog->tune.coming) return 1; /* a search not yet planned: every slot may change */
    if (prog->tune.has_pend && prog->tune.has_pend[2 * k + bucket]) return 1; /* a winner not yet emitted */
    return prog->tune.tuned && prog->tune.budget > prog->tune.spent && !prog->tune.tuned[2 * k + bucket];
}

int rt_copy_replaces(const kiln_program *prog, int32_t b, int copy_whole) {
    const sch_program *p = &prog->plan.sp;
    if (!copy_whole || !cg_i8_copy_source(p->bufs[b].dtype)) return 0;
    int readers = 0;
    for (int32_t k = 0; k < p->nkernels; k++) {
        const sch_kernel *K = &p->kernels[k];
        if (!sch_kernel_reads(p, K, b) || gathers_only(p, K, b)) continue;
        if (!reads_copy_only(p, K, b, prog->plan.isa) || pending(prog, k, 0) || (big_runs(p, K) && pending(prog, k, 1)))
            return 0;
        readers++;
    }
    return readers > 0;
}
