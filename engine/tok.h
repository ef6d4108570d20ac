/* tok — the tokenizer a GGUF file defines (tokenizer.ggml.* keys).
 *
 * SPM (tokenizer.ggml.model = "llama"): sentencepiece merge by scores, the
 * leading-space rule, byte fallback (<0xNN>), unknown token.
 * BPE (tokenizer.ggml.model = "gpt2"): byte-level BPE over the merges list,
 * with the pre-tokenizer split named by tokenizer.ggml.pre ("llama-bpe",
 * "qwen2", ...). Special (control / user-defined) tokens are matched as whole
 * tokens only when parse_special is asked for, except user-defined tokens,
 * which belong to the vocabulary and are always matched (llama.cpp and HF
 * tokenizers do the same; control tokens like <|im_start|> stay plain text).
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
int32_t tok_unk(const struct tok *t); /* -1 when none */
int32_t tok_pad(const struct tok *t); /* -1 when none */
/* SPM: a space is put before the text (tokenizer.ggml.add_space_prefix). */
int tok_add_space_prefix(const struct tok *t);
/* Id of the vocab entry whose raw string is exactly text[0..len), or -1. */
int32_t tok_lookup(const struct tok *t, const char *text, size_t len);
/* Longest rendering of one token in bytes (tok_token_bytes with render_special). */
size_t tok_max_token_bytes(const struct tok *t);

/* Text -> ids. add_special adds BOS/EOS as the GGUF says; parse_special
 * matches special-token text as those tokens. (llama.cpp's reference prompts
 * in ../shared/reference were tokenized with parse_special on: a Qwen2 chat
 * prompt's <|im_start|> is id 151644 there; serve untrusted text with it
 * off, ROBUSTNESS 22.) Writes at most cap ids; *n_out gets the total count.
 * Returns 0, or INF_ETOOBIG when cap was too small (*n_out then says how
 * many are needed), INF_EINVAL, or INF_ENOMEM. Never reads past len; invalid
 * UTF-8 does not crash and stays lossless (bad bytes are tokenized as
 * bytes). Scratch memory is allocated per call: about 50 bytes per byte of
 * the longest word (BPE) or of the longest run between spaces (SPM). */
int tok_encode(const struct tok *t, const char *text, size_t len, int add_special,
               int parse_special, int32_t *out, size_t cap, size_t *n_out);

/* tok_encode with parse_special on, but a special token's text is matched
 * only where every byte of it has allow[i] != 0 (user-defined tokens are
 * matched everywhere, as always). For chat prompts: the template's own
 * markers (allow 1) become special tokens, message content (allow 0) stays
 * text even when it spells <|im_start|>; the text between matches is
 * tokenized exactly as tok_encode would. allow has len bytes. */
int tok_encode_masked(const struct tok *t, const char *text, size_t len, int add_special, const uint8_t *allow,
                      int32_t *out, size_t cap, size_t *n_out);

/* BPE only: the pre-tokenizer's split of text[0..len) into words (no
 * special-token matching): ends[i] is the byte offset where word i ends.
 * Writes at most cap offsets; *n_out gets the word count. 0, INF_ETOOBIG
 * (cap too small) or INF_EUNSUPPORTED (SPM). For tests and debugging. */
int tok_pre_split(const struct tok *t, const char *text, size_t len, size_t *ends, size_t cap, size_t *n_out);

/* The raw vocab string of id (as stored in the file), or NULL when out of range. */
const char *tok_piece(const struct tok *t, int32_t id, size_t *len);

/* Bytes that id stands for (SPM: '\xe2\x96\x81' -> ' ', <0xNN> -> byte;
 * BPE: the GPT-2 byte mapping undone). Control and unknown tokens give their
 * text only when render_special is set, else nothing; user-defined tokens
 * always give their text (they are encoded from plain text); unused/undefined
 * tokens give nothing. Returns the byte count (may exceed cap, in which case
 * only cap bytes are written), or INF_EINVAL for an id out of range. */
int tok_token_bytes(const struct tok *t, int32_t id, int render_special, char *buf, size_t cap);

/* Ids -> text, the whole sequence at once. strip_leading_space undoes the SPM
 * space prefix: one leading space of the first token that is not a control
 * token (so detokenize(tokenize(s)) == s); no effect for BPE. Invalid UTF-8
 * is kept as it is; ids out of range are skipped. Returns bytes written (or
 * needed, like snprintf); out is NUL-terminated when cap > that count. */
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
 * (at most cap bytes; cap >= tok_stream_cap(t) is always enough) and returns
 * their byte count, or INF_EINVAL (bad id) / INF_ETOOBIG (cap too small:
 * nothing was consumed, the state is unchanged). */
int tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t cap);
/* An out capacity that always fits one push: 3 * (longest token + 3). */
size_t tok_stream_cap(const struct tok *t);
/* End of stream: emit what is pending (an incomplete sequence as one U+FFFD;
 * needs cap >= 3). */
int tok_stream_flush(struct tok_stream *s, char *out, size_t cap);

#endif
