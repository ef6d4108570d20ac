/* tok_map — the tokenizer's string map (text -> id, open addressing over
 * FNV-1a hashes) and its merge-pair lookup: what tok.c builds at load and
 * tok_encode.c reads on every word. Split from tok.c (session 61) so each
 * file keeps to one job; the functions are those tok.c had. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/err.h"
#include "engine/gguf.h"
#include "engine/tok_impl.h"

static int tok_str_eq2(const struct gguf_str *s, const char *a, size_t na, const char *b, size_t nb)
{
    return s->len == na + nb && (na == 0 || memcmp(s->ptr, a, na) == 0) &&
           (nb == 0 || memcmp(s->ptr + na, b, nb) == 0);
}

/* id of the string a..b (concatenation), or -1 */
int32_t tok_map_find2(const struct tok *t, const char *a, size_t na, const char *b, size_t nb)
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

int32_t tok_map_find(const struct tok *t, const char *s, size_t n)
{
    return tok_map_find2(t, s, n, NULL, 0);
}

static void tok_map_insert_slot(struct tok_slot *map, uint32_t mask, uint32_t h, int32_t id)
{
    uint32_t i = h & mask;
    while (map[i].id >= 0)
        i = (i + 1) & mask;
    map[i].hash = h;
    map[i].id = id;
}

static int tok_map_grow(struct tok *t)
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
            tok_map_insert_slot(m, cap - 1, t->map[i].hash, t->map[i].id);
    free(t->map);
    t->map = m;
    t->map_mask = cap - 1;
    return 0;
}

/* Map the text of string id to id; a string already present is remapped
 * (so the last of duplicate vocab entries wins, as in llama.cpp). */
int tok_map_put(struct tok *t, int32_t id)
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
        int rc = tok_map_grow(t);
        if (rc)
            return rc;
    }
    tok_map_insert_slot(t->map, t->map_mask, h, id);
    t->map_count++;
    return 0;
}

/* the pair table's hash of a (left, right) key */
static uint32_t tok_map_mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (uint32_t)k;
}

/* the slot of key in the pair table: its own, or the empty one (key
 * UINT64_MAX) where its probe ends */
static struct tok_pair *tok_map_pair_slot(const struct tok *t, uint64_t key)
{
    uint32_t i = tok_map_mix64(key) & t->pair_mask;
    while (t->pairs[i].key != UINT64_MAX && t->pairs[i].key != key)
        i = (i + 1) & t->pair_mask;
    return &t->pairs[i];
}

const struct tok_pair *tok_pair_find(const struct tok *t, int32_t l, int32_t r)
{
    const struct tok_pair *p = tok_map_pair_slot(t, (uint64_t)(uint32_t)l << 32 | (uint32_t)r);
    return p->key == UINT64_MAX ? NULL : p;
}

/* Enter the merge of (l, r) into res with rank; a repeated merge keeps its
 * first rank */
void tok_map_pair_add(struct tok *t, int32_t l, int32_t r, int32_t rank, int32_t res)
{
    const uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    struct tok_pair *p = tok_map_pair_slot(t, key);
    if (p->key == UINT64_MAX) {
        p->key = key;
        p->rank = rank;
        p->result = res;
    }
}

/* a table size: the least power of two >= n (at least 16) */
uint32_t tok_map_pow2(uint64_t n)
{
    uint32_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

/* Append a merge-only string (not in the vocab); *id gets its pseudo id. */
static int tok_map_add_extra(struct tok *t, const char *a, size_t na, const char *b, size_t nb, int32_t *id)
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
    return tok_map_put(t, *id);
}

/* the id of the string a..b, appended (tok_map_add_extra) when absent */
int tok_map_str_id(struct tok *t, const char *a, size_t na, const char *b, size_t nb, int32_t *id)
{
    *id = tok_map_find2(t, a, na, b, nb);
    if (*id >= 0)
        return 0;
    return tok_map_add_extra(t, a, na, b, nb, id);
}
