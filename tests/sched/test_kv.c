/* test_kv — paged KV bookkeeping: allocation, refcounts, copy-on-write,
 * prefix hashes, LRU eviction, reservations, and a long random leak test
 * that also simulates the cache contents (each slot remembers which token was
 * written there) to prove that shared, copied and reused blocks always hold
 * exactly the sequence's own tokens.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kv.h"
#include "tests/check.h"
#include "tests/xorshift.h"


static uint64_t kv_rng = 0x1234567887654321ull;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(rng_step(&kv_rng) % n);
}

static void test_basic(void)
{
    struct kv *kv;
    int32_t resv = 0, b[8];

    CHECK(kv_new(0, 16, &kv) == INF_EINVAL);
    CHECK(kv_new(8, 0, &kv) == INF_EINVAL);
    CHECK(kv_new(8, 4, &kv) == 0);
    CHECK(kv_n_blocks(kv) == 8 && kv_block_size(kv) == 4);
    CHECK(kv_free_count(kv) == 8 && kv_available(kv) == 8);
    CHECK(kv_alloc(kv, &resv) == INF_EFULL); /* no reservation */
    CHECK(kv_reserve(kv, 9, &resv) == INF_EFULL && resv == 0);
    CHECK(kv_reserve(kv, 5, &resv) == 0 && resv == 5);
    CHECK(kv_available(kv) == 3 && kv_free_count(kv) == 8);
    {
        int32_t r2 = 0;

        CHECK(kv_reserve(kv, 4, &r2) == INF_EFULL);
        CHECK(kv_reserve(kv, 3, &r2) == 0 && kv_available(kv) == 0);
        kv_unreserve(kv, &r2);
        CHECK(r2 == 0 && kv_available(kv) == 3);
    }
    for (int i = 0; i < 5; i++) {
        b[i] = kv_alloc(kv, &resv);
        CHECK(b[i] >= 0 && b[i] < 8 && kv_refcount(kv, b[i]) == 1);
        for (int j = 0; j < i; j++)
            CHECK(b[i] != b[j]);
    }
    CHECK(resv == 0 && kv_alloc(kv, &resv) == INF_EFULL);
    CHECK(kv_free_count(kv) == 3 && kv_reserved_count(kv) == 0);
    kv_ref(kv, b[0]);
    CHECK(kv_refcount(kv, b[0]) == 2);
    kv_unref(kv, b[0]);
    CHECK(kv_refcount(kv, b[0]) == 1 && kv_free_count(kv) == 3);
    for (int i = 0; i < 5; i++)
        kv_unref(kv, b[i]);
    CHECK(kv_free_count(kv) == 8 && kv_check(kv, NULL) == 0);
    kv_free(kv);
    kv_free(NULL);
}

static void test_cow(void)
{
    struct kv *kv;
    int32_t sa[8], sb[8], resv = 0, cs, cd;
    struct kv_seq a, b;

    CHECK(kv_new(16, 4, &kv) == 0);
    kv_seq_init(&a, sa, 8);
    kv_seq_init(&b, sb, 8);
    CHECK(kv_reserve(kv, 6, &resv) == 0);
    for (int32_t p = 0; p < 10; p++) { /* 10 tokens: blocks for 0-3, 4-7, 8-9 */
        CHECK(kv_seq_prepare_write(kv, &a, p, &resv, &cs, &cd) == 0);
        CHECK(cs == -1 && cd == -1);
    }
    CHECK(a.n_blocks == 3 && resv == 3);
    CHECK(kv_seq_prepare_write(kv, &a, 16, &resv, &cs, &cd) == INF_ERANGE);
    CHECK(kv_seq_fork(kv, &b, &a) == 0 && b.n_blocks == 3);
    for (int i = 0; i < 3; i++)
        CHECK(kv_refcount(kv, a.blocks[i]) == 2 && b.blocks[i] == a.blocks[i]);
    CHECK(kv_seq_fork(kv, &b, &a) == INF_ERANGE); /* dst not empty */
    /* b diverges at position 10: its copy of the partial block is replaced */
    CHECK(kv_seq_prepare_write(kv, &b, 10, &resv, &cs, &cd) == 0);
    CHECK(cs == a.blocks[2] && cd == b.blocks[2] && cs != cd);
    CHECK(kv_refcount(kv, a.blocks[2]) == 1 && kv_refcount(kv, b.blocks[2]) == 1);
    CHECK(b.blocks[0] == a.blocks[0] && b.blocks[1] == a.blocks[1]);
    /* a owns its block alone now: writes in place */
    CHECK(kv_seq_prepare_write(kv, &a, 10, &resv, &cs, &cd) == 0 && cs == -1);
    CHECK(resv == 2);
    CHECK(kv_seq_prepare_write(kv, &a, 12, &resv, &cs, &cd) == 0 && a.n_blocks == 4);
    CHECK(kv_free_count(kv) == 16 - 5);
    kv_seq_release(kv, &b);
    CHECK(b.n_blocks == 0 && kv_refcount(kv, a.blocks[0]) == 1);
    kv_seq_release(kv, &a);
    kv_unreserve(kv, &resv);
    CHECK(kv_free_count(kv) == 16 && kv_reserved_count(kv) == 0 && kv_check(kv, NULL) == 0);
    kv_free(kv);
}

static void test_prefix(void)
{
    struct kv *kv;
    int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {5, 6, 7, 8}, t3[4] = {5, 6, 7, 9};
    int32_t resv = 0, b1, b2;
    uint64_t h1, h2, h2x, h3;

    CHECK(kv_new(4, 4, &kv) == 0);
    h1 = kv_hash_block(KV_HASH_ROOT, t1, 4);
    h2 = kv_hash_block(h1, t2, 4);
    h2x = kv_hash_block(KV_HASH_ROOT, t2, 4); /* same tokens, other parent */
    h3 = kv_hash_block(h1, t3, 4);
    CHECK(h1 != h2 && h2 != h2x && h2 != h3);
    CHECK(h1 == kv_hash_block(KV_HASH_ROOT, t1, 4)); /* deterministic */
    CHECK(kv_reserve(kv, 2, &resv) == 0);
    b1 = kv_alloc(kv, &resv);
    b2 = kv_alloc(kv, &resv);
    CHECK(kv_register(kv, b1, h1, KV_HASH_ROOT, t1) == 0);
    CHECK(kv_register(kv, b1, h1, KV_HASH_ROOT, t1) == INF_EBUSY);
    CHECK(kv_register(kv, b2, h1, KV_HASH_ROOT, t1) == INF_EBUSY); /* duplicate hash */
    CHECK(kv_register(kv, b2, h2, h1, t2) == 0);
    CHECK(kv_lookup(kv, h1, KV_HASH_ROOT, t1) == b1);
    CHECK(kv_lookup(kv, h2, h1, t2) == b2);
    CHECK(kv_lookup(kv, h2x, KV_HASH_ROOT, t2) == -1);
    CHECK(kv_lookup(kv, h3, h1, t3) == -1);
    /* a forged hash with other tokens is refused by the token comparison */
    CHECK(kv_lookup(kv, h2, h1, t3) == -1);
    CHECK(kv_lookup(kv, h2, KV_HASH_ROOT, t2) == -1);
    kv_unref(kv, b2);
    kv_unref(kv, b1);
    /* released but cached: still found, counted as free */
    CHECK(kv_free_count(kv) == 4 && kv_cached_count(kv) == 2);
    CHECK(kv_lookup(kv, h1, KV_HASH_ROOT, t1) == b1);
    kv_ref(kv, b1); /* a cache hit takes a reference */
    CHECK(kv_free_count(kv) == 3 && kv_cached_count(kv) == 1 && kv_refcount(kv, b1) == 1);
    CHECK(kv_check(kv, NULL) == 0);
    kv_unref(kv, b1);
    kv_clear_cache(kv);
    CHECK(kv_cached_count(kv) == 0 && kv_free_count(kv) == 4);
    CHECK(kv_lookup(kv, h1, KV_HASH_ROOT, t1) == -1);
    CHECK(kv_check(kv, NULL) == 0);
    kv_free(kv);
}

static void test_evict(void)
{
    struct kv *kv;
    int32_t toks[6][2], b[6], resv = 0;
    uint64_t h[6];

    CHECK(kv_new(6, 2, &kv) == 0);
    CHECK(kv_reserve(kv, 6, &resv) == 0);
    for (int i = 0; i < 6; i++) {
        toks[i][0] = i;
        toks[i][1] = 100 + i;
        h[i] = kv_hash_block(KV_HASH_ROOT, toks[i], 2);
        b[i] = kv_alloc(kv, &resv);
        CHECK(kv_register(kv, b[i], h[i], KV_HASH_ROOT, toks[i]) == 0);
    }
    for (int i = 0; i < 6; i++) /* released in order: 0 is the oldest */
        kv_unref(kv, b[i]);
    CHECK(kv_cached_count(kv) == 6 && kv_free_count(kv) == 6);
    CHECK(kv_lookup(kv, h[0], KV_HASH_ROOT, toks[0]) == b[0]); /* 0 becomes youngest */
    CHECK(kv_reserve(kv, 2, &resv) == 0);
    CHECK(kv_alloc(kv, &resv) == b[1]); /* oldest evicted first */
    CHECK(kv_alloc(kv, &resv) == b[2]);
    CHECK(kv_lookup(kv, h[1], KV_HASH_ROOT, toks[1]) == -1);
    CHECK(kv_lookup(kv, h[2], KV_HASH_ROOT, toks[2]) == -1);
    CHECK(kv_lookup(kv, h[0], KV_HASH_ROOT, toks[0]) == b[0]);
    CHECK(kv_lookup(kv, h[3], KV_HASH_ROOT, toks[3]) == b[3]);
    CHECK(kv_cached_count(kv) == 4 && kv_free_count(kv) == 4);
    /* a cached block that gets a reference cannot be evicted */
    kv_ref(kv, b[4]);
    CHECK(kv_reserve(kv, 4, &resv) == INF_EFULL);
    CHECK(kv_reserve(kv, 3, &resv) == 0);
    for (int i = 0; i < 3; i++)
        CHECK(kv_alloc(kv, &resv) != b[4]);
    CHECK(kv_lookup(kv, h[4], KV_HASH_ROOT, toks[4]) == b[4]);
    CHECK(kv_free_count(kv) == 0 && kv_check(kv, NULL) == 0);
    kv_free(kv);
}

/* ---- random leak test ----
 * Requests with prompts drawn from a few templates (so prefixes repeat) get
 * cache hits, reservations as sched.c computes them, chunked writes, forks
 * into n choices with copy-on-write, and random cancellation. slot[] stands
 * for the K/V data: the token written at each physical slot. */

#define NB 64
#define BS 4
#define MAXS 8
#define CAP 16 /* blocks per table: 64 positions */

struct simseq {
    int live;
    struct kv_seq t;
    int32_t tb[CAP];
    int32_t tok[CAP * BS]; /* the sequence's tokens */
    int32_t n_tok;         /* total it will have (prompt + gen) */
    int32_t n_prompt;
    int32_t n_past;        /* positions written */
    int32_t n_hashed;
    uint64_t chain;
    int32_t req;
};

struct simreq {
    int live;
    int32_t resv;
    int32_t n_choices;
    int32_t seqs[MAXS];
};

static int32_t slot[NB * BS];
static struct simseq seqs[MAXS];
static struct simreq reqs[MAXS];
static const int32_t tmpl[3][40] = {
    {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
    {1, 2, 3, 4, 5, 6, 7, 8, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
    {50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61},
};

static void verify_seq(const struct simseq *s)
{
    for (int32_t p = 0; p < s->n_past; p++) {
        int32_t b = s->t.blocks[p / BS];

        if (slot[b * BS + p % BS] != s->tok[p]) {
            fprintf(stderr, "slot mismatch at pos %d\n", p);
            fails++;
            return;
        }
    }
}

static void end_req(struct kv *kv, int r)
{
    for (int c = 0; c < reqs[r].n_choices; c++) {
        struct simseq *s = &seqs[reqs[r].seqs[c]];

        if (s->live) {
            verify_seq(s);
            kv_seq_release(kv, &s->t);
            s->live = 0;
        }
    }
    kv_unreserve(kv, &reqs[r].resv);
    reqs[r].live = 0;
}

static void register_full(struct kv *kv, struct simseq *s)
{
    while ((s->n_hashed + 1) * BS <= s->n_past) {
        const int32_t *tk = &s->tok[s->n_hashed * BS];
        uint64_t h = kv_hash_block(s->chain, tk, BS);

        (void)kv_register(kv, s->t.blocks[s->n_hashed], h, s->chain, tk);
        s->chain = h;
        s->n_hashed++;
    }
}

static void new_req(struct kv *kv)
{
    int r, n = 1 + (int)rnd(3), si[MAXS], nfree = 0;
    int32_t np, gen, total, fp, need, hits = 0, i;
    const int32_t *tp;
    struct simseq *s0;

    for (r = 0; r < MAXS && reqs[r].live; r++)
        ;
    for (i = 0; i < MAXS; i++)
        if (!seqs[i].live && nfree < n)
            si[nfree++] = i;
    if (r == MAXS || nfree < n)
        return;
    tp = tmpl[rnd(3)];
    np = 4 + (int32_t)rnd(9);
    while (np > 1 && tp[np - 1] == 0)
        np--;
    gen = 1 + (int32_t)rnd(20);
    total = np + gen;
    s0 = &seqs[si[0]];
    memset(s0, 0, sizeof(*s0));
    kv_seq_init(&s0->t, s0->tb, CAP);
    for (i = 0; i < np; i++)
        s0->tok[i] = tp[i];
    s0->n_prompt = np;
    s0->n_tok = total;
    s0->chain = KV_HASH_ROOT;
    /* prefix hits: full blocks, never the one holding the last prompt token */
    while (hits < (np - 1) / BS) {
        const int32_t *tk = &s0->tok[hits * BS];
        uint64_t h = kv_hash_block(s0->chain, tk, BS);
        int32_t b = kv_lookup(kv, h, s0->chain, tk);

        if (b < 0)
            break;
        kv_ref(kv, b);
        kv_seq_append(&s0->t, b);
        s0->chain = h;
        hits++;
    }
    s0->n_hashed = hits;
    s0->n_past = hits * BS;
    verify_seq(s0); /* the cached blocks hold exactly our prefix */
    fp = np / BS;
    need = fp + n * ((total + BS - 1) / BS - fp) - hits;
    reqs[r].resv = 0;
    if (kv_reserve(kv, need, &reqs[r].resv) != 0) {
        kv_seq_release(kv, &s0->t);
        return;
    }
    reqs[r].live = 1;
    reqs[r].n_choices = n;
    for (int c = 0; c < n; c++) {
        if (c > 0) { /* claimed, empty until the fork */
            memset(&seqs[si[c]], 0, sizeof(seqs[0]));
            kv_seq_init(&seqs[si[c]].t, seqs[si[c]].tb, CAP);
        }
        reqs[r].seqs[c] = si[c];
        seqs[si[c]].req = r;
        seqs[si[c]].live = 1;
    }
}

/* One "step" of one sequence: write up to k positions. */
static void advance(struct kv *kv, int r)
{
    struct simreq *q = &reqs[r];
    struct simseq *s0 = &seqs[q->seqs[0]];
    int32_t k = 1 + (int32_t)rnd(6);

    if (s0->n_past < s0->n_prompt) { /* prefill chunk on choice 0 */
        for (int32_t j = 0; j < k && s0->n_past < s0->n_prompt; j++) {
            int32_t cs, cd, p = s0->n_past;

            CHECK(kv_seq_prepare_write(kv, &s0->t, p, &q->resv, &cs, &cd) == 0);
            CHECK(cs == -1);
            slot[s0->t.blocks[p / BS] * BS + p % BS] = s0->tok[p];
            s0->n_past++;
        }
        register_full(kv, s0);
        if (s0->n_past == s0->n_prompt) /* fork the other choices */
            for (int c = 1; c < q->n_choices; c++) {
                struct simseq *s = &seqs[q->seqs[c]];

                *s = *s0;
                kv_seq_init(&s->t, s->tb, CAP);
                CHECK(kv_seq_fork(kv, &s->t, &s0->t) == 0);
                s->live = 1;
            }
        return;
    }
    for (int c = 0; c < q->n_choices; c++) { /* decode one token per choice */
        struct simseq *s = &seqs[q->seqs[c]];
        int32_t cs, cd, p = s->n_past;

        if (!s->live)
            continue;
        if (p >= s->n_tok - 1) { /* finished */
            verify_seq(s);
            kv_seq_release(kv, &s->t);
            s->live = 0;
            continue;
        }
        s->tok[p] = 1000 + 10 * c + (int32_t)rnd(3); /* choices diverge */
        CHECK(kv_seq_prepare_write(kv, &s->t, p, &q->resv, &cs, &cd) == 0);
        if (cs >= 0)
            memcpy(&slot[cd * BS], &slot[cs * BS], BS * sizeof(int32_t));
        slot[s->t.blocks[p / BS] * BS + p % BS] = s->tok[p];
        s->n_past++;
        register_full(kv, s);
    }
}

static void test_random(void)
{
    struct kv *kv;
    int32_t refs[NB];
    int steps = 20000, live_reqs;

    CHECK(kv_new(NB, BS, &kv) == 0);
    for (int it = 0; it < steps; it++) {
        uint32_t a = rnd(10);
        int r = (int)rnd(MAXS);

        if (a < 3)
            new_req(kv);
        else if (a < 9 && reqs[r].live)
            advance(kv, r);
        else if (reqs[r].live) /* cancel at a random point (also mid-prefill) */
            end_req(kv, r);
        for (r = 0; r < MAXS; r++) { /* requests whose choices all ended */
            int any = 0;

            if (!reqs[r].live)
                continue;
            for (int c = 0; c < reqs[r].n_choices; c++)
                any |= seqs[reqs[r].seqs[c]].live;
            if (!any)
                end_req(kv, r);
        }
        if (it % 97 == 0) {
            memset(refs, 0, sizeof(refs));
            for (int i = 0; i < MAXS; i++)
                if (seqs[i].live)
                    for (int32_t j = 0; j < seqs[i].t.n_blocks; j++)
                        refs[seqs[i].t.blocks[j]]++;
            if (kv_check(kv, refs) != 0) {
                fprintf(stderr, "kv_check failed at step %d\n", it);
                fails++;
                break;
            }
        }
    }
    live_reqs = 0;
    for (int r = 0; r < MAXS; r++)
        if (reqs[r].live) {
            live_reqs++;
            end_req(kv, r);
        }
    printf("random: %d steps, %d live at the end, %d cached blocks\n", steps, live_reqs,
           kv_cached_count(kv));
    CHECK(kv_free_count(kv) == NB);
    CHECK(kv_reserved_count(kv) == 0);
    CHECK(kv_check(kv, NULL) == 0);
    kv_free(kv);
}

int main(void)
{
    test_basic();
    test_cow();
    test_prefix();
    test_evict();
    test_random();
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
