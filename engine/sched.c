/* sched — continuous batching: the engine thread's step loop (see sched.h
 * for the policies).
 *
 * Data: a request (struct sched_handle) lives from sched_submit until both
 * the engine and the client have let go of it (refs: engine + client). It
 * holds copies of everything it was given, its event queue (mutex-guarded,
 * amortized growth: no allocation per token once it has grown) and the
 * atomic cancel flags. The engine owns everything else: the admission queue
 * is shared with submitters under s->mu, but only the engine removes from
 * it; the running list, the sequences (one per choice, drawn from a slot
 * pool sized at sched_new), the KV bookkeeping (engine/kv) and the batch
 * arrays are touched by the engine thread only.
 *
 * One step: (1) apply cancels, (2) admit from the queue head while blocks
 * and sequence slots allow, (3) build one batch (decodes, then prompt
 * chunks), (4) graph_submit, (5) while the device computes: publish the
 * previous step (its stats, then its events and notifies, then let go of the
 * requests it finished) and feed the prompts of the requests admitted in (2)
 * to their samplers, (6) graph_wait, (7) sample (on the host from the
 * downloaded logits, or with ops->sample on the backend's copy: see
 * "sampling on the backend") and push events, (8) keep
 * the step's stats and touched requests for the next step's (5) -- or
 * publish them at once when the engine goes idle or stops.
 *
 * What overlaps the device and why that changes no output: (5) only. The
 * previous step's events are complete when it ends; publishing them later
 * changes when a client sees them, not what or in which order (a step's
 * events become visible together, after its stats, as before: the events
 * pushed by this step's (1)-(2) stay hidden behind each request's ev_mark
 * until this step is published). The prompt tokens a sampler is told about
 * are only read when the request's first token is sampled, in (7) at the
 * earliest, and sampler_accept cannot fail. Everything that decides the
 * batch -- cancels, admission (which needs the blocks and slots that
 * sampling frees), the decode rows (which need the sampled tokens) -- stays
 * before graph_submit, in today's order, so batches, K/V and logits are
 * those of the synchronous loop. On the CPU (a synchronous backend) the
 * step is computed in graph_wait, after (5), so nothing overlaps there and
 * (5) delays no step.
 *
 * Files (sched_internal.h): this one has the public API and the engine
 * loop; sched_step.c the step, sched_admit.c admission, sched_req.c the
 * requests' events and endings, sched_sample.c sampling.
 *
 * Threads: see sched.h. Invariant: a handle's notify callback only runs
 * under its mutex and never after sched_release (which takes the mutex), so
 * a client may free its notify context right after sched_release.
 */
#include "engine/sched_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/fault.h"
#include "engine/graph.h"
#include "engine/jsonc.h"
#include "engine/kv.h"
#include "engine/log.h"
#include "engine/model.h"
#include "engine/tok.h"

void sched_config_default(struct sched_config *c)
{
    c->max_seqs = 32;
    c->queue_len = 64;
    c->n_ctx = 0;
    c->kv_tokens = 16384;
    c->block_size = 16;
    c->step_tokens = 512;
    c->prefix_cache = 1;
    c->sample_on_backend = 0;
    c->idle_wait_ms = 1000;
}

void sched_graph_params(const struct sched_config *c, struct graph_params *gp)
{
    int32_t bs = c->block_size > 0 ? c->block_size : 16;
    int32_t ms = c->max_seqs > 0 ? c->max_seqs : 1;
    int32_t st = c->step_tokens > 0 ? c->step_tokens : 512;
    int64_t kvt = c->kv_tokens > 0 ? c->kv_tokens : 16384;

    gp->max_tokens = st > ms ? st : ms;
    gp->max_logits = ms + 64 < gp->max_tokens ? ms + 64 : gp->max_tokens;
    gp->n_blocks = (int32_t)((kvt + bs - 1) / bs);
    gp->block_size = bs;
    gp->late_out_rows = 0;
}

/* One iteration of the engine loop begins: the test-only stall hook
 * (engine/fault.h), the heartbeat, the watchdog. Called without s->mu. */
static void engine_beat(struct sched *s)
{
    fault_engine_stall();
    atomic_store_explicit(&s->beat_ns, (uint64_t)(sched_now() * 1e9), memory_order_relaxed);
    if (s->watchdog)
        s->watchdog(s->wd_ud);
}

static void *engine_main(void *arg)
{
    struct sched *s = arg;
    const int64_t wait_ns =
        (int64_t)(s->cfg.idle_wait_ms > 0 ? s->cfg.idle_wait_ms : 1000) * 1000000;

    for (;;) {
        int cancel_all;

        pthread_mutex_lock(&s->mu);
        if (s->n_run == 0 && !s->q_head) {
            /* no step follows now: the last one's publication cannot wait
             * for the next step's window */
            pthread_mutex_unlock(&s->mu);
            sched_req_flush_pending(s);
            pthread_mutex_lock(&s->mu);
        }
        while (s->n_run == 0 && !s->q_head && !s->stopping) {
            struct timespec ts;

            /* idle waits are bounded: the watchdog and the heartbeat */
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t ns = (int64_t)ts.tv_nsec + wait_ns;
            ts.tv_sec += (time_t)(ns / 1000000000);
            ts.tv_nsec = (long)(ns % 1000000000);
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            pthread_mutex_unlock(&s->mu);
            engine_beat(s);
            pthread_mutex_lock(&s->mu);
        }
        if (s->n_run == 0 && !s->q_head && s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        cancel_all = s->cancel_all;
        pthread_mutex_unlock(&s->mu);
        engine_beat(s);
        sched_step(s, cancel_all);
    }
    sched_req_flush_pending(s); /* nothing is left by now; for clarity */
    return NULL;
}

/* ---- public API ---- */

void sched_free(struct sched *s)
{
    if (!s)
        return;
    sched_stop(s, 1);
    /* never started: queued requests end here */
    while (s->q_head) {
        struct sched_handle *r = s->q_head;

        s->q_head = r->next;
        for (int32_t c = 0; c < r->n_choices; c++)
            sched_req_push_simple(s, r, SCHED_EV_DONE, c, SCHED_FINISH_CANCELED, 0);
        sched_req_publish(r);
        sched_req_unref(r);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    if (s->be) {
        s->be->ops->free(s->be, s->d_states);
        s->be->ops->host_free(s->be, s->h_states);
        s->be->ops->free(s->be, s->d_allow);
        s->be->ops->host_free(s->be, s->h_allow);
        s->be->ops->host_free(s->be, s->sreq);
        s->be->ops->host_free(s->be, s->sout);
    }
    free(s->mask_buf);
    jsonc_vocab_free(s->jv);
    free(s->jrow);
    free(s->jwork);
    free(s->sreq_k);
    free(s->sreq_q);
    free(s->sreq_lp);
    free(s->row_req);
    kv_free(s->kv);
    free(s->eog);
    free(s->slots);
    free(s->slot_free);
    free(s->slot_blocks);
    free(s->slot_gen);
    free(s->run);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_lrows);
    free(s->b_bt);
    free(s->b_use);
    free(s->tokbuf);
    free(s->touched);
    free(s->dropped);
    free(s->pend_touched);
    free(s->pend_dropped);
    free(s);
}

int sched_new(struct model *m, struct graph *g, const struct sched_config *c,
              struct sched **out, struct inf_error *err)
{
    const struct graph_params *gp = graph_params(g);
    const struct model_hparams *hp = model_hparams(m);
    struct sched *s;
    int32_t bs, n_blocks, ms, cap_drop;
    int rc;

    *out = NULL;
    if (!gp || gp->block_size < 1 || gp->n_blocks < 1 || gp->max_tokens < 1 ||
        gp->max_logits < 1)
        return inf_error_set(err, INF_EINVAL, "graph has no usable limits");
    bs = gp->block_size;
    if (c->block_size > 0 && c->block_size != bs)
        return inf_error_set(err, INF_EINVAL, "block_size %d does not match the graph's %d",
                             c->block_size, bs);
    if (c->max_seqs < 1 || c->queue_len < 1 || c->step_tokens < 1 || c->n_ctx < 0 ||
        c->kv_tokens < 0)
        return inf_error_set(err, INF_EINVAL,
                             "bad scheduler config (max_seqs %d, queue_len %d, step_tokens %d)",
                             c->max_seqs, c->queue_len, c->step_tokens);
    s = calloc(1, sizeof(*s));
    if (!s)
        return inf_error_set(err, INF_ENOMEM, "out of memory");
    s->m = m;
    s->g = g;
    s->tok = model_tok(m);
    s->n_vocab = hp->n_vocab;
    s->cfg = *c;
    s->cfg.block_size = bs;
    n_blocks = gp->n_blocks;
    if (c->kv_tokens > 0 && (c->kv_tokens + bs - 1) / bs < n_blocks)
        n_blocks = (c->kv_tokens + bs - 1) / bs;
    s->cfg.kv_tokens = n_blocks * bs;
    if (s->cfg.n_ctx == 0)
        s->cfg.n_ctx = hp->n_ctx_train > 0 ? hp->n_ctx_train : 2048;
    if (hp->n_ctx_train > 0 && s->cfg.n_ctx > hp->n_ctx_train) {
        /* the graph refuses positions past the training context */
        log_warn("sched: n_ctx %d capped at the model's n_ctx_train %d", s->cfg.n_ctx,
                 hp->n_ctx_train);
        s->cfg.n_ctx = hp->n_ctx_train;
    }
    if (s->cfg.n_ctx > n_blocks * bs)
        s->cfg.n_ctx = n_blocks * bs;
    ms = c->max_seqs;
    if (ms > gp->max_tokens)
        ms = gp->max_tokens;
    if (ms > gp->max_logits)
        ms = gp->max_logits;
    s->cfg.max_seqs = ms;
    if (s->cfg.step_tokens > gp->max_tokens)
        s->cfg.step_tokens = gp->max_tokens;
    s->max_tokens_fwd = gp->max_tokens;
    s->max_logits = gp->max_logits;
    s->max_blocks_seq = (s->cfg.n_ctx + bs - 1) / bs;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);

    rc = kv_new(n_blocks, bs, &s->kv);
    if (rc != 0) {
        sched_free(s);
        return inf_error_set(err, rc, "kv cache of %d blocks: %s", n_blocks, inf_strerror(rc));
    }
    /* end-of-generation ids, found once */
    s->eog = malloc(16 * sizeof(int32_t));
    for (int32_t t = 0, cap = 16; s->eog && s->tok && t < s->n_vocab; t++) {
        if (!tok_is_eog(s->tok, t))
            continue;
        if (s->n_eog == cap) {
            int32_t *e = realloc(s->eog, (size_t)cap * 2 * sizeof(int32_t));

            if (!e)
                break;
            s->eog = e;
            cap *= 2;
        }
        s->eog[s->n_eog++] = t;
    }
    cap_drop = ms + c->queue_len + 4;
    s->slots = calloc((size_t)ms, sizeof(*s->slots));
    s->slot_free = malloc((size_t)ms * sizeof(int32_t));
    s->slot_blocks = malloc((size_t)ms * (size_t)s->max_blocks_seq * sizeof(int32_t));
    s->slot_gen = malloc((size_t)ms * (size_t)s->cfg.n_ctx * sizeof(int32_t));
    s->run = malloc((size_t)ms * sizeof(*s->run));
    s->b_tok = malloc((size_t)gp->max_tokens * sizeof(int32_t));
    s->b_pos = malloc((size_t)gp->max_tokens * sizeof(int32_t));
    s->b_seq = malloc((size_t)gp->max_tokens * sizeof(int32_t));
    s->b_bt = malloc((size_t)(ms + 1) * sizeof(*s->b_bt));
    s->b_lrows = malloc((size_t)gp->max_logits * sizeof(int32_t));
    s->b_use = malloc((size_t)gp->max_logits * sizeof(*s->b_use));
    s->tokbuf = malloc((size_t)bs * sizeof(int32_t));
    s->touched = malloc((size_t)cap_drop * sizeof(*s->touched));
    s->dropped = malloc((size_t)cap_drop * sizeof(*s->dropped));
    s->pend_touched = malloc((size_t)cap_drop * sizeof(*s->pend_touched));
    s->pend_dropped = malloc((size_t)cap_drop * sizeof(*s->pend_dropped));
    s->touched_cap = cap_drop;
    if (!s->eog || !s->slots || !s->slot_free || !s->slot_blocks || !s->slot_gen || !s->run ||
        !s->b_tok || !s->b_pos || !s->b_seq || !s->b_bt || !s->b_lrows || !s->b_use ||
        !s->tokbuf || !s->touched || !s->dropped || !s->pend_touched || !s->pend_dropped) {
        sched_free(s);
        return inf_error_set(err, INF_ENOMEM, "out of memory for the scheduler");
    }
    for (int32_t i = 0; i < ms; i++)
        s->slot_free[i] = ms - 1 - i;
    s->n_slot_free = ms;
    sched_sample_setup(s, c);
    s->stats.kv_blocks_total = n_blocks;
    s->stats.kv_blocks_free = n_blocks;
    s->stats.n_ctx = s->cfg.n_ctx;
    log_info("sched: max_seqs=%d queue_len=%d n_ctx=%d kv_blocks=%d block_size=%d "
             "step_tokens=%d prefix_cache=%d eog_ids=%d sampling=%s",
             ms, s->cfg.queue_len, s->cfg.n_ctx, n_blocks, bs, s->cfg.step_tokens,
             s->cfg.prefix_cache, s->n_eog, s->dev ? "backend" : "host");
    *out = s;
    return 0;
}

int sched_start(struct sched *s, void (*watchdog)(void *ud), void *ud)
{
    int rc;

    pthread_mutex_lock(&s->mu);
    if (s->started || s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return INF_EBUSY;
    }
    s->watchdog = watchdog;
    s->wd_ud = ud;
    atomic_store(&s->beat_ns, (uint64_t)(sched_now() * 1e9));
    rc = pthread_create(&s->th, NULL, engine_main, s);
    if (rc == 0)
        s->started = 1;
    pthread_mutex_unlock(&s->mu);
    if (rc != 0)
        return INF_ENOMEM;
#ifdef __GLIBC__
    pthread_setname_np(s->th, "inferd-engine");
#endif
    return 0;
}

int sched_device_error(const struct sched *s)
{
    return atomic_load(&((struct sched *)s)->dev_err);
}

double sched_heartbeat(const struct sched *s)
{
    return (double)atomic_load_explicit(&((struct sched *)s)->beat_ns, memory_order_relaxed) *
           1e-9;
}

void sched_stop(struct sched *s, int cancel_all)
{
    int join;

    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    if (cancel_all)
        s->cancel_all = 1;
    join = s->started && !s->thread_done;
    s->thread_done = s->started;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (join)
        pthread_join(s->th, NULL);
}

int sched_submit(struct sched *s, const struct sched_request *rq, sched_notify_fn notify,
                 void *ud, struct sched_handle **out, struct inf_error *err)
{
    struct sched_handle *r;
    int64_t total;

    *out = NULL;
    if (!rq->prompt || rq->n_prompt < 1)
        return inf_error_set(err, INF_EINVAL, "empty prompt");
    for (int32_t i = 0; i < rq->n_prompt; i++)
        if (rq->prompt[i] < 0 || rq->prompt[i] >= s->n_vocab)
            return inf_error_set(err, INF_EINVAL, "prompt token %d at %d is out of range [0, %d)",
                                 rq->prompt[i], i, s->n_vocab);
    if (rq->n_choices < 1)
        return inf_error_set(err, INF_EINVAL, "n must be >= 1");
    if (rq->max_tokens < 1 || rq->min_tokens < 0)
        return inf_error_set(err, INF_EINVAL, "max_tokens must be >= 1 and min_tokens >= 0");
    if (rq->logprobs < -1 || rq->logprobs > SCHED_MAX_TOP)
        return inf_error_set(err, INF_EINVAL, "logprobs must be in 0..%d", SCHED_MAX_TOP);
    if (rq->n_stop_ids < 0 || (rq->n_stop_ids > 0 && !rq->stop_ids) ||
        rq->sampling.n_bias < 0 || (rq->sampling.n_bias > 0 && !rq->sampling.bias))
        return inf_error_set(err, INF_EINVAL, "bad stop id or bias list");
    for (int32_t i = 0; i < rq->n_stop_ids; i++)
        if (rq->stop_ids[i] < 0 || rq->stop_ids[i] >= s->n_vocab)
            return inf_error_set(err, INF_EINVAL, "stop token %d is out of range",
                                 rq->stop_ids[i]);
    for (int32_t i = 0; i < rq->sampling.n_bias; i++)
        if (rq->sampling.bias[i].token < 0 || rq->sampling.bias[i].token >= s->n_vocab)
            return inf_error_set(err, INF_EINVAL, "logit_bias token %d is out of range",
                                 rq->sampling.bias[i].token);
    total = (int64_t)rq->n_prompt + rq->max_tokens;
    if (total > s->cfg.n_ctx)
        return inf_error_set(err, INF_ERANGE,
                             "prompt (%d tokens) + max_tokens (%d) = %lld exceeds n_ctx (%d)",
                             rq->n_prompt, rq->max_tokens, (long long)total, s->cfg.n_ctx);
    if (rq->json && !s->tok)
        return inf_error_set(err, INF_EINVAL, "a JSON constraint needs the model's tokenizer");
    if (rq->n_choices > s->cfg.max_seqs)
        return inf_error_set(err, INF_ERANGE, "n (%d) exceeds the sequences that run at once (%d)",
                             rq->n_choices, s->cfg.max_seqs);

    r = calloc(1, sizeof(*r));
    if (!r)
        return inf_error_set(err, INF_ENOMEM, "out of memory");
    pthread_mutex_init(&r->mu, NULL);
    r->n_prompt = rq->n_prompt;
    r->n_choices = rq->n_choices;
    r->max_tokens = rq->max_tokens;
    r->min_tokens = rq->min_tokens;
    r->ignore_eos = rq->ignore_eos;
    r->n_stop_ids = rq->n_stop_ids;
    r->sp = rq->sampling;
    r->logprobs = rq->logprobs;
    r->prompt_logprobs = rq->prompt_logprobs;
    r->notify = notify;
    r->ud = ud;
    atomic_init(&r->cancel, 0);
    atomic_init(&r->refs, 2);
    r->prompt = malloc((size_t)rq->n_prompt * sizeof(int32_t));
    r->stop_ids = malloc(((size_t)rq->n_stop_ids + 1) * sizeof(int32_t));
    r->bias = malloc(((size_t)rq->sampling.n_bias + 1) * sizeof(*r->bias));
    r->cancel_choice = calloc((size_t)rq->n_choices, sizeof(*r->cancel_choice));
    r->seqs = calloc((size_t)rq->n_choices, sizeof(*r->seqs));
    r->ev_cap = 4 + 2 * rq->n_choices;
    r->ev = malloc((size_t)r->ev_cap * sizeof(*r->ev));
    r->mask_saved = malloc(((size_t)s->n_eog + (size_t)rq->n_stop_ids + 1) * sizeof(float));
    if (rq->json) {
        r->json = jsonc_dup(rq->json);
        r->jc = calloc((size_t)rq->n_choices, sizeof(*r->jc));
        r->jallow = malloc((size_t)rq->n_choices * sched_json_words(s) * sizeof(uint32_t));
        for (int32_t c = 0; r->json && r->jc && c < rq->n_choices; c++)
            jsonc_state_init(r->json, &r->jc[c].st);
    }
    if (!r->prompt || !r->stop_ids || !r->bias || !r->cancel_choice || !r->seqs || !r->ev ||
        !r->mask_saved || (rq->json && (!r->json || !r->jc || !r->jallow))) {
        sched_req_destroy(r);
        return inf_error_set(err, INF_ENOMEM, "out of memory");
    }
    memcpy(r->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof(int32_t));
    if (rq->n_stop_ids)
        memcpy(r->stop_ids, rq->stop_ids, (size_t)rq->n_stop_ids * sizeof(int32_t));
    if (rq->sampling.n_bias)
        memcpy(r->bias, rq->sampling.bias, (size_t)rq->sampling.n_bias * sizeof(*r->bias));
    r->sp.bias = r->bias;
    for (int32_t c = 0; c < rq->n_choices; c++)
        atomic_init(&r->cancel_choice[c], 0);

    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        sched_req_destroy(r);
        return inf_error_set(err, INF_ESHUTDOWN, "shutting down");
    }
    if (atomic_load(&s->dev_err)) {
        int code = atomic_load(&s->dev_err);

        pthread_mutex_unlock(&s->mu);
        sched_req_destroy(r);
        return inf_error_set(err, code, "the device is lost (%s)", inf_strerror(code));
    }
    if (sched_admit_blocks_needed(s, r) > kv_n_blocks(s->kv)) {
        int32_t need = sched_admit_blocks_needed(s, r);

        pthread_mutex_unlock(&s->mu);
        sched_req_destroy(r);
        return inf_error_set(err, INF_ERANGE,
                             "request needs %d KV blocks, the whole cache has %d", need,
                             s->stats.kv_blocks_total);
    }
    if (s->n_queued >= s->cfg.queue_len) {
        pthread_mutex_unlock(&s->mu);
        sched_req_destroy(r);
        return inf_error_set(err, INF_EFULL, "queue full (%d waiting)", s->cfg.queue_len);
    }
    r->state = RQ_QUEUED;
    if (s->q_tail)
        s->q_tail->next = r;
    else
        s->q_head = r;
    s->q_tail = r;
    s->n_queued++;
    s->stats.waiting = s->n_queued;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return 0;
}

int sched_poll(struct sched_handle *h, struct sched_event *ev, int max)
{
    int n;

    pthread_mutex_lock(&h->mu);
    n = h->ev_vis - h->ev_head;
    if (n > max)
        n = max;
    if (n > 0) {
        memcpy(ev, h->ev + h->ev_head, (size_t)n * sizeof(*ev));
        h->ev_head += n;
    }
    pthread_mutex_unlock(&h->mu);
    return n < 0 ? 0 : n;
}

void sched_cancel(struct sched_handle *h)
{
    atomic_store(&h->cancel, 1);
}

void sched_cancel_choice(struct sched_handle *h, int32_t choice)
{
    if (choice >= 0 && choice < h->n_choices)
        atomic_store(&h->cancel_choice[choice], 1);
}

void sched_release(struct sched_handle *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->released = 1;
    pthread_mutex_unlock(&h->mu);
    atomic_store(&h->cancel, 1);
    sched_req_unref(h);
}

void sched_get_stats(struct sched *s, struct sched_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->stats;
    st->waiting = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}
