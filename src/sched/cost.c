/* cost.c — an analytic cost model for contraction schedules.
 *
 * One run of the micro-kernel family (emit_contract.c) at shape (M, N, K)
 * with schedule (mr, nr, mc, nc) costs about the larger of its compute time
 * (divided by how evenly the work items fill the threads) and its memory
 * time:
 *
 *  - compute, counted in 16-lane vector instructions: per 32-element chunk
 *    of a tile, 2*mr*nr FMAs, 2*mr loads of A, and nr dequantisations of
 *    B (dq instructions each, by dtype); tiles = ceil(M/mr) * ceil(N/nr);
 *    plus a horizontal sum per output (~8 instructions) and per-tile set-up
 *    (pointer arithmetic, ~4*(mr+nr)). Edge tiles compute their padding. The
 *    rate: the FMA peak in instructions per second, with FMAs taking one
 *    slot and the others one slot at twice the FMA rate (two FMA ports,
 *    four ALU/load ports, roughly).
 *  - memory: B's bytes once per block of mc rows of A when an item's B
 *    panel (nc rows x K) does not stay in L2, else once; A's bytes once per
 *    work item when A does not fit L2; at the all-threads bandwidth.
 *  - balance: each batch point's rows in runs of whole strips dealt out to
 *    the threads as the pool does (sch_contract_runs); the busiest thread's
 *    strips against an even share.
 *  - overlap: compute and memory overlap, but not wholly: the smaller of
 *    the two adds a quarter of itself. A memory-bound decode kernel that
 *    computes faster keeps more reads in flight (halving the q4_k tile's
 *    nibble arithmetic took llama1b q4_k decode from 25.6 to 28.4 t/s at
 *    one thread with the same bytes), and with the larger term alone every
 *    decode candidate tied and the search measured them in list order.
 *
 * The packed form has its own model (sch_cost_packed, below), as has AMX
 * (sch_cost_amx); each family row of family.h names its entry.
 *
 * It ranks candidates; the search measures them. Its rank correlation with
 * measured times is printed by `kiln tune`.
 */
#include <math.h>
#include <string.h>

#include "contract.h"
#include "dtype.h"
#include "family.h"
#include "search.h"

/* the bytes a decode tile's prefetch should run ahead of its reads of a
 * weight streamed from memory (sch_cost_dot): on an Intel Xeon without AMX
 * (DRAM 16.6 GB/s at one thread) leads of 1.4, 2.8, 5.6 and 11 KB gave
 * 59%, 62%, 69% and 76% of the best measured decode speed, so the model
 * wants about 8 KB: the 8-row q5_0 tile at pf=32 with pf2=64, q8_0 at
 * pf=32 */
#define SCH_DECODE_LEAD_BYTES 8192.0

sch_machine sch_machine_default(void) {
    sch_machine m;
    m.fma_gflops = 210.0; /* `kiln device` on the 2-core AVX-512 VM (12-chain probe) */
    m.bw1_gbs = 11.0;
    m.bwn_gbs = 17.0;
    m.l2_bytes = 2.0 * 1024 * 1024;
    m.bf16_dot_slots = 1.0;
    return m;
}

/* vector instructions to dequantise 32 elements of B */
static double dequant_cost(kiln_dtype t) {
    switch (t) {
    case KILN_F32: return 2;
    case KILN_F16:
    case KILN_BF16: return 4;
    case KILN_Q8_0: return 8;
    case KILN_Q4_0: return 12;
    case KILN_Q5_0: return 16;
    case KILN_Q4_K: return 18;
    case KILN_Q6_K: return 24;
    default: return 10;
    }
}

static int64_t cdiv(int64_t a, int64_t b) { return b > 0 ? (a + b - 1) / b : 0; }

/* The packed form (emit_gemm.c), in the same units:
 *  - compute: per tile (mr x nr) and k, mr*nr/16 FMAs, mr broadcasts and
 *    nr/16 loads of the packed strip (the loads at twice the FMA rate); the
 *    tile's store or load-add-store once per K block (~8 slots per
 *    accumulator: out's rows are rarely cached; measured fp32 2048^3 kc=128
 *    119 GFLOP/s against 146 with K whole); tile set-up ~4*mr per K block;
 *    a strip prefetch (pf) one load slot per k. A strip of kc x nr floats larger than ~32 KiB no
 *    longer stays in L1 while the tiles of an A block stream past it: its
 *    loads then cost as much as FMAs.
 *  - packing: B dequantised once per item and K block, i.e. once in all:
 *    N*K/32 chunks of dequant_cost plus 32 scattered stores each (a copy of
 *    N*K/16 vectors when B is f32 read along rows, which the shape cannot
 *    tell apart from the scatter: the scatter is counted).
 *  - memory: B's bytes once; A's bytes once per work item when A does not
 *    fit L2, else once; the balance term as for the dot form.
 *  - int8 arithmetic: a vpdpbusd per 4 k in an FMA slot, a byte strip, the
 *    per-32 rescale of every accumulator, A's quantisation on every thread.
 *  - bf16 arithmetic: a vdpbf16ps per 2 k in bf16_dot_slots FMA slots (the
 *    machine's: 1 on AMD Zen 4, 4 on an Intel Xeon). */
/* the larger of compute and memory time plus a quarter of the smaller
 * (see the header: overlap) */
static double overlapped(double compute, double memory) {
    return compute > memory ? compute + 0.25 * memory : memory + 0.25 * compute;
}

/* a launch and its barrier: the calling thread alone, or a wake-up of the
 * pool's workers and a join, and operands the other core just wrote
 * (gemma3-270m's 256-row q5_0 k projection at 2 threads: 7.9 us as one
 * item, 12.5 us split in two) */
static double launch_cost(double used) { return used > 1.0 ? 6e-6 : 2e-6; }

/* the read bandwidth for `used` threads */
static double bandwidth(const sch_machine *mc, double used) { return (used > 1.0 ? mc->bwn_gbs : mc->bw1_gbs) * 1e9; }

/* the share of the ideal split the busiest thread gets: the strips of all
 * items over (threads used x the busiest thread's strips), 1 when even */
static double run_balance(const sch_contract_shape *sh, const sch_contract_sched *s, int64_t runs, int nt) {
    int64_t nr = s->nr > 0 ? s->nr : 1, strips = (sh->n + nr - 1) / nr;
    int64_t items = sh->nbatch * runs, used = items < nt ? items : nt;
    int64_t most = sch_contract_busiest(sh->n, nr, sh->nbatch, runs, nt);
    return most > 0 && used > 0 ? (double)(strips * sh->nbatch) / (double)(used * most) : 1.0;
}

double sch_cost_packed(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s) {
    int nt = sh->nthreads > 0 ? sh->nthreads : 1;
    int nv = s->nr / 16 > 0 ? s->nr / 16 : 1;
    int64_t kc = s->kc > 0 && s->kc < sh->k ? s->kc : (sh->k > 0 ? sh->k : 1);
    int64_t kblocks = cdiv(sh->k, kc);
    double tiles = (double)cdiv(sh->m, s->mr) * (double)cdiv(sh->n, s->nr) * (double)sh->nbatch;
    double kk = (double)sh->k;
    double fma, loads, other, pack;
    if (s->arith == SCH_ARITH_I8) {
        /* int8 (emit_gemm_i8.c): one vpdpbusd per 4 k at the FMA rate, a
         * byte strip a quarter the size; per block of 32 k a convert, a
         * multiply and an FMA per accumulator; A quantised by every thread */
        double strip = (double)kc * (double)s->nr;
        fma = tiles * kk / 4.0 * (double)(s->mr * nv) + tiles * kk / 32.0 * 3.0 * (double)(s->mr * nv);
        loads = tiles * kk / 4.0 * (double)nv * (strip > 32768.0 ? 2.0 : 1.0);
        other = tiles * kk / 4.0 * (double)s->mr + loads + tiles * kk / 32.0 * (double)(s->mr + nv) +
                tiles * (double)kblocks * (2.0 * (double)(s->mr * nv) + 4.0 * (double)s->mr) +
                (double)nt * (double)sh->m * kk / 16.0 * 6.0;
        pack = (double)sh->n * (double)sh->nbatch * (double)cdiv(sh->k, 32) * (dequant_cost(sh->b_dtype) + 16.0);
    } else if (s->arith == SCH_ARITH_BF16) {
        /* bf16 (emit_gemm_bf16.c): one vdpbf16ps per 2 k at the FMA rate,
         * a strip half the f32 size; A rounded by every thread, B rounded
         * and transposed once */
        double strip = 2.0 * (double)kc * (double)s->nr;
        /* a vdpbf16ps issues at the FMA rate on AMD Zen 4, at a quarter of
         * it on an Intel Xeon (bf16_dot_slots, measured) */
        double dot_slots = mc->bf16_dot_slots >= 1.0 ? mc->bf16_dot_slots : 1.0;
        fma = tiles * kk / 2.0 * (double)(s->mr * nv) * dot_slots;
        loads = tiles * kk / 2.0 * (double)nv * (strip > 32768.0 ? (s->pf > 0 ? 1.6 : 2.0) : 1.0);
        other = tiles * kk / 2.0 * (double)s->mr + loads + (s->pf > 0 ? tiles * kk / 2.0 : 0.0) +
                tiles * (double)kblocks * (8.0 * (double)(s->mr * nv) + 4.0 * (double)s->mr) +
                (double)nt * (double)sh->m * kk / 16.0 * 2.0;
        pack = (double)sh->n * (double)sh->nbatch * (double)cdiv(sh->k, 32) * 24.0;
    } else {
        double strip = 4.0 * (double)kc * (double)s->nr;
        fma = tiles * kk * (double)(s->mr * nv);
        /* a strip re-read from L2 costs twice, a third less when prefetched
         * (pf); a prefetch is a load slot per k */
        loads = tiles * kk * (double)nv * (strip > 32768.0 ? (s->pf > 0 ? 1.6 : 2.0) : 1.0);
        other = tiles * kk * (double)s->mr + loads + (s->pf > 0 ? tiles * kk : 0.0) +
                tiles * (double)kblocks * (8.0 * (double)(s->mr * nv) + 4.0 * (double)s->mr);
        pack = (double)sh->n * (double)sh->nbatch * (double)cdiv(sh->k, 32) * (dequant_cost(sh->b_dtype) + 32.0);
        /* B's rows read in place (direct): no pack; each of the M/mr tiles
         * reads the strip from memory or cache again */
        if (s->direct) pack = 0.0;
    }
    double fma_rate = mc->fma_gflops * 1e9 / 32.0;
    double compute = (fma + (other + pack) / 2.0) / fma_rate;

    int64_t runs = sch_contract_runs(s, sh->n, sh->nbatch, nt);
    int64_t items = sh->nbatch * runs;
    double b_row = (double)kiln_dtype_bytes(sh->b_dtype, sh->k);
    if (b_row <= 0) b_row = 4.0 * (double)sh->k;
    double bytes = b_row * (double)sh->n * (double)sh->nbatch;
    double a_bytes = 4.0 * (double)sh->m * (double)sh->k * (double)sh->nbatch;
    bytes += a_bytes > mc->l2_bytes ? a_bytes * (double)items / (double)sh->nbatch : a_bytes;
    double used = (double)(items < nt ? items : nt);
    double memory = bytes / bandwidth(mc, used);
    double balance = run_balance(sh, s, runs, nt);
    double par_compute = compute / used / balance;
    return overlapped(par_compute, memory) + launch_cost(used);
}

/* The AMX form (emit_gemm_amx.c), in the same units: per 16x16 output
 * tile and block of 32 k, a tile multiply (~8 FMA slots), its store and a
 * rescale of 16 rows (load, convert, multiply, FMA, load and store of the
 * f32 accumulator: ~6 slots each); A's quantisation on every thread; B's
 * packing once; memory and balance as for the packed form. */
double sch_cost_amx(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s) {
    int nt = sh->nthreads > 0 ? sh->nthreads : 1;
    double tiles16 = (double)cdiv(sh->m, s->mr) * (double)(s->mr / 16) * (double)cdiv(sh->n, s->nr) *
                     (double)(s->nr / 16) * (double)sh->nbatch;
    double blocks = (double)cdiv(sh->k, 32);
    double compute_slots = tiles16 * blocks * (8.0 + 16.0 * 6.0 / 2.0) + (double)nt * (double)sh->m * (double)sh->k / 16.0 * 6.0 +
                           (double)sh->n * (double)sh->nbatch * blocks * (dequant_cost(sh->b_dtype) + 18.0);
    if (s->arith == SCH_ARITH_BF16) {
        /* bf16 tiles (emit_gemm_amx_bf16.c): a 16x16x32 bf16 multiply ~16
         * cycles (32 slots), no rescale; the tiles stored once per K block;
         * A converted on every thread; B dequantised, converted and
         * transposed once */
        double kblocks = (double)cdiv(sh->k, s->kc > 0 && s->kc < sh->k ? s->kc : (sh->k > 0 ? sh->k : 1));
        /* and per 16x16 tile and 32 of k, its share of the A and B tile
         * loads (~24 slots each): a block of mr x nr loads mr/16 + nr/16
         * tiles for (mr/16)(nr/16) multiplies, so 32x32 loads one per
         * multiply where 16x16 loads two (Intel Xeon with AMX, Llama-1B-shaped
         * q4_k prefill, 512 x 8192 x 2048 at 1 thread: 17.6 ms at 16x16,
         * 11.5 ms at 32x32, bench/results/firstrun-budget-xeon-amx.md) */
        double loads = ((double)(s->mr / 16) + (double)(s->nr / 16)) / ((double)(s->mr / 16) * (double)(s->nr / 16));
        compute_slots = tiles16 * blocks * (32.0 + 24.0 * loads) + tiles16 * kblocks * 48.0 +
                        (double)nt * (double)sh->m * (double)sh->k / 16.0 * 2.0 +
                        (double)sh->n * (double)sh->nbatch * blocks * (dequant_cost(sh->b_dtype) + 12.0);
    }
    double fma_rate = mc->fma_gflops * 1e9 / 32.0;
    double compute = compute_slots / fma_rate;
    int64_t runs = sch_contract_runs(s, sh->n, sh->nbatch, nt);
    int64_t items = sh->nbatch * runs;
    double b_row = (double)kiln_dtype_bytes(sh->b_dtype, sh->k);
    double bytes = b_row * (double)sh->n * (double)sh->nbatch + 4.0 * (double)sh->m * (double)sh->k * (double)sh->nbatch;
    double used = (double)(items < nt ? items : nt);
    double memory = bytes / bandwidth(mc, used);
    if (s->arith == SCH_ARITH_BF16) {
        /* every nr-column strip reads A's K block (M x kc bf16) again: past
         * a quarter of L2 (the bucket is ranked at M = 256 and runs longer
         * prompts too) it comes from L3, at about three times the memory's
         * rate (Intel Xeon with AMX, Llama-1B-shaped q4_k pp512 at 1
         * thread, every prefill product forced to AMX bf16 32 x 32: 249 t/s
         * with kc = all of K, 274 with kc = 1024; a 120 s tune took
         * kc = 1024 for the 2048 x 8192 down projection) */
        double kc = (double)(s->kc > 0 && s->kc < sh->k ? s->kc : sh->k);
        double a_slice = 2.0 * (double)sh->m * kc;
        if (a_slice > 0.25 * mc->l2_bytes) {
            double strips = (double)cdiv(sh->n, s->nr) * (double)sh->nbatch;
            memory += strips * 2.0 * (double)sh->m * (double)sh->k / (3.0 * bandwidth(mc, used));
        }
    }
    double balance = run_balance(sh, s, runs, nt);
    double par_compute = compute / used / balance;
    return overlapped(par_compute, memory) + launch_cost(used);
}

static double cost_split(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s);

double sch_cost_contract(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s) {
    if (s->serial && sh->nthreads > 1) {
        /* the kernel on one thread: the model at a pool of one */
        sch_contract_shape one = *sh;
        one.nthreads = 1;
        return cost_split(mc, &one, s);
    }
    return cost_split(mc, sh, s);
}

/* the schedule's family's entry; a schedule of no family (not emittable)
 * is costed as the dot form */
static double cost_split(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s) {
    const sch_family *f = sch_family_of(s);
    return f ? f->cost(mc, sh, s) : sch_cost_dot(mc, sh, s);
}

/* the dot form (the header's model) */
double sch_cost_dot(const sch_machine *mc, const sch_contract_shape *sh, const sch_contract_sched *s) {
    int nt = sh->nthreads > 0 ? sh->nthreads : 1;
    int64_t chunks = cdiv(sh->k, 32);
    int64_t mt = cdiv(sh->m, s->mr), ntile = cdiv(sh->n, s->nr);
    double per_chunk_fma = 2.0 * s->mr * s->nr;
    /* rp=1: one load and mask yield 4 bytes of all 8 rows, half the work of per-row dequantisation */
    double dq = dequant_cost(sh->b_dtype) * (s->rp ? 0.5 : 1.0);
    /* a block format dequantised to f32 costs about three times the table's
     * count (Llama-1B-shaped q4_k, 2048 x 2048 decode at 1 thread, Intel
     * Xeon with AMX: f32 617 us, int8 173 us, which the model had equal,
     * both at the memory time) */
    if (s->arith == SCH_ARITH_F32 && (dtype_table[sh->b_dtype].flags & DT_INT8)) dq *= 3.0;
    double per_chunk_other = 2.0 * s->mr + dq * s->nr;
    double tiles = (double)mt * (double)ntile * (double)sh->nbatch;
    double fma = tiles * (double)chunks * per_chunk_fma;
    double other = tiles * ((double)chunks * per_chunk_other + 4.0 * (s->mr + s->nr)) +
                   8.0 * (double)sh->m * (double)sh->n * (double)sh->nbatch;
    double fma_rate = mc->fma_gflops * 1e9 / 32.0; /* 16-lane FMAs per second per thread */
    double compute = (fma + other / 2.0) / fma_rate;

    int64_t runs = sch_contract_runs(s, sh->n, sh->nbatch, nt);
    int64_t chunk = sch_contract_run_rows(sh->n, s->nr, runs), items = sh->nbatch * runs;
    double b_row = (double)kiln_dtype_bytes(sh->b_dtype, sh->k);
    if (b_row <= 0) b_row = 4.0 * (double)sh->k;
    double b_bytes = b_row * (double)sh->n * (double)sh->nbatch;
    double panel = b_row * (double)chunk;
    double mblocks = (double)cdiv(sh->m, s->mc);
    double bytes = panel > mc->l2_bytes ? b_bytes * mblocks : b_bytes;
    double a_bytes = 4.0 * (double)sh->m * (double)sh->k * (double)sh->nbatch;
    bytes += a_bytes > mc->l2_bytes ? a_bytes * (double)items / (double)sh->nbatch : a_bytes;
    double used = (double)(items < nt ? items : nt);
    double memory = bytes / bandwidth(mc, used);
    /* B comes from memory: past L2, or a decode weight of 64 KiB or more,
     * which a model's other weights evict between two tokens (the search
     * times such a B flushed from cache, tune.c). With L2 as the only line,
     * gemma3-270m's layer weights (0.36-1.3 MB) kept the cost model's
     * prefetch-less tiles unmeasured in a first run, where every one a
     * 120 s tune measured took a prefetch (Intel Xeon without AMX) */
    int streamed = b_bytes > mc->l2_bytes || (sh->m <= 4 && !sh->b_activation && b_bytes >= 65536.0);
    /* B streamed from beyond L2 without software prefetch: each of the
     * tile's nr rows is a stream that stalls on its misses, the fewer the
     * streams the longer (Intel Xeon with AMX, q4_k decode 2048 x 2048 at
     * 1 thread: the plain int8 1 x 1 tile 246 us at pf=0, 139 us at pf=16;
     * the 8-row repacked tile 743 against 692 us) */
    double no_pf = 1.0 + 0.75 / (double)(s->nr > 0 ? s->nr : 1);
    /* a decode weight read from memory needs bytes in flight: a tile's
     * prefetch runs pf (T0) or pf2 (T1) 32-value chunks ahead on each of its
     * rows (the rp tiles' 8 interleaved rows are one record per chunk), and
     * too short a lead leaves the stream waiting on DRAM. gemma3-270m at 1
     * thread, every decode contraction forced to the 8-row repacked int8
     * tile (KILN_CONTRACT_SCHED_SMALL, Intel Xeon without AMX), tg64 t/s:
     * pf=8 41.3, pf=16 43.0, pf=32 47.7, pf=32 pf2=64 52.7; interleaved
     * pairs pf=8 vs pf=32 pf2=64 at 2 threads 57-81 vs 95-98. The lead the
     * model wants: SCH_DECODE_LEAD_BYTES. The far level counts only for
     * the nibble formats (q4_0, q5_0 and the k-quants), whose unpacking it
     * feeds: q8_0 took 31.7 GB/s at pf=8 and 28.3 with pf2=16 (below) */
    if (streamed && sh->m <= 4) {
        double lead_rows = s->rp ? 8.0 : (double)(s->nr > 0 ? s->nr : 1);
        double chunk_row = b_row / (double)(chunks > 0 ? chunks : 1);
        int far = s->pf2 > s->pf && dequant_cost(sh->b_dtype) >= 12 ? s->pf2 : s->pf;
        double lead = lead_rows * chunk_row * (double)far, short_lead = 1.0;
        if (lead < SCH_DECODE_LEAD_BYTES) short_lead = 1.0 + 0.6 * (1.0 - lead / SCH_DECODE_LEAD_BYTES);
        memory *= s->pf == 0 && no_pf > short_lead ? no_pf : short_lead;
    } else if (s->pf == 0 && streamed) {
        memory *= no_pf;
    }
    /* the rp tiles' far prefetch into L2 (pf2) keeps the k-quants' heavy
     * dequantisation fed, and costs the light formats the slots it takes
     * (Intel Xeon with AMX, 14336 x 4096 and 4096 x 14336 from DRAM, 8-row
     * tile pf=8, without -> with pf2=16, GB/s: q4_k 13.2 -> 14.0 at 1
     * thread, 23.8 -> 26.2 at 2; q6_k 14.0 -> 14.5, 25.3 -> 27.7; q8_0
     * 16.8 -> 14.8, 31.4 -> 28.3) */
    if (s->rp && b_bytes > mc->l2_bytes && (s->pf2 > 0) != (dequant_cost(sh->b_dtype) >= 18))
        memory *= 1.1;
    double balance = run_balance(sh, s, runs, nt);
    double par_compute = compute / used / balance;
    return overlapped(par_compute, memory) + launch_cost(used);
}
