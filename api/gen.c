/* gen — submit, events, stop strings, cancel (api/gen.h).
 * Thread: the loop thread.
 */
#include "api/gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/err.h"

/* Offsets of the prompt tokens in the echoed text (echo + logprobs). */
static int gen_prompt_offsets(struct gen *g, int pi)
{
    const struct api_req_prompt *rp = &g->req.prompts[pi];
    struct gen_prompt *p = &g->prompts[pi];
    p->plp = calloc((size_t)rp->n, sizeof(*p->plp));
    if (!p->plp)
        return INF_ENOMEM;
    int64_t off = 0;
    for (int32_t k = 0; k < rp->n; k++) {
        char tb[512];
        p->plp[k].token = rp->ids[k];
        p->plp[k].offset = off < (int64_t)rp->echo_len ? off : (int64_t)rp->echo_len;
        int nb = tok_token_bytes(g->tok, rp->ids[k], 0, tb, sizeof(tb));
        if (nb > 0)
            off += nb;
    }
    if (rp->n > 0 && tok_kind(g->tok) == TOK_KIND_SPM)
        for (int32_t k = 0; k < rp->n; k++) /* the SPM space prefix is not echoed */
            if (p->plp[k].offset > 0)
                p->plp[k].offset--;
    return 0;
}

int gen_init(struct gen *g, struct api_req *req, const struct tok *tok, struct metrics *m,
             double t_start)
{
    memset(g, 0, sizeof(*g));
    g->req = *req;
    memset(req, 0, sizeof(*req));
    g->tok = tok;
    g->metrics = m;
    g->t_start = t_start;
    g->prompts = calloc((size_t)g->req.n_prompts ? (size_t)g->req.n_prompts : 1,
                        sizeof(*g->prompts));
    g->n_choices = g->req.n_prompts * g->req.n;
    g->choices = calloc(g->n_choices ? (size_t)g->n_choices : 1, sizeof(*g->choices));
    if (!g->prompts || !g->choices)
        return INF_ENOMEM;
    for (int i = 0; i < g->n_choices; i++) {
        struct gen_choice *ch = &g->choices[i];
        ch->prompt = i / g->req.n;
        ch->sub = i % g->req.n;
        tok_stream_init(&ch->ts, tok, 0);
        toolcall_start(g->req.tools, &ch->tc);
        think_start(&ch->th, g->req.think == 2);
    }
    if (g->req.echo && g->req.logprobs >= 0)
        for (int i = 0; i < g->req.n_prompts; i++)
            if (gen_prompt_offsets(g, i))
                return INF_ENOMEM;
    return 0;
}

static int gen_refuse(struct api_req_error *e, int status, const char *param, const char *code,
                      const char *msg)
{
    e->status = status;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    snprintf(e->code, sizeof(e->code), "%s", code ? code : "");
    snprintf(e->message, sizeof(e->message), "%s", msg);
    return -1;
}

int gen_submit(struct gen *g, struct sched *s, sched_notify_fn notify, void *ud, uint64_t seed,
               int retry_after_s, double now, struct api_req_error *e)
{
    const struct api_req *q = &g->req;
    int rc = 0;
    if (q->has_seed)
        seed = q->seed;
    g->t_submit = now;
    for (int i = 0; i < q->n_prompts && !rc; i++) {
        struct gen_prompt *p = &g->prompts[i];
        struct sched_request sr;
        memset(&sr, 0, sizeof(sr));
        sr.prompt = q->prompts[i].ids;
        sr.n_prompt = q->prompts[i].n;
        sr.n_choices = q->n;
        sr.max_tokens = q->max_tokens;
        sr.min_tokens = q->min_tokens;
        sr.ignore_eos = q->ignore_eos;
        sr.stop_ids = q->stop_ids;
        sr.n_stop_ids = q->n_stop_ids;
        sample_params_default(&sr.sampling);
        sr.sampling.temperature = (float)q->temperature;
        sr.sampling.top_k = q->top_k;
        sr.sampling.top_p = (float)q->top_p;
        sr.sampling.min_p = (float)q->min_p;
        sr.sampling.presence_penalty = (float)q->presence;
        sr.sampling.frequency_penalty = (float)q->frequency;
        sr.sampling.repetition_penalty = (float)q->repetition;
        sr.sampling.seed = seed;
        sr.sampling.bias = q->bias;
        sr.sampling.n_bias = q->n_bias;
        sr.logprobs = q->logprobs;
        sr.prompt_logprobs = q->echo && q->logprobs >= 0;
        sr.json = q->json;
        struct inf_error se = {0};
        int src = sched_submit(s, &sr, notify, ud, &p->h, &se);
        char msg[320];
        if (src == INF_EFULL) {
            snprintf(msg, sizeof(msg), "the request queue is full; retry after %d s",
                     retry_after_s);
            rc = gen_refuse(e, 429, NULL, "rate_limit_exceeded", msg);
        } else if (src == INF_ERANGE) {
            rc = gen_refuse(e, 400, "max_tokens", "context_length_exceeded",
                            se.msg[0] ? se.msg : "the request can never fit in the KV cache");
        } else if (src == INF_EINVAL) {
            rc = gen_refuse(e, 400, NULL, NULL, se.msg[0] ? se.msg : "invalid request");
        } else if (src == INF_ESHUTDOWN) {
            rc = gen_refuse(e, 503, NULL, "shutting_down", "the server is shutting down");
        } else if (src == INF_EDEVICE) {
            rc = gen_refuse(e, 503, NULL, "device_error",
                            "the engine's device is lost (device error); the server is restarting");
        } else if (src) {
            snprintf(msg, sizeof(msg), "submit failed: %s", inf_strerror(src));
            rc = gen_refuse(e, 500, NULL, NULL, msg);
        }
        if (src)
            p->h = NULL;
    }
    if (rc)
        gen_release(g);
    return rc;
}

void gen_release(struct gen *g)
{
    if (!g->prompts)
        return;
    for (int i = 0; i < g->req.n_prompts; i++)
        if (g->prompts[i].h) {
            sched_release(g->prompts[i].h);
            g->prompts[i].h = NULL;
        }
}

void gen_free(struct gen *g)
{
    gen_release(g);
    if (g->prompts)
        for (int i = 0; i < g->req.n_prompts; i++)
            free(g->prompts[i].plp);
    free(g->prompts);
    if (g->choices)
        for (int i = 0; i < g->n_choices; i++) {
            buf_free(&g->choices[i].text);
            free(g->choices[i].lps);
        }
    free(g->choices);
    api_req_release(&g->req);
    memset(g, 0, sizeof(*g));
}

void gen_fail(struct gen *g, int status, const char *msg)
{
    if (g->failed)
        return;
    g->failed = 1;
    g->fail_status = status;
    snprintf(g->fail_msg, sizeof(g->fail_msg), "%s", msg);
}

int gen_all_done(const struct gen *g)
{
    for (int i = 0; i < g->n_choices; i++)
        if (!g->choices[i].done)
            return 0;
    return 1;
}

/* Apply the stop strings to the new text of ch and move ch->safe. */
static void gen_stop_check(struct gen *g, struct gen_choice *ch)
{
    const struct api_req *q = &g->req;
    size_t len = ch->text.len;
    if (q->n_stop == 0 || ch->done) {
        ch->safe = len;
        return;
    }
    const char *t = ch->text.p;
    size_t start = ch->safe; /* nothing before safe can begin a match */
    size_t best = SIZE_MAX;
    for (int i = 0; i < q->n_stop; i++) {
        if (len - start < q->stop_len[i])
            continue;
        const char *m = memmem(t + start, len - start, q->stop[i], q->stop_len[i]);
        if (m && (size_t)(m - t) < best)
            best = (size_t)(m - t);
    }
    if (best != SIZE_MAX) {
        ch->text.len = best;
        ch->text.p[best] = '\0';
        ch->safe = best;
        ch->done = 1;
        ch->finish = "stop";
        /* logprob entries of tokens wholly past the cut go too */
        const struct api_req_prompt *rp = &q->prompts[ch->prompt];
        int64_t cut = (int64_t)(q->echo ? rp->echo_len : 0) + (int64_t)best;
        while (ch->n_lps > ch->lp_sent && ch->lps[ch->n_lps - 1].offset >= cut)
            ch->n_lps--;
        struct gen_prompt *p = &g->prompts[ch->prompt];
        if (p->h)
            sched_cancel_choice(p->h, ch->sub);
        return;
    }
    /* hold back the longest suffix that is a proper prefix of a stop string */
    size_t k = len > q->max_stop_len ? len - q->max_stop_len + 1 : 0;
    if (k < start)
        k = start;
    for (; k < len; k++) {
        size_t rem = len - k;
        int hold = 0;
        for (int i = 0; i < q->n_stop && !hold; i++)
            hold = rem < q->stop_len[i] && !memcmp(t + k, q->stop[i], rem);
        if (hold)
            break;
    }
    ch->safe = k;
}

static void gen_lp_set(struct gen_lp *e, const struct sched_event *ev, int32_t logprobs)
{
    e->has_lp = 1;
    e->lp = ev->logprob;
    e->n_top = ev->n_top < logprobs ? ev->n_top : logprobs;
    if (e->n_top < 0)
        e->n_top = 0;
    memcpy(e->top_ids, ev->top_ids, sizeof(e->top_ids));
    memcpy(e->top_lps, ev->top_lps, sizeof(e->top_lps));
}

/* One event of prompt pi; returns the choice it changed, or -1. */
static int gen_event(struct gen *g, int pi, const struct sched_event *ev, double now)
{
    const struct api_req *q = &g->req;
    struct metrics *m = g->metrics;
    struct gen_prompt *p = &g->prompts[pi];
    switch (ev->kind) {
    case SCHED_EV_ADMITTED:
        if (!p->admitted) {
            p->admitted = 1;
            if (m)
                metrics_observe(&m->queue_wait, now - g->t_submit);
        }
        return -1;
    case SCHED_EV_PROMPT:
        if (p->plp && ev->pos >= 0 && ev->pos < q->prompts[pi].n)
            gen_lp_set(&p->plp[ev->pos], ev, q->logprobs);
        return -1;
    case SCHED_EV_ERROR: {
        int st = (ev->error == INF_ENOMEM || ev->error == INF_EDEVICE ||
                  ev->error == INF_ESHUTDOWN)
                     ? 503
                     : 500;
        char msg[128];
        snprintf(msg, sizeof(msg), "the engine failed this request: %s%s",
                 inf_strerror(ev->error),
                 ev->error == INF_EDEVICE ? " (the device is lost; the server is restarting)"
                                          : "");
        gen_fail(g, st, msg);
        return -1;
    }
    default:
        break;
    }
    if (ev->choice < 0 || ev->choice >= q->n)
        return -1;
    int idx = pi * q->n + ev->choice;
    struct gen_choice *ch = &g->choices[idx];
    if (ch->done)
        return -1; /* tokens queued before our cancel_choice took effect */
    char piece[512];
    if (ev->kind == SCHED_EV_TOKEN) {
        ch->n_tokens++;
        g->completion_tokens++;
        if (m)
            m->completion_tokens++;
        if (g->t_first == 0) {
            g->t_first = now;
            if (m)
                metrics_observe(&m->ttft, now - g->t_start);
        }
        if (ch->t_last > 0 && m)
            metrics_observe(&m->itl, now - ch->t_last);
        ch->t_last = now;
        int64_t off = (int64_t)(q->echo ? q->prompts[pi].echo_len : 0) +
                      (int64_t)ch->text.len + ch->ts.n_pending;
        int n = tok_stream_push(&ch->ts, ev->token, piece, sizeof(piece));
        if (n > 0)
            buf_append(&ch->text, piece, (size_t)n);
        if (q->logprobs >= 0) {
            if (ch->n_lps == ch->cap_lps) {
                size_t cap = ch->cap_lps ? ch->cap_lps * 2 : 16;
                struct gen_lp *l = realloc(ch->lps, cap * sizeof(*l));
                if (l) {
                    ch->lps = l;
                    ch->cap_lps = cap;
                }
            }
            if (ch->n_lps < ch->cap_lps) {
                struct gen_lp *e = &ch->lps[ch->n_lps++];
                e->token = ev->token;
                e->offset = off;
                gen_lp_set(e, ev, q->logprobs);
            }
        }
        gen_stop_check(g, ch);
    } else if (ev->kind == SCHED_EV_DONE) {
        int n = tok_stream_flush(&ch->ts, piece, sizeof(piece));
        if (n > 0)
            buf_append(&ch->text, piece, (size_t)n);
        gen_stop_check(g, ch);
        if (!ch->done) {
            if (ev->finish == SCHED_FINISH_CANCELED)
                gen_fail(g, 503, "the request was canceled (server shutting down)");
            ch->done = 1;
            ch->finish = ev->finish == SCHED_FINISH_LENGTH ? "length" : "stop";
        }
        ch->safe = ch->text.len;
    }
    return idx;
}

int gen_poll(struct gen *g, double now, void (*on_choice)(void *ud, int i), void *ud)
{
    struct sched_event ev[16];
    int got = 0;
    for (int pi = 0; pi < g->req.n_prompts; pi++) {
        struct gen_prompt *p = &g->prompts[pi];
        if (!p->h)
            continue;
        int n;
        while ((n = sched_poll(p->h, ev, 16)) > 0) {
            got = 1;
            for (int i = 0; i < n; i++) {
                int idx = gen_event(g, pi, &ev[i], now);
                if (idx >= 0 && on_choice && !g->failed)
                    on_choice(ud, idx);
            }
        }
    }
    return got || g->failed;
}
