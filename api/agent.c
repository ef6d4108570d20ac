/* agent — the load balancer's agent-check port (HAProxy `agent-check`,
 * docs/SCALE-OUT.md): a TCP listener on the API's loop that answers every
 * connection with one line, this daemon's weight as a percentage of the
 * one it was configured with, and closes.
 *
 * Why: the balancer's least-connections choice counts connections, not
 * work; a daemon whose KV cache is nearly full (long prompts, long
 * answers) holds as many connections as one that is idle. The weight is
 * the free share of the KV cache, divided by 1 + the requests waiting for
 * admission, so new work goes where it can start now. 1% at the least
 * while ready: a full daemon still gets work when every daemon is full
 * (HAProxy then queues it there) rather than none; 0% while loading,
 * draining, stalled or after a device error, when /health takes the daemon
 * out anyway (the weight then keeps it out of the consistent hash's ring
 * until it answers again).
 *
 * The line is written at accept; the agent protocol sends at most an
 * `agent-send` string, which is read and ignored. A connection costs an
 * accept, a write, a shutdown and a close on the loop thread, and lives at
 * most AGENT_LINGER_MS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/internal.h"
#include "engine/log.h"
#include "engine/sched.h"

/* A connection: the line is written, then our side shut (FIN) and whatever
 * the agent sends read and dropped until it closes (closing with unread
 * bytes, an agent-send string, would reset the connection and could lose
 * the line), at most AGENT_LINGER_MS. */
#define AGENT_LINGER_MS 5000
#define AGENT_MAX_CONNS 64 /* past it: the line, then close at once */

struct agent_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    uv_shutdown_t sd;
    struct api *a;
    struct agent_conn *next, **pprev; /* a->agent_conns */
    int handles, closing;
    char line[32];
    char rbuf[128];
};

/* The weight in percent (0..100) for the API's state and engine stats. */
int api_agent_weight(const struct api *a, double now)
{
    if (a->state != API_READY || a->device_err || !a->sched || api_engine_stall(a, now) > 0)
        return 0;
    struct sched_stats st;
    sched_get_stats(a->sched, &st);
    if (st.kv_blocks_total <= 0)
        return 1;
    const double free = (double)st.kv_blocks_free / (double)st.kv_blocks_total;
    int w = (int)(100.0 * free / (1.0 + (st.waiting > 0 ? st.waiting : 0)) + 0.5);
    return w < 1 ? 1 : w > 100 ? 100 : w;
}

static void agent_conn_closed(uv_handle_t *h)
{
    struct agent_conn *c = h->data;
    if (--c->handles == 0)
        free(c);
}

static void agent_conn_close(struct agent_conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    *c->pprev = c->next;
    if (c->next)
        c->next->pprev = c->pprev;
    c->a->n_agent_conns--;
    uv_close((uv_handle_t *)&c->tcp, agent_conn_closed);
    uv_close((uv_handle_t *)&c->timer, agent_conn_closed);
}

void api_agent_close_all(struct api *a)
{
    while (a->agent_conns)
        agent_conn_close(a->agent_conns);
}

static void agent_timeout(uv_timer_t *t)
{
    agent_conn_close(t->data);
}

static void agent_alloc(uv_handle_t *h, size_t want, uv_buf_t *b)
{
    (void)want;
    struct agent_conn *c = h->data;
    *b = uv_buf_init(c->rbuf, sizeof(c->rbuf));
}

static void agent_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    (void)b;
    if (n < 0) /* EOF: the agent has the line and closed; or an error */
        agent_conn_close(st->data);
}

static void agent_shut(uv_shutdown_t *sd, int status)
{
    (void)status;
    struct agent_conn *c = sd->data;
    if (!c->closing && c->a->n_agent_conns > AGENT_MAX_CONNS)
        agent_conn_close(c);
}

static void agent_written(uv_write_t *wr, int status)
{
    struct agent_conn *c = wr->data;
    if (c->closing)
        return;
    if (status < 0 || uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, agent_shut) ||
        uv_read_start((uv_stream_t *)&c->tcp, agent_alloc, agent_read))
        agent_conn_close(c);
}

static void agent_on_conn(uv_stream_t *srv, int status)
{
    struct api *a = srv->data;
    if (status < 0)
        return;
    struct agent_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return; /* the connection waits in the backlog until memory returns */
    c->a = a;
    c->tcp.data = c->timer.data = c->wr.data = c->sd.data = c;
    if (uv_tcp_init(a->loop, &c->tcp)) {
        free(c);
        return;
    }
    uv_timer_init(a->loop, &c->timer); /* cannot fail */
    c->handles = 2;
    c->next = a->agent_conns;
    if (c->next)
        c->next->pprev = &c->next;
    c->pprev = &a->agent_conns;
    a->agent_conns = c;
    a->n_agent_conns++;
    if (uv_accept(srv, (uv_stream_t *)&c->tcp)) {
        agent_conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, agent_timeout, AGENT_LINGER_MS, 0);
    const int n = snprintf(c->line, sizeof(c->line), "%d%%\n", api_agent_weight(a, api_now()));
    uv_buf_t b = uv_buf_init(c->line, (unsigned)n);
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, agent_written))
        agent_conn_close(c);
}

int api_agent_start(struct api *a, struct inf_error *err)
{
    if (a->cfg.agent_port <= 0)
        return 0;
    struct sockaddr_storage ss;
    int v6 = 0;
    if (http_sockaddr(a->cfg.host, a->cfg.agent_port, &ss, &v6))
        return inf_error_set(err, INF_EINVAL, "agent_port: bad listen address \"%s\"", a->cfg.host);
    int rc = uv_tcp_init(a->loop, &a->agent);
    if (rc)
        return inf_error_set(err, INF_EINTERNAL, "agent_port: uv_tcp_init: %s", uv_strerror(rc));
    a->agent.data = a;
    a->agent_open = 1;
    a->handles_open++; /* closed by api_free */
    rc = uv_tcp_bind(&a->agent, (const struct sockaddr *)&ss, v6 ? UV_TCP_IPV6ONLY : 0);
    if (!rc)
        rc = uv_listen((uv_stream_t *)&a->agent, 64, agent_on_conn);
    if (rc)
        return inf_error_set(err, INF_EIO, "agent_port %s:%d: %s", a->cfg.host, a->cfg.agent_port,
                             uv_strerror(rc));
    log_info("agent-check port %s:%d (the balancer's weight: free KV share / (1 + waiting))",
             a->cfg.host, a->cfg.agent_port);
    return 0;
}
