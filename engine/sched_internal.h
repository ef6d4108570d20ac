/* sched_internal — what the scheduler's files share (engine/sched.c has the
 * design): the request, sequence and scheduler structs, and the functions
 * one file gives the others. Not for use outside engine/sched*.c.
 *
 *   sched.c         the public API (sched.h), sched_new/free, the engine loop
 *   sched_step.c    one step: build the batch, submit, wait, advance
 *   sched_admit.c   admission from the queue, KV reservation, prefix cache
 *   sched_req.c     requests: lifetime, events, publishing, finishing, failing
 *   sched_sample.c  sampling on the host and on the backend
 *
 * Threads: everything here runs on the engine thread, except where a
 * comment says which lock guards it (sched.c's file comment).
 */
#ifndef INFERD_SCHED_INTERNAL_H
#define INFERD_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine/jsonc.h"
#include "engine/kv.h"
#include "engine/sample.h"
#include "engine/sched.h"

struct backend;
struct backend_sample_req;
struct backend_sample_out;
struct graph;
struct model;
struct tok;

enum rq_state { RQ_QUEUED = 0, RQ_PREFILL, RQ_DECODE, RQ_FINISHED };

/* One choice under a JSON constraint (sched_sample.c). */
struct sched_json {
    struct jsonc_state st;   /* its recognizer */
    struct jsonc_state prev; /* the state its allowed set was worked out from */
    uint8_t have;            /* prev is set */
    uint8_t ready;           /* the set is current (worked out while the device computed) */
};

/* One choice of a running request. */
struct seq {
    struct sched_handle *r;
    int32_t choice;
    struct kv_seq t;     /* block table (storage in the slot pool) */
    int32_t *gen;        /* [n_ctx] generated tokens (slot pool) */
    int32_t n_past;      /* positions whose K/V are in the cache */
    int32_t n_gen;
    int32_t last;        /* sampled, not yet fed: goes in at position n_past */
    struct sampler *smp;
    uint64_t chain;      /* hash of the last hashed full block */
    int32_t n_hashed;    /* full blocks whose hash chain is known */
    int done;
    int32_t sreq;        /* backend sampling: this step's request index; SREQ_* */
};

#define SREQ_NONE (-1)     /* no request this step */
#define SREQ_CANCELED (-2) /* cancelled when the requests were built (first token) */
#define SREQ_JSON_END (-3) /* a JSON-constrained choice with no allowed token: ends (length) */
#define SREQ_NOMEM (-4)    /* its allowed set could not be worked out: the request fails */

struct sched_handle {
    /* immutable after submit */
    int32_t *prompt;
    int32_t n_prompt, n_choices, max_tokens, min_tokens;
    int ignore_eos;
    int32_t *stop_ids;
    int32_t n_stop_ids;
    struct sample_params sp; /* sp.bias points at bias below */
    struct sample_bias *bias;
    int32_t logprobs;
    int prompt_logprobs;
    sched_notify_fn notify;
    void *ud;

    /* shared with the client */
    pthread_mutex_t mu;
    /* events: [head, vis) visible to sched_poll, [vis, tail) pushed during
     * the current step, published with the step's stats at its end */
    struct sched_event *ev;
    int32_t ev_head, ev_vis, ev_tail, ev_cap;
    /* engine thread, under mu: the tail at the end of the last step, which
     * is what publishing that step makes visible (ev_vis <= ev_mark <= ev_tail) */
    int32_t ev_mark;
    int released;           /* under mu */
    atomic_int cancel;
    atomic_uchar *cancel_choice; /* [n_choices] */
    atomic_int refs;

    /* engine thread */
    float *mask_saved;     /* [n_eog + n_stop_ids] logits masked before min_tokens */
    struct sched_handle *next; /* admission queue link (under s->mu) */
    int state;
    int32_t n_prefilled;   /* prompt positions in the cache (choice 0) */
    int32_t chunk;         /* prompt tokens in this step's batch */
    int32_t resv;          /* KV blocks still reserved for this request */
    int32_t n_live;        /* choices not finished */
    struct seq **seqs;     /* [n_choices] */
    int touched;           /* got events this step */
    int failed;            /* an ERROR event went out: nothing more */
    int accept_pending;    /* admitted this step: prompt not yet fed to the samplers */
    int dev;               /* samples on the backend (its choices' state slots) */
    int32_t n_mask;        /* ids masked before min_tokens: EOG (unless ignore_eos), stop ids */
    struct jsonc *json;    /* NULL, or the JSON constraint (a copy) */
    struct sched_json *jc; /* [n_choices] */
    uint32_t *jallow;      /* [n_choices][sched_json_words] their allowed tokens */
};

/* What a logits row of the batch is for. */
enum row_kind { ROW_PROMPT_LP = 1, ROW_FIRST, ROW_DECODE };
struct row_use {
    int kind;
    struct sched_handle *r;
    struct seq *q;   /* ROW_DECODE */
    int32_t pos;     /* ROW_PROMPT_LP: the prompt position of the row */
};

struct sched {
    struct model *m;
    struct graph *g;
    struct kv *kv;
    const struct tok *tok;
    int32_t n_vocab;
    struct sched_config cfg; /* resolved */
    int32_t max_tokens_fwd, max_logits, max_blocks_seq;

    int32_t *eog;            /* end-of-generation ids */
    int32_t n_eog;

    /* slot pool */
    struct seq *slots;
    int32_t *slot_free;
    int32_t n_slot_free;
    int32_t *slot_blocks;    /* [max_seqs][max_blocks_seq] */
    int32_t *slot_gen;       /* [max_seqs][n_ctx] */

    /* running requests in admission order */
    struct sched_handle **run;
    int32_t n_run;
    int32_t n_seq_live;

    /* batch scratch, sized once */
    int32_t *b_tok, *b_pos, *b_seq, *b_lrows;
    const int32_t **b_bt;
    struct row_use *b_use;
    int32_t *tokbuf;         /* [block_size] */
    struct sched_handle **touched, **dropped;
    int32_t n_touched, n_dropped, touched_cap;
    /* the last step, not yet published: its stats, the requests it touched
     * (events up to their ev_mark), the requests it finished */
    struct sched_stats pend_stats;
    int pend_valid;
    struct sched_handle **pend_touched, **pend_dropped;
    int32_t n_pend_touched, n_pend_dropped;

    /* shared with submitters (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct sched_handle *q_head, *q_tail;
    int32_t n_queued;
    int stopping, cancel_all, started, thread_done;
    struct sched_stats stats;
    pthread_t th;
    void (*watchdog)(void *ud);
    void *wd_ud;
    _Atomic uint64_t beat_ns; /* sched_heartbeat, in ns */
    /* sticky: the INF_EDEVICE that lost the device (written by the engine
     * under mu, read by sched_submit under mu and by sched_device_error) */
    atomic_int dev_err;

    uint64_t st_prefix_hit_tokens, st_prefix_hits, st_prompt_tokens, st_generated;
    uint64_t st_steps, st_done;
    double st_step_s;
    uint64_t st_dec_steps, st_dec_rows; /* steps of decode rows only (no prompt chunk) */
    double st_dec_s;
    uint64_t st_json_tokens; /* sampled under a JSON constraint */
    double st_json_s;        /* working out allowed sets */

    /* Sampling on the backend (see sched_sample_rows_backend), all sized once in
     * sched_new: one sample_state slot per sequence slot in backend memory
     * and its host_alloc staging (an upload from it is queued), the
     * requests and results of one step's ops->sample calls. */
    struct backend *be;
    int dev;                 /* 1: admitted requests sample on the backend */
    size_t st_bytes;         /* one state slot */
    int32_t st_max_bias, st_max_mask;
    char *d_states;          /* backend memory [max_seqs][st_bytes] */
    char *h_states;          /* host_alloc [max_seqs][st_bytes] */
    uint32_t *d_allow;       /* backend memory [max_seqs][sched_json_words]: a JSON- */
    uint32_t *h_allow;       /* constrained choice's allowed bits, and their staging */
    int32_t *mask_buf;       /* [st_max_mask] */
    struct backend_sample_req *sreq; /* host_alloc [sreq_cap] */
    struct backend_sample_out *sout; /* host_alloc [sreq_cap] */
    int32_t *sreq_k;         /* [sreq_cap] the logits row use (b_use index) of a request */
    struct seq **sreq_q;     /* [sreq_cap] the sequence it samples for (NULL: scores) */
    int32_t *sreq_lp;        /* [sreq_cap] where its logprobs are (itself, or a score request) */
    int32_t *row_req;        /* [max_logits] a prompt logprob row's request */
    int32_t sreq_cap;

    /* JSON constraints (sched_sample.c), built at the first such request:
     * the vocabulary's tables, the masked row, the recognizer states
     * jsonc_allow walks with. */
    struct jsonc_vocab *jv;
    float *jrow;
    struct jsonc_state *jwork;
};

/* Backend sampling limits of a state slot: requests with more logit_bias
 * entries or masked ids than this sample on the host (same results). */
#define SCHED_DEV_MAX_BIAS 1024 /* the daemon's default max_logit_bias */
#define SCHED_DEV_MAX_STOP 128  /* stop ids beyond the EOG ids */

/* 32-bit words of one choice's allowed-token bits (sched_handle.jallow) */
static inline size_t sched_json_words(const struct sched *s)
{
    return ((size_t)s->n_vocab + 31) / 32;
}

static inline double sched_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- sched_req.c: requests: lifetime, events, finishing ---- */

/* Free r (refs reached 0, or it never got out of sched_submit). */
void sched_req_destroy(struct sched_handle *r);
/* Let go of one reference (engine or client); the last one frees. */
void sched_req_unref(struct sched_handle *r);
/* Append one event (hidden until the step is published); 0 or INF_ENOMEM. */
int sched_req_push_event(struct sched *s, struct sched_handle *r, const struct sched_event *e);
void sched_req_push_simple(struct sched *s, struct sched_handle *r, int kind, int32_t choice,
                           int finish, int error);
/* Queue the event of prompt token pos + 1 (echo with logprobs), whose
 * logprob and top entries the caller has filled in; a failed append fails
 * the request (INF_ENOMEM). */
void sched_req_prompt_event(struct sched *s, struct sched_handle *r, int32_t pos, struct sched_event *e);
/* Make r's events visible and wake its client (a request that never ran). */
void sched_req_publish(struct sched_handle *r);
/* Publish the last step: its stats, its events, then drop what it finished. */
void sched_req_flush_pending(struct sched *s);
/* q ends with finish (a DONE event unless the request failed). */
void sched_req_finish_choice(struct sched *s, struct seq *q, int finish);
/* r ends with an ERROR event; INF_EDEVICE fails every request (sticky). */
void sched_req_fail(struct sched *s, struct sched_handle *r, int code);
/* The cancels the clients asked for, or all of them. */
void sched_req_apply_cancels(struct sched *s, int cancel_all);

/* ---- sched_admit.c: admission and the prefix cache ---- */

/* Every KV block r can ever need (sched.h: admission). */
int32_t sched_admit_blocks_needed(const struct sched *s, const struct sched_handle *r);
/* Cancelled queued requests leave the queue; then admit from the head. */
void sched_admit_from_queue(struct sched *s, int cancel_all);
/* Register the full blocks of q that are not hashed yet. */
void sched_admit_register_blocks(struct sched *s, struct seq *q);

/* ---- sched_sample.c: sampling ---- */

/* Sample q's next token from its host logits row L; push the event. */
void sched_sample_next(struct sched *s, struct seq *q, float *L);
/* While the device computes: the allowed tokens of the step's JSON-constrained
 * choices (nl logits rows), so sampling them only masks. */
void sched_sample_json_ahead(struct sched *s, int32_t nl);
/* Every row of the step (nl logits rows) whose request samples on the backend. */
void sched_sample_rows_backend(struct sched *s, int32_t nl);
/* The prompts of the requests admitted this step, into their samplers. */
void sched_sample_feed_prompts(struct sched *s, int inflight);
/* Decide and reserve sampling on the backend (at sched_new). */
void sched_sample_setup(struct sched *s, const struct sched_config *c);

/* ---- sched_step.c ---- */

/* One step of the engine loop (sched.c's file comment, steps 1-8). */
void sched_step(struct sched *s, int cancel_all);

#endif
