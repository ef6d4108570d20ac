/* tok — SPM and byte-level BPE tokenizers built from a GGUF's tokenizer.ggml.* keys.
 *
 * The behaviour is llama.cpp's (its test vectors and reference prompts are
 * the acceptance test), written from the algorithms, not from its code:
 *  - special-token partition: control/unknown tokens are matched only with
 *    parse_special; user-defined tokens are part of the vocabulary and are
 *    matched always (as llama.cpp and HF tokenizers do). Longer tokens win
 *    (length descending, then id), each claiming its leftmost non-overlapping
 *    occurrences in the text the longer ones left;
 *  - SPM: each raw fragment that starts the text or follows a special token
 *    gets a leading space (add_space_prefix), spaces become U+2581, then the
 *    bigram of highest score is merged first (ties: leftmost) over UTF-8
 *    characters; leftovers go through <0xNN> byte tokens, else the
 *    one-byte token, else the unknown token;
 *  - BPE: a hand-written matcher for the pre-tokenizer regex of
 *    tokenizer.ggml.pre splits a fragment into words; each word is mapped
 *    byte by byte to GPT-2's byte-level alphabet and merged lowest-rank pair
 *    first (ties: leftmost). Llama 3 ("llama-bpe") first looks the whole word
 *    up (ignore_merges).
 * Invalid UTF-8 is never an error and stays lossless (a deliberate
 * difference from llama.cpp, which is lossy there; valid UTF-8 is
 * unaffected): SPM makes each bad byte a symbol of its own (byte tokens);
 * the BPE splitter treats each bad byte as one "other" character and keeps
 * its byte (llama.cpp would turn it into U+FFFD).
 *
 * Invariants after tok_load: every id stored in a table is < n_vocab, or a
 * pseudo id >= n_vocab for a string that only merges name (never emitted);
 * every piece pointer points into the GGUF mapping or into memory owned here.
 * A struct tok is immutable afterwards; encode/decode allocate only
 * call-local scratch, so any thread may use one tok concurrently.
 */
#include "engine/tok.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/unicode.h"

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

/* ---- hashing and the string map ------------------------------------------ */

static uint32_t tok_hash2(const char *a, size_t na, const char *b, size_t nb)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < na; i++)
        h = (h ^ (unsigned char)a[i]) * 16777619u;
    for (size_t i = 0; i < nb; i++)
        h = (h ^ (unsigned char)b[i]) * 16777619u;
    return h;
}

static int tok_str_eq2(const struct gguf_str *s, const char *a, size_t na, const char *b, size_t nb)
{
    return s->len == na + nb && (na == 0 || memcmp(s->ptr, a, na) == 0) &&
           (nb == 0 || memcmp(s->ptr + na, b, nb) == 0);
}

/* id of the string a..b (concatenation), or -1 */
static int32_t map_find2(const struct tok *t, const char *a, size_t na, const char *b, size_t nb)
{
    uint32_t h = tok_hash2(a, na, b, nb);
    for (uint32_t i = h & t->map_mask;; i = (i + 1) & t->map_mask) {
        const struct tok_slot *s = &t->map[i];
        if (s->id < 0)
            return -1;
        if (s->hash == h && tok_str_eq2(&t->str[s->id], a, na, b, nb))
            return s->id;
    }
}

static int32_t map_find(const struct tok *t, const char *s, size_t n)
{
    return map_find2(t, s, n, NULL, 0);
}

static void map_insert_slot(struct tok_slot *map, uint32_t mask, uint32_t h, int32_t id)
{
    uint32_t i = h & mask;
    while (map[i].id >= 0)
        i = (i + 1) & mask;
    map[i].hash = h;
    map[i].id = id;
}

static int map_grow(struct tok *t)
{
    uint32_t cap = (t->map_mask + 1) * 2;
    struct tok_slot *m;
    if (t->map_mask >= UINT32_MAX / 4) /* cap would wrap */
        return INF_ENOMEM;
    m = malloc((size_t)cap * sizeof(*m));
    if (!m)
        return INF_ENOMEM;
    for (uint32_t i = 0; i < cap; i++)
        m[i].id = -1;
    for (uint32_t i = 0; i <= t->map_mask; i++)
        if (t->map[i].id >= 0)
            map_insert_slot(m, cap - 1, t->map[i].hash, t->map[i].id);
    free(t->map);
    t->map = m;
    t->map_mask = cap - 1;
    return 0;
}

/* Map the text of string id to id; a string already present is remapped
 * (so the last of duplicate vocab entries wins, as in llama.cpp). */
static int map_put(struct tok *t, int32_t id)
{
    const struct gguf_str *s = &t->str[id];
    uint32_t h = tok_hash2(s->ptr, s->len, NULL, 0);
    for (uint32_t i = h & t->map_mask;; i = (i + 1) & t->map_mask) {
        struct tok_slot *sl = &t->map[i];
        if (sl->id < 0)
            break;
        if (sl->hash == h && tok_str_eq2(&t->str[sl->id], s->ptr, s->len, NULL, 0)) {
            sl->id = id;
            return 0;
        }
    }
    if ((t->map_count + 1) * 4 > (t->map_mask + 1) * 3) {
        int rc = map_grow(t);
        if (rc)
            return rc;
    }
    map_insert_slot(t->map, t->map_mask, h, id);
    t->map_count++;
    return 0;
}

static uint32_t tok_mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static const struct tok_pair *pair_find(const struct tok *t, int32_t l, int32_t r)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint32_t i = tok_mix64(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const struct tok_pair *p = &t->pairs[i];
        if (p->key == UINT64_MAX)
            return NULL;
        if (p->key == key)
            return p;
    }
}

/* ---- loading ------------------------------------------------------------- */

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

/* Append a merge-only string (not in the vocab); *id gets its pseudo id. */
static int str_add_extra(struct tok *t, const char *a, size_t na, const char *b, size_t nb, int32_t *id)
{
    const char *p = a;
    if (t->n_str == t->cap_str) {
        int32_t cap = t->cap_str * 2;
        struct gguf_str *s = realloc(t->str, (size_t)cap * sizeof(*s));
        if (!s)
            return INF_ENOMEM;
        t->str = s;
        t->cap_str = cap;
    }
    if (nb) { /* a concatenation: keep a copy */
        char *c;
        if (t->n_owned == t->cap_owned) {
            int32_t cap = t->cap_owned ? t->cap_owned * 2 : 16;
            char **o = realloc(t->owned, (size_t)cap * sizeof(*o));
            if (!o)
                return INF_ENOMEM;
            t->owned = o;
            t->cap_owned = cap;
        }
        c = malloc(na + nb);
        if (!c)
            return INF_ENOMEM;
        memcpy(c, a, na);
        memcpy(c + na, b, nb);
        t->owned[t->n_owned++] = c;
        p = c;
    }
    t->str[t->n_str].ptr = p;
    t->str[t->n_str].len = na + nb;
    *id = t->n_str++;
    return map_put(t, *id);
}

static int str_id(struct tok *t, const char *a, size_t na, const char *b, size_t nb, int32_t *id)
{
    *id = map_find2(t, a, na, b, nb);
    if (*id >= 0)
        return 0;
    return str_add_extra(t, a, na, b, nb, id);
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
 * other 68 take code points 256, 257, ... in byte order. */
static void tok_build_byte_level(struct tok *t)
{
    uint32_t next = 256;
    for (int i = 0; i < 324; i++)
        t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        uint32_t cp = printable ? (uint32_t)b : next++;
        t->bchar_len[b] = (uint8_t)unicode_utf8_encode(cp, t->bchar[b]);
        t->cp_byte[cp] = (int16_t)b;
    }
}

/* Loading is bound by cache misses on the token map: ask for the slots a
 * merge a few places ahead will probe while this one is resolved. */
#define TOK_PREFETCH_AHEAD 8
static void merge_prefetch(const struct tok *t, const struct gguf_str *m)
{
    const char *s = m->ptr;
    uint64_t n = m->len, sp = 1;
    while (sp < n && s[sp] != ' ')
        sp++;
    if (sp + 1 >= n)
        return;
    __builtin_prefetch(&t->map[tok_hash2(s, sp, NULL, 0) & t->map_mask]);
    __builtin_prefetch(&t->map[tok_hash2(s + sp + 1, n - sp - 1, NULL, 0) & t->map_mask]);
    __builtin_prefetch(&t->map[tok_hash2(s, sp, s + sp + 1, n - sp - 1) & t->map_mask]);
}

static int tok_load_merges(struct tok *t, const struct gguf_file *f, struct inf_error *err)
{
    const struct gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.merges");
    struct gguf_str *m;
    int rc = 0;

    if (!kv)
        return inf_error_set(err, INF_EFORMAT, "tokenizer: BPE vocab without tokenizer.ggml.merges");
    if (kv->type != GGUF_T_ARRAY || kv->arr_type != GGUF_T_STRING)
        return inf_error_set(err, INF_ETYPE, "tokenizer: tokenizer.ggml.merges is %s%s%s, not an array of strings",
                             gguf_vtype_name(kv->type), kv->type == GGUF_T_ARRAY ? " of " : "",
                             kv->type == GGUF_T_ARRAY ? gguf_vtype_name(kv->arr_type) : "");
    if (kv->n > (uint64_t)INT32_MAX / 2)
        return inf_error_set(err, INF_EFORMAT, "tokenizer: %" PRIu64 " merges is too many", kv->n);
    m = malloc((kv->n ? kv->n : 1) * sizeof(*m));
    if (!m)
        return inf_error_set(err, INF_ENOMEM, "tokenizer: out of memory for %" PRIu64 " merges", kv->n);
    gguf_arr_strs(kv, m);
    t->pair_mask = pow2_at_least(kv->n + kv->n / 2 + 1) - 1;
    t->pairs = malloc(((size_t)t->pair_mask + 1) * sizeof(*t->pairs));
    if (!t->pairs) {
        free(m);
        return inf_error_set(err, INF_ENOMEM, "tokenizer: out of memory for the merge table");
    }
    for (uint32_t i = 0; i <= t->pair_mask; i++)
        t->pairs[i].key = UINT64_MAX;
    for (uint64_t r = 0; r < kv->n; r++) {
        const char *s = m[r].ptr;
        uint64_t n = m[r].len, sp = 1;
        int32_t a, b, res;
        if (r + TOK_PREFETCH_AHEAD < kv->n)
            merge_prefetch(t, &m[r + TOK_PREFETCH_AHEAD]);
        /* "left right": split at the first space after the first byte */
        while (sp < n && s[sp] != ' ')
            sp++;
        if (n < 3 || sp >= n - 1 || n - sp - 1 > TOK_MAX_PIECE || sp > TOK_MAX_PIECE) {
            rc = inf_error_set(err, INF_EFORMAT,
                               "tokenizer: tokenizer.ggml.merges[%" PRIu64 "] is not two tokens separated by a space",
                               r);
            break;
        }
        if ((rc = str_id(t, s, sp, NULL, 0, &a)) || (rc = str_id(t, s + sp + 1, n - sp - 1, NULL, 0, &b)) ||
            (rc = str_id(t, s, sp, s + sp + 1, n - sp - 1, &res))) {
            inf_error_set(err, rc, "tokenizer: out of memory while reading merges");
            break;
        }
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint32_t i = tok_mix64(key) & t->pair_mask;
        while (t->pairs[i].key != UINT64_MAX && t->pairs[i].key != key)
            i = (i + 1) & t->pair_mask;
        if (t->pairs[i].key == UINT64_MAX) { /* a repeated merge keeps its first rank */
            t->pairs[i].key = key;
            t->pairs[i].rank = (int32_t)r;
            t->pairs[i].result = res;
        }
    }
    free(m);
    return rc;
}

/* "<0xHH>" -> 0..255, else -1 */
static int tok_parse_byte(const struct gguf_str *s)
{
    int v = 0;
    if (s->len != 6 || memcmp(s->ptr, "<0x", 3) != 0 || s->ptr[5] != '>')
        return -1;
    for (int i = 3; i < 5; i++) {
        char c = s->ptr[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* A token id key: absent -> dflt; -1 (or u32 0xFFFFFFFF) -> none; else it
 * must name a token. */
static int tok_get_id(const struct tok *t, const struct gguf_file *f, const char *key, int32_t dflt,
                      int32_t *out, struct inf_error *err)
{
    int64_t v;
    int rc = gguf_get_int(f, key, &v);
    if (rc == INF_ENOTFOUND) {
        *out = dflt < t->n_vocab ? dflt : -1;
        return 0;
    }
    if (rc)
        return inf_error_set(err, INF_ETYPE, "tokenizer: %s is not an integer", key);
    if (v == -1 || v == (int64_t)UINT32_MAX) {
        *out = -1;
        return 0;
    }
    if (v < 0 || v >= t->n_vocab)
        return inf_error_set(err, INF_EFORMAT, "tokenizer: %s = %" PRId64 " is out of range (n_vocab %" PRId32 ")",
                             key, v, t->n_vocab);
    *out = (int32_t)v;
    return 0;
}

static int tok_get_flag(const struct gguf_file *f, const char *key, int dflt, int *out, int *present,
                        struct inf_error *err)
{
    int rc = gguf_get_bool(f, key, out);
    if (present)
        *present = rc == 0;
    if (rc == INF_ENOTFOUND) {
        *out = dflt;
        return 0;
    }
    if (rc)
        return inf_error_set(err, INF_ETYPE, "tokenizer: %s is not a bool", key);
    return 0;
}

/* Pieces as bytes: SPM turns U+2581 into spaces, BPE undoes the byte-level
 * alphabet; byte tokens give their byte; control/user/unknown their text. */
static int tok_build_dec(struct tok *t, struct inf_error *err)
{
    size_t total = 0, o = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        total += t->str[i].len;
    if (total > UINT32_MAX)
        return inf_error_set(err, INF_EFORMAT, "tokenizer: the vocab strings total %zu bytes (max 4 GiB)", total);
    t->dec = malloc(total ? total : 1); /* rendering never grows a piece */
    t->dec_off = malloc(((size_t)t->n_vocab + 1) * sizeof(*t->dec_off));
    if (!t->dec || !t->dec_off)
        return inf_error_set(err, INF_ENOMEM, "tokenizer: out of memory for decoded pieces");
    for (int32_t i = 0; i < t->n_vocab; i++) {
        const unsigned char *s = (const unsigned char *)t->str[i].ptr;
        size_t n = t->str[i].len, start = o;
        int ty = t->type[i], byte;
        t->dec_off[i] = (uint32_t)o;
        if (ty == TOK_T_BYTE && (byte = tok_parse_byte(&t->str[i])) >= 0) {
            t->dec[o++] = (char)byte;
        } else if (ty == TOK_T_CONTROL || ty == TOK_T_USER || ty == TOK_T_UNKNOWN || ty == TOK_T_BYTE) {
            memcpy(t->dec + o, s, n);
            o += n;
        } else if (t->kind == TOK_KIND_SPM) {
            for (size_t j = 0; j < n; j++) {
                if (j + 2 < n && s[j] == 0xE2 && s[j + 1] == 0x96 && s[j + 2] == 0x81) {
                    t->dec[o++] = ' ';
                    j += 2;
                } else {
                    t->dec[o++] = (char)s[j];
                }
            }
        } else {
            for (size_t j = 0; j < n;) {
                uint32_t cp;
                int d = unicode_utf8_decode(s + j, n - j, &cp);
                if (d > 0 && cp < 324 && t->cp_byte[cp] >= 0) {
                    t->dec[o++] = (char)t->cp_byte[cp];
                    j += (size_t)d;
                } else { /* not of the byte-level alphabet: keep it as it is */
                    size_t k = d > 0 ? (size_t)d : 1;
                    memcpy(t->dec + o, s + j, k);
                    o += k;
                    j += k;
                }
            }
        }
        if (o - start > t->max_dec)
            t->max_dec = o - start;
    }
    t->dec_off[t->n_vocab] = (uint32_t)o;
    return 0;
}

static int tok_spec_cmp_bytes(const struct tok *t, int32_t a, int32_t b)
{
    const struct gguf_str *x = &t->str[a], *y = &t->str[b];
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->ptr, y->ptr, n) : 0;
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* qsort has no context argument: sort index arrays with a small merge sort. */
static void tok_sort_ids(const struct tok *t, int32_t *v, int32_t *tmp, int32_t n, int by_len)
{
    if (n < 2)
        return;
    int32_t h = n / 2;
    tok_sort_ids(t, v, tmp, h, by_len);
    tok_sort_ids(t, v + h, tmp, n - h, by_len);
    int32_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int take_left;
        if (by_len) {
            uint64_t la = t->str[v[i]].len, lb = t->str[v[j]].len;
            take_left = la > lb || (la == lb && v[i] < v[j]);
        } else {
            take_left = tok_spec_cmp_bytes(t, v[i], v[j]) <= 0;
        }
        tmp[k++] = take_left ? v[i++] : v[j++];
    }
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof(*v));
}

static int tok_build_specials(struct tok *t, struct inf_error *err)
{
    int32_t n = 0, *prio_order, *tmp, *rank;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        if ((ty == TOK_T_CONTROL || ty == TOK_T_USER || ty == TOK_T_UNKNOWN) && t->str[i].len > 0)
            n++;
    }
    t->n_spec = n;
    t->spec = malloc(((size_t)n + 1) * sizeof(int32_t));
    t->spec_prio = malloc(((size_t)n + 1) * sizeof(int32_t));
    prio_order = malloc(((size_t)n + 1) * sizeof(int32_t));
    tmp = malloc(((size_t)n + 1) * sizeof(int32_t));
    rank = malloc(((size_t)t->n_vocab) * sizeof(int32_t));
    if (!t->spec || !t->spec_prio || !prio_order || !tmp || !rank) {
        free(prio_order);
        free(tmp);
        free(rank);
        return inf_error_set(err, INF_ENOMEM, "tokenizer: out of memory for special tokens");
    }
    n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        if ((ty == TOK_T_CONTROL || ty == TOK_T_USER || ty == TOK_T_UNKNOWN) && t->str[i].len > 0) {
            t->spec[n] = prio_order[n] = i;
            n++;
            t->first_all[(unsigned char)t->str[i].ptr[0]] = 1;
            if (ty == TOK_T_USER) {
                t->first_user[(unsigned char)t->str[i].ptr[0]] = 1;
                t->n_user++;
            }
        }
    }
    tok_sort_ids(t, prio_order, tmp, n, 1);
    for (int32_t i = 0; i < n; i++)
        rank[prio_order[i]] = i;
    tok_sort_ids(t, t->spec, tmp, n, 0);
    for (int32_t i = 0; i < n; i++)
        t->spec_prio[i] = rank[t->spec[i]];
    for (int c = 0, i = 0; c <= 256; c++) {
        while (i < n && (unsigned char)t->str[t->spec[i]].ptr[0] < c)
            i++;
        t->spec_lo[c] = i;
    }
    free(prio_order);
    free(tmp);
    free(rank);
    return 0;
}

/* End-of-generation tokens and the EOT/EOM ids llama.cpp infers from token
 * text when the file does not name them; such tokens count as control. */
static void tok_find_eog(struct tok *t)
{
    static const char *const eot_names[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>",  "<end_of_turn>",
                                            "<|endoftext|>", "<EOT>",      "_<EOT>",
                                            ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"),
                                            "<end_of_utterance>"};
    static const char *const eog_names[] = {"<|eot_id|>",    "<|im_end|>",      "<|end|>", "<|return|>",
                                            "<|call|>",      "<end_of_turn>",   "<|endoftext|>",
                                            "<|eom_id|>",    "<EOT>",           "_<EOT>",
                                            "<|end_of_text|>", "<end_of_utterance>"};
    int32_t id;
    /* llama.cpp makes a token it finds by name a control token */
    if (t->eot < 0) {
        for (size_t i = 0; i < sizeof(eot_names) / sizeof(eot_names[0]) && t->eot < 0; i++)
            if ((id = tok_lookup(t, eot_names[i], strlen(eot_names[i]))) >= 0) {
                t->eot = id;
                t->type[id] = TOK_T_CONTROL;
            }
    }
    if (t->eom < 0 && (id = tok_lookup(t, "<|eom_id|>", 10)) >= 0) {
        t->eom = id;
        t->type[id] = TOK_T_CONTROL;
    }
    for (size_t i = 0; i < sizeof(eog_names) / sizeof(eog_names[0]); i++)
        if ((id = tok_lookup(t, eog_names[i], strlen(eog_names[i]))) >= 0) {
            t->eog[id] = 1;
            t->type[id] = TOK_T_CONTROL;
        }
    if (t->eos >= 0)
        t->eog[t->eos] = 1;
    if (t->eot >= 0)
        t->eog[t->eot] = 1;
    if (t->eom >= 0)
        t->eog[t->eom] = 1;
}

static int tok_load_arrays(struct tok *t, const struct gguf_file *f, struct inf_error *err)
{
    const struct gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!kv)
        return inf_error_set(err, INF_EFORMAT, "tokenizer: missing tokenizer.ggml.tokens");
    if (kv->type != GGUF_T_ARRAY || kv->arr_type != GGUF_T_STRING)
        return inf_error_set(err, INF_ETYPE, "tokenizer: tokenizer.ggml.tokens is %s%s%s, not an array of strings",
                             gguf_vtype_name(kv->type), kv->type == GGUF_T_ARRAY ? " of " : "",
                             kv->type == GGUF_T_ARRAY ? gguf_vtype_name(kv->arr_type) : "");
    if (kv->n == 0)
        return inf_error_set(err, INF_EFORMAT, "tokenizer: empty vocab (tokenizer.ggml.tokens has no entries)");
    if (kv->n > TOK_MAX_VOCAB)
        return inf_error_set(err, INF_EFORMAT, "tokenizer: vocab of %" PRIu64 " tokens is too large", kv->n);
    t->n_vocab = (int32_t)kv->n;
    t->cap_str = t->n_vocab;
    t->str = malloc((size_t)t->cap_str * sizeof(*t->str));
    t->type = malloc((size_t)t->n_vocab);
    t->eog = calloc((size_t)t->n_vocab, 1);
    if (!t->str || !t->type || !t->eog)
        return inf_error_set(err, INF_ENOMEM, "tokenizer: out of memory for %" PRId32 " tokens", t->n_vocab);
    gguf_arr_strs(kv, t->str);
    t->n_str = t->n_vocab;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->str[i].len > TOK_MAX_PIECE)
            return inf_error_set(err, INF_EFORMAT, "tokenizer: token %" PRId32 " is %" PRIu64 " bytes long (max %d)", i,
                                 t->str[i].len, TOK_MAX_PIECE);

    /* token_type: optional (all normal), else one integer 0..6 per token */
    memset(t->type, TOK_T_NORMAL, (size_t)t->n_vocab);
    if ((kv = gguf_find_kv(f, "tokenizer.ggml.token_type"))) {
        if (kv->type != GGUF_T_ARRAY || kv->n != (uint64_t)t->n_vocab)
            return inf_error_set(err, INF_EFORMAT,
                                 "tokenizer: tokenizer.ggml.token_type must be an array of %" PRId32 " integers", t->n_vocab);
        for (int32_t i = 0; i < t->n_vocab; i++) {
            int64_t v;
            int rc = gguf_arr_int(kv, (uint64_t)i, &v);
            if (rc)
                return inf_error_set(err, INF_ETYPE, "tokenizer: tokenizer.ggml.token_type holds %s, not integers",
                                     gguf_vtype_name(kv->arr_type));
            if (v < TOK_T_UNDEFINED || v > TOK_T_BYTE)
                return inf_error_set(err, INF_EFORMAT, "tokenizer: token %" PRId32 " has unknown type %" PRId64, i, v);
            t->type[i] = (uint8_t)v;
            if (v == TOK_T_BYTE && tok_parse_byte(&t->str[i]) < 0)
                return inf_error_set(err, INF_EFORMAT, "tokenizer: byte token %" PRId32 " is '%.*s', not <0xHH>", i,
                                     (int)(t->str[i].len > 32 ? 32 : t->str[i].len), t->str[i].ptr);
        }
    }

    /* scores: optional (all 0), else one number per token */
    if ((kv = gguf_find_kv(f, "tokenizer.ggml.scores"))) {
        if (kv->type != GGUF_T_ARRAY || kv->n != (uint64_t)t->n_vocab)
            return inf_error_set(err, INF_EFORMAT,
                                 "tokenizer: tokenizer.ggml.scores must be an array of %" PRId32 " floats", t->n_vocab);
        t->score = malloc((size_t)t->n_vocab * sizeof(float));
        if (!t->score)
            return inf_error_set(err, INF_ENOMEM, "tokenizer: out of memory for scores");
        for (int32_t i = 0; i < t->n_vocab; i++) {
            if (gguf_arr_f32(kv, (uint64_t)i, &t->score[i]))
                return inf_error_set(err, INF_ETYPE, "tokenizer: tokenizer.ggml.scores holds %s, not numbers",
                                     gguf_vtype_name(kv->arr_type));
            if (isnan(t->score[i]))
                return inf_error_set(err, INF_EFORMAT, "tokenizer: score of token %" PRId32 " is NaN", i);
        }
    }
    return 0;
}

int tok_load(const struct gguf_file *f, struct tok **out, struct inf_error *err)
{
    struct tok *t;
    struct gguf_str model, pre;
    int rc, add_bos_set = 0;

    *out = NULL;
    rc = gguf_get_str(f, "tokenizer.ggml.model", &model);
    if (rc == INF_ENOTFOUND)
        return inf_error_set(err, INF_EFORMAT, "tokenizer: missing tokenizer.ggml.model");
    if (rc)
        return inf_error_set(err, INF_ETYPE, "tokenizer: tokenizer.ggml.model is not a string");
    t = calloc(1, sizeof(*t));
    if (!t)
        return inf_error_set(err, INF_ENOMEM, "tokenizer: out of memory");
    if (gguf_str_eq(model, "llama")) {
        t->kind = TOK_KIND_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        t->kind = TOK_KIND_BPE;
    } else {
        rc = inf_error_set(err, INF_EUNSUPPORTED, "tokenizer: model '%.*s' is not supported (llama, gpt2)",
                           (int)(model.len > 32 ? 32 : model.len), model.ptr);
        goto fail;
    }
    if ((rc = tok_load_arrays(t, f, err)))
        goto fail;

    t->map_mask = pow2_at_least((uint64_t)t->n_vocab * 2) - 1;
    t->map = malloc(((size_t)t->map_mask + 1) * sizeof(*t->map));
    if (!t->map) {
        rc = inf_error_set(err, INF_ENOMEM, "tokenizer: out of memory for the token map");
        goto fail;
    }
    for (uint32_t i = 0; i <= t->map_mask; i++)
        t->map[i].id = -1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (i + TOK_PREFETCH_AHEAD < t->n_vocab) {
            const struct gguf_str *a = &t->str[i + TOK_PREFETCH_AHEAD];
            __builtin_prefetch(&t->map[tok_hash2(a->ptr, a->len, NULL, 0) & t->map_mask]);
        }
        if ((rc = map_put(t, i))) {
            inf_error_set(err, rc, "tokenizer: out of memory for the token map");
            goto fail;
        }
    }

    /* special ids: llama.cpp's SPM defaults are <unk>=0 <s>=1 </s>=2 */
    t->eot = t->eom = -1;
    if ((rc = tok_get_id(t, f, "tokenizer.ggml.bos_token_id", t->kind == TOK_KIND_SPM ? 1 : -1, &t->bos, err)) ||
        (rc = tok_get_id(t, f, "tokenizer.ggml.eos_token_id", t->kind == TOK_KIND_SPM ? 2 : -1, &t->eos, err)) ||
        (rc = tok_get_id(t, f, "tokenizer.ggml.unknown_token_id", t->kind == TOK_KIND_SPM ? 0 : -1, &t->unk, err)) ||
        (rc = tok_get_id(t, f, "tokenizer.ggml.eot_token_id", -1, &t->eot, err)) ||
        (rc = tok_get_id(t, f, "tokenizer.ggml.eom_token_id", -1, &t->eom, err)))
        goto fail;
    /* padding is never emitted: an id outside the vocab only means "none" */
    if (tok_get_id(t, f, "tokenizer.ggml.padding_token_id", -1, &t->pad, NULL))
        t->pad = -1;

    if (t->kind == TOK_KIND_BPE) {
        rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre);
        if (rc == INF_ENOTFOUND || (rc == 0 && gguf_str_eq(pre, "default"))) {
            t->pre = TOK_PRE_GPT2;
        } else if (rc) {
            rc = inf_error_set(err, INF_ETYPE, "tokenizer: tokenizer.ggml.pre is not a string");
            goto fail;
        } else if (gguf_str_eq(pre, "llama-bpe") || gguf_str_eq(pre, "llama3") || gguf_str_eq(pre, "llama-v3")) {
            t->pre = TOK_PRE_LLAMA3;
            t->ignore_merges = 1;
        } else if (gguf_str_eq(pre, "qwen2") || gguf_str_eq(pre, "gpt2")) {
            t->pre = gguf_str_eq(pre, "qwen2") ? TOK_PRE_QWEN2 : TOK_PRE_GPT2;
        } else {
            rc = inf_error_set(err, INF_EUNSUPPORTED,
                               "tokenizer: pre-tokenizer '%.*s' is not supported (llama-bpe, qwen2, gpt2, default)",
                               (int)(pre.len > 32 ? 32 : pre.len), pre.ptr);
            goto fail;
        }
    }

    if ((rc = tok_get_flag(f, "tokenizer.ggml.add_bos_token",
                           t->kind == TOK_KIND_SPM || t->pre == TOK_PRE_LLAMA3, &t->add_bos, &add_bos_set, err)) ||
        (rc = tok_get_flag(f, "tokenizer.ggml.add_eos_token", 0, &t->add_eos, NULL, err)) ||
        (rc = tok_get_flag(f, "tokenizer.ggml.add_space_prefix", t->kind == TOK_KIND_SPM, &t->add_space_prefix,
                           NULL, err)))
        goto fail;
    if (t->add_bos && t->bos < 0) {
        if (add_bos_set) {
            rc = inf_error_set(err, INF_EFORMAT, "tokenizer: add_bos_token is set but the vocab has no BOS token");
            goto fail;
        }
        t->add_bos = 0;
    }
    if (t->add_eos && t->eos < 0) {
        rc = inf_error_set(err, INF_EFORMAT, "tokenizer: add_eos_token is set but the vocab has no EOS token");
        goto fail;
    }

    if (t->kind == TOK_KIND_BPE) {
        tok_build_byte_level(t);
        if ((rc = tok_load_merges(t, f, err)))
            goto fail;
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            int32_t id = map_find(t, t->bchar[b], t->bchar_len[b]);
            t->byte_id[b] = id; /* may be a merge-only pseudo id */
            id = map_find(t, &c, 1);
            t->single_id[b] = id < t->n_vocab ? id : -1;
        }
    } else {
        t->spm_split = 1;
        for (int32_t i = 0; i < t->n_vocab && t->spm_split; i++) {
            const char *p = t->str[i].ptr;
            size_t n = t->str[i].len;
            for (size_t j = 1; j + 3 <= n; j++)
                if (memcmp(p + j, "\xe2\x96\x81", 3) == 0 && (j < 3 || memcmp(p + j - 3, "\xe2\x96\x81", 3) != 0)) {
                    t->spm_split = 0;
                    break;
                }
        }
        for (int b = 0; b < 256; b++) {
            char buf[8], c = (char)b;
            static const char hex[] = "0123456789ABCDEF";
            int32_t id;
            memcpy(buf, "<0x", 3);
            buf[3] = hex[b >> 4];
            buf[4] = hex[b & 15];
            buf[5] = '>';
            id = map_find(t, buf, 6);
            if (id < 0)
                id = map_find(t, &c, 1);
            if (id < 0)
                id = t->unk;
            t->byte_id[b] = id;
            t->single_id[b] = -1;
        }
    }

    tok_find_eog(t);
    if ((rc = tok_build_specials(t, err)) || (rc = tok_build_dec(t, err)))
        goto fail;
    *out = t;
    return 0;
fail:
    tok_free(t);
    return rc;
}

void tok_free(struct tok *t)
{
    if (!t)
        return;
    for (int32_t i = 0; i < t->n_owned; i++)
        free(t->owned[i]);
    free(t->owned);
    free(t->str);
    free(t->score);
    free(t->type);
    free(t->eog);
    free(t->map);
    free(t->pairs);
    free(t->dec);
    free(t->dec_off);
    free(t->spec);
    free(t->spec_prio);
    free(t);
}

/* ---- accessors ------------------------------------------------------------ */

int tok_kind(const struct tok *t) { return t->kind; }
int32_t tok_n_vocab(const struct tok *t) { return t->n_vocab; }
int32_t tok_bos(const struct tok *t) { return t->bos; }
int32_t tok_eos(const struct tok *t) { return t->eos; }
int32_t tok_eot(const struct tok *t) { return t->eot; }
int32_t tok_unk(const struct tok *t) { return t->unk; }
int32_t tok_pad(const struct tok *t) { return t->pad; }
int tok_add_bos(const struct tok *t) { return t->add_bos; }
int tok_add_eos(const struct tok *t) { return t->add_eos; }
int tok_add_space_prefix(const struct tok *t) { return t->add_space_prefix; }

int tok_is_eog(const struct tok *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

int tok_is_special(const struct tok *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->type[id] == TOK_T_CONTROL || t->type[id] == TOK_T_USER);
}

const char *tok_piece(const struct tok *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab)
        return NULL;
    if (len)
        *len = t->str[id].len;
    return t->str[id].ptr;
}

int32_t tok_lookup(const struct tok *t, const char *text, size_t len)
{
    int32_t id = map_find(t, text, len);
    return id < t->n_vocab ? id : -1;
}

size_t tok_max_token_bytes(const struct tok *t)
{
    return t->max_dec;
}

size_t tok_stream_cap(const struct tok *t)
{
    /* pending (<= 3) + one piece, every byte of it possibly invalid (U+FFFD) */
    return 3 * (t->max_dec + 3);
}

/* ---- encoding: scratch ---------------------------------------------------- */

struct tok_sym {
    int32_t prev, next;
    uint32_t off, n; /* n == 0: merged into its left neighbour */
    int32_t id;      /* BPE: current string id */
};

struct tok_cand {
    float score; /* higher first (BPE: minus the rank) */
    int32_t left, right;
    uint32_t size;
    int32_t result;
};

struct tok_work {
    const struct tok *t;
    int32_t *out;
    size_t cap, n;
    int err;
    char *buf;
    size_t buf_cap;
    struct tok_sym *sym;
    size_t sym_cap;
    struct tok_cand *heap;
    size_t heap_n, heap_cap;
};

/* Make *p hold at least need elements of elem bytes (keeps the contents). */
static int work_grow(struct tok_work *w, void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 64;
    void *q;
    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    q = realloc(*p, c * elem);
    if (!q) {
        w->err = INF_ENOMEM;
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

static int work_reserve(struct tok_work *w, size_t nbuf, size_t nsym)
{
    if (work_grow(w, (void **)&w->buf, &w->buf_cap, nbuf, 1) ||
        work_grow(w, (void **)&w->sym, &w->sym_cap, nsym, sizeof(*w->sym)))
        return -1;
    return 0;
}

static void work_emit(struct tok_work *w, int32_t id)
{
    if (w->n < w->cap)
        w->out[w->n] = id;
    w->n++;
}

static int cand_better(const struct tok_cand *a, const struct tok_cand *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct tok_work *w, struct tok_cand c)
{
    struct tok_cand *h;
    size_t i;
    if (work_grow(w, (void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof(*h)))
        return;
    h = w->heap;
    i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_better(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static struct tok_cand heap_pop(struct tok_work *w)
{
    struct tok_cand *h = w->heap, top = h[0], last = h[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && cand_better(&h[c + 1], &h[c]))
            c++;
        if (!cand_better(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (n)
        h[i] = last;
    return top;
}

static void sym_merge(struct tok_sym *s, int32_t l, int32_t r)
{
    s[l].n += s[r].n;
    s[r].n = 0;
    s[l].next = s[r].next;
    if (s[r].next >= 0)
        s[s[r].next].prev = l;
}

/* ---- SPM ------------------------------------------------------------------ */

static void spm_try(struct tok_work *w, int32_t l, int32_t r)
{
    const struct tok *t = w->t;
    struct tok_cand c;
    int32_t id;
    if (l < 0 || r < 0)
        return;
    c.size = w->sym[l].n + w->sym[r].n;
    id = map_find(t, w->buf + w->sym[l].off, c.size);
    if (id < 0 || id >= t->n_vocab)
        return;
    c.score = t->score ? t->score[id] : 0.0f;
    c.left = l;
    c.right = r;
    c.result = id;
    heap_push(w, c);
}

/* Merge the symbols of buf[from, to) and emit their tokens. */
static void spm_chunk(struct tok_work *w, size_t from, size_t to)
{
    const struct tok *t = w->t;
    int32_t ns = 0;

    if (work_reserve(w, 0, to - from))
        return;
    for (size_t off = from; off < to; ns++) {
        /* one symbol per character; a byte of invalid UTF-8 is a symbol of
         * its own (llama.cpp trusts the lead byte and may swallow the next
         * characters into a byte-fallback run: lossy) */
        uint32_t cp;
        int d = unicode_utf8_decode((const unsigned char *)w->buf + off, to - off, &cp);
        size_t l = d > 0 ? (size_t)d : 1;
        w->sym[ns].prev = ns - 1;
        w->sym[ns].next = ns + 1;
        w->sym[ns].off = (uint32_t)off;
        w->sym[ns].n = (uint32_t)l;
        off += l;
    }
    w->sym[ns - 1].next = -1;
    w->heap_n = 0;
    for (int32_t i = 1; i < ns; i++)
        spm_try(w, i - 1, i);
    while (w->heap_n > 0 && !w->err) {
        struct tok_cand c = heap_pop(w);
        struct tok_sym *L = &w->sym[c.left], *R = &w->sym[c.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != c.size)
            continue; /* stale: one side has merged since */
        sym_merge(w->sym, c.left, c.right);
        spm_try(w, w->sym[c.left].prev, c.left);
        spm_try(w, c.left, w->sym[c.left].next);
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const struct tok_sym *y = &w->sym[i];
        int32_t id = map_find(t, w->buf + y->off, y->n);
        if (id >= 0 && id < t->n_vocab) {
            work_emit(w, id);
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t b = t->byte_id[(unsigned char)w->buf[y->off + j]];
            if (b >= 0)
                work_emit(w, b);
        }
    }
}

static int spm_is_space(const char *p)
{
    return memcmp(p, "\xe2\x96\x81", 3) == 0;
}

static void spm_fragment(struct tok_work *w, const char *text, size_t len, int prefix)
{
    size_t m = 0, from = 0;

    if (work_reserve(w, 3 * len + 3, 0))
        return;
    if (prefix) {
        memcpy(w->buf, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(w->buf + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            w->buf[m++] = text[i];
        }
    }
    if (m == 0)
        return;
    if (w->t->spm_split) {
        /* No token holds U+2581 after anything but U+2581 (checked at load),
         * so no merge crosses the start of a run of spaces: merging word by
         * word gives exactly what merging the whole fragment gives, with
         * small heaps instead of one as large as the text. */
        for (size_t p = 3; p + 3 <= m; p++)
            if (spm_is_space(w->buf + p) && !spm_is_space(w->buf + p - 3) && !w->err) {
                spm_chunk(w, from, p);
                from = p;
                p += 2;
            }
    }
    if (!w->err)
        spm_chunk(w, from, m);
}

/* ---- BPE: pre-tokenizer ----------------------------------------------------- */

enum { U_L, U_N, U_W, U_O }; /* letter, number, whitespace, anything else */

struct tok_unit {
    uint32_t cp; /* UINT32_MAX for a byte of invalid UTF-8 */
    uint32_t len;
    int cls;
};

static struct tok_unit pre_unit(const unsigned char *s, size_t n, size_t p)
{
    struct tok_unit u;
    uint32_t cp;
    int d = unicode_utf8_decode(s + p, n - p, &cp);
    unsigned props, cat;
    if (d <= 0) { /* one invalid byte is one "other" character */
        u.cp = UINT32_MAX;
        u.len = 1;
        u.cls = U_O;
        return u;
    }
    u.cp = cp;
    u.len = (uint32_t)d;
    props = unicode_props(cp);
    cat = props & UNICODE_CAT_MASK;
    if (props & UNICODE_WS)
        u.cls = U_W;
    else if (cat == UNICODE_L)
        u.cls = U_L;
    else if (cat == UNICODE_N)
        u.cls = U_N;
    else
        u.cls = U_O;
    return u;
}

/* end of the run of units of class cls starting at p */
static size_t pre_run(const unsigned char *s, size_t n, size_t p, int cls)
{
    while (p < n) {
        struct tok_unit u = pre_unit(s, n, p);
        if (u.cls != cls)
            break;
        p += u.len;
    }
    return p;
}

static uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* The whitespace alternatives: \s*[\r\n]+ (llama3/qwen2 only), then
 * \s+(?!\S) (a run followed by non-space gives back its last character),
 * then \s+. s[p] is whitespace. */
static size_t pre_space(const unsigned char *s, size_t n, size_t p, int with_newline_rule)
{
    size_t q = p, last = p, nl_end = 0;
    while (q < n) {
        struct tok_unit u = pre_unit(s, n, q);
        if (u.cls != U_W)
            break;
        if (u.cp == '\r' || u.cp == '\n')
            nl_end = q + u.len;
        last = q;
        q += u.len;
    }
    if (with_newline_rule && nl_end)
        return nl_end;
    if (q < n && last > p)
        return last;
    return q;
}

/* Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2: the same with \p{N} (one digit). Returns the end of the match at p. */
static size_t pre_llama3(const unsigned char *s, size_t n, size_t p, int max_digits)
{
    struct tok_unit u0 = pre_unit(s, n, p), u1;
    size_t p1 = p + u0.len;
    int have1 = p1 < n;
    if (have1)
        u1 = pre_unit(s, n, p1);
    else
        u1.cls = -1, u1.cp = UINT32_MAX, u1.len = 0;

    if (u0.cp == '\'' && have1) {
        uint32_t c1 = ascii_lower(u1.cp);
        size_t p2 = p1 + u1.len;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return p2;
        if (p2 < n) {
            struct tok_unit u2 = pre_unit(s, n, p2);
            uint32_t c2 = ascii_lower(u2.cp);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return p2 + u2.len;
        }
    }
    if (u0.cls == U_L)
        return pre_run(s, n, p1, U_L);
    if (u0.cp != '\r' && u0.cp != '\n' && u0.cls != U_N && u1.cls == U_L)
        return pre_run(s, n, p1 + u1.len, U_L);
    if (u0.cls == U_N) {
        size_t q = p1;
        for (int k = 1; k < max_digits && q < n; k++) {
            struct tok_unit u = pre_unit(s, n, q);
            if (u.cls != U_N)
                break;
            q += u.len;
        }
        return q;
    }
    if (u0.cls == U_O || (u0.cp == ' ' && u1.cls == U_O)) {
        size_t q = pre_run(s, n, u0.cls == U_O ? p : p1, U_O);
        while (q < n && (s[q] == '\r' || s[q] == '\n'))
            q++;
        return q;
    }
    return pre_space(s, n, p, 1);
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t pre_gpt2(const unsigned char *s, size_t n, size_t p)
{
    struct tok_unit u0 = pre_unit(s, n, p), u1;
    size_t p1 = p + u0.len;
    if (u0.cp == '\'' && p1 < n) {
        unsigned char c1 = s[p1], c2 = p1 + 1 < n ? s[p1 + 1] : 0;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return p1 + 1;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
            return p1 + 2;
    }
    if (u0.cls != U_W)
        return pre_run(s, n, p1, u0.cls);
    if (u0.cp == ' ' && p1 < n) {
        u1 = pre_unit(s, n, p1);
        if (u1.cls != U_W)
            return pre_run(s, n, p1 + u1.len, u1.cls);
    }
    return pre_space(s, n, p, 0);
}

int tok_pre_split(const struct tok *t, const char *text, size_t len, size_t *ends, size_t cap, size_t *n_out)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t p = 0, n = 0;
    *n_out = 0;
    if (t->kind != TOK_KIND_BPE)
        return INF_EUNSUPPORTED;
    while (p < len) {
        size_t e = t->pre == TOK_PRE_LLAMA3  ? pre_llama3(s, len, p, 3)
                   : t->pre == TOK_PRE_QWEN2 ? pre_llama3(s, len, p, 1)
                                             : pre_gpt2(s, len, p);
        if (n < cap)
            ends[n] = e;
        n++;
        p = e;
    }
    *n_out = n;
    return n > cap ? INF_ETOOBIG : 0;
}

/* ---- BPE: merges ------------------------------------------------------------ */

static void bpe_try(struct tok_work *w, int32_t l, int32_t r)
{
    const struct tok_pair *pr;
    struct tok_cand c;
    if (l < 0 || r < 0 || w->sym[l].id < 0 || w->sym[r].id < 0)
        return;
    pr = pair_find(w->t, w->sym[l].id, w->sym[r].id);
    if (!pr)
        return;
    c.score = -(float)pr->rank; /* exact: ranks < 2^24 */
    c.left = l;
    c.right = r;
    c.size = w->sym[l].n + w->sym[r].n;
    c.result = pr->result;
    heap_push(w, c);
}

static void bpe_word(struct tok_work *w, const unsigned char *s, size_t n)
{
    const struct tok *t = w->t;
    int32_t ns = (int32_t)n;

    if (t->ignore_merges || n == 1) {
        size_t m = 0;
        int32_t id;
        if (work_reserve(w, 2 * n, n))
            return;
        for (size_t i = 0; i < n; i++) {
            memcpy(w->buf + m, t->bchar[s[i]], t->bchar_len[s[i]]);
            m += t->bchar_len[s[i]];
        }
        id = map_find(t, w->buf, m);
        if (id >= 0 && id < t->n_vocab) {
            work_emit(w, id);
            return;
        }
    }
    if (work_reserve(w, 0, n))
        return;
    for (int32_t i = 0; i < ns; i++) {
        w->sym[i].prev = i - 1;
        w->sym[i].next = i + 1;
        w->sym[i].off = (uint32_t)i;
        w->sym[i].n = 1;
        w->sym[i].id = t->byte_id[s[i]];
    }
    w->sym[ns - 1].next = -1;
    w->heap_n = 0;
    for (int32_t i = 1; i < ns; i++)
        bpe_try(w, i - 1, i);
    while (w->heap_n > 0 && !w->err) {
        struct tok_cand c = heap_pop(w);
        struct tok_sym *L = &w->sym[c.left], *R = &w->sym[c.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != c.size)
            continue;
        sym_merge(w->sym, c.left, c.right);
        w->sym[c.left].id = c.result;
        bpe_try(w, w->sym[c.left].prev, c.left);
        bpe_try(w, c.left, w->sym[c.left].next);
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const struct tok_sym *y = &w->sym[i];
        if (y->id >= 0 && y->id < t->n_vocab) {
            work_emit(w, y->id);
            continue;
        }
        /* not a token (a broken vocab): one-byte tokens of its byte-level
         * text where they exist, as llama.cpp does */
        for (uint32_t j = 0; j < y->n; j++) {
            unsigned char b = s[y->off + j];
            for (int k = 0; k < t->bchar_len[b]; k++) {
                int32_t id = t->single_id[(unsigned char)t->bchar[b][k]];
                if (id >= 0)
                    work_emit(w, id);
            }
        }
    }
}

static void bpe_fragment(struct tok_work *w, const char *text, size_t len)
{
    const struct tok *t = w->t;
    const unsigned char *s = (const unsigned char *)text;
    size_t p = 0;
    while (p < len && !w->err) {
        size_t e = t->pre == TOK_PRE_LLAMA3  ? pre_llama3(s, len, p, 3)
                   : t->pre == TOK_PRE_QWEN2 ? pre_llama3(s, len, p, 1)
                                             : pre_gpt2(s, len, p);
        bpe_word(w, s + p, e - p);
        p = e;
    }
}

/* ---- special-token partition ------------------------------------------------ */

struct tok_match {
    uint32_t start, len;
    int32_t id, prio;
};

static int match_by_prio(const void *a, const void *b)
{
    const struct tok_match *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio < y->prio ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int match_by_start(const void *a, const void *b)
{
    const struct tok_match *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* 1 when every byte of [p, p + n) may be matched as a special token. */
static int tok_allowed(const uint8_t *allow, size_t p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!allow[p + i])
            return 0;
    return 1;
}

/* Occurrences of the special tokens that apply, then the ones that survive
 * llama.cpp's partition: tokens by priority, each taking its leftmost
 * occurrences that do not overlap text already taken. Sorted by start. */
static int tok_find_specials(const struct tok *t, const char *text, size_t len, int parse_special,
                             const uint8_t *allow, struct tok_match **out, size_t *n_out)
{
    const uint8_t *first = parse_special ? t->first_all : t->first_user;
    struct tok_match *m = NULL;
    size_t n = 0, cap = 0, k = 0;
    uint8_t *taken;

    *out = NULL;
    *n_out = 0;
    if (t->n_spec == 0 || (!parse_special && t->n_user == 0))
        return 0;
    for (size_t p = 0; p < len; p++) {
        unsigned char c = (unsigned char)text[p];
        if (!first[c])
            continue;
        for (int32_t i = t->spec_lo[c]; i < t->spec_lo[c + 1]; i++) {
            int32_t id = t->spec[i];
            const struct gguf_str *sp = &t->str[id];
            if (!parse_special && t->type[id] != TOK_T_USER)
                continue;
            if (sp->len > len - p || memcmp(sp->ptr, text + p, sp->len) != 0)
                continue;
            if (allow && t->type[id] != TOK_T_USER && !tok_allowed(allow, p, sp->len))
                continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                struct tok_match *nm = realloc(m, nc * sizeof(*m));
                if (!nm) {
                    free(m);
                    return INF_ENOMEM;
                }
                m = nm;
                cap = nc;
            }
            m[n].start = (uint32_t)p;
            m[n].len = (uint32_t)sp->len;
            m[n].id = id;
            m[n].prio = t->spec_prio[i];
            n++;
        }
    }
    if (n == 0) {
        free(m);
        return 0;
    }
    taken = calloc(len, 1);
    if (!taken) {
        free(m);
        return INF_ENOMEM;
    }
    qsort(m, n, sizeof(*m), match_by_prio);
    for (size_t i = 0; i < n; i++) {
        int free_span = 1;
        for (uint32_t j = 0; j < m[i].len && free_span; j++)
            free_span = !taken[m[i].start + j];
        if (!free_span)
            continue;
        memset(taken + m[i].start, 1, m[i].len);
        m[k++] = m[i];
    }
    free(taken);
    qsort(m, k, sizeof(*m), match_by_start);
    *out = m;
    *n_out = k;
    return 0;
}

/* ---- encode ------------------------------------------------------------------ */

static int tok_encode_impl(const struct tok *t, const char *text, size_t len, int add_special, int parse_special,
                           const uint8_t *allow, int32_t *out, size_t cap, size_t *n_out)
{
    struct tok_work w;
    struct tok_match *sp = NULL;
    size_t n_sp = 0, pos = 0;
    int prev_special = 1, rc;

    *n_out = 0;
    if (!text && len)
        return INF_EINVAL;
    if (len > UINT32_MAX / 4)
        return INF_ETOOBIG;
    memset(&w, 0, sizeof(w));
    w.t = t;
    w.out = out;
    w.cap = out ? cap : 0;
    if ((rc = tok_find_specials(t, text, len, parse_special, allow, &sp, &n_sp)))
        return rc;
    if (add_special && t->add_bos)
        work_emit(&w, t->bos);
    for (size_t i = 0; i <= n_sp && !w.err; i++) {
        size_t end = i < n_sp ? sp[i].start : len;
        if (end > pos) {
            if (t->kind == TOK_KIND_SPM)
                spm_fragment(&w, text + pos, end - pos, t->add_space_prefix && prev_special);
            else
                bpe_fragment(&w, text + pos, end - pos);
            prev_special = 0;
        }
        if (i < n_sp) {
            work_emit(&w, sp[i].id);
            prev_special = 1;
            pos = sp[i].start + sp[i].len;
        }
    }
    if (add_special && t->add_eos)
        work_emit(&w, t->eos);
    free(sp);
    free(w.buf);
    free(w.sym);
    free(w.heap);
    if (w.err)
        return w.err;
    *n_out = w.n;
    return w.n > w.cap ? INF_ETOOBIG : 0;
}

int tok_encode(const struct tok *t, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
               size_t cap, size_t *n_out)
{
    return tok_encode_impl(t, text, len, add_special, parse_special, NULL, out, cap, n_out);
}

int tok_encode_masked(const struct tok *t, const char *text, size_t len, int add_special, const uint8_t *allow,
                      int32_t *out, size_t cap, size_t *n_out)
{
    if (!allow && len)
        return INF_EINVAL;
    return tok_encode_impl(t, text, len, add_special, 1, allow, out, cap, n_out);
}

/* ---- decoding ------------------------------------------------------------------ */

/* The bytes id renders to (NULL/0 when it renders to nothing). */
static const char *tok_render(const struct tok *t, int32_t id, int render_special, size_t *n)
{
    int ty = t->type[id];
    *n = 0;
    if (ty == TOK_T_UNDEFINED || ty == TOK_T_UNUSED)
        return NULL;
    if (!render_special && (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN))
        return NULL;
    *n = t->dec_off[id + 1] - t->dec_off[id];
    return t->dec + t->dec_off[id];
}

int tok_token_bytes(const struct tok *t, int32_t id, int render_special, char *buf, size_t cap)
{
    size_t n;
    const char *p;
    if (id < 0 || id >= t->n_vocab)
        return INF_EINVAL;
    p = tok_render(t, id, render_special, &n);
    if (n && buf)
        memcpy(buf, p, n < cap ? n : cap);
    return (int)n;
}

size_t tok_decode(const struct tok *t, const int32_t *ids, size_t n, int render_special, int strip_leading_space,
                  char *out, size_t cap)
{
    size_t o = 0;
    int strip = strip_leading_space && t->kind == TOK_KIND_SPM && t->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const char *p;
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            continue;
        p = tok_render(t, ids[i], render_special, &k);
        if (strip && t->type[ids[i]] != TOK_T_CONTROL && t->type[ids[i]] != TOK_T_UNKNOWN) {
            /* the space the encoder put before the first text fragment */
            strip = 0;
            if (k && p[0] == ' ') {
                p++;
                k--;
            }
        }
        if (k && o < cap)
            memcpy(out + o, p, k < cap - o ? k : cap - o);
        o += k;
    }
    if (o < cap)
        out[o] = '\0';
    return o;
}

/* ---- streaming ------------------------------------------------------------------ */

void tok_stream_init(struct tok_stream *s, const struct tok *t, int render_special)
{
    memset(s, 0, sizeof(*s));
    s->t = t;
    s->render_special = render_special;
}

static const char tok_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

struct tok_out {
    char *p;
    size_t cap, n;
};

static void out_put(struct tok_out *o, const void *b, size_t k)
{
    if (o->n + k <= o->cap)
        memcpy(o->p + o->n, b, k);
    o->n += k;
}

/* Emit the complete characters of pending + piece into o; the new pending
 * tail (a valid but unfinished character) into np/nn. */
static void stream_run(const unsigned char *pend, int npend, const unsigned char *piece, size_t n, struct tok_out *o,
                       unsigned char *np, int *nn)
{
    size_t i = 0;
    uint32_t cp;
    *nn = 0;
    if (npend > 0) {
        /* finish the held character with bytes of the new piece */
        unsigned char c[4];
        int k = npend;
        memcpy(c, pend, (size_t)npend);
        for (;;) {
            int d = unicode_utf8_decode(c, (size_t)k, &cp);
            if (d > 0) {
                out_put(o, c, (size_t)d);
                break;
            }
            if (d < 0) {
                /* the held bytes were a valid start: the mismatch is the
                 * last byte taken from the piece, which starts afresh */
                out_put(o, tok_fffd, 3);
                i--;
                break;
            }
            if (i == n) { /* still unfinished: keep holding */
                memcpy(np, c, (size_t)k);
                *nn = k;
                return;
            }
            c[k++] = piece[i++];
        }
    }
    while (i < n) {
        int d = unicode_utf8_decode(piece + i, n - i, &cp);
        if (d > 0) {
            out_put(o, piece + i, (size_t)d);
            i += (size_t)d;
        } else if (d == 0) {
            memcpy(np, piece + i, n - i);
            *nn = (int)(n - i);
            return;
        } else {
            out_put(o, tok_fffd, 3);
            i += (size_t)-d;
        }
    }
}

int tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t cap)
{
    struct tok_out o = {out, cap, 0};
    unsigned char np[8];
    int nn;
    size_t n;
    const char *p;
    if (id < 0 || id >= s->t->n_vocab)
        return INF_EINVAL;
    p = tok_render(s->t, id, s->render_special, &n);
    stream_run(s->pending, s->n_pending, (const unsigned char *)p, n, &o, np, &nn);
    if (o.n > cap || o.n > INT32_MAX)
        return INF_ETOOBIG; /* nothing consumed: retry with a larger buffer */
    memcpy(s->pending, np, (size_t)nn);
    s->n_pending = nn;
    return (int)o.n;
}

int tok_stream_flush(struct tok_stream *s, char *out, size_t cap)
{
    if (s->n_pending == 0)
        return 0;
    if (cap < 3)
        return INF_ETOOBIG;
    memcpy(out, tok_fffd, 3);
    s->n_pending = 0;
    return 3;
}
