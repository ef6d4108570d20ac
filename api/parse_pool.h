/* parse_pool — JSON parsing, validation and answering of POST bodies
 * (/v1/completions, /v1/chat/completions, /tokenize, /detokenize,
 * /apply-template) off the loop thread.
 *
 * A body of several megabytes (a 1.3M-entry token array, a 200k-entry
 * logit_bias, a long prompt) costs 25-160 ms to parse, validate and
 * tokenize; four of them at once stalled every stream for seconds when the
 * loop did it. Now routes_dispatch hands every POST body of
 * PARSE_POOL_MIN_BYTES or more to a worker (the loop only moves its bytes;
 * the connection stays suspended meanwhile); the worker runs
 * routes_verdict (api/routes.c: the JSON parse, the endpoint's validation
 * with the api's request context, and for the small endpoints their whole
 * answer), and the loop gets back the error to send, the validated
 * request (which cmpl_start submits) or the 200 body to send. The JSON
 * tree is freed by the worker too (a million-node tree takes tens of
 * milliseconds).
 *
 * Hooks (the only places that know of the pool): routes_dispatch calls
 * parse_pool_submit and answers inline when it declines; the request's ops
 * (http_req_ops) bring the verdict back when MHD calls again; api_reconfigure
 * replaces the context's limits through parse_pool_set_limits (the workers
 * read the context meanwhile); api_free calls parse_pool_free first.
 * Workers run at nice PARSE_POOL_NICE: a flood of big bodies must not take
 * the CPU from token generation.
 * Thread: every function here on the loop thread.
 */
#ifndef INFERD_API_PARSE_POOL_H
#define INFERD_API_PARSE_POOL_H

struct api;
struct api_config;
struct http_req;
struct parse_pool;

#define PARSE_POOL_THREADS 2
/* Smaller bodies stay on the loop: their parse, validation and tokenization
 * take well under a millisecond, less than the hand-off to a thread at
 * nice 10 on a busy machine would add to their latency. */
#define PARSE_POOL_MIN_BYTES 16384
#define PARSE_POOL_NICE 10 /* the workers' nice value (engine and loop keep theirs) */

/* Hand r's body to a worker (creating the pool on first use): 0 when taken
 * (r is suspended and referenced until its verdict is answered), else
 * nonzero and the caller handles the request inline. */
int parse_pool_submit(struct api *a, struct http_req *r);

/* api_request_ctx_set_limits(a->rctx, &a->cfg) while no worker reads it. */
void parse_pool_set_limits(struct api *a);

/* Stop the workers; requests still waiting are answered 503 (the next MHD
 * run sends it). The pool's handle closes later. */
void parse_pool_free(struct api *a);

#endif
