/* routes — the route table and the small endpoints: /health, /v1/models
 * (and /v1/models/{id}), /metrics, /tokenize, /detokenize, /apply-template (completions.c has
 * /v1/completions and /v1/chat/completions).
 *
 * Routing sees only the normalized path (http_normalize_path), the same one
 * the auth check saw. A parsed POST body becomes a verdict (routes_judge:
 * validation, and for the small endpoints the whole answer) on a parse pool
 * worker, or inline for a small body; routes_answer sends it.
 * Thread: the loop thread, except routes_judge and routes_verdict_release
 * (any thread).
 */
#include "api/internal.h"
#include "api/request.h"
#include "api/parse_pool.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/log.h"
#include "engine/tok.h"

static const struct {
    const char *path;
    const char *method;
    int route;
    const char *allow;
} routes[] = {
    {"/health", "GET", ROUTE_HEALTH, "GET, HEAD"},
    {"/v1/models", "GET", ROUTE_MODELS, "GET, HEAD"},
    {"/metrics", "GET", ROUTE_METRICS, "GET, HEAD"},
    {"/v1/completions", "POST", ROUTE_COMPLETIONS, "POST"},
    {"/v1/chat/completions", "POST", ROUTE_CHAT, "POST"},
    {"/apply-template", "POST", ROUTE_APPLY_TEMPLATE, "POST"},
    {"/tokenize", "POST", ROUTE_TOKENIZE, "POST"},
    {"/detokenize", "POST", ROUTE_DETOKENIZE, "POST"},
};

/* GET /v1/models/{id}: the id is the rest of the path, slashes included
 * (ids such as "Qwen/Qwen2.5-7B-Instruct", as vLLM serves them) */
#define ROUTES_MODEL_PREFIX "/v1/models/"

static int routes_method_ok(const char *method, const char *want)
{
    return !strcmp(method, want) || (!strcmp(method, "HEAD") && !strcmp(want, "GET"));
}

int routes_find(const char *path, const char *method, int *route, const char **allow)
{
    *route = ROUTE_NONE;
    *allow = NULL;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strcmp(routes[i].path, path))
            continue;
        *route = routes[i].route;
        *allow = routes[i].allow;
        return routes_method_ok(method, routes[i].method) ? 0 : INF_EINVAL;
    }
    const size_t pl = sizeof(ROUTES_MODEL_PREFIX) - 1;
    if (!strncmp(path, ROUTES_MODEL_PREFIX, pl) && path[pl]) {
        *route = ROUTE_MODEL;
        *allow = "GET, HEAD";
        return routes_method_ok(method, "GET") ? 0 : INF_EINVAL;
    }
    return INF_ENOTFOUND;
}

static enum MHD_Result routes_health(struct http_req *r)
{
    struct api *a = r->api;
    const double stall = api_engine_stall(a, api_now());
    char body[96];
    int n;
    if (a->device_err) /* taken out; we exit and systemd restarts us */
        n = snprintf(body, sizeof(body), "{\"status\":\"device_error\",\"error\":\"%s\"}\n",
                     inf_strerror(a->device_err));
    else if (stall > 0) /* a load balancer takes us out; the watchdog restarts us */
        n = snprintf(body, sizeof(body), "{\"status\":\"stalled\",\"engine_idle_s\":%.1f}\n",
                     stall);
    else
        n = snprintf(body, sizeof(body), "{\"status\":\"%s\"}\n",
                     a->state == API_READY     ? "ok"
                     : a->state == API_LOADING ? "loading"
                                               : "stopping");
    return http_respond(r, a->state == API_READY && stall == 0 && !a->device_err ? 200 : 503,
                        "application/json",
                        body, (size_t)n);
}

static time_t routes_start_time;

/* the served model's object (the list's one entry, and models.retrieve's
 * answer) */
static json_t *routes_model_obj(const struct api *a)
{
    if (!routes_start_time)
        routes_start_time = time(NULL);
    return json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", a->cfg.model_id, "object", "model", "created",
                     (json_int_t)routes_start_time, "owned_by", "inferd", "max_model_len", (int)a->n_ctx);
}

static enum MHD_Result routes_models(struct http_req *r)
{
    json_t *body = json_pack("{s:s, s:[o]}", "object", "list", "data", routes_model_obj(r->api));
    return http_respond_json(r, 200, body);
}

/* GET /v1/models/{id}: the model's object, or the 404 a completion naming
 * another model gets (api_req_model_id) */
static enum MHD_Result routes_model(struct http_req *r)
{
    const struct api *a = r->api;
    struct api_req_error e;
    if (api_req_model_id(r->path + sizeof(ROUTES_MODEL_PREFIX) - 1, a->cfg.model_id, &e))
        return http_respond_req_error(r, &e);
    return http_respond_json(r, 200, routes_model_obj(a));
}

static enum MHD_Result routes_metrics(struct http_req *r)
{
    struct api *a = r->api;
    struct buf b = {0};
    a->metrics.body_buffer_bytes = (int64_t)body_cache_bytes(&a->bodies);
    if (metrics_render(&a->metrics, a->sched, a->state == API_READY,
                       a->agent_open ? api_agent_weight(a, api_now()) : -1, &b)) {
        buf_free(&b);
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    }
    enum MHD_Result ok = http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p,
                                      b.len);
    buf_free(&b);
    return ok;
}

/* ---- the POST endpoints: body in, verdict out (any thread) ---------- */

static void routes_fail(struct api_verdict *v, int status, const char *param, const char *fmt,
                        ...) __attribute__((format(printf, 4, 5)));

static void routes_fail(struct api_verdict *v, int status, const char *param, const char *fmt,
                        ...)
{
    va_list ap;
    memset(&v->err, 0, sizeof(v->err));
    v->err.status = status;
    snprintf(v->err.param, sizeof(v->err.param), "%s", param ? param : "");
    va_start(ap, fmt);
    vsnprintf(v->err.message, sizeof(v->err.message), fmt, ap);
    va_end(ap);
    v->ok = 0;
}

/* 1 / 0 from an optional boolean field; -1 (v says why) for a wrong type. */
static int routes_opt_bool(struct api_verdict *v, json_t *body, const char *key, int def)
{
    json_t *j = json_object_get(body, key);
    if (!j || json_is_null(j))
        return def;
    if (!json_is_boolean(j)) {
        routes_fail(v, 400, key, "%s must be a boolean", key);
        return -1;
    }
    return json_is_true(j);
}

/* The longest text /tokenize takes (1 MiB: ~0.2 s of tokenizing at worst,
 * on a parse pool worker for any body that size: one request's work stays
 * bounded). */
#define ROUTES_TOKENIZE_MAX_BYTES (1 << 20)

static void routes_tokenize(const struct api *a, json_t *body, struct api_verdict *v)
{
    json_t *p = json_object_get(body, "prompt");
    if (!p)
        p = json_object_get(body, "text");
    if (!json_is_string(p)) {
        routes_fail(v, 400, "prompt", "prompt must be a string");
        return;
    }
    int add_special = routes_opt_bool(v, body, "add_special", 1);
    if (add_special < 0)
        return;
    int parse_special = routes_opt_bool(v, body, "parse_special", 0);
    if (parse_special < 0)
        return;
    const char *text = json_string_value(p);
    size_t len = json_string_length(p);
    if (len > ROUTES_TOKENIZE_MAX_BYTES) {
        routes_fail(v, 400, "prompt", "prompt for /tokenize must be at most %d bytes, got %zu",
                    ROUTES_TOKENIZE_MAX_BYTES, len);
        return;
    }
    /* one token per byte at most, plus BOS/EOS */
    size_t cap = len + 4, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) {
        routes_fail(v, 500, NULL, "out of memory");
        return;
    }
    int rc = tok_encode(a->tok, text, len, add_special, parse_special, ids, cap, &n);
    if (rc) {
        free(ids);
        routes_fail(v, 400, "prompt", "tokenization failed: %s", inf_strerror(rc));
        return;
    }
    /* written directly: a jansson object per token was most of the time */
    struct buf *b = &v->out;
    int brc = buf_reserve(b, n * 7 + 64) || buf_puts(b, "{\"tokens\":[");
    for (size_t i = 0; i < n && !brc; i++)
        brc = buf_printf(b, i ? ",%d" : "%d", (int)ids[i]);
    free(ids);
    brc = brc || buf_printf(b, "],\"count\":%zu,\"max_model_len\":%d}", n, (int)a->n_ctx);
    if (brc)
        routes_fail(v, 500, NULL, "out of memory");
    else
        v->ok = 1;
}

static void routes_detokenize(const struct api *a, json_t *body, struct api_verdict *v)
{
    json_t *t = json_object_get(body, "tokens");
    if (!json_is_array(t)) {
        routes_fail(v, 400, "tokens", "tokens must be an array of token ids");
        return;
    }
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!ids) {
        routes_fail(v, 500, NULL, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *j = json_array_get(t, i);
        json_int_t id = json_is_integer(j) ? json_integer_value(j) : -1;
        if (!json_is_integer(j) || id < 0 || id >= a->n_vocab) {
            free(ids);
            routes_fail(v, 400, "tokens", "tokens[%zu] must be an integer in [0, %d)", i,
                        (int)a->n_vocab);
            return;
        }
        ids[i] = (int32_t)id;
    }
    n = api_req_drop_special(a->tok, ids, n);
    size_t need = tok_decode(a->tok, ids, n, 0, 1, NULL, 0);
    char *text = malloc(need + 1);
    if (!text) {
        free(ids);
        routes_fail(v, 500, NULL, "out of memory");
        return;
    }
    tok_decode(a->tok, ids, n, 0, 1, text, need + 1);
    free(ids);
    struct buf *b = &v->out;
    int rc = buf_puts(b, "{\"text\":");
    rc |= buf_json_str(b, text, need); /* invalid UTF-8 (partial tokens) -> U+FFFD */
    rc |= buf_puts(b, "}\n");
    free(text);
    if (rc)
        routes_fail(v, 500, NULL, "out of memory");
    else
        v->ok = 1;
}

/* The rendered chat prompt and its tokens, to debug templates. */
static void routes_apply_template(const struct api *a, json_t *body, struct api_verdict *v)
{
    char *text;
    size_t len;
    int32_t *ids, n;
    if (api_req_apply_template(a->rctx, body, &text, &len, &ids, &n, &v->err)) {
        v->ok = 0;
        return;
    }
    struct buf *b = &v->out;
    int rc = buf_reserve(b, len + (size_t)n * 8 + 96) || buf_puts(b, "{\"prompt\":");
    rc = rc || buf_json_str(b, text, len);
    const char *family = api_request_ctx_chat(a->rctx, NULL);
    rc = rc || buf_printf(b, ",\"template\":\"%s\",\"tokens\":[", family);
    for (int32_t i = 0; i < n && !rc; i++)
        rc = buf_printf(b, i ? ",%d" : "%d", (int)ids[i]);
    rc = rc || buf_printf(b, "],\"count\":%d}\n", (int)n);
    free(text);
    free(ids);
    if (rc)
        routes_fail(v, 500, NULL, "out of memory");
    else
        v->ok = 1;
}

void routes_judge(const struct api *a, int route, json_t *body, struct api_verdict *v)
{
    memset(v, 0, sizeof(*v));
    if (!a->rctx) {
        routes_fail(v, 500, NULL, "no request context");
    } else {
        switch (route) {
        case ROUTE_COMPLETIONS:
            v->ok = api_req_parse_completion(a->rctx, body, &v->q, &v->err) == 0;
            break;
        case ROUTE_CHAT:
            v->ok = api_req_parse_chat(a->rctx, body, &v->q, &v->err) == 0;
            break;
        case ROUTE_TOKENIZE:
            routes_tokenize(a, body, v);
            break;
        case ROUTE_DETOKENIZE:
            routes_detokenize(a, body, v);
            break;
        case ROUTE_APPLY_TEMPLATE:
            routes_apply_template(a, body, v);
            break;
        default:
            routes_fail(v, 404, NULL, "no such route");
            snprintf(v->err.code, sizeof(v->err.code), "not_found");
        }
    }
}

void routes_verdict_release(struct api_verdict *v)
{
    if (v->ok)
        api_req_release(&v->q);
    buf_free(&v->out);
    v->ok = 0;
}

enum MHD_Result routes_answer(struct http_req *r, struct api_verdict *v)
{
    enum MHD_Result ok;
    if (!v->ok)
        ok = http_respond_req_error(r, &v->err);
    else if (r->route == ROUTE_COMPLETIONS || r->route == ROUTE_CHAT)
        ok = cmpl_start(r, &v->q); /* takes q over (zeroes it) */
    else
        ok = http_respond_buf(r, 200, "application/json", &v->out);
    routes_verdict_release(v);
    return ok;
}

enum MHD_Result routes_dispatch(struct http_req *r)
{
    struct api *a = r->api;
    switch (r->route) {
    case ROUTE_HEALTH:
        return routes_health(r);
    case ROUTE_METRICS:
        return routes_metrics(r);
    case ROUTE_MODELS:
        return routes_models(r);
    case ROUTE_MODEL:
        return routes_model(r);
    default:
        break;
    }
    if (a->device_err)
        return http_respond_error(r, 503, NULL, NULL, "device_error",
                                  "the engine's device is lost (%s); the server is restarting",
                                  inf_strerror(a->device_err));
    if (a->state == API_LOADING)
        return http_respond_error(r, 503, NULL, NULL, "model_loading",
                                  "the model is still loading; retry shortly");
    if (a->state != API_READY)
        return http_respond_error(r, 503, NULL, NULL, "shutting_down",
                                  "the server is shutting down");
    /* every POST body of PARSE_POOL_MIN_BYTES or more: parsed, validated
     * and answered off the loop thread; the verdict comes back through the
     * request's ops (api/parse_pool.h) */
    if (parse_pool_submit(a, r) == 0)
        return MHD_YES;
    struct api_verdict v;
    char msg[256];
    json_t *body;
    if (api_json_parse_object(r->body.p ? r->body.p : "", r->body.len, &body, msg, sizeof(msg)))
        return http_respond_error(r, 400, NULL, NULL, NULL, "%s", msg);
    routes_judge(a, r->route, body, &v);
    json_decref(body);
    return routes_answer(r, &v);
}
