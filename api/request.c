/* request — request validation as a pure function (api/request.h).
 *
 * Every field's type and range is checked here, in the order the old
 * completions handler checked them, so the first problem found is the one
 * reported (error.param names it). Prompts are tokenized here too: the
 * context-length checks need the token counts, and tokenizing is the part
 * of a request's work that is worth moving off the loop thread.
 * The chat endpoint's own parts are in request_chat.c.
 * Thread: any (the context is only read).
 */
#include "api/request.h"
#include "api/request_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/schema.h"
#include "api/tools.h"
#include "engine/jsonc.h"
#include "engine/tok.h"

/* ---- errors and field readers ------------------------------------------ */

int req_fail(struct api_req_error *e, int status, const char *param, const char *code,
             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    e->status = status;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    snprintf(e->code, sizeof(e->code), "%s", code ? code : "");
    return -1;
}

/* Optional number in [lo, hi] (NaN fails: the test is !(x >= lo && x <= hi)). */
static int req_num(json_t *o, const char *k, double lo, double hi, int lo_open, double *out,
                   struct api_req_error *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return req_fail(e, 400, k, NULL, "%s must be a number", k);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi) || (lo_open && x == lo))
        return req_fail(e, 400, k, NULL, "%s must be in %s%g, %g], got %g", k,
                        lo_open ? "(" : "[", lo, hi, x);
    *out = x;
    return 0;
}

int req_int(json_t *o, const char *k, int64_t lo, int64_t hi, int32_t *out,
            struct api_req_error *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return req_fail(e, 400, k, NULL, "%s must be an integer", k);
    json_int_t x = json_integer_value(v);
    if (!(x >= lo && x <= hi))
        return req_fail(e, 400, k, NULL, "%s must be an integer in [%lld, %lld], got %lld", k,
                        (long long)lo, (long long)hi, (long long)x);
    *out = (int32_t)x;
    return 0;
}

int req_bool(json_t *o, const char *k, int *out, struct api_req_error *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return req_fail(e, 400, k, NULL, "%s must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

/* ---- fields both endpoints share --------------------------------------- */

void req_defaults(const struct api_request_ctx *x, struct api_req *q, int kind)
{
    memset(q, 0, sizeof(*q));
    q->kind = kind;
    q->max_tokens = x->cfg.default_max_tokens;
    q->n = 1;
    q->logprobs = -1;
    q->temperature = 1.0;
    q->top_p = 1.0;
    q->repetition = 1.0;
}

int req_model(const struct api_request_ctx *x, json_t *b, struct api_req_error *e)
{
    json_t *v = json_object_get(b, "model");
    if (!v || json_is_null(v))
        return req_fail(e, 400, "model", NULL, "you must provide a model parameter");
    if (!json_is_string(v))
        return req_fail(e, 400, "model", NULL, "model must be a string");
    return api_req_model_id(json_string_value(v), x->cfg.model_id, e);
}

int api_req_model_id(const char *id, const char *served, struct api_req_error *e)
{
    if (strcmp(id, served))
        return req_fail(e, 404, "model", "model_not_found",
                        "the model '%.100s' does not exist (this server serves '%s')", id, served);
    return 0;
}

static int req_stop(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                    struct api_req_error *e)
{
    const struct api_config *cf = &x->cfg;
    json_t *v = json_object_get(b, "stop");
    if (!v || json_is_null(v))
        return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        items = NULL;
    } else if (!json_is_string(v)) {
        return req_fail(e, 400, "stop", NULL, "stop must be a string or an array of strings");
    }
    if (n > (size_t)cf->max_stop || n > API_REQ_MAX_STOP)
        return req_fail(e, 400, "stop", NULL, "at most %d stop strings are allowed",
                        cf->max_stop < API_REQ_MAX_STOP ? cf->max_stop : API_REQ_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s))
            return req_fail(e, 400, "stop", NULL, "stop[%zu] must be a string", i);
        size_t l = json_string_length(s);
        if (l == 0)
            return req_fail(e, 400, "stop", NULL, "stop strings must not be empty");
        if (l > (size_t)cf->max_stop_len)
            return req_fail(e, 400, "stop", NULL,
                            "stop strings must be at most %d bytes (got %zu)", cf->max_stop_len,
                            l);
        q->stop[q->n_stop] = malloc(l + 1);
        if (!q->stop[q->n_stop])
            return REQ_OOM(e);
        memcpy(q->stop[q->n_stop], json_string_value(s), l + 1);
        q->stop_len[q->n_stop++] = l;
        if (l > q->max_stop_len)
            q->max_stop_len = l;
    }
    return 0;
}

/* logit_bias: {"token id": bias} */
static int req_logit_bias(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                          struct api_req_error *e)
{
    json_t *v = json_object_get(b, "logit_bias");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return req_fail(e, 400, "logit_bias", NULL, "logit_bias must be an object");
    size_t n = json_object_size(v);
    if (n > (size_t)x->cfg.max_logit_bias)
        return req_fail(e, 400, "logit_bias", NULL, "at most %d logit_bias entries",
                        x->cfg.max_logit_bias);
    q->bias = calloc(n ? n : 1, sizeof(*q->bias));
    if (!q->bias)
        return REQ_OOM(e);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val)
    {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || key[0] == ' ' || key[0] == '+')
            return req_fail(e, 400, "logit_bias", NULL,
                            "logit_bias keys must be token ids, got \"%.32s\"", key);
        if (id < 0 || id >= x->n_vocab)
            return req_fail(e, 400, "logit_bias", NULL,
                            "logit_bias token id %lld is out of range [0, %d)", id,
                            (int)x->n_vocab);
        if (!json_is_number(val))
            return req_fail(e, 400, "logit_bias", NULL, "logit_bias values must be numbers");
        double bv = json_number_value(val);
        if (!(bv >= -100 && bv <= 100))
            return req_fail(e, 400, "logit_bias", NULL,
                            "logit_bias values must be in [-100, 100]");
        q->bias[q->n_bias].token = (int32_t)id;
        q->bias[q->n_bias++].bias = (float)bv;
    }
    return 0;
}

/* stop_token_ids, with room for `extra` more ids after them. */
static int req_stop_ids(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                        size_t extra, struct api_req_error *e)
{
    json_t *v = json_object_get(b, "stop_token_ids");
    size_t n = 0;
    if (v && !json_is_null(v)) {
        if (!json_is_array(v))
            return req_fail(e, 400, "stop_token_ids", NULL, "stop_token_ids must be an array");
        n = json_array_size(v);
        if (n > 1024)
            return req_fail(e, 400, "stop_token_ids", NULL, "at most 1024 stop_token_ids");
    }
    if (n + extra == 0)
        return 0;
    q->stop_ids = calloc(n + extra, sizeof(int32_t));
    if (!q->stop_ids)
        return REQ_OOM(e);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(v, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= x->n_vocab)
            return req_fail(e, 400, "stop_token_ids", NULL,
                            "stop_token_ids[%zu] must be a token id in [0, %d)", i,
                            (int)x->n_vocab);
        q->stop_ids[q->n_stop_ids++] = (int32_t)id;
    }
    return 0;
}

/* The fields both endpoints share, in the order the checks run (the first
 * problem is the one reported): sampling, n, best_of, stream, then the
 * endpoint's own logprobs fields (parse_lp), ignore_eos, min_tokens,
 * stream_options, seed, user, stop, logit_bias, stop_token_ids.
 * q->max_tokens must already be set (min_tokens is bounded by it). */
int req_common(const struct api_request_ctx *x, json_t *b, struct api_req *q,
               int (*parse_lp)(const struct api_request_ctx *, json_t *, struct api_req *,
                               struct api_req_error *),
               size_t extra_stop_ids, struct api_req_error *e)
{
    const struct api_config *cf = &x->cfg;
    int32_t best_of = -1;
    json_t *v;
    if (req_num(b, "temperature", 0, 2, 0, &q->temperature, e) ||
        req_num(b, "top_p", 0, 1, 1, &q->top_p, e) ||
        req_int(b, "top_k", 0, INT32_MAX, &q->top_k, e) ||
        req_num(b, "min_p", 0, 1, 0, &q->min_p, e) ||
        req_num(b, "presence_penalty", -2, 2, 0, &q->presence, e) ||
        req_num(b, "frequency_penalty", -2, 2, 0, &q->frequency, e) ||
        req_num(b, "repetition_penalty", 0, 100, 1, &q->repetition, e) ||
        req_int(b, "n", 1, cf->max_n, &q->n, e) ||
        req_int(b, "best_of", 1, cf->max_n, &best_of, e) ||
        req_bool(b, "stream", &q->stream, e) || parse_lp(x, b, q, e) ||
        req_bool(b, "ignore_eos", &q->ignore_eos, e))
        return -1;
    if (req_int(b, "min_tokens", 0, q->max_tokens, &q->min_tokens, e))
        return -1;
    if (best_of >= 0) {
        if (best_of < q->n)
            return req_fail(e, 400, "best_of", NULL, "best_of must be >= n");
        if (best_of > q->n)
            return req_fail(e, 400, "best_of", NULL,
                            "best_of > n is not supported (choices are not ranked)");
    }
    v = json_object_get(b, "stream_options");
    if (v && !json_is_null(v)) {
        if (!q->stream)
            return req_fail(e, 400, "stream_options", NULL,
                            "stream_options is only allowed when stream is true");
        if (!json_is_object(v))
            return req_fail(e, 400, "stream_options", NULL, "stream_options must be an object");
        json_t *iu = json_object_get(v, "include_usage");
        if (iu && !json_is_null(iu)) {
            if (!json_is_boolean(iu))
                return req_fail(e, 400, "stream_options.include_usage", NULL,
                                "stream_options.include_usage must be a boolean");
            q->include_usage = json_is_true(iu);
        }
    }
    v = json_object_get(b, "seed");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v))
            return req_fail(e, 400, "seed", NULL, "seed must be an integer");
        q->seed = (uint64_t)json_integer_value(v);
        q->has_seed = 1;
    }
    v = json_object_get(b, "user");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return req_fail(e, 400, "user", NULL, "user must be a string");
        snprintf(q->user, sizeof(q->user), "%s", json_string_value(v));
        for (char *p = q->user; *p; p++) /* keep the log line one grep-able line */
            if ((unsigned char)*p < 0x20 || *p == '"' || *p == ' ')
                *p = '_';
    }
    if (req_stop(x, b, q, e) || req_logit_bias(x, b, q, e) ||
        req_stop_ids(x, b, q, extra_stop_ids, e))
        return -1;
    /* JSON mode / structured output (api/schema.c); on completions too, as
     * llama.cpp's server takes it there */
    char msg[sizeof(e->message)];
    int rf = api_response_format(b, &q->json, msg, sizeof(msg));
    if (rf == -2)
        return REQ_OOM(e);
    if (rf)
        return req_fail(e, 400, "response_format", NULL, "%s", msg);
    return 0;
}

/* ---- prompts ------------------------------------------------------------ */

size_t api_req_drop_special(const struct tok *t, int32_t *ids, size_t n)
{
    /* Special tokens render as nothing without render_special; dropping them
     * first gives the same text and keeps tok_decode away from empty pieces
     * (engine/tok_decode.c passes their NULL piece to memcpy, which UBSan rejects). */
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!tok_is_special(t, ids[i]))
            ids[k++] = ids[i];
    return k;
}

static int req_ctx_exceeded(const struct api_request_ctx *x, size_t n, struct api_req_error *e)
{
    return req_fail(e, 400, "prompt", "context_length_exceeded",
                    "This model's maximum context length is %d tokens. However, your "
                    "prompt has %zu tokens.",
                    (int)x->n_ctx, n);
}

/* Token ids of a [int] prompt. */
static int req_prompt_ids(const struct api_request_ctx *x, json_t *arr, const struct api_req *q,
                          struct api_req_prompt *p, struct api_req_error *e)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return req_fail(e, 400, "prompt", NULL, "prompt must not be empty");
    if (n > (size_t)x->n_ctx)
        return req_ctx_exceeded(x, n, e);
    p->ids = malloc(n * sizeof(int32_t));
    if (!p->ids)
        return REQ_OOM(e);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t))
            return req_fail(e, 400, "prompt", NULL, "prompt token ids must be integers");
        json_int_t id = json_integer_value(t);
        if (id < 0 || id >= x->n_vocab)
            return req_fail(e, 400, "prompt", NULL,
                            "prompt token id %lld at index %zu is out of range [0, %d)",
                            (long long)id, i, (int)x->n_vocab);
        p->ids[i] = (int32_t)id;
    }
    p->n = (int32_t)n;
    if (q->echo) {
        int32_t *vis = malloc(n * sizeof(int32_t));
        if (!vis)
            return REQ_OOM(e);
        memcpy(vis, p->ids, n * sizeof(int32_t));
        size_t nv = api_req_drop_special(x->tok, vis, n);
        size_t need = tok_decode(x->tok, vis, nv, 0, 0, NULL, 0);
        p->echo = malloc(need + 1);
        if (p->echo)
            tok_decode(x->tok, vis, nv, 0, 0, p->echo, need + 1);
        free(vis);
        if (!p->echo)
            return REQ_OOM(e);
        p->echo_len = need;
    }
    return 0;
}

/* A prompt of len bytes that is over the context whatever it says: a token
 * stands for at most max_token_bytes bytes. Refused without tokenizing
 * (megabytes of text would stall the thread that parses). */
int req_too_long(const struct api_request_ctx *x, size_t len, const char *param,
                 struct api_req_error *e)
{
    if (len / (size_t)x->max_token_bytes <= (size_t)x->n_ctx)
        return 0;
    return req_fail(e, 400, param, "context_length_exceeded",
                    "This model's maximum context length is %d tokens. However, your "
                    "prompt of %zu bytes has at least %zu tokens.",
                    (int)x->n_ctx, len, len / (size_t)x->max_token_bytes);
}

static int req_prompt_text(const struct api_request_ctx *x, json_t *s, const struct api_req *q,
                           int add_special, int parse_special, struct api_req_prompt *p,
                           struct api_req_error *e)
{
    size_t len = json_string_length(s);
    const char *text = json_string_value(s);
    if (len == 0)
        return req_fail(e, 400, "prompt", NULL, "prompt must not be empty");
    if (req_too_long(x, len, "prompt", e))
        return -1;
    size_t cap = (size_t)x->n_ctx + 8, n = 0;
    p->ids = malloc(cap * sizeof(int32_t));
    if (!p->ids)
        return REQ_OOM(e);
    int rc = tok_encode(x->tok, text, len, add_special, parse_special, p->ids, cap, &n);
    if (rc == INF_ETOOBIG)
        return req_ctx_exceeded(x, n, e);
    if (rc)
        return req_fail(e, 400, "prompt", NULL, "the prompt could not be tokenized: %s",
                        inf_strerror(rc));
    if (n == 0)
        return req_fail(e, 400, "prompt", NULL, "the prompt has no tokens");
    p->n = (int32_t)n;
    if (q->echo) {
        p->echo = malloc(len + 1);
        if (!p->echo)
            return REQ_OOM(e);
        memcpy(p->echo, text, len + 1);
        p->echo_len = len;
    }
    return 0;
}

/* prompt + max_tokens must fit the context. */
int req_fits(const struct api_request_ctx *x, const struct api_req *q,
             const struct api_req_prompt *p, struct api_req_error *e)
{
    if ((int64_t)p->n + q->max_tokens <= x->n_ctx)
        return 0;
    return req_fail(e, 400, "max_tokens", "context_length_exceeded",
                    "This model's maximum context length is %d tokens. However, you "
                    "requested %lld tokens (%d in the prompt, %lld for the "
                    "completion). Please reduce the prompt or max_tokens.",
                    (int)x->n_ctx, (long long)p->n + q->max_tokens, (int)p->n,
                    (long long)q->max_tokens);
}

static int req_prompts(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                       int add_special, int parse_special, struct api_req_error *e)
{
    const struct api_config *cf = &x->cfg;
    json_t *pr = json_object_get(b, "prompt");
    if (!pr || json_is_null(pr))
        return req_fail(e, 400, "prompt", NULL, "prompt is required");
    size_t np;
    int kind; /* 0: one string, 1: [string], 2: [int], 3: [[int]] */
    static const char shapes[] = "prompt must be a string, an array of strings, an array of "
                                 "token ids or an array of arrays of token ids";
    if (json_is_string(pr)) {
        kind = 0;
        np = 1;
    } else if (json_is_array(pr)) {
        size_t n = json_array_size(pr);
        if (n == 0)
            return req_fail(e, 400, "prompt", NULL, "prompt must not be empty");
        json_t *f = json_array_get(pr, 0);
        if (json_is_string(f)) {
            kind = 1;
            np = n;
        } else if (json_is_integer(f)) {
            kind = 2;
            np = 1;
        } else if (json_is_array(f)) {
            kind = 3;
            np = n;
        } else {
            return req_fail(e, 400, "prompt", NULL, "%s", shapes);
        }
        if (kind != 2)
            for (size_t i = 0; i < n; i++) {
                json_t *y = json_array_get(pr, i);
                if ((kind == 1 && !json_is_string(y)) || (kind == 3 && !json_is_array(y)))
                    return req_fail(e, 400, "prompt", NULL,
                                    "prompt arrays must not mix strings and token arrays");
            }
    } else {
        return req_fail(e, 400, "prompt", NULL, "%s", shapes);
    }
    if (np > (size_t)cf->max_prompts)
        return req_fail(e, 400, "prompt", NULL, "at most %d prompts per request",
                        cf->max_prompts);
    if (np * (size_t)q->n > 1024)
        return req_fail(e, 400, "n", NULL, "too many choices (prompts x n > 1024)");
    q->prompts = calloc(np, sizeof(*q->prompts));
    if (!q->prompts)
        return REQ_OOM(e);
    q->n_prompts = (int)np;
    for (size_t i = 0; i < np; i++) {
        struct api_req_prompt *p = &q->prompts[i];
        int rc;
        if (kind == 0)
            rc = req_prompt_text(x, pr, q, add_special, parse_special, p, e);
        else if (kind == 1)
            rc = req_prompt_text(x, json_array_get(pr, i), q, add_special, parse_special, p, e);
        else if (kind == 2)
            rc = req_prompt_ids(x, pr, q, p, e);
        else
            rc = req_prompt_ids(x, json_array_get(pr, i), q, p, e);
        if (rc || req_fits(x, q, p, e))
            return -1;
        q->prompt_tokens += p->n;
    }
    return 0;
}

/* ---- /v1/completions ---------------------------------------------------- */

static int req_cmpl_lp(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                       struct api_req_error *e)
{
    return req_bool(b, "echo", &q->echo, e) ||
           req_int(b, "logprobs", 0, x->cfg.max_logprobs, &q->logprobs, e);
}

int api_req_parse_completion(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                             struct api_req_error *e)
{
    int add_special = 1, parse_special = 0;
    req_defaults(x, q, API_REQ_COMPLETION);
    memset(e, 0, sizeof(*e));
    json_t *v;
    int rc = req_model(x, b, e);
    if (!rc && (v = json_object_get(b, "suffix")) && !json_is_null(v))
        rc = req_fail(e, 400, "suffix", NULL, "suffix is not supported");
    if (!rc)
        rc = req_int(b, "max_tokens", 1, x->cfg.max_tokens, &q->max_tokens, e);
    if (!rc)
        rc = req_common(x, b, q, req_cmpl_lp, 0, e);
    if (!rc)
        rc = req_bool(b, "add_special_tokens", &add_special, e) ||
             req_bool(b, "parse_special", &parse_special, e);
    if (!rc)
        rc = req_prompts(x, b, q, add_special, parse_special, e);
    if (rc)
        api_req_release(q);
    return rc;
}

void api_req_release(struct api_req *q)
{
    for (int i = 0; i < q->n_prompts; i++) {
        free(q->prompts[i].ids);
        free(q->prompts[i].echo);
    }
    free(q->prompts);
    for (int i = 0; i < q->n_stop; i++)
        free(q->stop[i]);
    free(q->bias);
    free(q->stop_ids);
    jsonc_free(q->json);
    api_tools_free(q->tools);
    int kind = q->kind;
    memset(q, 0, sizeof(*q));
    q->kind = kind;
}

/* ---- the context ---------------------------------------------------------- */

/* The longest token text (special tokens rendered): a prompt of L bytes
 * has at least L / this many tokens. */
static int32_t req_max_token_bytes(const struct tok *t, int32_t n_vocab)
{
    int32_t mx = 1;
    char tb[1024];
    for (int32_t i = 0; i < n_vocab; i++) {
        int nb = tok_token_bytes(t, i, 1, tb, sizeof(tb));
        if (nb > mx)
            mx = nb;
    }
    return mx;
}

int api_request_ctx_new(const struct api_config *cfg, const struct tok *tok, int32_t n_ctx,
                        const char *tmpl, size_t tmpl_len, struct api_request_ctx **out)
{
    *out = NULL;
    struct api_request_ctx *x = calloc(1, sizeof(*x));
    if (!x)
        return INF_ENOMEM;
    x->cfg = *cfg;
    x->tok = tok;
    x->n_ctx = n_ctx;
    x->n_vocab = tok_n_vocab(tok);
    x->max_token_bytes = req_max_token_bytes(tok, x->n_vocab);
    if (req_chat_setup(x, tmpl, tmpl_len)) {
        free(x);
        return INF_EINVAL;
    }
    *out = x;
    return 0;
}

const char *api_request_ctx_chat(const struct api_request_ctx *x, const char **why)
{
    if (why)
        *why = x->chat_why;
    return x->chat.think ? "qwen3" : chat_template_name(x->chat.family);
}

void api_request_ctx_free(struct api_request_ctx *x)
{
    free(x);
}

void api_request_ctx_set_limits(struct api_request_ctx *x, const struct api_config *cfg)
{
    char keep[sizeof(x->cfg.chat_template)]; /* the template is fixed at load */
    memcpy(keep, x->cfg.chat_template, sizeof(keep));
    x->cfg = *cfg;
    memcpy(x->cfg.chat_template, keep, sizeof(keep));
}

/* ---- the string wrappers (fuzz target, tests) ---------------------------- */

int api_json_parse_object(const char *p, size_t n, json_t **out, char *msg, size_t cap)
{
    json_error_t je;
    *out = NULL;
    if (n == 0) {
        snprintf(msg, cap, "request body is empty (expected JSON)");
        return INF_EINVAL;
    }
    /* jansson rejects trailing garbage, invalid UTF-8, lone surrogates and
     * \u0000 (without JSON_ALLOW_NUL), and nesting past its depth limit */
    json_t *j = json_loadb(p, n, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        snprintf(msg, cap, "invalid JSON: %s (at byte %d)", je.text, je.position);
        return INF_EINVAL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        snprintf(msg, cap, "the request body must be a JSON object");
        return INF_EINVAL;
    }
    *out = j;
    return 0;
}

static int req_result(struct api_request_ctx *x, const char *body, size_t len,
                      int (*parse)(const struct api_request_ctx *, json_t *, struct api_req *,
                                   struct api_req_error *),
                      struct api_request_result *out)
{
    memset(out, 0, sizeof(*out));
    json_t *j;
    if (api_json_parse_object(body, len, &j, out->message, sizeof(out->message))) {
        out->status = 400; /* what the router answers */
        return 0;
    }
    struct api_req q;
    struct api_req_error e;
    int rc = parse(x, j, &q, &e);
    json_decref(j);
    if (rc) {
        out->status = e.status;
        memcpy(out->param, e.param, sizeof(out->param));
        memcpy(out->code, e.code, sizeof(out->code));
        memcpy(out->message, e.message, sizeof(out->message));
        return 0;
    }
    out->n_prompts = q.n_prompts;
    out->n_choices = q.n_prompts * q.n;
    out->prompt_tokens = q.prompt_tokens;
    out->max_tokens = q.max_tokens;
    out->stream = q.stream;
    out->echo = q.echo;
    out->logprobs = q.logprobs;
    out->n_stop = q.n_stop;
    api_req_release(&q);
    return 0;
}

int api_parse_completion_request(struct api_request_ctx *x, const char *body, size_t len,
                                 struct api_request_result *out)
{
    return req_result(x, body, len, api_req_parse_completion, out);
}

int api_parse_chat_request(struct api_request_ctx *x, const char *body, size_t len,
                           struct api_request_result *out)
{
    return req_result(x, body, len, api_req_parse_chat, out);
}
