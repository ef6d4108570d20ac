/* tok_impl — the tokenizer's tables, shared by its three modules: tok.c
 * (loading, the string and merge maps, accessors), tok_encode.c (SPM, the
 * BPE pre-tokenizer and merges, the special-token partition) and
 * tok_decode.c (rendering and streaming). Not for use outside engine/tok*.c:
 * engine/tok.h is the interface; tok.c's header says what the code does. */
#ifndef INFERD_ENGINE_TOK_IMPL_H
#define INFERD_ENGINE_TOK_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"
#include "engine/tok.h"

/* token_type values of the GGUF format */
enum {
    TOK_T_UNDEFINED = 0,
    TOK_T_NORMAL = 1,
    TOK_T_UNKNOWN = 2,
    TOK_T_CONTROL = 3,
    TOK_T_USER = 4,
    TOK_T_UNUSED = 5,
    TOK_T_BYTE = 6,
};

enum tok_pre { TOK_PRE_GPT2 = 0, TOK_PRE_LLAMA3 = 1, TOK_PRE_QWEN2 = 2 };

/* A vocab string longer than this is refused: decoders size their buffers
 * from the longest piece, and no real vocabulary comes close. */
#define TOK_MAX_PIECE 4096
/* Vocab size cap: ids are int32 and pseudo ids live above n_vocab. */
#define TOK_MAX_VOCAB (1 << 26)

struct tok_slot { /* string map slot: id < 0 is empty */
    uint32_t hash;
    int32_t id;
};

struct tok_pair { /* merge map slot: key UINT64_MAX is empty */
    uint64_t key; /* left id << 32 | right id */
    int32_t rank;
    int32_t result; /* id of the merged string */
};

struct tok {
    int kind;
    int pre;
    int32_t n_vocab;
    /* strings: [0, n_vocab) the vocab, [n_vocab, n_str) merge-only strings */
    int32_t n_str, cap_str;
    struct gguf_str *str;
    char **owned; /* malloc'd merge-only strings */
    int32_t n_owned, cap_owned;
    float *score;  /* [n_vocab], SPM merge priority (0 when absent) */
    uint8_t *type; /* [n_vocab], TOK_T_* */
    uint8_t *eog;  /* [n_vocab] */
    /* text -> id (vocab and merge-only strings; the last duplicate wins) */
    struct tok_slot *map;
    uint32_t map_mask, map_count;
    /* BPE merges: (left, right) -> rank, result */
    struct tok_pair *pairs;
    uint32_t pair_mask;
    /* SPM: byte fallback token per byte; BPE: the token of the byte-level
     * character of each byte (initial symbols). -1: none. */
    int32_t byte_id[256];
    /* BPE: byte-level character of each byte, and the one-byte tokens used
     * when a merged string is not a token (llama.cpp's last resort) */
    char bchar[256][2];
    uint8_t bchar_len[256];
    int16_t cp_byte[324]; /* byte-level code point -> byte, -1: none */
    int32_t single_id[256];
    /* rendered bytes of every token (control tokens: their text) */
    char *dec;
    uint32_t *dec_off; /* [n_vocab + 1] */
    size_t max_dec;
    /* special tokens (control, user-defined, unknown), sorted by bytes */
    int32_t *spec;
    int32_t *spec_prio; /* per entry of spec: rank by (length desc, id) */
    int32_t n_spec;
    int32_t spec_lo[257]; /* entries with first byte c: [spec_lo[c], spec_lo[c+1]) */
    uint8_t first_all[256], first_user[256];
    int n_user;
    int32_t bos, eos, eot, eom, unk, pad;
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    int spm_split; /* SPM: no token has U+2581 after a character other than U+2581 */
};

/* The string map's hash of a..b (their concatenation; FNV-1a), inline:
 * tok.c's load prefetches the slots a merge will probe with it (loading
 * is bound by the map's cache misses), tok_map.c probes with it. */
static inline uint32_t tok_hash2(const char *a, size_t na, const char *b, size_t nb)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < na; i++)
        h = (h ^ (unsigned char)a[i]) * 16777619u;
    for (size_t i = 0; i < nb; i++)
        h = (h ^ (unsigned char)b[i]) * 16777619u;
    return h;
}

/* tok_map.c: the id of the string a..b (their concatenation), or -1; of one
 * string; the merge of (l, r) or NULL */
int32_t tok_map_find2(const struct tok *t, const char *a, size_t na, const char *b, size_t nb);
int32_t tok_map_find(const struct tok *t, const char *s, size_t n);
const struct tok_pair *tok_pair_find(const struct tok *t, int32_t l, int32_t r);
/* tok_map.c, for tok.c's load: map string id's text to id (the last of
 * duplicates wins); the id of a..b, appended as a merge-only string when
 * absent (0 or INF_ENOMEM); enter the merge (l, r) -> res of rank (a
 * repeated merge keeps its first); a table size (a power of two >= n, at
 * least 16) */
int tok_map_put(struct tok *t, int32_t id);
int tok_map_str_id(struct tok *t, const char *a, size_t na, const char *b, size_t nb, int32_t *id);
void tok_map_pair_add(struct tok *t, int32_t l, int32_t r, int32_t rank, int32_t res);
uint32_t tok_map_pow2(uint64_t n);

#endif
