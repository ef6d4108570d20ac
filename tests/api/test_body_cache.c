/* test_body_cache — api/body_cache.c: a body of a size a kept buffer fits
 * gets that buffer (the same pages, not a new allocation), the best fit of
 * several, never one too small; new buffers are powers of two clamped to
 * the body limit; small buffers are not kept; at most BODY_CACHE_SLOTS are,
 * the smallest going first; the idle trim. Pure: no daemon. */
#include <stdio.h>
#include <string.h>

#include "api/body_cache.h"
#include "tests/check.h"

#define LIMIT ((size_t)4 << 20)

static void test_reuse(void)
{
    struct body_cache c = {0};
    struct buf a = {0}, b = {0};
    CHECK(body_cache_take(&c, &a, 3000000, LIMIT) == 0);
    CHECK(a.cap == LIMIT + 1 && a.len == 0 && a.p[0] == '\0'); /* clamped */
    memset(a.p, 'x', 3000000);
    char *pa = a.p;
    body_cache_put(&c, &a, 1.0);
    CHECK(a.p == NULL && a.cap == 0 && c.n == 1 && body_cache_bytes(&c) == LIMIT + 1);
    /* a smaller body still fits: the same buffer, emptied */
    CHECK(body_cache_take(&c, &b, 100000, LIMIT) == 0);
    CHECK(b.p == pa && b.len == 0 && b.p[0] == '\0' && c.n == 0);
    body_cache_put(&c, &b, 2.0);
    /* the limit itself fits the clamp (limit + 1 with the NUL) */
    struct buf d = {0};
    CHECK(body_cache_take(&c, &d, LIMIT, LIMIT) == 0 && d.p == pa && d.cap > LIMIT);
    body_cache_put(&c, &d, 3.0);
    body_cache_free(&c);
    CHECK(c.n == 0);
}

static void test_fit(void)
{
    struct body_cache c = {0};
    struct buf x = {0}, y = {0}, z = {0};
    CHECK(body_cache_take(&c, &x, 100000, LIMIT) == 0 && x.cap == ((size_t)128 << 10));
    CHECK(body_cache_take(&c, &y, 1000000, LIMIT) == 0 && y.cap == ((size_t)1 << 20));
    char *px = x.p, *py = y.p;
    body_cache_put(&c, &y, 1.0);
    body_cache_put(&c, &x, 1.0);
    /* 120000 fits both: the smaller one */
    CHECK(body_cache_take(&c, &z, 120000, LIMIT) == 0 && z.p == px);
    body_cache_put(&c, &z, 1.0);
    /* 200000 fits only the 1 MB one */
    CHECK(body_cache_take(&c, &z, 200000, LIMIT) == 0 && z.p == py);
    body_cache_put(&c, &z, 1.0);
    /* 2 MB fits neither: a new one, both kept stay */
    CHECK(body_cache_take(&c, &z, 2000000, LIMIT) == 0 && z.p != px && z.p != py &&
          z.cap == ((size_t)2 << 20) && c.n == 2);
    buf_free(&z);
    /* small bodies: malloc's, never kept */
    struct buf s = {0};
    CHECK(body_cache_take(&c, &s, 100, LIMIT) == 0 && s.cap < BODY_CACHE_MIN);
    body_cache_put(&c, &s, 1.0);
    CHECK(s.p == NULL && c.n == 2);
    body_cache_free(&c);
}

static void test_slots_and_trim(void)
{
    struct body_cache c = {0};
    struct buf b[BODY_CACHE_SLOTS + 1];
    memset(b, 0, sizeof(b));
    /* BODY_CACHE_SLOTS + 1 buffers: 64 KB, 128 KB, ... */
    for (int i = 0; i <= BODY_CACHE_SLOTS; i++)
        CHECK(body_cache_take(&c, &b[i], (BODY_CACHE_MIN << i) - 1, (size_t)64 << 20) == 0 &&
              b[i].cap == BODY_CACHE_MIN << i);
    for (int i = BODY_CACHE_SLOTS; i >= 0; i--)
        body_cache_put(&c, &b[i], 10.0 + i);
    /* full: the smallest (64 KB, put last) was not kept */
    CHECK(c.n == BODY_CACHE_SLOTS);
    size_t min = (size_t)-1;
    for (int i = 0; i < c.n; i++)
        if (c.slot[i].cap < min)
            min = c.slot[i].cap;
    CHECK(min == BODY_CACHE_MIN << 1);
    /* the trim frees those idle past BODY_CACHE_IDLE_S, and only those */
    body_cache_trim(&c, 10.0 + 4 + BODY_CACHE_IDLE_S + 0.5);
    CHECK(c.n == BODY_CACHE_SLOTS - 4); /* put at 11..14 gone; 15..18 stay */
    for (int i = 0; i < c.n; i++)
        CHECK(c.slot[i].t_put >= 15.0);
    body_cache_trim(&c, 1e9);
    CHECK(c.n == 0 && body_cache_bytes(&c) == 0);
}

static void test_warm(void)
{
    struct body_cache c = {0};
    /* 4 MB limit: BODY_CACHE_WARM buffers, kept by the trim */
    CHECK(body_cache_warm(&c, LIMIT, 5.0) == BODY_CACHE_WARM && c.n == BODY_CACHE_WARM &&
          c.keep == BODY_CACHE_WARM);
    CHECK(body_cache_bytes(&c) == BODY_CACHE_WARM * (LIMIT + 1));
    struct buf b = {0};
    CHECK(body_cache_take(&c, &b, LIMIT, LIMIT) == 0 && b.cap == LIMIT + 1 && c.n == BODY_CACHE_WARM - 1);
    body_cache_put(&c, &b, 6.0);
    /* five bodies at once: the four warm buffers and a new one */
    struct buf f[BODY_CACHE_WARM + 1];
    memset(f, 0, sizeof(f));
    for (int i = 0; i <= BODY_CACHE_WARM; i++)
        CHECK(body_cache_take(&c, &f[i], 3000000, LIMIT) == 0 && f[i].cap == LIMIT + 1);
    CHECK(c.n == 0);
    for (int i = 0; i <= BODY_CACHE_WARM; i++)
        body_cache_put(&c, &f[i], 7.0);
    CHECK(c.n == BODY_CACHE_WARM + 1);
    body_cache_trim(&c, 1e9);
    CHECK(c.n == BODY_CACHE_WARM); /* down to the warm count, never below */
    body_cache_free(&c);
    /* a limit whose buffers pass BODY_CACHE_WARM_BYTES: fewer, or none */
    struct body_cache d = {0};
    CHECK(body_cache_warm(&d, BODY_CACHE_WARM_BYTES / 2, 1.0) == 1 && d.keep == 1);
    body_cache_free(&d);
    struct body_cache e = {0};
    CHECK(body_cache_warm(&e, BODY_CACHE_WARM_BYTES, 1.0) == 0 && e.n == 0);
    body_cache_trim(&e, 1e9);
    body_cache_free(&e);
}

int main(void)
{
    test_warm();
    test_reuse();
    test_fit();
    test_slots_and_trim();
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
