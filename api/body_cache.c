/* body_cache — request bodies' buffers kept for reuse (body_cache.h says why). */
#include "api/body_cache.h"

#include <stdlib.h>

#include "engine/err.h"

static void body_cache_drop(struct body_cache *c, int i)
{
    free(c->slot[i].p);
    c->slot[i] = c->slot[--c->n];
}

int body_cache_take(struct body_cache *c, struct buf *b, size_t n, size_t limit)
{
    if (n + 1 < BODY_CACHE_MIN)
        return buf_reserve(b, n);
    int best = -1;
    for (int i = 0; i < c->n; i++)
        if (c->slot[i].cap > n && (best < 0 || c->slot[i].cap < c->slot[best].cap))
            best = i;
    char *p;
    size_t cap;
    if (best >= 0) {
        p = c->slot[best].p;
        cap = c->slot[best].cap;
        c->slot[best] = c->slot[--c->n];
    } else {
        cap = BODY_CACHE_MIN;
        while (cap < n + 1 && cap <= limit)
            cap *= 2;
        /* at the limit a power of two is waste: limit + 1 holds any body */
        if (cap >= limit)
            cap = limit + 1 > n + 1 ? limit + 1 : n + 1;
        p = malloc(cap);
        if (!p)
            return INF_ENOMEM;
    }
    buf_free(b);
    *b = (struct buf){p, 0, cap};
    p[0] = '\0';
    return 0;
}

void body_cache_put(struct body_cache *c, struct buf *b, double now)
{
    if (b->cap < BODY_CACHE_MIN) {
        buf_free(b);
        return;
    }
    if (c->n == BODY_CACHE_SLOTS) {
        /* full: the smallest of the kept ones and this one goes */
        int small = 0;
        for (int i = 1; i < c->n; i++)
            if (c->slot[i].cap < c->slot[small].cap)
                small = i;
        if (c->slot[small].cap >= b->cap) {
            buf_free(b);
            return;
        }
        body_cache_drop(c, small);
    }
    c->slot[c->n++] = (struct body_slot){b->p, b->cap, now};
    *b = (struct buf){0};
}

int body_cache_warm(struct body_cache *c, size_t limit, double now)
{
    int n = 0;
    while (n < BODY_CACHE_WARM && c->n < BODY_CACHE_SLOTS &&
           (size_t)(n + 1) * (limit + 1) <= BODY_CACHE_WARM_BYTES) {
        char *p = malloc(limit + 1);
        if (!p)
            break;
        /* the first write is the cost: pay it here, a byte a page (through
         * a volatile pointer: malloc + memset 0 may become calloc, whose
         * fresh mapping is never written) */
        for (size_t o = 0; o <= limit; o += 4096)
            ((volatile char *)p)[o] = 0;
        c->slot[c->n++] = (struct body_slot){p, limit + 1, now};
        n++;
    }
    c->keep = n;
    return n;
}

void body_cache_trim(struct body_cache *c, double now)
{
    for (int i = c->n - 1; i >= 0 && c->n > c->keep; i--)
        if (now - c->slot[i].t_put > BODY_CACHE_IDLE_S)
            body_cache_drop(c, i);
}

size_t body_cache_bytes(const struct body_cache *c)
{
    size_t s = 0;
    for (int i = 0; i < c->n; i++)
        s += c->slot[i].cap;
    return s;
}

void body_cache_free(struct body_cache *c)
{
    while (c->n)
        body_cache_drop(c, c->n - 1);
}
