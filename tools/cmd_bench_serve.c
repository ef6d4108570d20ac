/* cmd_bench_serve — the scheduler's throughput and latency versus
 * concurrency, without HTTP.
 *
 *   inferd bench-serve --model M [--concurrency 1,4,16,64] [--max-tokens 64]
 *                      [--prompt-tokens 32] [--threads 2] [--rounds 2]
 *                      [--step-tokens 512] [--block-size 16] [--json true|false]
 *
 * For each concurrency C a fresh graph + scheduler (max_seqs = C) serves a
 * closed loop of C clients: each client submits a request (a distinct random
 * prompt, so no prefix-cache hits; ignore_eos, so every request generates
 * max_tokens), and when it ends submits the next, until C * rounds requests
 * are done. Time stamps are taken by this thread as it polls the events, as
 * a client would see them. Reported per C: aggregate generated tokens/s over
 * the wall time, mean time to first token, mean inter-token latency, and
 * the engine's step count. A one-request warm-up runs first.
 *
 * --json true constrains every request to a JSON object whose one string
 * property must be longer than the request can write (so it never closes
 * and the request still generates max_tokens): the cost of constrained
 * decoding where a JSON answer spends most of its tokens, inside a string
 * (host sampling of the downloaded row, the allowed-token set, the mask).
 *
 * Also per C, two decode rates: the one the clients see, C over the mean
 * inter-token latency (itl_t/s: a stream's gaps include the steps it
 * shares with other requests' prompt chunks), and the pure decode rate,
 * rows over seconds of the steps that held decode rows only (dec_t/s,
 * with their mean rows: what llama.cpp's llama-batched-bench reports as
 * S_TG, whose decode steps never carry a prompt). Beside them
 * llama.cpp's batched-bench figure where the run matches its conditions
 * (bs_peer: the CUDA backend, the Qwen2.5-7B shape, 512-token prompts, 128
 * generated tokens, C of 1, 8, 32 or 64): compare it with dec_t/s.
 * Thread: the main thread is the client; the scheduler runs its own thread.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/backend_open.h"
#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/graph.h"
#include "engine/jsonc.h"
#include "engine/log.h"
#include "engine/model.h"
#include "engine/sched.h"
#include "engine/tok.h"
#include "tools/cmds.h"

#define BS_MAX_CONC 16

/* llama.cpp's llama-batched-bench on one H200, decode tok/s of all
 * sequences (../shared/peer/llamacpp-h200.md, re-measured 2026-12-01 on
 * inferd's own Qwen2.5-7B-shaped Q4_K_M bytes, flash-attn on, 512-token
 * prompts, 128 generated each) */
static const struct {
    int32_t seqs;
    double decode;
} bs_peer[] = {{1, 267.0}, {8, 951.0}, {32, 3357.0}, {64, 4630.0}};
#define BS_PEER_PROMPT 512
#define BS_PEER_GEN 128
#define BS_PEER_EMBD 3584 /* the Qwen2.5-7B shape: n_embd, n_layer */
#define BS_PEER_LAYERS 28

/* bs_peer's figure for C, or 0 where the run's conditions are not its own */
static double bs_peer_decode(const struct backend *be, const struct model *m, int32_t conc, int32_t n_prompt,
                             int32_t max_tokens)
{
    const struct model_hparams *hp = model_hparams(m);
    if (strcmp(be->ops->name, "cuda") || n_prompt != BS_PEER_PROMPT || max_tokens != BS_PEER_GEN ||
        hp->n_embd != BS_PEER_EMBD || hp->n_layer != BS_PEER_LAYERS)
        return 0.0;
    for (size_t i = 0; i < sizeof(bs_peer) / sizeof(bs_peer[0]); i++)
        if (bs_peer[i].seqs == conc)
            return bs_peer[i].decode;
    return 0.0;
}

struct bs_client {
    struct sched_handle *h;
    int32_t *prompt;
    double t_submit, t_last;
    int32_t n_tok;
    int done;
};

struct bs_run {
    double wall, ttft_sum, itl_sum;
    int64_t n_ttft, n_itl, tokens, requests, errors;
    uint64_t steps, dec_steps, dec_rows;
    double step_s, dec_s;
};

static pthread_mutex_t bs_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bs_cv = PTHREAD_COND_INITIALIZER;
static int bs_flag;

static void bs_notify(void *ud)
{
    (void)ud;
    pthread_mutex_lock(&bs_mu);
    bs_flag = 1;
    pthread_cond_signal(&bs_cv);
    pthread_mutex_unlock(&bs_mu);
}

static double bs_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void bs_wait(void)
{
    struct timespec ts;

    pthread_mutex_lock(&bs_mu);
    if (!bs_flag) {
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&bs_cv, &bs_mu, &ts);
    }
    bs_flag = 0;
    pthread_mutex_unlock(&bs_mu);
}

static uint64_t bs_rng = 0x2545f4914f6cdd1dull;
static int32_t bs_rand(int32_t lo, int32_t hi)
{
    bs_rng ^= bs_rng << 13;
    bs_rng ^= bs_rng >> 7;
    bs_rng ^= bs_rng << 17;
    return lo + (int32_t)(bs_rng % (uint64_t)(hi - lo));
}

static void bs_make_prompt(int32_t *p, int32_t n, int32_t n_vocab, int32_t bos)
{
    /* ordinary vocabulary ids (past the control tokens at the start) */
    int32_t lo = n_vocab > 1000 ? 1000 : 3, hi = n_vocab > 20000 ? 20000 : n_vocab;

    for (int32_t i = 0; i < n; i++)
        p[i] = bs_rand(lo, hi);
    if (bos >= 0)
        p[0] = bos;
}

static int bs_submit(struct sched *s, struct bs_client *c, int32_t n_prompt, int32_t max_tokens,
                     int32_t n_vocab, int32_t bos, const struct jsonc *json)
{
    struct sched_request r;
    struct inf_error err = {0};
    int rc;

    memset(&r, 0, sizeof(r));
    bs_make_prompt(c->prompt, n_prompt, n_vocab, bos);
    r.prompt = c->prompt;
    r.n_prompt = n_prompt;
    r.n_choices = 1;
    r.max_tokens = max_tokens;
    r.ignore_eos = 1;
    r.logprobs = -1;
    sample_params_default(&r.sampling);
    r.sampling.temperature = 0.0f;
    r.json = json;
    c->t_submit = bs_now();
    c->t_last = 0;
    c->n_tok = 0;
    c->done = 0;
    rc = sched_submit(s, &r, bs_notify, c, &c->h, &err);
    if (rc != 0)
        fprintf(stderr, "inferd bench-serve: submit failed: %s\n", err.msg);
    return rc;
}

/* One closed-loop run at concurrency conc. */
static int bs_run_one(struct model *m, int32_t conc, int32_t n_req, int32_t n_prompt,
                      int32_t max_tokens, int32_t step_tokens, int32_t block_size,
                      const struct jsonc *json, struct bs_run *out)
{
    const struct model_hparams *hp = model_hparams(m);
    struct sched_config cfg;
    struct graph_params gp;
    struct graph *g = NULL;
    struct sched *s = NULL;
    struct inf_error err = {0};
    struct bs_client *cl = calloc((size_t)conc, sizeof(*cl));
    int32_t submitted = 0, finished = 0, per = n_prompt + max_tokens;
    int32_t bos = tok_bos(model_tok(m));
    struct sched_stats st;
    double t0;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (!cl)
        return CMD_FAIL;
    sched_config_default(&cfg);
    cfg.max_seqs = conc;
    cfg.queue_len = conc;
    cfg.step_tokens = step_tokens;
    cfg.block_size = block_size;
    cfg.n_ctx = per;
    cfg.kv_tokens = conc * ((per + block_size - 1) / block_size + 1) * block_size;
    sched_graph_params(&cfg, &gp);
    if (per > hp->n_ctx_train) {
        fprintf(stderr, "inferd bench-serve: prompt + max tokens (%d) > n_ctx_train (%d)\n", per,
                hp->n_ctx_train);
        free(cl);
        return CMD_USAGE;
    }
    if (graph_new(m, &gp, &g, &err) != 0 || sched_new(m, g, &cfg, &s, &err) != 0 ||
        sched_start(s, NULL, NULL) != 0) {
        fprintf(stderr, "inferd bench-serve: %s\n", err.msg);
        rc = CMD_FAIL;
        goto out;
    }
    for (int32_t i = 0; i < conc; i++) {
        cl[i].prompt = malloc((size_t)n_prompt * sizeof(int32_t));
        if (!cl[i].prompt) {
            rc = CMD_FAIL;
            goto out;
        }
    }
    t0 = bs_now();
    for (int32_t i = 0; i < conc && submitted < n_req; i++, submitted++)
        if (bs_submit(s, &cl[i], n_prompt, max_tokens, hp->n_vocab, bos, json) != 0) {
            rc = CMD_FAIL;
            goto out;
        }
    while (finished < n_req) {
        bs_wait();
        for (int32_t i = 0; i < conc; i++) {
            struct bs_client *c = &cl[i];
            struct sched_event ev[32];
            int n;

            if (!c->h)
                continue;
            while ((n = sched_poll(c->h, ev, 32)) > 0) {
                double t = bs_now();

                for (int k = 0; k < n; k++) {
                    if (ev[k].kind == SCHED_EV_TOKEN) {
                        if (c->n_tok == 0) {
                            out->ttft_sum += t - c->t_submit;
                            out->n_ttft++;
                        } else {
                            out->itl_sum += t - c->t_last;
                            out->n_itl++;
                        }
                        c->t_last = t;
                        c->n_tok++;
                        out->tokens++;
                    } else if (ev[k].kind == SCHED_EV_DONE) {
                        c->done = 1;
                    } else if (ev[k].kind == SCHED_EV_ERROR) {
                        c->done = 1;
                        out->errors++;
                    }
                }
            }
            if (c->done) {
                sched_release(c->h);
                c->h = NULL;
                finished++;
                if (submitted < n_req) {
                    if (bs_submit(s, c, n_prompt, max_tokens, hp->n_vocab, bos, json) != 0) {
                        rc = CMD_FAIL;
                        goto out;
                    }
                    submitted++;
                }
            }
        }
    }
    out->wall = bs_now() - t0;
    out->requests = finished;
    sched_get_stats(s, &st);
    out->steps = st.steps;
    out->step_s = st.step_seconds_sum;
    out->dec_steps = st.decode_steps;
    out->dec_rows = st.decode_rows;
    out->dec_s = st.decode_step_seconds;
out:
    for (int32_t i = 0; i < conc; i++) {
        if (cl[i].h)
            sched_release(cl[i].h);
        free(cl[i].prompt);
    }
    free(cl);
    sched_free(s);
    graph_free(g);
    return rc;
}

static void bs_usage(FILE *f)
{
    fprintf(f,
            "usage: inferd bench-serve --model M [--concurrency 1,4,16,64] [--max-tokens 64]\n"
            "                          [--prompt-tokens 32] [--threads 2] [--rounds 2]\n"
            "                          [--step-tokens 512] [--block-size 16] [--backend auto|cuda|cpu]\n"
            "                          [--batch-invariant true|false]   (config key batch_invariant)\n"
            "                          [--f16-weights MiB]   (config key f16_weights_mb)\n"
            "                          [--json true|false]   (JSON-constrained requests)\n"
            "Runs the scheduler directly (no HTTP): for each concurrency C, C clients in a\n"
            "closed loop submit C*rounds requests (random prompts, greedy, ignore_eos); prints\n"
            "aggregate generated tokens/s, mean time to first token and inter-token latency,\n"
            "the decode rate the clients see (C / itl), the pure decode rate (rows/s of the\n"
            "steps without a prompt chunk, and their mean rows), and llama.cpp's batched-bench\n"
            "decode rate beside them where the run matches its conditions (cuda, the\n"
            "Qwen2.5-7B shape, --prompt-tokens 512 --max-tokens 128, C of 1, 8, 32 or 64).\n");
}

/* --json's form: {"s": a string of more characters than max_tokens tokens
 * can spell (a token is at most a few hundred bytes; 1,024 each is past
 * any vocabulary here), so every request runs to max_tokens. 0, or -1. */
static int bs_json_form(int32_t max_tokens, struct jsonc **out)
{
    struct jsonc_builder *b = jsonc_builder_new();
    int32_t obj = b ? jsonc_b_node(b, JSONC_OBJECT) : -1;
    int32_t str = b ? jsonc_b_node(b, JSONC_STRING) : -1;
    int32_t slot = b ? jsonc_b_slots(b, 1) : -1;
    int rc = -1;
    if (obj >= 0 && str >= 0 && slot >= 0 && !jsonc_b_slot(b, slot, "\"s\"", 3, str)) {
        int64_t lo = (int64_t)max_tokens * 1024;
        jsonc_b_shape(b, str, 0, 0, lo > INT32_MAX ? INT32_MAX : (int32_t)lo, -1, 0);
        jsonc_b_shape(b, obj, slot, 1, 0, -1, 1);
        rc = jsonc_b_finish(b, obj, out);
    }
    jsonc_builder_free(b);
    return rc;
}

static int bs_parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int32_t)v;
    return 0;
}

int cmd_bench_serve(int argc, char **argv)
{
    const char *model_path = NULL, *conc_s = "1,4,16,64";
    int32_t max_tokens = 64, n_prompt = 32, threads = 2, rounds = 2, step_tokens = 512;
    int kind = backend_kind_default(), no_inv = 0, json_on = 0, f16_mb = 0;
    int32_t block_size = 16, conc[BS_MAX_CONC], n_conc = 0;
    struct backend *be;
    struct model *m = NULL;
    struct inf_error err = {0};
    int rc = CMD_OK;

    for (int i = 1; i < argc; i += 2) { /* every flag takes one value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int32_t *ip = NULL, lo = 1, hi = 1 << 20;

        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            bs_usage(stdout);
            return CMD_OK;
        }
        if (!v) {
            fprintf(stderr, "inferd bench-serve: unknown flag or missing value: %s\n", a);
            bs_usage(stderr);
            return CMD_USAGE;
        }
        if (!strcmp(a, "--model") || !strcmp(a, "-m"))
            model_path = v;
        else if (!strcmp(a, "--concurrency"))
            conc_s = v;
        else if (!strcmp(a, "--backend")) {
            if (backend_kind_parse(v, &kind)) {
                fprintf(stderr, "inferd bench-serve: --backend must be auto, cuda or cpu\n");
                return CMD_USAGE;
            }
        }
        else if (!strcmp(a, "--batch-invariant")) {
            if (batch_invariant_parse(v, &no_inv)) {
                fprintf(stderr, "inferd bench-serve: --batch-invariant must be true or false\n");
                return CMD_USAGE;
            }
        }
        else if (!strcmp(a, "--f16-weights")) {
            if (f16_weights_parse(v, &f16_mb)) {
                fprintf(stderr, "inferd bench-serve: --f16-weights expects MiB (0..4194304)\n");
                return CMD_USAGE;
            }
        }
        else if (!strcmp(a, "--json")) {
            if (bool_flag_parse(v, &json_on)) {
                fprintf(stderr, "inferd bench-serve: --json must be true or false\n");
                return CMD_USAGE;
            }
        }
        else if (!strcmp(a, "--max-tokens"))
            ip = &max_tokens;
        else if (!strcmp(a, "--prompt-tokens"))
            ip = &n_prompt;
        else if (!strcmp(a, "--threads"))
            ip = &threads, hi = 256;
        else if (!strcmp(a, "--rounds"))
            ip = &rounds, hi = 1000;
        else if (!strcmp(a, "--step-tokens"))
            ip = &step_tokens;
        else if (!strcmp(a, "--block-size"))
            ip = &block_size, hi = 1024;
        else {
            fprintf(stderr, "inferd bench-serve: unknown flag: %s\n", a);
            bs_usage(stderr);
            return CMD_USAGE;
        }
        if (ip && bs_parse_int(v, lo, hi, ip) != 0) {
            fprintf(stderr, "inferd bench-serve: bad value for %s: \"%s\"\n", a, v);
            return CMD_USAGE;
        }
    }
    if (!model_path) {
        fprintf(stderr, "inferd bench-serve: --model is required\n");
        bs_usage(stderr);
        return CMD_USAGE;
    }
    for (const char *p = conc_s; *p;) {
        char *end;
        long v = strtol(p, &end, 10);

        if (end == p || v < 1 || v > 4096 || n_conc == BS_MAX_CONC || (*end && *end != ',')) {
            fprintf(stderr, "inferd bench-serve: bad --concurrency list: \"%s\"\n", conc_s);
            return CMD_USAGE;
        }
        conc[n_conc++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n_conc == 0) {
        fprintf(stderr, "inferd bench-serve: empty --concurrency list\n");
        return CMD_USAGE;
    }

    struct jsonc *json = NULL;
    if (json_on && bs_json_form(max_tokens, &json)) {
        fprintf(stderr, "inferd bench-serve: out of memory\n");
        return CMD_FAIL;
    }
    const struct backend_open_params bp = {kind, 0, threads, CPU_NUMERICS_INVARIANT, no_inv, 0, f16_mb,
                                            CUDA_Q6P_PERCENT};
    if (backend_open(&bp, &be, &err)) {
        fprintf(stderr, "inferd bench-serve: %s\n", err.msg);
        jsonc_free(json);
        return CMD_FAIL;
    }
    if (model_load(model_path, be, &m, &err) != 0) {
        fprintf(stderr, "inferd bench-serve: model_load() \"%s\" failed: %s\n", model_path,
                err.msg);
        backend_free(be);
        jsonc_free(json);
        return CMD_FAIL;
    }
    if (log__level < LOG_LVL_DEBUG)
        log_set_level(LOG_LVL_WARN); /* the per-run sched_new lines are noise here */
    printf("bench-serve: %s, %s backend, %d threads, prompt %d tokens, %d generated per "
           "request, step_tokens %d, %d rounds%s\n",
           model_path, be->ops->name, threads, n_prompt, max_tokens, step_tokens, rounds,
           json ? ", JSON-constrained (inside a string)" : "");
    {
        struct bs_run w;

        rc = bs_run_one(m, 1, 1, n_prompt, max_tokens, step_tokens, block_size, json, &w);
    }
    if (rc == CMD_OK)
        printf("%11s %9s %10s %8s %10s %10s %9s %7s %9s %9s %9s %8s %9s\n", "concurrency",
               "requests", "gen_tokens", "wall_s", "tok/s", "ttft_ms", "itl_ms", "steps", "step_ms",
               "itl_t/s", "dec_t/s", "dec_rows", "llama.cpp");
    for (int i = 0; i < n_conc && rc == CMD_OK; i++) {
        struct bs_run r;

        rc = bs_run_one(m, conc[i], conc[i] * rounds, n_prompt, max_tokens, step_tokens,
                        block_size, json, &r);
        if (rc != CMD_OK)
            break;
        /* the decode rate the clients see: C streams, one token each per
         * mean inter-token latency */
        const double itl = r.n_itl ? r.itl_sum / (double)r.n_itl : 0.0;
        const double peer = bs_peer_decode(be, m, conc[i], n_prompt, max_tokens);
        char peer_s[32] = "-";
        if (peer > 0.0)
            snprintf(peer_s, sizeof(peer_s), "%.0f", peer);
        printf("%11d %9lld %10lld %8.3f %10.1f %10.2f %9.2f %7llu %9.2f %9.1f %9.1f %8.1f %9s\n",
               conc[i], (long long)r.requests, (long long)r.tokens, r.wall,
               r.wall > 0 ? (double)r.tokens / r.wall : 0.0,
               r.n_ttft ? r.ttft_sum / (double)r.n_ttft * 1e3 : 0.0, itl * 1e3,
               (unsigned long long)r.steps, r.steps ? r.step_s / (double)r.steps * 1e3 : 0.0,
               itl > 0.0 ? conc[i] / itl : 0.0, r.dec_s > 0.0 ? (double)r.dec_rows / r.dec_s : 0.0,
               r.dec_steps ? (double)r.dec_rows / (double)r.dec_steps : 0.0, peer_s);
        fflush(stdout);
        if (r.errors) {
            fprintf(stderr, "inferd bench-serve: %lld requests failed\n", (long long)r.errors);
            rc = CMD_FAIL;
        }
    }
    model_free(m);
    backend_free(be);
    jsonc_free(json);
    return rc;
}
