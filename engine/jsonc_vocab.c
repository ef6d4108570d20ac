/* jsonc_vocab — which tokens the JSON recognizer allows next (jsonc.h).
 *
 * Built once a model: every token's bytes (tok_token_bytes without
 * specials: what the API's text holds), the tokens sorted by those bytes
 * with each one's common prefix with the one before (lcp), and the set of
 * tokens that are plain string content (complete, valid UTF-8 with no
 * quote, backslash or control byte).
 *
 * jsonc_allow walks the sorted list as a trie: work[d] is the state after
 * the current token's first d bytes, reused by the next token for the
 * prefix they share; when byte d is refused, every following token that
 * shares those d + 1 bytes is skipped without being looked at. From a
 * plain string state it starts from the plain set instead and tries only
 * the other tokens (a string's content is where most of a JSON answer's
 * tokens fall, and there nearly the whole vocabulary is allowed).
 */
#include "engine/jsonc.h"

#include <stdlib.h>
#include <string.h>

#include "engine/err.h"
#include "engine/tok.h"

struct jsonc_ent {
    uint32_t off, len;
    int32_t id;
};

struct jsonc_vocab {
    int32_t n_vocab, n_sorted, n_other;
    uint32_t max_len;
    uint32_t *off;          /* [n_vocab + 1] into bytes */
    uint8_t *bytes;
    struct jsonc_ent *ent;  /* [n_sorted] by bytes */
    uint32_t *lcp;          /* [n_sorted] common prefix with the entry before */
    uint32_t *plain;        /* bitset [(n_vocab + 31) / 32] */
    int32_t n_plain;
    int32_t *other;         /* [n_other] tokens with bytes that are not plain */
};

static const uint8_t *cmp_base;

static int ent_cmp(const void *a, const void *b)
{
    const struct jsonc_ent *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(cmp_base + x->off, cmp_base + y->off, n);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int jsonc_vocab_new(const struct tok *t, struct jsonc_vocab **out)
{
    struct jsonc_vocab *v = calloc(1, sizeof(*v));
    int32_t nv = tok_n_vocab(t);
    size_t cap = tok_max_token_bytes(t) + 1, total = 0;
    char *buf = malloc(cap);
    *out = NULL;
    if (!v || !buf)
        goto oom;
    v->n_vocab = nv;
    v->off = malloc(((size_t)nv + 1) * sizeof(*v->off));
    v->plain = calloc(((size_t)nv + 31) / 32, sizeof(uint32_t));
    if (!v->off || !v->plain)
        goto oom;
    for (int32_t id = 0; id < nv; id++) {
        int nb = tok_token_bytes(t, id, 0, buf, cap);
        total += nb > 0 ? (size_t)nb : 0;
    }
    v->bytes = malloc(total + 1);
    v->ent = malloc(((size_t)nv + 1) * sizeof(*v->ent));
    v->lcp = malloc(((size_t)nv + 1) * sizeof(*v->lcp));
    v->other = malloc(((size_t)nv + 1) * sizeof(*v->other));
    if (!v->bytes || !v->ent || !v->lcp || !v->other)
        goto oom;
    total = 0;
    for (int32_t id = 0; id < nv; id++) {
        int nb = tok_token_bytes(t, id, 0, buf, cap);
        v->off[id] = (uint32_t)total;
        if (nb <= 0 || (size_t)nb >= cap)
            continue;
        memcpy(v->bytes + total, buf, (size_t)nb);
        v->ent[v->n_sorted++] = (struct jsonc_ent){(uint32_t)total, (uint32_t)nb, id};
        if (jsonc_plain_bytes(v->bytes + total, (size_t)nb)) {
            v->plain[id / 32] |= 1u << (id % 32);
            v->n_plain++;
        } else
            v->other[v->n_other++] = id;
        if ((uint32_t)nb > v->max_len)
            v->max_len = (uint32_t)nb;
        total += (size_t)nb;
    }
    v->off[nv] = (uint32_t)total;
    cmp_base = v->bytes; /* qsort has no context argument; the engine builds one at a time */
    qsort(v->ent, (size_t)v->n_sorted, sizeof(*v->ent), ent_cmp);
    for (int32_t i = 0; i < v->n_sorted; i++) {
        uint32_t k = 0;
        if (i > 0) {
            const struct jsonc_ent *a = &v->ent[i - 1], *b = &v->ent[i];
            while (k < a->len && k < b->len && v->bytes[a->off + k] == v->bytes[b->off + k])
                k++;
        }
        v->lcp[i] = k;
    }
    free(buf);
    *out = v;
    return 0;
oom:
    free(buf);
    jsonc_vocab_free(v);
    return INF_ENOMEM;
}

void jsonc_vocab_free(struct jsonc_vocab *v)
{
    if (!v)
        return;
    free(v->off);
    free(v->bytes);
    free(v->ent);
    free(v->lcp);
    free(v->plain);
    free(v->other);
    free(v);
}

const uint8_t *jsonc_vocab_bytes(const struct jsonc_vocab *v, int32_t id, uint32_t *len)
{
    *len = 0;
    if (id < 0 || id >= v->n_vocab || v->off[id + 1] == v->off[id])
        return NULL;
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

size_t jsonc_vocab_work_states(const struct jsonc_vocab *v)
{
    return (size_t)v->max_len + 1;
}

/* Copy only the frames in use: a state is ~400 bytes, its live part ~40. */
static void st_copy(struct jsonc_state *d, const struct jsonc_state *s)
{
    memcpy(d, s, offsetof(struct jsonc_state, f) + (size_t)s->depth * sizeof(s->f[0]));
}

int jsonc_feed_token(const struct jsonc *g, const struct jsonc_vocab *v, struct jsonc_state *s,
                     int32_t id)
{
    uint32_t n;
    const uint8_t *p = jsonc_vocab_bytes(v, id, &n);
    return p ? jsonc_feed(g, s, p, n) : -1;
}

int32_t jsonc_allow(const struct jsonc *g, const struct jsonc_vocab *v,
                    const struct jsonc_state *s, struct jsonc_state *work, uint32_t *bits)
{
    size_t words = ((size_t)v->n_vocab + 31) / 32;
    int32_t n = 0;

    if (jsonc_in_plain_string(g, s)) {
        memcpy(bits, v->plain, words * sizeof(uint32_t));
        n = v->n_plain;
        for (int32_t i = 0; i < v->n_other; i++) {
            int32_t id = v->other[i];
            st_copy(&work[0], s);
            if (!jsonc_feed_token(g, v, &work[0], id)) {
                bits[id / 32] |= 1u << (id % 32);
                n++;
            }
        }
        return n;
    }
    memset(bits, 0, words * sizeof(uint32_t));
    st_copy(&work[0], s);
    uint32_t valid = 0; /* work[0..valid] hold the previous token's prefix states */
    for (int32_t i = 0; i < v->n_sorted;) {
        const struct jsonc_ent *e = &v->ent[i];
        const uint8_t *p = v->bytes + e->off;
        uint32_t d = v->lcp[i] < valid ? v->lcp[i] : valid;
        for (; d < e->len; d++) {
            st_copy(&work[d + 1], &work[d]);
            if (jsonc_feed(g, &work[d + 1], p + d, 1))
                break;
        }
        if (d == e->len) {
            bits[e->id / 32] |= 1u << (e->id % 32);
            n++;
            valid = e->len;
            i++;
            continue;
        }
        /* bytes 0..d refused: skip every token that shares them */
        valid = d;
        for (i++; i < v->n_sorted && v->lcp[i] > d; i++)
            ;
    }
    return n;
}
