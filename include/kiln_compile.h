/* kiln_compile.h — compiling a kiln_graph to native code and running it.
 * Include after kiln.h.
 *
 * kiln_compile cuts the graph into kernels (elementwise chains fused, each
 * reduction with its elementwise producers and, where that never repeats
 * work, inside the kernel of its elementwise consumers: softmax and rmsnorm
 * are one pass per row), generates one C translation unit
 * for the whole graph, compiles it with the system C compiler ($KILN_CC,
 * default "cc") into a shared object cached under $XDG_CACHE_HOME/kiln
 * (default ~/.cache/kiln) and loads it. The program is built once for every
 * value of the graph's symbolic sizes.
 *
 * Running uses the graph's own bindings: bind sizes with kiln_bind_dim and
 * buffers with kiln_bind_input on the graph, call kiln_run, then read the
 * results with kiln_output_shape / kiln_read_output exactly as after
 * kiln_eval_reference. State tensors (kiln_state) are updated in place in the
 * caller's buffer. Inputs are read in place from the caller's buffers (no
 * copies); they must stay valid during kiln_run.
 *
 * Knobs (for measuring and testing, not needed in normal use) are fields of
 * kiln_compile_options, all 0 / NULL by default; kiln_compile_defaults fills
 * each from its KILN_* environment variable (docs/ARCHITECTURE.md, section 6,
 * lists every variable, its default and its field). kiln_compile(g, NULL, st)
 * uses kiln_compile_defaults. Machine-wide settings (KILN_CC, KILN_ISA, the
 * caches' places) are read where they are used, through the same function.
 *
 * Invariants: a kiln_program keeps a pointer to its graph; the graph must
 * outlive the program and must not get new nodes after kiln_compile. Errors
 * never crash: they return a kiln_status, and the message is in the graph
 * (kiln_graph_error) and, for kiln_compile, in options->error when given.
 */
#ifndef KILN_COMPILE_H
#define KILN_COMPILE_H

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_program kiln_program;

typedef struct kiln_compile_options {
    const char *backend; /* "cpu" (NULL means "cpu") */
    int threads;         /* worker threads; 0 = all online cores */
    double search_budget; /* seconds of schedule search; 0 = default schedules */
    int vector;          /* -1 = scalar only, 0 = best the machine allows (default) */
    int exact;           /* 1 = kiln's exact evaluation: every contraction in f32 arithmetic (no bf16
                            tiles, no int8 activations), no tuning DB, no schedule search; the
                            default is 1 when $KILN_EXACT is 1 */
    int fixed_defaults;  /* 1 = a contraction without a tuning record runs kiln's fixed f32
                            default schedule; 0 (the default, unless $KILN_FIXED_DEFAULTS is 1) =
                            the cost model's first choice for its shape, which may take int8 or
                            bf16 arithmetic as a search would */
    /* the knobs: 0 / NULL means the normal behaviour; the variable in brackets
     * is what kiln_compile_defaults reads. String fields must stay valid
     * during kiln_compile. */
    int no_egraph;           /* 1: no e-graph step (KILN_EGRAPH=0) */
    int eg_plain;            /* 1: extraction by plain tree costs, not amortised (KILN_EG_PLAIN) */
    int no_fuse;             /* 1: every reduction in a kernel of its own (KILN_FUSE=0) */
    int no_contract;         /* 1: no contraction recognition (KILN_CONTRACT=0) */
    int no_split;            /* 1: no loop splitting at guards (KILN_SPLIT=0) */
    int no_pack_copy;        /* 1: no pack copies, prefill packs B at every launch (KILN_PACK_COPY=0) */
    long long stream_min;    /* bytes from which outputs use non-temporal stores; 0: 8 MiB; -1: every
                                output (KILN_STREAM_MIN; its 0 is -1 here) */
    int profile;             /* 1: per-kernel times, printed when the program is freed; 2: collected
                                only (KILN_PROFILE=1 / quiet) */
    int poison;              /* 1: outputs start as all-ones bits, NaN (KILN_POISON_RESULTS) */
    int tunedb_off;          /* 1: ignore the tuning DB's records (KILN_TUNEDB_OFF=1) */
    int tune_verbose;        /* 1: a line per kernel search and per rejected candidate (KILN_TUNE_VERBOSE);
                                2: and each candidate's time (KILN_TUNE_VERBOSE=2) */
    int tune_warm;           /* 1: time decode candidates with B warm in cache (KILN_TUNE_WARM) */
    int inject_wrong;        /* tests: contraction candidate n is made wrong (KILN_TUNE_INJECT_WRONG) */
    int gtune_inject_wrong;  /* tests: the same for generic kernels (KILN_GTUNE_INJECT_WRONG) */
    const char *contract_sched_small; /* one schedule for every contraction's decode bucket
                                         (KILN_CONTRACT_SCHED_SMALL) */
    const char *contract_sched_large; /* ... and prefill bucket (KILN_CONTRACT_SCHED_LARGE) */
    const char *gpu_contract; /* one GPU contraction schedule for every contraction (KILN_GPU_CONTRACT) */
    int gpu_group;           /* work-group size of generic GPU kernels; 0: CUDA 128, OpenCL 64 (KILN_GPU_GROUP) */
    int gpu_resident;        /* 1: weights and states stay on the device (KILN_GPU_RESIDENT) */
    int gpu_emit_only;       /* 1: emit GPU source only, open no device (KILN_GPU_EMIT_ONLY) */
    const char *cuda_archs;  /* with gpu_emit_only: NVRTC-check CUDA code for these archs (KILN_CUDA_ARCHS) */
    int stream;              /* attention on the CPU: 0 materialised (KILN_STREAM=0), 1 streaming (KILN_STREAM=1),
                                2 both, each run picking by its shape (KILN_STREAM=2); -1 (unset): 0, and
                                models loaded through kiln_llm/kiln run ask for 2 */
    int no_stream_tile;      /* 1: stream kernels keep the one-row form, their scores' dot product a kernel of
                                its own, not the rows x keys tile (KILN_STREAM_TILE=0) */
    int stream_bf16;         /* 1: stream tiles round queries, keys, values and weights to bf16 and multiply on
                                vdpbf16ps with f32 sums (approximate), on CPUs with avx512_bf16 only; elsewhere
                                ignored (KILN_STREAM_BF16=1). 0: with option stream 2, the streaming form's
                                tiles hold both products and "streaming-bf16" is a third attention form for
                                prompts, measured like the others (stream_select.c; KILN_STREAM_BF16=search);
                                2: that, asked for directly; -1: no bf16 form at all (what
                                kiln_compile_defaults gives unless the environment asks) */
    int decode_tile_rows;    /* a CPU contraction launched on 5 to this many rows of A runs its decode bucket's
                                schedule where that is the int8 tiles on B's repacked copy (dot-i8-rp: each
                                row's sums the 1-row tile's), not the prefill bucket's; 0: the default, 24
                                (SCH_DECODE_TILE_ROWS); 4 or less: never (KILN_DECODE_TILE_ROWS) */
    int no_epilogue;         /* 1: the elementwise kernel after a contraction runs as a kernel of its own,
                                not inside the contraction's work items (src/sched/epilogue.c;
                                KILN_EPILOGUE=0) */
} kiln_compile_options;

/* Progress of kiln_compile in this process, for a ticker: fn(ctx, stage,
 * done, total) is called at each stage: "e-graph" (rewriting), "kernels"
 * (fusion and scheduling), then on the CPU "cached" (the compiled code was
 * in the kernel cache) or "cc" (the C compiler builds `total` units: done 0
 * at the start, total at the end; a search's candidates are compiled the
 * same way). One observer per process, set before compiling; NULL: none. */
typedef void (*kiln_compile_observer)(void *ctx, const char *stage, int done, int total);
KILN_API void kiln_set_compile_observer(kiln_compile_observer fn, void *ctx);

/* options with every field at its default: the knobs as the environment sets them */
KILN_API kiln_compile_options kiln_compile_defaults(void);

/* compile g (its outputs and its state updates). opt may be NULL. On failure
 * returns NULL, sets *st (when st is not NULL) and the graph's error message. */
KILN_API kiln_program *kiln_compile(kiln_graph *g, const kiln_compile_options *opt, kiln_status *st);
/* execute with the graph's current bindings; outputs land in the graph */
KILN_API kiln_status kiln_run(kiln_program *p);
KILN_API void kiln_program_free(kiln_program *p);

/* the kernels as text: per kernel its inputs, outputs, fused ops and loop
 * nest (malloc'd; caller frees) */
KILN_API char *kiln_program_kernels(const kiln_program *p);
/* which attention form serves which runs (compile option stream), and the
 * stream kernels of the streaming form when the program has one as its
 * alternative (malloc'd; caller frees) */
KILN_API char *kiln_program_forms(const kiln_program *p);
/* the attention form as a measured choice. Buckets: a short prompt (more
 * than a few rows, fewer than 1024 keys), a long one, decode (a few rows)
 * over fewer than 1024 keys, decode over more. kiln_program_form_force runs
 * every later kiln_run in one form (0 materialised, 1 streaming; -1: the
 * choice per bucket again); it returns 0 when the program has no
 * alternative form (forcing 1 compiles the alternative if it was not yet:
 * it is compiled at its first need; forcing 0 or -1 compiles nothing). kiln_program_form_record stores the two forms' seconds
 * for a bucket in the tuning DB (key "attn-form-<hash of the stream
 * kernels' shapes>", bucket "<name>,t=<threads>", schedule "streaming" or
 * "materialised") and uses the faster from then on (times within 3% are a
 * tie: the cost model's pick, whose time may then be the larger); a bucket
 * with no record keeps the cost model's pick. */
enum { KILN_FORM_SHORT, KILN_FORM_LONG, KILN_FORM_DECODE, KILN_FORM_DECODE_LONG, KILN_FORM_BUCKETS };
/* the forms: the third is the streaming program with its stream tiles'
 * products in bf16 (approximate), on CPUs with avx512_bf16 and for prompts
 * (the short and long buckets) only; forcing it returns 0 where the
 * program has no such form */
enum { KILN_FORM_MATERIALISED, KILN_FORM_STREAMING, KILN_FORM_STREAMING_BF16, KILN_FORMS };
KILN_API int kiln_program_form_force(kiln_program *p, int form);
/* 1 when p may have the streaming-bf16 form (exact once the streaming
 * alternative is compiled; before, from the options and the CPU), no compile */
KILN_API int kiln_program_form_bf16_possible(const kiln_program *p);
/* one bucket's form set by the caller (0 materialised, 1 streaming, -1 the
 * measured or cost-model choice again), over the tuning DB's record, under
 * kiln_program_form_force; kiln serve pins decode to the form its batched
 * program runs (src/model/model_batch.c). Returns 0 when the program has
 * no alternative form or the arguments are out of range. */
KILN_API int kiln_program_form_pin(kiln_program *p, int bucket, int form);
KILN_API kiln_status kiln_program_form_record(kiln_program *p, int bucket, double materialised_s, double streaming_s);
/* the same with the streaming-bf16 form's seconds (0: not measured), for the
 * short and long buckets of a program that has the form (else
 * KILN_ERR_INVALID); it wins only when more than 3% faster than the f32 form
 * the other two's rule picks. The record's schedule: the winner, then
 * " runner-up=<form>" unless the runner-up is the other f32 form */
KILN_API kiln_status kiln_program_form_record3(kiln_program *p, int bucket, double materialised_s, double streaming_s,
                                               double streaming_bf16_s);
/* the generated C source (owned by the program) */
KILN_API const char *kiln_program_source(const kiln_program *p);
/* path of the loaded shared object (owned by the program) */
KILN_API const char *kiln_program_library(const kiln_program *p);
KILN_API int kiln_program_kernel_count(const kiln_program *p);
/* schedule candidates this program has measured so far (0 when every
 * schedule came from the tuning DB or no search was asked for) */
KILN_API int kiln_program_measurements(const kiln_program *p);
/* each distinct contraction (key, shape bucket) of the program and the size
 * of its schedule space (malloc'd text) */
KILN_API char *kiln_program_space_report(const kiln_program *p);
/* the schedule space's axes and sizes at example shapes (malloc'd text) */
KILN_API char *kiln_schedule_space(void);
/* which arithmetic the contractions use: for bucket 0 (decode-sized M) and 1
 * (prefill-sized M), counts[bucket][a] of contraction kernels with a = 0 f32,
 * 1 int8 activations, 2 bf16 tiles (a kernel the micro-kernel family cannot
 * take runs its generic f32 loop nest: f32). Returns the contraction kernel
 * count. kiln_program_arith_text: one line, e.g. "contractions: decode 60 f32,
 * 36 int8 activations; prefill 70 f32, 26 bf16 tiles" (malloc'd). */
KILN_API int kiln_program_arith(const kiln_program *p, int counts[2][3]);
KILN_API char *kiln_program_arith_text(const kiln_program *p);
/* 1 when the program was compiled with exact */
KILN_API int kiln_program_exact(const kiln_program *p);
/* bytes of the intermediate arena planned for the last run (0 before one) */
KILN_API size_t kiln_program_arena_bytes(const kiln_program *p);

/* the backends kiln was built with (src/runtime/registry.c), the CPU first:
 * the i-th one's name ("cpu"), NULL past the end */
KILN_API const char *kiln_backend_name(int i);
/* every name, comma-separated ("cpu, opencl, cuda"; static) */
KILN_API const char *kiln_backend_names(void);
/* the backend's name for tables ("CPU"); name NULL or "": $KILN_BACKEND, else
 * the CPU (as for every function here); NULL for an unknown name */
KILN_API const char *kiln_backend_label(const char *name);
/* 1 when the backend runs on host memory (inputs used in place), else 0 */
KILN_API int kiln_backend_host_memory(const char *name);
/* the fingerprint its tuning records carry (malloc'd), NULL when it has no device */
KILN_API char *kiln_backend_fingerprint(const char *name);

/* `kiln device`: the hardware fingerprint and measured peaks, as text or JSON
 * (json != 0). Measuring takes about a second. malloc'd; caller frees. */
KILN_API char *kiln_device_report(int json);
/* the fingerprint alone, one line (malloc'd): the tuning DB key */
KILN_API char *kiln_device_fingerprint(void);
/* measured peaks for `threads` threads: read bandwidth (GB/s, from DRAM: the
 * buffer of `kiln device`, at least 4x the last-level cache), f32
 * FMA GFLOP/s and int8 dot-product GOP/s (all threads); -1 when the compute
 * probe could not be compiled (the bandwidth is still measured) */
KILN_API int kiln_device_peaks(int threads, double *bw_gbs, double *fma_gflops, double *dot_gops);

/* ---- profiling (KILN_PROFILE=1 at compile time turns collection on) ---- */
/* per kernel, slowest first: share of the time, ms per run, bytes of the
 * buffers it touches per run (whole buffers: an upper bound where a kernel
 * reads part of one, like a KV cache), achieved GB/s and share of bw_gbs,
 * and for contractions GOP/s (a multiply-add is 2) and share of the peak of
 * the arithmetic their last launch used: dot_gops for int8 ("i8"), twice
 * fma_gflops for bf16 ("bf"), else fma_gflops (kiln_device_peaks gives all
 * three). malloc'd text; "" when profiling is off. */
KILN_API char *kiln_program_profile(const kiln_program *p, double bw_gbs, double fma_gflops, double dot_gops, int max_rows);
KILN_API void kiln_program_profile_reset(kiln_program *p);
/* profiling turned on (allocating its counters) or off after compiling; off
 * only resets the counts of a program compiled with a profile (KILN_PROFILE) */
KILN_API void kiln_program_profile_on(kiln_program *p, int on);
/* seconds per kernel since the last reset, out[0..n): the kernel count
 * filled (0 when profiling is off) */
KILN_API int kiln_program_kernel_times(const kiln_program *p, double *out, int n);
/* contraction launches so far whose items were split along M as well as N
 * (too few output columns for the threads: a convolution's 7x7 layers) */
KILN_API long long kiln_program_msplit_launches(const kiln_program *p);

/* ---- the schedule search, steered ---------------------------------------
 * kiln_program_search gives the program a search of budget_s seconds of wall
 * time (measuring, checking, and the recompile with the winners) that runs
 * during its next runs. weights (NULL: none) says where the time goes:
 * weights[2k + bucket] is kernel k's seconds in the planned workload (bucket
 * 0: decode-sized M, 1: prefill-sized); each search then gets its part of
 * what is left in proportion to its weight, and a kernel whose group (the
 * kernels one search settles) takes less than min_share of its bucket's time
 * keeps its schedule. Under weights the recompile waits for
 * kiln_program_search_finish, which also closes the search. */
typedef struct kiln_search_status {
    double budget_s, spent_s, reserve_s; /* reserve_s: kept for the recompile */
    int searched, skipped;               /* kernel searches run; kernels the plan passed over */
    int untuned, slots;                  /* contraction (kernel, bucket) slots without a schedule yet, and all */
    int measurements;                    /* candidates measured */
    double best_speedup;                 /* the largest default/best time ratio found */
    double baseline_s;                   /* compiling the streaming form after the search (its baseline compile,
                                            deferred until the winners are known; not in spent_s) */
    double recompile_s;                  /* the recompile with the winners (in spent_s; 0: none), against the
                                            reserve_s it had when the plan ended */
} kiln_search_status;
/* a search of p will follow the runs before it (a warm-up, a profile):
 * until kiln_program_search plans it, no weight's pages are given back for
 * a copy that replaces it (runtime/release.c), since the search may pick
 * schedules that read the weight itself */
KILN_API void kiln_program_search_coming(kiln_program *p);
KILN_API kiln_status kiln_program_search(kiln_program *p, double budget_s, const double *weights, double min_share);
KILN_API kiln_status kiln_program_search_finish(kiln_program *p);
/* a later pass of a plan's search (before kiln_program_search_finish), with
 * budget_s seconds more: the heaviest kernel groups (at most max_groups, and
 * as many as budget_s pays a few candidates each) that this plan searched
 * with candidates left in their ranked space (seeded with their winner, from
 * the rank where they stopped) or passed over because their share could not
 * pay for a search, search at their next launch. Returns the slots reopened
 * (0: nothing left to search; the budget stays). */
KILN_API int kiln_program_search_more(kiln_program *p, double budget_s, int max_groups);
/* fn(ctx, status) after each kernel search under a plan, on the calling thread */
typedef void (*kiln_search_progress_fn)(void *ctx, const kiln_search_status *st);
KILN_API void kiln_program_search_progress(kiln_program *p, kiln_search_progress_fn fn, void *ctx);
KILN_API void kiln_program_search_status(const kiln_program *p, kiln_search_status *out);
/* contraction (kernel, bucket) slots with no schedule from the tuning DB or
 * a search yet: all of them on a machine that never tuned this model */
KILN_API int kiln_program_untuned(const kiln_program *p);

/* ---- the tuning DB ----------------------------------------------------------
 * Every valid record of the DB in use ($KILN_TUNEDB, else the cache's
 * tune.db) as JSON: {"path": ..., "damaged": lines skipped, "records":
 * [{"fingerprint", "key", "bucket", "schedule", "best_s", "base_s", "tried",
 * "rejected", "date", "ir_version"}, ...]}. malloc'd: kiln_free. */
KILN_API char *kiln_tunedb_json(void);

/* ---- CUDA without a device ------------------------------------------------
 * kiln_cuda_compile_check compiles CUDA source with NVRTC for arch
 * ("sm_80", "sm_90"): KILN_OK when NVRTC accepts it (*bin_bytes: the size of
 * the result), else the log in err; KILN_ERR_UNSUPPORTED when libnvrtc
 * cannot be loaded. kiln_cuda_nvrtc_version: "major.minor", or NULL. */
KILN_API kiln_status kiln_cuda_compile_check(const char *src, const char *arch, size_t *bin_bytes, char *err,
                                             size_t errlen);
KILN_API const char *kiln_cuda_nvrtc_version(void);

#ifdef __cplusplus
}
#endif
#endif
