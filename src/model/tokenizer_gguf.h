/* tokenizer_gguf.h — a tokenizer built from a GGUF file's tokenizer.ggml.*
 * metadata (the tokenizer itself, tokenizer.h, knows nothing about GGUF).
 *
 * Keys read (llama.cpp's names and meanings):
 *   tokenizer.ggml.model        "llama" -> SentencePiece-style, "gpt2" -> byte-level BPE (required)
 *   tokenizer.ggml.pre          BPE pre-tokenizer name (absent: gpt2)
 *   tokenizer.ggml.tokens       string[n_vocab] (required)
 *   tokenizer.ggml.scores       f32[n_vocab] (optional)
 *   tokenizer.ggml.token_type   i32[n_vocab] (optional)
 *   tokenizer.ggml.merges       string[] "left right" (BPE)
 *   tokenizer.ggml.{bos,eos,unknown,padding,eot}_token_id
 *   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix
 * Defaults for absent flags follow llama.cpp: SPM adds BOS and a space
 * prefix; BPE adds neither; nobody adds EOS.
 *
 * Every count, type and id is checked; a bad file is an error message naming
 * the key, never a crash. The tokenizer copies what it needs, so the file may
 * be closed afterwards.
 */
#ifndef KILN_TOKENIZER_GGUF_H
#define KILN_TOKENIZER_GGUF_H

#include <stddef.h>

#include "gguf.h"
#include "tokenizer.h"

/* build the file's tokenizer; on failure *out is NULL and err says why */
kiln_status tok_from_gguf(gguf_file *f, tokenizer **out, char *err, size_t cap);

#endif
