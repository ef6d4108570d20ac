/* kv — paged KV cache bookkeeping (see kv.h for the model).
 *
 * Every block is in exactly one of three states:
 *   in use   refcount > 0 (possibly also registered in the prefix table),
 *   cached   refcount 0, registered: on the LRU list (head = oldest),
 *   free     refcount 0, not registered: on the free stack.
 * The prefix table is a chained hash table threaded through per-block
 * `hnext` links, so registering and evicting allocate nothing.
 * Thread: the engine thread only.
 */
#include "engine/kv.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct kv {
    int32_t n_blocks;
    int32_t block_size;
    int32_t *ref;        /* [n_blocks] refcounts */
    int32_t *free_stack; /* [n_blocks] free (unregistered, refcount 0) block ids */
    int32_t n_free;
    int32_t reserved;    /* promised by reservations, not yet allocated */

    /* LRU of cached blocks: doubly linked through lru_prev/lru_next, -1 ends. */
    int32_t *lru_prev, *lru_next;
    int32_t lru_head, lru_tail;
    int32_t n_cached;

    /* prefix table */
    uint8_t *hashed;     /* [n_blocks] 1: registered */
    uint64_t *hash;      /* [n_blocks] */
    uint64_t *parent;    /* [n_blocks] */
    int32_t *htok;       /* [n_blocks][block_size] the block's tokens */
    int32_t *hnext;      /* [n_blocks] next block in the same bucket, -1 ends */
    int32_t *bucket;     /* [n_buckets] first block, -1 empty */
    uint32_t bucket_mask;
};

int kv_new(int32_t n_blocks, int32_t block_size, struct kv **out)
{
    struct kv *kv;
    uint32_t nb = 1;

    *out = NULL;
    if (n_blocks < 1 || block_size < 1 || n_blocks > (1 << 24) || block_size > 4096)
        return INF_EINVAL;
    while (nb < 2u * (uint32_t)n_blocks)
        nb <<= 1;
    kv = calloc(1, sizeof(*kv));
    if (!kv)
        return INF_ENOMEM;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->ref = calloc((size_t)n_blocks, sizeof(int32_t));
    kv->free_stack = malloc((size_t)n_blocks * sizeof(int32_t));
    kv->lru_prev = malloc((size_t)n_blocks * sizeof(int32_t));
    kv->lru_next = malloc((size_t)n_blocks * sizeof(int32_t));
    kv->hashed = calloc((size_t)n_blocks, 1);
    kv->hash = calloc((size_t)n_blocks, sizeof(uint64_t));
    kv->parent = calloc((size_t)n_blocks, sizeof(uint64_t));
    kv->htok = malloc((size_t)n_blocks * (size_t)block_size * sizeof(int32_t));
    kv->hnext = malloc((size_t)n_blocks * sizeof(int32_t));
    kv->bucket = malloc((size_t)nb * sizeof(int32_t));
    if (!kv->ref || !kv->free_stack || !kv->lru_prev || !kv->lru_next || !kv->hashed ||
        !kv->hash || !kv->parent || !kv->htok || !kv->hnext || !kv->bucket) {
        kv_free(kv);
        return INF_ENOMEM;
    }
    kv->bucket_mask = nb - 1;
    for (uint32_t i = 0; i < nb; i++)
        kv->bucket[i] = -1;
    /* Stack order: block 0 is handed out first (easier to read in logs). */
    for (int32_t i = 0; i < n_blocks; i++) {
        kv->free_stack[i] = n_blocks - 1 - i;
        kv->lru_prev[i] = kv->lru_next[i] = kv->hnext[i] = -1;
    }
    kv->n_free = n_blocks;
    kv->lru_head = kv->lru_tail = -1;
    *out = kv;
    return 0;
}

void kv_free(struct kv *kv)
{
    if (!kv)
        return;
    free(kv->ref);
    free(kv->free_stack);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv->hashed);
    free(kv->hash);
    free(kv->parent);
    free(kv->htok);
    free(kv->hnext);
    free(kv->bucket);
    free(kv);
}

int32_t kv_n_blocks(const struct kv *kv) { return kv->n_blocks; }
int32_t kv_block_size(const struct kv *kv) { return kv->block_size; }
int32_t kv_free_count(const struct kv *kv) { return kv->n_free + kv->n_cached; }
int32_t kv_cached_count(const struct kv *kv) { return kv->n_cached; }
int32_t kv_reserved_count(const struct kv *kv) { return kv->reserved; }
int32_t kv_available(const struct kv *kv) { return kv_free_count(kv) - kv->reserved; }

int32_t kv_refcount(const struct kv *kv, int32_t block)
{
    if (block < 0 || block >= kv->n_blocks)
        return -1;
    return kv->ref[block];
}

/* ---- LRU list of cached blocks ---- */

static void lru_unlink(struct kv *kv, int32_t b)
{
    int32_t p = kv->lru_prev[b], n = kv->lru_next[b];

    if (p >= 0)
        kv->lru_next[p] = n;
    else
        kv->lru_head = n;
    if (n >= 0)
        kv->lru_prev[n] = p;
    else
        kv->lru_tail = p;
    kv->lru_prev[b] = kv->lru_next[b] = -1;
    kv->n_cached--;
}

static void lru_push_tail(struct kv *kv, int32_t b)
{
    kv->lru_prev[b] = kv->lru_tail;
    kv->lru_next[b] = -1;
    if (kv->lru_tail >= 0)
        kv->lru_next[kv->lru_tail] = b;
    else
        kv->lru_head = b;
    kv->lru_tail = b;
    kv->n_cached++;
}

/* ---- prefix table ---- */

static void table_remove(struct kv *kv, int32_t b)
{
    int32_t *link = &kv->bucket[kv->hash[b] & kv->bucket_mask];

    while (*link >= 0 && *link != b)
        link = &kv->hnext[*link];
    assert(*link == b); /* a registered block is always in its bucket */
    if (*link == b)
        *link = kv->hnext[b];
    kv->hnext[b] = -1;
    kv->hashed[b] = 0;
}

static int32_t table_find(const struct kv *kv, uint64_t hash)
{
    int32_t b = kv->bucket[hash & kv->bucket_mask];

    while (b >= 0 && kv->hash[b] != hash)
        b = kv->hnext[b];
    return b;
}

uint64_t kv_hash_block(uint64_t parent, const int32_t *tokens, int32_t n)
{
    /* splitmix64's finalizer over (state ^ token): every token moves every bit. */
    uint64_t h = parent ^ ((uint64_t)(uint32_t)n * 0x9e3779b97f4a7c15ull);

    for (int32_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return h;
}

int32_t kv_lookup(struct kv *kv, uint64_t hash, uint64_t parent, const int32_t *tokens)
{
    int32_t b = table_find(kv, hash);

    if (b < 0 || kv->parent[b] != parent ||
        memcmp(&kv->htok[(size_t)b * (size_t)kv->block_size], tokens,
               (size_t)kv->block_size * sizeof(int32_t)) != 0)
        return -1;
    if (kv->ref[b] == 0) { /* a use: move to the young end of the LRU */
        lru_unlink(kv, b);
        lru_push_tail(kv, b);
    }
    return b;
}

int kv_register(struct kv *kv, int32_t block, uint64_t hash, uint64_t parent,
                const int32_t *tokens)
{
    uint32_t bi;

    if (block < 0 || block >= kv->n_blocks || kv->ref[block] <= 0)
        return INF_EINVAL; /* only a held block has defined contents */
    if (kv->hashed[block] || table_find(kv, hash) >= 0)
        return INF_EBUSY;
    bi = (uint32_t)(hash & kv->bucket_mask);
    kv->hashed[block] = 1;
    kv->hash[block] = hash;
    kv->parent[block] = parent;
    memcpy(&kv->htok[(size_t)block * (size_t)kv->block_size], tokens,
           (size_t)kv->block_size * sizeof(int32_t));
    kv->hnext[block] = kv->bucket[bi];
    kv->bucket[bi] = block;
    return 0;
}

void kv_clear_cache(struct kv *kv)
{
    while (kv->lru_head >= 0) {
        int32_t b = kv->lru_head;

        lru_unlink(kv, b);
        table_remove(kv, b);
        kv->free_stack[kv->n_free++] = b;
    }
}

/* ---- reservations, allocation, references ---- */

int kv_reserve(struct kv *kv, int32_t n, int32_t *resv)
{
    if (n < 0 || n > kv_available(kv))
        return INF_EFULL;
    kv->reserved += n;
    *resv += n;
    return 0;
}

void kv_unreserve(struct kv *kv, int32_t *resv)
{
    assert(*resv >= 0 && *resv <= kv->reserved);
    kv->reserved -= *resv;
    *resv = 0;
}

int32_t kv_alloc(struct kv *kv, int32_t *resv)
{
    int32_t b;

    if (*resv <= 0)
        return INF_EFULL;
    if (kv->n_free > 0) {
        b = kv->free_stack[--kv->n_free];
    } else {
        /* reserved <= free count, so a cached block exists: evict the oldest */
        b = kv->lru_head;
        assert(b >= 0);
        if (b < 0)
            return INF_EINTERNAL;
        lru_unlink(kv, b);
        table_remove(kv, b);
    }
    (*resv)--;
    kv->reserved--;
    kv->ref[b] = 1;
    return b;
}

void kv_ref(struct kv *kv, int32_t block)
{
    assert(block >= 0 && block < kv->n_blocks);
    /* Only held or cached blocks may gain a reference; a free block's
     * contents are undefined (it must come from kv_alloc). */
    assert(kv->ref[block] > 0 || kv->hashed[block]);
    if (kv->ref[block] == 0)
        lru_unlink(kv, block);
    kv->ref[block]++;
}

void kv_unref(struct kv *kv, int32_t block)
{
    assert(block >= 0 && block < kv->n_blocks && kv->ref[block] > 0);
    if (--kv->ref[block] > 0)
        return;
    if (kv->hashed[block])
        lru_push_tail(kv, block);
    else
        kv->free_stack[kv->n_free++] = block;
}

/* ---- block tables ---- */

void kv_seq_init(struct kv_seq *s, int32_t *storage, int32_t cap)
{
    s->blocks = storage;
    s->n_blocks = 0;
    s->cap = cap;
}

int kv_seq_append(struct kv_seq *s, int32_t block)
{
    if (s->n_blocks >= s->cap)
        return INF_ERANGE;
    s->blocks[s->n_blocks++] = block;
    return 0;
}

int kv_seq_fork(struct kv *kv, struct kv_seq *dst, const struct kv_seq *src)
{
    if (dst->n_blocks != 0 || src->n_blocks > dst->cap)
        return INF_ERANGE;
    for (int32_t i = 0; i < src->n_blocks; i++) {
        kv_ref(kv, src->blocks[i]);
        dst->blocks[i] = src->blocks[i];
    }
    dst->n_blocks = src->n_blocks;
    return 0;
}

int kv_seq_prepare_write(struct kv *kv, struct kv_seq *s, int32_t pos, int32_t *resv,
                         int32_t *copy_src, int32_t *copy_dst)
{
    int32_t bi = pos / kv->block_size, b, nb;

    *copy_src = *copy_dst = -1;
    if (pos < 0 || bi > s->n_blocks || bi >= s->cap)
        return INF_ERANGE;
    if (bi == s->n_blocks) {
        nb = kv_alloc(kv, resv);
        if (nb < 0)
            return nb;
        s->blocks[s->n_blocks++] = nb;
        return 0;
    }
    b = s->blocks[bi];
    if (kv->hashed[b])
        return INF_EINTERNAL;
    if (kv->ref[b] == 1)
        return 0;
    nb = kv_alloc(kv, resv);
    if (nb < 0)
        return nb;
    kv_unref(kv, b); /* still >= 1: the other holders keep it */
    s->blocks[bi] = nb;
    *copy_src = b;
    *copy_dst = nb;
    return 0;
}

void kv_seq_release(struct kv *kv, struct kv_seq *s)
{
    /* Release from the last block so that, for a cached chain, the deepest
     * block lands oldest in the LRU and is evicted before its parents (a
     * child is useless without its parent). */
    for (int32_t i = s->n_blocks - 1; i >= 0; i--)
        kv_unref(kv, s->blocks[i]);
    s->n_blocks = 0;
}

int kv_check(const struct kv *kv, const int32_t *refs)
{
    int32_t n = kv->n_blocks, n_zero = 0, cnt = 0;
    uint8_t *seen = calloc((size_t)n, 1);
    int rc = 0;

    if (!seen)
        return INF_ENOMEM;
    for (int32_t b = 0; b < n; b++) {
        if (kv->ref[b] < 0 || (refs && refs[b] != kv->ref[b]))
            rc = INF_EINTERNAL;
        if (kv->ref[b] == 0)
            n_zero++;
        if (kv->hashed[b]) { /* must be findable in its bucket */
            int32_t x = kv->bucket[kv->hash[b] & kv->bucket_mask];

            while (x >= 0 && x != b)
                x = kv->hnext[x];
            if (x != b)
                rc = INF_EINTERNAL;
        }
    }
    for (int32_t i = 0; i < kv->n_free; i++) {
        int32_t b = kv->free_stack[i];

        if (b < 0 || b >= n || seen[b] || kv->ref[b] != 0 || kv->hashed[b])
            rc = INF_EINTERNAL;
        else
            seen[b] = 1;
    }
    for (int32_t b = kv->lru_head, prev = -1; b >= 0; prev = b, b = kv->lru_next[b]) {
        if (b >= n || seen[b] || kv->ref[b] != 0 || !kv->hashed[b] ||
            kv->lru_prev[b] != prev || ++cnt > n) {
            rc = INF_EINTERNAL;
            break;
        }
        seen[b] = 1;
    }
    if (cnt != kv->n_cached || kv->n_free + kv->n_cached != n_zero ||
        kv->reserved < 0 || kv->reserved > kv_free_count(kv))
        rc = INF_EINTERNAL;
    free(seen);
    return rc;
}
