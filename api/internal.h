/* internal — what the api/ files share: the api object, one HTTP request,
 * and the functions http.c, routes.c and completions.c call in each other.
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

#include <jansson.h>
#include <microhttpd.h>
#include <uv.h>

#include "api/api.h"
#include "api/buf.h"
#include "api/metrics.h"
#include "engine/err.h"

struct tok;
struct cmpl;
struct sched_handle;

enum api_state { API_LOADING = 0, API_READY, API_DRAINING, API_STOPPED };

enum http_route {
    ROUTE_NONE = 0,
    ROUTE_HEALTH,
    ROUTE_MODELS,
    ROUTE_METRICS,
    ROUTE_COMPLETIONS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
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
    struct cmpl *cmpl; /* ROUTE_COMPLETIONS once dispatched */
    char log_extra[192]; /* route-specific key=value pairs for the request log */
};

struct api {
    uv_loop_t *loop;
    struct api_config cfg;
    struct MHD_Daemon *mhd;
    int port;
    uv_poll_t mhd_poll;
    uv_timer_t mhd_timer;
    uv_timer_t tick;
    uv_async_t wake;
    int handles_open;
    int in_mhd_run;
    int state;

    struct model *model;
    struct sched *sched;
    const struct tok *tok;
    int32_t n_vocab;
    int32_t n_ctx;
    int32_t max_token_bytes; /* longest token text: bounds tokens per prompt byte */

    struct http_conn *conns;
    int n_conns;
    int n_reqs;
    struct cmpl *cmpls; /* completions in flight */
    int n_cmpls;

    struct metrics metrics;
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
double api_now(void);
/* Next 64-bit random number (xorshift; seeded from getrandom). */
uint64_t api_rand(struct api *a);
/* Run MHD now and re-arm its timer (no-op when called from inside MHD). */
void api_mhd_run(struct api *a);
/* Called when a completion finished; checks whether a drain is over. */
void api_check_drained(struct api *a);

/* http.c: responses. Each queues on r->conn and records r->status. */
enum MHD_Result http_respond(struct http_req *r, int status, const char *ctype, const void *data,
                             size_t len);
enum MHD_Result http_respond_json(struct http_req *r, int status, json_t *body); /* steals body */
/* OpenAI error object; param/code may be NULL. */
enum MHD_Result http_respond_error(struct http_req *r, int status, const char *type,
                                   const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void http_suspend(struct http_req *r);
void http_resume(struct http_req *r);
void http_req_unref(struct http_req *r);
/* Normalize a raw request target into out: percent-decoding, '//' and '.'
 * and '..' segments resolved (never above '/'), query dropped. INF_EINVAL for
 * a NUL or bad escape, INF_ETOOBIG when it does not fit. */
int http_normalize_path(const char *raw, char *out, size_t cap);

/* routes.c */
int routes_find(const char *path, const char *method, int *route, const char **allow);
enum MHD_Result routes_dispatch(struct http_req *r);
enum MHD_Result routes_continue(struct http_req *r);
/* Parse r->body as a JSON object; on error responds 400 and returns NULL. */
json_t *routes_parse_body(struct http_req *r);
/* Parse n bytes as one JSON object (what every POST body must be); on error
 * msg gets the 400 message and INF_EINVAL is returned. Pure (no request). */
int api_json_parse_object(const char *p, size_t n, json_t **out, char *msg, size_t cap);

/* Drop special tokens (they decode to nothing); returns the new count. */
size_t routes_drop_special(const struct tok *t, int32_t *ids, size_t n);

/* completions.c */
enum MHD_Result cmpl_handle(struct http_req *r, json_t *body);
enum MHD_Result cmpl_continue(struct http_req *r);
void cmpl_detach(struct http_req *r);
void cmpl_on_wake(struct api *a);
void cmpl_tick(struct api *a, double now);
void cmpl_cancel_all(struct api *a, const char *why);
void cmpl_notify(void *ud); /* sched notify callback (engine thread) */

#endif
