/* repack.h — weights copied once into a layout a schedule reads faster
 * (DESIGN.md section 6: "a repacked layout, when the search chose one, is
 * built then"; here on the first decode step that reads it, exec.c, in an
 * arena of 2 MiB pages). The layouts themselves are
 * src/sched/repack_layout.h, shared with the emitters that read them.
 */
#ifndef KILN_RUNTIME_REPACK_H
#define KILN_RUNTIME_REPACK_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"
#include "repack_layout.h"

/* a buffer's copy as the runtime keeps it (exec.c): valid while the buffer
 * is bound to src by the binding numbered gen, read as rows of k */
typedef struct rt_repacked {
    void *data;     /* the copy (header first), or NULL */
    const void *src;
    uint64_t gen;
    int64_t k;
    size_t bytes;   /* of data */
    int released;   /* the weight's owner was told that nothing reads src any more (release.c) */
    double checked, checked_budget; /* the search's spent seconds and budget when release.c last said
                                       no (checked -1: not asked) */
    int checked_coming;             /* and whether a search was coming then (kiln_program_search_coming) */
} rt_repacked;

/* whether dtype t has the 8-row interleave (q4_0, q5_0, q8_0, q4_k, q6_k) */
int rt_repack_x8_ok(kiln_dtype t);
/* bytes of the copy of `bytes` bytes of t read as rows of k elements (0: not
 * repackable: k not a multiple of 32, or fewer than 8 rows) */
size_t rt_repack_x8_size(kiln_dtype t, size_t bytes, int64_t k);
/* 1 when that copy holds every row (whole groups of 8 rows, no remainder) */
int rt_repack_x8_whole(kiln_dtype t, size_t bytes, int64_t k);
/* the copy, 64-byte aligned, placed in arena a (rt_arena_release); NULL
 * when not repackable or out of memory */
typedef struct rt_arena rt_arena;
void *rt_repack_x8(kiln_dtype t, const void *src, size_t bytes, int64_t k, rt_arena *a);
/* the same, telling consumed(ctx, part, n) about the source's bytes it
 * will not read again, in order, as it goes (parts end on 4 KiB-aligned
 * addresses but the last; together they are [src, src + bytes) when the
 * copy is made, none when it is not): the caller may give those pages back
 * before the copy is whole, so the weight and its copy are not resident at
 * once (a 262,144-row output head: 170 MiB each) */
typedef void (*rt_consumed_fn)(void *ctx, const void *part, size_t n);
void *rt_repack_x8_ex(kiln_dtype t, const void *src, size_t bytes, int64_t k, rt_arena *a, rt_consumed_fn consumed,
                      void *ctx);

/* Memory for the copies: chunks of at least 32 MiB, 2 MiB-aligned and
 * hinted to the kernel's 2 MiB pages, cut into 64-byte-aligned pieces in
 * order. Decode reads every copy once per token, each after some 100 MB of
 * other weights have gone through the TLB: a copy of its own in 4 KiB
 * pages (gemma3-270m's are 0.1-0.9 MB) took a TLB miss per 4 KiB and ran
 * at half the speed it was tuned at. A chunk is freed when its last piece
 * is released; pieces are never reused before that. */
struct rt_arena_chunk { /* [base, base + cap): pieces cut up to used, live of them not yet released */
    struct rt_arena_chunk *next;
    uint8_t *base;
    size_t cap, used;
    int64_t live;
};
struct rt_arena {
    struct rt_arena_chunk *chunks; /* newest first; pieces are cut from the newest */
    size_t held;                   /* bytes of every chunk */
    size_t limit;                  /* 0: none; else a chunk past it is not made (the piece is NULL) */
};
void *rt_arena_alloc(rt_arena *a, size_t bytes);
void rt_arena_release(rt_arena *a, void *piece); /* NULL: nothing */
void rt_arena_free(rt_arena *a);                 /* every chunk, pieces or not */

#endif
