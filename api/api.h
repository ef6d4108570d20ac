/* api — the OpenAI-style HTTP API of inferd (../shared/docs/API.md).
 *
 * libmicrohttpd runs inside the daemon's libuv loop (see api/http.c for why);
 * the engine is reached only through engine/sched.h. The HTTP side comes up
 * first (GET /health answers 503 while the model loads); api_set_engine hands
 * over the loaded model and the started scheduler, api_prewarm runs one tiny
 * request through it, and only then /health answers 200.
 *
 * Thread: every function here runs on the loop thread.
 */
#ifndef INFERD_API_H
#define INFERD_API_H

#include <stdint.h>

#include <uv.h>

#include "engine/err.h"

struct model;
struct sched;

/* Everything the API reads from the config. The limits can change on SIGHUP
 * (api_reconfigure); host/port/model_id cannot. */
struct api_config {
    char host[256];
    int port;
    char model_id[256];
    char api_key[256];
    int64_t max_body_bytes;
    int max_header_bytes;
    int max_connections;
    int max_connections_per_ip;
    int idle_timeout_s;
    int read_timeout_s;
    int ping_interval_s;
    int retry_after_s;
    /* after the drain deadline, the clients get this many seconds to read
     * what was already produced (the cancel's error events, [DONE]) before
     * the API reports itself drained and its connections close */
    int drain_flush_s;
    /* /health says 503 "stalled" once the engine loop has not run for this
     * many seconds (0: never) */
    int engine_stall_s;
    int max_tokens;
    int default_max_tokens;
    int max_n;
    int max_prompts;
    int max_stop;
    int max_stop_len;
    int max_logprobs;
    int max_logit_bias;
    /* chat template family ("chatml", "llama3", "llama3.1", "llama2", "mistral",
     * "gemma"), or "" / "auto": recognise the GGUF's tokenizer.chat_template */
    char chat_template[32];
    /* proxies whose X-Forwarded-For is believed (api/proxy.h) */
    char trusted_proxies[1024];
    /* the balancer's agent-check port on host (api/agent.c; 0: none) */
    int agent_port;
};

struct api;

/* Bind and start serving on loop (503 for everything but /health until the
 * engine is set). err names the failing call. */
int api_new(uv_loop_t *loop, const struct api_config *c, struct api **out,
            struct inf_error *err);
/* Listen on cfg.agent_port (when > 0) for the balancer's agent checks:
 * each connection gets this daemon's weight, "NN%\n" (api/agent.c). Call
 * once after api_new; on an error (the port taken) api_free still closes
 * what was opened. */
int api_agent_start(struct api *a, struct inf_error *err);
/* The port actually bound (useful with port 0). */
int api_port(const struct api *a);

/* Hand over the engine: m (immutable) and s (started). n_ctx is the context a
 * sequence may use (prompt + max_tokens). The api does not own them. */
void api_set_engine(struct api *a, struct model *m, struct sched *s, int32_t n_ctx);

/* Run one tiny request through the engine; done(ud, rc) is called on the loop
 * thread when it finished (rc 0) or failed; /health turns 200 on success. */
int api_prewarm(struct api *a, void (*done)(void *ud, int rc), void *ud);
/* Mark ready without a prewarm request. */
void api_set_ready(struct api *a);

/* SIGHUP: apply new limits / api key (host, port and model_id are ignored). */
void api_reconfigure(struct api *a, const struct api_config *c);

/* fn(ud, code) runs once on the loop thread when the engine reports its
 * device lost (sched_device_error; ROBUSTNESS 35): from then on /health
 * and every new request answer 503 naming it (the requests in flight have
 * failed with it already). fn is expected to api_shutdown and exit
 * non-zero. */
void api_on_fatal(struct api *a, void (*fn)(void *ud, int code), void *ud);

/* Stop taking work; requests already admitted keep running. New requests
 * get 503 + Retry-After + Connection: close, /health 503 (the listener stays
 * open until api_free so that a balancer's health check sees the 503).
 * drain_ms later whatever is still running is canceled. done(ud) runs when
 * no request is left; then the caller stops the scheduler and calls
 * api_free. */
void api_shutdown(struct api *a, uint64_t drain_ms, void (*done)(void *ud), void *ud);

/* Requests in flight (completions admitted or queued). */
int api_active(const struct api *a);

/* Stop MHD and close the loop handles (the loop must then run once more so
 * the close callbacks fire; api_free_done says when). Frees a. */
void api_free(struct api *a);

#endif
