/* api — the api object's lifecycle (api/api.h): create it and start the
 * HTTP side, take over the engine, prewarm, reconfigure, drain, free. Also
 * the two loop callbacks that are not MHD's: the engine's wake-up (drain
 * completion events) and the one-second tick (read deadline, SSE pings,
 * drain deadline).
 *
 * This is the top of api/: it wires routes.c and completions.c into http.c
 * (internal.h has the dependency picture). Thread: the loop thread.
 */
#include "api/internal.h"
#include "api/request.h"
#include "api/parse_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "engine/gguf.h"
#include "engine/log.h"
#include "engine/model.h"
#include "engine/sched.h"
#include "engine/tok.h"

static void api_check_drained(struct api *a)
{
    if (a->state != API_DRAINING || !a->sd_done)
        return;
    /* finished: no completion left, and every response was sent (or the
     * clients had drain_flush_s past the deadline to read it: a config key,
     * not a constant, because a slow host -- valgrind is 20-50x -- can
     * spend longer than a few seconds just writing out 64 canceled streams) */
    if (a->n_cmpls == 0 &&
        (a->n_reqs == 0 || api_now() > a->drain_deadline + (double)a->cfg.drain_flush_s)) {
        void (*done)(void *) = a->sd_done;
        a->sd_done = NULL;
        a->state = API_STOPPED;
        done(a->sd_ud);
    }
}

/* ---- prewarm ---------------------------------------------------------- */

static void api_prewarm_poll(struct api *a)
{
    struct sched_event ev[8];
    int n, done = 0, rc = 0;
    while ((n = sched_poll(a->pw, ev, 8)) > 0)
        for (int i = 0; i < n; i++) {
            if (ev[i].kind == SCHED_EV_DONE)
                done = 1;
            else if (ev[i].kind == SCHED_EV_ERROR) {
                done = 1;
                rc = ev[i].error ? ev[i].error : INF_EINTERNAL;
            }
        }
    if (!done)
        return;
    sched_release(a->pw);
    a->pw = NULL;
    if (!rc && a->state == API_LOADING)
        a->state = API_READY;
    if (a->pw_done)
        a->pw_done(a->pw_ud, rc);
}

int api_prewarm(struct api *a, void (*done)(void *ud, int rc), void *ud)
{
    int32_t tok[2];
    int32_t n = 0;
    int32_t bos = tok_bos(a->tok);
    tok[n++] = bos >= 0 ? bos : 0;
    struct sched_request sr;
    memset(&sr, 0, sizeof(sr));
    sr.prompt = tok;
    sr.n_prompt = n;
    sr.n_choices = 1;
    sr.max_tokens = 2;
    sr.logprobs = -1;
    sample_params_default(&sr.sampling);
    sr.sampling.temperature = 0;
    a->pw_done = done;
    a->pw_ud = ud;
    struct inf_error e = {0};
    int rc = sched_submit(a->sched, &sr, cmpl_notify, a, &a->pw, &e);
    if (rc) {
        a->pw = NULL;
        log_error("prewarm: sched_submit failed: %s %s", inf_strerror(rc), e.msg);
        return rc;
    }
    return 0;
}

void api_set_ready(struct api *a)
{
    if (a->state == API_LOADING)
        a->state = API_READY;
}

void api_set_engine(struct api *a, struct model *m, struct sched *s, int32_t n_ctx)
{
    a->model = m;
    a->sched = s;
    a->tok = model_tok(m);
    a->n_ctx = n_ctx;
    a->n_vocab = tok_n_vocab(a->tok);
    api_request_ctx_free(a->rctx);
    a->rctx = NULL;
    struct gguf_str tmpl = {NULL, 0};
    int has_tmpl = gguf_get_str(model_gguf(m), "tokenizer.chat_template", &tmpl) == 0;
    int rc = api_request_ctx_new(&a->cfg, a->tok, n_ctx, has_tmpl ? tmpl.ptr : NULL,
                                 has_tmpl ? (size_t)tmpl.len : 0, &a->rctx);
    if (rc == INF_EINVAL) {
        /* the config names no family (cfg_validate should have caught it):
         * chat off rather than a guess */
        struct api_config c = a->cfg;
        log_error("chat_template: \"%s\" is not a known family; chat disabled",
                  c.chat_template);
        snprintf(c.chat_template, sizeof(c.chat_template), "auto");
        rc = api_request_ctx_new(&c, a->tok, n_ctx, NULL, 0, &a->rctx);
    }
    if (rc) {
        log_error("api: out of memory for the request context");
        return;
    }
    const char *why;
    const char *family = api_request_ctx_chat(a->rctx, &why);
    if (strcmp(family, "none"))
        log_info("chat: %s", why);
    else
        log_warn("chat: /v1/chat/completions is unavailable: %s", why);
}

/* ---- the loop callbacks ----------------------------------------------- */

void api_on_fatal(struct api *a, void (*fn)(void *ud, int code), void *ud)
{
    a->on_fatal = fn;
    a->fatal_ud = ud;
}

/* A lost device, seen once: after the engine's wake-up (the failed
 * requests' events come with one) or at the latest on the next tick. */
static void api_check_device(struct api *a)
{
    const int code = a->sched && !a->device_err ? sched_device_error(a->sched) : 0;
    if (!code)
        return;
    a->device_err = code;
    log_error("the device is lost (%s): /health and new requests answer 503; draining (%d "
              "failed requests still in flight), then exit 1",
              inf_strerror(code), a->n_cmpls);
    if (a->on_fatal)
        a->on_fatal(a->fatal_ud, code);
}

static void api_wake_cb(uv_async_t *h)
{
    struct api *a = h->data;
    cmpl_on_wake(a);
    api_check_device(a);
    if (a->pw)
        api_prewarm_poll(a);
    http_run(a);
}

double api_engine_stall(const struct api *a, double now)
{
    if (a->state != API_READY || !a->sched || a->cfg.engine_stall_s <= 0)
        return 0;
    const double beat = sched_heartbeat(a->sched);
    return beat > 0 && now - beat > a->cfg.engine_stall_s ? now - beat : 0;
}

/* A stuck engine, said once when it starts and once when it ends (the
 * systemd watchdog, pinged from the engine loop, restarts us meanwhile). */
static void api_check_engine(struct api *a, double now)
{
    const double stall = api_engine_stall(a, now);
    if (stall > 0 && !a->engine_stalled)
        log_error("engine loop has not run for %.1f s (engine_stall_s %d): /health answers 503",
                  stall, a->cfg.engine_stall_s);
    else if (stall == 0 && a->engine_stalled)
        log_warn("engine loop running again: /health answers 200");
    a->engine_stalled = stall > 0;
}

static void api_tick_cb(uv_timer_t *t)
{
    struct api *a = t->data;
    double now = api_now();
    api_check_engine(a, now);
    api_check_device(a);
    http_tick(a, now);
    cmpl_tick(a, now);
    if (a->state == API_DRAINING && !a->canceled_all && now >= a->drain_deadline) {
        a->canceled_all = 1;
        log_warn("drain timeout: canceling %d requests still running", a->n_cmpls);
        cmpl_cancel_all(a, "server is shutting down");
    }
    api_check_drained(a);
    http_run(a);
}

static void api_handle_closed(uv_handle_t *h)
{
    struct api *a = h->data;
    if (--a->handles_open == 0) {
        api_request_ctx_free(a->rctx);
        body_cache_free(&a->bodies); /* every request is gone by now */
        free(a);
    }
}

/* ---- create, reconfigure, drain, free --------------------------------- */

int api_new(uv_loop_t *loop, const struct api_config *c, struct api **out,
            struct inf_error *err)
{
    *out = NULL;
    struct api *a = calloc(1, sizeof(*a));
    if (!a)
        return inf_error_set(err, INF_ENOMEM, "out of memory");
    a->loop = loop;
    a->cfg = *c;
    a->state = API_LOADING;
    char pmsg[160];
    if (proxy_list_parse(c->trusted_proxies, &a->proxies, pmsg, sizeof(pmsg))) {
        free(a);
        return inf_error_set(err, INF_EINVAL, "%s", pmsg);
    }
    a->route_find = routes_find;
    a->dispatch = routes_dispatch;
    a->request_done = api_check_drained;
    metrics_init(&a->metrics);
    if (getrandom(&a->rng, sizeof(a->rng), 0) != sizeof(a->rng))
        a->rng = (uint64_t)time(NULL) ^ ((uint64_t)(uintptr_t)a << 16);
    a->rng |= 1;
    int rc = http_start(a, err);
    if (rc) {
        free(a);
        return rc;
    }
    uv_timer_init(loop, &a->tick);
    uv_async_init(loop, &a->wake, api_wake_cb);
    a->tick.data = a->wake.data = a;
    a->handles_open = 4; /* mhd_poll, mhd_timer (http_start), tick, wake */
    uv_timer_start(&a->tick, api_tick_cb, 1000, 1000);
    http_run(a);
    *out = a;
    return 0;
}

int api_port(const struct api *a)
{
    return a->port;
}

void api_reconfigure(struct api *a, const struct api_config *c)
{
    char host[256], model_id[256];
    int port = a->cfg.port;
    memcpy(host, a->cfg.host, sizeof(host));
    memcpy(model_id, a->cfg.model_id, sizeof(model_id));
    struct proxy_list pl;
    char pmsg[160];
    if (proxy_list_parse(c->trusted_proxies, &pl, pmsg, sizeof(pmsg)) == 0)
        a->proxies = pl;
    else /* cfg_validate checked it: not reached from SIGHUP */
        log_warn("%s; keeping the previous trusted_proxies", pmsg);
    a->cfg = *c;
    memcpy(a->cfg.host, host, sizeof(host));
    memcpy(a->cfg.model_id, model_id, sizeof(model_id));
    a->cfg.port = port;
    parse_pool_set_limits(a); /* the workers read the context */
    http_reconfigure(a);
}

void api_shutdown(struct api *a, uint64_t drain_ms, void (*done)(void *ud), void *ud)
{
    if (a->state == API_DRAINING || a->state == API_STOPPED) {
        /* asked again (a second SIGTERM): stop waiting */
        double now = api_now();
        if (a->drain_deadline > now)
            a->drain_deadline = now;
        return;
    }
    a->state = API_DRAINING;
    a->drain_deadline = api_now() + (double)drain_ms / 1e3;
    a->sd_done = done;
    a->sd_ud = ud;
    /* The listening socket stays open until api_free: while streams finish,
     * /health answers 503 "stopping" and every new request 503 with
     * Connection: close (routes_dispatch, http_respond), so balancers take
     * this daemon out by their health check and retry that work elsewhere. */
    if (a->pw) { /* still prewarming: nothing to wait for */
        sched_release(a->pw);
        a->pw = NULL;
    }
    log_info("draining: %d requests in flight, %d connections open (deadline %.0f s)",
             a->n_cmpls, a->n_conns, (double)drain_ms / 1e3);
    api_check_drained(a);
    http_run(a);
}

int api_active(const struct api *a)
{
    return a->n_cmpls;
}

void api_free(struct api *a)
{
    if (!a)
        return;
    parse_pool_free(a); /* bodies still waiting for it: 503 */
    if (a->mhd) {
        /* every request is finished (api_shutdown's contract) or is cut here;
         * MHD must not be stopped with suspended connections */
        cmpl_cancel_all(a, "server is shutting down");
        http_stop(a);
    }
    if (a->pw) {
        sched_release(a->pw);
        a->pw = NULL;
    }
    uv_close((uv_handle_t *)&a->mhd_poll, api_handle_closed);
    uv_close((uv_handle_t *)&a->mhd_timer, api_handle_closed);
    uv_close((uv_handle_t *)&a->tick, api_handle_closed);
    uv_close((uv_handle_t *)&a->wake, api_handle_closed);
    if (a->agent_open) {
        api_agent_close_all(a);
        uv_close((uv_handle_t *)&a->agent, api_handle_closed);
    }
}
