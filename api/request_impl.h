/* request_impl — what request.c and request_chat.c share; not for other
 * modules (their interface is api/request.h).
 * Thread: any (a context is only read).
 */
#ifndef INFERD_API_REQUEST_IMPL_H
#define INFERD_API_REQUEST_IMPL_H

#include <jansson.h>

#include "api/chat_template.h"
#include "api/request.h"

struct api_request_ctx {
    struct api_config cfg;
    const struct tok *tok;
    int32_t n_vocab;
    int32_t n_ctx;
    int32_t max_token_bytes; /* longest token text: bounds tokens per prompt byte */
    struct chat_template chat; /* family CHAT_TEMPLATE_NONE: chat refused */
    int32_t eot;               /* the template's end-of-turn token, or -1 */
    char chat_why[200];        /* where the family came from / why there is none */
};

/* Fill e (message from fmt) and return -1. */
int req_fail(struct api_req_error *e, int status, const char *param, const char *code,
             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define REQ_OOM(e) req_fail(e, 500, NULL, NULL, "out of memory")

/* Optional fields: absent or null keeps *out; a wrong type or range fails. */
int req_int(json_t *o, const char *k, int64_t lo, int64_t hi, int32_t *out,
            struct api_req_error *e);
int req_bool(json_t *o, const char *k, int *out, struct api_req_error *e);

void req_defaults(const struct api_request_ctx *x, struct api_req *q, int kind);
/* "model" must name the served model (404 otherwise). */
int req_model(const struct api_request_ctx *x, json_t *b, struct api_req_error *e);
/* The fields both endpoints share (request.c has the order); parse_lp reads
 * the endpoint's logprobs fields; extra_stop_ids slots are left free after
 * stop_token_ids. */
int req_common(const struct api_request_ctx *x, json_t *b, struct api_req *q,
               int (*parse_lp)(const struct api_request_ctx *, json_t *, struct api_req *,
                               struct api_req_error *),
               size_t extra_stop_ids, struct api_req_error *e);
/* A prompt of len bytes that cannot fit whatever it says (param names it). */
int req_too_long(const struct api_request_ctx *x, size_t len, const char *param,
                 struct api_req_error *e);
/* prompt + max_tokens must fit the context. */
int req_fits(const struct api_request_ctx *x, const struct api_req *q,
             const struct api_req_prompt *p, struct api_req_error *e);

/* request_chat.c: the chat family of a new context (config or GGUF
 * template). INF_EINVAL for a config name that is no family. */
int req_chat_setup(struct api_request_ctx *x, const char *tmpl, size_t len);

#endif
