/* sched_sample — turning a step's logits into tokens and events: on the
 * host (engine/sample.c over the downloaded rows) or on the backend
 * (ops->sample over the rows it kept), with the same events either way;
 * feeding admitted prompts to the samplers; deciding, at sched_new, where
 * sampling runs.
 *
 * Threads: the engine thread.
 */
#include "engine/sched_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/graph.h"
#include "engine/jsonc.h"
#include "engine/log.h"
#include "engine/model.h"
#include "engine/tok.h"

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

/* ---- JSON constraints (sched.h: sched_request.json) ---- */

/* The vocabulary's tables and the scratch, at the first constrained
 * request; 0 or INF_ENOMEM. */
static int json_tables(struct sched *s)
{
    if (s->jv)
        return 0;
    struct jsonc_vocab *v;
    if (jsonc_vocab_new(s->tok, &v))
        return INF_ENOMEM;
    s->jrow = malloc((size_t)s->n_vocab * sizeof(float));
    s->jwork = malloc(jsonc_vocab_work_states(v) * sizeof(*s->jwork));
    if (!s->jrow || !s->jwork) {
        jsonc_vocab_free(v);
        free(s->jrow);
        free(s->jwork);
        s->jrow = NULL;
        s->jwork = NULL;
        return INF_ENOMEM;
    }
    s->jv = v;
    return 0;
}

int sched_prepare_json(struct sched *s)
{
    return s->tok ? json_tables(s) : 0;
}

static uint32_t *json_bits(const struct sched *s, const struct seq *q)
{
    return q->r->jallow + (size_t)q->choice * sched_json_words(s);
}

/* q's allowed tokens from its recognizer's state, unless already current
 * or the same as last step's (inside a long string: jsonc_allow_same; the
 * end-token edits json_row made to them are the same there too, since a
 * value never ends inside a string). */
static int json_allow(struct sched *s, struct seq *q)
{
    struct sched_handle *r = q->r;
    struct sched_json *j = &r->jc[q->choice];
    if (j->ready)
        return 0;
    if (json_tables(s))
        return INF_ENOMEM;
    if (!(j->have && jsonc_allow_same(r->json, s->jv, &j->prev, &j->st))) {
        const double t0 = sched_now();
        /* a sibling whose set came from this very state (every choice of n
         * at the first token; choices that wrote the same bytes): its bits
         * (json_row's end-token edits are redone for each choice) */
        int32_t c = 0;
        while (c < r->n_choices &&
               (c == q->choice || !r->jc[c].have || !jsonc_state_equal(&r->jc[c].prev, &j->st)))
            c++;
        if (c < r->n_choices)
            memcpy(json_bits(s, q), r->jallow + (size_t)c * sched_json_words(s),
                   sched_json_words(s) * sizeof(uint32_t));
        else
            jsonc_allow(r->json, s->jv, &j->st, s->jwork, json_bits(s, q));
        s->st_json_s += sched_now() - t0;
        j->prev = j->st;
        j->have = 1;
    }
    j->ready = 1;
    return 0;
}

void sched_sample_json_ahead(struct sched *s, int32_t nl)
{
    for (int32_t k = 0; k < nl; k++) {
        const struct row_use *u = &s->b_use[k];
        struct sched_handle *r = u->r;
        if (!r->json || r->state == RQ_FINISHED)
            continue;
        /* a failure here is met again, and reported, when the row samples */
        if (u->kind == ROW_DECODE && !u->q->done)
            (void)json_allow(s, u->q);
        for (int32_t c = 0; u->kind == ROW_FIRST && c < r->n_choices; c++)
            if (!r->seqs[c]->done)
                (void)json_allow(s, r->seqs[c]);
    }
}

static void json_bit(uint32_t *bits, int32_t id, int on)
{
    if (on)
        bits[id / 32] |= 1u << (id % 32);
    else
        bits[id / 32] &= ~(1u << (id % 32));
}

/* The allowed bits of a constrained choice's step: its recognizer's set,
 * with end tokens and stop ids, which end the choice rather than feed the
 * recognizer, allowed exactly where the value may end (and min_tokens is
 * reached, and for end tokens unless ignore_eos), whatever bytes they
 * would spell. NULL: out of memory. *n_allowed: the tokens allowed. */
static const uint32_t *json_step_bits(struct sched *s, struct seq *q, int32_t *n_allowed)
{
    struct sched_handle *r = q->r;
    const struct jsonc_state *st = &r->jc[q->choice].st;
    if (json_allow(s, q))
        return NULL;
    uint32_t *bits = json_bits(s, q);
    r->jc[q->choice].ready = 0; /* the token sampled next moves the state */
    int end = jsonc_can_end(r->json, st) && q->n_gen >= r->min_tokens;
    for (int32_t i = 0; i < s->n_eog; i++)
        json_bit(bits, s->eog[i], end && !r->ignore_eos);
    for (int32_t i = 0; i < r->n_stop_ids; i++)
        json_bit(bits, r->stop_ids[i], end);
    int32_t n = 0, full = s->n_vocab / 32;
    for (int32_t w = 0; w < full; w++)
        n += __builtin_popcount(bits[w]);
    if (s->n_vocab % 32)
        n += __builtin_popcount(bits[full] & ((1u << (s->n_vocab % 32)) - 1));
    *n_allowed = n;
    return bits;
}

/* The row a constrained choice samples from on the host: a copy of L with
 * every token json_step_bits does not allow at -inf. NULL: out of memory. */
static const float *json_row(struct sched *s, struct seq *q, const float *L, int32_t *n_allowed)
{
    const uint32_t *bits = json_step_bits(s, q, n_allowed);
    if (!bits)
        return NULL;
    for (int32_t w = 0; w * 32 < s->n_vocab; w++) { /* a word of bits at a time */
        int32_t i0 = w * 32, m = s->n_vocab - i0 < 32 ? s->n_vocab - i0 : 32;
        uint32_t word = bits[w];
        if (word == 0xffffffffu && m == 32) {
            memcpy(s->jrow + i0, L + i0, 32 * sizeof(float));
            continue;
        }
        for (int32_t k = 0; k < m; k++)
            s->jrow[i0 + k] = (word >> k) & 1 ? L[i0 + k] : -INFINITY;
    }
    return s->jrow;
}

/* A constrained choice's token t, either path: the recognizer takes it
 * (end tokens and stop ids end the choice instead), then the common rest
 * (logprobs from row L on the host, from o when the backend sampled). */
static void json_take(struct sched *s, struct seq *q, int32_t t, const float *L,
                      const struct backend_sample_out *o)
{
    struct sched_handle *r = q->r;
    s->st_json_tokens++;
    if (!(tok_is_eog(s->tok, t) || is_stop_id(r, t)) &&
        jsonc_feed_token(r->json, s->jv, &r->jc[q->choice].st, t)) {
        sched_req_fail(s, r, INF_EINTERNAL); /* an allowed token was refused: a bug */
        return;
    }
    take_token(s, q, t, L, o);
}

/* A constrained choice's step: sample from the masked row, feed the
 * token to the recognizer (end tokens and stop ids end the choice
 * instead), then the common rest. */
static void json_sample_next(struct sched *s, struct seq *q, const float *L)
{
    struct sched_handle *r = q->r;
    int32_t n_allowed = 0;
    const float *row = json_row(s, q, L, &n_allowed);
    if (!row) {
        sched_req_fail(s, r, INF_ENOMEM);
        return;
    }
    if (n_allowed == 0) { /* a dead end (the nesting limit): nothing to emit */
        log_debug("sched: a JSON-constrained choice has no allowed token; it ends (length)");
        sched_req_finish_choice(s, q, SCHED_FINISH_LENGTH);
        return;
    }
    int32_t t = sampler_sample(q->smp, row);
    if (!(row[t] > -INFINITY)) { /* every allowed logit is -inf (or NaN): nothing the model can say */
        log_debug("sched: a JSON-constrained choice's allowed tokens are all at -inf; it ends (length)");
        sched_req_finish_choice(s, q, SCHED_FINISH_LENGTH);
        return;
    }
    sampler_accept(q->smp, t, 0);
    json_take(s, q, t, L, NULL);
}

void sched_sample_next(struct sched *s, struct seq *q, float *L)
{
    struct sched_handle *r = q->r;
    int32_t t, n_mask = 0;

    if (r->json) {
        json_sample_next(s, q, L);
        return;
    }

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
        sched_req_finish_choice(s, q, SCHED_FINISH_STOP);
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
        if (sched_req_push_event(s, r, &e) != 0) {
            sched_req_fail(s, r, INF_ENOMEM);
            return;
        }
    }
    s->st_generated++;
    q->gen[q->n_gen++] = t;
    q->last = t;
    if (r->json && jsonc_closed(&r->jc[q->choice].st))
        sched_req_finish_choice(s, q, SCHED_FINISH_STOP); /* the JSON value is complete */
    else if (q->n_gen >= r->max_tokens || q->n_past >= s->cfg.n_ctx)
        sched_req_finish_choice(s, q, SCHED_FINISH_LENGTH);
}

/* ---- sampling on the backend ----
 *
 * When s->dev, the logits of a step stay in backend memory
 * (graph_logits_device) and one ops->sample call after graph_wait samples
 * every row of the requests with r->dev: one request per choice that
 * samples (several on one row for the first token of n > 1 choices), one
 * score request per prompt logprob row. Each choice's sampler state lives
 * in its slot of s->d_states from admission on (sched_sample_feed_prompts exports the
 * host sampler there once, after the prompt is accepted, and frees it);
 * the op advances it (RNG, penalty history) exactly as sampler_sample +
 * sampler_accept would. What the host did per token besides the draw --
 * end tokens, stop ids, max_tokens, n_ctx, the events -- is take_token,
 * shared by both paths. Results and event order per request are those of
 * the host loop in sched_step():
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
    const uint32_t *allow = NULL;
    if (r->json) { /* the step's allowed bits into the choice's slot (queued) */
        int32_t n_allowed = 0;
        const uint32_t *bits = json_step_bits(s, q, &n_allowed);
        const size_t words = sched_json_words(s), off = (size_t)(q - s->slots) * words;
        if (!bits || n_allowed == 0) { /* decided with the events, in their order */
            q->sreq = bits ? SREQ_JSON_END : SREQ_NOMEM;
            return;
        }
        memcpy(s->h_allow + off, bits, words * sizeof(uint32_t));
        s->be->ops->upload(s->be, s->d_allow + off, s->h_allow + off, words * sizeof(uint32_t));
        allow = s->d_allow + off;
    }
    /* a JSON choice's bits already hold min_tokens' end-token rule */
    const int masked = !allow && q->n_gen < r->min_tokens && r->n_mask > 0;
    struct backend_sample_req *rq = &s->sreq[*n];

    rq->row = k;
    rq->token = -1;
    /* masked: the logprobs are the raw row's, scored by a second call */
    rq->n_top = masked || allow ? -1 : r->logprobs;
    rq->flags = masked ? BACKEND_SAMPLE_MASKED : 0;
    rq->state = seq_state(s, q);
    rq->allow = allow;
    s->sreq_k[*n] = k;
    s->sreq_q[*n] = q;
    s->sreq_lp[*n] = *n;
    q->sreq = (*n)++;
}

/* A choice's result from the backend (or what was decided when its
 * request was built), in the host loop's event order. */
static void take_backend(struct sched *s, struct seq *q)
{
    struct sched_handle *r = q->r;
    if (q->sreq == SREQ_CANCELED) {
        sched_req_finish_choice(s, q, SCHED_FINISH_CANCELED);
    } else if (q->sreq == SREQ_NOMEM) {
        sched_req_fail(s, r, INF_ENOMEM);
    } else if (q->sreq == SREQ_JSON_END) { /* json_sample_next's dead end */
        log_debug("sched: a JSON-constrained choice has no allowed token; it ends (length)");
        sched_req_finish_choice(s, q, SCHED_FINISH_LENGTH);
    } else if (q->sreq >= 0) {
        const int32_t t = s->sout[q->sreq].token;
        const struct backend_sample_out *o = &s->sout[s->sreq_lp[q->sreq]];
        if (!r->json) {
            take_token(s, q, t, NULL, o);
        } else if (t < 0 || t >= s->n_vocab || !sample_allowed(json_bits(s, q), t)) {
            /* every allowed token was banned (the op returns its argmax
             * over an all -inf row): json_sample_next's second end */
            log_debug("sched: a JSON-constrained choice's allowed tokens are all at -inf; it "
                      "ends (length)");
            sched_req_finish_choice(s, q, SCHED_FINISH_LENGTH);
        } else {
            json_take(s, q, t, NULL, o);
        }
    }
}

/* Every row of the step (nl logits rows) that belongs to a request with
 * r->dev: sampled or scored with ops->sample, events pushed. */
void sched_sample_rows_backend(struct sched *s, int32_t nl)
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
            rq->allow = NULL;
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
    /* no call when no row needs one (choices cancelled, JSON dead ends):
     * the events below still end those choices */
    rc = n > 0 ? be->ops->sample(be, logits, nl, s->n_vocab, s->sreq, n, s->sout) : 0;
    if (rc != 0) {
        log_error("sched: sampling on the backend failed (%s): %d requests",
                  inf_strerror(rc), n);
        for (int32_t i = 0; i < n; i++)
            sched_req_fail(s, s->b_use[s->sreq_k[i]].r, sample_code(rc));
        n = 0; /* no results: the events below pass over the failed requests */
    }
    /* masked steps that want logprobs: the sampled token on the raw row */
    for (int32_t i = 0; i < n; i++) {
        const struct seq *q = s->sreq_q[i];
        struct backend_sample_req *rq = &s->sreq[n + n2];

        if (!q || !((s->sreq[i].flags & BACKEND_SAMPLE_MASKED) || s->sreq[i].allow) ||
            q->r->logprobs < 0)
            continue;
        rq->row = s->sreq[i].row;
        rq->token = s->sout[i].token;
        rq->n_top = q->r->logprobs;
        rq->flags = 0;
        rq->state = NULL;
        rq->allow = NULL;
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
                sched_req_fail(s, s->b_use[s->sreq_k[i]].r, sample_code(rc));
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

            e.logprob = o->logprob;
            memcpy(e.top_ids, o->top_ids, (size_t)nt * sizeof(int32_t));
            memcpy(e.top_lps, o->top_lps, (size_t)nt * sizeof(float));
            e.n_top = nt;
            sched_req_prompt_event(s, r, u->pos, &e);
        } else if (u->kind == ROW_FIRST) {
            for (int32_t c = 0; c < r->n_choices && r->state != RQ_FINISHED; c++) {
                struct seq *q = r->seqs[c];

                if (!q->done && q->sreq != SREQ_NONE)
                    take_backend(s, q);
            }
        } else if (!u->q->done) {
            take_backend(s, u->q);
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

/* The prompts of the requests admitted this step, into their samplers (the
 * penalties' context); see the file comment for why this may wait until
 * the step is submitted. */
void sched_sample_feed_prompts(struct sched *s, int inflight)
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
                sched_req_fail(s, r, rc);
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
                sched_req_fail(s, s->run[i], sample_code(rc));
    }
}

/* Sampling on the backend: decide (sched_config.sample_on_backend, the
 * environment's INFERD_SAMPLE_ON_BACKEND) and reserve everything once: the
 * op's scratch for max_seqs requests, a state slot per sequence slot, the
 * staging and the request arrays. Anything missing: host sampling (logged). */
void sched_sample_setup(struct sched *s, const struct sched_config *c)
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
    /* JSON-constrained choices sample there too when their allowed bits
     * have a slot (one a sequence slot, and its staging); without one they
     * sample on the host, as requests over the state slot's limits do
     * (INFERD_JSON_ON_BACKEND=0 keeps them there: an A/B knob, same bits) */
    const char *jenv = getenv("INFERD_JSON_ON_BACKEND");
    if (jenv && !strcmp(jenv, "0"))
        return;
    size_t ab = (size_t)ms * sched_json_words(s) * sizeof(uint32_t);
    s->d_allow = be->ops->alloc(be, ab);
    s->h_allow = be->ops->host_alloc(be, ab);
    if (!s->d_allow || !s->h_allow) {
        log_warn("sched: JSON-constrained choices sample on the host (no room for %zu bytes of "
                 "allowed-token bits)",
                 ab);
        be->ops->free(be, s->d_allow);
        be->ops->host_free(be, s->h_allow);
        s->d_allow = s->h_allow = NULL;
    }
}
