/* tok — the tokenizer a GGUF file defines (tokenizer.ggml.* keys).
 *
 * SPM (tokenizer.ggml.model = "llama"): sentencepiece merge by scores, the
 * leading-space rule, byte fallback (<0xNN>), unknown token.
 * BPE (tokenizer.ggml.model = "gpt2"): byte-level BPE over the merges list,
 * with the pre-tokenizer split named by tokenizer.ggml.pre ("llama-bpe",
 * "qwen2", ...). Special (control / user-defined) tokens are matched as whole
 * tokens only when parse_special is asked for.
 *
 * A struct tok is immutable after tok_load: any thread may encode/decode
 * concurrently. A struct tok_stream belongs to one request (one thread).
 */
#ifndef INFERD_TOK_H
#define INFERD_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct gguf_file;
struct tok;

enum tok_kind { TOK_KIND_SPM = 1, TOK_KIND_BPE = 2 };

/* Build from the file's tokenizer keys; validates them (ROBUSTNESS 12). The
 * tok keeps pointers into f's mapping: f must outlive it. */
int tok_load(const struct gguf_file *f, struct tok **out, struct inf_error *err);
void tok_free(struct tok *t); /* accepts NULL */

int tok_kind(const struct tok *t);
int32_t tok_n_vocab(const struct tok *t);
int32_t tok_bos(const struct tok *t); /* -1 when the model has none */
int32_t tok_eos(const struct tok *t); /* -1 when none */
int32_t tok_eot(const struct tok *t); /* -1 when none */
/* 1 for tokens that end generation (EOS, EOT, <|im_end|>-style eog tokens). */
int tok_is_eog(const struct tok *t, int32_t id);
/* 1 for control / user-defined tokens (rendered only when asked for). */
int tok_is_special(const struct tok *t, int32_t id);
int tok_add_bos(const struct tok *t);
int tok_add_eos(const struct tok *t);

/* Text -> ids. add_special adds BOS/EOS as the GGUF says; parse_special
 * matches special-token text as those tokens. Writes at most cap ids; *n_out
 * gets the total count. Returns 0, or INF_ETOOBIG when cap was too small
 * (*n_out then says how many are needed), or INF_EINVAL. Never reads past
 * len; invalid UTF-8 does not crash (bytes are tokenized as bytes). */
int tok_encode(const struct tok *t, const char *text, size_t len, int add_special,
               int parse_special, int32_t *out, size_t cap, size_t *n_out);

/* The raw vocab string of id (as stored in the file), or NULL when out of range. */
const char *tok_piece(const struct tok *t, int32_t id, size_t *len);

/* Bytes that id stands for (SPM: '\xe2\x96\x81' -> ' ', <0xNN> -> byte;
 * BPE: the GPT-2 byte mapping undone). Special tokens give their text only
 * when render_special is set, else nothing. Returns the byte count (may exceed
 * cap, in which case only cap bytes are written), or a negative INF_E* code. */
int tok_token_bytes(const struct tok *t, int32_t id, int render_special, char *buf, size_t cap);

/* Ids -> text, the whole sequence at once. strip_leading_space undoes the SPM
 * space prefix of the first token (so detokenize(tokenize(s)) == s). Invalid
 * UTF-8 is kept as it is. Returns bytes written (or needed, like snprintf). */
size_t tok_decode(const struct tok *t, const int32_t *ids, size_t n, int render_special,
                  int strip_leading_space, char *out, size_t cap);

/* Incremental, streaming-safe decoder: never emits part of a UTF-8 sequence;
 * bytes of a character split across tokens are held until it completes. An
 * invalid sequence is emitted as U+FFFD. No allocation. */
struct tok_stream {
    const struct tok *t;
    int render_special;
    unsigned char pending[8];
    int n_pending;
};
void tok_stream_init(struct tok_stream *s, const struct tok *t, int render_special);
/* Append the text of id; writes the complete characters now available to out
 * (at most cap bytes; cap >= 256 + 8 is always enough for one token of the
 * shipped vocabularies) and returns their byte count, or a negative code. */
int tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t cap);
/* End of stream: emit what is pending (incomplete sequences as U+FFFD). */
int tok_stream_flush(struct tok_stream *s, char *out, size_t cap);

#endif
