/* cpu_run.c — the CPU backend's program-level members: the plan compiled
 * to one shared object (cpu.c's host code), buffers in host memory, kernels
 * launched over the thread pool; the weight copies a contraction's
 * schedule reads; a kernel's schedule searched at its first launch.
 *
 * State (rt_cpu_state, p->dev): bufs holds, per program buffer, its host
 * address (the caller's memory for inputs and states, the arena for
 * intermediates and temps, the result's own memory), then bufs[nbufs] the
 * shared scratch, then each buffer's repacked copy (bufs[nbufs + 1 + b]),
 * then each buffer's pack copy (bufs[2 nbufs + 1 + b]); a NULL copy means
 * "none": the kernel reads B itself. Copies live in the store `copies`
 * (copies.h), which a model's two programs share (rt_cpu_share_copies: a
 * decode copy one made the other reads), and are kept while B stays bound
 * to the same weight (same pointer and binding).
 */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base.h"
#include "cc_split.h"
#include "config.h"
#include "contract_split.h"
#include "copies.h"
#include "dtype.h"
#include "family.h"
#include "program.h"
#include "release.h"
#include "search.h"
#include "tune_generic.h"
#include "../codegen/emit_contract.h"
#include "../codegen/emit_gemm_amx_bf16.h"
#include "../codegen/emit_gemm_i8.h"
#include "../codegen/emit_stream.h"

/* a contraction's A converted by its CG_KF_PREP launch and kept across runs:
 * valid while A is the weight bound to src by the binding numbered gen and
 * the kernel's code is fn of family fam (the scratch layout is the family's) */
typedef struct rt_prepped_a {
    void *data;
    size_t bytes;
    const void *src;
    uint64_t gen;
    rt_kernel_fn fn;
    const sch_family *fam;
} rt_prepped_a;

typedef struct rt_cpu_state {
    void **bufs;
    void *arena; /* the intermediates' arena (64-byte aligned; 2 MiB pages from 1 MiB up, cpu_place) */
    size_t arena_cap;
    void *scratch; /* bufs[nbufs]: A converted once for all threads (emit_gemm_amx_bf16.h); split stream tiles' partials */
    int no_stream_split; /* KILN_STREAM_SPLIT=0 (host.no_stream_split), read at cpu_prepare */
    int64_t *tile_n;     /* per kernel: the value axis of a stream kernel in the tile form (stream_tile.h), else 0 */
    size_t scratch_cap;
    rt_repacked *repacked; /* per buffer b: its repacked copy (runtime/repack.h) */
    rt_repacked *packed;   /* per buffer b: its pack copy (runtime/repack.h) */
    int pack_copies;       /* 0: KILN_PACK_COPY=0, prefill packs B on every launch */
    rt_copies *copies;     /* the copies' memory and the decode copies, shared with the model's other
                              program (rt_cpu_share_copies; copies.h) */
    size_t stream_min;     /* outputs of at least this many bytes get non-temporal stores */
    uint8_t *msplit;       /* per kernel: 1 when its contraction's code can be split along M
                              (cg_contract_msplit_steps, asked once here: it builds expressions) */
    rt_prepped_a *prepped; /* per kernel: its constant A as the CG_KF_PREP launch left it (const_a) */
    uint8_t *read_next;    /* per kernel: 1 when the kernel after it reads its output (never streamed) */
} rt_cpu_state;

static rt_cpu_state *cpu_state(const kiln_program *p) { return p->dev; }

void **rt_cpu_bufs(kiln_program *p) { return cpu_state(p)->bufs; }
size_t rt_cpu_repacked_bytes(const kiln_program *p, int32_t b) { return cpu_state(p)->repacked[b].bytes; }

char *rt_cpu_emit_source(const kiln_program *p) {
    cg_options co;
    co.isa = p->plan.isa;
    return p->plan.be->emit(&p->plan.sp, &co);
}

/* emit the program, compile it, look up every kernel function (replacing a
 * previous module, after a search changed schedules) */
kiln_status rt_cpu_emit_and_load(kiln_program *p, char *err, size_t errcap) {
    return rt_cpu_load_source(p, rt_cpu_emit_source(p), err, errcap);
}

kiln_status rt_cpu_load_source(kiln_program *p, char *source, char *err, size_t errcap) {
    const rt_backend *be = p->plan.be;
    rt_module *mod = NULL;
    rt_cc_next_is_program(); /* its build teaches the recompile estimate's rate */
    kiln_status s = be->compile(source, cg_isa_cflags(p->plan.isa), &mod, err, errcap);
    if (s != KILN_OK) {
        free(source);
        return s;
    }
    rt_kernel_fn *fns = kiln_xcalloc((size_t)p->plan.sp.nkernels + 1, sizeof *fns);
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        sch_kernel_kind kk = p->plan.sp.kernels[k].kind;
        if (kk == SCH_K_QUANTIZE || kk == SCH_K_COPY) continue;
        char name[32];
        snprintf(name, sizeof name, "kiln_k%d", k);
        void *f = be->symbol(mod, name);
        if (!f) {
            snprintf(err, errcap, "kernel %s missing from %s", name, be->module_path(mod));
            be->module_free(mod);
            free(fns);
            free(source);
            return KILN_ERR_IO;
        }
        /* dlsym returns data pointers; POSIX guarantees the conversion */
        memcpy(&fns[k], &f, sizeof f);
    }
    if (p->plan.mod) be->module_free(p->plan.mod);
    free(p->plan.fns);
    free(p->plan.source);
    p->plan.mod = mod;
    p->plan.fns = fns;
    p->plan.source = source;
    return KILN_OK;
}

/* every weight's pack copy let go (remade, unfilled, by the next prefill
 * launch): copies filled before a search changed schedules were read wrong
 * after it (gemma3-270m's greedy text became one token repeated until they
 * were dropped; their header's K, nr and strip count still matched, so the
 * new kernels read them) */
void rt_cpu_drop_pack_copies(kiln_program *p) {
    rt_cpu_state *cs = cpu_state(p);
    for (int32_t b = 0; b < p->plan.sp.nbufs; b++) {
        if (!cs->packed[b].data) continue;
        rt_arena_release(&cs->copies->arena, cs->packed[b].data);
        memset(&cs->packed[b], 0, sizeof cs->packed[b]);
        cs->bufs[2 * p->plan.sp.nbufs + 1 + b] = NULL;
    }
}


/* the scratch buffer, bufs[nbufs], grown to at least need bytes (64-byte
 * aligned): 1, or 0 when the memory is not to be had (it stays as it was) */
static int scratch_reserve(kiln_program *p, size_t need) {
    rt_cpu_state *cs = cpu_state(p);
    if (need > cs->scratch_cap) {
        void *b = NULL;
        if (posix_memalign(&b, 64, need) != 0) return 0;
        free(cs->scratch);
        cs->scratch = b;
        cs->scratch_cap = need;
    }
    cs->bufs[p->plan.sp.nbufs] = cs->scratch;
    return 1;
}

/* whether the threads of a launch share one conversion of A, with the
 * scratch buffer, bufs[nbufs], grown to hold it: the AMX bf16 form with
 * one batch point (every thread needs all of A), on more than one thread;
 * the packed and AMX int8 forms' quantised A, also on one (the scratch
 * then saves each call a fresh zeroed allocation: at K = 8192 and 512
 * rows, 4 MiB of page faults) */
static int shared_a(kiln_program *p, const sch_kernel *K, const sch_contract_sched *sc, int64_t nbatch, int64_t m,
                    int64_t rn, int serial) {
    if (nbatch != 1 || m <= SCH_SMALL_M || rn <= 0) return 0;
    kiln_dtype bt = p->plan.sp.bufs[K->contract->b_buf].dtype;
    /* the family's scratch: bf16 A shared only across threads; int8 A only
     * where the kernel's fast path runs (K in 32s) */
    const sch_family *f = sch_family_of(sc);
    if (!f || !f->scratch || (f->arith == SCH_ARITH_BF16 ? serial : !cg_i8_shared_a(bt, sc) || rn % 32 != 0)) return 0;
    if (!scratch_reserve(p, f->scratch(bt, m, rn))) return 0; /* each thread converts for itself */
    return 1;
}

/* buffer b's binding when it is a weight (kiln_bind_weight), else NULL */
static const input_binding *weight_binding(const kiln_program *p, int32_t b) {
    if (p->plan.sp.bufs[b].kind != SCH_BUF_INPUT || p->run.bind_at[b] < 0 || p->run.bind_at[b] >= p->plan.g->ninputs) return NULL;
    const input_binding *bind = &p->plan.g->inputs[p->run.bind_at[b]];
    return bind->constant ? bind : NULL;
}

/* the CG_KF_PREP launch: A converted into bufs[nbufs] over its 16-row
 * groups (and two zeroed), each thread a share (emit_gemm_amx_bf16.h) */
static int64_t launch_prep_a(kiln_program *p, rt_kernel_fn fn, int64_t m, int serial) {
    return p->plan.be->launch(p->plan.pool, fn, cpu_state(p)->bufs, p->run.values, (m + 15) / 16 + 2, 1, CG_KF_PREP, serial);
}

/* A that is a weight (a convolution's filters, an ONNX Gemm's matrix) is
 * converted by the CG_KF_PREP launch once and kept (rt_prepped_a), not on
 * every run: SqueezeNet converted its 1.2 M filter weights to bf16 tiles
 * on every run. Returns 1 when bufs[nbufs] holds A converted (the caller
 * launches with CG_KF_SHARED), 0 when A is not a weight of one batch
 * point or the family keeps no scratch; -1 (the launch's result in *r)
 * when the conversion failed. At 1 thread too: without it each call converts
 * A for itself. */
static int const_a(kiln_program *p, int32_t k, rt_kernel_fn fn, const sch_contract_sched *sc, int64_t nbatch, int64_t m,
                   int64_t rn, int serial, int64_t *r) {
    rt_cpu_state *cs = cpu_state(p);
    const sch_kernel *K = &p->plan.sp.kernels[k];
    const input_binding *bind = weight_binding(p, K->contract->a_buf);
    const sch_family *f = sch_family_of(sc);
    if (!bind || nbatch != 1 || m <= SCH_SMALL_M || rn <= 0 || !f || !f->scratch || f->arith != SCH_ARITH_BF16) return 0;
    rt_prepped_a *a = &cs->prepped[k];
    size_t need = f->scratch(p->plan.sp.bufs[K->contract->b_buf].dtype, m, rn);
    if (a->data && a->src == bind->data && a->gen == bind->gen && a->fn == fn && a->fam == f && a->bytes == need) {
        cs->bufs[p->plan.sp.nbufs] = a->data;
        return 1;
    }
    free(a->data);
    memset(a, 0, sizeof *a);
    if (posix_memalign(&a->data, 64, need) != 0) {
        a->data = NULL;
        return 0; /* each call converts A for itself */
    }
    cs->bufs[p->plan.sp.nbufs] = a->data;
    *r = launch_prep_a(p, fn, m, serial);
    if (*r != 0) {
        free(a->data);
        a->data = NULL;
        return -1;
    }
    a->bytes = need;
    a->src = bind->data;
    a->gen = bind->gen;
    a->fn = fn;
    a->fam = f;
    return 1;
}

/* rt_repack_x8_ex's consumed: the owner's hook on part of the weight */
static void give_back(void *ctx, const void *part, size_t n) {
    const kiln_graph *u = ctx;
    u->weight_release(u->weight_release_ctx, part, n);
}

/* B released (its owner told): its pack copy, if the prefill made one
 * first, goes too */
static void mark_released(kiln_program *p, int32_t b) {
    rt_cpu_state *cs = cpu_state(p);
    cs->repacked[b].released = 1;
    rt_repacked *pk = &cs->packed[b];
    if (!pk->data) return;
    rt_arena_release(&cs->copies->arena, pk->data);
    memset(pk, 0, sizeof *pk);
    cs->bufs[2 * p->plan.sp.nbufs + 1 + b] = NULL;
}

/* B's repacked copy for kernel k's decode schedules (rp=1), kept while B
 * stays bound to the same weight (kiln_bind_weight: the same pointer and
 * binding); dropped when B is bound as a plain input, whose contents may
 * change between runs, or when `want` is 0. The kernel reads it through
 * bufs[nbufs + 1 + b] and falls back to B itself where it is NULL. */
static void repack_b(kiln_program *p, int32_t k, int64_t rn, int want) {
    rt_cpu_state *cs = cpu_state(p);
    const sch_contract *c = p->plan.sp.kernels[k].contract;
    int32_t b = c->b_buf;
    rt_repacked *r = &cs->repacked[b];
    const sch_buf *B = &p->plan.sp.bufs[b];
    const input_binding *bind = want && rt_repack_x8_ok(B->dtype) ? weight_binding(p, b) : NULL;
    if (bind && r->data && r->src == bind->data && r->gen == bind->gen && r->k == rn) return;
    rt_copies_put(cs->copies, r->data);
    memset(r, 0, sizeof *r);
    cs->bufs[p->plan.sp.nbufs + 1 + b] = NULL;
    if (!bind) return;
    /* the model's other program made this copy already: read it */
    void *have = rt_copies_find(cs->copies, B->dtype, bind->data, bind->gen, p->run.bytes[b], rn);
    if (have) {
        r->data = have;
        r->src = bind->data;
        r->gen = bind->gen;
        r->k = rn;
        r->bytes = rt_repack_x8_size(B->dtype, p->run.bytes[b], rn);
        r->checked = -1;
        cs->bufs[p->plan.sp.nbufs + 1 + b] = have;
        return;
    }
    /* a copy that will replace B (release.c) gives B's pages back as it
     * reads them for the last time, so B and its copy are never both whole
     * in memory */
    const kiln_graph *u = p->plan.user;
    int replaces = u->weight_release && rt_copy_replaces(p, b, rt_repack_x8_whole(B->dtype, p->run.bytes[b], rn));
    r->data = rt_repack_x8_ex(B->dtype, bind->data, p->run.bytes[b], rn, &cs->copies->arena,
                              replaces ? give_back : NULL, (void *)u); /* NULL: not repackable, or no memory */
    rt_copies_add(cs->copies, r->data, B->dtype, bind->data, bind->gen, p->run.bytes[b], rn);
    r->src = bind->data;
    r->gen = bind->gen;
    r->k = rn;
    r->bytes = r->data ? rt_repack_x8_size(B->dtype, p->run.bytes[b], rn) : 0;
    r->checked = -1;
    cs->bufs[p->plan.sp.nbufs + 1 + b] = r->data;
    if (r->data && replaces) mark_released(p, b);
}

/* when B's copy replaces B for every kernel (release.c), the weight's owner
 * is told once per binding (kiln_graph_on_weight_release), and may give its
 * pages back: resident weights then stay near the file's size instead of
 * twice it. Asked again only after a search moved on (its spent seconds or
 * budget changed: a search that ends sets the budget to what it spent). */
static void release_if_replaced(kiln_program *p, int32_t b) {
    rt_cpu_state *cs = cpu_state(p);
    rt_repacked *r = &cs->repacked[b];
    const kiln_graph *u = p->plan.user;
    if (!r->data || r->released || !u->weight_release) return;
    if (r->checked == p->tune.spent && r->checked_budget == p->tune.budget && r->checked_coming == p->tune.coming)
        return; /* no search moved since */
    const input_binding *bind = weight_binding(p, b);
    kiln_dtype t = p->plan.sp.bufs[b].dtype;
    if (!bind || bind->data != r->src || !rt_copy_replaces(p, b, rt_repack_x8_whole(t, p->run.bytes[b], r->k))) {
        r->checked = p->tune.spent;
        r->checked_budget = p->tune.budget;
        r->checked_coming = p->tune.coming;
        return;
    }
    mark_released(p, b);
    u->weight_release(u->weight_release_ctx, bind->data, bind->bytes);
}

/* B's pack copy (runtime/repack.h) for a launch of kernel k's packed int8
 * schedule sc over nbatch batch points of n rows of B: kept while B stays
 * bound to the same weight; made, unfilled, when B has none, and filled by
 * the launch (pack_filled). A copy made for another K or nr stays (the
 * kernel then packs for itself): two kernels never rebuild it in turn.
 * Returns whether the launch fills it. */
static int pack_b(kiln_program *p, int32_t k, const sch_contract_sched *sc, int64_t rn, int64_t nbatch, int64_t n) {
    rt_cpu_state *cs = cpu_state(p);
    int32_t b = p->plan.sp.kernels[k].contract->b_buf;
    rt_repacked *r = &cs->packed[b];
    const input_binding *bind = weight_binding(p, b);
    kiln_dtype t = p->plan.sp.bufs[b].dtype;
    if (r->data && (!bind || r->src != bind->data || r->gen != bind->gen)) { /* B rebound */
        rt_arena_release(&cs->copies->arena, r->data);
        memset(r, 0, sizeof *r);
        cs->bufs[2 * p->plan.sp.nbufs + 1 + b] = NULL;
    }
    /* a weight whose copy replaced it gets no pack copy: its prefill packs
     * from the copy (cg_i8_copy_source), and the pack copy would be a
     * second copy of the weight, larger than the file's */
    const sch_family *f = sch_family_of(sc);
    if (r->data || !bind || !cs->pack_copies || cs->repacked[b].released || !f || !f->pack_copy || !f->dtype_ok(t) ||
        rn <= 0 || rn % 32 != 0 || sc->nr <= 0)
        return 0;
    int64_t strips = nbatch * ((n + sc->nr - 1) / sc->nr);
    size_t bytes = SCH_PACK_HEADER + (size_t)strips * SCH_PACK_STRIP(sc->nr, rn, cg_i8_kb(t));
    /* pack copies (prefill) take at most half of the copies' memory: decode's
     * repacked copies, read every token, get the rest */
    rt_arena *a = &cs->copies->arena;
    if (a->limit && a->held + bytes > a->limit / 2) return 0;
    int64_t *h = rt_arena_alloc(a, bytes);
    if (!h) return 0; /* no memory: the kernel packs for itself */
    memset(h, 0, SCH_PACK_HEADER);
    h[0] = rn;
    h[1] = sc->nr;
    h[2] = strips;
    r->data = h;
    r->src = bind->data;
    r->gen = bind->gen;
    r->k = rn;
    r->bytes = bytes;
    cs->bufs[2 * p->plan.sp.nbufs + 1 + b] = h;
    return 1;
}

/* after the launch that was to fill B's pack copy: filled if it ran, else
 * dropped (a failed launch may have filled part of it) */
static void pack_filled(kiln_program *p, int32_t b, int ok) {
    rt_cpu_state *cs = cpu_state(p);
    rt_repacked *r = &cs->packed[b];
    if (!r->data) return;
    if (ok) {
        ((int64_t *)r->data)[3] = 1;
        return;
    }
    rt_arena_release(&cs->copies->arena, r->data);
    memset(r, 0, sizeof *r);
    cs->bufs[2 * p->plan.sp.nbufs + 1 + b] = NULL;
}

/* whether some contraction reading buffer b has a decode schedule on its
 * repacked copy, or is about to search for one: kernel k's own schedule
 * and search first (every decode launch asks), the others only while a
 * copy exists that k does not read */
static int reads_copy(const kiln_program *p, int32_t k) {
    if (p->tune.has_pend && p->tune.has_pend[k * 2] && p->tune.pend[k * 2].rp) return 1;
    return p->plan.sp.kernels[k].contract->sched[0].rp || (p->tune.budget > p->tune.spent && !p->tune.tuned[k * 2]);
}

static int repack_wanted(const kiln_program *p, int32_t k0, int32_t b) {
    rt_cpu_state *cs = cpu_state(p);
    if (reads_copy(p, k0)) return 1;
    if (!cs->repacked[b].data) return 0;
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        const sch_contract *c = p->plan.sp.kernels[k].contract;
        if (p->plan.sp.kernels[k].kind == SCH_K_REDUCE && c && c->b_buf == b && reads_copy(p, k)) return 1;
    }
    return 0;
}

/* how many pieces a contraction launch's items go in, claimed in order by
 * the threads (rt_pool_run_claimed), or 1 for one fixed share each: a
 * decode step's matrix-vector products (M <= 4, no shared conversion of A)
 * are 4 pieces per thread, so that a thread that starts late (a busy core:
 * on a loaded 2-core VM the worker started 0.4 ms after the launch, and
 * the caller waited 136 of a 220 ms 8B step for it) takes fewer instead of
 * the step waiting for its half. Each piece quantises A's row again (a
 * call of the kernel; a few microseconds at K = 14336) and every item's
 * outputs are its own, the same on any thread. */
static int claimed_pieces(int bucket, int64_t flags, int serial, int64_t items, int nthreads) {
    if (bucket != 0 || (flags & ~(int64_t)CG_KF_DECODE_ROWS) || serial || nthreads < 2) return 1;
    int64_t pieces = 4 * (int64_t)nthreads;
    return (int)(items < pieces ? items : pieces);
}

/* the bucket whose schedule a launch of m rows runs (0: decode, sched[0]; 1:
 * prefill), and *flags' CG_KF_DECODE_ROWS: past SCH_SMALL_M rows, up to the
 * program's decode_tile_rows (SCH_DECODE_TILE_ROWS), the decode bucket where
 * its compiled schedule is the int8 tiles on B's repacked copy. Those read
 * each 8-row weight group once for all the rows, 4 rows a tile call, each
 * row's sums the 1-row tile's bit for bit, with no per-launch packing: on
 * gemma3-270m (Intel Xeon, AMX, 2 threads) a 5-row pass took 27 ms in the
 * prefill bucket's bf16 tiles against 11 ms for 4 rows in the decode tiles.
 * Nothing searches the decode bucket at these rows (it is searched at 1). */
static int contract_bucket(const kiln_program *p, const sch_contract *c, int64_t m, int64_t *flags) {
    if (m <= SCH_SMALL_M) return 0;
    int most = p->plan.opt.decode_tile_rows ? p->plan.opt.decode_tile_rows : SCH_DECODE_TILE_ROWS;
    if (m > most || !sch_family_is(&c->sched[0], SCH_FAM_DOT_I8_RP, p->plan.sp.bufs[c->b_buf].dtype)) return 1;
    *flags |= CG_KF_DECODE_ROWS;
    return 0;
}

static kiln_status launch_generic(kiln_program *p, int32_t k, const rt_extent *e, int nthreads);

/* contraction k's prologue, the pack of its B (sched/epilogue.c), as a
 * kernel of its own */
static kiln_status launch_pack(kiln_program *p, int32_t k, int nthreads) {
    rt_extent pe;
    kiln_status s = rt_kernel_extent(p, k - 1, &pe);
    return s == KILN_OK ? launch_generic(p, k - 1, &pe, nthreads) : s;
}

/* a contraction kernel's work items: (batch point, run of nc rows of B), see
 * emit_contract.c */
static kiln_status launch_contract(kiln_program *p, int32_t k, const rt_extent *e, int nthreads) {
    rt_cpu_state *cs = cpu_state(p);
    const sch_kernel *K = &p->plan.sp.kernels[k];
    const sch_contract *c = K->contract;
    int64_t nbatch = 1, m = 1, n = 1, rn = 0;
    for (int d = 0; d < K->ndim; d++) {
        if (d == c->mdim) m = e->dim[d];
        else if (d == c->ndim) n = e->dim[d];
        else nbatch *= e->dim[d];
    }
    kiln_status s = rt_run_eval(p, K->rdim, &rn, "a contraction");
    if (s != KILN_OK) return s;
    int64_t flags = 0, r = 0;
    int bucket = contract_bucket(p, c, m, &flags);
    rt_kernel_fn fn = p->plan.fns[k];
    rt_module *mods[2] = {NULL, NULL};
    /* the decode copy is made at the first launch of either bucket: made by a
     * prefill, it lets that prefill pack from it (cg_i8_copy_source) and the
     * weight go at once, instead of a pack copy of its own beside it */
    int rp_b = rt_repack_x8_ok(p->plan.sp.bufs[c->b_buf].dtype);
    if (rp_b) repack_b(p, k, rn, repack_wanted(p, k, c->b_buf));
    /* searched at its own rows only: a decode bucket's search times 1 row */
    int searching = p->tune.budget > p->tune.spent && !p->tune.tuned[k * 2 + bucket] && !(flags & CG_KF_DECODE_ROWS);
    /* B's pack runs inside the plan's items (sched/epilogue.c); a search's
     * candidates, emitted without it, read B packed beforehand */
    int b_ready = 0;
    if (searching && K->prologue) {
        kiln_status ps = launch_pack(p, k, nthreads);
        if (ps != KILN_OK) return ps;
        b_ready = 1;
    }
    if (searching) {
        rt_kernel_fn won = NULL;
        rt_tune_contract_now(p, k, bucket, &won, mods);
        if (won) fn = won;
        if (rp_b) repack_b(p, k, rn, repack_wanted(p, k, c->b_buf)); /* the copy goes if no schedule reads it */
    }
    /* the schedule of the code that runs: a winner just found (its own
     * module) waits in pend under a plan */
    const sch_contract_sched *sc = fn != p->plan.fns[k] && p->tune.has_pend && p->tune.has_pend[k * 2 + bucket]
                                       ? &p->tune.pend[k * 2 + bucket]
                                       : &c->sched[bucket];
    if (rp_b) release_if_replaced(p, c->b_buf);
    int fills = bucket == 1 && pack_b(p, k, sc, rn, nbatch, n);
    if (sc->serial) nthreads = 1; /* the schedule keeps the kernel on this thread */
    int64_t chunk = sch_contract_runs(sc, n, nbatch, nthreads); /* runs per batch point */
    int64_t items = nbatch * chunk;
    int serial = nthreads <= 1 || nbatch * m * n * (rn > 0 ? rn : 1) < 32768;
    double t0 = p->prof.secs ? kiln_now_s() : 0;
    int ca = bucket == 1 ? const_a(p, k, fn, sc, nbatch, m, rn, serial, &r) : 0;
    if (ca > 0) flags |= CG_KF_SHARED;
    else if (ca == 0 && bucket == 1 && shared_a(p, K, sc, nbatch, m, rn, serial)) {
        /* A converted once, each thread a share of its 16-row groups, then
         * read by every thread's items (emit_gemm_amx_bf16.h) */
        r = launch_prep_a(p, fn, m, serial);
        flags |= CG_KF_SHARED;
    }
    /* too few items for the threads: cut M as well (sched/contract_split.h) */
    int64_t mparts = 1;
    if (!serial && !flags && bucket == 1 && cs->msplit && cs->msplit[k] && cg_contract_msplit_family(&p->plan.sp, K, sc))
        mparts = sch_contract_mparts(sc, m, n, nbatch, chunk, nthreads);
    if (mparts > 1) {
        items *= mparts;
        flags |= mparts << SCH_MPARTS_SHIFT;
        p->msplit_launches++;
        /* the parts of M share their columns: B packed once, before */
        if (K->prologue && !b_ready) {
            kiln_status ps = launch_pack(p, k, nthreads);
            if (ps != KILN_OK) return ps;
            b_ready = 1;
        }
    }
    if (b_ready) flags |= CG_KF_B_READY;
    if (r == 0 && claimed_pieces(bucket, flags, serial, items, nthreads) > 1)
        r = rt_cpu_launch_claimed(p->plan.pool, fn, cs->bufs, p->run.values, items, chunk, flags,
                                  claimed_pieces(bucket, flags, serial, items, nthreads));
    else if (r == 0) r = p->plan.be->launch(p->plan.pool, fn, cs->bufs, p->run.values, items, chunk, flags, serial);
    /* code from a search's module has no epilogue (emit_contract.c): it
     * runs as a kernel of its own */
    if (r == 0 && K->epilogue > 0 && fn != p->plan.fns[k] && launch_generic(p, K->epilogue, e, nthreads) != KILN_OK) r = 1;
    if (fills) pack_filled(p, c->b_buf, r == 0);
    if (p->prof.secs) {
        p->prof.secs[k] += kiln_now_s() - t0;
        p->prof.bytes[k] += (double)(p->run.bytes[c->a_buf] + p->run.bytes[c->b_buf] + p->run.bytes[K->out_buf]);
        p->prof.flops[k] += 2.0 * (double)m * (double)n * (double)nbatch * (double)rn;
        p->prof.arith[k] = (uint8_t)sc->arith;
    }
    for (int i = 0; i < 2; i++)
        if (mods[i]) p->plan.be->module_free(mods[i]);
    return r == 0 ? KILN_OK : KILN_ERR_RANGE;
}

/* how a generic kernel's items split over the threads: rows, or for a few
 * long rows chunks of a row (fused per-row reductions are recomputed by
 * every chunk of a row: split only when that is cheap next to the row's
 * own work); serial when small or a non-disjoint scatter */
static kiln_status split_work(kiln_program *p, const sch_kernel *K, const rt_extent *e, int nthreads, int64_t *chunk,
                              int64_t *items, int *serial) {
    int64_t outer = e->outer, inner = e->inner, work = outer * inner;
    if (K->kind == SCH_K_REDUCE) {
        int64_t rn = 0;
        kiln_status s = rt_run_eval(p, K->rdim, &rn, "a reduction");
        if (s != KILN_OK) return s;
        work *= rn > 0 ? rn : 1;
    }
    int64_t stage_work = 0;
    for (int32_t i = 0; i < K->nstages; i++) {
        if (!K->stages[i].row) continue;
        int64_t rn = 0;
        kiln_status s = rt_run_eval(p, K->stages[i].rdim, &rn, "a fused reduction");
        if (s != KILN_OK) return s;
        stage_work += rn > 0 ? rn : 0;
    }
    work += outer * stage_work;
    *chunk = 0;
    *items = outer;
    *serial = (K->kind == SCH_K_SCATTER && !K->disjoint) || nthreads <= 1 || work < 32768;
    if (K->kind == SCH_K_STREAM) inner = 1; /* a stream kernel's items are whole rows (no chunks) */
    if (!*serial && outer < 4 * (int64_t)nthreads && inner >= 2048) {
        int64_t per_row = (4 * (int64_t)nthreads + outer - 1) / outer;
        if (stage_work * per_row * 4 <= work / outer) {
            *chunk = (inner + per_row - 1) / per_row;
            *chunk = (*chunk + 63) / 64 * 64;
            *items = outer * ((inner + *chunk - 1) / *chunk);
        }
    }
    if (K->ndim == 0) *items = 1;
    return KILN_OK;
}

/* a stream kernel in the tile form on more than one thread runs in split
 * mode (stream_tile.h): the keys in splits shared by the threads (a decode
 * step's few rows no longer on one thread), the partials in the scratch
 * bufs[nbufs] with one counter per row zeroed here. chunk then holds the
 * split count S, items S x rows; 1 when it does. KILN_STREAM_SPLIT=0, or a
 * scratch past its bound or not to be had: one item per row. */
static int stream_split(kiln_program *p, int32_t k, const rt_extent *e, int nthreads, int64_t *chunk,
                        int64_t *items) {
    rt_cpu_state *cs = cpu_state(p);
    int64_t S = sch_stream_tile_splits(e->outer, nthreads);
    if (cs->no_stream_split || !cs->tile_n[k] || S < 2) return 0;
    size_t need = sch_stream_tile_scratch(e->outer, S, cs->tile_n[k]);
    if (need > SCH_STREAM_SPLIT_MAX_SCRATCH || !scratch_reserve(p, need)) return 0;
    memset(cs->scratch, 0, (size_t)e->outer * sizeof(int));
    *chunk = S;
    *items = e->outer * S;
    return 1;
}

/* a generic (MAP, REDUCE, SCATTER) kernel; its schedule searched at its
 * first launch when the budget allows (tune_generic.c) */
static kiln_status launch_generic(kiln_program *p, int32_t k, const rt_extent *e, int nthreads) {
    const sch_kernel *K = &p->plan.sp.kernels[k];
    rt_cpu_state *cs = cpu_state(p);
    int64_t chunk = 0, items = 0;
    int serial = 0;
    kiln_status s = split_work(p, K, e, nthreads, &chunk, &items, &serial);
    if (s != KILN_OK) return s;
    int64_t flags = p->run.bytes[K->out_buf] >= cs->stream_min && !cs->read_next[k] ? 1 : 0;
    if (K->kind == SCH_K_STREAM && p->stream_bf16_run) flags |= CG_KF_BF16; /* the streaming-bf16 form */
    rt_kernel_fn gfn = p->plan.fns[k];
    rt_gtune_result gres;
    memset(&gres, 0, sizeof gres);
    rt_tuner *t = &p->tune;
    if (t->budget > t->spent && rt_gtune_wanted(t->gtune, k)) {
        double left = t->budget - t->spent, share = rt_tune_share(p, k);
        rt_gtune_job gj = {&p->plan.sp, k,        p->plan.be, p->plan.pool, p->plan.isa, cs->bufs,
                           p->run.values, p->run.bytes, e->outer, e->inner,  chunk,       items,
                           flags,        serial,   t->fingerprint, left < share ? left : share, 0};
        char gerr[512];
        if (rt_gtune_kernel(t->gtune, &gj, &gres, gerr, sizeof gerr) != KILN_OK)
            fprintf(stderr, "kiln tune: kernel %d: search failed (%s); keeping its schedule\n", (int)k, gerr);
        t->spent += gres.seconds;
        t->measurements += gres.tried;
        if (gres.tried) t->plan_searched++;
        if (gres.tried) rt_tune_progress(p);
        if (gres.changed) t->retune = 1;
        if (gres.fn) gfn = gres.fn;
    }
    rt_gtune_split(K, e->outer, e->inner, serial, &chunk, &items);
    /* (a decode step's 4 rows x 4000 keys count as little work to
     * split_work, which knows nothing of the d-long products per key) */
    if (K->kind == SCH_K_STREAM && stream_split(p, k, e, nthreads, &chunk, &items)) serial = 0;
    /* the search found it faster on this thread alone (a record of an older
     * search may say so of a larger kernel than the space now allows) */
    if (K->gsched.serial && rt_profile_kernel_bytes(p, K, K->ndim == 0 ? 1 : e->outer * e->inner) <= SCH_SERIAL_MAX_BYTES)
        serial = 1;
    double t0 = p->prof.secs ? kiln_now_s() : 0;
    int r = p->plan.be->launch(p->plan.pool, gfn, cs->bufs, p->run.values, items, chunk, flags, serial);
    if (gres.mod) p->plan.be->module_free(gres.mod);
    if (p->prof.secs) {
        p->prof.secs[k] += kiln_now_s() - t0;
        p->prof.bytes[k] += rt_profile_kernel_bytes(p, K, K->ndim == 0 ? 1 : e->outer * e->inner);
    }
    return r == 0 ? KILN_OK : KILN_ERR_RANGE;
}

/* ---- the program-level members ---- */

static kiln_status cpu_run_kernel(kiln_program *p, int32_t k, const rt_extent *e, char *err, size_t errcap) {
    (void)err, (void)errcap;
    const sch_kernel *K = &p->plan.sp.kernels[k];
    int nthreads = rt_pool_threads(p->plan.pool);
    /* an epilogue or a prologue runs inside its contraction's work items
     * (sched/epilogue.c) */
    if (K->in_host && cg_contract_emittable(&p->plan.sp, &p->plan.sp.kernels[k - 1], p->plan.isa)) return KILN_OK;
    if (K->in_next && cg_contract_emittable(&p->plan.sp, &p->plan.sp.kernels[k + 1], p->plan.isa)) return KILN_OK;
    if (cg_contract_emittable(&p->plan.sp, K, p->plan.isa)) return launch_contract(p, k, e, nthreads);
    return launch_generic(p, k, e, nthreads);
}

/* the weights' copies (repacked for decode, packed for prefill) may take
 * half the memory available when the program is made (the weights are
 * bound by then): a Llama-8B-shaped q8_0 model at 2 threads reached 21.9 GB
 * resident for its 7.6 GB file, the copies of every weight made twice, on a
 * 24 GB machine. Past it a copy is not made and the kernel reads B itself.
 * 0 (no limit) when /proc/meminfo cannot be read. */
static size_t copies_limit(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (size_t)(kb * 1024ull / 2);
}

static kiln_status cpu_prepare(kiln_program *p, const kiln_compile_options *o, char *err, size_t errcap) {
    int32_t nb = p->plan.sp.nbufs + 1;
    rt_cpu_state *cs = kiln_xcalloc(1, sizeof *cs);
    p->dev = cs;
    p->plan.isa = o->vector < 0 ? CG_ISA_SCALAR : p->plan.be->isa();
    p->plan.pool = rt_pool_new(o->threads);
    {
        kiln_env env;
        kiln_env_read(&env);
        cs->no_stream_split = env.host.no_stream_split;
    }
    rt_tune_apply_db(p);
    kiln_status s = rt_cpu_emit_and_load(p, err, errcap);
    if (s != KILN_OK) return s;
    /* bufs: the program's buffers, the scratch, then each buffer's repacked
     * copy, then each buffer's pack copy */
    cs->repacked = kiln_xcalloc((size_t)nb, sizeof *cs->repacked);
    cs->packed = kiln_xcalloc((size_t)nb, sizeof *cs->packed);
    cs->bufs = kiln_xcalloc((size_t)(nb + 2 * p->plan.sp.nbufs), sizeof *cs->bufs);
    cs->pack_copies = !p->plan.opt.no_pack_copy;
    cs->msplit = kiln_xcalloc((size_t)p->plan.sp.nkernels + 1, 1);
    cs->prepped = kiln_xcalloc((size_t)p->plan.sp.nkernels + 1, sizeof *cs->prepped);
    cs->tile_n = kiln_xcalloc((size_t)p->plan.sp.nkernels + 1, sizeof *cs->tile_n);
    for (int32_t k = 0; k < p->plan.sp.nkernels; k++) {
        cs->msplit[k] = (uint8_t)cg_contract_msplit_steps(&p->plan.sp, &p->plan.sp.kernels[k], NULL, NULL);
        sch_stream_tile t;
        if (sch_stream_tile_of(&p->plan.sp, &p->plan.sp.kernels[k], &t)) cs->tile_n[k] = t.n;
    }
    cs->copies = rt_copies_new(copies_limit());
    /* beyond the caches' reach, stores that bypass them save the read of
     * every written line (measured on the 2-core VM: 16 MiB copy 9 -> 26
     * GB/s, 256 MiB 6.7 -> 10.8 GB/s; equal at 4 MiB) */
    cs->stream_min = (size_t)8 << 20;
    if (p->plan.opt.stream_min) cs->stream_min = p->plan.opt.stream_min < 0 ? 0 : (size_t)p->plan.opt.stream_min;
    /* ... unless the next kernel reads them at once (with the default
     * threshold): a convolution's pack went to memory and its contraction
     * read it back (DenseNet-121 at 2 threads, Intel Xeon with AMX, 14.5
     * MB packs: 36.6 ms a run with those stores, 29.8 without) */
    cs->read_next = kiln_xcalloc((size_t)p->plan.sp.nkernels + 1, 1);
    for (int32_t k = 0; k + 1 < p->plan.sp.nkernels && !p->plan.opt.stream_min; k++)
        cs->read_next[k] = (uint8_t)sch_kernel_reads(&p->plan.sp, &p->plan.sp.kernels[k + 1], p->plan.sp.kernels[k].out_buf);
    return KILN_OK;
}

static void cpu_release(kiln_program *p) {
    rt_cpu_state *cs = cpu_state(p);
    if (p->plan.mod) p->plan.be->module_free(p->plan.mod);
    p->plan.mod = NULL;
    if (!cs) return;
    free(cs->arena);
    free(cs->read_next);
    free(cs->bufs);
    free(cs->scratch);
    /* this program's copies: every one at once when no other program holds
     * the store, else one by one (the other program's stay) */
    if (cs->copies && cs->copies->refs > 1) {
        for (int32_t b = 0; b < p->plan.sp.nbufs && cs->repacked; b++) {
            rt_copies_put(cs->copies, cs->repacked[b].data);
            rt_arena_release(&cs->copies->arena, cs->packed[b].data);
        }
    }
    rt_copies_drop(cs->copies);
    free(cs->repacked);
    free(cs->packed);
    free(cs->msplit);
    free(cs->tile_n);
    for (int32_t k = 0; cs->prepped && k < p->plan.sp.nkernels; k++) free(cs->prepped[k].data);
    free(cs->prepped);
    free(cs);
    p->dev = NULL;
}

/* inputs, states and results: the caller's memory, in place */
static kiln_status cpu_bind(kiln_program *p, int32_t b, const void *host, size_t bytes, char *err, size_t errcap) {
    rt_cpu_state *cs = cpu_state(p);
    (void)bytes, (void)err, (void)errcap;
    cs->bufs[b] = (void *)host;
    return KILN_OK;
}

static kiln_status cpu_result(kiln_program *p, int32_t b, void *host, char *err, size_t errcap) {
    rt_cpu_state *cs = cpu_state(p);
    (void)err, (void)errcap;
    cs->bufs[b] = host;
    return KILN_OK;
}

static kiln_status cpu_place(kiln_program *p, size_t need, char *err, size_t errcap) {
    rt_cpu_state *cs = cpu_state(p);
    const sch_program *sp = &p->plan.sp;
    if (need > cs->arena_cap) {
        free(cs->arena);
        cs->arena = NULL;
        cs->arena_cap = 0;
        /* an arena of a megabyte or more in 2 MiB pages (a hint): in 4 KiB
         * pages a CNN's activations ran at one of two speeds, by process
         * (SqueezeNet at 2 threads, Intel Xeon: 3.2 or 4.0 ms a run, the
         * pages' physical placement deciding which cache sets its
         * buffers share), and every kernel paid a TLB miss per 4 KiB */
        const size_t huge = (size_t)2 << 20;
        int big = need >= ((size_t)1 << 20);
        size_t cap = big ? (need + huge - 1) / huge * huge : need ? need : 64;
        if (posix_memalign(&cs->arena, big ? huge : 64, cap) != 0) {
            cs->arena = NULL;
            snprintf(err, errcap, "cannot allocate an arena of %zu bytes", need);
            return KILN_ERR_NOMEM;
        }
#ifdef MADV_HUGEPAGE
        if (big) (void)madvise(cs->arena, cap, MADV_HUGEPAGE);
#endif
        cs->arena_cap = cap;
    }
    for (int32_t b = 0; b < sp->nbufs; b++) {
        sch_buf_kind kk = sp->bufs[b].kind;
        if (kk == SCH_BUF_NODE || kk == SCH_BUF_TEMP) cs->bufs[b] = (char *)cs->arena + p->run.live[b].offset;
    }
    return KILN_OK;
}

static kiln_status cpu_begin(kiln_program *p, char *err, size_t errcap) {
    (void)p, (void)err, (void)errcap;
    return KILN_OK;
}

static kiln_status cpu_copy(kiln_program *p, int32_t dst, int32_t src, size_t bytes, char *err, size_t errcap) {
    rt_cpu_state *cs = cpu_state(p);
    (void)err, (void)errcap;
    void **bufs = cs->bufs;
    if (bytes && bufs[dst] != bufs[src]) memmove(bufs[dst], bufs[src], bytes);
    return KILN_OK;
}

/* host memory: a host step works on the buffers themselves */
static kiln_status cpu_host_step(kiln_program *p, int32_t b, int to_host, void *host, void **out, char *err,
                                 size_t errcap) {
    rt_cpu_state *cs = cpu_state(p);
    (void)to_host, (void)host, (void)err, (void)errcap;
    *out = cs->bufs[b];
    return KILN_OK;
}

/* launches return when their kernel is done: nothing to wait for */
static kiln_status cpu_sync(kiln_program *p, char *err, size_t errcap) {
    (void)p, (void)err, (void)errcap;
    return KILN_OK;
}

static kiln_status cpu_fetch(kiln_program *p, int32_t b, void *host, size_t bytes, char *err, size_t errcap) {
    (void)p, (void)b, (void)host, (void)bytes, (void)err, (void)errcap;
    return KILN_OK;
}

static int cpu_supports(const sch_program *p, int32_t kernel) {
    (void)p, (void)kernel;
    return 1;
}

static char *cpu_fingerprint(const rt_backend *be) {
    (void)be;
    return rt_cpu_fingerprint();
}

void rt_cpu_share_copies(kiln_program *p, kiln_program *other) {
    if (!p || !other || p->plan.be != &rt_cpu_backend || other->plan.be != &rt_cpu_backend) return;
    rt_cpu_state *a = cpu_state(p), *o = cpu_state(other);
    if (!a || !o || !a->copies || !o->copies || a->copies == o->copies) return;
    for (int32_t b = 0; b < other->plan.sp.nbufs; b++) /* other made copies already: it keeps its store */
        if (o->repacked[b].data || o->packed[b].data) return;
    rt_copies_drop(o->copies);
    o->copies = rt_copies_hold(a->copies);
}

int64_t rt_cpu_copies_shared(const kiln_program *p) {
    const rt_cpu_state *cs = p && p->plan.be == &rt_cpu_backend ? cpu_state(p) : NULL;
    return cs && cs->copies ? cs->copies->shared : -1;
}

/* the CPU: program-level members here, host code from cpu.c */
const rt_backend rt_cpu_backend = {
    .name = "cpu",
    .label = "CPU",
    .caps = RT_CAP_HOST_MEMORY | RT_CAP_HOST_CODE,
    .gpu = NULL,
    .fingerprint = cpu_fingerprint,
    .supports = cpu_supports,
    .devices = NULL,
    .prepare = cpu_prepare,
    .release = cpu_release,
    .bind = cpu_bind,
    .place = cpu_place,
    .result = cpu_result,
    .begin = cpu_begin,
    .copy = cpu_copy,
    .host_step = cpu_host_step,
    .run_kernel = cpu_run_kernel,
    .sync = cpu_sync,
    .fetch = cpu_fetch,
    .abandon = NULL,
    .isa = rt_cpu_isa,
    .emit = cg_emit_c,
    .compile = rt_cpu_compile,
    .symbol = rt_cpu_symbol,
    .module_path = rt_cpu_module_path,
    .module_free = rt_cpu_module_free,
    .launch = rt_cpu_launch,
};
