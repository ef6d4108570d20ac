/* routes — the route table and the small endpoints: /health, /v1/models,
 * /metrics, /tokenize, /detokenize, /apply-template (completions.c has
 * /v1/completions and /v1/chat/completions).
 *
 * Routing sees only the normalized path (http_normalize_path), the same one
 * the auth check saw. Thread: the loop thread.
 */
#include "api/internal.h"
#include "api/request.h"
#include "api/parse_pool.h"

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

int routes_find(const char *path, const char *method, int *route, const char **allow)
{
    *route = ROUTE_NONE;
    *allow = NULL;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strcmp(routes[i].path, path))
            continue;
        *route = routes[i].route;
        *allow = routes[i].allow;
        if (!strcmp(method, routes[i].method) ||
            (!strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET")))
            return 0;
        return INF_EINVAL;
    }
    return INF_ENOTFOUND;
}

/* r->body as a JSON object; on error responds 400 and returns NULL. */
static json_t *routes_parse_body(struct http_req *r)
{
    char msg[256];
    json_t *j;
    if (api_json_parse_object(r->body.p, r->body.len, &j, msg, sizeof(msg))) {
        http_respond_error(r, 400, NULL, NULL, NULL, "%s", msg);
        return NULL;
    }
    return j;
}

static enum MHD_Result routes_health(struct http_req *r)
{
    struct api *a = r->api;
    const char *st = a->state == API_READY     ? "ok"
                     : a->state == API_LOADING ? "loading"
                                               : "stopping";
    char body[64];
    int n = snprintf(body, sizeof(body), "{\"status\":\"%s\"}\n", st);
    return http_respond(r, a->state == API_READY ? 200 : 503, "application/json", body,
                        (size_t)n);
}

static time_t routes_start_time;

static enum MHD_Result routes_models(struct http_req *r)
{
    struct api *a = r->api;
    if (!routes_start_time)
        routes_start_time = time(NULL);
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:i}", "id", a->cfg.model_id, "object", "model",
                          "created", (json_int_t)routes_start_time, "owned_by", "inferd",
                          "max_model_len", (int)a->n_ctx);
    json_t *body = json_pack("{s:s, s:[o]}", "object", "list", "data", m);
    return http_respond_json(r, 200, body);
}

static enum MHD_Result routes_metrics(struct http_req *r)
{
    struct api *a = r->api;
    struct buf b = {0};
    if (metrics_render(&a->metrics, a->sched, a->state == API_READY, &b)) {
        buf_free(&b);
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    }
    enum MHD_Result ok = http_respond(r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p,
                                      b.len);
    buf_free(&b);
    return ok;
}

/* 1 / 0 from an optional boolean field; -1 (after a 400) for a wrong type. */
static int routes_opt_bool(struct http_req *r, json_t *body, const char *key, int def)
{
    json_t *v = json_object_get(body, key);
    if (!v || json_is_null(v))
        return def;
    if (!json_is_boolean(v)) {
        http_respond_error(r, 400, NULL, key, NULL, "%s must be a boolean", key);
        return -1;
    }
    return json_is_true(v);
}

/* The longest text /tokenize takes (1 MiB: ~0.2 s of tokenizing at worst). */
#define ROUTES_TOKENIZE_MAX_BYTES (1 << 20)

static enum MHD_Result routes_tokenize(struct http_req *r, json_t *body)
{
    struct api *a = r->api;
    json_t *p = json_object_get(body, "prompt");
    if (!p)
        p = json_object_get(body, "text");
    if (!json_is_string(p))
        return http_respond_error(r, 400, NULL, "prompt", NULL, "prompt must be a string");
    int add_special = routes_opt_bool(r, body, "add_special", 1);
    if (add_special < 0)
        return MHD_YES;
    int parse_special = routes_opt_bool(r, body, "parse_special", 0);
    if (parse_special < 0)
        return MHD_YES;
    const char *text = json_string_value(p);
    size_t len = json_string_length(p);
    /* Tokenizing runs on the loop thread: bound it so that one request
     * cannot stall every other client (a few MB took seconds). */
    if (len > ROUTES_TOKENIZE_MAX_BYTES)
        return http_respond_error(r, 400, NULL, "prompt", NULL,
                                  "prompt for /tokenize must be at most %d bytes, got %zu",
                                  ROUTES_TOKENIZE_MAX_BYTES, len);
    /* one token per byte at most, plus BOS/EOS */
    size_t cap = len + 4, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids)
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    int rc = tok_encode(a->tok, text, len, add_special, parse_special, ids, cap, &n);
    if (rc) {
        free(ids);
        return http_respond_error(r, 400, NULL, "prompt", NULL, "tokenization failed: %s",
                                  inf_strerror(rc));
    }
    /* written directly: a jansson object per token was most of the time */
    struct buf b = {0};
    int brc = buf_reserve(&b, n * 7 + 64) || buf_puts(&b, "{\"tokens\":[");
    for (size_t i = 0; i < n && !brc; i++)
        brc = buf_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
    free(ids);
    brc = brc || buf_printf(&b, "],\"count\":%zu,\"max_model_len\":%d}", n, (int)a->n_ctx);
    enum MHD_Result ok = brc ? http_respond_error(r, 500, NULL, NULL, NULL, "out of memory")
                             : http_respond(r, 200, "application/json", b.p, b.len);
    buf_free(&b);
    return ok;
}

static enum MHD_Result routes_detokenize(struct http_req *r, json_t *body)
{
    struct api *a = r->api;
    json_t *t = json_object_get(body, "tokens");
    if (!json_is_array(t))
        return http_respond_error(r, 400, NULL, "tokens", NULL,
                                  "tokens must be an array of token ids");
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!ids)
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(t, i);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || id < 0 || id >= a->n_vocab) {
            free(ids);
            return http_respond_error(r, 400, NULL, "tokens", NULL,
                                      "tokens[%zu] must be an integer in [0, %d)", i,
                                      (int)a->n_vocab);
        }
        ids[i] = (int32_t)id;
    }
    n = api_req_drop_special(a->tok, ids, n);
    size_t need = tok_decode(a->tok, ids, n, 0, 1, NULL, 0);
    char *text = malloc(need + 1);
    if (!text) {
        free(ids);
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    }
    tok_decode(a->tok, ids, n, 0, 1, text, need + 1);
    free(ids);
    struct buf b = {0};
    int rc = buf_puts(&b, "{\"text\":");
    rc |= buf_json_str(&b, text, need); /* invalid UTF-8 (partial tokens) -> U+FFFD */
    rc |= buf_puts(&b, "}\n");
    free(text);
    enum MHD_Result ok = rc ? http_respond_error(r, 500, NULL, NULL, NULL, "out of memory")
                            : http_respond(r, 200, "application/json", b.p, b.len);
    buf_free(&b);
    return ok;
}

/* The rendered chat prompt and its tokens, to debug templates. */
static enum MHD_Result routes_apply_template(struct http_req *r, json_t *body)
{
    struct api *a = r->api;
    struct api_req_error e;
    char *text;
    size_t len;
    int32_t *ids, n;
    if (!a->rctx)
        return http_respond_error(r, 500, NULL, NULL, NULL, "no request context");
    if (api_req_apply_template(a->rctx, body, &text, &len, &ids, &n, &e))
        return http_respond_error(r, e.status, NULL, e.param[0] ? e.param : NULL,
                                  e.code[0] ? e.code : NULL, "%s", e.message);
    struct buf b = {0};
    int rc = buf_reserve(&b, len + (size_t)n * 8 + 96) || buf_puts(&b, "{\"prompt\":");
    rc = rc || buf_json_str(&b, text, len);
    const char *family = api_request_ctx_chat(a->rctx, NULL);
    rc = rc || buf_printf(&b, ",\"template\":\"%s\",\"tokens\":[", family);
    for (int32_t i = 0; i < n && !rc; i++)
        rc = buf_printf(&b, i ? ",%d" : "%d", (int)ids[i]);
    rc = rc || buf_printf(&b, "],\"count\":%d}\n", (int)n);
    free(text);
    free(ids);
    enum MHD_Result ok = rc ? http_respond_error(r, 500, NULL, NULL, NULL, "out of memory")
                            : http_respond(r, 200, "application/json", b.p, b.len);
    buf_free(&b);
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
    default:
        break;
    }
    if (a->state == API_LOADING)
        return http_respond_error(r, 503, NULL, NULL, "model_loading",
                                  "the model is still loading; retry shortly");
    if (a->state != API_READY)
        return http_respond_error(r, 503, NULL, NULL, "shutting_down",
                                  "the server is shutting down");
    /* completions and chat: parsed and validated off the loop thread; the
     * verdict comes back through the request's ops (api/parse_pool.h) */
    if ((r->route == ROUTE_COMPLETIONS || r->route == ROUTE_CHAT) && parse_pool_submit(a, r) == 0)
        return MHD_YES;
    json_t *body = routes_parse_body(r);
    if (!body)
        return MHD_YES; /* 400 queued */
    enum MHD_Result ok;
    switch (r->route) {
    case ROUTE_TOKENIZE:
        ok = routes_tokenize(r, body);
        break;
    case ROUTE_DETOKENIZE:
        ok = routes_detokenize(r, body);
        break;
    case ROUTE_COMPLETIONS:
    case ROUTE_CHAT:
        ok = cmpl_handle(r, body);
        break;
    case ROUTE_APPLY_TEMPLATE:
        ok = routes_apply_template(r, body);
        break;
    default:
        ok = http_respond_error(r, 404, NULL, NULL, "not_found", "no such route");
    }
    json_decref(body);
    return ok;
}
