/* gen — the generation lifecycle of one validated request: submit it to the
 * scheduler (one scheduler request per prompt, n choices each), turn the
 * scheduler's events into each choice's text (tok_stream: UTF-8 safe),
 * logprob entries and finish reason, apply stop strings, cancel.
 *
 * Knows nothing of HTTP or of the response format: api/format.c reads a
 * gen's choices to write JSON / SSE; api/completions.c ties a gen to a
 * connection.
 *
 * Stop strings: text that could still be the start of a stop string is held
 * back (choice.safe marks what is final); a match truncates the text there,
 * ends the choice ("stop") and cancels it in the scheduler.
 * Thread: the thread that submitted (the loop thread); the notify callback
 * given to gen_submit runs on the engine thread.
 */
#ifndef INFERD_API_GEN_H
#define INFERD_API_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "api/buf.h"
#include "api/metrics.h"
#include "api/request.h"
#include "api/think.h"
#include "api/tools.h"
#include "engine/sched.h"
#include "engine/tok.h"

/* One token's logprob entry (prompt or completion). */
struct gen_lp {
    int32_t token;
    int32_t n_top;
    int64_t offset; /* byte offset in the choice's full text (echo included) */
    float lp;
    int has_lp;     /* 0: the first prompt token (no logprob) */
    int32_t top_ids[SCHED_MAX_TOP];
    float top_lps[SCHED_MAX_TOP];
};

struct gen_prompt {
    struct sched_handle *h;
    int admitted;
    struct gen_lp *plp; /* [n] prompt logprobs (echo + logprobs), else NULL */
};

struct gen_choice {
    int prompt;
    int32_t sub;      /* choice index inside its scheduler request */
    struct tok_stream ts;
    struct buf text;  /* completion text so far (without echo) */
    size_t safe;      /* text[0..safe) is final (no stop string can start in it) */
    int done;
    const char *finish; /* "stop" / "length" once done */
    int32_t n_tokens;
    double t_last;
    struct gen_lp *lps;
    size_t n_lps, cap_lps;
    /* the formatter's cursor (api/format.c): what a stream has sent */
    size_t sent, lp_sent;
    int started, reported;
    struct toolcall_scan tc; /* with tools: the content / calls read so far */
    struct think_scan th;    /* req.think: the reasoning read so far (api/think.h) */
};

struct gen {
    struct api_req req; /* owned */
    const struct tok *tok;
    struct metrics *metrics; /* may be NULL */
    struct gen_prompt *prompts; /* [req.n_prompts] */
    int n_choices;              /* n_prompts * n, prompt-major */
    struct gen_choice *choices;
    int32_t completion_tokens;
    int failed;
    int fail_status;
    char fail_msg[256];
    double t_start, t_submit, t_first;
};

/* Take over *req (it is zeroed) and set up the choices. t_start: when the
 * request arrived (for time to first token). INF_ENOMEM; g is then still
 * safe to gen_free. */
int gen_init(struct gen *g, struct api_req *req, const struct tok *tok, struct metrics *m,
             double t_start);

/* Submit every prompt (now: for the queue-wait histogram). seed is used
 * when the request has none. On a
 * refusal err says what to answer (429 queue full, 400 never fits, 503
 * shutting down, 500) and -1 is returned; what was submitted is released. */
int gen_submit(struct gen *g, struct sched *s, sched_notify_fn notify, void *ud, uint64_t seed,
               int retry_after_s, double now, struct api_req_error *err);

/* Drain every prompt's events. on_choice(ud, i) runs after each event that
 * changed choice i (once per token: streams send one event per token).
 * Returns 1 when there were events (or the request failed), else 0. */
int gen_poll(struct gen *g, double now, void (*on_choice)(void *ud, int i), void *ud);

int gen_all_done(const struct gen *g);
/* Mark the request failed (the first failure wins). */
void gen_fail(struct gen *g, int status, const char *msg);
/* Let the scheduler go: cancel what runs, free its KV blocks next step. */
void gen_release(struct gen *g);
/* gen_release and free everything (g itself is the caller's). */
void gen_free(struct gen *g);

#endif
