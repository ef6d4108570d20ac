/* body_cache — request bodies' buffers kept for the next large body.
 *
 * A large body (a multi-megabyte prompt, a long token array) is copied
 * out of MHD's read buffer into its own buffer on the loop thread. A fresh
 * buffer of that size is a new mapping whose first touch faults page by
 * page; on the paravirtualized machines CI runs on that costs 18 us a
 * page (4 MB: 19 ms, against 0.3 ms to copy into pages already resident),
 * and the munmap at the end sends TLB shootdowns to every CPU (the engine
 * thread's included). In test_stall's perf profiles that copy was the
 * loop thread's largest cost (45-70 ms of its CPU in one loop iteration,
 * a stream's gaps of 60-160 ms in a third of the measurements). So
 * buffers of BODY_CACHE_MIN bytes and more go back here when their
 * request ends and the next body of a size they fit reuses one, its pages
 * still resident. At most BODY_CACHE_SLOTS are kept (8 x max_body_bytes:
 * 32 MB at the 4 MB default, only after bodies that large came), and one
 * unused for BODY_CACHE_IDLE_S seconds is freed, down to the warm ones.
 *
 * Warm: reuse alone left the first burst of large bodies cold (test_stall's
 * long gaps then came in its first round: 45-53 ms of the loop's CPU in
 * that copy, perf; longest gaps 17-62 ms over 5 measurements, 16-33 ms
 * over 8 with the warm buffers). A fresh page costs its first write even when mapped
 * with MAP_POPULATE (4 MB: 1.2 ms to populate, then 9-10 ms to write; the
 * host backs the guest's pages on their first write), so only pages
 * written once already are cheap: body_cache_warm writes BODY_CACHE_WARM
 * buffers of the body limit at startup (16 MB at the 4 MB default; none
 * when that would pass BODY_CACHE_WARM_BYTES), and the trim keeps them.
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
#define BODY_CACHE_WARM 4                           /* buffers written at startup */
#define BODY_CACHE_WARM_BYTES ((size_t)64 << 20)    /* at most this much of them */

struct body_cache {
    struct body_slot {
        char *p;
        size_t cap;
        double t_put; /* when it came back (for the idle trim) */
    } slot[BODY_CACHE_SLOTS];
    int n;
    int keep; /* the trim leaves this many (body_cache_warm's) */
};

/* Make b (empty) hold a body of n bytes, n <= limit (the body limit): a
 * cached buffer when one fits, else a new one whose size is n rounded up
 * to a power of two (at most limit + 1), so that later bodies of about
 * that size fit it. INF_ENOMEM when none can be had. */
int body_cache_take(struct body_cache *c, struct buf *b, size_t n, size_t limit);
/* b's buffer back (kept, or freed when small or when the slots hold larger
 * ones); b is left empty. now: api_now(). */
void body_cache_put(struct body_cache *c, struct buf *b, double now);
/* Write BODY_CACHE_WARM buffers of limit + 1 bytes (fewer when that passes
 * BODY_CACHE_WARM_BYTES) and keep them; the trim leaves that many. Returns
 * how many; an allocation failure only makes it fewer. */
int body_cache_warm(struct body_cache *c, size_t limit, double now);
/* Free the buffers unused since now - BODY_CACHE_IDLE_S (c->keep stay). */
void body_cache_trim(struct body_cache *c, double now);
/* Bytes held (for /metrics). */
size_t body_cache_bytes(const struct body_cache *c);
void body_cache_free(struct body_cache *c);

#endif
