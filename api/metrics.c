/* metrics — Prometheus text exposition of the API's counters (see metrics.h). */
#include "api/metrics.h"

#include <string.h>
#include <time.h>

#include "engine/sched.h"

/* Latency buckets (seconds): 1 ms .. 60 s, roughly x2.5 apart. */
static const double metrics_lat_bounds[METRICS_NBUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0,
};

void metrics_init(struct metrics *m)
{
    memset(m, 0, sizeof(*m));
    m->ttft.bounds = metrics_lat_bounds;
    m->itl.bounds = metrics_lat_bounds;
    m->e2e.bounds = metrics_lat_bounds;
    m->queue_wait.bounds = metrics_lat_bounds;
}

void metrics_observe(struct metrics_hist *h, double v)
{
    int i = 0;
    if (!(v >= 0)) /* NaN or a clock step backwards */
        v = 0;
    while (i < METRICS_NBUCKETS && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

static int metrics_hist_render(struct buf *o, const char *name, const char *help,
                               const struct metrics_hist *h)
{
    uint64_t cum = 0;
    int rc = buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < METRICS_NBUCKETS && !rc; i++) {
        cum += h->counts[i];
        rc = buf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i],
                        (unsigned long long)cum);
    }
    cum += h->counts[METRICS_NBUCKETS];
    if (!rc)
        rc = buf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                        (unsigned long long)cum, name, h->sum, name,
                        (unsigned long long)h->count);
    return rc;
}

static int metrics_counter(struct buf *o, const char *name, const char *type, const char *help,
                           double v)
{
    return buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name,
                      v);
}

int metrics_render(const struct metrics *m, struct sched *s, int ready, int weight, struct buf *o)
{
    int rc = 0;
    rc |= buf_puts(o, "# HELP inferd_requests_total HTTP responses by status code\n"
                      "# TYPE inferd_requests_total counter\n");
    for (int i = 100; i < 600; i++)
        if (m->status[i])
            rc |= buf_printf(o, "inferd_requests_total{status=\"%d\"} %llu\n", i,
                             (unsigned long long)m->status[i]);
    rc |= buf_puts(o, "# HELP inferd_completion_requests_total responses of POST "
                      "/v1/completions and /v1/chat/completions by status code\n"
                      "# TYPE inferd_completion_requests_total counter\n");
    for (int i = 100; i < 600; i++)
        if (m->completion_status[i])
            rc |= buf_printf(o, "inferd_completion_requests_total{status=\"%d\"} %llu\n", i,
                             (unsigned long long)m->completion_status[i]);
    rc |= metrics_counter(o, "inferd_prompt_tokens_total", "counter",
                          "prompt tokens of admitted completion requests",
                          (double)m->prompt_tokens);
    rc |= metrics_counter(o, "inferd_completion_tokens_total", "counter",
                          "tokens generated and sent", (double)m->completion_tokens);
    rc |= metrics_counter(o, "inferd_tool_calls_total", "counter",
                          "tool calls answered (chat message.tool_calls entries)",
                          (double)m->tool_calls);
    rc |= metrics_counter(o, "inferd_refused_connections_total", "counter",
                          "connections refused at accept (total or per-IP limit)",
                          (double)m->refused_connections);
    rc |= metrics_counter(o, "inferd_slow_clients_closed_total", "counter",
                          "connections closed for missing the request read deadline",
                          (double)m->slow_clients_closed);
    rc |= metrics_counter(o, "inferd_client_disconnects_total", "counter",
                          "requests whose client left before the end",
                          (double)m->disconnects);
    rc |= metrics_counter(o, "inferd_open_connections", "gauge", "open HTTP connections",
                          (double)m->open_connections);
    rc |= metrics_counter(o, "inferd_active_streams", "gauge", "SSE streams in progress",
                          (double)m->active_streams);
    rc |= metrics_counter(o, "inferd_body_buffer_bytes", "gauge",
                          "bytes of large request bodies' buffers kept for reuse",
                          (double)m->body_buffer_bytes);
    rc |= metrics_counter(o, "inferd_ready", "gauge", "1 once the model is loaded and warm",
                          ready);
    if (weight >= 0)
        rc |= metrics_counter(o, "inferd_agent_weight_percent", "gauge",
                              "the weight the agent port reports to the load balancer (free KV "
                              "share / (1 + waiting requests); 0 unless ready)",
                              weight);
    rc |= metrics_hist_render(o, "inferd_time_to_first_token_seconds",
                              "request received to first generated token", &m->ttft);
    rc |= metrics_hist_render(o, "inferd_inter_token_latency_seconds",
                              "time between consecutive tokens of one choice", &m->itl);
    rc |= metrics_hist_render(o, "inferd_e2e_request_latency_seconds",
                              "request received to its last token", &m->e2e);
    rc |= metrics_hist_render(o, "inferd_queue_wait_seconds",
                              "submitted to admitted by the scheduler", &m->queue_wait);
    if (s) {
        struct sched_stats st;
        memset(&st, 0, sizeof(st));
        sched_get_stats(s, &st);
        rc |= metrics_counter(o, "inferd_running_sequences", "gauge",
                              "requests admitted and generating", st.running);
        rc |= metrics_counter(o, "inferd_waiting_requests", "gauge",
                              "requests queued for admission", st.waiting);
        rc |= metrics_counter(o, "inferd_kv_blocks_capacity", "gauge", "KV cache blocks in all",
                              st.kv_blocks_total);
        rc |= metrics_counter(o, "inferd_kv_blocks_used", "gauge", "KV cache blocks in use",
                              st.kv_blocks_used);
        rc |= metrics_counter(o, "inferd_kv_blocks_free", "gauge", "KV cache blocks free",
                              st.kv_blocks_free);
        rc |= metrics_counter(o, "inferd_prefix_cache_hits_total", "counter",
                              "requests that reused cached prompt blocks",
                              (double)st.prefix_hits);
        rc |= metrics_counter(o, "inferd_prefix_cache_hit_tokens_total", "counter",
                              "prompt tokens served from cached blocks",
                              (double)st.prefix_hit_tokens);
        rc |= metrics_counter(o, "inferd_engine_prompt_tokens_total", "counter",
                              "prompt tokens computed by the engine", (double)st.prompt_tokens);
        rc |= metrics_counter(o, "inferd_engine_generated_tokens_total", "counter",
                              "tokens sampled by the engine", (double)st.generated_tokens);
        rc |= metrics_counter(o, "inferd_engine_steps_total", "counter",
                              "scheduler steps (forward passes)", (double)st.steps);
        rc |= metrics_counter(o, "inferd_engine_step_seconds_total", "counter",
                              "time spent in scheduler steps", st.step_seconds_sum);
        rc |= metrics_counter(o, "inferd_engine_json_tokens_total", "counter",
                              "tokens sampled under a response_format JSON constraint",
                              (double)st.json_tokens);
        rc |= metrics_counter(o, "inferd_engine_json_allow_seconds_total", "counter",
                              "engine time working out the tokens JSON constraints allow",
                              st.json_allow_seconds);
        const double beat = sched_heartbeat(s);
        if (beat > 0) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            const double now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
            rc |= metrics_counter(o, "inferd_engine_heartbeat_age_seconds", "gauge",
                                  "seconds since the engine loop last began a step or ended an "
                                  "idle wait (idle waits last at most 1 s)",
                                  now > beat ? now - beat : 0.0);
        }
    }
    return rc ? -1 : 0;
}
