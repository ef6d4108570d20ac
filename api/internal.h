/* internal — what the api/ modules share: the api object, one HTTP
 * connection and request, and the calls between the modules.
 *
 * Dependencies point one way (a module calls only those below it):
 *   api.c (the api object's lifecycle: api.h)
 *     -> routes.c (route table, small endpoints)
 *       -> completions.c (/v1/completions, /v1/chat/completions: a gen
 *          tied to a connection)
 *         -> request.c (validation; chat: messages.c, chat_template.c)
 *            gen.c (generation) format.c (output)
 *     -> http.c (the MHD adapter: connections, framing, auth, responses)
 *       -> buf.c metrics.c
 * http.c reaches the layers above only through what they registered: the
 * api's route_find / dispatch / request_done hooks (set by api.c) and a
 * request's ops (set by the endpoint that took it over).
 *
 * Ownership: MHD owns connections; a struct http_conn shadows each one (for
 * the per-IP cap and the read deadline) from NOTIFY_CONNECTION STARTED to
 * CLOSED. A struct http_req lives from the first access-handler call to
 * NOTIFY_COMPLETED and, for a streamed body, until MHD frees the response
 * (a reference count of 2 then). A struct cmpl (completions.c) is owned by
 * its http_req and outlives it only until its libuv handle has closed.
 * Thread: all of it runs on the loop thread.
 */
#ifndef INFERD_API_INTERNAL_H
#define INFERD_API_INTERNAL_H

#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include <jansson.h>
#include <microhttpd.h>
#include <uv.h>

#include "api/api.h"
#include "api/body_cache.h"
#include "api/buf.h"
#include "api/metrics.h"
#include "api/proxy.h"
#include "api/request.h"
#include "engine/err.h"

struct tok;
struct cmpl;
struct sched_handle;
struct api_request_ctx;
struct http_req;

enum api_state { API_LOADING = 0, API_READY, API_DRAINING, API_STOPPED };

enum http_route {
    ROUTE_NONE = 0,
    ROUTE_HEALTH,
    ROUTE_MODELS,
    ROUTE_METRICS,
    ROUTE_COMPLETIONS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_CHAT,
    ROUTE_APPLY_TEMPLATE,
    ROUTE_MODEL, /* GET /v1/models/{id}: OpenAI's models.retrieve */
};

enum http_phase { HTTP_PHASE_BODY = 1, HTTP_PHASE_DISPATCHED, HTTP_PHASE_RESPONDED };

struct http_conn {
    struct http_conn *prev, *next;
    struct api *api;
    struct MHD_Connection *mc;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int reading;        /* 1 while a request is being received */
    double phase_start; /* when the current read phase began (monotonic s) */
    char *raw_url;      /* raw request target of the request being read */
    /* the client a trusted proxy reported for the request in progress
     * (per-client limit; forwarded 0: none, the peer is the client) */
    struct sockaddr_storage client;
    int forwarded;
};

/* What an endpoint that keeps a request past dispatch (suspends it) gives
 * http.c: resumed(r) when MHD calls again for it, detach(r) once the
 * request is over (response sent, or the connection died). */
struct http_req_ops {
    enum MHD_Result (*resumed)(struct http_req *r);
    void (*detach)(struct http_req *r);
};

struct http_req {
    struct api *api;
    struct MHD_Connection *conn;
    struct http_conn *hc;
    int refs;
    uint64_t id;
    char *raw_url;
    char path[256];
    char method[16];
    int route;
    int phase;
    int has_body;
    struct buf body;
    int64_t body_limit;
    int too_big;
    size_t discarded;
    int status;        /* queued status, for the log and /metrics */
    int suspended;
    double t_start;
    const struct http_req_ops *ops; /* NULL: nothing holds the request */
    void *ctx;                      /* the endpoint's state (ops's) */
    char log_extra[192]; /* route-specific key=value pairs for the request log */
    char client[64];     /* client address for logs: X-Forwarded-For from a trusted proxy, else the peer */
};

struct agent_conn; /* api/agent.c */

struct api {
    uv_loop_t *loop;
    struct api_config cfg;
    struct proxy_list proxies; /* cfg.trusted_proxies, parsed */
    struct MHD_Daemon *mhd;
    int port;
    uv_poll_t mhd_poll;
    uv_timer_t mhd_timer;
    uv_timer_t tick;
    uv_async_t wake;
    uv_tcp_t agent;  /* cfg.agent_port's listener (api/agent.c), when agent_open */
    int agent_open;
    struct agent_conn *agent_conns; /* its open connections */
    int n_agent_conns;
    int handles_open;
    int in_mhd_run;
    int state;

    /* set by api.c, called by http.c */
    int (*route_find)(const char *path, const char *method, int *route, const char **allow);
    enum MHD_Result (*dispatch)(struct http_req *r);
    void (*request_done)(struct api *a); /* a request ended (drain check) */

    struct model *model;
    struct sched *sched;
    const struct tok *tok;
    int32_t n_vocab;
    int32_t n_ctx;
    struct api_request_ctx *rctx; /* validation context (limits, tokenizer) */

    struct http_conn *conns;
    int n_conns;
    struct body_cache bodies; /* large bodies' buffers, for reuse (body_cache.h) */
    int n_reqs;
    struct cmpl *cmpls; /* completions in flight */
    struct parse_pool *pool; /* created on the first completion (api/parse_pool.h) */
    int n_cmpls;

    struct metrics metrics;
    int engine_stalled; /* the tick saw api_engine_stall > 0 (logged once) */
    int device_err;     /* sched_device_error once seen (sticky; api_check_device) */
    void (*on_fatal)(void *ud, int code);
    void *fatal_ud;
    uint64_t req_seq;
    uint64_t rng;

    /* prewarm */
    struct sched_handle *pw;
    void (*pw_done)(void *ud, int rc);
    void *pw_ud;
    /* shutdown */
    double drain_deadline;
    int canceled_all;
    void (*sd_done)(void *ud);
    void *sd_ud;
};

/* Monotonic seconds. */
static inline double api_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Next 64-bit random number (xorshift64*: request ids and default seeds, not
 * cryptography; a->rng is seeded from getrandom and never 0). */
static inline uint64_t api_rand(struct api *a)
{
    uint64_t x = a->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    a->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* ---- api.c ---- */

/* How long the engine loop has not run (seconds) when that is more than
 * cfg.engine_stall_s while serving; else 0. */
double api_engine_stall(const struct api *a, double now);

/* ---- agent.c: the balancer's agent-check port ---- */

/* This daemon's weight for the balancer, 0..100 percent (agent.c). */
int api_agent_weight(const struct api *a, double now);
/* Close every open agent connection (api_free). */
void api_agent_close_all(struct api *a);

/* ---- http.c: the MHD adapter ---- */

/* Bind (a->cfg host/port) and start MHD on a->loop: the poll handle and
 * the timer are initialized (2 of a's handles). err names the failure. */
int http_start(struct api *a, struct inf_error *err);
/* host (an IPv4 or IPv6 literal, or "localhost") and port as a socket
 * address; v6 says which. INF_EINVAL for another host string. */
int http_sockaddr(const char *host, int port, struct sockaddr_storage *ss, int *v6);
/* Stop MHD (every connection must have been resumed). */
void http_stop(struct api *a);
/* Run MHD now and re-arm its timer (no-op when called from inside MHD). */
void http_run(struct api *a);
/* The read deadline (slow clients), once a second. */
void http_tick(struct api *a, double now);
/* New limits (idle timeout) on the open connections. */
void http_reconfigure(struct api *a);

/* Responses. Each queues on r->conn and records r->status. */
enum MHD_Result http_respond(struct http_req *r, int status, const char *ctype, const void *data,
                             size_t len);
/* The same with b's bytes handed over (no copy); b is left empty. b must
 * come from malloc (buf.c's allocations do). */
enum MHD_Result http_respond_buf(struct http_req *r, int status, const char *ctype, struct buf *b);
enum MHD_Result http_respond_json(struct http_req *r, int status, json_t *body); /* steals body */
/* OpenAI error object; param/code may be NULL. */
enum MHD_Result http_respond_error(struct http_req *r, int status, const char *type,
                                   const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The same for a refusal the request module filled ("" fields are null). */
enum MHD_Result http_respond_req_error(struct http_req *r, const struct api_req_error *e);
void http_suspend(struct http_req *r);
void http_resume(struct http_req *r);
void http_req_unref(struct http_req *r);
/* Normalize a raw request target into out: percent-decoding, '//' and '.'
 * and '..' segments resolved (never above '/'), query dropped. INF_EINVAL for
 * a NUL or bad escape, INF_ETOOBIG when it does not fit. */
int http_normalize_path(const char *raw, char *out, size_t cap);

/* ---- routes.c ---- */
int routes_find(const char *path, const char *method, int *route, const char **allow);
enum MHD_Result routes_dispatch(struct http_req *r);

/* The verdict on a POST body: the validated request (completions, chat),
 * or the whole 200 body (tokenize, detokenize, apply-template), or the
 * error to send. */
struct api_verdict {
    int ok;                   /* 1: q or out is the answer; 0: err is */
    struct api_req q;         /* completions, chat */
    struct buf out;           /* tokenize, detokenize, apply-template */
    struct api_req_error err;
};
/* Judge a parsed body (a JSON object) for route; body stays the caller's.
 * Any thread: it reads a->tok, a->n_ctx, a->n_vocab (fixed once the engine
 * is set) and a->rctx (off the loop, under the parse pool's context lock).
 * v is always filled. */
void routes_judge(const struct api *a, int route, json_t *body, struct api_verdict *v);
void routes_verdict_release(struct api_verdict *v); /* any thread */
/* Send v on r (loop thread); releases v (q is taken over by cmpl_start). */
enum MHD_Result routes_answer(struct http_req *r, struct api_verdict *v);

/* ---- completions.c ---- */
/* Submit a request validated already (routes_verdict, inline or on the
 * parse pool); takes *q over (it is zeroed). */
enum MHD_Result cmpl_start(struct http_req *r, struct api_req *q);
void cmpl_on_wake(struct api *a);
void cmpl_tick(struct api *a, double now);
void cmpl_cancel_all(struct api *a, const char *why);
void cmpl_notify(void *ud); /* sched notify callback (engine thread) */

#endif
