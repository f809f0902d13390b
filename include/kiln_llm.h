/* kiln_llm.h — the public API of kiln's language-model layer: load a GGUF
 * model (compiled, or on the reference interpreter), tokenize and
 * detokenize, run a batch of tokens and read the logits, sample, apply a
 * chat template, and generate text one piece at a time. Include after
 * kiln.h (it includes it).
 *
 * A kiln_llm owns the model file, the graph, the compiled program, the KV
 * cache, the tokenizer and one generation in progress. It is not thread
 * safe: use one kiln_llm per thread (or lock around it). Every function
 * takes any pointer it is given as is: NULL handles return KILN_ERR_INVALID
 * (or 0 / -1 where the result is a count), never crash.
 *
 * Errors: functions that take err/errlen write the message there (always
 * NUL-terminated when errlen > 0); functions on an open model leave the
 * message of their last failure in kiln_llm_error(m).
 *
 * Strings handed out by kiln_llm_generate and kiln_llm_chat_apply are
 * malloc'd: release them with kiln_free (include/kiln.h).
 */
#ifndef KILN_LLM_H
#define KILN_LLM_H

#include <stddef.h>
#include <stdint.h>

#include "kiln.h"
#include "kiln_compile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_llm kiln_llm;
typedef struct kiln_sampler kiln_sampler;

/* ---- loading -------------------------------------------------------------- */

/* called during kiln_llm_load: stage is "load" (reading the file, building
 * and compiling the graph), then "tune" (the first-run schedule search, when
 * one runs), then "ready"; fraction is the part of the stage done, 0 .. 1 */
typedef void (*kiln_llm_progress_fn)(void *ctx, const char *stage, double fraction);

typedef struct kiln_llm_params {
    int64_t n_ctx;          /* KV cache rows; 0 = min(training context, 4096) */
    int threads;            /* worker threads; 0 = all online cores */
    int interpreter;        /* 1: the reference interpreter instead of compiled code (slow, exact) */
    int use_mmap;           /* 1: map the file instead of reading it into memory */
    kiln_dtype kv_dtype;    /* KILN_F32 (default) or KILN_F16 (half the bytes); exact keeps f32 */
    int exact;              /* 1: kiln's exact evaluation (f32 contractions, no tuning DB, no search) */
    double tune_s;          /* seconds of schedule search when this machine has no records for the
                               model (as on `kiln run`'s first run); < 0: $KILN_TUNE, else 30; 0: none */
    kiln_llm_progress_fn progress; /* NULL: silent */
    void *progress_ctx;
} kiln_llm_params;

/* the defaults above, which are `kiln run`'s */
KILN_API kiln_llm_params kiln_llm_default_params(void);

/* open path, build and compile its graph, bind its weights, read its
 * tokenizer. p may be NULL (the defaults). On failure *out is NULL and err
 * says why. */
KILN_API kiln_status kiln_llm_load(const char *path, const kiln_llm_params *p, kiln_llm **out, char *err,
                                   size_t errlen);
KILN_API void kiln_llm_free(kiln_llm *m);
/* the message of the last failed call on m ("" if none) */
KILN_API const char *kiln_llm_error(const kiln_llm *m);

KILN_API int64_t kiln_llm_n_vocab(const kiln_llm *m);
KILN_API int64_t kiln_llm_n_ctx(const kiln_llm *m);
/* the bytes of the model's KV cache (every layer's keys and values for
 * n_ctx rows, in kv_dtype); 0 for NULL */
KILN_API size_t kiln_llm_kv_bytes(const kiln_llm *m);
KILN_API int kiln_llm_is_compiled(const kiln_llm *m);
/* general.architecture ("llama", "qwen2", "qwen3", "gemma3"); "" for NULL */
KILN_API const char *kiln_llm_arch(const kiln_llm *m);
KILN_API int32_t kiln_llm_bos(const kiln_llm *m); /* -1: none */
KILN_API int32_t kiln_llm_eos(const kiln_llm *m); /* -1: none */
/* 1 when id ends a generation (eos, eot, <end_of_turn>, <|im_end|>, ...) */
KILN_API int kiln_llm_is_eog(const kiln_llm *m, int32_t id);

/* search the compiled model's schedules for up to budget_s seconds, spent
 * where its time goes (a decode step and a prefill), whether or not this
 * machine has records already (`kiln tune -m`); the winners go to the
 * tuning DB and the program is recompiled with them. out (may be NULL)
 * gets the summary. KILN_ERR_INVALID on an interpreter model. */
KILN_API kiln_status kiln_llm_tune(kiln_llm *m, double budget_s, kiln_search_status *out);

/* ---- text <-> tokens ------------------------------------------------------- */

/* Encode len bytes of text. add_special: BOS/EOS as the model's tokenizer
 * says; parse_special: control tokens written in the text become single
 * tokens. Writes at most cap ids and returns the full count (call with cap 0
 * to size the buffer), or -1 (text too long, NULL model). */
KILN_API int kiln_llm_tokenize(kiln_llm *m, const char *text, size_t len, int add_special, int parse_special,
                               int32_t *out, int cap);
/* Decode ids into buf (at most cap bytes, not NUL-terminated) and return
 * the full byte length, or -1 when an id is out of range. special: control
 * tokens appear as their text. */
KILN_API long kiln_llm_detokenize(kiln_llm *m, const int32_t *ids, int n, int special, char *buf, size_t cap);
/* the raw bytes of one token (may be part of a UTF-8 character); full
 * length, or -1 when id is out of range */
KILN_API int kiln_llm_token_piece(kiln_llm *m, int32_t id, int special, char *buf, int cap);

/* ---- the forward pass ------------------------------------------------------ */

/* Run n tokens at positions pos .. pos+n-1 (the cache must hold 0 .. pos-1:
 * a prefill at pos 0, then one call per new token) and write the logits of
 * the last one (kiln_llm_n_vocab floats) to logits. Bad ids or positions are
 * KILN_ERR_RANGE / KILN_ERR_INVALID and leave the cache as it was. */
KILN_API kiln_status kiln_llm_decode(kiln_llm *m, const int32_t *tokens, int n, int pos, float *logits);
/* forget the KV cache (and any generation in progress) */
KILN_API void kiln_llm_reset(kiln_llm *m);

/* Several sequences (what kiln serve's slots do): kiln_llm_slots gives the
 * model n_slots more caches, views of one buffer per layer (calling it again
 * replaces them, empty). kiln_llm_decode_slot is kiln_llm_decode on slot
 * slot's cache; kiln_llm_decode_batch runs one token for each of nb rows in
 * one batched pass (compiled at its first call): row r is token tokens[r] at
 * position pos[r] of slot slots[r] (distinct slots, each holding 0 .. pos[r]-1)
 * and its logits are logits[r * n_vocab ..], bit for bit the logits
 * kiln_llm_decode_slot gives for the same token: with more than one slot,
 * every one-token decode of the model (its own cache included) runs the
 * streaming attention form the batched pass runs, whatever form the tuning
 * DB chose for decode. Out-of-range rows are KILN_ERR_RANGE before anything
 * runs. */
KILN_API kiln_status kiln_llm_slots(kiln_llm *m, int n_slots);
KILN_API kiln_status kiln_llm_decode_slot(kiln_llm *m, int slot, const int32_t *tokens, int n, int pos, float *logits);
KILN_API kiln_status kiln_llm_decode_batch(kiln_llm *m, int nb, const int32_t *slots, const int32_t *tokens,
                                           const int32_t *pos, float *logits);

/* ---- sampling -------------------------------------------------------------- */

typedef struct kiln_gen_params {
    int max_tokens;         /* tokens to generate at most (default 64) */
    float temperature;      /* <= 0: greedy (default 0.8) */
    int32_t top_k;          /* <= 0: off (default 40) */
    float top_p;            /* >= 1: off (default 0.95) */
    float min_p;            /* <= 0: off (default 0.05) */
    float repeat_penalty;   /* 1: off (default 1) */
    int32_t repeat_last_n;  /* tokens the penalty looks back at (default 64) */
    uint64_t seed;          /* sampling seed (default 42) */
    int chat;               /* 1: wrap the prompt as one user turn of the model's chat template */
    const char *chat_template; /* with chat: a template name that overrides the model's ("gemma",
                                  "chatml", "llama3", "llama2"); NULL: the model's own */
} kiln_gen_params;

/* the defaults above (`kiln run`'s, with a fixed seed) */
KILN_API kiln_gen_params kiln_gen_default_params(void);

/* a sampler for a vocabulary of n_vocab tokens, from p's sampling fields
 * (repetition penalty, then greedy or top-k, temperature, top-p, min-p and a
 * draw from a seeded RNG: src/model/sampler.h). NULL on bad parameters
 * (err says why). */
KILN_API kiln_sampler *kiln_sampler_new(const kiln_gen_params *p, int32_t n_vocab, char *err, size_t errlen);
KILN_API void kiln_sampler_free(kiln_sampler *s);
/* the chosen id for logits[n_vocab] (not modified); -1 for NULL arguments */
KILN_API int32_t kiln_sampler_sample(kiln_sampler *s, const float *logits);
/* record a token for the repetition penalty (prompt tokens and each choice) */
KILN_API void kiln_sampler_accept(kiln_sampler *s, int32_t id);

/* ---- chat templates -------------------------------------------------------- */

typedef struct kiln_chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} kiln_chat_msg;

/* Render msgs as the model's chat template does (template_name non-NULL
 * forces one of "gemma", "chatml", "llama3", "llama2"). add_generation_prompt
 * appends the opening of the assistant's turn. On KILN_OK *out is a
 * malloc'd NUL-terminated string (kiln_free). */
KILN_API kiln_status kiln_llm_chat_apply(kiln_llm *m, const char *template_name, const kiln_chat_msg *msgs,
                                         int n_msgs, int add_generation_prompt, char **out);

/* ---- generation -------------------------------------------------------------- */

/* One generation at a time per model: kiln_llm_start resets the cache,
 * tokenizes the prompt (with the chat template when p->chat) and runs the
 * prefill; each kiln_llm_next samples one token, hands out its text and
 * runs its decode step. Generation ends at an end-of-generation token,
 * after max_tokens, or when the context is full. */
KILN_API kiln_status kiln_llm_start(kiln_llm *m, const char *prompt, const kiln_gen_params *p);

typedef struct kiln_piece {
    int32_t id;         /* the token sampled; -1 when done */
    const char *text;   /* its complete UTF-8 text (valid until the next call on m; may be empty) */
    size_t len;
    int done;           /* 1: the generation ended (text holds what was held back, if anything) */
} kiln_piece;
/* the next piece of the generation kiln_llm_start began; after done, or
 * without a start, KILN_ERR_INVALID */
KILN_API kiln_status kiln_llm_next(kiln_llm *m, kiln_piece *out);

/* start + next until done: the generated text as a malloc'd string
 * (kiln_free), without the prompt */
KILN_API kiln_status kiln_llm_generate(kiln_llm *m, const char *prompt, const kiln_gen_params *p, char **text);

typedef struct kiln_llm_stats {
    double load_s;          /* kiln_llm_load, the first-run search included */
    int prompt_tokens;      /* of the last generation */
    double prompt_s;        /* its prefill */
    int generated_tokens;
    int decode_steps;
    double gen_s;           /* sampling and decode steps */
    double prompt_tps, gen_tps; /* tokens per second (0 when nothing was timed) */
    const char *stop;       /* "length", "eos", "context", "" while running */
} kiln_llm_stats;
/* statistics of the last (or current) generation */
KILN_API kiln_status kiln_llm_stats_get(const kiln_llm *m, kiln_llm_stats *out);
/* the ids of the last generation's prompt and generated tokens (valid until
 * the next start or free); counts in kiln_llm_stats */
KILN_API const int32_t *kiln_llm_prompt_ids(const kiln_llm *m);
KILN_API const int32_t *kiln_llm_generated_ids(const kiln_llm *m);

#ifdef __cplusplus
}
#endif
#endif
