/* sched_step — one step of the engine loop: cancels, admission, the batch
 * (one decode row per running choice, then prompt chunks under the token
 * budget), graph_submit, the previous step's publication while the device
 * computes, graph_wait, positions and prefix registration, sampling, and
 * this step's publication left pending (engine/sched.c's file comment).
 *
 * Threads: the engine thread.
 */
#include "engine/sched_internal.h"

#include <string.h>

#include "engine/graph.h"
#include "engine/log.h"

/* Make pos of q writable (allocating / copying a block); 0 or error. */
static int prepare_pos(struct sched *s, struct seq *q, int32_t pos)
{
    int32_t cs, cd;
    int rc = kv_seq_prepare_write(s->kv, &q->t, pos, &q->r->resv, &cs, &cd);

    if (rc == 0 && cs >= 0)
        rc = graph_kv_copy_block(s->g, cs, cd);
    return rc;
}

void sched_step(struct sched *s, int cancel_all)
{
    double t0 = sched_now(), t_pub;
    int32_t nt = 0, nl = 0, ns = 0, budget, min_prefill, n_dev = 0, n_dec;
    struct graph_batch b;
    int rc;

    sched_req_apply_cancels(s, cancel_all);
    sched_admit_from_queue(s, cancel_all);

    /* decode rows: one per running choice */
    for (int32_t i = 0; i < s->n_run; i++) {
        struct sched_handle *r = s->run[i];

        r->chunk = 0;
        if (r->state != RQ_DECODE)
            continue;
        for (int32_t c = 0; c < r->n_choices && r->state == RQ_DECODE; c++) {
            struct seq *q = r->seqs[c];

            if (q->done)
                continue;
            rc = prepare_pos(s, q, q->n_past);
            if (rc != 0) {
                sched_req_fail(s, r, rc);
                break;
            }
            s->b_tok[nt] = q->last;
            s->b_pos[nt] = q->n_past;
            s->b_seq[nt] = ns;
            s->b_bt[ns++] = q->t.blocks;
            s->b_lrows[nl] = nt;
            s->b_use[nl++] = (struct row_use){ROW_DECODE, r, q, q->n_past};
            nt++;
        }
        if (r->state != RQ_DECODE) { /* failed: take its rows back out */
            while (nl > 0 && s->b_use[nl - 1].r == r) {
                nl--;
                nt--;
                ns--;
            }
        }
    }

    n_dec = nt;
    /* prompt chunks in admission order */
    budget = s->cfg.step_tokens - nt;
    min_prefill = s->cfg.step_tokens / 4 > 0 ? s->cfg.step_tokens / 4 : 1;
    if (budget < min_prefill)
        budget = min_prefill;
    if (budget > s->max_tokens_fwd - nt)
        budget = s->max_tokens_fwd - nt;
    for (int32_t i = 0; i < s->n_run && budget > 0; i++) {
        struct sched_handle *r = s->run[i];
        struct seq *q0;
        int32_t chunk, seqi, start;

        if (r->state != RQ_PREFILL)
            continue;
        q0 = r->seqs[0];
        start = r->n_prefilled;
        chunk = r->n_prompt - start;
        if (chunk > budget)
            chunk = budget;
        if (r->prompt_logprobs) {
            if (chunk > s->max_logits - nl)
                chunk = s->max_logits - nl;
        } else if (start + chunk == r->n_prompt && nl == s->max_logits) {
            chunk--; /* no logits row left for the last prompt token */
        }
        if (chunk <= 0)
            break;
        seqi = ns;
        s->b_bt[ns++] = q0->t.blocks;
        rc = 0;
        for (int32_t j = 0; j < chunk && rc == 0; j++) {
            int32_t p = start + j;

            rc = prepare_pos(s, q0, p);
            s->b_tok[nt + j] = r->prompt[p];
            s->b_pos[nt + j] = p;
            s->b_seq[nt + j] = seqi;
        }
        if (rc != 0) {
            ns--;
            sched_req_fail(s, r, rc);
            continue;
        }
        for (int32_t j = 0; j < chunk; j++) {
            int32_t p = start + j;

            if (p == r->n_prompt - 1) {
                s->b_lrows[nl] = nt + j;
                s->b_use[nl++] = (struct row_use){ROW_FIRST, r, NULL, p};
            } else if (r->prompt_logprobs) {
                s->b_lrows[nl] = nt + j;
                s->b_use[nl++] = (struct row_use){ROW_PROMPT_LP, r, NULL, p};
            }
        }
        r->chunk = chunk;
        nt += chunk;
        budget -= chunk;
    }

    if (atomic_load(&s->dev_err))
        nt = nl = 0; /* lost while the batch was built: nothing goes to the device */
    for (int32_t k = 0; k < nl; k++)
        n_dev += s->b_use[k].r->dev;
    rc = 0;
    if (nt > 0) {
        b.n_tokens = nt;
        b.tokens = s->b_tok;
        b.pos = s->b_pos;
        b.seq = s->b_seq;
        b.n_seqs = ns;
        b.block_tables = s->b_bt;
        b.n_logits = nl;
        b.logit_rows = s->b_lrows;
        b.logits = NULL; /* read in place: graph_logits */
        /* no download when every row is sampled on the backend */
        b.logits_on_device = n_dev == nl;
        rc = graph_submit(s->g, &b);
    }

    /* While the device computes (see the file comment): the previous
     * step's publication, this step's new prompts into their samplers, the
     * tokens its JSON-constrained choices may take. */
    t_pub = sched_now();
    sched_req_flush_pending(s);
    t_pub = sched_now() - t_pub;
    sched_sample_feed_prompts(s, nt > 0 && rc == 0);
    if (nt > 0 && rc == 0)
        sched_sample_json_ahead(s, nl);

    if (nt > 0) {
        if (rc == 0)
            rc = graph_wait(s->g);
        if (rc != 0) {
            /* sched_req_fail: INF_EDEVICE fails everything (device_lost) */
            log_error("sched: graph step failed (%s): %d tokens, %d sequences",
                      inf_strerror(rc), nt, ns);
            for (int32_t i = 0; i < s->n_run; i++) {
                struct sched_handle *r = s->run[i];

                if (r->state == RQ_DECODE || (r->state == RQ_PREFILL && r->chunk > 0))
                    sched_req_fail(s, r, rc);
            }
            nl = 0;
        }

        /* the K/V of the batch is in: advance positions */
        for (int32_t i = 0; rc == 0 && i < s->n_run; i++) {
            struct sched_handle *r = s->run[i];

            if (r->state == RQ_DECODE) {
                for (int32_t c = 0; c < r->n_choices; c++) {
                    struct seq *q = r->seqs[c];

                    if (!q->done) {
                        q->n_past++;
                        sched_admit_register_blocks(s, q);
                    }
                }
            } else if (r->state == RQ_PREFILL && r->chunk > 0) {
                struct seq *q0 = r->seqs[0];

                r->n_prefilled += r->chunk;
                q0->n_past = r->n_prefilled;
                s->st_prompt_tokens += (uint64_t)r->chunk;
                sched_admit_register_blocks(s, q0);
                if (r->n_prefilled == r->n_prompt) { /* fork the other choices */
                    for (int32_t c = 1; c < r->n_choices; c++) {
                        struct seq *q = r->seqs[c];

                        (void)kv_seq_fork(s->kv, &q->t, &q0->t);
                        q->n_past = q0->n_past;
                        q->chain = q0->chain;
                        q->n_hashed = q0->n_hashed;
                    }
                    r->state = RQ_DECODE;
                }
            }
        }

        /* the rows of requests that sample on the backend */
        if (n_dev > 0 && rc == 0)
            sched_sample_rows_backend(s, nl);
        /* logits rows on the host: prompt logprobs, first tokens, decode tokens */
        for (int32_t k = 0; n_dev < nl && k < nl; k++) {
            struct row_use *u = &s->b_use[k];
            struct sched_handle *r = u->r;
            float *L = graph_logits(s->g) + (size_t)k * (size_t)s->n_vocab;

            if (r->state == RQ_FINISHED || r->dev)
                continue;
            if (u->kind == ROW_PROMPT_LP) {
                struct sched_event e;
                int n = r->logprobs > 0 ? r->logprobs : 0;

                e.logprob = sample_logprobs(L, s->n_vocab, r->prompt[u->pos + 1], n, e.top_ids, e.top_lps);
                e.n_top = n;
                sched_req_prompt_event(s, r, u->pos, &e);
            } else if (u->kind == ROW_FIRST) {
                for (int32_t c = 0; c < r->n_choices && r->state != RQ_FINISHED; c++) {
                    if (r->seqs[c]->done)
                        continue;
                    if (atomic_load(&r->cancel_choice[c])) /* cancelled during prefill */
                        sched_req_finish_choice(s, r->seqs[c], SCHED_FINISH_CANCELED);
                    else
                        sched_sample_next(s, r->seqs[c], L);
                }
            } else if (!u->q->done) {
                sched_sample_next(s, u->q, L);
            }
        }
    }

    {
        int32_t w = 0;

        for (int32_t i = 0; i < s->n_run; i++)
            if (s->run[i]->state != RQ_FINISHED)
                s->run[w++] = s->run[i];
        s->n_run = w;
    }
    if (nt > 0) {
        const double dt = sched_now() - t0 - t_pub; /* the previous step's publication is not this step */

        s->st_steps++;
        s->st_step_s += dt;
        if (nt == n_dec && rc == 0) {
            s->st_dec_steps++;
            s->st_dec_rows += (uint64_t)nt;
            s->st_dec_s += dt;
        }
    }
    /* this step's publication waits for the next step's window (or for
     * engine_main, when no step follows) */
    {
        struct sched_stats *p = &s->pend_stats;

        p->running = s->n_seq_live;
        pthread_mutex_lock(&s->mu);
        p->waiting = s->n_queued;
        pthread_mutex_unlock(&s->mu);
        p->kv_blocks_total = kv_n_blocks(s->kv);
        p->kv_blocks_free = kv_free_count(s->kv);
        p->kv_blocks_used = kv_n_blocks(s->kv) - kv_free_count(s->kv);
        p->kv_blocks_cached = kv_cached_count(s->kv);
        p->prefix_hit_tokens = s->st_prefix_hit_tokens;
        p->prefix_hits = s->st_prefix_hits;
        p->prompt_tokens = s->st_prompt_tokens;
        p->generated_tokens = s->st_generated;
        p->steps = s->st_steps;
        p->step_seconds_sum = s->st_step_s;
        p->decode_steps = s->st_dec_steps;
        p->decode_rows = s->st_dec_rows;
        p->decode_step_seconds = s->st_dec_s;
        p->json_tokens = s->st_json_tokens;
        p->json_allow_seconds = s->st_json_s;
        p->requests_done = s->st_done;
        s->pend_valid = 1;
    }
    for (int32_t i = 0; i < s->n_touched; i++) {
        struct sched_handle *r = s->touched[i];

        r->touched = 0;
        pthread_mutex_lock(&r->mu);
        r->ev_mark = r->ev_tail;
        pthread_mutex_unlock(&r->mu);
        s->pend_touched[s->n_pend_touched++] = r;
    }
    s->n_touched = 0;
    for (int32_t i = 0; i < s->n_dropped; i++)
        s->pend_dropped[s->n_pend_dropped++] = s->dropped[i];
    s->n_dropped = 0;
}
