/* body_cache — request bodies' buffers kept for the next large body.
 *
 * A large body (a multi-megabyte prompt, a long token array) is copied
 * out of MHD's read buffer into its own buffer on the loop thread. A fresh
 * buffer of that size is a new mapping whose first touch faults page by
 * page; on the paravirtualized machines CI runs on that costs 18 us a
 * page (4 MB: 19 ms, against 0.3 ms to copy into pages already resident),
 * and the munmap at the end sends TLB shootdowns to every CPU (the engine
 * thread's included). In test_stall's perf profiles that copy was the
 * loop thread's largest user-space cost (the stream's rare 60-160 ms gaps
 * there stayed: CPU scheduling, test_stall.py says how it was told). So
 * buffers of BODY_CACHE_MIN bytes and more go back here when their
 * request ends and the next body of a size they fit reuses one, its pages
 * still resident. At most BODY_CACHE_SLOTS are kept (8 x max_body_bytes:
 * 32 MB at the 4 MB default, only after bodies that large came), and one
 * unused for BODY_CACHE_IDLE_S seconds is freed.
 *
 * Thread: the loop thread (requests begin and end there).
 */
#ifndef INFERD_API_BODY_CACHE_H
#define INFERD_API_BODY_CACHE_H

#include <stddef.h>

#include "api/buf.h"

#define BODY_CACHE_SLOTS 8
#define BODY_CACHE_MIN ((size_t)64 << 10) /* smaller: malloc's heap recycles them well */
#define BODY_CACHE_IDLE_S 30.0

struct body_cache {
    struct body_slot {
        char *p;
        size_t cap;
        double t_put; /* when it came back (for the idle trim) */
    } slot[BODY_CACHE_SLOTS];
    int n;
};

/* Make b (empty) hold a body of n bytes, n <= limit (the body limit): a
 * cached buffer when one fits, else a new one whose size is n rounded up
 * to a power of two (at most limit + 1), so that later bodies of about
 * that size fit it. INF_ENOMEM when none can be had. */
int body_cache_take(struct body_cache *c, struct buf *b, size_t n, size_t limit);
/* b's buffer back (kept, or freed when small or when the slots hold larger
 * ones); b is left empty. now: api_now(). */
void body_cache_put(struct body_cache *c, struct buf *b, double now);
/* Free the buffers unused since now - BODY_CACHE_IDLE_S. */
void body_cache_trim(struct body_cache *c, double now);
/* Bytes held (for /metrics). */
size_t body_cache_bytes(const struct body_cache *c);
void body_cache_free(struct body_cache *c);

#endif
