/* metrics — counters and latency histograms for GET /metrics (Prometheus text).
 *
 * Fixed bucket bounds, counts in plain arrays: observing a value allocates
 * nothing. Scheduler gauges (running, waiting, KV blocks, prefix cache) are
 * read from sched_get_stats when the page is rendered. Thread: loop thread.
 */
#ifndef INFERD_API_METRICS_H
#define INFERD_API_METRICS_H

#include <stdint.h>

#include "api/buf.h"

struct sched;

#define METRICS_NBUCKETS 16

struct metrics_hist {
    const double *bounds; /* upper bounds in seconds, METRICS_NBUCKETS of them */
    uint64_t counts[METRICS_NBUCKETS + 1]; /* last: +Inf */
    double sum;
    uint64_t count;
};

struct metrics {
    struct metrics_hist ttft;       /* request received -> first token */
    struct metrics_hist itl;        /* between tokens of one choice */
    struct metrics_hist e2e;        /* request received -> last token */
    struct metrics_hist queue_wait; /* submitted -> admitted (KV reserved) */
    uint64_t status[600];           /* responses by HTTP status */
    uint64_t completion_status[600]; /* the same, of the two completion routes */
    uint64_t prompt_tokens;
    uint64_t completion_tokens;
    uint64_t tool_calls;            /* tool calls answered (message.tool_calls entries) */
    uint64_t refused_connections;
    uint64_t slow_clients_closed;
    uint64_t disconnects;           /* clients gone while their request ran */
    int64_t open_connections;
    int64_t active_streams;
    int64_t body_buffer_bytes; /* api/body_cache.c's buffers (set as /metrics renders) */
};

void metrics_init(struct metrics *m);
void metrics_observe(struct metrics_hist *h, double seconds);
/* Render everything (plus s's stats when s is not NULL, and the agent
 * port's weight when weight >= 0) into out. */
int metrics_render(const struct metrics *m, struct sched *s, int ready, int weight, struct buf *out);

#endif
