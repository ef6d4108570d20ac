/* http — libmicrohttpd driven from the libuv loop: connections, limits,
 * request framing, path normalization, auth (responses: http_respond.c).
 *
 * Design choice: MHD runs in "external polling" mode with its own epoll set
 * (MHD_USE_EPOLL, no MHD thread). The epoll fd is one uv_poll handle in the
 * daemon's loop and MHD_get_timeout drives one uv_timer, so every MHD
 * callback runs on the loop thread, the thread that also owns the requests'
 * state and polls the scheduler. The alternative, MHD's internal polling
 * thread with suspend/resume, would put a second thread on the same request
 * state (locks, or a queue of its own, between MHD's thread and the loop)
 * for no gain: our work per request is small and the engine is elsewhere.
 * Streaming: the SSE response is a callback response; when the reader finds
 * no new event it suspends the connection; the engine thread only calls
 * uv_async_send; the loop thread drains events, appends SSE text and resumes
 * the connection, and MHD writes it out at once (each event is flushed as it
 * is produced). Nothing blocks: the engine never waits on the loop, the loop
 * never waits on the engine.
 *
 * MHD does not watch suspended sockets, so a client that leaves while its
 * request waits for tokens would go unnoticed: completions.c watches the
 * socket with a uv_poll (UV_DISCONNECT) while it is suspended.
 *
 * This file knows no route and no endpoint: it calls up only through the
 * api's hooks (route_find, dispatch, request_done) and a request's ops.
 *
 * Limits that MHD lacks are done here: per-IP and total connection caps in
 * the accept policy (so SIGHUP can change them), a read deadline for the whole
 * request (MHD's timeout counts idle time only: a slowloris client sending a
 * byte a second would never hit it), duplicate Content-Length, a
 * Transfer-Encoding other than "chunked" (MHD would wait for a body with no
 * end), and the header size (431 with a JSON body; MHD's own 431 only fires
 * past twice our limit).
 */
#include "api/internal.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/log.h"

static struct http_req *http_req_new(struct api *a, struct MHD_Connection *conn,
                                     const char *method)
{
    struct http_req *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->api = a;
    r->conn = conn;
    r->refs = 1;
    r->id = ++a->req_seq;
    r->t_start = api_now();
    snprintf(r->method, sizeof(r->method), "%s", method ? method : "");
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->hc = ci ? ci->socket_context : NULL;
    if (r->hc) {
        r->raw_url = r->hc->raw_url; /* ownership moves to the request */
        r->hc->raw_url = NULL;
    }
    a->n_reqs++;
    return r;
}

void http_req_unref(struct http_req *r)
{
    if (!r || --r->refs > 0)
        return;
    body_cache_put(&r->api->bodies, &r->body, api_now());
    free(r->raw_url);
    free(r);
}

/* ---- path normalization ---------------------------------------------- */

static int http_hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int http_normalize_path(const char *raw, char *out, size_t cap)
{
    char dec[1024];
    size_t n = 0;
    if (!raw || raw[0] != '/' || cap < 2)
        return INF_EINVAL;
    for (const char *p = raw; *p && *p != '?' && *p != '#'; p++) {
        int c = (unsigned char)*p;
        if (c == '%') {
            int h = http_hexval((unsigned char)p[1]);
            int l = h < 0 ? -1 : http_hexval((unsigned char)p[2]);
            if (h < 0 || l < 0)
                return INF_EINVAL;
            c = h * 16 + l;
            p += 2;
        }
        if (c == 0 || c < 0x20 || c == 0x7f)
            return INF_EINVAL; /* NUL and control bytes never name a route */
        if (n + 1 >= sizeof(dec))
            return INF_ETOOBIG;
        dec[n++] = (char)c;
    }
    dec[n] = '\0';
    /* resolve segments: "", "." dropped; ".." pops (not above the root) */
    size_t o = 0;
    size_t i = 0;
    out[0] = '\0';
    while (i < n) {
        while (i < n && dec[i] == '/')
            i++;
        size_t s = i;
        while (i < n && dec[i] != '/')
            i++;
        size_t len = i - s;
        if (len == 0 || (len == 1 && dec[s] == '.'))
            continue;
        if (len == 2 && dec[s] == '.' && dec[s + 1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the '/' before the popped segment */
            out[o] = '\0';
            continue;
        }
        if (o + 1 + len + 1 > cap)
            return INF_ETOOBIG;
        out[o++] = '/';
        memcpy(out + o, dec + s, len);
        o += len;
        out[o] = '\0';
    }
    if (o == 0) {
        out[0] = '/';
        out[1] = '\0';
    }
    return 0;
}

/* ---- connection bookkeeping ------------------------------------------ */

static int http_same_ip(const struct sockaddr *a, const struct sockaddr_storage *b)
{
    if (a->sa_family != b->ss_family)
        return 0;
    if (a->sa_family == AF_INET)
        return !memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                       &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr));
    if (a->sa_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
    return 0;
}

static enum MHD_Result http_accept_policy(void *cls, const struct sockaddr *addr, socklen_t len)
{
    struct api *a = cls;
    (void)len;
    /* Draining still accepts: a load balancer's health check must get a
     * 503 (not a refused connection it may count as a network fault), and
     * new work gets a 503 + Retry-After it can retry elsewhere. */
    if (a->state == API_STOPPED)
        return MHD_NO;
    if (a->n_conns >= a->cfg.max_connections) {
        a->metrics.refused_connections++;
        log_debug("refused connection: %d open (max_connections)", a->n_conns);
        return MHD_NO;
    }
    /* a trusted proxy carries many clients: they are limited per request
     * by the address it forwards (http_client) */
    if (proxy_is_trusted(&a->proxies, addr))
        return MHD_YES;
    int same = 0;
    for (struct http_conn *c = a->conns; c; c = c->next)
        same += http_same_ip(addr, &c->addr);
    if (same >= a->cfg.max_connections_per_ip) {
        a->metrics.refused_connections++;
        log_debug("refused connection: %d open from one address (max_connections_per_ip)",
                  same);
        return MHD_NO;
    }
    return MHD_YES;
}

static void http_notify_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                                   enum MHD_ConnectionNotificationCode toe)
{
    struct api *a = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        struct http_conn *c = calloc(1, sizeof(*c));
        *socket_context = c;
        if (!c)
            return;
        c->api = a;
        c->mc = mc;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            size_t l = ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                              : sizeof(struct sockaddr_in);
            memcpy(&c->addr, ci->client_addr, l);
            c->addr_len = (socklen_t)l;
        }
        c->reading = 1;
        c->phase_start = api_now();
        c->next = a->conns;
        if (a->conns)
            a->conns->prev = c;
        a->conns = c;
        a->n_conns++;
        a->metrics.open_connections = a->n_conns;
        MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned)a->cfg.idle_timeout_s);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct http_conn *c = *socket_context;
        if (!c)
            return;
        if (c->prev)
            c->prev->next = c->next;
        else
            a->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
        a->n_conns--;
        a->metrics.open_connections = a->n_conns;
        free(c->raw_url);
        free(c);
        *socket_context = NULL;
    }
}

/* MHD gives the raw request target here (before unescaping); routing and
 * auth both use our own normalization of it. Kept on the connection rather
 * than returned as the request context: MHD only reports completion of
 * requests that reached the access handler, so memory handed out here could
 * leak for a request MHD rejects itself. */
static void *http_uri_log(void *cls, const char *uri, struct MHD_Connection *mc)
{
    (void)cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct http_conn *c = ci ? ci->socket_context : NULL;
    if (c) {
        free(c->raw_url);
        c->raw_url = strdup(uri ? uri : "");
    }
    return NULL;
}

static void http_log_cb(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    log_debug("microhttpd: %s", msg);
}

static void http_completed(void *cls, struct MHD_Connection *mc, void **req_cls,
                           enum MHD_RequestTerminationCode toe)
{
    struct api *a = cls;
    struct http_req *r = *req_cls;
    (void)mc;
    if (!r)
        return;
    *req_cls = NULL;
    double now = api_now();
    if (r->status >= 100 && r->status < 600) {
        a->metrics.status[r->status]++;
        /* the work a balancer spread, without its health checks and scrapes */
        if (r->route == ROUTE_COMPLETIONS || r->route == ROUTE_CHAT)
            a->metrics.completion_status[r->status]++;
    }
    if (r->ops)
        r->ops->detach(r); /* logs its own line with the token counts */
    else
        log_info("request id=%llu client=%s method=%s path=%s status=%d total_ms=%.1f%s%s",
                 (unsigned long long)r->id, r->client[0] ? r->client : "-", r->method,
                 r->path[0] ? r->path : "-", r->status,
                 (now - r->t_start) * 1e3,
                 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=1", r->log_extra);
    if (r->hc) {
        r->hc->reading = 1;
        r->hc->phase_start = now;
        r->hc->forwarded = 0;
    }
    r->conn = NULL;
    a->n_reqs--;
    http_req_unref(r);
    a->request_done(a);
}

/* ---- the access handler ---------------------------------------------- */

struct http_hdr_scan {
    int n_content_length;
    int has_te;
    int bad_te; /* a Transfer-Encoding other than exactly "chunked" */
    int bad_cl;
};

static enum MHD_Result http_scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    struct http_hdr_scan *s = cls;
    (void)kind;
    if (!strcasecmp(key, "Content-Length")) {
        s->n_content_length++;
        const char *p = value ? value : "";
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            s->bad_cl = 1;
        for (; *p; p++)
            if ((*p < '0' || *p > '9') && *p != ' ' && *p != '\t')
                s->bad_cl = 1;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        /* MHD frames only "chunked"; with any other coding the body has no
         * known end and MHD would read until the client gives up (RFC 9112
         * 6.3: 400 and close). A second header counts as a list: bad too. */
        const char *p = value ? value : "";
        while (*p == ' ' || *p == '\t')
            p++;
        if (s->has_te || strcasecmp(p, "chunked")) /* as MHD compares it */
            s->bad_te = 1;
        s->has_te = 1;
    }
    return MHD_YES;
}

static int http_auth_ok(struct api *a, struct MHD_Connection *mc)
{
    const char *key = a->cfg.api_key;
    if (!key[0])
        return 1;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return 0;
    h += 7;
    while (*h == ' ')
        h++;
    size_t hl = strlen(h), kl = strlen(key);
    /* constant time in the key's content */
    unsigned diff = (unsigned)(hl ^ kl);
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < hl ? h[i] : 0);
    return diff == 0;
}

static enum MHD_Result http_collect_xff(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    (void)kind;
    if (!strcasecmp(key, "X-Forwarded-For"))
        proxy_xff_append(cls, value);
    return MHD_YES;
}

/* Who the request is from: the peer, or the client a trusted proxy names in
 * X-Forwarded-For (api/proxy.h). Sets r->client; for a forwarded client,
 * applies max_connections_per_ip to its requests in flight (the proxy's
 * connections are exempt from the per-address cap at accept). 0, or 1 when
 * that limit refuses the request. */
static int http_client(struct http_req *r, struct MHD_Connection *mc)
{
    struct api *a = r->api;
    struct http_conn *hc = r->hc;
    if (!hc || !hc->addr_len) {
        snprintf(r->client, sizeof(r->client), "-");
        return 0;
    }
    struct proxy_xff *x = NULL, xs;
    if (a->proxies.n && proxy_is_trusted(&a->proxies, (const struct sockaddr *)&hc->addr)) {
        proxy_xff_init(&xs);
        MHD_get_connection_values(mc, MHD_HEADER_KIND, http_collect_xff, &xs);
        if (xs.any)
            x = &xs;
    }
    struct sockaddr_storage client;
    int fwd = proxy_client(&a->proxies, (const struct sockaddr *)&hc->addr, x ? x->buf : NULL,
                           &client);
    proxy_addr_str((const struct sockaddr *)&client, r->client, sizeof(r->client));
    hc->forwarded = 0;
    if (!fwd)
        return 0;
    int same = 0;
    for (struct http_conn *c = a->conns; c; c = c->next)
        if (c != hc && c->forwarded && http_same_ip((const struct sockaddr *)&client, &c->client))
            same++;
    if (same >= a->cfg.max_connections_per_ip) {
        a->metrics.refused_connections++;
        log_debug("refused request from %s via proxy: %d in flight (max_connections_per_ip)",
                  r->client, same);
        return 1;
    }
    hc->client = client;
    hc->forwarded = 1;
    return 0;
}

/* First call: the request line and headers are in; nothing of the body is. */
static enum MHD_Result http_begin(struct http_req *r)
{
    struct api *a = r->api;
    struct MHD_Connection *mc = r->conn;

    if (http_client(r, mc))
        return http_respond_error(r, 429, NULL, NULL, "rate_limit_exceeded",
                                  "too many requests in flight from %s (max_connections_per_ip %d)",
                                  r->client, a->cfg.max_connections_per_ip);

    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    struct http_hdr_scan scan = {0, 0, 0, 0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, http_scan_header, &scan);
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
    r->has_body = scan.has_te || (cl && strcmp(cl, "0"));

    if (ci && ci->header_size > (size_t)a->cfg.max_header_bytes)
        return http_respond_error(r, 431, NULL, NULL, NULL,
                                  "request headers are %zu bytes, more than the limit of %d",
                                  ci->header_size, a->cfg.max_header_bytes);
    if (scan.n_content_length > 1)
        return http_respond_error(r, 400, NULL, NULL, NULL, "duplicate Content-Length header");
    if (scan.bad_cl)
        return http_respond_error(r, 400, NULL, NULL, NULL, "invalid Content-Length header");
    if (scan.bad_te)
        return http_respond_error(r, 400, NULL, NULL, NULL,
                                  "unsupported Transfer-Encoding (only \"chunked\" is accepted)");
    if (scan.n_content_length && scan.has_te)
        return http_respond_error(r, 400, NULL, NULL, NULL,
                                  "both Content-Length and Transfer-Encoding given");
    int rc = http_normalize_path(r->raw_url ? r->raw_url : "", r->path, sizeof(r->path));
    if (rc) {
        r->path[0] = '\0';
        return http_respond_error(r, 400, NULL, NULL, NULL, "invalid request path");
    }
    const char *allow = NULL;
    int found = a->route_find(r->path, r->method, &r->route, &allow);
    if (r->route != ROUTE_HEALTH && !http_auth_ok(a, mc))
        return http_respond_error(r, 401, NULL, NULL, "invalid_api_key",
                                  "missing or invalid API key (Authorization: Bearer <key>)");
    if (found == INF_ENOTFOUND)
        return http_respond_error(r, 404, NULL, NULL, "not_found", "no route for %s %s",
                                  r->method, r->path);
    if (found == INF_EINVAL)
        return http_respond_error(r, 405, NULL, NULL, "method_not_allowed",
                                  "method %s is not allowed for %s (allowed: %s)", r->method,
                                  r->path, allow ? allow : "-");
    int64_t limit = a->cfg.max_body_bytes;
    if (cl) {
        unsigned long long v = strtoull(cl, NULL, 10);
        if (v > (unsigned long long)limit)
            return http_respond_error(r, 413, NULL, NULL, "request_too_large",
                                      "request body is %llu bytes, more than the limit of %lld",
                                      v, (long long)limit);
        if (strcmp(r->method, "POST") == 0 && v &&
            body_cache_take(&a->bodies, &r->body, (size_t)v, (size_t)limit))
            return http_respond_error(r, 500, NULL, NULL, NULL, "out of memory");
    }
    r->body_limit = limit;
    r->phase = HTTP_PHASE_BODY;
    return MHD_YES;
}

static enum MHD_Result http_access(void *cls, struct MHD_Connection *mc, const char *url,
                                   const char *method, const char *version,
                                   const char *upload_data, size_t *upload_data_size,
                                   void **req_cls)
{
    struct api *a = cls;
    struct http_req *r = *req_cls;
    (void)url;
    (void)version;
    if (!r) {
        r = http_req_new(a, mc, method);
        if (!r)
            return MHD_NO;
        *req_cls = r;
        return http_begin(r);
    }
    switch (r->phase) {
    case HTTP_PHASE_BODY:
        if (*upload_data_size) {
            size_t n = *upload_data_size;
            *upload_data_size = 0;
            if (r->too_big || (int64_t)(r->body.len + n) > r->body_limit) {
                /* chunked (or lying) body over the limit */
                if (!r->too_big) {
                    r->too_big = 1;
                    body_cache_put(&a->bodies, &r->body, api_now());
                    if (http_respond_error(r, 413, NULL, NULL, "request_too_large",
                                           "request body exceeds the limit of %lld bytes",
                                           (long long)r->body_limit) == MHD_YES)
                        return MHD_YES;
                }
                r->discarded += n;
                /* MHD could not take the 413 mid-body: read on (bounded)
                 * to answer at the end, or hang up on a flood. */
                if (r->discarded > (size_t)r->body_limit + (1u << 20))
                    return MHD_NO;
                return MHD_YES;
            }
            if (strcmp(r->method, "POST") == 0 && buf_append(&r->body, upload_data, n))
                return MHD_NO;
            return MHD_YES;
        }
        if (r->hc)
            r->hc->reading = 0;
        r->phase = HTTP_PHASE_DISPATCHED;
        if (r->too_big)
            return http_respond_error(r, 413, NULL, NULL, "request_too_large",
                                      "request body exceeds the limit of %lld bytes",
                                      (long long)r->body_limit);
        return a->dispatch(r);
    case HTTP_PHASE_DISPATCHED:
        *upload_data_size = 0;
        return r->ops ? r->ops->resumed(r) : MHD_YES;
    default:
        /* responded early; MHD may still hand us the rest of the body */
        *upload_data_size = 0;
        return MHD_YES;
    }
}

/* ---- the loop side --------------------------------------------------- */

static void http_mhd_timer_cb(uv_timer_t *t)
{
    http_run(t->data);
}

void http_run(struct api *a)
{
    if (!a->mhd || a->in_mhd_run)
        return;
    a->in_mhd_run = 1;
    MHD_run(a->mhd);
    a->in_mhd_run = 0;
    MHD_UNSIGNED_LONG_LONG to = 0;
    if (MHD_get_timeout(a->mhd, &to) == MHD_YES) {
        if (to > 1000)
            to = 1000;
        uv_timer_start(&a->mhd_timer, http_mhd_timer_cb, (uint64_t)to, 0);
    } else {
        /* no deadline pending: a slow tick keeps timeouts honest anyway */
        uv_timer_start(&a->mhd_timer, http_mhd_timer_cb, 1000, 0);
    }
}

static void http_poll_cb(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    http_run(p->data);
}

void http_tick(struct api *a, double now)
{
    body_cache_trim(&a->bodies, now);
    /* read deadline: a request must arrive whole within read_timeout_s */
    for (struct http_conn *c = a->conns; c; c = c->next) {
        if (c->reading && c->fd >= 0 && now - c->phase_start > a->cfg.read_timeout_s) {
            log_info("closing slow client fd=%d: no complete request after %d s", c->fd,
                     a->cfg.read_timeout_s);
            a->metrics.slow_clients_closed++;
            /* MHD sees the shutdown as a closed peer and cleans up itself */
            shutdown(c->fd, SHUT_RDWR);
            c->reading = 0;
        }
    }
}

int http_sockaddr(const char *host, int port, struct sockaddr_storage *ss, int *v6)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        *v6 = 0;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *v6 = 1;
        return 0;
    }
    if (!strcmp(host, "localhost")) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        *v6 = 0;
        return 0;
    }
    return INF_EINVAL;
}

int http_start(struct api *a, struct inf_error *err)
{
    const struct api_config *c = &a->cfg;
    struct sockaddr_storage ss;
    int v6 = 0;
    if (http_sockaddr(c->host, c->port, &ss, &v6))
        return inf_error_set(err, INF_EINVAL, "host: \"%s\" is not an IPv4/IPv6 address",
                             c->host);
    /* MHD's per-connection memory pool holds the request line and headers:
     * leave room past our own limit so ours (JSON 431) fires first. */
    size_t pool = (size_t)c->max_header_bytes * 2 + 32768;
    if (pool < 65536)
        pool = 65536;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (v6)
        flags |= MHD_USE_IPv6;
    a->mhd = MHD_start_daemon(
        flags, (uint16_t)c->port, http_accept_policy, a, http_access, a,
        MHD_OPTION_EXTERNAL_LOGGER, http_log_cb, a, /* first: MHD logs the rest through it */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->idle_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, http_completed, a,
        MHD_OPTION_NOTIFY_CONNECTION, http_notify_connection, a,
        MHD_OPTION_URI_LOG_CALLBACK, http_uri_log, a,
        /* no MHD_OPTION_LISTENING_ADDRESS_REUSE: 1 adds SO_REUSEPORT, which lets
         * a second daemon share the port (requests alternate between them);
         * MHD's default is SO_REUSEADDR alone, so a restart still binds at once */
        /* a burst larger than the accept queue has its handshakes dropped
         * and retried by the kernel a second later (SYN-ACK timer): each of
         * those clients is refused, or served, 1 s late. 4096 is Linux's
         * default somaxconn (the kernel caps the value there). */
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
        MHD_OPTION_END);
    if (!a->mhd)
        return inf_error_set(err, INF_EIO, "MHD_start_daemon() on %s:%d failed (address in "
                                           "use or not available?)", c->host, c->port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_BIND_PORT);
    a->port = di ? di->port : c->port;
    di = MHD_get_daemon_info(a->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!di) {
        MHD_stop_daemon(a->mhd);
        a->mhd = NULL;
        return inf_error_set(err, INF_EINTERNAL, "MHD has no epoll fd");
    }
    uv_poll_init(a->loop, &a->mhd_poll, di->epoll_fd);
    uv_timer_init(a->loop, &a->mhd_timer);
    a->mhd_poll.data = a->mhd_timer.data = a;
    uv_poll_start(&a->mhd_poll, UV_READABLE, http_poll_cb);
    /* large bodies' first buffers written before the first client comes
     * (body_cache.h: a cold 4 MB buffer cost the loop 19+ ms to fill) */
    int w = body_cache_warm(&a->bodies, (size_t)c->max_body_bytes, api_now());
    log_debug("http: %d body buffers of %lld bytes written ahead", w,
              (long long)c->max_body_bytes + 1);
    return 0;
}

void http_stop(struct api *a)
{
    if (!a->mhd)
        return;
    http_run(a);
    uv_poll_stop(&a->mhd_poll);
    MHD_stop_daemon(a->mhd);
    a->mhd = NULL;
}

void http_reconfigure(struct api *a)
{
    for (struct http_conn *k = a->conns; k; k = k->next)
        MHD_set_connection_option(k->mc, MHD_CONNECTION_OPTION_TIMEOUT,
                                  (unsigned)a->cfg.idle_timeout_s);
}
