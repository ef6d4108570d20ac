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
 * Threads: see sched.h. Invariant: a handle's notify callback only runs
 * under its mutex and never after sched_release (which takes the mutex), so
 * a client may free its notify context right after sched_release.
 */
#include "engine/sched.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/fault.h"
#include "engine/graph.h"
#include "engine/kv.h"
#include "engine/log.h"
#include "engine/model.h"
#include "engine/tok.h"

enum rq_state { RQ_QUEUED = 0, RQ_PREFILL, RQ_DECODE, RQ_FINISHED };

/* One choice of a running request. */
struct seq {
    struct sched_handle *r;
    int32_t choice;
    struct kv_seq t;     /* block table (storage in the slot pool) */
    int32_t *gen;        /* [n_ctx] generated tokens (slot pool) */
    int32_t n_past;      /* positions whose K/V are in the cache */
    int32_t n_gen;
    int32_t last;        /* sampled, not yet fed: goes in at position n_past */
    struct sampler *smp;
    uint64_t chain;      /* hash of the last hashed full block */
    int32_t n_hashed;    /* full blocks whose hash chain is known */
    int done;
    int32_t sreq;        /* backend sampling: this step's request index; SREQ_* */
};

#define SREQ_NONE (-1)     /* no request this step */
#define SREQ_CANCELED (-2) /* cancelled when the requests were built (first token) */

struct sched_handle {
    /* immutable after submit */
    int32_t *prompt;
    int32_t n_prompt, n_choices, max_tokens, min_tokens;
    int ignore_eos;
    int32_t *stop_ids;
    int32_t n_stop_ids;
    struct sample_params sp; /* sp.bias points at bias below */
    struct sample_bias *bias;
    int32_t logprobs;
    int prompt_logprobs;
    sched_notify_fn notify;
    void *ud;

    /* shared with the client */
    pthread_mutex_t mu;
    /* events: [head, vis) visible to sched_poll, [vis, tail) pushed during
     * the current step, published with the step's stats at its end */
    struct sched_event *ev;
    int32_t ev_head, ev_vis, ev_tail, ev_cap;
    /* engine thread, under mu: the tail at the end of the last step, which
     * is what publishing that step makes visible (ev_vis <= ev_mark <= ev_tail) */
    int32_t ev_mark;
    int released;           /* under mu */
    atomic_int cancel;
    atomic_uchar *cancel_choice; /* [n_choices] */
    atomic_int refs;

    /* engine thread */
    float *mask_saved;     /* [n_eog + n_stop_ids] logits masked before min_tokens */
    struct sched_handle *next; /* admission queue link (under s->mu) */
    int state;
    int32_t n_prefilled;   /* prompt positions in the cache (choice 0) */
    int32_t chunk;         /* prompt tokens in this step's batch */
    int32_t resv;          /* KV blocks still reserved for this request */
    int32_t n_live;        /* choices not finished */
    struct seq **seqs;     /* [n_choices] */
    int touched;           /* got events this step */
    int failed;            /* an ERROR event went out: nothing more */
    int accept_pending;    /* admitted this step: prompt not yet fed to the samplers */
    int dev;               /* samples on the backend (its choices' state slots) */
    int32_t n_mask;        /* ids masked before min_tokens: EOG (unless ignore_eos), stop ids */
};

/* What a logits row of the batch is for. */
enum row_kind { ROW_PROMPT_LP = 1, ROW_FIRST, ROW_DECODE };
struct row_use {
    int kind;
    struct sched_handle *r;
    struct seq *q;   /* ROW_DECODE */
    int32_t pos;     /* ROW_PROMPT_LP: the prompt position of the row */
};

struct sched {
    struct model *m;
    struct graph *g;
    struct kv *kv;
    const struct tok *tok;
    int32_t n_vocab;
    struct sched_config cfg; /* resolved */
    int32_t max_tokens_fwd, max_logits, max_blocks_seq;

    int32_t *eog;            /* end-of-generation ids */
    int32_t n_eog;

    /* slot pool */
    struct seq *slots;
    int32_t *slot_free;
    int32_t n_slot_free;
    int32_t *slot_blocks;    /* [max_seqs][max_blocks_seq] */
    int32_t *slot_gen;       /* [max_seqs][n_ctx] */

    /* running requests in admission order */
    struct sched_handle **run;
    int32_t n_run;
    int32_t n_seq_live;

    /* batch scratch, sized once */
    int32_t *b_tok, *b_pos, *b_seq, *b_lrows;
    const int32_t **b_bt;
    struct row_use *b_use;
    int32_t *tokbuf;         /* [block_size] */
    struct sched_handle **touched, **dropped;
    int32_t n_touched, n_dropped, touched_cap;
    /* the last step, not yet published: its stats, the requests it touched
     * (events up to their ev_mark), the requests it finished */
    struct sched_stats pend_stats;
    int pend_valid;
    struct sched_handle **pend_touched, **pend_dropped;
    int32_t n_pend_touched, n_pend_dropped;

    /* shared with submitters (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct sched_handle *q_head, *q_tail;
    int32_t n_queued;
    int stopping, cancel_all, started, thread_done;
    struct sched_stats stats;
    pthread_t th;
    void (*watchdog)(void *ud);
    void *wd_ud;
    _Atomic uint64_t beat_ns; /* sched_heartbeat, in ns */
    /* sticky: the INF_EDEVICE that lost the device (written by the engine
     * under mu, read by sched_submit under mu and by sched_device_error) */
    atomic_int dev_err;

    uint64_t st_prefix_hit_tokens, st_prefix_hits, st_prompt_tokens, st_generated;
    uint64_t st_steps, st_done;
    double st_step_s;

    /* Sampling on the backend (see sample_rows_backend), all sized once in
     * sched_new: one sample_state slot per sequence slot in backend memory
     * and its host_alloc staging (an upload from it is queued), the
     * requests and results of one step's ops->sample calls. */
    struct backend *be;
    int dev;                 /* 1: admitted requests sample on the backend */
    size_t st_bytes;         /* one state slot */
    int32_t st_max_bias, st_max_mask;
    char *d_states;          /* backend memory [max_seqs][st_bytes] */
    char *h_states;          /* host_alloc [max_seqs][st_bytes] */
    int32_t *mask_buf;       /* [st_max_mask] */
    struct backend_sample_req *sreq; /* host_alloc [sreq_cap] */
    struct backend_sample_out *sout; /* host_alloc [sreq_cap] */
    int32_t *sreq_k;         /* [sreq_cap] the logits row use (b_use index) of a request */
    struct seq **sreq_q;     /* [sreq_cap] the sequence it samples for (NULL: scores) */
    int32_t *sreq_lp;        /* [sreq_cap] where its logprobs are (itself, or a score request) */
    int32_t *row_req;        /* [max_logits] a prompt logprob row's request */
    int32_t sreq_cap;
};

/* Backend sampling limits of a state slot: requests with more logit_bias
 * entries or masked ids than this sample on the host (same results). */
#define SCHED_DEV_MAX_BIAS 1024 /* the daemon's default max_logit_bias */
#define SCHED_DEV_MAX_STOP 128  /* stop ids beyond the EOG ids */

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

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- requests: lifetime and events ---- */

static void handle_destroy(struct sched_handle *r)
{
    pthread_mutex_destroy(&r->mu);
    free(r->prompt);
    free(r->stop_ids);
    free(r->bias);
    free(r->ev);
    free(r->cancel_choice);
    free(r->seqs);
    free(r->mask_saved);
    free(r);
}

static void handle_unref(struct sched_handle *r)
{
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        handle_destroy(r);
}

static void mark_touched(struct sched *s, struct sched_handle *r)
{
    if (!r->touched && s->n_touched < s->touched_cap) {
        r->touched = 1;
        s->touched[s->n_touched++] = r;
    }
}

/* Append one event; grows by doubling (amortized), compacts when drained. */
static int push_event(struct sched *s, struct sched_handle *r, const struct sched_event *e)
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

static void push_simple(struct sched *s, struct sched_handle *r, int kind, int32_t choice,
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
    (void)push_event(s, r, &e);
}

/* Make the step's events visible and wake the client. Runs after the step's
 * stats are published, so a client that saw a request end also sees its
 * blocks freed in sched_get_stats. */
static void publish(struct sched_handle *r)
{
    pthread_mutex_lock(&r->mu);
    r->ev_vis = r->ev_mark = r->ev_tail;
    if (!r->released && r->notify)
        r->notify(r->ud);
    pthread_mutex_unlock(&r->mu);
}

/* Publish what the last step left pending: stats first, then each touched
 * request's events up to its mark, then drop the requests it finished. */
static void flush_pending(struct sched *s)
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
        handle_unref(s->pend_dropped[i]);
    s->n_pend_dropped = 0;
}

/* ---- finishing ---- */

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

static void finish_choice(struct sched *s, struct seq *q, int finish)
{
    struct sched_handle *r = q->r;

    if (q->done)
        return;
    q->done = 1;
    if (!r->failed)
        push_simple(s, r, SCHED_EV_DONE, q->choice, finish, 0);
    kv_seq_release(s->kv, &q->t);
    s->n_seq_live--;
    if (--r->n_live == 0)
        finish_request(s, r);
}

static void cancel_request(struct sched *s, struct sched_handle *r, int finish)
{
    for (int32_t c = 0; c < r->n_choices && r->state != RQ_FINISHED; c++)
        finish_choice(s, r->seqs[c], finish);
}

static void device_lost(struct sched *s, int code);

/* r ends with an ERROR event. INF_EDEVICE is never about one request: the
 * device (its context) is gone, so every other request goes too. */
static void fail_request(struct sched *s, struct sched_handle *r, int code)
{
    if (r->state != RQ_FINISHED) {
        log_error("sched: request failed (%s)", inf_strerror(code));
        push_simple(s, r, SCHED_EV_ERROR, 0, 0, code);
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
        fail_request(s, s->run[i], code);
    while (q) {
        struct sched_handle *r = q;

        q = r->next;
        r->next = NULL;
        push_simple(s, r, SCHED_EV_ERROR, 0, 0, code);
        r->failed = 1;
        r->state = RQ_FINISHED;
        s->st_done++;
        s->dropped[s->n_dropped++] = r;
    }
}

/* ---- admission ---- */

static int32_t blocks_needed(const struct sched *s, const struct sched_handle *r)
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
    if (blocks_needed(s, r) > kv_available(s->kv) + (r->n_prompt - 1) / bs)
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
    need = blocks_needed(s, r) - hits;
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
    push_simple(s, r, SCHED_EV_ADMITTED, 0, 0, 0);
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct sample_params sp = r->sp;
        struct seq *q = r->seqs[c];

        sp.seed = r->sp.seed + (uint64_t)c;
        q->smp = sampler_new(s->n_vocab, &sp);
        if (!q->smp) {
            fail_request(s, r, INF_ENOMEM);
            return 1;
        }
    }
    /* decided before the batch is built: a step downloads its logits only
     * when a row of it samples on the host */
    r->n_mask = (r->ignore_eos ? 0 : s->n_eog) + r->n_stop_ids;
    r->dev = s->dev && r->sp.n_bias <= s->st_max_bias && r->n_mask <= s->st_max_mask;
    r->accept_pending = 1; /* the prompt goes to the samplers while the step computes */
    return 1;
}

/* ---- prefix registration ---- */

static int32_t seq_token_at(const struct seq *q, int32_t pos)
{
    const struct sched_handle *r = q->r;

    return pos < r->n_prompt ? r->prompt[pos] : q->gen[pos - r->n_prompt];
}

/* Register the full blocks of q that are not hashed yet. */
static void register_full_blocks(struct sched *s, struct seq *q)
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

/* ---- sampling ---- */

static int is_stop_id(const struct sched_handle *r, int32_t t)
{
    for (int32_t i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == t)
            return 1;
    return 0;
}

/* Sample the next token of q from row L, push its event, decide whether the
 * choice ends. L is restored before returning (other choices may use it). */
static void take_token(struct sched *s, struct seq *q, int32_t t, const float *L,
                       const struct backend_sample_out *o);

static void sample_next(struct sched *s, struct seq *q, float *L)
{
    struct sched_handle *r = q->r;
    int32_t t, n_mask = 0;

    if (q->n_gen < r->min_tokens) { /* mask end tokens until min_tokens */
        for (int32_t i = 0; !r->ignore_eos && i < s->n_eog; i++) {
            r->mask_saved[n_mask++] = L[s->eog[i]];
            L[s->eog[i]] = -INFINITY;
        }
        for (int32_t i = 0; i < r->n_stop_ids; i++) {
            r->mask_saved[n_mask++] = L[r->stop_ids[i]];
            L[r->stop_ids[i]] = -INFINITY;
        }
    }
    t = sampler_sample(q->smp, L);
    if (n_mask) { /* restore in reverse order: an id masked twice (a stop id
                   * that is also an end-of-generation id, like a chat
                   * template's end of turn) gets its first saved value */
        for (int32_t i = r->n_stop_ids - 1; i >= 0; i--)
            L[r->stop_ids[i]] = r->mask_saved[--n_mask];
        for (int32_t i = r->ignore_eos ? -1 : s->n_eog - 1; i >= 0; i--)
            L[s->eog[i]] = r->mask_saved[--n_mask];
    }
    sampler_accept(q->smp, t, 0);
    take_token(s, q, t, L, NULL);
}

/* The rest of a sampled token t of q, either path: end the choice on an
 * end token, else its event (logprobs from row L on the host, from o when
 * the backend sampled), max_tokens and n_ctx. */
static void take_token(struct sched *s, struct seq *q, int32_t t, const float *L,
                       const struct backend_sample_out *o)
{
    struct sched_handle *r = q->r;
    int stop;

    stop = q->n_gen >= r->min_tokens &&
           ((!r->ignore_eos && s->tok && tok_is_eog(s->tok, t)) || is_stop_id(r, t));
    if (stop) {
        finish_choice(s, q, SCHED_FINISH_STOP);
        return;
    }
    {
        struct sched_event e;

        e.kind = SCHED_EV_TOKEN;
        e.choice = q->choice;
        e.pos = q->n_past;
        e.token = t;
        e.n_top = 0;
        e.finish = 0;
        e.error = 0;
        e.logprob = 0.0f;
        if (r->logprobs >= 0 && o) {
            e.logprob = o->logprob;
            memcpy(e.top_ids, o->top_ids, (size_t)r->logprobs * sizeof(int32_t));
            memcpy(e.top_lps, o->top_lps, (size_t)r->logprobs * sizeof(float));
            e.n_top = r->logprobs;
        } else if (r->logprobs >= 0) {
            e.logprob = sample_logprobs(L, s->n_vocab, t, r->logprobs, e.top_ids, e.top_lps);
            e.n_top = r->logprobs;
        }
        if (push_event(s, r, &e) != 0) {
            fail_request(s, r, INF_ENOMEM);
            return;
        }
    }
    s->st_generated++;
    q->gen[q->n_gen++] = t;
    q->last = t;
    if (q->n_gen >= r->max_tokens || q->n_past >= s->cfg.n_ctx)
        finish_choice(s, q, SCHED_FINISH_LENGTH);
}

/* ---- sampling on the backend ----
 *
 * When s->dev, the logits of a step stay in backend memory
 * (graph_logits_device) and one ops->sample call after graph_wait samples
 * every row of the requests with r->dev: one request per choice that
 * samples (several on one row for the first token of n > 1 choices), one
 * score request per prompt logprob row. Each choice's sampler state lives
 * in its slot of s->d_states from admission on (feed_prompts exports the
 * host sampler there once, after the prompt is accepted, and frees it);
 * the op advances it (RNG, penalty history) exactly as sampler_sample +
 * sampler_accept would. What the host did per token besides the draw --
 * end tokens, stop ids, max_tokens, n_ctx, the events -- is take_token,
 * shared by both paths. Results and event order per request are those of
 * the host loop in step():
 *  - min_tokens: a masked step (n_gen < min_tokens, ids to mask) sets
 *    BACKEND_SAMPLE_MASKED. The op's logprobs then come from the masked
 *    row, but the host reports those of the raw row, so such a request
 *    asks for none and a second call scores the sampled token on the raw
 *    row (only on steps that have such rows);
 *  - a choice cancelled before its first token is decided when the
 *    requests are built (SREQ_CANCELED), as the host loop decides it when
 *    it gets there.
 * A failed call ends every request that had a row in it with the error
 * (INF_ENOMEM stays recoverable; INF_EINVAL and INF_EINTERNAL are bugs
 * that fail those requests only; anything else is the device, lost for
 * every request: device_lost).
 * The op synchronizes (CUDA: it waits for its download). What could
 * overlap later: building the requests before graph_wait (they depend only
 * on the batch), and queueing the op after the forward pass in
 * graph_submit with its results downloaded asynchronously, so that one
 * sync covers both (the next batch's decode tokens need the results, so
 * that sync stays before the next submit). */

static int sample_code(int rc)
{
    return rc == INF_ENOMEM || rc == INF_EINVAL || rc == INF_EINTERNAL ? rc : INF_EDEVICE;
}

static struct sample_state *seq_state(struct sched *s, const struct seq *q)
{
    return (struct sample_state *)(s->d_states + (size_t)(q - s->slots) * s->st_bytes);
}

static void add_sample_req(struct sched *s, int32_t *n, int32_t k, struct seq *q)
{
    const struct sched_handle *r = q->r;
    const int masked = q->n_gen < r->min_tokens && r->n_mask > 0;
    struct backend_sample_req *rq = &s->sreq[*n];

    rq->row = k;
    rq->token = -1;
    rq->n_top = masked ? -1 : r->logprobs; /* masked: scored on the raw row below */
    rq->flags = masked ? BACKEND_SAMPLE_MASKED : 0;
    rq->state = seq_state(s, q);
    s->sreq_k[*n] = k;
    s->sreq_q[*n] = q;
    s->sreq_lp[*n] = *n;
    q->sreq = (*n)++;
}

/* Every row of the step (nl logits rows) that belongs to a request with
 * r->dev: sampled or scored with ops->sample, events pushed. */
static void sample_rows_backend(struct sched *s, int32_t nl)
{
    struct backend *be = s->be;
    const float *logits = graph_logits_device(s->g);
    int32_t n = 0, n2 = 0;
    int rc;

    for (int32_t k = 0; k < nl; k++) {
        struct row_use *u = &s->b_use[k];
        struct sched_handle *r = u->r;

        s->row_req[k] = -1;
        if (!r->dev || r->state == RQ_FINISHED)
            continue;
        if (u->kind == ROW_PROMPT_LP) {
            struct backend_sample_req *rq = &s->sreq[n];

            rq->row = k;
            rq->token = r->prompt[u->pos + 1];
            rq->n_top = r->logprobs > 0 ? r->logprobs : 0;
            rq->flags = 0;
            rq->state = NULL;
            s->sreq_k[n] = k;
            s->sreq_q[n] = NULL;
            s->sreq_lp[n] = n;
            s->row_req[k] = n++;
        } else if (u->kind == ROW_FIRST) {
            for (int32_t c = 0; c < r->n_choices; c++) {
                struct seq *q = r->seqs[c];

                q->sreq = SREQ_NONE;
                if (q->done)
                    continue;
                if (atomic_load(&r->cancel_choice[c])) /* cancelled during prefill */
                    q->sreq = SREQ_CANCELED;
                else
                    add_sample_req(s, &n, k, q);
            }
        } else if (!u->q->done) {
            add_sample_req(s, &n, k, u->q);
        }
    }
    if (n == 0)
        return;
    rc = be->ops->sample(be, logits, nl, s->n_vocab, s->sreq, n, s->sout);
    if (rc != 0) {
        log_error("sched: sampling on the backend failed (%s): %d requests",
                  inf_strerror(rc), n);
        for (int32_t i = 0; i < n; i++)
            fail_request(s, s->b_use[s->sreq_k[i]].r, sample_code(rc));
        return;
    }
    /* masked steps that want logprobs: the sampled token on the raw row */
    for (int32_t i = 0; i < n; i++) {
        const struct seq *q = s->sreq_q[i];
        struct backend_sample_req *rq = &s->sreq[n + n2];

        if (!q || !(s->sreq[i].flags & BACKEND_SAMPLE_MASKED) || q->r->logprobs < 0)
            continue;
        rq->row = s->sreq[i].row;
        rq->token = s->sout[i].token;
        rq->n_top = q->r->logprobs;
        rq->flags = 0;
        rq->state = NULL;
        s->sreq_k[n + n2] = s->sreq_k[i];
        s->sreq_q[n + n2] = NULL;
        s->sreq_lp[i] = n + n2++;
    }
    if (n2 > 0) {
        rc = be->ops->sample(be, logits, nl, s->n_vocab, s->sreq + n, n2, s->sout + n);
        if (rc != 0) {
            log_error("sched: scoring on the backend failed (%s): %d requests",
                      inf_strerror(rc), n2);
            for (int32_t i = n; i < n + n2; i++)
                fail_request(s, s->b_use[s->sreq_k[i]].r, sample_code(rc));
        }
    }
    /* the events, in the host loop's order */
    for (int32_t k = 0; k < nl; k++) {
        struct row_use *u = &s->b_use[k];
        struct sched_handle *r = u->r;

        if (!r->dev || r->state == RQ_FINISHED)
            continue;
        if (u->kind == ROW_PROMPT_LP) {
            const struct backend_sample_out *o = &s->sout[s->row_req[k]];
            struct sched_event e;
            int nt = r->logprobs > 0 ? r->logprobs : 0;

            e.kind = SCHED_EV_PROMPT;
            e.choice = 0;
            e.pos = u->pos + 1;
            e.token = r->prompt[u->pos + 1];
            e.logprob = o->logprob;
            memcpy(e.top_ids, o->top_ids, (size_t)nt * sizeof(int32_t));
            memcpy(e.top_lps, o->top_lps, (size_t)nt * sizeof(float));
            e.n_top = nt;
            e.finish = 0;
            e.error = 0;
            if (push_event(s, r, &e) != 0)
                fail_request(s, r, INF_ENOMEM);
        } else if (u->kind == ROW_FIRST) {
            for (int32_t c = 0; c < r->n_choices && r->state != RQ_FINISHED; c++) {
                struct seq *q = r->seqs[c];

                if (q->done || q->sreq == SREQ_NONE)
                    continue;
                if (q->sreq == SREQ_CANCELED)
                    finish_choice(s, q, SCHED_FINISH_CANCELED);
                else
                    take_token(s, q, s->sout[q->sreq].token, NULL,
                               &s->sout[s->sreq_lp[q->sreq]]);
            }
        } else if (!u->q->done) {
            struct seq *q = u->q;

            take_token(s, q, s->sout[q->sreq].token, NULL, &s->sout[s->sreq_lp[q->sreq]]);
        }
    }
}

/* A request's choices: their host samplers (prompt accepted) into their
 * state slots, uploaded (queued from the staging); the host samplers go.
 * 0 or INF_EINVAL (a state that does not fit its slot: never, by size). */
static int export_states(struct sched *s, struct sched_handle *r)
{
    int32_t n_mask = 0;
    int64_t cap = (int64_t)r->n_prompt + r->max_tokens;

    if (cap > s->n_vocab) /* distinct tokens: never more than the vocabulary */
        cap = s->n_vocab;
    for (int32_t i = 0; !r->ignore_eos && i < s->n_eog; i++)
        s->mask_buf[n_mask++] = s->eog[i];
    for (int32_t i = 0; i < r->n_stop_ids; i++)
        s->mask_buf[n_mask++] = r->stop_ids[i];
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct seq *q = r->seqs[c];
        size_t off = (size_t)(q - s->slots) * s->st_bytes;

        if (!q->smp || sampler_export(q->smp, s->mask_buf, n_mask, (int32_t)cap,
                                      s->h_states + off, s->st_bytes) != 0)
            return INF_EINVAL;
    }
    for (int32_t c = 0; c < r->n_choices; c++) {
        struct seq *q = r->seqs[c];
        size_t off = (size_t)(q - s->slots) * s->st_bytes;

        s->be->ops->upload(s->be, s->d_states + off, s->h_states + off,
                           sample_state_bytes(r->sp.n_bias, n_mask, (int32_t)cap));
        sampler_free(q->smp);
        q->smp = NULL;
    }
    return 0;
}

/* ---- one step ---- */

static void apply_cancels(struct sched *s, int cancel_all)
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
                finish_choice(s, r->seqs[c], SCHED_FINISH_CANCELED);
    }
}

/* Cancelled queued requests leave the queue; then admit from the head. */
static void admit_from_queue(struct sched *s, int cancel_all)
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
            push_simple(s, r, SCHED_EV_DONE, c, SCHED_FINISH_CANCELED, 0);
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

/* Make pos of q writable (allocating / copying a block); 0 or error. */
static int prepare_pos(struct sched *s, struct seq *q, int32_t pos)
{
    int32_t cs, cd;
    int rc = kv_seq_prepare_write(s->kv, &q->t, pos, &q->r->resv, &cs, &cd);

    if (rc == 0 && cs >= 0)
        rc = graph_kv_copy_block(s->g, cs, cd);
    return rc;
}

/* The prompts of the requests admitted this step, into their samplers (the
 * penalties' context); see the file comment for why this may wait until
 * the step is submitted. */
static void feed_prompts(struct sched *s, int inflight)
{
    int uploaded = 0;

    for (int32_t i = 0; i < s->n_run; i++) {
        struct sched_handle *r = s->run[i];

        if (!r->accept_pending)
            continue;
        r->accept_pending = 0;
        if (r->state == RQ_FINISHED)
            continue;
        for (int32_t c = 0; c < r->n_choices; c++) {
            struct seq *q = r->seqs[c];

            for (int32_t j = 0; q && q->smp && j < r->n_prompt; j++)
                sampler_accept(q->smp, r->prompt[j], 1);
        }
        if (r->dev) {
            int rc = export_states(s, r);

            if (rc != 0)
                fail_request(s, r, rc);
            else
                uploaded = 1;
        }
    }
    /* queued uploads read their staging until the next sync; with no step
     * in flight none would come before a slot's staging could be reused */
    if (uploaded && !inflight) {
        int rc = s->be->ops->sync(s->be);

        for (int32_t i = 0; rc != 0 && i < s->n_run; i++)
            if (s->run[i]->dev)
                fail_request(s, s->run[i], sample_code(rc));
    }
}

static void step(struct sched *s, int cancel_all)
{
    double t0 = now_s(), t_pub;
    int32_t nt = 0, nl = 0, ns = 0, budget, min_prefill, n_dev = 0;
    struct graph_batch b;
    int rc;

    apply_cancels(s, cancel_all);
    admit_from_queue(s, cancel_all);

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
                fail_request(s, r, rc);
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
            fail_request(s, r, rc);
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
     * step's publication, this step's new prompts into their samplers. */
    t_pub = now_s();
    flush_pending(s);
    t_pub = now_s() - t_pub;
    feed_prompts(s, nt > 0 && rc == 0);

    if (nt > 0) {
        if (rc == 0)
            rc = graph_wait(s->g);
        if (rc != 0) {
            /* fail_request: INF_EDEVICE fails everything (device_lost) */
            log_error("sched: graph step failed (%s): %d tokens, %d sequences",
                      inf_strerror(rc), nt, ns);
            for (int32_t i = 0; i < s->n_run; i++) {
                struct sched_handle *r = s->run[i];

                if (r->state == RQ_DECODE || (r->state == RQ_PREFILL && r->chunk > 0))
                    fail_request(s, r, rc);
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
                        register_full_blocks(s, q);
                    }
                }
            } else if (r->state == RQ_PREFILL && r->chunk > 0) {
                struct seq *q0 = r->seqs[0];

                r->n_prefilled += r->chunk;
                q0->n_past = r->n_prefilled;
                s->st_prompt_tokens += (uint64_t)r->chunk;
                register_full_blocks(s, q0);
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
            sample_rows_backend(s, nl);
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

                e.kind = SCHED_EV_PROMPT;
                e.choice = 0;
                e.pos = u->pos + 1;
                e.token = r->prompt[u->pos + 1];
                e.logprob = sample_logprobs(L, s->n_vocab, e.token, n, e.top_ids, e.top_lps);
                e.n_top = n;
                e.finish = 0;
                e.error = 0;
                if (push_event(s, r, &e) != 0)
                    fail_request(s, r, INF_ENOMEM);
            } else if (u->kind == ROW_FIRST) {
                for (int32_t c = 0; c < r->n_choices && r->state != RQ_FINISHED; c++) {
                    if (r->seqs[c]->done)
                        continue;
                    if (atomic_load(&r->cancel_choice[c])) /* cancelled during prefill */
                        finish_choice(s, r->seqs[c], SCHED_FINISH_CANCELED);
                    else
                        sample_next(s, r->seqs[c], L);
                }
            } else if (!u->q->done) {
                sample_next(s, u->q, L);
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
        s->st_steps++;
        s->st_step_s += now_s() - t0 - t_pub; /* the previous step's publication is not this step */
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

/* One iteration of the engine loop begins: the test-only stall hook
 * (engine/fault.h), the heartbeat, the watchdog. Called without s->mu. */
static void engine_beat(struct sched *s)
{
    fault_engine_stall();
    atomic_store_explicit(&s->beat_ns, (uint64_t)(now_s() * 1e9), memory_order_relaxed);
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
            flush_pending(s);
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
        step(s, cancel_all);
    }
    flush_pending(s); /* nothing is left by now; for clarity */
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
            push_simple(s, r, SCHED_EV_DONE, c, SCHED_FINISH_CANCELED, 0);
        publish(r);
        handle_unref(r);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    if (s->be) {
        s->be->ops->free(s->be, s->d_states);
        s->be->ops->host_free(s->be, s->h_states);
        s->be->ops->host_free(s->be, s->sreq);
        s->be->ops->host_free(s->be, s->sout);
    }
    free(s->mask_buf);
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

/* Sampling on the backend: decide (sched_config.sample_on_backend, the
 * environment's INFERD_SAMPLE_ON_BACKEND) and reserve everything once: the
 * op's scratch for max_seqs requests, a state slot per sequence slot, the
 * staging and the request arrays. Anything missing: host sampling (logged). */
static void sample_setup(struct sched *s, const struct sched_config *c)
{
    struct backend *be = model_backend(s->m);
    const char *env = getenv("INFERD_SAMPLE_ON_BACKEND");
    int mode = c->sample_on_backend, rc;
    int32_t ms = s->cfg.max_seqs, cap_hist;

    if (env && !strcmp(env, "1"))
        mode = 1;
    else if (env && !strcmp(env, "0"))
        mode = -1;
    if (!be || !be->ops->sample || mode < 0 || (mode == 0 && !be->ops->async))
        return;
    s->be = be;
    s->st_max_bias = SCHED_DEV_MAX_BIAS;
    s->st_max_mask = s->n_eog + SCHED_DEV_MAX_STOP;
    cap_hist = s->cfg.n_ctx < s->n_vocab ? s->cfg.n_ctx : s->n_vocab;
    s->st_bytes = sample_state_bytes(s->st_max_bias, s->st_max_mask, cap_hist);
    s->st_bytes = (s->st_bytes + 255) & ~(size_t)255;
    s->sreq_cap = s->max_logits + 2 * ms; /* score rows + samples + masked rescoring */
    s->d_states = be->ops->alloc(be, (size_t)ms * s->st_bytes);
    s->h_states = be->ops->host_alloc(be, (size_t)ms * s->st_bytes);
    s->sreq = be->ops->host_alloc(be, (size_t)s->sreq_cap * sizeof(*s->sreq));
    s->sout = be->ops->host_alloc(be, (size_t)s->sreq_cap * sizeof(*s->sout));
    s->mask_buf = malloc((size_t)s->st_max_mask * sizeof(int32_t));
    s->sreq_k = malloc((size_t)s->sreq_cap * sizeof(int32_t));
    s->sreq_q = malloc((size_t)s->sreq_cap * sizeof(*s->sreq_q));
    s->sreq_lp = malloc((size_t)s->sreq_cap * sizeof(int32_t));
    s->row_req = malloc((size_t)s->max_logits * sizeof(int32_t));
    rc = !s->d_states || !s->h_states || !s->sreq || !s->sout || !s->mask_buf || !s->sreq_k ||
                 !s->sreq_q || !s->sreq_lp || !s->row_req
             ? INF_ENOMEM
             : be->ops->sample(be, NULL, 0, s->n_vocab, NULL, ms, NULL);
    if (rc != 0) {
        log_warn("sched: sampling on the host: no room to sample on the backend (%s; "
                 "%d state slots of %zu bytes)",
                 inf_strerror(rc), ms, s->st_bytes);
        be->ops->free(be, s->d_states);
        be->ops->host_free(be, s->h_states);
        be->ops->host_free(be, s->sreq);
        be->ops->host_free(be, s->sout);
        s->d_states = s->h_states = NULL;
        s->sreq = NULL;
        s->sout = NULL;
        s->be = NULL;
        return;
    }
    s->dev = 1;
    log_info("sched: sampling on the backend (%s): %d state slots of %zu bytes", be->ops->name,
             ms, s->st_bytes);
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
    sample_setup(s, c);
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
    atomic_store(&s->beat_ns, (uint64_t)(now_s() * 1e9));
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
    if (!r->prompt || !r->stop_ids || !r->bias || !r->cancel_choice || !r->seqs || !r->ev ||
        !r->mask_saved) {
        handle_destroy(r);
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
        handle_destroy(r);
        return inf_error_set(err, INF_ESHUTDOWN, "shutting down");
    }
    if (atomic_load(&s->dev_err)) {
        int code = atomic_load(&s->dev_err);

        pthread_mutex_unlock(&s->mu);
        handle_destroy(r);
        return inf_error_set(err, code, "the device is lost (%s)", inf_strerror(code));
    }
    if (blocks_needed(s, r) > kv_n_blocks(s->kv)) {
        int32_t need = blocks_needed(s, r);

        pthread_mutex_unlock(&s->mu);
        handle_destroy(r);
        return inf_error_set(err, INF_ERANGE,
                             "request needs %d KV blocks, the whole cache has %d", need,
                             s->stats.kv_blocks_total);
    }
    if (s->n_queued >= s->cfg.queue_len) {
        pthread_mutex_unlock(&s->mu);
        handle_destroy(r);
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
    handle_unref(h);
}

void sched_get_stats(struct sched *s, struct sched_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->stats;
    st->waiting = s->n_queued;
    pthread_mutex_unlock(&s->mu);
}
