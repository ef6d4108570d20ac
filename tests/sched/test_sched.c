/* test_sched — the scheduler over the real CPU engine and tiny models.
 *
 * Usage: test_sched CASE [MODEL_FILE]   (the model is looked up in
 * $INFERD_SHARED/models; exit 77 when it is absent). Cases:
 *   batch      32 concurrent greedy requests (chunked prefill, shared
 *              prefixes, queueing) give exactly their solo outputs
 *   long       a 2,000-token prompt arriving during 16 running streams delays
 *              them by about one chunk, not by the whole prefill
 *   queue      queue full -> INF_EFULL; every admitted request completes;
 *              submit-time validation (EINVAL / ERANGE / ESHUTDOWN)
 *   cancel     a cancel storm (queued, mid-prefill, mid-decode, one choice,
 *              release without cancel, stop with cancel_all) leaves zero
 *              used KV blocks
 *   prefix     the same prompt twice: a prefix-cache hit is counted, fewer
 *              prompt tokens are computed, the output is identical
 *   choices    n = 3: greedy choices equal n = 1; sampled choices differ,
 *              are reproducible and equal n = 1 with seed + i
 *   logprobs   token logprobs, prompt logprobs (echo) agree bit for bit with
 *              the generated ones; stop ids; min_tokens
 * Thread: the test's main thread is the "loop thread"; notify runs on the
 * engine thread and only records a time stamp and signals a condvar.
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
#include "engine/model.h"
#include "engine/sched.h"
#include "engine/tok.h"
#include "tests/check.h"
#include "tests/rng.h"
#include "tests/sched/sched_clients.h"
#include "tests/sched/sched_harness.h"

/* ---- the engine under test ---- */

static struct backend *be;
static struct model *model;
static int32_t n_vocab, bos;

static void make_prompt(int32_t *p, int32_t n)
{
    p[0] = bos >= 0 ? bos : 1;
    for (int32_t i = 1; i < n; i++)
        p[i] = 3 + (int32_t)rnd((uint32_t)(n_vocab - 3 < 500 ? n_vocab - 3 : 500));
}

/* ---- cases ---- */

#define NB 32
static int32_t prompts[NB][160];
static int32_t plen[NB], maxt[NB];
static struct client solo[NB], conc[NB];

static void case_batch(void)
{
    struct sched_config c1, c2;
    struct engine e1, e2;
    struct client *cs[NB];
    struct sched_request r;
    int same = 0;

    sched_config_default(&c1);
    c1.max_seqs = 4;
    c1.step_tokens = 512; /* solo: whole prompts in one step */
    c1.prefix_cache = 0;
    c1.kv_tokens = 4096;
    c2 = c1;
    c2.max_seqs = 12; /* concurrent: some wait in the queue */
    c2.step_tokens = 40; /* small chunks: prompts are split and mixed */
    c2.prefix_cache = 1;
    c2.kv_tokens = 2048;
    if (engine_open(&e1, model, &c1) || engine_open(&e2, model, &c2)) {
        fails++;
        return;
    }
    CHECK(sched_start(e1.s, NULL, NULL) == 0);
    CHECK(sched_start(e2.s, NULL, NULL) == 0);
    for (int i = 0; i < NB; i++) {
        plen[i] = 2 + (int32_t)rnd(150);
        maxt[i] = 4 + (int32_t)rnd(40);
        make_prompt(prompts[i], plen[i]);
        /* the second half shares prefixes with the first: cache hits on
         * blocks another request computed */
        if (i >= NB / 2 && i % 2 == 0) {
            if (plen[i - NB / 2] < 70)
                plen[i - NB / 2] = 70 + (int32_t)rnd(60);
            if (plen[i] < 70)
                plen[i] = 70 + (int32_t)rnd(60);
            memcpy(prompts[i], prompts[i - NB / 2], 64 * sizeof(int32_t));
        }
    }
    for (int i = 0; i < NB; i++) {
        request_init(&r, prompts[i], plen[i], maxt[i]);
        run_one(e1.s, &solo[i], &r);
    }
    for (int i = 0; i < NB; i++) {
        request_init(&r, prompts[i], plen[i], maxt[i]);
        CHECK(submit(e2.s, &conc[i], &r) == 0);
        cs[i] = &conc[i];
        if (i == NB / 2 - 1) { /* second wave once the first has its prompts in */
            for (double end = harness_now_s() + 120; harness_now_s() < end;) {
                int ready = 0;

                for (int k = 0; k < NB / 2; k++) {
                    client_poll(&conc[k]);
                    ready += conc[k].n_tok[0] > 0 || client_finished(&conc[k]);
                }
                if (ready == NB / 2)
                    break;
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
        }
    }
    wait_all(cs, NB, 300);
    {
        struct sched_stats st;

        sched_get_stats(e2.s, &st);
        CHECK(st.prefix_hits > 0);
    }
    for (int i = 0; i < NB; i++) {
        int ok = conc[i].error == 0 && same_tokens(&solo[i], 0, &conc[i], 0);

        same += ok;
        if (!ok)
            fprintf(stderr, "request %d (prompt %d, max %d): solo %d tokens, concurrent %d\n", i,
                    plen[i], maxt[i], solo[i].n_tok[0], conc[i].n_tok[0]);
    }
    printf("batch: %d of %d concurrent greedy outputs equal their solo runs\n", same, NB);
    CHECK(same == NB);
    for (int i = 0; i < NB; i++) {
        client_release(&solo[i]);
        client_release(&conc[i]);
    }
    check_idle(e1.s, "solo");
    check_idle(e2.s, "concurrent");
    engine_free(&e1);
    engine_free(&e2);
}

#define NSTREAM 16
#define LONGP 2000

static void case_long(void)
{
    struct sched_config cfg;
    struct engine e;
    static struct client st[NSTREAM], lc;
    static int32_t sp[NSTREAM][8], lp[LONGP];
    struct client *cs[NSTREAM + 1];
    struct sched_request r;
    double t_adm, t_first, max_gap = 0, base_sum = 0, prefill;
    int n_base = 0, min_in = 1 << 30, chunks;

    sched_config_default(&cfg);
    cfg.max_seqs = NSTREAM + 1;
    cfg.step_tokens = 256;
    cfg.kv_tokens = 8192; /* room for the streams and the long prompt at once */
    cfg.n_ctx = 2048;
    if (engine_open(&e, model, &cfg)) {
        fails++;
        return;
    }
    CHECK(sched_start(e.s, NULL, NULL) == 0);
    for (int i = 0; i < NSTREAM; i++) {
        make_prompt(sp[i], 8);
        request_init(&r, sp[i], 8, 160);
        r.ignore_eos = 1;
        CHECK(submit(e.s, &st[i], &r) == 0);
        cs[i] = &st[i];
    }
    /* wait until every stream has produced a few tokens */
    for (double end = harness_now_s() + 60; harness_now_s() < end;) {
        int ready = 0;

        for (int i = 0; i < NSTREAM; i++) {
            client_poll(&st[i]);
            ready += st[i].n_tok[0] >= 6;
        }
        if (ready == NSTREAM)
            break;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    make_prompt(lp, LONGP);
    request_init(&r, lp, LONGP, 4);
    CHECK(submit(e.s, &lc, &r) == 0);
    cs[NSTREAM] = &lc;
    wait_all(cs, NSTREAM + 1, 300);
    CHECK(lc.error == 0 && lc.n_tok[0] == 4 && lc.n_nt >= 2);
    if (lc.n_nt < 2) {
        engine_free(&e);
        return;
    }
    /* engine-side times: the step that admitted the long prompt (its first
     * chunk) and the step that finished its prefill (its first token) */
    t_adm = lc.nt[0];
    t_first = lc.nt[1];
    prefill = t_first - t_adm;
    chunks = (LONGP + (256 - NSTREAM) - 1) / (256 - NSTREAM);
    for (int i = 0; i < NSTREAM; i++) {
        int in = 0;

        for (int k = 1; k < st[i].n_nt; k++) {
            double gap = st[i].nt[k] - st[i].nt[k - 1];

            if (st[i].nt[k] < t_adm - 1e-6) {
                base_sum += gap;
                n_base++;
            } else if (st[i].nt[k - 1] >= t_adm - 1e-6 && st[i].nt[k] <= t_first + 1e-6) {
                if (gap > max_gap)
                    max_gap = gap;
                in++;
            }
        }
        if (in < min_in)
            min_in = in;
        CHECK(st[i].n_tok[0] == 160 && st[i].finish[0] == SCHED_FINISH_LENGTH);
    }
    printf("long: prefill of %d tokens took %.1f ms in ~%d chunks (%.1f ms per chunk step); "
           "streams: mean gap before %.2f ms, max gap during prefill %.2f ms, "
           "at least %d tokens each during the prefill\n",
           LONGP, prefill * 1e3, chunks, prefill / chunks * 1e3,
           n_base ? base_sum / n_base * 1e3 : 0.0, max_gap * 1e3, min_in);
    /* every stream kept getting a token every step of the prefill ... */
    CHECK(min_in >= chunks - 2);
    /* ... and no gap was much longer than one chunk step (loose: shared CPU) */
    CHECK(max_gap <= 4.0 * prefill / chunks + 0.1);
    CHECK(max_gap < 0.6 * prefill);
    for (int i = 0; i < NSTREAM; i++)
        client_release(&st[i]);
    client_release(&lc);
    check_idle(e.s, "long");
    engine_free(&e);
}

static void case_queue(void)
{
    struct sched_config cfg;
    struct engine e;
    static struct client cl[64];
    static int32_t pr[64][24];
    struct client *cs[64];
    struct sched_request r;
    struct inf_error err;
    struct sched_handle *h;
    int accepted = 0, full = 0, n = 0;
    int32_t bad[3] = {1, 5, 999999};

    sched_config_default(&cfg);
    cfg.max_seqs = 4;
    cfg.queue_len = 6;
    cfg.kv_tokens = 1024;
    cfg.n_ctx = 512;
    if (engine_open(&e, model, &cfg)) {
        fails++;
        return;
    }
    /* validation */
    make_prompt(pr[0], 24);
    request_init(&r, bad, 3, 4);
    CHECK(sched_submit(e.s, &r, NULL, NULL, &h, &err) == INF_EINVAL);
    request_init(&r, pr[0], 24, 600);
    CHECK(sched_submit(e.s, &r, NULL, NULL, &h, &err) == INF_ERANGE);
    printf("queue: ERANGE says \"%s\"\n", err.msg);
    request_init(&r, pr[0], 24, 4);
    r.n_choices = 5; /* more than max_seqs: can never run */
    CHECK(sched_submit(e.s, &r, NULL, NULL, &h, &err) == INF_ERANGE);
    request_init(&r, pr[0], 0, 4);
    CHECK(sched_submit(e.s, &r, NULL, NULL, &h, &err) == INF_EINVAL);
    request_init(&r, pr[0], 24, 0);
    CHECK(sched_submit(e.s, &r, NULL, NULL, &h, &err) == INF_EINVAL);
    request_init(&r, pr[0], 24, 4);
    r.logprobs = SCHED_MAX_TOP + 1;
    CHECK(sched_submit(e.s, &r, NULL, NULL, &h, &err) == INF_EINVAL);

    /* not started yet: exactly queue_len fit */
    for (int i = 0; i < 10; i++, n++) {
        make_prompt(pr[n], 24);
        request_init(&r, pr[n], 24, 16);
        r.ignore_eos = 1;
        int rc = submit(e.s, &cl[n], &r);

        CHECK(rc == 0 || rc == INF_EFULL);
        accepted += rc == 0;
        full += rc == INF_EFULL;
    }
    CHECK(accepted == 6 && full == 4);
    CHECK(sched_start(e.s, on_watchdog, NULL) == 0);
    /* a burst while it runs */
    for (int i = 0; i < 40; i++, n++) {
        make_prompt(pr[n], 24);
        request_init(&r, pr[n], 24, 16);
        r.ignore_eos = 1;
        int rc = submit(e.s, &cl[n], &r);

        CHECK(rc == 0 || rc == INF_EFULL);
        accepted += rc == 0;
        full += rc == INF_EFULL;
        if (i % 8 == 7) {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; i < n; i++)
        cs[i] = &cl[i];
    wait_all(cs, n, 300);
    {
        int done = 0;

        for (int i = 0; i < n; i++)
            if (cl[i].h) {
                done += cl[i].admitted && cl[i].n_tok[0] == 16 &&
                        cl[i].finish[0] == SCHED_FINISH_LENGTH;
            }
        printf("queue: %d accepted (all %d completed), %d refused with INF_EFULL\n", accepted,
               done, full);
        CHECK(done == accepted);
        CHECK(full > 4);
    }
    for (int i = 0; i < n; i++)
        client_release(&cl[i]);
    check_idle(e.s, "queue");
    /* idle: the watchdog still gets called (idle waits last <= 1 s) */
    {
        int w0 = atomic_load(&wd_calls);
        struct timespec ts = {1, 300000000};

        nanosleep(&ts, NULL);
        CHECK(atomic_load(&wd_calls) > w0);
        printf("queue: watchdog called %d times\n", atomic_load(&wd_calls));
    }
    /* sched_stop(0) drains: what is queued and running still completes */
    for (int i = 0; i < 6; i++) {
        make_prompt(pr[i], 24);
        request_init(&r, pr[i], 24, 16);
        r.ignore_eos = 1;
        CHECK(submit(e.s, &cl[i], &r) == 0);
    }
    sched_stop(e.s, 0);
    for (int i = 0; i < 6; i++) {
        client_poll(&cl[i]);
        CHECK(cl[i].n_tok[0] == 16 && cl[i].finish[0] == SCHED_FINISH_LENGTH);
        client_release(&cl[i]);
    }
    check_idle(e.s, "drained");
    request_init(&r, pr[0], 24, 4);
    CHECK(sched_submit(e.s, &r, NULL, NULL, &h, &err) == INF_ESHUTDOWN);
    engine_free(&e);
}

#define NCANCEL 300

static void case_cancel(void)
{
    struct sched_config cfg;
    struct engine e;
    static struct client cl[NCANCEL + 16];
    static int32_t pr[NCANCEL + 16][400];
    struct client *cs[NCANCEL + 16];
    struct sched_request r;
    int n = 0, in_prefill = 0, in_decode = 0, queued = 0, released = 0, choice_cancels = 0;
    int live[NCANCEL], fate[NCANCEL];
    double when[NCANCEL];
    int n_live = 0;

    sched_config_default(&cfg);
    cfg.max_seqs = 8;
    cfg.queue_len = 64;
    cfg.step_tokens = 32;
    cfg.kv_tokens = 2048; /* tight: admission waits, cached blocks get evicted */
    cfg.n_ctx = 512;
    if (engine_open(&e, model, &cfg)) {
        fails++;
        return;
    }
    CHECK(sched_start(e.s, NULL, NULL) == 0);
    while (n < NCANCEL || n_live > 0) {
        /* keep ~24 requests in flight */
        while (n < NCANCEL && n_live < 24) {
            int32_t len = rnd(3) == 0 ? 150 + (int32_t)rnd(250) : 2 + (int32_t)rnd(60);

            make_prompt(pr[n], len);
            if (n > 0 && rnd(3) == 0 && len > 40) /* repeated prefixes: cache hits */
                memcpy(pr[n], pr[n - 1], 40 * sizeof(int32_t));
            request_init(&r, pr[n], len, 1 + (int32_t)rnd(40));
            r.n_choices = 1 + (int32_t)rnd(3);
            r.sampling.temperature = rnd(2) ? 0.0f : 0.8f;
            r.sampling.seed = n;
            if (submit(e.s, &cl[n], &r) == 0) {
                /* its fate: 0 runs to the end, 1 cancel, 2 release, 3 one choice */
                uint32_t a = rnd(10);

                fate[n] = a < 4 ? 0 : a < 7 ? 1 : a < 8 ? 2 : 3;
                /* a few right away (while queued), the rest at a random
                 * time after admission (prefill or decode) */
                when[n] = rnd(5) == 0 ? cl[n].t_submit : 0;
                live[n_live++] = n;
            }
            n++;
        }
        for (int i = 0; i < n_live; i++) {
            int k = live[i];
            struct client *c = &cl[k];

            client_poll(c);
            if (client_finished(c)) {
                live[i--] = live[--n_live];
                continue;
            }
            if (fate[k] == 0)
                continue;
            if (when[k] == 0 && c->admitted)
                when[k] = harness_now_s() + 1e-3 * rnd(30);
            if (when[k] == 0 || harness_now_s() < when[k])
                continue;
            if (fate[k] == 1 || fate[k] == 2) {
                if (!c->admitted)
                    queued++;
                else if (c->n_tok[0] == 0)
                    in_prefill++;
                else
                    in_decode++;
            }
            if (fate[k] == 1) {
                sched_cancel(c->h);
            } else if (fate[k] == 2) {
                client_release(c); /* gone without a word */
                released++;
            } else if (c->n_choices > 1) {
                sched_cancel_choice(c->h, (int32_t)rnd((uint32_t)c->n_choices));
                choice_cancels++;
            }
            fate[k] = 0;
        }
        {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    printf("cancel: %d requests; cancels while queued %d, in prefill %d, in decode %d; "
           "(%d of them released), %d single-choice cancels\n",
           n, queued, in_prefill, in_decode, released, choice_cancels);
    CHECK(in_prefill > 0 && in_decode > 0);
    for (int i = 0; i < n; i++) {
        if (cl[i].h && !cl[i].released) {
            /* every choice of every request got exactly one end */
            CHECK(cl[i].error == 0 && cl[i].n_done == cl[i].n_choices);
            for (int c = 0; c < cl[i].n_choices; c++)
                CHECK(cl[i].finish[c] != SCHED_FINISH_NONE);
        }
        client_release(&cl[i]);
    }
    wait_quiet(e.s, 30.0); /* released requests end at the scheduler's next step */
    check_idle(e.s, "cancel");
    /* stop with cancel_all while requests run and wait */
    for (int i = 0; i < 16; i++) {
        make_prompt(pr[n + i], 100);
        request_init(&r, pr[n + i], 100, 50);
        CHECK(submit(e.s, &cl[n + i], &r) == 0);
        cs[i] = &cl[n + i];
    }
    {
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
    sched_stop(e.s, 1);
    for (int i = 0; i < 16; i++) {
        client_poll(cs[i]);
        CHECK(cs[i]->n_done == 1 || cs[i]->error);
        client_release(cs[i]);
    }
    check_idle(e.s, "stop(cancel_all)");
    engine_free(&e);
}

static void case_prefix(void)
{
    struct sched_config cfg;
    struct engine e, e0;
    static struct client a, b, c, d;
    static int32_t p[100], p2[200];
    struct sched_request r;
    struct sched_stats s0, s1, s2;
    int32_t n2;

    sched_config_default(&cfg);
    cfg.max_seqs = 4;
    cfg.kv_tokens = 2048;
    cfg.step_tokens = 64;
    if (engine_open(&e, model, &cfg)) {
        fails++;
        return;
    }
    cfg.prefix_cache = 0;
    if (engine_open(&e0, model, &cfg)) {
        fails++;
        return;
    }
    CHECK(sched_start(e.s, NULL, NULL) == 0);
    CHECK(sched_start(e0.s, NULL, NULL) == 0);
    make_prompt(p, 100);
    request_init(&r, p, 100, 40);
    r.ignore_eos = 1;
    sched_get_stats(e.s, &s0);
    run_one(e.s, &a, &r);
    sched_get_stats(e.s, &s1);
    run_one(e.s, &b, &r);
    sched_get_stats(e.s, &s2);
    printf("prefix: first run %llu prompt tokens computed, ttft %.2f ms; second run %llu "
           "computed, %llu from the cache, ttft %.2f ms\n",
           (unsigned long long)(s1.prompt_tokens - s0.prompt_tokens),
           (a.t_first - a.t_submit) * 1e3,
           (unsigned long long)(s2.prompt_tokens - s1.prompt_tokens),
           (unsigned long long)(s2.prefix_hit_tokens - s1.prefix_hit_tokens),
           (b.t_first - b.t_submit) * 1e3);
    CHECK(s1.prefix_hits == s0.prefix_hits && s1.prompt_tokens - s0.prompt_tokens == 100);
    CHECK(s2.prefix_hits == s1.prefix_hits + 1);
    CHECK(s2.prefix_hit_tokens - s1.prefix_hit_tokens == 96); /* 6 full blocks, not the 7th */
    CHECK(s2.prompt_tokens - s1.prompt_tokens == 4);
    CHECK(same_tokens(&a, 0, &b, 0) && a.n_tok[0] == 40);
    /* a follow-up turn: prompt + completion; generated blocks are cached too */
    memcpy(p2, p, sizeof(p));
    memcpy(p2 + 100, a.tok[0], 40 * sizeof(int32_t));
    n2 = 140;
    for (int32_t i = n2; i < 150; i++)
        p2[i] = 3 + (int32_t)rnd(100);
    n2 = 150;
    request_init(&r, p2, n2, 30);
    r.ignore_eos = 1;
    run_one(e.s, &c, &r);
    run_one(e0.s, &d, &r);
    sched_get_stats(e.s, &s1);
    printf("prefix: follow-up turn reused %llu tokens\n",
           (unsigned long long)(s1.prefix_hit_tokens - s2.prefix_hit_tokens));
    /* the blocks of positions 0..127 hold prompt and generated tokens (the
     * token at 139 was sampled but never fed, so block 8 is not complete) */
    CHECK(s1.prefix_hit_tokens - s2.prefix_hit_tokens == 128);
    CHECK(same_tokens(&c, 0, &d, 0));
    client_release(&a);
    client_release(&b);
    client_release(&c);
    client_release(&d);
    check_idle(e.s, "prefix");
    check_idle(e0.s, "no-prefix");
    engine_free(&e);
    engine_free(&e0);
}

static void case_choices(void)
{
    struct sched_config cfg;
    struct engine e;
    static struct client g1, g3, s3, s3b, s1[3];
    static int32_t p[37];
    struct sched_request r;
    int differ = 0;

    sched_config_default(&cfg);
    cfg.max_seqs = 8;
    cfg.kv_tokens = 2048;
    if (engine_open(&e, model, &cfg)) {
        fails++;
        return;
    }
    CHECK(sched_start(e.s, NULL, NULL) == 0);
    make_prompt(p, 37); /* 37 = 2 full blocks + a partial one: copy-on-write */
    request_init(&r, p, 37, 30);
    r.ignore_eos = 1;
    run_one(e.s, &g1, &r);
    r.n_choices = 3;
    run_one(e.s, &g3, &r);
    for (int c = 0; c < 3; c++)
        CHECK(same_tokens(&g1, 0, &g3, c));
    r.sampling.temperature = 0.9f;
    r.sampling.top_k = 40;
    r.sampling.seed = 1234;
    run_one(e.s, &s3, &r);
    run_one(e.s, &s3b, &r);
    for (int c = 0; c < 3; c++) {
        CHECK(same_tokens(&s3, c, &s3b, c));
        for (int d = c + 1; d < 3; d++)
            differ += !same_tokens(&s3, c, &s3, d);
    }
    r.n_choices = 1;
    for (int c = 0; c < 3; c++) {
        r.sampling.seed = 1234 + (uint64_t)c;
        run_one(e.s, &s1[c], &r);
        CHECK(same_tokens(&s3, c, &s1[c], 0));
    }
    printf("choices: checked greedy n=3 vs n=1; sampled: %d of 3 pairs differ; checked reproducible, "
           "choice i == n=1 with seed+i\n",
           differ);
    CHECK(differ >= 2);
    client_release(&g1);
    client_release(&g3);
    client_release(&s3);
    client_release(&s3b);
    for (int c = 0; c < 3; c++)
        client_release(&s1[c]);
    check_idle(e.s, "choices");
    engine_free(&e);
}

static void case_logprobs(void)
{
    struct sched_config cfg;
    struct engine e;
    static struct client a, b, c, d;
    static int32_t p[20], p2[40];
    struct sched_request r;
    int ok = 1;

    sched_config_default(&cfg);
    cfg.max_seqs = 4;
    cfg.kv_tokens = 1024;
    cfg.step_tokens = 8; /* prompt logprobs over several chunks */
    if (engine_open(&e, model, &cfg)) {
        fails++;
        return;
    }
    CHECK(sched_start(e.s, NULL, NULL) == 0);
    make_prompt(p, 20);
    request_init(&r, p, 20, 10);
    r.ignore_eos = 1;
    r.logprobs = 5;
    run_one(e.s, &a, &r);
    CHECK(a.n_tok[0] == 10);
    for (int i = 0; i < a.n_tok[0] && i < 10; i++) {
        CHECK(a.top0[0][i] == a.tok[0][i]); /* greedy picks the top-1 */
        CHECK(a.lp[0][i] <= 0.0f && a.lp[0][i] > -30.0f);
    }
    /* echo: prompt + the 9 first generated tokens, with prompt logprobs */
    memcpy(p2, p, sizeof(p));
    memcpy(p2 + 20, a.tok[0], 9 * sizeof(int32_t));
    request_init(&r, p2, 29, 1);
    r.ignore_eos = 1;
    r.logprobs = 5;
    r.prompt_logprobs = 1;
    run_one(e.s, &b, &r);
    CHECK(b.n_prompt_ev == 28);
    for (int i = 0; i < b.n_prompt_ev && i < 28; i++) {
        CHECK(b.prompt_pos[i] == i + 1 && b.prompt_tok[i] == p2[i + 1]);
        if (i + 1 >= 20) { /* the generated part: identical numbers */
            int k = i + 1 - 20;

            ok &= b.prompt_lp[i] == a.lp[0][k] && b.prompt_top0[i] == a.top0[0][k];
        }
    }
    CHECK(ok);
    CHECK(b.n_tok[0] == 1 && b.tok[0][0] == a.tok[0][9] && b.lp[0][0] == a.lp[0][9]);
    /* a stop id ends the choice before that token */
    request_init(&r, p, 20, 10);
    r.ignore_eos = 1;
    r.stop_ids = &a.tok[0][3];
    r.n_stop_ids = 1;
    run_one(e.s, &c, &r);
    {
        int first = 0;

        while (first < 3 && a.tok[0][first] != a.tok[0][3])
            first++;
        CHECK(c.finish[0] == SCHED_FINISH_STOP && c.n_tok[0] == first);
    }
    /* min_tokens masks the stop id for the first tokens */
    r.min_tokens = 6;
    run_one(e.s, &d, &r);
    CHECK(d.n_tok[0] >= 6);
    for (int i = 0; i < d.n_tok[0] && i < MAXT; i++)
        CHECK(d.tok[0][i] != a.tok[0][3]);
    printf("logprobs: prompt logprobs match generated ones bit for bit; stop after %d tokens; "
           "with min_tokens 6: %d tokens (%s)\n",
           c.n_tok[0], d.n_tok[0], d.finish[0] == SCHED_FINISH_STOP ? "stop" : "length");
    client_release(&a);
    client_release(&b);
    client_release(&c);
    client_release(&d);
    check_idle(e.s, "logprobs");
    engine_free(&e);
}

int main(int argc, char **argv)
{
    const char *shared = getenv("INFERD_SHARED");
    const char *mf = argc > 2 ? argv[2] : "stories260K.gguf";
    char path[1024];
    struct inf_error err = {0};
    FILE *f;

    if (argc < 2) {
        fprintf(stderr, "usage: test_sched CASE [MODEL_FILE]\n");
        return 2;
    }
    snprintf(path, sizeof(path), "%s/models/%s", shared ? shared : "../shared", mf);
    f = fopen(path, "rb");
    if (!f) {
        printf("skip: %s not found\n", path);
        return 77;
    }
    fclose(f);
    /* one thread unless asked: results do not depend on it, and the CI
     * machine is shared */
    be = cpu_backend_new(getenv("INFERD_TEST_THREADS") ? atoi(getenv("INFERD_TEST_THREADS")) : 1);
    if (!be || model_load(path, be, &model, &err) != 0) {
        fprintf(stderr, "model_load %s: %s\n", path, err.msg);
        return 1;
    }
    n_vocab = model_hparams(model)->n_vocab;
    bos = tok_bos(model_tok(model));
    printf("%s: %s (vocab %d)\n", argv[1], mf, n_vocab);
    if (!strcmp(argv[1], "batch"))
        case_batch();
    else if (!strcmp(argv[1], "long"))
        case_long();
    else if (!strcmp(argv[1], "queue"))
        case_queue();
    else if (!strcmp(argv[1], "cancel"))
        case_cancel();
    else if (!strcmp(argv[1], "prefix"))
        case_prefix();
    else if (!strcmp(argv[1], "choices"))
        case_choices();
    else if (!strcmp(argv[1], "logprobs"))
        case_logprobs();
    else {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        fails++;
    }
    model_free(model);
    backend_free(be);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
