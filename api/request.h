/* request — the validation of a POST /v1/completions body as a pure
 * function: no daemon, no socket, no scheduler.
 *
 * api_parse_completion_request runs exactly the code the live endpoint runs
 * before it submits to the scheduler (api/completions.c: JSON parse, every
 * field's type and range, stop strings, logit_bias, prompts tokenized and
 * checked against the context), and reports the same status / error.param /
 * message the client would get. It exists for the request-parser fuzz target
 * (tests/fuzz/fuzz_request.c) and for unit tests.
 *
 * The body-size limit (413) is the HTTP layer's and is not applied here.
 * Thread: any; a context is used by one thread at a time; the tokenizer is
 * only read.
 */
#ifndef INFERD_API_REQUEST_H
#define INFERD_API_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"

struct tok;
struct api_request_ctx;

/* What the request would get. status 0: valid (it would be submitted). */
struct api_request_result {
    int status;        /* 0, or the HTTP status of the error (400, 404, 500) */
    char param[64];    /* error.param; "" for null */
    char code[48];     /* error.code; "" for null */
    char message[320]; /* error.message */
    /* valid requests only */
    int n_prompts;
    int n_choices;     /* n_prompts * n */
    int32_t prompt_tokens;
    int32_t max_tokens;
    int stream, echo, logprobs; /* logprobs -1 = null */
    int n_stop;
};

/* A validation context: the limits of cfg (copied), tok (borrowed: it must
 * outlive the context) and n_ctx, the context a sequence may use. */
int api_request_ctx_new(const struct api_config *cfg, const struct tok *tok, int32_t n_ctx,
                        struct api_request_ctx **out);
void api_request_ctx_free(struct api_request_ctx *ctx); /* accepts NULL */

/* Validate len bytes of body (not NUL-terminated). Returns 0 when out was
 * filled (valid or not: see out->status), INF_ENOMEM when out of memory. */
int api_parse_completion_request(struct api_request_ctx *ctx, const char *body, size_t len,
                                 struct api_request_result *out);

#endif
