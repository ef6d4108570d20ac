/* cuda/wcopies — a table of resident copies of registered weights in
 * another layout, made once at registration under a byte budget: the F16
 * copies of config f16_weights_mb (cuda/mm_deq.cu) and mmq6w's Q6_K planes
 * (config q6_planes_percent, cuda/q6planes.cu). An entry is keyed by the
 * weight's device rows, ne0 and ne1, so a fused group's view (its first
 * member's rows, more of them) never finds a member's copy; weight_fuse
 * re-keys (cuda_wcopy_rekey) or drops them. Host only; a few hundred
 * entries at most, looked up once a large product. */
#ifndef INFERD_CUDA_WCOPIES_CUH
#define INFERD_CUDA_WCOPIES_CUH

#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime.h>

struct cuda_wcopy {
    const void *src; /* the weight's rows on the device (backend_weight.data) */
    int64_t ne0, ne1;
    void *p;         /* the copy */
    size_t bytes;
};
struct cuda_wcopies {
    struct cuda_wcopy *e;
    int n, cap;
    int full;        /* once the device refused one (the caller logs the first) */
    size_t budget, bytes;
};

static inline const struct cuda_wcopy *cuda_wcopy_find(const struct cuda_wcopies *t, const void *src, int64_t ne0,
                                                       int64_t ne1)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].src == src && t->e[i].ne0 == ne0 && t->e[i].ne1 == ne1)
            return &t->e[i];
    return NULL;
}

/* Room for one more copy of `bytes`: within the budget (force: past it)
 * and a slot in the table. 1, or 0 (then none is made). */
static inline int cuda_wcopy_room(struct cuda_wcopies *t, size_t bytes, int force)
{
    if (!force && (t->budget < bytes || t->bytes > t->budget - bytes))
        return 0;
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 64;
        struct cuda_wcopy *e = (struct cuda_wcopy *)realloc(t->e, sizeof(*e) * (size_t)cap);
        if (!e)
            return 0;
        t->e = e;
        t->cap = cap;
    }
    return 1;
}

/* after cuda_wcopy_room said 1 */
static inline void cuda_wcopy_put(struct cuda_wcopies *t, const void *src, int64_t ne0, int64_t ne1, void *p,
                                  size_t bytes)
{
    t->e[t->n++] = cuda_wcopy{src, ne0, ne1, p, bytes};
    t->bytes += bytes;
}

/* the copy of (src, ne0, ne1), if any, freed (the caller synchronized the
 * stream that may read it) */
static inline void cuda_wcopy_drop(struct cuda_wcopies *t, const void *src, int64_t ne0, int64_t ne1)
{
    const struct cuda_wcopy *r = cuda_wcopy_find(t, src, ne0, ne1);
    if (!r)
        return;
    cudaFree(r->p);
    t->bytes -= r->bytes;
    t->e[r - t->e] = t->e[--t->n];
}

/* weight_fuse moved a weight's rows from `from` to `to` */
static inline void cuda_wcopy_rekey(struct cuda_wcopies *t, const void *from, const void *to)
{
    for (int i = 0; i < t->n; i++)
        if (t->e[i].src == from)
            t->e[i].src = to;
}

/* all of them (destroy); the budget stays */
static inline void cuda_wcopy_free(struct cuda_wcopies *t)
{
    for (int i = 0; i < t->n; i++)
        cudaFree(t->e[i].p);
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
    t->bytes = 0;
}

#endif
