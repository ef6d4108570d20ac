/* sched_admit — admission: a queued request gets its sequence slots and
 * every KV block it can ever need (sched.h's policies), reusing the longest
 * cached chain of its full prompt blocks; and the registration of full
 * blocks in the prefix cache as sequences fill them.
 *
 * Threads: the engine thread; the admission queue under s->mu.
 */
#include "engine/sched_internal.h"

#include <string.h>

int32_t sched_admit_blocks_needed(const struct sched *s, const struct sched_handle *r)
{
    int64_t bs = s->cfg.block_size, total = (int64_t)r->n_prompt + r->max_tokens;
    int64_t fp = r->n_prompt / bs, per = (total + bs - 1) / bs - fp;
    int64_t need = fp + (int64_t)r->n_choices * per;

    return need > INT32_MAX ? INT32_MAX : (int32_t)need;
}

/* Try to admit r (the queue head). 1: admitted, 0: does not fit now. */
static int admit(struct sched *s, struct sched_handle *r)
{
    int32_t bs = s->cfg.block_size, hits = 0, need;
    struct seq *q0;

    /* slots, not live choices: a request holds its slots until it ends */
    if (s->n_slot_free < r->n_choices || s->n_run >= s->cfg.max_seqs)
        return 0;
    if (sched_admit_blocks_needed(s, r) > kv_available(s->kv) + (r->n_prompt - 1) / bs)
        return 0; /* cannot fit even with every possible hit */
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct seq *q = &s->slots[s->slot_free[--s->n_slot_free]];

        memset(q, 0, sizeof(*q));
        q->r = r;
        q->choice = c;
        kv_seq_init(&q->t, s->slot_blocks + (size_t)(q - s->slots) * (size_t)s->max_blocks_seq,
                    s->max_blocks_seq);
        q->gen = s->slot_gen + (size_t)(q - s->slots) * (size_t)s->cfg.n_ctx;
        q->chain = KV_HASH_ROOT;
        r->seqs[c] = q;
    }
    q0 = r->seqs[0];
    if (s->cfg.prefix_cache && !r->prompt_logprobs) {
        /* Longest cached chain of full prompt blocks, never the block of the
         * last prompt token: its row's logits are needed. */
        while (hits < (r->n_prompt - 1) / bs) {
            const int32_t *tk = r->prompt + (size_t)hits * (size_t)bs;
            uint64_t h = kv_hash_block(q0->chain, tk, bs);
            int32_t b = kv_lookup(s->kv, h, q0->chain, tk);

            if (b < 0)
                break;
            kv_ref(s->kv, b);
            (void)kv_seq_append(&q0->t, b);
            q0->chain = h;
            hits++;
        }
    }
    need = sched_admit_blocks_needed(s, r) - hits;
    r->resv = 0;
    if (kv_reserve(s->kv, need, &r->resv) != 0) {
        kv_seq_release(s->kv, &q0->t); /* hits go back to the LRU */
        for (int32_t c = r->n_choices - 1; c >= 0; c--) {
            s->slot_free[s->n_slot_free++] = (int32_t)(r->seqs[c] - s->slots);
            r->seqs[c] = NULL;
        }
        return 0;
    }
    q0->n_hashed = hits;
    q0->n_past = hits * bs;
    r->n_prefilled = hits * bs;
    r->n_live = r->n_choices;
    r->state = RQ_PREFILL;
    s->n_seq_live += r->n_choices;
    s->run[s->n_run++] = r;
    if (hits > 0) {
        s->st_prefix_hits++;
        s->st_prefix_hit_tokens += (uint64_t)hits * (uint64_t)bs;
    }
    sched_req_push_simple(s, r, SCHED_EV_ADMITTED, 0, 0, 0);
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct sample_params sp = r->sp;
        struct seq *q = r->seqs[c];

        sp.seed = r->sp.seed + (uint64_t)c;
        q->smp = sampler_new(s->n_vocab, &sp);
        if (!q->smp) {
            sched_req_fail(s, r, INF_ENOMEM);
            return 1;
        }
    }
    /* decided before the batch is built: a step downloads its logits only
     * when a row of it samples on the host */
    r->n_mask = (r->ignore_eos ? 0 : s->n_eog) + r->n_stop_ids;
    r->dev = s->dev && (!r->json || s->d_allow) && r->sp.n_bias <= s->st_max_bias &&
             r->n_mask <= s->st_max_mask;
    r->accept_pending = 1; /* the prompt goes to the samplers while the step computes */
    return 1;
}

static int32_t seq_token_at(const struct seq *q, int32_t pos)
{
    const struct sched_handle *r = q->r;

    return pos < r->n_prompt ? r->prompt[pos] : q->gen[pos - r->n_prompt];
}

/* Register the full blocks of q that are not hashed yet. */
void sched_admit_register_blocks(struct sched *s, struct seq *q)
{
    int32_t bs = s->cfg.block_size;

    if (!s->cfg.prefix_cache)
        return;
    while ((q->n_hashed + 1) * bs <= q->n_past) {
        int32_t base = q->n_hashed * bs;
        uint64_t h;

        for (int32_t i = 0; i < bs; i++)
            s->tokbuf[i] = seq_token_at(q, base + i);
        h = kv_hash_block(q->chain, s->tokbuf, bs);
        /* EBUSY: the same prefix is cached in another block already */
        (void)kv_register(s->kv, q->t.blocks[q->n_hashed], h, q->chain, s->tokbuf);
        q->chain = h;
        q->n_hashed++;
    }
}

/* Cancelled queued requests leave the queue; then admit from the head. */
void sched_admit_from_queue(struct sched *s, int cancel_all)
{
    struct sched_handle *gone = NULL, **link;

    pthread_mutex_lock(&s->mu);
    link = &s->q_head;
    s->q_tail = NULL;
    while (*link) {
        struct sched_handle *r = *link;

        if (cancel_all || atomic_load(&r->cancel)) {
            *link = r->next;
            r->next = gone;
            gone = r;
            s->n_queued--;
        } else {
            s->q_tail = r;
            link = &r->next;
        }
    }
    pthread_mutex_unlock(&s->mu);
    while (gone) {
        struct sched_handle *r = gone;

        gone = r->next;
        for (int32_t c = 0; c < r->n_choices; c++)
            sched_req_push_simple(s, r, SCHED_EV_DONE, c, SCHED_FINISH_CANCELED, 0);
        r->state = RQ_FINISHED;
        s->st_done++;
        s->dropped[s->n_dropped++] = r;
    }
    /* Only the engine removes from the queue and submit appends at the tail,
     * so the head stays put while we admit it outside the lock. */
    for (;;) {
        struct sched_handle *r;

        pthread_mutex_lock(&s->mu);
        r = s->q_head;
        pthread_mutex_unlock(&s->mu);
        if (!r || !admit(s, r))
            break;
        pthread_mutex_lock(&s->mu);
        s->q_head = r->next;
        if (!s->q_head)
            s->q_tail = NULL;
        s->n_queued--;
        pthread_mutex_unlock(&s->mu);
        r->next = NULL;
    }
}
