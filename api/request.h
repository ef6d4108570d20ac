/* request — validation of POST /v1/completions and /v1/chat/completions
 * bodies as a pure function: JSON in, a validated request (prompt token ids,
 * sampling, stop strings, ...) or an error naming the field out. No daemon,
 * no socket, no scheduler: what it reads is an immutable context (limits,
 * tokenizer, context length, chat template).
 *
 * api_req_parse_completion / api_req_parse_chat are exactly what the live
 * endpoints run before they submit (api/completions.c), including prompt
 * tokenization and the context-length checks, so the status / error.param /
 * message are the ones a client gets. The string wrappers
 * api_parse_completion_request / api_parse_chat_request add the JSON parse
 * (as the router does) and exist for the fuzz target and the unit tests.
 *
 * The body-size limit (413) is the HTTP layer's and is not applied here.
 * Thread: any; a context is immutable once built and may be read by several
 * threads at once (the tokenizer is only read).
 */
#ifndef INFERD_API_REQUEST_H
#define INFERD_API_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api/api.h"
#include "engine/sample.h"

struct api_tools;
struct jsonc;
struct tok;
struct api_request_ctx;

#define API_REQ_MAX_STOP 64

enum api_req_kind { API_REQ_COMPLETION = 1, API_REQ_CHAT = 2 };

/* One prompt, tokenized. echo: its text (completions with echo only). */
struct api_req_prompt {
    int32_t *ids;
    int32_t n;
    char *echo;
    size_t echo_len;
};

/* A validated request; owns its arrays (api_req_release frees them). */
struct api_req {
    int kind;
    int32_t max_tokens, n, min_tokens;
    int32_t logprobs; /* -1: none; else top alternatives per token (0..max_logprobs) */
    int32_t top_k;
    uint64_t seed;
    int has_seed;
    double temperature, top_p, min_p, presence, frequency, repetition;
    int echo, stream, include_usage, ignore_eos;
    struct sample_bias *bias;
    int32_t n_bias;
    int32_t *stop_ids; /* stop_token_ids, plus the template's end-of-turn for chat */
    int32_t n_stop_ids;
    int n_stop;
    char *stop[API_REQ_MAX_STOP];
    size_t stop_len[API_REQ_MAX_STOP];
    size_t max_stop_len;
    char user[64]; /* sanitized for the log line */
    int n_prompts;
    struct api_req_prompt *prompts;
    int32_t prompt_tokens; /* over all prompts */
    struct jsonc *json;    /* response_format's or a forced tool call's constraint, or NULL */
    struct api_tools *tools; /* chat tools (api/tools.h), or NULL */
    int think;               /* chat on a template with reasoning turns: the answer's
                                <think> block is message.reasoning_content (api/think.h);
                                2: the prompt opened the block */
};

/* Why a request is refused: the HTTP status and OpenAI error fields. */
struct api_req_error {
    int status;        /* 400, 404, 500 */
    char param[64];    /* "" for null */
    char code[48];     /* "" for null */
    char message[320];
};

/* A validation context: the limits of cfg (copied), tok (borrowed: it must
 * outlive the context), n_ctx (the context a sequence may use) and the chat
 * template: cfg->chat_template names a family, or "" / "auto" to recognise
 * tmpl[0..tmpl_len) (the GGUF's tokenizer.chat_template; NULL when absent).
 * A template that cannot be used is not an error here: chat requests then
 * get a 400 that says why (api_request_ctx_chat says it for the log).
 * INF_EINVAL for a cfg->chat_template that names no family. */
int api_request_ctx_new(const struct api_config *cfg, const struct tok *tok, int32_t n_ctx,
                        const char *tmpl, size_t tmpl_len, struct api_request_ctx **out);
void api_request_ctx_free(struct api_request_ctx *ctx); /* accepts NULL */
/* Replace the limits (SIGHUP); not while another thread parses with ctx. */
void api_request_ctx_set_limits(struct api_request_ctx *ctx, const struct api_config *cfg);
/* The chat family in use (chat_template_name: "none" when chat is
 * unavailable) and a sentence for the log saying where it came from or why
 * there is none. */
const char *api_request_ctx_chat(const struct api_request_ctx *ctx, const char **why);

/* Validate a parsed body. 0: out is filled (release it); -1: err is filled
 * and out holds nothing. */
int api_req_parse_completion(const struct api_request_ctx *ctx, json_t *body,
                             struct api_req *out, struct api_req_error *err);
int api_req_parse_chat(const struct api_request_ctx *ctx, json_t *body, struct api_req *out,
                       struct api_req_error *err);
void api_req_release(struct api_req *r);
/* A request naming model id against the served model: 0 when they are
 * the same; else -1 with err the 404 model_not_found (what a completion
 * naming another model gets, and GET /v1/models/{id}). */
int api_req_model_id(const char *id, const char *served, struct api_req_error *err);

/* POST /apply-template: the prompt body's messages render to (with
 * add_generation_prompt, default true) and its tokens, exactly as
 * api_req_parse_chat would submit them. 0: *text (malloc'd, NUL-terminated,
 * *text_len bytes) and *ids (malloc'd, *n_ids) are set; -1: err is filled. */
int api_req_apply_template(const struct api_request_ctx *ctx, json_t *body, char **text,
                           size_t *text_len, int32_t **ids, int32_t *n_ids,
                           struct api_req_error *err);

/* Parse n bytes as one JSON object (what every POST body must be); on error
 * msg gets the 400 message and INF_EINVAL is returned. */
int api_json_parse_object(const char *p, size_t n, json_t **out, char *msg, size_t cap);

/* What a body would get, for the fuzz target and tests. status 0: valid. */
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

/* Validate len bytes of body (not NUL-terminated). Returns 0 when out was
 * filled (valid or not: see out->status), INF_ENOMEM when out of memory. */
int api_parse_completion_request(struct api_request_ctx *ctx, const char *body, size_t len,
                                 struct api_request_result *out);
int api_parse_chat_request(struct api_request_ctx *ctx, const char *body, size_t len,
                           struct api_request_result *out);

/* Drop special tokens (they decode to nothing); returns the new count. */
size_t api_req_drop_special(const struct tok *t, int32_t *ids, size_t n);

#endif
