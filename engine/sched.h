/* sched — continuous batching over the batched forward pass.
 *
 * The loop thread submits requests and drains their events; one engine thread
 * (started by sched_start) runs the step loop: admit waiting requests while KV
 * blocks allow (engine/kv), build one batch of one decode token per running
 * sequence plus prompt chunks of admitted ones under a per-step token budget,
 * submit it to the graph (graph_submit), publish the previous step's events
 * while the device computes, wait for it (graph_wait), sample, push events,
 * and call the request's notify callback (the daemon turns that into
 * uv_async_send). A step's events become visible together, after the stats
 * that reflect it, at the latest when the next step is submitted or the
 * engine goes idle.
 *
 * Threads: sched_submit/poll/cancel/release/stats may be called from any one
 * non-engine thread (the loop thread); the notify callback and the watchdog
 * callback run on the engine thread and must only signal (never block).
 *
 * Policies (sched.c has the details):
 * - Admission reserves, per request, every KV block it can ever need:
 *   full_prompt_blocks + n * (ceil((prompt + max_tokens) / block_size)
 *   - full_prompt_blocks) minus the prompt blocks found in the prefix cache.
 *   Running sequences therefore never run out of blocks and nothing is ever
 *   preempted; a request that could not fit even in an empty cache gets
 *   INF_ERANGE at submit.
 * - Admission is strictly FIFO: when the head of the queue does not fit
 *   (blocks or max_seqs), nothing behind it is admitted, so a long prompt is
 *   never overtaken forever by short ones.
 * - Each step: one decode token per running sequence first, then prompt
 *   chunks of admitted requests in admission order until step_tokens is used
 *   (at least step_tokens/4 prompt tokens per step, so prefill always
 *   progresses). The graph guarantees that chunking and batch composition do
 *   not change a row's logits, so outputs do not depend on the load.
 * - n > 1: the prompt is prefilled once on choice 0's table, then the other
 *   choices fork it; the shared partial last block is copied on first write.
 * - Prefix cache: every full block (prompt or generated) is registered under
 *   its chained token hash; a new request reuses the longest cached chain of
 *   its full prompt blocks, except the block holding its last prompt token
 *   (whose logits must be computed). Not used with prompt_logprobs (those
 *   need every prompt row's logits).
 * - Events of a step become visible to sched_poll at the end of the step,
 *   after the step's stats: a client that has seen a request end also sees
 *   its KV blocks back in sched_get_stats.
 * - A choice that ends on EOG or a stop id does not emit that token; before
 *   min_tokens those ids are masked out of sampling (logprobs still come from
 *   the raw logits).
 * - JSON constraints (sched_request.json) mask each step's row on the host
 *   with the tokens the choice's recognizer allows (engine/jsonc.h).
 */
#ifndef INFERD_SCHED_H
#define INFERD_SCHED_H

#include <stdint.h>

#include "err.h"
#include "sample.h"

struct model;
struct graph;
struct jsonc;

#define SCHED_MAX_TOP 20 /* most top logprobs per token (API's logprobs cap) */

struct sched_config {
    int32_t max_seqs;    /* sequences running at once (each choice is one) */
    int32_t queue_len;   /* requests waiting for admission before 429 */
    int32_t n_ctx;       /* per sequence: prompt + max_tokens must fit;
                            0 = the model's n_ctx_train; never more than
                            n_ctx_train or the cache (sched_get_stats says) */
    int32_t kv_tokens;   /* KV cache size in tokens (rounded up to blocks);
                            0 = all the graph has */
    int32_t block_size;  /* tokens per KV block; 0 = the graph's; otherwise
                            it must equal the graph's */
    int32_t step_tokens; /* token budget per step (prefill chunk + decodes) */
    int prefix_cache;    /* 1: reuse cached KV blocks of identical prompt prefixes */
    /* Where tokens are sampled. 0 (auto): on the backend (ops->sample; the
     * logits stay in backend memory) when it is asynchronous (CUDA) and has
     * the op, else on the host (engine/sample.c over downloaded logits).
     * 1: on the backend whenever it has the op (on the CPU backend: tests of
     * that path). -1: always on the host. The environment variable
     * INFERD_SAMPLE_ON_BACKEND=1 or =0, when set, overrides this with 1 or
     * -1 (for tests: a whole suite on either path). Both paths give the
     * same events (on the CPU bit for bit; see sched.c). */
    int sample_on_backend;
    int32_t idle_wait_ms; /* longest idle wait of the engine loop (the
                             watchdog callback and the heartbeat run after
                             each); 0 = 1000; the daemon makes it a quarter of
                             WATCHDOG_USEC when that is shorter */
};

/* max_seqs 32, queue_len 64, n_ctx 0, kv_tokens 16384, block_size 16,
 * step_tokens 512, prefix_cache 1, sample_on_backend 0. */
void sched_config_default(struct sched_config *c);

struct graph_params;
/* The graph_params (for graph_new) that serve config c: max_tokens =
 * max(step_tokens, max_seqs), max_logits = min(max_tokens, max_seqs + 64),
 * n_blocks = ceil(kv_tokens / block_size). */
void sched_graph_params(const struct sched_config *c, struct graph_params *gp);

struct sched_request {
    const int32_t *prompt; /* copied at submit */
    int32_t n_prompt;
    int32_t n_choices;     /* n: choices share the prompt's KV blocks */
    int32_t max_tokens;
    int32_t min_tokens;    /* EOS/stop ids are ignored before this many tokens */
    int ignore_eos;
    const int32_t *stop_ids; /* extra token ids that end a choice; copied */
    int32_t n_stop_ids;
    struct sample_params sampling; /* bias array copied; choice i uses seed + i */
    int32_t logprobs;      /* -1: none; 0..SCHED_MAX_TOP: chosen token's logprob + top N */
    int prompt_logprobs;   /* 1: SCHED_EV_PROMPT events for prompt tokens 1.. (echo) */
    /* NULL, or a JSON constraint (engine/jsonc.h; copied at submit): each
     * choice samples only tokens that continue a JSON text its form
     * accepts, end tokens and stop ids only where the value may end, and
     * ends with SCHED_FINISH_STOP the moment the value is closed. Such a
     * request samples on the host (its logits row is downloaded); its
     * logprobs are the model's, before the constraint (as min_tokens'). A
     * choice left with no allowed token (a nesting limit), or whose allowed
     * tokens the model puts all at -inf, ends with SCHED_FINISH_LENGTH.
     * Needs the model's tokenizer (INF_EINVAL). */
    const struct jsonc *json;
};

enum sched_ev_kind {
    SCHED_EV_ADMITTED = 1, /* left the queue (KV reserved); for queue-wait metrics */
    SCHED_EV_PROMPT,       /* logprob of prompt token (prompt_logprobs) */
    SCHED_EV_TOKEN,        /* a generated token of choice `choice` */
    SCHED_EV_DONE,         /* choice finished; finish says why */
    SCHED_EV_ERROR,        /* the request failed; error says why; no more events */
};

enum sched_finish {
    SCHED_FINISH_NONE = 0,
    SCHED_FINISH_LENGTH,   /* max_tokens or n_ctx reached */
    SCHED_FINISH_STOP,     /* EOS / EOG / stop id */
    SCHED_FINISH_CANCELED,
};

struct sched_event {
    int kind;
    int32_t choice;
    int32_t pos;      /* SCHED_EV_PROMPT: index in the prompt */
    int32_t token;
    float logprob;    /* when logprobs >= 0 (or prompt event) */
    int32_t n_top;
    int32_t top_ids[SCHED_MAX_TOP];
    float top_lps[SCHED_MAX_TOP];
    int finish;       /* enum sched_finish, for SCHED_EV_DONE */
    int error;        /* INF_E*, for SCHED_EV_ERROR */
};

struct sched_stats {
    int32_t running;             /* running sequences (choices not finished) */
    int32_t waiting;             /* requests in the admission queue */
    int32_t kv_blocks_total;
    int32_t kv_blocks_used;
    int32_t kv_blocks_free;
    uint64_t prefix_hit_tokens;  /* prompt tokens served from cached blocks */
    uint64_t prefix_hits;        /* requests that reused at least one block */
    uint64_t prompt_tokens;      /* computed (prefilled) prompt tokens */
    uint64_t generated_tokens;
    uint64_t steps;
    double step_seconds_sum;
    int32_t kv_blocks_cached;    /* of the free ones: holding a reusable prefix */
    int32_t n_ctx;               /* the resolved per-sequence limit */
    uint64_t requests_done;      /* requests that ended (any reason) */
    /* of steps: those whose batch held decode rows only (no prompt chunk),
     * their rows and seconds: decode_rows / decode_step_seconds is the
     * pure decode rate (what llama.cpp's batched-bench calls S_TG) */
    uint64_t decode_steps, decode_rows;
    double decode_step_seconds;
    /* JSON constraints: tokens sampled under one, and the engine thread's
     * seconds working out their allowed sets (what response_format costs) */
    uint64_t json_tokens;
    double json_allow_seconds;
};

typedef void (*sched_notify_fn)(void *ud);

struct sched;
struct sched_handle;

/* The scheduler drives g (whose model is m); it does not own them. The
 * graph's limits win: max_seqs and step_tokens are clamped to what one
 * graph step accepts. INF_EINVAL (err says why) for a config that does
 * not match the graph. */
int sched_new(struct model *m, struct graph *g, const struct sched_config *c,
              struct sched **out, struct inf_error *err);
/* Start the engine thread. watchdog (may be NULL) is called from the engine
 * loop at least once per step and once per idle wait (idle waits last at most
 * idle_wait_ms), so a stuck step stops the calls. */
int sched_start(struct sched *s, void (*watchdog)(void *ud), void *ud);

/* Build the JSON constraint's vocabulary tables (sched_request.json) now
 * instead of at the first constrained request, whose time to first token
 * they would otherwise carry (~60-90 ms for a 152K vocabulary: bench/
 * RESULTS.md 2026-12-05 session 39). Call before sched_start (the engine
 * thread owns them after). 0 (also when built already or the model has no
 * tokenizer: constrained requests are refused there anyway) or
 * INF_ENOMEM. */
int sched_prepare_json(struct sched *s);
/* CLOCK_MONOTONIC seconds when the engine loop last began an iteration (a
 * step or an idle wait's end): the heartbeat a stuck engine stops. 0 before
 * sched_start. Any thread. */
double sched_heartbeat(const struct sched *s);
/* 0 while the device works; INF_EDEVICE once a step, a sampling call or a
 * sync reported the device lost (sticky, ROBUSTNESS 35): every request
 * then failed with it, no step runs again and sched_submit refuses with
 * it. The caller should stop taking work and exit. Any thread. */
int sched_device_error(const struct sched *s);
/* Stop: cancel_all=1 cancels everything; 0 waits until running and queued
 * requests finish. Joins the engine thread. New submits get INF_ESHUTDOWN. */
void sched_stop(struct sched *s, int cancel_all);
void sched_free(struct sched *s); /* accepts NULL; stops first */

/* Queue a request. Returns 0 and a handle, or:
 *   INF_EFULL      the queue is full (HTTP 429, Retry-After),
 *   INF_ERANGE     it can never fit (prompt + max_tokens > n_ctx or > the whole
 *                  cache; err says the counts) (HTTP 400),
 *   INF_EINVAL     bad fields (token id out of range, ...) (HTTP 400),
 *   INF_ESHUTDOWN  stopping (HTTP 503),
 *   INF_EDEVICE    the device is lost (sched_device_error) (HTTP 503).
 * notify(ud) runs on the engine thread after a step that gave h events,
 * with h's lock held and never after sched_release(h) returned: it must only
 * signal (e.g. uv_async_send), never call sched_* on h. */
int sched_submit(struct sched *s, const struct sched_request *r, sched_notify_fn notify,
                 void *ud, struct sched_handle **out, struct inf_error *err);
/* Pop up to max events in order; returns how many. */
int sched_poll(struct sched_handle *h, struct sched_event *ev, int max);
/* Cancel (client gone, stop string found): the request leaves the batch at
 * the next step and its KV blocks are freed. Events already queued remain. */
void sched_cancel(struct sched_handle *h);
/* Cancel one choice only (its stop string matched). */
void sched_cancel_choice(struct sched_handle *h, int32_t choice);
/* The caller will not touch h again (implies cancel if unfinished). */
void sched_release(struct sched_handle *h);

void sched_get_stats(struct sched *s, struct sched_stats *st);

#endif
