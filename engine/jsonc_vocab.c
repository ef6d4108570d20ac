/* jsonc_vocab — which tokens the JSON recognizer allows next (jsonc.h).
 *
 * Built once a model: every token's bytes (tok_token_bytes without
 * specials: what the API's text holds), the tokens sorted by those bytes
 * with each one's common prefix with the one before (lcp), the end of every
 * trie node in that order (node_end: the tokens sharing a prefix are a
 * range), and the tokens that are plain string content (complete, valid
 * UTF-8 with no quote, backslash or control byte) grouped by how many
 * characters they hold.
 *
 * jsonc_allow walks the sorted list as a trie: work[d] is the state after
 * the current token's first d bytes, reused by the next token for the
 * prefix they share; when byte d is refused, the whole node (every token
 * that shares those d + 1 bytes) is skipped in one jump. From a string
 * state it starts from the plain tokens that fit the string's remaining
 * maxLength and tries only the other tokens one by one (a string's content
 * is where most of a JSON answer's tokens fall, and there nearly the whole
 * vocabulary is allowed).
 */
#include "engine/jsonc.h"
#include "engine/jsonc_impl.h"

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
    /* node_end[node_at[i] + d - lcp[i]]: for the node entry i opens at
     * depth d (its first d + 1 bytes; lcp[i] <= d < len), the first entry
     * past the tokens that share them */
    uint32_t *node_at;      /* [n_sorted] */
    uint32_t *node_end;     /* [trie nodes] */
    uint32_t *plain;        /* bitset [(n_vocab + 31) / 32] */
    int32_t n_plain;
    int32_t *by_chars;      /* [n_plain] plain tokens, fewest characters first */
    int32_t *chars_at;      /* [max_chars + 2] where those of c characters start */
    int32_t max_chars;
    int32_t *other;         /* [n_other] tokens with bytes that are not plain and
                             * whose first byte a string takes (jsonc_string_takes:
                             * from a string with no sequence open the others never
                             * feed) */
};

/* A token during the sort (qsort has no context argument: the bytes ride along). */
struct jsonc_sort {
    const uint8_t *p;
    struct jsonc_ent e;
};

static int ent_cmp(const void *a, const void *b)
{
    const struct jsonc_sort *x = a, *y = b;
    uint32_t n = x->e.len < y->e.len ? x->e.len : y->e.len;
    int c = memcmp(x->p, y->p, n);
    if (c)
        return c;
    if (x->e.len != y->e.len)
        return x->e.len < y->e.len ? -1 : 1;
    return x->e.id < y->e.id ? -1 : x->e.id > y->e.id;
}

/* Sort the entries by bytes; their lcp. 0 or -1 (out of memory). */
static int vocab_sort(struct jsonc_vocab *v)
{
    struct jsonc_sort *t = malloc(((size_t)v->n_sorted + 1) * sizeof(*t));
    if (!t)
        return -1;
    for (int32_t i = 0; i < v->n_sorted; i++)
        t[i] = (struct jsonc_sort){v->bytes + v->ent[i].off, v->ent[i]};
    qsort(t, (size_t)v->n_sorted, sizeof(*t), ent_cmp);
    for (int32_t i = 0; i < v->n_sorted; i++) {
        uint32_t k = 0;
        if (i > 0)
            while (k < t[i - 1].e.len && k < t[i].e.len && t[i - 1].p[k] == t[i].p[k])
                k++;
        v->ent[i] = t[i].e;
        v->lcp[i] = k;
    }
    free(t);
    return 0;
}

/* node_at / node_end (struct jsonc_vocab): a node opened at depth d by
 * entry i ends at the first later entry that shares at most d bytes with
 * it; a stack of open nodes closes them as the lcp falls. */
static int vocab_nodes(struct jsonc_vocab *v)
{
    size_t n_nodes = 0;
    v->node_at = malloc(((size_t)v->n_sorted + 1) * sizeof(*v->node_at));
    for (int32_t i = 0; v->node_at && i < v->n_sorted; i++) {
        v->node_at[i] = (uint32_t)n_nodes;
        n_nodes += v->ent[i].len - v->lcp[i];
    }
    v->node_end = malloc((n_nodes + 1) * sizeof(*v->node_end));
    uint32_t *stack = malloc(((size_t)v->max_len + 1) * sizeof(*stack)); /* node slots, depth = index */
    if (!v->node_at || !v->node_end || !stack || n_nodes > UINT32_MAX) {
        free(stack);
        return -1;
    }
    uint32_t depth = 0; /* open nodes: depths 0 .. depth - 1 */
    for (int32_t i = 0; i < v->n_sorted; i++) {
        for (; depth > v->lcp[i]; depth--)
            v->node_end[stack[depth - 1]] = (uint32_t)i;
        for (uint32_t d = v->lcp[i]; d < v->ent[i].len; d++)
            stack[depth++] = v->node_at[i] + d - v->lcp[i];
    }
    for (; depth > 0; depth--)
        v->node_end[stack[depth - 1]] = (uint32_t)v->n_sorted;
    free(stack);
    return 0;
}

/* Token id's characters (UTF-8 lead bytes) when it is plain, else -1. */
static int32_t plain_chars(const struct jsonc_vocab *v, int32_t id)
{
    if (!((v->plain[id / 32] >> (id % 32)) & 1))
        return -1;
    int32_t c = 0;
    for (uint32_t k = v->off[id]; k < v->off[id + 1]; k++)
        c += (v->bytes[k] & 0xC0) != 0x80;
    return c;
}

/* The plain tokens by character count: by_chars, chars_at. */
static int vocab_by_chars(struct jsonc_vocab *v)
{
    int32_t mx = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        int32_t c = plain_chars(v, id);
        mx = c > mx ? c : mx;
    }
    v->max_chars = mx;
    v->chars_at = calloc((size_t)mx + 2, sizeof(*v->chars_at));
    v->by_chars = malloc(((size_t)v->n_plain + 1) * sizeof(*v->by_chars));
    if (!v->chars_at || !v->by_chars)
        return -1;
    for (int32_t id = 0; id < v->n_vocab; id++) { /* counts */
        int32_t c = plain_chars(v, id);
        if (c >= 0)
            v->chars_at[c + 1]++;
    }
    for (int32_t k = 1; k <= mx + 1; k++) /* counts -> starts */
        v->chars_at[k] += v->chars_at[k - 1];
    for (int32_t id = 0; id < v->n_vocab; id++) { /* placement */
        int32_t c = plain_chars(v, id);
        if (c >= 0)
            v->by_chars[v->chars_at[c]++] = id;
    }
    for (int32_t k = mx + 1; k > 0; k--) /* placement advanced every start by one bucket */
        v->chars_at[k] = v->chars_at[k - 1];
    v->chars_at[0] = 0;
    return 0;
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
        } else if (jsonc_string_takes((unsigned char)buf[0]))
            v->other[v->n_other++] = id;
        if ((uint32_t)nb > v->max_len)
            v->max_len = (uint32_t)nb;
        total += (size_t)nb;
    }
    v->off[nv] = (uint32_t)total;
    if (vocab_sort(v) || vocab_nodes(v) || vocab_by_chars(v))
        goto oom;
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
    free(v->node_at);
    free(v->node_end);
    free(v->plain);
    free(v->by_chars);
    free(v->chars_at);
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

/* The live part of a state: the frames in use (~40 bytes of ~400). */
static size_t st_bytes(const struct jsonc_state *s)
{
    return offsetof(struct jsonc_state, f) + (size_t)s->depth * sizeof(s->f[0]);
}

int jsonc_state_equal(const struct jsonc_state *a, const struct jsonc_state *b)
{
    return a->depth == b->depth && !memcmp(a, b, st_bytes(a));
}

static void st_copy(struct jsonc_state *d, const struct jsonc_state *s)
{
    memcpy(d, s, st_bytes(s));
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

    int64_t budget = jsonc_plain_budget(g, s);
    if (budget >= 0) {
        /* the plain tokens of at most budget characters: set those, or
         * clear the others, whichever is fewer */
        int32_t k = budget > v->max_chars ? v->n_plain : v->chars_at[budget + 1];
        if (k >= v->n_plain / 2) {
            memcpy(bits, v->plain, words * sizeof(uint32_t));
            for (int32_t i = k; i < v->n_plain; i++)
                bits[v->by_chars[i] / 32] &= ~(1u << (v->by_chars[i] % 32));
        } else {
            memset(bits, 0, words * sizeof(uint32_t));
            for (int32_t i = 0; i < k; i++)
                bits[v->by_chars[i] / 32] |= 1u << (v->by_chars[i] % 32);
        }
        n = k;
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
    /* work[0..lcp[i]] hold states entry i can start from: the entry before
     * it was either fed whole (lcp[i] <= its length), or refused at a
     * depth d and everything sharing d + 1 bytes skipped (lcp[i] <= d) */
    for (int32_t i = 0; i < v->n_sorted;) {
        const struct jsonc_ent *e = &v->ent[i];
        const uint8_t *p = v->bytes + e->off;
        uint32_t d = v->lcp[i];
        for (; d < e->len; d++) {
            st_copy(&work[d + 1], &work[d]);
            if (jsonc_feed(g, &work[d + 1], p + d, 1))
                break;
        }
        if (d == e->len) {
            bits[e->id / 32] |= 1u << (e->id % 32);
            n++;
            i++;
            continue;
        }
        /* bytes 0..d refused: skip every token that shares them (the node
         * entry i opened at depth d) */
        i = (int32_t)v->node_end[v->node_at[i] + d - v->lcp[i]];
    }
    return n;
}

int jsonc_allow_same(const struct jsonc *g, const struct jsonc_vocab *v,
                     const struct jsonc_state *a, const struct jsonc_state *b)
{
    if (jsonc_plain_budget(g, a) != INT64_MAX || jsonc_plain_budget(g, b) != INT64_MAX ||
        a->lnode != b->lnode || a->depth != b->depth)
        return 0;
    /* minLength: below it a token that closes the string is allowed or not
     * by the exact count, unless no token is long enough to get there (a
     * character is at least one byte) */
    int64_t lo = g->nodes[a->lnode].lo;
    int past = a->chars >= lo && b->chars >= lo;
    int far = lo - (int64_t)a->chars > (int64_t)v->max_len && lo - (int64_t)b->chars > (int64_t)v->max_len;
    if (!past && !far)
        return 0;
    /* everything else a later byte may read: the same (chars aside) */
    struct jsonc_state x;
    st_copy(&x, a);
    x.chars = b->chars;
    return jsonc_state_equal(&x, b);
}
