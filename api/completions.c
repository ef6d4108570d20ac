/* completions — POST /v1/completions and /v1/chat/completions on a
 * connection (the two differ only in validation and output format, both
 * below this file): validate the body
 * (api/request.c), start a generation (api/gen.c), write what it produces
 * (api/format.c) as one JSON body or as SSE, and keep the connection in
 * step with it.
 *
 * Flow: routes_verdict validates (api/routes.c), cmpl_start submits; the engine thread only calls
 * cmpl_notify -> uv_async_send; cmpl_on_wake (loop thread) polls every
 * request's gen, appends SSE events (one per token) or, at the end, builds
 * the JSON body; then resumes the suspended connection.
 *
 * A client that disconnects is noticed by MHD when the connection is active
 * and by a uv_poll(UV_DISCONNECT) on its socket while suspended; either way
 * the scheduler handles are released (cancel + KV blocks freed next step).
 * Thread: the loop thread, except cmpl_notify (engine thread).
 */
#include "api/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/format.h"
#include "api/gen.h"
#include "api/request.h"
#include "engine/log.h"

struct cmpl {
    struct cmpl *prev, *next;
    int linked;
    struct api *api;
    struct http_req *r;
    char id[48];
    struct format_head head;
    struct gen g;

    struct buf out; /* stream: SSE bytes not yet taken by MHD; else: JSON body */
    int finished;
    int client_gone;
    double t_end, t_last_out;

    uv_poll_t gone_poll;
    int poll_inited, poll_active;
};

static enum MHD_Result cmpl_resumed(struct http_req *r);
static void cmpl_detach(struct http_req *r);

static const struct http_req_ops cmpl_ops = {cmpl_resumed, cmpl_detach};

/* ---- lifetime -------------------------------------------------------- */

static void cmpl_unlink(struct cmpl *c)
{
    struct api *a = c->api;
    if (!c->linked)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        a->cmpls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->linked = 0;
    a->n_cmpls--;
    if (c->g.req.stream)
        a->metrics.active_streams--;
}

static void cmpl_link(struct cmpl *c)
{
    struct api *a = c->api;
    c->next = a->cmpls;
    if (a->cmpls)
        a->cmpls->prev = c;
    a->cmpls = c;
    c->linked = 1;
    a->n_cmpls++;
    if (c->g.req.stream)
        a->metrics.active_streams++;
}

static void cmpl_free(struct cmpl *c)
{
    gen_free(&c->g);
    buf_free(&c->out);
    free(c);
}

static void cmpl_poll_closed(uv_handle_t *h)
{
    cmpl_free(h->data);
}

static void cmpl_resume(struct cmpl *c)
{
    if (c->poll_active) {
        uv_poll_stop(&c->gone_poll);
        c->poll_active = 0;
    }
    if (c->r)
        http_resume(c->r);
}

static void cmpl_gone_cb(uv_poll_t *p, int status, int events)
{
    struct cmpl *c = p->data;
    (void)status;
    (void)events;
    if (c->finished || c->client_gone)
        return;
    c->client_gone = 1;
    c->api->metrics.disconnects++;
    log_debug("request id=%llu: client disconnected while waiting; canceling",
              c->r ? (unsigned long long)c->r->id : 0ull);
    gen_release(&c->g); /* cancel: KV blocks are freed at the next step */
    cmpl_unlink(c);
    cmpl_resume(c);     /* let MHD see the closed socket and finish */
}

/* Suspend the connection until new events, watching the socket meanwhile. */
static void cmpl_wait(struct cmpl *c)
{
    struct http_req *r = c->r;
    if (!c->poll_inited && r->hc && r->hc->fd >= 0) {
        if (uv_poll_init_socket(c->api->loop, &c->gone_poll, r->hc->fd) == 0) {
            c->gone_poll.data = c;
            c->poll_inited = 1;
        }
    }
    if (c->poll_inited && !c->poll_active) {
        uv_poll_start(&c->gone_poll, UV_DISCONNECT, cmpl_gone_cb);
        c->poll_active = 1;
    }
    http_suspend(r);
}

/* The HTTP request is over (response sent, or the connection died). */
static void cmpl_detach(struct http_req *r)
{
    struct cmpl *c = r->ctx;
    struct api *a = r->api;
    double now = api_now();
    r->ops = NULL;
    r->ctx = NULL;
    if (!c)
        return;
    struct gen *g = &c->g;
    if (!c->finished && !c->client_gone) {
        c->client_gone = 1;
        a->metrics.disconnects++;
    }
    const char *fin = c->client_gone ? "client_gone"
                      : g->failed    ? "error"
                      : g->n_choices ? (g->choices[0].finish ? g->choices[0].finish : "-")
                                     : "-";
    log_info("request id=%llu client=%s method=POST path=%s status=%d cmpl=%s "
             "prompt_tokens=%d completion_tokens=%d ttft_ms=%.1f total_ms=%.1f stream=%d n=%d "
             "prompts=%d finish=%s user=%s",
             (unsigned long long)r->id, r->client[0] ? r->client : "-", r->path, r->status,
             c->id, g->req.prompt_tokens,
             g->completion_tokens, g->t_first > 0 ? (g->t_first - g->t_start) * 1e3 : -1.0,
             (now - g->t_start) * 1e3, g->req.stream, g->req.n, g->req.n_prompts, fin,
             g->req.user[0] ? g->req.user : "-");
    c->r = NULL;
    gen_release(g);
    cmpl_unlink(c);
    if (c->poll_inited) {
        if (c->poll_active)
            uv_poll_stop(&c->gone_poll);
        c->poll_active = 0;
        uv_close((uv_handle_t *)&c->gone_poll, cmpl_poll_closed);
    } else {
        cmpl_free(c);
    }
}

/* ---- events ---------------------------------------------------------- */

static void cmpl_on_choice(void *ud, int i)
{
    struct cmpl *c = ud;
    if (!c->g.req.stream)
        return;
    size_t before = c->out.len;
    format_chunk(&c->g, i, &c->head, &c->out);
    if (c->out.len != before)
        c->t_last_out = api_now();
}

/* Everything is in: write the end, release the engine, wake the connection. */
static void cmpl_finish(struct cmpl *c, double now)
{
    struct api *a = c->api;
    struct gen *g = &c->g;
    if (c->finished)
        return;
    c->finished = 1;
    c->t_end = now;
    if (g->t_first > 0)
        metrics_observe(&a->metrics.e2e, now - g->t_start);
    if (g->req.stream) {
        if (g->failed) {
            format_stream_error(g, &c->out);
        } else {
            for (int i = 0; i < g->n_choices; i++)
                format_chunk(g, i, &c->head, &c->out);
            format_stream_end(g, &c->head, &c->out);
        }
    } else if (!g->failed) {
        if (format_body(g, &c->head, &c->out))
            gen_fail(g, 500, "out of memory");
    }
    if (!g->failed)
        a->metrics.tool_calls += (uint64_t)format_tool_calls(g);
    gen_release(g);
    cmpl_unlink(c);
    cmpl_resume(c);
}

static void cmpl_process(struct cmpl *c, double now)
{
    if (!gen_poll(&c->g, now, cmpl_on_choice, c))
        return;
    if (c->g.failed || gen_all_done(&c->g)) {
        cmpl_finish(c, now);
        return;
    }
    if (c->g.req.stream && c->out.len)
        cmpl_resume(c);
}

void cmpl_notify(void *ud)
{
    struct api *a = ud;
    uv_async_send(&a->wake); /* the only thing the engine thread does for us */
}

void cmpl_on_wake(struct api *a)
{
    double now = api_now();
    struct cmpl *c = a->cmpls;
    while (c) {
        struct cmpl *next = c->next; /* c may unlink itself */
        cmpl_process(c, now);
        c = next;
    }
}

void cmpl_tick(struct api *a, double now)
{
    for (struct cmpl *c = a->cmpls; c; c = c->next) {
        if (!c->g.req.stream || c->finished || c->client_gone || !c->r)
            continue;
        if (c->out.len == 0 && now - c->t_last_out >= c->api->cfg.ping_interval_s) {
            /* an SSE comment: keeps proxies from closing an idle stream and
             * makes MHD notice a client that left */
            buf_puts(&c->out, ": ping\n\n");
            c->t_last_out = now;
            cmpl_resume(c);
        }
    }
}

void cmpl_cancel_all(struct api *a, const char *why)
{
    double now = api_now();
    struct cmpl *c = a->cmpls;
    while (c) {
        struct cmpl *next = c->next;
        gen_fail(&c->g, 503, why);
        cmpl_finish(c, now);
        c = next;
    }
}

/* ---- the stream reader ------------------------------------------------ */

static ssize_t cmpl_reader(void *cls, uint64_t pos, char *out, size_t max)
{
    struct http_req *r = cls;
    struct cmpl *c = r->ctx;
    (void)pos;
    if (!c || c->client_gone)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (c->out.len) {
        size_t n = c->out.len < max ? c->out.len : max;
        memcpy(out, c->out.p, n);
        buf_consume(&c->out, n);
        return (ssize_t)n;
    }
    if (c->finished)
        return MHD_CONTENT_READER_END_OF_STREAM;
    cmpl_wait(c); /* nothing yet: sleep until cmpl_process resumes us */
    return 0;
}

static void cmpl_reader_free(void *cls)
{
    http_req_unref(cls);
}

/* ---- entry points ----------------------------------------------------- */

enum MHD_Result cmpl_start(struct http_req *r, struct api_req *qp)
{
    struct api *a = r->api;
    struct api_req_error e;
    struct api_req q = *qp;
    memset(qp, 0, sizeof(*qp));
    int chat = r->route == ROUTE_CHAT;

    struct cmpl *c = calloc(1, sizeof(*c));
    if (!c) {
        api_req_release(&q);
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    }
    c->api = a;
    c->r = r;
    snprintf(c->id, sizeof(c->id), "%s-%016" PRIx64 "%04x", chat ? "chatcmpl" : "cmpl",
             api_rand(a), (unsigned)(r->id & 0xffff));
    c->head.id = c->id;
    c->head.created = (int64_t)time(NULL);
    c->head.model = a->cfg.model_id;
    if (gen_init(&c->g, &q, a->tok, &a->metrics, r->t_start)) {
        cmpl_free(c);
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    }
    if (gen_submit(&c->g, a->sched, cmpl_notify, a, api_rand(a), a->cfg.retry_after_s,
                   api_now(), &e)) {
        cmpl_free(c);
        return http_respond_req_error(r, &e);
    }

    a->metrics.prompt_tokens += (uint64_t)c->g.req.prompt_tokens;
    cmpl_link(c);
    r->ops = &cmpl_ops;
    r->ctx = c;
    c->t_last_out = api_now();
    snprintf(r->log_extra, sizeof(r->log_extra), " cmpl=%s", c->id);

    if (!c->g.req.stream) {
        cmpl_wait(c);
        return MHD_YES;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, cmpl_reader, r,
                                          cmpl_reader_free);
    if (!resp) {
        cmpl_detach(r);
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    }
    r->refs++; /* the response holds the request until MHD frees it */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    enum MHD_Result ok = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    if (ok == MHD_YES) {
        r->status = 200;
        r->phase = HTTP_PHASE_RESPONDED;
    }
    return ok;
}

static enum MHD_Result cmpl_resumed(struct http_req *r)
{
    struct cmpl *c = r->ctx;
    struct gen *g = &c->g;
    if (c->client_gone)
        return MHD_NO; /* close the connection */
    if (g->failed)
        return http_respond_error(r, g->fail_status, NULL, NULL, NULL, "%s", g->fail_msg);
    if (c->finished)
        return http_respond_buf(r, 200, "application/json", &c->out);
    cmpl_wait(c); /* spurious wake-up */
    return MHD_YES;
}
