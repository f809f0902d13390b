/* stream_tile.h — when a stream kernel (stream.c) can run as a register
 * tile of query rows x keys with the scores computed inside it: its logits
 * hold one dot product over an axis d of a row operand (free of the stream
 * axis j) and a key operand (moving with j), both loads contiguous along d:
 * the row operand f32, keys and values f32 or f16 converted to f32 (a KV
 * cache kept in f16). See stream_tile.c for the conditions; the emitter
 * (src/codegen/emit_stream_tile.c) prints the tile, and contract.c leaves
 * such a dot product inside the kernel instead of giving it a kernel and a
 * rows x keys buffer of its own. */
#ifndef KILN_SCHED_STREAM_TILE_H
#define KILN_SCHED_STREAM_TILE_H

#include "loop.h"

/* the vector width (floats) the tile's d and value axes must be multiples of */
#define SCH_TILE_VW 8

typedef struct sch_stream_tile {
    int32_t stage;        /* the fused stage holding the dot product */
    int32_t rows, keys;   /* lx ids of the row operand's and the key operand's loads */
    int32_t vals;         /* lx id of the values' load */
    int key_f16, val_f16; /* 1: that operand's load reads f16 (converted to f32 as loaded) */
    sym_id row_base;      /* the row operand's offset at d = 0 (row variables only) */
    sym_id key_base;      /* the key operand's offset at d = 0, j = 0 (row variables only) */
    sym_id key_step;      /* ... + j * key_step (a constant) */
    sym_id val_base;      /* the values' offset at n = 0, j = 0 (row variables only) */
    sym_id val_step;      /* ... + j * val_step (a constant); contiguous along n */
    int64_t d, n;         /* the dot's length and the value axis' size */
} sch_stream_tile;

/* Split mode (flash-decoding): a launch on more than one thread runs its
 * items as S key splits x rows, split s reading key blocks s, s + S, s + 2S,
 * ... (KILN_STREAM_KB keys each), so the threads share the keys (a decode
 * step's 4 query heads over one key head were one tile on one thread), a
 * window's too; each split leaves a partial (max, sum, skipped constant,
 * products) in the program's scratch and the last split of a row merges
 * them in split order. S is the thread count, not a function of the keys
 * or the rows, so a row's arithmetic is the same in every launch of a
 * thread count: a batched decode's rows are the lone sequence's bit for
 * bit (tests/py/test_serve_batch.py). */
#define SCH_STREAM_SPLIT_MAX_SCRATCH ((size_t)256 << 20)
/* the splits S of a launch of nrows rows on nthreads threads: the thread
 * count (at most 16) when there are at least two, else 1 */
int64_t sch_stream_tile_splits(int64_t nrows, int nthreads);
/* the scratch bytes split mode needs: one int counter per row (padded to
 * 64 bytes), then S x nrows partials of n + 3 floats */
size_t sch_stream_tile_scratch(int64_t nrows, int64_t splits, int64_t n);

/* 1 and *t when stream kernel k has the tile's form, else 0 (the one-row
 * form then stays, its dot product a kernel of its own) */
int sch_stream_tile_of(const sch_program *p, const sch_kernel *k, sch_stream_tile *t);
/* 1 when tile t has the bf16 form's shapes (emit_stream_tile.c): d a
 * multiple of 32 (pairs of 16-lane bf16 products) up to 1024, the values a
 * multiple of 16, keys and values f32 */
int sch_stream_tile_bf16_fits(const sch_stream_tile *t);
/* 1 when program p runs stream tiles with both bodies (SCH_STREAM_BF16_BOTH)
 * and at least one of them has the bf16 form's shapes: a launch flag
 * (CG_KF_BF16) then selects the bf16 products */
int sch_stream_bf16_selectable(const sch_program *p);

#endif
