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
#include "engine/tok_impl.h"
#include "engine/unicode.h"

/* ---- loading ------------------------------------------------------------- */

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
    t->pair_mask = tok_map_pow2(kv->n + kv->n / 2 + 1) - 1;
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
        if ((rc = tok_map_str_id(t, s, sp, NULL, 0, &a)) ||
            (rc = tok_map_str_id(t, s + sp + 1, n - sp - 1, NULL, 0, &b)) ||
            (rc = tok_map_str_id(t, s, sp, s + sp + 1, n - sp - 1, &res))) {
            inf_error_set(err, rc, "tokenizer: out of memory while reading merges");
            break;
        }
        tok_map_pair_add(t, a, b, (int32_t)r, res);
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

    t->map_mask = tok_map_pow2((uint64_t)t->n_vocab * 2) - 1;
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
        if ((rc = tok_map_put(t, i))) {
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
            int32_t id = tok_map_find(t, t->bchar[b], t->bchar_len[b]);
            t->byte_id[b] = id; /* may be a merge-only pseudo id */
            id = tok_map_find(t, &c, 1);
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
            id = tok_map_find(t, buf, 6);
            if (id < 0)
                id = tok_map_find(t, &c, 1);
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
    int32_t id = tok_map_find(t, text, len);
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

