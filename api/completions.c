/* completions — POST /v1/completions: validate, tokenize, submit to the
 * scheduler, turn its events into text (JSON or SSE).
 *
 * Flow: cmpl_handle validates every field (a 400 names the field in
 * error.param), tokenizes each prompt, and submits one scheduler request per
 * prompt (n choices each). The engine thread only calls cmpl_notify ->
 * uv_async_send; cmpl_on_wake (loop thread) drains every request's events,
 * decodes tokens with tok_stream (text only on UTF-8 boundaries), applies stop
 * strings, and appends SSE events or, at the end, builds the JSON body; then
 * resumes the suspended connection.
 *
 * Stop strings: text that could still be the start of a stop string is held
 * back (choice.safe marks what may be sent); a match truncates the text there,
 * ends the choice ("stop") and cancels it in the scheduler.
 *
 * A client that disconnects is noticed by MHD when the connection is active
 * and by a uv_poll(UV_DISCONNECT) on its socket while suspended; either way
 * the scheduler handles are released (cancel + KV blocks freed next step).
 * Thread: the loop thread, except cmpl_notify (engine thread).
 */
#include "api/internal.h"
#include "api/request.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/log.h"
#include "engine/model.h"
#include "engine/sched.h"
#include "engine/tok.h"

struct cmpl_lp {
    int32_t token;
    int32_t n_top;
    int64_t offset; /* byte offset in the choice's full text (echo included) */
    float lp;
    int has_lp;     /* 0: the first prompt token (no logprob) */
    int32_t top_ids[SCHED_MAX_TOP];
    float top_lps[SCHED_MAX_TOP];
};

struct cmpl_prompt {
    int32_t *ids;
    int32_t n;
    char *echo; /* prompt text for echo */
    size_t echo_len;
    struct sched_handle *h;
    int admitted;
    struct cmpl_lp *plp; /* [n] prompt logprobs (echo + logprobs) */
};

struct cmpl_choice {
    int prompt;
    int32_t sub;      /* choice index inside its scheduler request */
    struct tok_stream ts;
    struct buf text;  /* completion text so far (without echo) */
    size_t safe;      /* text[0..safe) is final (no stop string can start in it) */
    size_t sent;      /* streamed so far */
    int done;
    int reported;     /* stream: finish_reason sent */
    int started;      /* stream: first chunk (with echo) sent */
    const char *finish;
    int32_t n_tokens;
    double t_last;
    struct cmpl_lp *lps;
    size_t n_lps, cap_lps, lp_sent;
};

struct cmpl {
    struct cmpl *prev, *next;
    int linked;
    struct api *api;
    struct http_req *r;
    char id[48];
    int64_t created;

    /* request */
    int stream, include_usage, echo;
    int32_t n, logprobs, max_tokens;
    int n_stop;
    char *stop[64];
    size_t stop_len[64];
    size_t max_stop_len;
    char user[64];

    int n_prompts;
    struct cmpl_prompt *prompts;
    int n_choices;
    struct cmpl_choice *choices;
    int32_t prompt_tokens;
    int32_t completion_tokens;

    struct buf out; /* stream: SSE bytes not yet taken by MHD; else: JSON body */
    int finished;
    int failed;
    int fail_status;
    char fail_msg[256];
    int client_gone;
    double t_start, t_submit, t_first, t_end, t_last_out;

    uv_poll_t gone_poll;
    int poll_inited, poll_active;
    int detached;
};

/* ---- request validation ---------------------------------------------- */

struct cmpl_err {
    int status;
    const char *param;
    const char *code;
    char msg[320];
};

static int cmpl_fail(struct cmpl_err *e, int status, const char *param, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int cmpl_fail(struct cmpl_err *e, int status, const char *param, const char *code,
                     const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    e->status = status;
    e->param = param;
    e->code = code;
    return -1;
}

/* Optional number in [lo, hi] (NaN fails: the test is !(x >= lo && x <= hi)). */
static int cmpl_num(json_t *o, const char *k, double lo, double hi, int lo_open, double *out,
                    struct cmpl_err *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return cmpl_fail(e, 400, k, NULL, "%s must be a number", k);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi) || (lo_open && x == lo))
        return cmpl_fail(e, 400, k, NULL, "%s must be in %s%g, %g], got %g", k,
                         lo_open ? "(" : "[", lo, hi, x);
    *out = x;
    return 0;
}

static int cmpl_int(json_t *o, const char *k, int64_t lo, int64_t hi, int64_t *out,
                    struct cmpl_err *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return cmpl_fail(e, 400, k, NULL, "%s must be an integer", k);
    json_int_t x = json_integer_value(v);
    if (!(x >= lo && x <= hi))
        return cmpl_fail(e, 400, k, NULL, "%s must be an integer in [%lld, %lld], got %lld", k,
                         (long long)lo, (long long)hi, (long long)x);
    *out = x;
    return 0;
}

static int cmpl_bool(json_t *o, const char *k, int *out, struct cmpl_err *e)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return cmpl_fail(e, 400, k, NULL, "%s must be a boolean", k);
    *out = json_is_true(v);
    return 0;
}

/* Parsed request, before the prompts are tokenized. */
struct cmpl_req {
    int64_t max_tokens, n, best_of, logprobs, top_k, min_tokens, seed;
    int has_seed;
    double temperature, top_p, min_p, presence, frequency, repetition;
    int echo, stream, include_usage, ignore_eos, add_special, parse_special;
    struct sample_bias *bias;
    int32_t n_bias;
    int32_t *stop_ids;
    int32_t n_stop_ids;
};

static int cmpl_parse(struct cmpl *c, json_t *b, struct cmpl_req *q, struct cmpl_err *e)
{
    struct api *a = c->api;
    const struct api_config *cf = &a->cfg;
    json_t *v;

    memset(q, 0, sizeof(*q));
    q->max_tokens = cf->default_max_tokens;
    q->n = 1;
    q->best_of = -1;
    q->logprobs = -1;
    q->temperature = 1.0;
    q->top_p = 1.0;
    q->repetition = 1.0;
    q->add_special = 1;

    v = json_object_get(b, "model");
    if (!v || json_is_null(v))
        return cmpl_fail(e, 400, "model", NULL, "you must provide a model parameter");
    if (!json_is_string(v))
        return cmpl_fail(e, 400, "model", NULL, "model must be a string");
    if (strcmp(json_string_value(v), cf->model_id))
        return cmpl_fail(e, 404, "model", "model_not_found",
                         "the model '%.100s' does not exist (this server serves '%s')",
                         json_string_value(v), cf->model_id);
    v = json_object_get(b, "suffix");
    if (v && !json_is_null(v))
        return cmpl_fail(e, 400, "suffix", NULL, "suffix is not supported");
    if (cmpl_int(b, "max_tokens", 1, cf->max_tokens, &q->max_tokens, e) ||
        cmpl_num(b, "temperature", 0, 2, 0, &q->temperature, e) ||
        cmpl_num(b, "top_p", 0, 1, 1, &q->top_p, e) ||
        cmpl_int(b, "top_k", 0, INT32_MAX, &q->top_k, e) ||
        cmpl_num(b, "min_p", 0, 1, 0, &q->min_p, e) ||
        cmpl_num(b, "presence_penalty", -2, 2, 0, &q->presence, e) ||
        cmpl_num(b, "frequency_penalty", -2, 2, 0, &q->frequency, e) ||
        cmpl_num(b, "repetition_penalty", 0, 100, 1, &q->repetition, e) ||
        cmpl_int(b, "n", 1, cf->max_n, &q->n, e) ||
        cmpl_int(b, "best_of", 1, cf->max_n, &q->best_of, e) ||
        cmpl_bool(b, "stream", &q->stream, e) || cmpl_bool(b, "echo", &q->echo, e) ||
        cmpl_int(b, "logprobs", 0, cf->max_logprobs, &q->logprobs, e) ||
        cmpl_bool(b, "ignore_eos", &q->ignore_eos, e) ||
        cmpl_bool(b, "add_special_tokens", &q->add_special, e) ||
        cmpl_bool(b, "parse_special", &q->parse_special, e))
        return -1;
    if (cmpl_int(b, "min_tokens", 0, q->max_tokens, &q->min_tokens, e))
        return -1;
    if (q->best_of >= 0) {
        if (q->best_of < q->n)
            return cmpl_fail(e, 400, "best_of", NULL, "best_of must be >= n");
        if (q->best_of > q->n)
            return cmpl_fail(e, 400, "best_of", NULL,
                             "best_of > n is not supported (choices are not ranked)");
    }
    v = json_object_get(b, "stream_options");
    if (v && !json_is_null(v)) {
        if (!q->stream)
            return cmpl_fail(e, 400, "stream_options", NULL,
                             "stream_options is only allowed when stream is true");
        if (!json_is_object(v))
            return cmpl_fail(e, 400, "stream_options", NULL, "stream_options must be an object");
        json_t *iu = json_object_get(v, "include_usage");
        if (iu && !json_is_null(iu)) {
            if (!json_is_boolean(iu))
                return cmpl_fail(e, 400, "stream_options.include_usage", NULL,
                                 "stream_options.include_usage must be a boolean");
            q->include_usage = json_is_true(iu);
        }
    }
    v = json_object_get(b, "seed");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v))
            return cmpl_fail(e, 400, "seed", NULL, "seed must be an integer");
        q->seed = json_integer_value(v);
        q->has_seed = 1;
    }
    v = json_object_get(b, "user");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return cmpl_fail(e, 400, "user", NULL, "user must be a string");
        snprintf(c->user, sizeof(c->user), "%s", json_string_value(v));
        for (char *p = c->user; *p; p++) /* keep the log line one grep-able line */
            if ((unsigned char)*p < 0x20 || *p == '"' || *p == ' ')
                *p = '_';
    }
    /* stop: string or [string] */
    v = json_object_get(b, "stop");
    if (v && !json_is_null(v)) {
        json_t *one[1] = {v};
        json_t **items = one;
        size_t n = 1;
        if (json_is_array(v)) {
            n = json_array_size(v);
            items = NULL;
        } else if (!json_is_string(v)) {
            return cmpl_fail(e, 400, "stop", NULL, "stop must be a string or an array of strings");
        }
        if (n > (size_t)cf->max_stop || n > 64)
            return cmpl_fail(e, 400, "stop", NULL, "at most %d stop strings are allowed",
                             cf->max_stop < 64 ? cf->max_stop : 64);
        for (size_t i = 0; i < n; i++) {
            json_t *s = items ? items[i] : json_array_get(v, i);
            if (!json_is_string(s))
                return cmpl_fail(e, 400, "stop", NULL, "stop[%zu] must be a string", i);
            size_t l = json_string_length(s);
            if (l == 0)
                return cmpl_fail(e, 400, "stop", NULL, "stop strings must not be empty");
            if (l > (size_t)cf->max_stop_len)
                return cmpl_fail(e, 400, "stop", NULL,
                                 "stop strings must be at most %d bytes (got %zu)",
                                 cf->max_stop_len, l);
            c->stop[c->n_stop] = malloc(l + 1);
            if (!c->stop[c->n_stop])
                return cmpl_fail(e, 500, NULL, NULL, "out of memory");
            memcpy(c->stop[c->n_stop], json_string_value(s), l + 1);
            c->stop_len[c->n_stop++] = l;
            if (l > c->max_stop_len)
                c->max_stop_len = l;
        }
    }
    /* logit_bias: {"token id": bias} */
    v = json_object_get(b, "logit_bias");
    if (v && !json_is_null(v)) {
        if (!json_is_object(v))
            return cmpl_fail(e, 400, "logit_bias", NULL, "logit_bias must be an object");
        size_t n = json_object_size(v);
        if (n > (size_t)cf->max_logit_bias)
            return cmpl_fail(e, 400, "logit_bias", NULL, "at most %d logit_bias entries",
                             cf->max_logit_bias);
        q->bias = calloc(n ? n : 1, sizeof(*q->bias));
        if (!q->bias)
            return cmpl_fail(e, 500, NULL, NULL, "out of memory");
        const char *key;
        json_t *val;
        json_object_foreach(v, key, val)
        {
            char *end;
            long long id = strtoll(key, &end, 10);
            if (!*key || *end || key[0] == ' ' || key[0] == '+')
                return cmpl_fail(e, 400, "logit_bias", NULL,
                                 "logit_bias keys must be token ids, got \"%.32s\"", key);
            if (id < 0 || id >= a->n_vocab)
                return cmpl_fail(e, 400, "logit_bias", NULL,
                                 "logit_bias token id %lld is out of range [0, %d)", id,
                                 (int)a->n_vocab);
            if (!json_is_number(val))
                return cmpl_fail(e, 400, "logit_bias", NULL, "logit_bias values must be numbers");
            double x = json_number_value(val);
            if (!(x >= -100 && x <= 100))
                return cmpl_fail(e, 400, "logit_bias", NULL,
                                 "logit_bias values must be in [-100, 100]");
            q->bias[q->n_bias].token = (int32_t)id;
            q->bias[q->n_bias++].bias = (float)x;
        }
    }
    v = json_object_get(b, "stop_token_ids");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v))
            return cmpl_fail(e, 400, "stop_token_ids", NULL, "stop_token_ids must be an array");
        size_t n = json_array_size(v);
        if (n > 1024)
            return cmpl_fail(e, 400, "stop_token_ids", NULL, "at most 1024 stop_token_ids");
        q->stop_ids = calloc(n ? n : 1, sizeof(int32_t));
        if (!q->stop_ids)
            return cmpl_fail(e, 500, NULL, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_array_get(v, i);
            json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
            if (id < 0 || id >= a->n_vocab)
                return cmpl_fail(e, 400, "stop_token_ids", NULL,
                                 "stop_token_ids[%zu] must be a token id in [0, %d)", i,
                                 (int)a->n_vocab);
            q->stop_ids[q->n_stop_ids++] = (int32_t)id;
        }
    }
    return 0;
}

/* Token ids of a [int] prompt. */
static int cmpl_prompt_ids(struct cmpl *c, json_t *arr, struct cmpl_prompt *p,
                           struct cmpl_err *e)
{
    size_t n = json_array_size(arr);
    if (n == 0)
        return cmpl_fail(e, 400, "prompt", NULL, "prompt must not be empty");
    if (n > (size_t)c->api->n_ctx)
        return cmpl_fail(e, 400, "prompt", "context_length_exceeded",
                         "This model's maximum context length is %d tokens. However, your "
                         "prompt has %zu tokens.",
                         (int)c->api->n_ctx, n);
    p->ids = malloc(n * sizeof(int32_t));
    if (!p->ids)
        return cmpl_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t))
            return cmpl_fail(e, 400, "prompt", NULL, "prompt token ids must be integers");
        json_int_t id = json_integer_value(t);
        if (id < 0 || id >= c->api->n_vocab)
            return cmpl_fail(e, 400, "prompt", NULL,
                             "prompt token id %lld at index %zu is out of range [0, %d)",
                             (long long)id, i, (int)c->api->n_vocab);
        p->ids[i] = (int32_t)id;
    }
    p->n = (int32_t)n;
    if (c->echo) {
        int32_t *vis = malloc(n * sizeof(int32_t));
        if (!vis)
            return cmpl_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(vis, p->ids, n * sizeof(int32_t));
        size_t nv = routes_drop_special(c->api->tok, vis, n);
        size_t need = tok_decode(c->api->tok, vis, nv, 0, 0, NULL, 0);
        p->echo = malloc(need + 1);
        if (p->echo)
            tok_decode(c->api->tok, vis, nv, 0, 0, p->echo, need + 1);
        free(vis);
        if (!p->echo)
            return cmpl_fail(e, 500, NULL, NULL, "out of memory");
        p->echo_len = need;
    }
    return 0;
}

static int cmpl_prompt_text(struct cmpl *c, json_t *s, const struct cmpl_req *q,
                            struct cmpl_prompt *p, struct cmpl_err *e)
{
    struct api *a = c->api;
    size_t len = json_string_length(s);
    const char *text = json_string_value(s);
    if (len == 0)
        return cmpl_fail(e, 400, "prompt", NULL, "prompt must not be empty");
    /* A token stands for at most max_token_bytes bytes, so a prompt this long
     * is over the context whatever it says: refuse without tokenizing it
     * (megabytes of text would stall the loop). */
    if (len / (size_t)a->max_token_bytes > (size_t)a->n_ctx)
        return cmpl_fail(e, 400, "prompt", "context_length_exceeded",
                         "This model's maximum context length is %d tokens. However, your "
                         "prompt of %zu bytes has at least %zu tokens.",
                         (int)a->n_ctx, len, len / (size_t)a->max_token_bytes);
    size_t cap = (size_t)a->n_ctx + 8, n = 0;
    p->ids = malloc(cap * sizeof(int32_t));
    if (!p->ids)
        return cmpl_fail(e, 500, NULL, NULL, "out of memory");
    int rc = tok_encode(a->tok, text, len, q->add_special, q->parse_special, p->ids, cap, &n);
    if (rc == INF_ETOOBIG)
        return cmpl_fail(e, 400, "prompt", "context_length_exceeded",
                         "This model's maximum context length is %d tokens. However, your "
                         "prompt has %zu tokens.",
                         (int)a->n_ctx, n);
    if (rc)
        return cmpl_fail(e, 400, "prompt", NULL, "the prompt could not be tokenized: %s",
                         inf_strerror(rc));
    if (n == 0)
        return cmpl_fail(e, 400, "prompt", NULL, "the prompt has no tokens");
    p->n = (int32_t)n;
    if (c->echo) {
        p->echo = malloc(len + 1);
        if (!p->echo)
            return cmpl_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(p->echo, text, len + 1);
        p->echo_len = len;
    }
    return 0;
}

static int cmpl_prompts(struct cmpl *c, json_t *b, const struct cmpl_req *q,
                        struct cmpl_err *e)
{
    const struct api_config *cf = &c->api->cfg;
    json_t *pr = json_object_get(b, "prompt");
    if (!pr || json_is_null(pr))
        return cmpl_fail(e, 400, "prompt", NULL, "prompt is required");
    size_t np;
    int kind; /* 0: one string, 1: [string], 2: [int], 3: [[int]] */
    if (json_is_string(pr)) {
        kind = 0;
        np = 1;
    } else if (json_is_array(pr)) {
        size_t n = json_array_size(pr);
        if (n == 0)
            return cmpl_fail(e, 400, "prompt", NULL, "prompt must not be empty");
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
            return cmpl_fail(e, 400, "prompt", NULL,
                             "prompt must be a string, an array of strings, an array of token "
                             "ids or an array of arrays of token ids");
        }
        if (kind != 2)
            for (size_t i = 0; i < n; i++) {
                json_t *x = json_array_get(pr, i);
                if ((kind == 1 && !json_is_string(x)) || (kind == 3 && !json_is_array(x)))
                    return cmpl_fail(e, 400, "prompt", NULL,
                                     "prompt arrays must not mix strings and token arrays");
            }
    } else {
        return cmpl_fail(e, 400, "prompt", NULL,
                         "prompt must be a string, an array of strings, an array of token ids or "
                         "an array of arrays of token ids");
    }
    if (np > (size_t)cf->max_prompts)
        return cmpl_fail(e, 400, "prompt", NULL, "at most %d prompts per request",
                         cf->max_prompts);
    if (np * (size_t)q->n > 1024)
        return cmpl_fail(e, 400, "n", NULL, "too many choices (prompts x n > 1024)");
    c->prompts = calloc(np, sizeof(*c->prompts));
    if (!c->prompts)
        return cmpl_fail(e, 500, NULL, NULL, "out of memory");
    c->n_prompts = (int)np;
    for (size_t i = 0; i < np; i++) {
        struct cmpl_prompt *p = &c->prompts[i];
        int rc;
        if (kind == 0)
            rc = cmpl_prompt_text(c, pr, q, p, e);
        else if (kind == 1)
            rc = cmpl_prompt_text(c, json_array_get(pr, i), q, p, e);
        else if (kind == 2)
            rc = cmpl_prompt_ids(c, pr, p, e);
        else
            rc = cmpl_prompt_ids(c, json_array_get(pr, i), p, e);
        if (rc)
            return rc;
        if ((int64_t)p->n + q->max_tokens > c->api->n_ctx)
            return cmpl_fail(e, 400, "max_tokens", "context_length_exceeded",
                             "This model's maximum context length is %d tokens. However, you "
                             "requested %lld tokens (%d in the prompt, %lld for the "
                             "completion). Please reduce the prompt or max_tokens.",
                             (int)c->api->n_ctx, (long long)(p->n + q->max_tokens), (int)p->n,
                             (long long)q->max_tokens);
        c->prompt_tokens += p->n;
    }
    return 0;
}

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
    if (c->stream)
        a->metrics.active_streams--;
}

static void cmpl_release_handles(struct cmpl *c)
{
    for (int i = 0; i < c->n_prompts; i++)
        if (c->prompts[i].h) {
            sched_release(c->prompts[i].h);
            c->prompts[i].h = NULL;
        }
}

static void cmpl_free(struct cmpl *c)
{
    cmpl_release_handles(c);
    for (int i = 0; i < c->n_prompts; i++) {
        free(c->prompts[i].ids);
        free(c->prompts[i].echo);
        free(c->prompts[i].plp);
    }
    free(c->prompts);
    for (int i = 0; i < c->n_choices; i++) {
        buf_free(&c->choices[i].text);
        free(c->choices[i].lps);
    }
    free(c->choices);
    for (int i = 0; i < c->n_stop; i++)
        free(c->stop[i]);
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
    cmpl_release_handles(c); /* cancel: KV blocks are freed at the next step */
    cmpl_unlink(c);
    cmpl_resume(c);          /* let MHD see the closed socket and finish */
    api_check_drained(c->api);
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
void cmpl_detach(struct http_req *r)
{
    struct cmpl *c = r->cmpl;
    struct api *a = r->api;
    double now = api_now();
    r->cmpl = NULL;
    if (!c)
        return;
    if (!c->finished && !c->client_gone) {
        c->client_gone = 1;
        a->metrics.disconnects++;
    }
    const char *fin = c->client_gone ? "client_gone"
                      : c->failed    ? "error"
                      : c->n_choices ? (c->choices[0].finish ? c->choices[0].finish : "-")
                                     : "-";
    log_info("request id=%llu method=POST path=/v1/completions status=%d cmpl=%s "
             "prompt_tokens=%d completion_tokens=%d ttft_ms=%.1f total_ms=%.1f stream=%d n=%d "
             "prompts=%d finish=%s user=%s",
             (unsigned long long)r->id, r->status, c->id, c->prompt_tokens,
             c->completion_tokens, c->t_first > 0 ? (c->t_first - c->t_start) * 1e3 : -1.0,
             (now - c->t_start) * 1e3, c->stream, c->n, c->n_prompts, fin,
             c->user[0] ? c->user : "-");
    c->r = NULL;
    c->detached = 1;
    cmpl_release_handles(c);
    cmpl_unlink(c);
    if (c->poll_inited) {
        if (c->poll_active)
            uv_poll_stop(&c->gone_poll);
        c->poll_active = 0;
        uv_close((uv_handle_t *)&c->gone_poll, cmpl_poll_closed);
    } else {
        cmpl_free(c);
    }
    api_check_drained(a);
}

/* ---- output ---------------------------------------------------------- */

/* "bytes:\xNN..." for token text that is not valid UTF-8 on its own (OpenAI's
 * convention), so logprob token strings always make valid JSON. */
static int cmpl_token_str(struct api *a, int32_t id, struct buf *o)
{
    char tb[512];
    int n = tok_token_bytes(a->tok, id, 1, tb, sizeof(tb));
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof(tb))
        n = (int)sizeof(tb);
    if (buf_utf8_valid(tb, (size_t)n))
        return buf_json_str(o, tb, (size_t)n);
    char esc[sizeof(tb) * 4 + 8];
    size_t k = (size_t)snprintf(esc, sizeof(esc), "bytes:");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(esc + k, sizeof(esc) - k, "\\x%02x", (unsigned char)tb[i]);
    return buf_json_str(o, esc, k);
}

static int cmpl_lp_json(struct cmpl *c, const struct cmpl_lp *e, size_t n, struct buf *o)
{
    int rc = buf_puts(o, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            rc |= buf_puts(o, ",");
        rc |= cmpl_token_str(c->api, e[i].token, o);
    }
    rc |= buf_puts(o, "],\"token_logprobs\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            rc |= buf_puts(o, ",");
        if (e[i].has_lp && isfinite(e[i].lp))
            rc |= buf_printf(o, "%.6g", (double)e[i].lp);
        else if (e[i].has_lp)
            rc |= buf_puts(o, "-9999.0");
        else
            rc |= buf_puts(o, "null");
    }
    rc |= buf_puts(o, "],\"top_logprobs\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            rc |= buf_puts(o, ",");
        if (!e[i].has_lp) {
            rc |= buf_puts(o, "null");
            continue;
        }
        rc |= buf_puts(o, "{");
        if (e[i].n_top == 0) { /* logprobs 0: the chosen token only */
            rc |= cmpl_token_str(c->api, e[i].token, o);
            rc |= buf_printf(o, ":%.6g", isfinite(e[i].lp) ? (double)e[i].lp : -9999.0);
        }
        for (int32_t k = 0; k < e[i].n_top; k++) {
            if (k)
                rc |= buf_puts(o, ",");
            rc |= cmpl_token_str(c->api, e[i].top_ids[k], o);
            double lp = e[i].top_lps[k];
            rc |= buf_printf(o, ":%.6g", isfinite(lp) ? lp : -9999.0);
        }
        rc |= buf_puts(o, "}");
    }
    rc |= buf_puts(o, "],\"text_offset\":[");
    for (size_t i = 0; i < n; i++)
        rc |= buf_printf(o, "%s%" PRId64, i ? "," : "", e[i].offset);
    rc |= buf_puts(o, "]}");
    return rc;
}

static int cmpl_head(struct cmpl *c, struct buf *o)
{
    return buf_printf(o,
                      "{\"id\":\"%s\",\"object\":\"text_completion\",\"created\":%" PRId64
                      ",\"model\":",
                      c->id, c->created) |
           buf_json_str(o, c->api->cfg.model_id, strlen(c->api->cfg.model_id));
}

static int cmpl_usage(struct cmpl *c, struct buf *o)
{
    return buf_printf(o,
                      "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                      c->prompt_tokens, c->completion_tokens,
                      c->prompt_tokens + c->completion_tokens);
}

/* One SSE event for choice ch with what it has not sent yet. */
static int cmpl_sse_choice(struct cmpl *c, struct cmpl_choice *ch, int idx)
{
    struct buf *o = &c->out;
    struct cmpl_prompt *p = &c->prompts[ch->prompt];
    int echo_now = c->echo && !ch->started;
    size_t new_text = ch->safe > ch->sent ? ch->safe - ch->sent : 0;
    int finish_now = ch->done && !ch->reported;
    size_t new_lps = ch->n_lps > ch->lp_sent ? ch->n_lps - ch->lp_sent : 0;
    if (!echo_now && !new_text && !finish_now && !new_lps)
        return 0;
    int rc = buf_puts(o, "data: ");
    rc |= cmpl_head(c, o);
    rc |= buf_printf(o, ",\"choices\":[{\"index\":%d,\"text\":", idx);
    if (echo_now) {
        struct buf t = {0};
        rc |= buf_append(&t, p->echo, p->echo_len);
        if (new_text)
            rc |= buf_append(&t, ch->text.p + ch->sent, new_text);
        rc |= buf_json_str(o, t.p ? t.p : "", t.len);
        buf_free(&t);
    } else {
        rc |= buf_json_str(o, ch->text.p ? ch->text.p + ch->sent : "", new_text);
    }
    rc |= buf_puts(o, ",\"logprobs\":");
    if (c->logprobs >= 0) {
        if (echo_now && p->plp) {
            /* prompt entries then the new completion entries, one object */
            size_t tot = (size_t)p->n + new_lps;
            struct cmpl_lp *all = malloc(tot * sizeof(*all));
            if (!all)
                return INF_ENOMEM;
            memcpy(all, p->plp, (size_t)p->n * sizeof(*all));
            if (new_lps)
                memcpy(all + p->n, ch->lps + ch->lp_sent, new_lps * sizeof(*all));
            rc |= cmpl_lp_json(c, all, tot, o);
            free(all);
        } else {
            rc |= cmpl_lp_json(c, ch->lps + ch->lp_sent, new_lps, o);
        }
        ch->lp_sent = ch->n_lps;
    } else {
        rc |= buf_puts(o, "null");
    }
    rc |= buf_puts(o, ",\"finish_reason\":");
    if (finish_now) {
        rc |= buf_printf(o, "\"%s\"", ch->finish ? ch->finish : "stop");
        ch->reported = 1;
    } else {
        rc |= buf_puts(o, "null");
    }
    rc |= buf_puts(o, "}]");
    if (c->include_usage)
        rc |= buf_puts(o, ",\"usage\":null");
    rc |= buf_puts(o, "}\n\n");
    ch->started = 1;
    ch->sent += new_text;
    c->t_last_out = api_now();
    return rc;
}

static int cmpl_sse_error(struct cmpl *c)
{
    struct buf *o = &c->out;
    const char *type = c->fail_status == 400 ? "invalid_request_error" : "server_error";
    int rc = buf_puts(o, "data: {\"error\":{\"message\":");
    rc |= buf_json_str(o, c->fail_msg, strlen(c->fail_msg));
    rc |= buf_printf(o, ",\"type\":\"%s\",\"param\":null,\"code\":%d}}\n\n", type,
                     c->fail_status);
    rc |= buf_puts(o, "data: [DONE]\n\n");
    return rc;
}

static int cmpl_json_body(struct cmpl *c)
{
    struct buf *o = &c->out;
    buf_clear(o);
    int rc = cmpl_head(c, o);
    rc |= buf_puts(o, ",\"choices\":[");
    for (int i = 0; i < c->n_choices; i++) {
        struct cmpl_choice *ch = &c->choices[i];
        struct cmpl_prompt *p = &c->prompts[ch->prompt];
        if (i)
            rc |= buf_puts(o, ",");
        rc |= buf_printf(o, "{\"index\":%d,\"text\":", i);
        if (c->echo) {
            struct buf t = {0};
            rc |= buf_append(&t, p->echo, p->echo_len);
            rc |= buf_append(&t, ch->text.p, ch->text.len);
            rc |= buf_json_str(o, t.p ? t.p : "", t.len);
            buf_free(&t);
        } else {
            rc |= buf_json_str(o, ch->text.p ? ch->text.p : "", ch->text.len);
        }
        rc |= buf_puts(o, ",\"logprobs\":");
        if (c->logprobs >= 0) {
            if (c->echo && p->plp) {
                size_t tot = (size_t)p->n + ch->n_lps;
                struct cmpl_lp *all = malloc(tot * sizeof(*all));
                if (!all)
                    return INF_ENOMEM;
                memcpy(all, p->plp, (size_t)p->n * sizeof(*all));
                if (ch->n_lps)
                    memcpy(all + p->n, ch->lps, ch->n_lps * sizeof(*all));
                rc |= cmpl_lp_json(c, all, tot, o);
                free(all);
            } else {
                rc |= cmpl_lp_json(c, ch->lps, ch->n_lps, o);
            }
        } else {
            rc |= buf_puts(o, "null");
        }
        rc |= buf_printf(o, ",\"finish_reason\":\"%s\"}", ch->finish ? ch->finish : "stop");
    }
    rc |= buf_puts(o, "],\"usage\":");
    rc |= cmpl_usage(c, o);
    rc |= buf_puts(o, "}\n");
    return rc;
}

/* ---- events ---------------------------------------------------------- */

/* Apply the stop strings to the new text of ch and move ch->safe. */
static void cmpl_stop_check(struct cmpl *c, struct cmpl_choice *ch)
{
    size_t len = ch->text.len;
    if (c->n_stop == 0 || ch->done) {
        ch->safe = len;
        return;
    }
    const char *t = ch->text.p;
    size_t start = ch->safe; /* nothing before safe can begin a match */
    size_t best = SIZE_MAX;
    for (int i = 0; i < c->n_stop; i++) {
        if (len - start < c->stop_len[i])
            continue;
        const char *m = memmem(t + start, len - start, c->stop[i], c->stop_len[i]);
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
        struct cmpl_prompt *p = &c->prompts[ch->prompt];
        int64_t cut = (int64_t)(c->echo ? p->echo_len : 0) + (int64_t)best;
        while (ch->n_lps > ch->lp_sent && ch->lps[ch->n_lps - 1].offset >= cut)
            ch->n_lps--;
        if (p->h)
            sched_cancel_choice(p->h, ch->sub);
        return;
    }
    /* hold back the longest suffix that is a proper prefix of a stop string */
    size_t k = len > c->max_stop_len ? len - c->max_stop_len + 1 : 0;
    if (k < start)
        k = start;
    for (; k < len; k++) {
        size_t rem = len - k;
        int hold = 0;
        for (int i = 0; i < c->n_stop && !hold; i++)
            hold = rem < c->stop_len[i] && !memcmp(t + k, c->stop[i], rem);
        if (hold)
            break;
    }
    ch->safe = k;
}

static void cmpl_set_failed(struct cmpl *c, int status, const char *msg)
{
    if (c->failed)
        return;
    c->failed = 1;
    c->fail_status = status;
    snprintf(c->fail_msg, sizeof(c->fail_msg), "%s", msg);
}

static void cmpl_event(struct cmpl *c, int pi, const struct sched_event *ev, double now)
{
    struct api *a = c->api;
    struct cmpl_prompt *p = &c->prompts[pi];
    switch (ev->kind) {
    case SCHED_EV_ADMITTED:
        if (!p->admitted) {
            p->admitted = 1;
            metrics_observe(&a->metrics.queue_wait, now - c->t_submit);
        }
        return;
    case SCHED_EV_PROMPT:
        if (p->plp && ev->pos >= 0 && ev->pos < p->n) {
            struct cmpl_lp *e = &p->plp[ev->pos];
            e->has_lp = 1;
            e->lp = ev->logprob;
            e->n_top = ev->n_top < c->logprobs ? ev->n_top : c->logprobs;
            if (e->n_top < 0)
                e->n_top = 0;
            memcpy(e->top_ids, ev->top_ids, sizeof(e->top_ids));
            memcpy(e->top_lps, ev->top_lps, sizeof(e->top_lps));
        }
        return;
    case SCHED_EV_ERROR: {
        int st = (ev->error == INF_ENOMEM || ev->error == INF_EDEVICE ||
                  ev->error == INF_ESHUTDOWN)
                     ? 503
                     : 500;
        char msg[128];
        snprintf(msg, sizeof(msg), "the engine failed this request: %s",
                 inf_strerror(ev->error));
        cmpl_set_failed(c, st, msg);
        return;
    }
    default:
        break;
    }
    if (ev->choice < 0 || ev->choice >= c->n)
        return;
    struct cmpl_choice *ch = &c->choices[pi * c->n + ev->choice];
    if (ch->done)
        return; /* tokens queued before our cancel_choice took effect */
    char piece[512];
    if (ev->kind == SCHED_EV_TOKEN) {
        ch->n_tokens++;
        c->completion_tokens++;
        a->metrics.completion_tokens++;
        if (c->t_first == 0) {
            c->t_first = now;
            metrics_observe(&a->metrics.ttft, now - c->t_start);
        }
        if (ch->t_last > 0)
            metrics_observe(&a->metrics.itl, now - ch->t_last);
        ch->t_last = now;
        int64_t off = (int64_t)(c->echo ? p->echo_len : 0) + (int64_t)ch->text.len +
                      ch->ts.n_pending;
        int n = tok_stream_push(&ch->ts, ev->token, piece, sizeof(piece));
        if (n > 0)
            buf_append(&ch->text, piece, (size_t)n);
        if (c->logprobs >= 0) {
            if (ch->n_lps == ch->cap_lps) {
                size_t cap = ch->cap_lps ? ch->cap_lps * 2 : 16;
                struct cmpl_lp *l = realloc(ch->lps, cap * sizeof(*l));
                if (l) {
                    ch->lps = l;
                    ch->cap_lps = cap;
                }
            }
            if (ch->n_lps < ch->cap_lps) {
                struct cmpl_lp *e = &ch->lps[ch->n_lps++];
                e->token = ev->token;
                e->lp = ev->logprob;
                e->has_lp = 1;
                e->offset = off;
                e->n_top = ev->n_top < c->logprobs ? ev->n_top : c->logprobs;
                if (e->n_top < 0)
                    e->n_top = 0;
                memcpy(e->top_ids, ev->top_ids, sizeof(e->top_ids));
                memcpy(e->top_lps, ev->top_lps, sizeof(e->top_lps));
            }
        }
        cmpl_stop_check(c, ch);
    } else if (ev->kind == SCHED_EV_DONE) {
        int n = tok_stream_flush(&ch->ts, piece, sizeof(piece));
        if (n > 0)
            buf_append(&ch->text, piece, (size_t)n);
        cmpl_stop_check(c, ch);
        if (!ch->done) {
            if (ev->finish == SCHED_FINISH_CANCELED)
                cmpl_set_failed(c, 503, "the request was canceled (server shutting down)");
            ch->done = 1;
            ch->finish = ev->finish == SCHED_FINISH_LENGTH ? "length" : "stop";
        }
        ch->safe = ch->text.len;
    }
    /* one SSE event per token, as OpenAI streams (text held back for a
     * possible stop string goes out with a later event) */
    if (c->stream && !c->failed)
        cmpl_sse_choice(c, ch, (int)(ch - c->choices));
}

static int cmpl_all_done(const struct cmpl *c)
{
    for (int i = 0; i < c->n_choices; i++)
        if (!c->choices[i].done)
            return 0;
    return 1;
}

/* Everything is in: write the end, release the engine, wake the connection. */
static void cmpl_finish(struct cmpl *c, double now)
{
    struct api *a = c->api;
    if (c->finished)
        return;
    c->finished = 1;
    c->t_end = now;
    if (c->t_first > 0)
        metrics_observe(&a->metrics.e2e, now - c->t_start);
    if (c->stream) {
        if (c->failed) {
            cmpl_sse_error(c);
        } else {
            for (int i = 0; i < c->n_choices; i++)
                cmpl_sse_choice(c, &c->choices[i], i);
            if (c->include_usage) {
                buf_puts(&c->out, "data: ");
                cmpl_head(c, &c->out);
                buf_puts(&c->out, ",\"choices\":[],\"usage\":");
                cmpl_usage(c, &c->out);
                buf_puts(&c->out, "}\n\n");
            }
            buf_puts(&c->out, "data: [DONE]\n\n");
        }
    } else if (!c->failed) {
        if (cmpl_json_body(c))
            cmpl_set_failed(c, 500, "out of memory");
    }
    cmpl_release_handles(c);
    cmpl_unlink(c);
    cmpl_resume(c);
}

static void cmpl_process(struct cmpl *c, double now)
{
    struct sched_event ev[16];
    int got = 0;
    for (int pi = 0; pi < c->n_prompts; pi++) {
        struct cmpl_prompt *p = &c->prompts[pi];
        if (!p->h)
            continue;
        int n;
        while ((n = sched_poll(p->h, ev, 16)) > 0) {
            got = 1;
            for (int i = 0; i < n; i++)
                cmpl_event(c, pi, &ev[i], now);
        }
    }
    if (!got && !c->failed)
        return;
    if (c->failed || cmpl_all_done(c)) {
        cmpl_finish(c, now);
        return;
    }
    if (c->stream && c->out.len)
        cmpl_resume(c);
}

void cmpl_notify(void *ud)
{
    struct api *a = ud;
    uv_async_send(&a->wake); /* the only thing the engine thread does for us */
}

static void cmpl_prewarm_poll(struct api *a);

void cmpl_on_wake(struct api *a)
{
    double now = api_now();
    struct cmpl *c = a->cmpls;
    while (c) {
        struct cmpl *next = c->next; /* c may unlink itself */
        cmpl_process(c, now);
        c = next;
    }
    if (a->pw)
        cmpl_prewarm_poll(a);
}

void cmpl_tick(struct api *a, double now)
{
    for (struct cmpl *c = a->cmpls; c; c = c->next) {
        if (!c->stream || c->finished || c->client_gone || !c->r)
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
        cmpl_set_failed(c, 503, why);
        cmpl_finish(c, now);
        c = next;
    }
}

/* ---- the stream reader ------------------------------------------------ */

static ssize_t cmpl_reader(void *cls, uint64_t pos, char *out, size_t max)
{
    struct http_req *r = cls;
    struct cmpl *c = r->cmpl;
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

/* Everything cmpl_handle checks before it submits: the fields (q), the
 * prompts (tokenized into c->prompts), the choices, the echo offsets. On
 * error e is filled and q->bias / q->stop_ids may still need freeing. Also
 * api_parse_completion_request's body: the fuzz target runs this code. */
static int cmpl_validate(struct cmpl *c, json_t *body, struct cmpl_req *q, struct cmpl_err *e)
{
    struct api *a = c->api;
    int rc = cmpl_parse(c, body, q, e);
    if (!rc) {
        c->stream = q->stream;
        c->include_usage = q->include_usage;
        c->echo = q->echo;
        c->n = (int32_t)q->n;
        c->logprobs = (int32_t)q->logprobs;
        c->max_tokens = (int32_t)q->max_tokens;
        rc = cmpl_prompts(c, body, q, e);
    }
    if (!rc) {
        c->n_choices = c->n_prompts * c->n;
        c->choices = calloc((size_t)c->n_choices, sizeof(*c->choices));
        if (!c->choices)
            rc = cmpl_fail(e, 500, NULL, NULL, "out of memory");
    }
    if (!rc && c->echo && c->logprobs >= 0)
        for (int i = 0; i < c->n_prompts && !rc; i++) {
            struct cmpl_prompt *p = &c->prompts[i];
            p->plp = calloc((size_t)p->n, sizeof(*p->plp));
            if (!p->plp) {
                rc = cmpl_fail(e, 500, NULL, NULL, "out of memory");
                break;
            }
            /* offsets of the prompt tokens in the echoed text */
            int64_t off = 0;
            for (int32_t k = 0; k < p->n; k++) {
                char tb[512];
                p->plp[k].token = p->ids[k];
                p->plp[k].offset = off < (int64_t)p->echo_len ? off : (int64_t)p->echo_len;
                int nb = tok_token_bytes(a->tok, p->ids[k], 0, tb, sizeof(tb));
                if (nb > 0)
                    off += nb;
            }
            if (p->n > 0 && tok_kind(a->tok) == TOK_KIND_SPM)
                for (int32_t k = 0; k < p->n; k++) /* the SPM space prefix is not echoed */
                    if (p->plp[k].offset > 0)
                        p->plp[k].offset--;
        }
    return rc;
}

static enum MHD_Result cmpl_reject(struct http_req *r, struct cmpl *c, struct cmpl_err *e)
{
    r->cmpl = NULL;
    cmpl_free(c);
    return http_respond_error(r, e->status, NULL, e->param, e->code, "%s", e->msg);
}

enum MHD_Result cmpl_handle(struct http_req *r, json_t *body)
{
    struct api *a = r->api;
    struct cmpl_err e = {0};
    struct cmpl_req q;
    struct cmpl *c = calloc(1, sizeof(*c));
    if (!c)
        return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    c->api = a;
    c->r = r;
    c->t_start = r->t_start;
    c->created = (int64_t)time(NULL);
    snprintf(c->id, sizeof(c->id), "cmpl-%016" PRIx64 "%04x", api_rand(a),
             (unsigned)(r->id & 0xffff));

    int rc = cmpl_validate(c, body, &q, &e);
    if (rc) {
        free(q.bias);
        free(q.stop_ids);
        return cmpl_reject(r, c, &e);
    }
    for (int i = 0; i < c->n_choices; i++) {
        struct cmpl_choice *ch = &c->choices[i];
        ch->prompt = i / c->n;
        ch->sub = i % c->n;
        tok_stream_init(&ch->ts, a->tok, 0);
    }

    /* submit one scheduler request per prompt */
    uint64_t seed = q.has_seed ? (uint64_t)q.seed : api_rand(a);
    c->t_submit = api_now();
    for (int i = 0; i < c->n_prompts && !rc; i++) {
        struct cmpl_prompt *p = &c->prompts[i];
        struct sched_request sr;
        memset(&sr, 0, sizeof(sr));
        sr.prompt = p->ids;
        sr.n_prompt = p->n;
        sr.n_choices = c->n;
        sr.max_tokens = c->max_tokens;
        sr.min_tokens = (int32_t)q.min_tokens;
        sr.ignore_eos = q.ignore_eos;
        sr.stop_ids = q.stop_ids;
        sr.n_stop_ids = q.n_stop_ids;
        sample_params_default(&sr.sampling);
        sr.sampling.temperature = (float)q.temperature;
        sr.sampling.top_k = (int32_t)q.top_k;
        sr.sampling.top_p = (float)q.top_p;
        sr.sampling.min_p = (float)q.min_p;
        sr.sampling.presence_penalty = (float)q.presence;
        sr.sampling.frequency_penalty = (float)q.frequency;
        sr.sampling.repetition_penalty = (float)q.repetition;
        sr.sampling.seed = seed;
        sr.sampling.bias = q.bias;
        sr.sampling.n_bias = q.n_bias;
        sr.logprobs = c->logprobs;
        sr.prompt_logprobs = c->echo && c->logprobs >= 0;
        struct inf_error se = {0};
        int src = sched_submit(a->sched, &sr, cmpl_notify, a, &p->h, &se);
        if (src == INF_EFULL)
            rc = cmpl_fail(&e, 429, NULL, "rate_limit_exceeded",
                           "the request queue is full; retry after %d s",
                           a->cfg.retry_after_s);
        else if (src == INF_ERANGE)
            rc = cmpl_fail(&e, 400, "max_tokens", "context_length_exceeded", "%s",
                           se.msg[0] ? se.msg : "the request can never fit in the KV cache");
        else if (src == INF_EINVAL)
            rc = cmpl_fail(&e, 400, NULL, NULL, "%s", se.msg[0] ? se.msg : "invalid request");
        else if (src == INF_ESHUTDOWN)
            rc = cmpl_fail(&e, 503, NULL, "shutting_down", "the server is shutting down");
        else if (src)
            rc = cmpl_fail(&e, 500, NULL, NULL, "submit failed: %s", inf_strerror(src));
        if (src)
            p->h = NULL;
    }
    free(q.bias);
    free(q.stop_ids);
    if (rc)
        return cmpl_reject(r, c, &e); /* releases what was submitted */

    a->metrics.prompt_tokens += (uint64_t)c->prompt_tokens;
    c->next = a->cmpls;
    if (a->cmpls)
        a->cmpls->prev = c;
    a->cmpls = c;
    c->linked = 1;
    a->n_cmpls++;
    r->cmpl = c;
    c->t_last_out = api_now();
    snprintf(r->log_extra, sizeof(r->log_extra), " cmpl=%s", c->id);

    if (!c->stream) {
        cmpl_wait(c);
        return MHD_YES;
    }
    a->metrics.active_streams++;
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

enum MHD_Result cmpl_continue(struct http_req *r)
{
    struct cmpl *c = r->cmpl;
    if (c->client_gone)
        return MHD_NO; /* close the connection */
    if (c->failed)
        return http_respond_error(r, c->fail_status, NULL, NULL, NULL, "%s", c->fail_msg);
    if (c->finished)
        return http_respond(r, 200, "application/json", c->out.p, c->out.len);
    cmpl_wait(c); /* spurious wake-up */
    return MHD_YES;
}

/* ---- prewarm ---------------------------------------------------------- */

static void cmpl_prewarm_poll(struct api *a)
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

/* The longest token text (special tokens rendered): a prompt of L bytes
 * has at least L / this many tokens. */
static int32_t cmpl_max_token_bytes(const struct tok *t, int32_t n_vocab)
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

void api_set_engine(struct api *a, struct model *m, struct sched *s, int32_t n_ctx)
{
    a->model = m;
    a->sched = s;
    a->tok = model_tok(m);
    a->n_ctx = n_ctx;
    a->n_vocab = tok_n_vocab(a->tok);
    a->max_token_bytes = cmpl_max_token_bytes(a->tok, a->n_vocab);
}

/* ---- the validation as a pure function (api/request.h) --------------- */

struct api_request_ctx {
    struct api api; /* only cfg, tok, n_vocab, n_ctx, max_token_bytes are set */
};

int api_request_ctx_new(const struct api_config *cfg, const struct tok *tok, int32_t n_ctx,
                        struct api_request_ctx **out)
{
    *out = NULL;
    struct api_request_ctx *x = calloc(1, sizeof(*x));
    if (!x)
        return INF_ENOMEM;
    x->api.cfg = *cfg;
    x->api.tok = tok;
    x->api.n_ctx = n_ctx;
    x->api.n_vocab = tok_n_vocab(tok);
    x->api.max_token_bytes = cmpl_max_token_bytes(tok, x->api.n_vocab);
    x->api.state = API_READY;
    *out = x;
    return 0;
}

void api_request_ctx_free(struct api_request_ctx *ctx)
{
    free(ctx);
}

int api_parse_completion_request(struct api_request_ctx *ctx, const char *body, size_t len,
                                 struct api_request_result *out)
{
    memset(out, 0, sizeof(*out));
    json_t *j;
    if (api_json_parse_object(body, len, &j, out->message, sizeof(out->message))) {
        out->status = 400; /* what routes_parse_body answers */
        return 0;
    }
    struct cmpl *c = calloc(1, sizeof(*c));
    if (!c) {
        json_decref(j);
        return INF_ENOMEM;
    }
    c->api = &ctx->api;
    struct cmpl_err e = {0};
    struct cmpl_req q;
    int rc = cmpl_validate(c, j, &q, &e);
    free(q.bias);
    free(q.stop_ids);
    json_decref(j);
    if (rc) {
        out->status = e.status;
        snprintf(out->param, sizeof(out->param), "%s", e.param ? e.param : "");
        snprintf(out->code, sizeof(out->code), "%s", e.code ? e.code : "");
        snprintf(out->message, sizeof(out->message), "%s", e.msg);
    } else {
        out->n_prompts = c->n_prompts;
        out->n_choices = c->n_choices;
        out->prompt_tokens = c->prompt_tokens;
        out->max_tokens = c->max_tokens;
        out->stream = c->stream;
        out->echo = c->echo;
        out->logprobs = c->logprobs;
        out->n_stop = c->n_stop;
    }
    cmpl_free(c);
    return 0;
}
