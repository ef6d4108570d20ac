/* jsonc_build — the compiled form of a JSON constraint and its builder
 * (jsonc.h): nodes, slots (a literal and/or a node each) and the literal
 * bytes, in one allocation once finished, so a request's copy is one
 * memcpy (jsonc_dup).
 */
#include "engine/jsonc.h"
#include "engine/jsonc_impl.h"
#include "engine/jsonc_regex.h"

#include <stdlib.h>
#include <string.h>

/* ---- builder ---- */

struct jsonc_builder {
    struct jsonc_node *nodes;
    struct jsonc_slot *slots;
    uint8_t *chars;
    int32_t n_nodes, cap_nodes, n_slots, cap_slots;
    uint32_t n_chars, cap_chars;
};

static int grow(void **p, int64_t need, int64_t *cap, size_t elem)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap ? *cap * 2 : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int32_t b_node_raw(struct jsonc_builder *b, int kind, int free_keys)
{
    int64_t cap = b->cap_nodes;
    if (b->n_nodes >= 65536 || grow((void **)&b->nodes, b->n_nodes + 1, &cap, sizeof(*b->nodes)))
        return -1;
    b->cap_nodes = (int32_t)cap;
    struct jsonc_node *n = &b->nodes[b->n_nodes];
    memset(n, 0, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->free_keys = (uint8_t)free_keys;
    n->hi = -1;
    n->imin = INT64_MIN;
    n->imax = INT64_MAX;
    return b->n_nodes++;
}

int32_t jsonc_b_slots(struct jsonc_builder *b, int32_t n)
{
    int64_t cap = b->cap_slots;
    if (n < 0 || b->n_slots + (int64_t)n > (1 << 24) ||
        grow((void **)&b->slots, (int64_t)b->n_slots + n + 1, &cap, sizeof(*b->slots)))
        return -1;
    b->cap_slots = (int32_t)cap;
    for (int32_t i = 0; i < n; i++)
        b->slots[b->n_slots + i] = (struct jsonc_slot){0, 0, -1};
    int32_t first = b->n_slots;
    b->n_slots += n;
    return first;
}

int jsonc_b_slot(struct jsonc_builder *b, int32_t i, const char *lit, size_t len, int32_t ref)
{
    if (i < 0 || i >= b->n_slots)
        return -1;
    if (lit) {
        int64_t cap = b->cap_chars;
        if (len > (1u << 24) || (int64_t)b->n_chars + (int64_t)len > (1 << 26) ||
            grow((void **)&b->chars, (int64_t)b->n_chars + (int64_t)len + 1, &cap, 1))
            return -1;
        b->cap_chars = (uint32_t)cap;
        memcpy(b->chars + b->n_chars, lit, len);
        b->slots[i].off = b->n_chars;
        b->slots[i].len = (uint32_t)len;
        b->n_chars += (uint32_t)len;
    }
    b->slots[i].ref = ref;
    return 0;
}

static int b_lits(struct jsonc_builder *b, int32_t id, const char *const *lits, int n)
{
    int32_t first = jsonc_b_slots(b, n);
    if (first < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (jsonc_b_slot(b, first + i, lits[i], strlen(lits[i]), -1))
            return -1;
    jsonc_b_shape(b, id, first, n, 0, -1, 0);
    return 0;
}

struct jsonc_builder *jsonc_builder_new(void)
{
    static const char *const words[] = {"true", "false", "null"};
    struct jsonc_builder *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    /* the builtin nodes, in enum order */
    int ok = b_node_raw(b, JSONC_ANY, 0) == JSONC_N_ANY &&
             b_node_raw(b, JSONC_OBJECT, 1) == JSONC_N_FREE_OBJECT &&
             b_node_raw(b, JSONC_ARRAY, 0) == JSONC_N_FREE_ARRAY &&
             b_node_raw(b, JSONC_STRING, 0) == JSONC_N_STRING &&
             b_node_raw(b, JSONC_NUMBER, 0) == JSONC_N_NUMBER &&
             b_node_raw(b, JSONC_LITS, 0) == JSONC_N_WORDS;
    int32_t items = ok ? jsonc_b_slots(b, 1) : -1;
    ok = ok && items >= 0 && !jsonc_b_slot(b, items, NULL, 0, JSONC_N_ANY) &&
         !b_lits(b, JSONC_N_WORDS, words, 3);
    if (!ok) {
        jsonc_builder_free(b);
        return NULL;
    }
    jsonc_b_shape(b, JSONC_N_FREE_ARRAY, items, 1, 0, -1, 0);
    return b;
}

void jsonc_builder_free(struct jsonc_builder *b)
{
    if (!b)
        return;
    free(b->nodes);
    free(b->slots);
    free(b->chars);
    free(b);
}

int32_t jsonc_b_node(struct jsonc_builder *b, int kind)
{
    return b_node_raw(b, kind, 0);
}

void jsonc_b_shape(struct jsonc_builder *b, int32_t id, int32_t first, int32_t n, int32_t lo,
                   int32_t hi, uint64_t req)
{
    struct jsonc_node *nd = &b->nodes[id];
    nd->first = first;
    nd->n = (uint16_t)n;
    nd->lo = lo;
    nd->hi = hi;
    nd->req = req;
}

/* Whether objs[0..n) may be the variants of a tagged object: OBJECTs
 * with fixed keys whose slot 0 (the tag, required) is the same key and
 * holds a LITS node (the recognizer takes a variant from its slot 1 on). */
static int b_tag_variants_ok(const struct jsonc_builder *b, const int32_t *objs, int32_t n)
{
    const struct jsonc_slot *k0 = NULL;
    for (int32_t k = 0; k < n; k++) {
        const struct jsonc_node *o =
            objs[k] >= 0 && objs[k] < b->n_nodes ? &b->nodes[objs[k]] : NULL;
        if (!o || o->kind != JSONC_OBJECT || o->free_keys || o->n < 1 || !(o->req & 1))
            return 0;
        const struct jsonc_slot *s0 = &b->slots[o->first];
        if (!k0)
            k0 = s0;
        if (s0->len != k0->len || memcmp(b->chars + s0->off, b->chars + k0->off, s0->len) ||
            s0->ref < 0 || b->nodes[s0->ref].kind != JSONC_LITS)
            return 0;
    }
    return 1;
}

int32_t jsonc_b_tag_objects(struct jsonc_builder *b, const int32_t *objs, int32_t n, int *oom)
{
    int32_t var[JSONC_MAX_ALT], total = 0;
    *oom = 0;
    if (n < 1 || !b_tag_variants_ok(b, objs, n))
        return -1;
    for (int32_t k = 0; k < n; k++) {
        const struct jsonc_node *v = &b->nodes[b->slots[b->nodes[objs[k]].first].ref];
        if (total + v->n > JSONC_MAX_ALT)
            return -1;
        for (int32_t i = 0; i < v->n; i++)
            var[total++] = objs[k];
    }
    /* the values, in order, into one LITS node (slots copied: their
     * literals stay where they are in chars); then the tagged node, its
     * slot 0 the tag's key (the first object's slot, shared) with that
     * node, the variants' slots after it */
    int32_t lits = b_node_raw(b, JSONC_LITS, 0), first = lits >= 0 ? jsonc_b_slots(b, total) : -1;
    int32_t id = first >= 0 ? b_node_raw(b, JSONC_TAGGED, 0) : -1;
    int32_t tf = id >= 0 ? jsonc_b_slots(b, 1 + total) : -1;
    if (tf < 0) {
        *oom = 1;
        return -1;
    }
    for (int32_t k = 0, at = first; k < n; k++) {
        const struct jsonc_node *v = &b->nodes[b->slots[b->nodes[objs[k]].first].ref];
        for (int32_t i = 0; i < v->n; i++)
            b->slots[at++] = b->slots[v->first + i];
    }
    for (int32_t i = 0; i < total; i++) /* a value twice would name two objects */
        for (int32_t j = 0; j < i; j++)
            if (b->slots[first + i].len == b->slots[first + j].len &&
                !memcmp(b->chars + b->slots[first + i].off, b->chars + b->slots[first + j].off,
                        b->slots[first + i].len))
                return -1;
    jsonc_b_shape(b, lits, first, total, 0, -1, 0);
    b->slots[tf] = b->slots[b->nodes[objs[0]].first];
    b->slots[tf].ref = lits;
    for (int32_t k = 0; k < total; k++)
        b->slots[tf + 1 + k].ref = var[k];
    jsonc_b_shape(b, id, tf, 1, tf + 1, total, 1);
    return id;
}

void jsonc_b_range(struct jsonc_builder *b, int32_t id, int64_t lo, int64_t hi)
{
    b->nodes[id].imin = lo;
    b->nodes[id].imax = hi;
}

int jsonc_b_pattern(struct jsonc_builder *b, int32_t id, const struct jsonc_dfa *d)
{
    const int64_t bytes = (int64_t)d->n * (JSONC_RX_SYMS * 2 + 1);
    int64_t cap = b->cap_chars;
    if (d->n <= 0 || (int64_t)b->n_chars + bytes > (1 << 26) ||
        grow((void **)&b->chars, (int64_t)b->n_chars + bytes + 1, &cap, 1))
        return -1;
    b->cap_chars = (uint32_t)cap;
    uint8_t *p = b->chars + b->n_chars;
    for (int64_t i = 0; i < (int64_t)d->n * JSONC_RX_SYMS; i++) {
        p[2 * i] = (uint8_t)(d->next[i] & 0xFF);
        p[2 * i + 1] = (uint8_t)(d->next[i] >> 8);
    }
    memcpy(p + (size_t)d->n * JSONC_RX_SYMS * 2, d->accept, (size_t)d->n);
    b->nodes[id].req = b->n_chars;
    b->nodes[id].imin = d->n;
    b->n_chars += (uint32_t)bytes;
    return 0;
}

int32_t jsonc_b_n_nodes(const struct jsonc_builder *b)
{
    return b->n_nodes;
}

int jsonc_first_ok(const struct jsonc_node *nodes, const struct jsonc_slot *slots,
                    const uint8_t *chars, int32_t id, unsigned c, int depth)
{
    const struct jsonc_node *n = &nodes[id];
    int num = c == '-' || (c >= '0' && c <= '9');
    switch (n->kind) {
    case JSONC_ANY:
        return c == '{' || c == '[' || c == '"' || num || c == 't' || c == 'f' || c == 'n';
    case JSONC_OBJECT:
    case JSONC_TAGGED:
        return c == '{';
    case JSONC_ARRAY:
        return c == '[';
    case JSONC_STRING:
    case JSONC_PATTERN:
        return c == '"';
    case JSONC_NUMBER:
    case JSONC_INTEGER:
        return num;
    case JSONC_LITS:
        for (int32_t i = 0; i < n->n; i++)
            if (slots[n->first + i].len && chars[slots[n->first + i].off] == c)
                return 1;
        return 0;
    case JSONC_UNION:
        for (int32_t i = 0; depth < 16 && i < n->n; i++)
            if (slots[n->first + i].ref >= 0 &&
                jsonc_first_ok(nodes, slots, chars, slots[n->first + i].ref, c, depth + 1))
                return 1;
        return 0;
    }
    return 0;
}

int jsonc_b_first_ok(const struct jsonc_builder *b, int32_t id, unsigned c)
{
    return jsonc_first_ok(b->nodes, b->slots, b->chars, id, c, 0);
}

/* Depth-first over union -> member edges; color 1 on the path, 2 done. */
static int union_dfs(const struct jsonc_builder *b, int32_t id, uint8_t *color)
{
    if (b->nodes[id].kind != JSONC_UNION || color[id] == 2)
        return 0;
    if (color[id] == 1)
        return 1;
    color[id] = 1;
    const struct jsonc_node *n = &b->nodes[id];
    for (int32_t i = 0; i < n->n; i++) {
        int32_t m = b->slots[n->first + i].ref;
        if (m >= 0 && union_dfs(b, m, color))
            return 1;
    }
    color[id] = 2;
    return 0;
}

int jsonc_b_union_cycle(const struct jsonc_builder *b)
{
    uint8_t *color = calloc((size_t)b->n_nodes, 1);
    int cyc = !color; /* out of memory: refuse rather than risk it */
    for (int32_t i = 0; !cyc && i < b->n_nodes; i++)
        cyc = union_dfs(b, i, color);
    free(color);
    return cyc;
}

static void bind(struct jsonc *g)
{
    g->nodes = (const struct jsonc_node *)(g + 1);
    g->slots = (const struct jsonc_slot *)(g->nodes + g->n_nodes);
    g->chars = (const uint8_t *)(g->slots + g->n_slots);
}

int jsonc_b_finish(struct jsonc_builder *b, int32_t root, struct jsonc **out)
{
    size_t bytes = sizeof(struct jsonc) + (size_t)b->n_nodes * sizeof(struct jsonc_node) +
                   (size_t)b->n_slots * sizeof(struct jsonc_slot) + b->n_chars;
    struct jsonc *g = malloc(bytes);
    *out = NULL;
    if (!g || root < 0 || root >= b->n_nodes) {
        free(g);
        return -1;
    }
    g->bytes = bytes;
    g->n_nodes = b->n_nodes;
    g->n_slots = b->n_slots;
    g->n_chars = b->n_chars;
    g->root = root;
    bind(g);
    memcpy((void *)g->nodes, b->nodes, (size_t)b->n_nodes * sizeof(struct jsonc_node));
    if (b->n_slots)
        memcpy((void *)g->slots, b->slots, (size_t)b->n_slots * sizeof(struct jsonc_slot));
    if (b->n_chars)
        memcpy((void *)g->chars, b->chars, b->n_chars);
    *out = g;
    return 0;
}

int jsonc_new_object(struct jsonc **out)
{
    struct jsonc_builder *b = jsonc_builder_new();
    int rc = b ? jsonc_b_finish(b, JSONC_N_FREE_OBJECT, out) : -1;
    jsonc_builder_free(b);
    return rc;
}

struct jsonc *jsonc_dup(const struct jsonc *g)
{
    struct jsonc *d = malloc(g->bytes);
    if (d) {
        memcpy(d, g, g->bytes);
        bind(d);
    }
    return d;
}

void jsonc_free(struct jsonc *g)
{
    free(g);
}
