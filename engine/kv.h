/* kv — bookkeeping of the paged KV cache: which blocks are free, who holds
 * them, which ones hold a reusable prompt prefix. The K/V data itself lives in
 * the backend (struct backend_kv, allocated by the graph: engine/graph.h);
 * kv only hands out block ids, and tells the caller when a block must be
 * copied (graph_kv_copy_block, queued before the step that writes it) before
 * a write.
 *
 * Blocks: n_blocks fixed-size blocks of block_size tokens. Each block has a
 * refcount: the number of block tables (struct kv_seq) that hold it. A block
 * with refcount 0 is either on the free list, or "cached": it holds a full
 * block of tokens registered in the prefix hash table and stays reusable until
 * it is evicted (LRU) because the free list ran dry. kv_free_count counts both
 * (every refcount-0 block can be handed out), so it returns to n_blocks once
 * every sequence has been released.
 *
 * Prefix hashes: the hash of a FULL block is a hash of its token ids chained
 * with the previous block's hash (kv_hash_block), so equal hashes mean equal
 * prefixes. The table keeps the tokens and the parent hash of each entry and
 * a lookup compares them too, so a 64-bit collision cannot hand out wrong K/V.
 *
 * Reservations (the admission policy lives in sched.c): kv_reserve promises n
 * blocks to a caller-held counter; kv_alloc takes one from such a counter.
 * The invariant reserved_total <= kv_free_count holds at all times, so an
 * allocation out of a reservation never fails and no running sequence is ever
 * starved of blocks (no preemption needed).
 *
 * Copy-on-write: kv_seq_fork shares every block of a table (refcount + 1);
 * kv_seq_prepare_write makes the block of a position exclusively owned before
 * it is written: a shared block is replaced by a fresh one and the caller
 * copies the data (the first divergent block of n > 1 choices).
 *
 * Thread: one owner (the engine thread); nothing here locks.
 */
#ifndef INFERD_KV_H
#define INFERD_KV_H

#include <stdint.h>

#include "err.h"

struct kv;

/* A sequence's block table: blocks[i] holds positions i*bs .. i*bs+bs-1. */
struct kv_seq {
    int32_t *blocks; /* [cap], caller-owned storage */
    int32_t n_blocks;
    int32_t cap;
};

/* Returns 0, INF_EINVAL (n_blocks < 1, block_size < 1) or INF_ENOMEM. */
int kv_new(int32_t n_blocks, int32_t block_size, struct kv **out);
void kv_free(struct kv *kv); /* accepts NULL */

int32_t kv_n_blocks(const struct kv *kv);
int32_t kv_block_size(const struct kv *kv);
/* Blocks with refcount 0 (free list + cached), i.e. allocatable. */
int32_t kv_free_count(const struct kv *kv);
/* Of those, the ones that hold a registered prefix block. */
int32_t kv_cached_count(const struct kv *kv);
/* Blocks promised by reservations and not yet allocated. */
int32_t kv_reserved_count(const struct kv *kv);
/* kv_free_count - kv_reserved_count: what a new reservation can get. */
int32_t kv_available(const struct kv *kv);
int32_t kv_refcount(const struct kv *kv, int32_t block);

/* Reserve n blocks into *resv (adds n). INF_EFULL when fewer than n are
 * available (nothing changes then). */
int kv_reserve(struct kv *kv, int32_t n, int32_t *resv);
/* Give back what is left of *resv (sets it to 0). */
void kv_unreserve(struct kv *kv, int32_t *resv);
/* Take one block (refcount 1) out of *resv. When the free list is empty the
 * least recently used cached block is evicted. Returns the block id, or
 * INF_EFULL when *resv is 0 (a caller bug; nothing changes). */
int32_t kv_alloc(struct kv *kv, int32_t *resv);

void kv_ref(struct kv *kv, int32_t block);   /* refcount + 1 (a cached block leaves the LRU) */
void kv_unref(struct kv *kv, int32_t block); /* refcount - 1; at 0 back to free list or LRU */

/* The chained hash of one full block of tokens (parent = hash of the previous
 * block, KV_HASH_ROOT for the first). */
#define KV_HASH_ROOT 0x6b76636163686521ull
uint64_t kv_hash_block(uint64_t parent, const int32_t *tokens, int32_t n);
/* The cached block for (hash, parent, tokens[block_size]), or -1. Does not
 * take a reference; a hit counts as a use for the LRU. */
int32_t kv_lookup(struct kv *kv, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Register a full block under its hash. Returns 0, or INF_EBUSY when the hash
 * is already present or the block is already registered (nothing changes). */
int kv_register(struct kv *kv, int32_t block, uint64_t hash, uint64_t parent,
                const int32_t *tokens);
/* Drop every refcount-0 cached block from the table (they become free). */
void kv_clear_cache(struct kv *kv);

/* Block tables. */
void kv_seq_init(struct kv_seq *s, int32_t *storage, int32_t cap);
/* Append a block the caller already holds a reference to. INF_ERANGE when full. */
int kv_seq_append(struct kv_seq *s, int32_t block);
/* dst (empty) shares every block of src. INF_ERANGE when dst is too small. */
int kv_seq_fork(struct kv *kv, struct kv_seq *dst, const struct kv_seq *src);
/* Make position pos writable: allocate its block out of *resv when the table
 * does not reach it yet (pos must then be in the next block), or replace a
 * shared block (refcount > 1) by a fresh one. On a replacement *copy_src and
 * *copy_dst name the blocks whose K/V the caller must copy (before any write);
 * otherwise they are -1. Returns 0, INF_ERANGE (pos beyond the next block or
 * beyond cap), INF_EFULL (*resv empty), or INF_EINTERNAL (the block is a
 * registered prefix block: full blocks are never written). */
int kv_seq_prepare_write(struct kv *kv, struct kv_seq *s, int32_t pos, int32_t *resv,
                         int32_t *copy_src, int32_t *copy_dst);
/* Drop every block of the table (refcounts - 1); the table becomes empty. */
void kv_seq_release(struct kv *kv, struct kv_seq *s);

/* Consistency check for tests: refcounts equal the references the caller
 * reports (refs[block] counted over all live tables), lists are well formed.
 * Returns 0 or INF_EINTERNAL. refs may be NULL (only the lists are checked). */
int kv_check(const struct kv *kv, const int32_t *refs);

#endif
