/* test_sample_path — the scheduler's two sampling paths give the same events.
 *
 * Usage: test_sample_path [MODEL_FILE]  (looked up in $INFERD_SHARED/models;
 * 77 when absent). On the CPU backend, sched_config.sample_on_backend = -1
 * samples on the host (engine/sample.c over the downloaded logits, the
 * default there) and = 1 forces ops->sample over the logits left in backend
 * memory (the path CUDA takes by default). The same requests -- greedy and
 * seeded, temperature, top-k/top-p/min-p, the three penalties, logit bias,
 * n > 1, logprobs, prompt logprobs over several chunks, stop ids, min_tokens
 * (the masked steps, with and without logprobs, a stop id that is also the
 * EOG id), ignore_eos, a request whose logit_bias is too big for a
 * state slot (it samples on the host inside the backend run), and JSON
 * constraints (json_object with n = 2, a small schema greedy and under
 * every filter with min_tokens and stop ids, every first token banned by
 * logit_bias: on the backend path their allowed bits go to ops->sample;
 * their tokens must spell JSON the form accepts, closed where they end
 * "stop") -- run
 * concurrently (max_seqs below the choices: queueing, mixed batches) through
 * both, and every event must be equal bit for bit (kind, choice, pos, token,
 * logprob, top ids and logprobs, finish, error).
 *
 * Also: on the backend path a step whose rows all sample there downloads
 * no logits (the graph's host copy stays as the test wrote it), JSON-
 * constrained ones included; the host
 * path never calls ops->sample; a failing ops->sample (INF_ENOMEM, then
 * INF_EINTERNAL, injected through a wrapper of the CPU op table) ends the
 * requests it covered with that error, and the scheduler keeps serving;
 * INF_EDEVICE (the device lost) is sticky: sched_device_error says it and
 * sched_submit refuses from then on.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/graph.h"
#include "engine/jsonc.h"
#include "engine/model.h"
#include "engine/sched.h"
#include "engine/tok.h"
#include "tests/check.h"
#include "tests/sched/sched_harness.h"
#include "tests/xorshift.h"

/* ---- the CPU backend with a counting, failing ops->sample ---- */

static struct backend *cpu;
static struct backend_ops wops;
static struct backend wbe;
static atomic_int n_calls;    /* sample calls with requests */
static atomic_int fail_at;    /* 0: none; k: the k-th call from now on fails ... */
static atomic_int fail_code;  /* ... with this code, once */

static int wrap_sample(struct backend *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                       const struct backend_sample_req *reqs, int32_t n_reqs,
                       struct backend_sample_out *out)
{
    (void)be;
    if (reqs && n_reqs > 0) {
        atomic_fetch_add(&n_calls, 1);
        if (atomic_load(&fail_at) > 0 && atomic_fetch_sub(&fail_at, 1) == 1)
            return atomic_load(&fail_code);
    }
    return cpu->ops->sample(cpu, logits, n_rows, n_vocab, reqs, n_reqs, out);
}

static struct model *model;
static int32_t n_vocab, bos, eog_id = -1;

static uint64_t sp_rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(uint32_t n)
{
    return (uint32_t)(rng_step(&sp_rng) % n);
}

static int engine_new(struct engine *e, int on_backend)
{
    struct sched_config c;

    sched_config_default(&c);
    c.max_seqs = 6;
    c.kv_tokens = 4096;
    c.step_tokens = 24; /* prompts over several chunks */
    c.sample_on_backend = on_backend ? 1 : -1;
    return engine_open(e, model, &c);
}

/* ---- requests and their event streams ---- */

#define NR 24
#define REQ_BANNED 23 /* JSON, every token its form allows first banned by logit_bias */
#define MAXEV 2048

struct run {
    struct sched_handle *h;
    struct sched_event ev[MAXEV];
    int n_ev, ended, n_done, error;
};

static struct sched_request reqs[NR];
static int n_reqs;
static int32_t prompts[NR][96];
static int32_t stops[NR][4];
static struct sample_bias biases[NR][1200];
static struct run runs[2][NR];
static struct jsonc *json_obj, *json_schema; /* requests 20-23 */
static struct sample_bias banned[1024];     /* request 23's bias */
static int32_t n_banned;

/* {"a": a string of at most 5 characters, "b": an integer}, "a" required. */
static struct jsonc *small_schema(void)
{
    struct jsonc_builder *b = jsonc_builder_new();
    struct jsonc *g = NULL;
    int32_t obj = b ? jsonc_b_node(b, JSONC_OBJECT) : -1;
    int32_t str = b ? jsonc_b_node(b, JSONC_STRING) : -1;
    int32_t sl = b ? jsonc_b_slots(b, 2) : -1;
    if (obj >= 0 && str >= 0 && sl >= 0 && !jsonc_b_slot(b, sl, "\"a\"", 3, str) &&
        !jsonc_b_slot(b, sl + 1, "\"b\"", 3, JSONC_N_NUMBER)) {
        jsonc_b_shape(b, str, 0, 0, 0, 5, 0);
        jsonc_b_shape(b, obj, sl, 2, 0, -1, 1);
        if (jsonc_b_finish(b, obj, &g))
            g = NULL;
    }
    jsonc_builder_free(b);
    return g;
}

static void notify(void *ud)
{
    (void)ud;
}

static void poll_run(struct run *r, int n_choices)
{
    struct sched_event ev[32];
    int n;

    while ((n = sched_poll(r->h, ev, 32)) > 0) {
        for (int i = 0; i < n; i++) {
            if (r->n_ev < MAXEV)
                r->ev[r->n_ev++] = ev[i];
            if (ev[i].kind == SCHED_EV_DONE)
                r->n_done++;
            if (ev[i].kind == SCHED_EV_ERROR)
                r->error = ev[i].error;
        }
    }
    r->ended = r->error || r->n_done == n_choices;
}

/* Submit reqs[i0..i1), start the engine when `start` (so that everything
 * is queued first and admitted in one order), wait for all of them. */
static void run_all(struct sched *s, struct run *rs, int i0, int i1, int start)
{
    struct inf_error err = {0};
    double end = harness_now_s() + 300;

    for (int i = i0; i < i1; i++) {
        memset(&rs[i], 0, sizeof(rs[i]));
        CHECK(sched_submit(s, &reqs[i], notify, NULL, &rs[i].h, &err) == 0);
    }
    if (start)
        CHECK(sched_start(s, NULL, NULL) == 0);
    for (;;) {
        int left = 0;

        for (int i = i0; i < i1; i++) {
            if (!rs[i].h)
                continue;
            if (!rs[i].ended)
                poll_run(&rs[i], reqs[i].n_choices);
            left += !rs[i].ended;
        }
        if (!left)
            break;
        if (harness_now_s() > end) {
            fprintf(stderr, "timeout: %d requests not finished\n", left);
            fails++;
            break;
        }
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    for (int i = i0; i < i1; i++)
        if (rs[i].h)
            sched_release(rs[i].h);
}

static int same_event(const struct sched_event *a, const struct sched_event *b)
{
    int n = a->n_top;

    if (a->kind != b->kind || a->choice != b->choice || a->finish != b->finish ||
        a->error != b->error)
        return 0;
    if (a->kind != SCHED_EV_TOKEN && a->kind != SCHED_EV_PROMPT)
        return 1;
    return a->pos == b->pos && a->token == b->token && a->n_top == b->n_top &&
           !memcmp(&a->logprob, &b->logprob, sizeof(float)) &&
           !memcmp(a->top_ids, b->top_ids, (size_t)n * sizeof(int32_t)) &&
           !memcmp(a->top_lps, b->top_lps, (size_t)n * sizeof(float));
}

/* Events of one request per choice in order (choices interleave by step,
 * which both paths share, but compare per choice to name the first diff). */
static int compare(int i, const struct run *a, const struct run *b)
{
    if (a->n_ev != b->n_ev) {
        fprintf(stderr, "request %d: %d events on the host, %d on the backend\n", i, a->n_ev,
                b->n_ev);
        return 0;
    }
    for (int k = 0; k < a->n_ev; k++)
        if (!same_event(&a->ev[k], &b->ev[k])) {
            const struct sched_event *x = &a->ev[k], *y = &b->ev[k];

            fprintf(stderr,
                    "request %d event %d: host kind %d choice %d pos %d token %d lp %a fin %d, "
                    "backend kind %d choice %d pos %d token %d lp %a fin %d\n",
                    i, k, x->kind, x->choice, x->pos, x->token, x->logprob, x->finish, y->kind,
                    y->choice, y->pos, y->token, y->logprob, y->finish);
            return 0;
        }
    return 1;
}

/* Every sampling filter and penalty at once, seeded. */
static void every_filter(struct sched_request *r, float temperature, int32_t top_k, float top_p,
                         uint64_t seed)
{
    r->sampling.temperature = temperature;
    r->sampling.top_k = top_k;
    r->sampling.top_p = top_p;
    r->sampling.min_p = 0.02f;
    r->sampling.repetition_penalty = 1.1f;
    r->sampling.presence_penalty = 0.2f;
    r->sampling.frequency_penalty = 0.3f;
    r->sampling.seed = seed;
}

static struct sched_request *add(int32_t n_prompt, int32_t max_tokens)
{
    struct sched_request *r = &reqs[n_reqs];
    int32_t *p = prompts[n_reqs];

    n_reqs++;
    p[0] = bos >= 0 ? bos : 1;
    for (int32_t i = 1; i < n_prompt; i++) /* repeats, for the penalties */
        p[i] = i > 4 && rnd(3) == 0 ? p[rnd((uint32_t)i)]
                                    : 3 + (int32_t)rnd((uint32_t)(n_vocab - 3 < 400 ? n_vocab - 3 : 400));
    request_init(r, p, n_prompt, max_tokens);
    return r;
}

/* The greedy continuation of a short prompt on the host: stop ids that
 * really occur. */
static int32_t greedy_tok[40];

static void build_requests(void)
{
    struct sched_request *r;

    n_reqs = 0;
    r = add(12, 24); /* 0: greedy, ends on EOG or length */
    r = add(30, 30); /* 1: greedy, ignore_eos, logprobs 5 */
    r->ignore_eos = 1;
    r->logprobs = 5;
    r = add(17, 30); /* 2: temperature, seeded */
    r->sampling.temperature = 0.8f;
    r->sampling.seed = 11;
    r->ignore_eos = 1;
    r = add(40, 30); /* 3: top_k + temperature, logprobs 2 */
    r->sampling.temperature = 1.1f;
    r->sampling.top_k = 20;
    r->sampling.seed = 12;
    r->logprobs = 2;
    r = add(9, 30); /* 4: top_p */
    r->sampling.temperature = 0.9f;
    r->sampling.top_p = 0.8f;
    r->sampling.seed = 13;
    r->ignore_eos = 1;
    r = add(25, 30); /* 5: min_p */
    r->sampling.temperature = 1.3f;
    r->sampling.min_p = 0.05f;
    r->sampling.seed = 14;
    r->ignore_eos = 1;
    r = add(50, 40); /* 6: penalties, greedy */
    r->sampling.repetition_penalty = 1.3f;
    r->sampling.presence_penalty = 0.5f;
    r->sampling.frequency_penalty = 0.4f;
    r->ignore_eos = 1;
    r = add(33, 40); /* 7: everything, seeded, logprobs 20 */
    every_filter(r, 0.7f, 50, 0.95f, 15);
    r->logprobs = 20;
    r->ignore_eos = 1;
    r = add(20, 30); /* 8: logit bias: bans and a boost */
    biases[8][0] = (struct sample_bias){greedy_tok[0], -100.0f};
    biases[8][1] = (struct sample_bias){greedy_tok[1], -100.0f};
    biases[8][2] = (struct sample_bias){7, 4.5f};
    biases[8][3] = (struct sample_bias){9, -2.0f};
    r->sampling.bias = biases[8];
    r->sampling.n_bias = 4;
    r->sampling.temperature = 0.6f;
    r->sampling.seed = 16;
    r->logprobs = 3;
    r->ignore_eos = 1;
    r = add(37, 25); /* 9: n = 3 seeded, logprobs 4 (first token: 3 requests on one row) */
    r->n_choices = 3;
    r->sampling.temperature = 0.9f;
    r->sampling.top_k = 40;
    r->sampling.seed = 1234;
    r->logprobs = 4;
    r->ignore_eos = 1;
    r = add(21, 20); /* 10: n = 2 greedy with penalties */
    r->n_choices = 2;
    r->sampling.frequency_penalty = 0.6f;
    r->ignore_eos = 1;
    r = add(70, 8); /* 11: prompt logprobs (echo) over chunks, logprobs 3 */
    r->prompt_logprobs = 1;
    r->logprobs = 3;
    r->ignore_eos = 1;
    r = add(60, 4); /* 12: prompt logprobs, logprobs -1 -> 0 tops */
    r->prompt_logprobs = 1;
    r = add(12, 30); /* 13: stop ids that occur (greedy on prompt 0's continuation) */
    memcpy(prompts[13], prompts[0], 12 * sizeof(int32_t));
    stops[13][0] = greedy_tok[5];
    stops[13][1] = greedy_tok[8];
    r->stop_ids = stops[13];
    r->n_stop_ids = 2;
    r->ignore_eos = 1;
    r = add(12, 30); /* 14: min_tokens over those stop ids, logprobs (masked rescoring) */
    memcpy(prompts[14], prompts[0], 12 * sizeof(int32_t));
    stops[14][0] = greedy_tok[2];
    stops[14][1] = greedy_tok[3];
    r->stop_ids = stops[14];
    r->n_stop_ids = 2;
    r->min_tokens = 7;
    r->logprobs = 5;
    r = add(15, 30); /* 15: min_tokens, sampled, a stop id that is also EOG, logprobs */
    stops[15][0] = eog_id >= 0 ? eog_id : 2;
    stops[15][1] = greedy_tok[4];
    r->stop_ids = stops[15];
    r->n_stop_ids = 2;
    r->min_tokens = 10;
    r->sampling.temperature = 1.0f;
    r->sampling.seed = 17;
    r->logprobs = 6;
    r = add(15, 20); /* 16: min_tokens without logprobs, n = 2 */
    r->n_choices = 2;
    r->min_tokens = 12;
    r->sampling.temperature = 1.2f;
    r->sampling.seed = 18;
    r = add(26, 30); /* 17: more logit_bias than a state slot holds: host inside the backend run */
    for (int i = 0; i < 1100; i++)
        biases[17][i] = (struct sample_bias){i % n_vocab, (float)(i % 7) - 3.0f};
    r->sampling.bias = biases[17];
    r->sampling.n_bias = 1100;
    r->sampling.temperature = 0.8f;
    r->sampling.seed = 19;
    r->logprobs = 2;
    r->ignore_eos = 1;
    r = add(5, 1); /* 18: one token */
    r->logprobs = 1;
    r = add(12, 20); /* 19: a likely token masked twice (listed twice) before min_tokens */
    memcpy(prompts[19], prompts[0], 12 * sizeof(int32_t));
    stops[19][0] = greedy_tok[1];
    stops[19][1] = greedy_tok[1];
    r->stop_ids = stops[19];
    r->n_stop_ids = 2;
    r->min_tokens = 8;
    r->logprobs = 5;
    r->ignore_eos = 1;
    r = add(14, 40); /* 20: JSON mode, n = 2 seeded, logprobs 2 */
    r->n_choices = 2;
    r->sampling.temperature = 0.9f;
    r->sampling.seed = 21;
    r->logprobs = 2;
    r->json = json_obj;
    r = add(18, 40); /* 21: a small schema, greedy */
    r->json = json_schema;
    r = add(16, 40); /* 22: the schema, every sampling filter, min_tokens, stop ids, logprobs */
    every_filter(r, 1.1f, 30, 0.9f, 23);
    r->min_tokens = 4;
    stops[22][0] = eog_id >= 0 ? eog_id : 2;
    stops[22][1] = greedy_tok[2];
    r->stop_ids = stops[22];
    r->n_stop_ids = 2;
    r->logprobs = 3;
    r->json = json_schema;
    r = add(10, 10); /* 23: JSON mode with every first token banned: ends at once, "length" */
    memcpy(biases[REQ_BANNED], banned, (size_t)n_banned * sizeof(banned[0]));
    r->sampling.bias = biases[REQ_BANNED];
    r->sampling.n_bias = n_banned;
    r->sampling.temperature = 0.7f;
    r->sampling.seed = 24;
    r->logprobs = 1;
    r->json = json_obj;
}

/* The tokens of every choice of a JSON-constrained run spell text its form
 * accepts, closed where the choice ended "stop". */
static int json_spelled(const struct sched_request *rq, const struct run *r,
                        const struct jsonc_vocab *v)
{
    struct jsonc_state st[4];
    int ok = 1, tokens = 0;
    for (int c = 0; c < rq->n_choices && c < 4; c++)
        jsonc_state_init(rq->json, &st[c]);
    for (int i = 0; i < r->n_ev; i++) {
        const struct sched_event *e = &r->ev[i];
        if (e->choice >= 4)
            return 0; /* the requests above have n <= 2 */
        if (e->kind == SCHED_EV_TOKEN) {
            tokens++;
            ok &= jsonc_feed_token(rq->json, v, &st[e->choice], e->token) == 0;
        } else if (e->kind == SCHED_EV_DONE && e->finish == SCHED_FINISH_STOP) {
            ok &= jsonc_closed(&st[e->choice]) || jsonc_can_end(rq->json, &st[e->choice]);
        }
    }
    return ok && tokens > 0;
}

static void case_same_events(void)
{
    struct engine e[2];
    int bad = 0, events = 0, calls_host = 0, calls_dev = 0;

    for (int path = 0; path < 2; path++) {
        if (engine_new(&e[path], path)) {
            fails++;
            return;
        }
        atomic_store(&n_calls, 0);
        /* the backend path's scheduler builds the JSON tables up front
         * (the daemon's startup), the host path's at the first constrained
         * request: the events must not tell them apart */
        if (path == 1) {
            CHECK(sched_prepare_json(e[path].s) == 0);
            CHECK(sched_prepare_json(e[path].s) == 0); /* built already: nothing to do */
        }
        run_all(e[path].s, runs[path], 0, n_reqs, 1);
        if (path == 0)
            calls_host = atomic_load(&n_calls);
        else
            calls_dev = atomic_load(&n_calls);
    }
    for (int i = 0; i < n_reqs; i++) {
        CHECK(runs[0][i].error == 0 && runs[1][i].error == 0);
        events += runs[0][i].n_ev;
        if (!compare(i, &runs[0][i], &runs[1][i]))
            bad++;
    }
    printf("same events: %d requests, %d events, %d differ; ops->sample calls: host path %d, "
           "backend path %d\n",
           n_reqs, events, bad, calls_host, calls_dev);
    CHECK(bad == 0);
    struct jsonc_vocab *v = NULL;
    CHECK(jsonc_vocab_new(model_tok(model), &v) == 0);
    for (int i = 0; v && i < n_reqs; i++)
        if (reqs[i].json && i != REQ_BANNED)
            CHECK(json_spelled(&reqs[i], &runs[1][i], v));
    jsonc_vocab_free(v);
    { /* request 23: no token, one "length" end (both paths, equal above) */
        const struct run *rb = &runs[1][REQ_BANNED];
        CHECK(rb->n_ev >= 1 && rb->ev[rb->n_ev - 1].kind == SCHED_EV_DONE &&
              rb->ev[rb->n_ev - 1].finish == SCHED_FINISH_LENGTH);
        for (int k = 0; k < rb->n_ev; k++)
            CHECK(rb->ev[k].kind != SCHED_EV_TOKEN);
    }
    CHECK(calls_host == 0 && calls_dev > 0);
    engine_free(&e[0]);
    engine_free(&e[1]);
}

/* A device-only run downloads no logits; a failing op ends its requests
 * with its code; the next request is served normally. */
static void case_faults(void)
{
    struct engine e;
    float *hl;
    const size_t nf = 64;
    int kept = 1;
    struct run *rs = runs[1];

    if (engine_new(&e, 1)) {
        fails++;
        return;
    }
    CHECK(sched_start(e.s, NULL, NULL) == 0);
    hl = graph_logits(e.g);
    for (size_t i = 0; i < nf; i++)
        hl[i] = -12345.0f;
    run_all(e.s, rs, 0, 2, 0);
    for (size_t i = 0; i < nf; i++)
        kept &= hl[i] == -12345.0f;
    CHECK(kept);
    CHECK(compare(0, &runs[0][0], &rs[0]) && compare(1, &runs[0][1], &rs[1]));
    /* JSON-constrained requests too: their allowed bits go up, no logits down */
    run_all(e.s, rs, 20, 24, 0);
    for (size_t i = 0; i < nf; i++)
        kept &= hl[i] == -12345.0f;
    CHECK(kept);
    for (int i = 20; i < 24; i++)
        CHECK(rs[i].error == 0 && compare(i, &runs[0][i], &rs[i]));

    /* The third call fails: it ends the requests it samples for. Which of
     * the two share it depends on whether the running engine picked the
     * second up in the same step as the first, so: at least one ends with
     * the code, and one that does not is served as on the host path. */
    atomic_store(&fail_code, INF_ENOMEM);
    atomic_store(&fail_at, 3);
    run_all(e.s, rs, 1, 3, 0);
    int n_failed = 0;
    for (int i = 1; i < 3; i++) {
        if (rs[i].error == INF_ENOMEM)
            n_failed++;
        else
            CHECK(rs[i].error == 0 && compare(i, &runs[0][i], &rs[i]));
    }
    CHECK(n_failed >= 1);
    run_all(e.s, rs, 1, 2, 0);
    CHECK(rs[1].error == 0 && compare(1, &runs[0][1], &rs[1]));

    /* a call the device refused without harm: those requests, no more */
    atomic_store(&fail_code, INF_EINTERNAL);
    atomic_store(&fail_at, 5);
    run_all(e.s, rs, 9, 10, 0);
    CHECK(rs[9].error == INF_EINTERNAL);
    run_all(e.s, rs, 9, 10, 0);
    CHECK(rs[9].error == 0 && compare(9, &runs[0][9], &rs[9]));
    /* the masked rescoring call failing */
    atomic_store(&fail_code, INF_ENOMEM);
    atomic_store(&fail_at, 2);
    run_all(e.s, rs, 14, 15, 0);
    CHECK(rs[14].error == INF_ENOMEM);
    run_all(e.s, rs, 14, 15, 0);
    CHECK(rs[14].error == 0 && compare(14, &runs[0][14], &rs[14]));
    CHECK(sched_device_error(e.s) == 0);
    /* a lost device is sticky (ROBUSTNESS 35): its requests fail, and every
     * later submit is refused with it */
    atomic_store(&fail_code, INF_EDEVICE);
    atomic_store(&fail_at, 5);
    run_all(e.s, rs, 9, 10, 0);
    CHECK(rs[9].error == INF_EDEVICE);
    CHECK(sched_device_error(e.s) == INF_EDEVICE);
    {
        struct sched_handle *h = NULL;
        struct inf_error err = {0};

        CHECK(sched_submit(e.s, &reqs[9], notify, NULL, &h, &err) == INF_EDEVICE && !h);
    }
    {
        struct sched_stats st;

        sched_get_stats(e.s, &st);
        CHECK(st.kv_blocks_used == 0 && st.running == 0);
    }
    printf("faults: no logits downloaded; INF_ENOMEM and INF_EINTERNAL end their requests, the "
           "next ones match the host path; INF_EDEVICE is sticky\n");
    engine_free(&e);
}

int main(int argc, char **argv)
{
    const char *shared = getenv("INFERD_SHARED");
    const char *mf = argc > 1 ? argv[1] : "stories260K.gguf";
    char path[1024];
    struct inf_error err = {0};
    FILE *f;

    unsetenv("INFERD_SAMPLE_ON_BACKEND"); /* the test picks each path itself */
    snprintf(path, sizeof(path), "%s/models/%s", shared ? shared : "../shared", mf);
    f = fopen(path, "rb");
    if (!f) {
        printf("skip: %s not found\n", path);
        return 77;
    }
    fclose(f);
    cpu = cpu_backend_new(getenv("INFERD_TEST_THREADS") ? atoi(getenv("INFERD_TEST_THREADS")) : 1);
    CHECK(cpu && cpu->ops->sample && !cpu->ops->async);
    if (!cpu)
        return 1;
    wops = *cpu->ops;
    wops.sample = wrap_sample;
    wbe.ops = &wops;
    wbe.ctx = cpu->ctx;
    if (model_load(path, &wbe, &model, &err) != 0) {
        fprintf(stderr, "model_load %s: %s\n", path, err.msg);
        return 1;
    }
    n_vocab = model_hparams(model)->n_vocab;
    bos = tok_bos(model_tok(model));
    for (int32_t t = 0; t < n_vocab && eog_id < 0; t++)
        if (tok_is_eog(model_tok(model), t))
            eog_id = t;
    printf("%s (vocab %d, eog %d)\n", mf, n_vocab, eog_id);
    CHECK(jsonc_new_object(&json_obj) == 0);
    json_schema = small_schema();
    CHECK(json_schema != NULL);
    { /* every token a JSON object may start with (request 23 bans them) */
        struct jsonc_vocab *v = NULL;
        struct jsonc_state st, *work;
        uint32_t *bits = calloc(((size_t)n_vocab + 31) / 32, sizeof(uint32_t));
        CHECK(jsonc_vocab_new(model_tok(model), &v) == 0 && bits);
        work = v ? malloc(jsonc_vocab_work_states(v) * sizeof(*work)) : NULL;
        CHECK(work != NULL);
        if (v && bits && work) {
            jsonc_state_init(json_obj, &st);
            CHECK(jsonc_allow(json_obj, v, &st, work, bits) > 0);
            for (int32_t t = 0; t < n_vocab && n_banned < 1024; t++)
                if ((bits[t / 32] >> (t % 32)) & 1)
                    banned[n_banned++] = (struct sample_bias){t, -100.0f};
            CHECK(n_banned > 0 && n_banned < 1024);
        }
        free(work);
        free(bits);
        jsonc_vocab_free(v);
    }

    /* stop ids that occur: prompt 0's greedy continuation on the host */
    {
        struct engine e;

        build_requests();
        reqs[0].ignore_eos = 1;
        reqs[0].max_tokens = 20;
        if (engine_new(&e, 0) == 0) {
            CHECK(sched_start(e.s, NULL, NULL) == 0);
            run_all(e.s, runs[0], 0, 1, 0);
            for (int k = 0, n = 0; k < runs[0][0].n_ev && n < 40; k++)
                if (runs[0][0].ev[k].kind == SCHED_EV_TOKEN)
                    greedy_tok[n++] = runs[0][0].ev[k].token;
            engine_free(&e);
        } else {
            fails++;
        }
        sp_rng = 0x2545f4914f6cdd1dull; /* the same prompts again */
        build_requests();
    }
    case_same_events();
    case_faults();
    jsonc_free(json_obj);
    jsonc_free(json_schema);
    model_free(model);
    backend_free(cpu);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
