/* sched_req — a request's life on the engine side: its references, its
 * event queue (pushed during a step, published with the step's stats),
 * finishing its choices, failing it, and losing the device (ROBUSTNESS 35).
 *
 * Threads: the engine thread; a request's event fields under its mutex,
 * the queue under s->mu (engine/sched.c's file comment).
 */
#include "engine/sched_internal.h"

#include <stdlib.h>
#include <string.h>

#include "engine/jsonc.h"
#include "engine/log.h"

void sched_req_destroy(struct sched_handle *r)
{
    pthread_mutex_destroy(&r->mu);
    free(r->prompt);
    free(r->stop_ids);
    free(r->bias);
    free(r->ev);
    free(r->cancel_choice);
    free(r->seqs);
    free(r->mask_saved);
    jsonc_free(r->json);
    free(r->jc);
    free(r->jallow);
    free(r);
}

void sched_req_unref(struct sched_handle *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        sched_req_destroy(r);
}

static void mark_touched(struct sched *s, struct sched_handle *r)
{
    if (!r->touched && s->n_touched < s->touched_cap) {
        r->touched = 1;
        s->touched[s->n_touched++] = r;
    }
}

/* Append one event; grows by doubling (amortized), compacts when drained. */
int sched_req_push_event(struct sched *s, struct sched_handle *r, const struct sched_event *e)
{
    int rc = 0;

    pthread_mutex_lock(&r->mu);
    if (r->ev_head == r->ev_tail)
        r->ev_head = r->ev_vis = r->ev_mark = r->ev_tail = 0;
    if (r->ev_tail == r->ev_cap && r->ev_head > 0) {
        memmove(r->ev, r->ev + r->ev_head,
                (size_t)(r->ev_tail - r->ev_head) * sizeof(*r->ev));
        r->ev_vis -= r->ev_head;
        r->ev_mark -= r->ev_head;
        r->ev_tail -= r->ev_head;
        r->ev_head = 0;
    }
    if (r->ev_tail == r->ev_cap) {
        int32_t cap = r->ev_cap ? r->ev_cap * 2 : 16;
        struct sched_event *ev = realloc(r->ev, (size_t)cap * sizeof(*ev));

        if (!ev) {
            rc = INF_ENOMEM;
            goto out;
        }
        r->ev = ev;
        r->ev_cap = cap;
    }
    r->ev[r->ev_tail++] = *e;
out:
    pthread_mutex_unlock(&r->mu);
    mark_touched(s, r);
    return rc;
}

void sched_req_push_simple(struct sched *s, struct sched_handle *r, int kind, int32_t choice,
                        int finish, int error)
{
    struct sched_event e;

    e.kind = kind;
    e.choice = choice;
    e.pos = 0;
    e.token = -1;
    e.logprob = 0.0f;
    e.n_top = 0;
    e.finish = finish;
    e.error = error;
    (void)sched_req_push_event(s, r, &e);
}

void sched_req_prompt_event(struct sched *s, struct sched_handle *r, int32_t pos, struct sched_event *e)
{
    e->kind = SCHED_EV_PROMPT;
    e->choice = 0;
    e->pos = pos + 1;
    e->token = r->prompt[pos + 1];
    e->finish = 0;
    e->error = 0;
    if (sched_req_push_event(s, r, e) != 0)
        sched_req_fail(s, r, INF_ENOMEM);
}

/* Make the step's events visible and wake the client. Runs after the step's
 * stats are published, so a client that saw a request end also sees its
 * blocks freed in sched_get_stats. */
void sched_req_publish(struct sched_handle *r)
{
    pthread_mutex_lock(&r->mu);
    r->ev_vis = r->ev_mark = r->ev_tail;
    if (!r->released && r->notify)
        r->notify(r->ud);
    pthread_mutex_unlock(&r->mu);
}

/* Publish what the last step left pending: stats first, then each touched
 * request's events up to its mark, then drop the requests it finished. */
void sched_req_flush_pending(struct sched *s)
{
    if (s->pend_valid) {
        const struct sched_stats *p = &s->pend_stats;

        pthread_mutex_lock(&s->mu);
        s->stats.running = p->running;
        s->stats.waiting = p->waiting;
        s->stats.kv_blocks_total = p->kv_blocks_total;
        s->stats.kv_blocks_free = p->kv_blocks_free;
        s->stats.kv_blocks_used = p->kv_blocks_used;
        s->stats.kv_blocks_cached = p->kv_blocks_cached;
        s->stats.prefix_hit_tokens = p->prefix_hit_tokens;
        s->stats.prefix_hits = p->prefix_hits;
        s->stats.prompt_tokens = p->prompt_tokens;
        s->stats.generated_tokens = p->generated_tokens;
        s->stats.steps = p->steps;
        s->stats.step_seconds_sum = p->step_seconds_sum;
        s->stats.decode_steps = p->decode_steps;
        s->stats.decode_rows = p->decode_rows;
        s->stats.decode_step_seconds = p->decode_step_seconds;
        s->stats.json_tokens = p->json_tokens;
        s->stats.json_allow_seconds = p->json_allow_seconds;
        s->stats.requests_done = p->requests_done;
        pthread_mutex_unlock(&s->mu);
        s->pend_valid = 0;
    }
    for (int32_t i = 0; i < s->n_pend_touched; i++) {
        struct sched_handle *r = s->pend_touched[i];

        pthread_mutex_lock(&r->mu);
        r->ev_vis = r->ev_mark;
        if (!r->released && r->notify)
            r->notify(r->ud);
        pthread_mutex_unlock(&r->mu);
    }
    s->n_pend_touched = 0;
    for (int32_t i = 0; i < s->n_pend_dropped; i++)
        sched_req_unref(s->pend_dropped[i]);
    s->n_pend_dropped = 0;
}

static void finish_request(struct sched *s, struct sched_handle *r)
{
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct seq *q = r->seqs ? r->seqs[c] : NULL;

        if (!q)
            continue;
        kv_seq_release(s->kv, &q->t);
        sampler_free(q->smp);
        q->smp = NULL;
        q->r = NULL;
        s->slot_free[s->n_slot_free++] = (int32_t)(q - s->slots);
        r->seqs[c] = NULL;
    }
    kv_unreserve(s->kv, &r->resv);
    r->state = RQ_FINISHED;
    s->st_done++;
    s->dropped[s->n_dropped++] = r;
}

void sched_req_finish_choice(struct sched *s, struct seq *q, int finish)
{
    struct sched_handle *r = q->r;

    if (q->done)
        return;
    q->done = 1;
    if (!r->failed)
        sched_req_push_simple(s, r, SCHED_EV_DONE, q->choice, finish, 0);
    kv_seq_release(s->kv, &q->t);
    s->n_seq_live--;
    if (--r->n_live == 0)
        finish_request(s, r);
}

static void cancel_request(struct sched *s, struct sched_handle *r, int finish)
{
    for (int32_t c = 0; c < r->n_choices && r->state != RQ_FINISHED; c++)
        sched_req_finish_choice(s, r->seqs[c], finish);
}

static void device_lost(struct sched *s, int code);

/* r ends with an ERROR event. INF_EDEVICE is never about one request: the
 * device (its context) is gone, so every other request goes too. */
void sched_req_fail(struct sched *s, struct sched_handle *r, int code)
{
    if (r->state != RQ_FINISHED) {
        log_error("sched: request failed (%s)", inf_strerror(code));
        sched_req_push_simple(s, r, SCHED_EV_ERROR, 0, 0, code);
        r->failed = 1;
        cancel_request(s, r, SCHED_FINISH_CANCELED);
    }
    if (code == INF_EDEVICE)
        device_lost(s, code);
}

/* The device is lost (ROBUSTNESS 35; a CUDA context after
 * cudaErrorIllegalAddress and the like fails every later call): no step
 * runs again. Every running and queued request fails with code now, and
 * sched_submit refuses new ones with it, so the engine loop only idles
 * from here on; the daemon sees sched_device_error, stops accepting,
 * drains what the clients still have to read and exits non-zero (a
 * restart gets a new context). Requests are failed on the host only: the
 * KV and slot bookkeeping, no backend call. */
static void device_lost(struct sched *s, int code)
{
    struct sched_handle *q;
    int32_t n_run = 0, n_q;

    if (atomic_load(&s->dev_err))
        return;
    pthread_mutex_lock(&s->mu);
    atomic_store(&s->dev_err, code);
    q = s->q_head;
    s->q_head = s->q_tail = NULL;
    n_q = s->n_queued;
    s->n_queued = 0;
    pthread_mutex_unlock(&s->mu);
    for (int32_t i = 0; i < s->n_run; i++)
        n_run += s->run[i]->state != RQ_FINISHED;
    log_error("sched: the device is lost (%s): no step runs from now on; %d more running and "
              "%d queued requests fail",
              inf_strerror(code), n_run, n_q);
    for (int32_t i = 0; i < s->n_run; i++)
        sched_req_fail(s, s->run[i], code);
    while (q) {
        struct sched_handle *r = q;

        q = r->next;
        r->next = NULL;
        sched_req_push_simple(s, r, SCHED_EV_ERROR, 0, 0, code);
        r->failed = 1;
        r->state = RQ_FINISHED;
        s->st_done++;
        s->dropped[s->n_dropped++] = r;
    }
}

void sched_req_apply_cancels(struct sched *s, int cancel_all)
{
    for (int32_t i = 0; i < s->n_run; i++) {
        struct sched_handle *r = s->run[i];

        if (r->state == RQ_FINISHED)
            continue;
        if (cancel_all || atomic_load(&r->cancel)) {
            cancel_request(s, r, SCHED_FINISH_CANCELED);
            continue;
        }
        if (r->state == RQ_PREFILL) {
            /* choice 0's table carries the shared prefill: single choices
             * leave at the fork; only all of them at once end it now */
            int32_t n = 0;

            for (int32_t c = 0; c < r->n_choices; c++)
                n += atomic_load(&r->cancel_choice[c]) != 0;
            if (n == r->n_choices)
                cancel_request(s, r, SCHED_FINISH_CANCELED);
            continue;
        }
        for (int32_t c = 0; c < r->n_choices && r->state != RQ_FINISHED; c++)
            if (atomic_load(&r->cancel_choice[c]))
                sched_req_finish_choice(s, r->seqs[c], SCHED_FINISH_CANCELED);
    }
}
