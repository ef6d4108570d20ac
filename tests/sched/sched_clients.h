/* sched_clients — test_sched.c's clients of the scheduler: a request's
 * events collected per choice (tokens, finish, error, time stamps), submit
 * / wait / release, and the checks that an idle scheduler holds no blocks.
 * Header-only like sched_harness.h (test_sched.c is one translation unit);
 * notify runs on the engine thread and only records a time stamp and
 * signals a condvar. */
#ifndef INFERD_TESTS_SCHED_CLIENTS_H
#define INFERD_TESTS_SCHED_CLIENTS_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/sched.h"
#include "tests/check.h"
#include "tests/sched/sched_harness.h"

#define MAXC 4
#define MAXT 256
#define MAXN 1024

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;
static int ev_flag;

struct client {
    struct sched_handle *h;
    int32_t n_choices;
    int32_t tok[MAXC][MAXT];
    float lp[MAXC][MAXT];
    int32_t top0[MAXC][MAXT];
    int32_t n_tok[MAXC];
    int32_t n_prompt_ev;
    int32_t prompt_pos[MAXT], prompt_tok[MAXT];
    float prompt_lp[MAXT];
    int32_t prompt_top0[MAXT];
    int finish[MAXC];
    int n_done, error, admitted, released;
    double t_submit, t_first;
    /* notify times (engine thread writes, main reads after the end) */
    double nt[MAXN];
    int n_nt;
};

static void on_notify(void *ud)
{
    struct client *c = ud;

    if (c->n_nt < MAXN)
        c->nt[c->n_nt++] = harness_now_s();
    pthread_mutex_lock(&ev_mu);
    ev_flag = 1;
    pthread_cond_signal(&ev_cv);
    pthread_mutex_unlock(&ev_mu);
}

static atomic_int wd_calls;
static void on_watchdog(void *ud)
{
    (void)ud;
    atomic_fetch_add(&wd_calls, 1);
}

static int client_finished(const struct client *c)
{
    return c->released || c->error || c->n_done == c->n_choices;
}

static void client_poll(struct client *c)
{
    struct sched_event ev[16];
    int n;

    if (c->released)
        return;
    while ((n = sched_poll(c->h, ev, 16)) > 0) {
        for (int i = 0; i < n; i++) {
            struct sched_event *e = &ev[i];

            switch (e->kind) {
            case SCHED_EV_ADMITTED:
                c->admitted = 1;
                break;
            case SCHED_EV_PROMPT:
                if (c->n_prompt_ev < MAXT) {
                    c->prompt_pos[c->n_prompt_ev] = e->pos;
                    c->prompt_tok[c->n_prompt_ev] = e->token;
                    c->prompt_lp[c->n_prompt_ev] = e->logprob;
                    c->prompt_top0[c->n_prompt_ev] = e->n_top > 0 ? e->top_ids[0] : -1;
                }
                c->n_prompt_ev++;
                break;
            case SCHED_EV_TOKEN:
                CHECK(e->choice >= 0 && e->choice < c->n_choices);
                if (c->t_first == 0)
                    c->t_first = harness_now_s();
                if (c->n_tok[e->choice] < MAXT) {
                    c->tok[e->choice][c->n_tok[e->choice]] = e->token;
                    c->lp[e->choice][c->n_tok[e->choice]] = e->logprob;
                    c->top0[e->choice][c->n_tok[e->choice]] = e->n_top > 0 ? e->top_ids[0] : -1;
                }
                c->n_tok[e->choice]++;
                break;
            case SCHED_EV_DONE:
                CHECK(c->finish[e->choice] == 0);
                c->finish[e->choice] = e->finish;
                c->n_done++;
                break;
            case SCHED_EV_ERROR:
                c->error = e->error;
                break;
            }
        }
    }
}

static void client_release(struct client *c)
{
    if (c->h && !c->released) {
        sched_release(c->h);
        c->released = 1;
    }
}

static int submit(struct sched *s, struct client *c, const struct sched_request *r)
{
    struct inf_error err = {0};
    int rc;

    memset(c, 0, sizeof(*c));
    c->n_choices = r->n_choices;
    c->t_submit = harness_now_s();
    rc = sched_submit(s, r, on_notify, c, &c->h, &err);
    if (rc != 0)
        c->h = NULL;
    return rc;
}

/* Wait until every client finished (or timeout_s passed: a failure). */
static int wait_all(struct client **cs, int n, double timeout_s)
{
    double end = harness_now_s() + timeout_s;

    for (;;) {
        int left = 0;

        for (int i = 0; i < n; i++) {
            if (!cs[i]->h)
                continue;
            client_poll(cs[i]);
            left += !client_finished(cs[i]);
        }
        if (!left)
            return 0;
        if (harness_now_s() > end) {
            fprintf(stderr, "timeout: %d clients not finished\n", left);
            fails++;
            return -1;
        }
        pthread_mutex_lock(&ev_mu);
        if (!ev_flag) {
            struct timespec ts;

            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&ev_cv, &ev_mu, &ts);
        }
        ev_flag = 0;
        pthread_mutex_unlock(&ev_mu);
    }
}

static int same_tokens(const struct client *a, int ca, const struct client *b, int cb)
{
    return a->n_tok[ca] == b->n_tok[cb] && a->finish[ca] == b->finish[cb] &&
           memcmp(a->tok[ca], b->tok[cb], (size_t)a->n_tok[ca] * sizeof(int32_t)) == 0;
}

static void check_idle(struct sched *s, const char *what)
{
    struct sched_stats st;

    sched_get_stats(s, &st);
    printf("%s: kv used %d free %d (cached %d) of %d, running %d, waiting %d, "
           "prefix hits %llu (%llu tokens), steps %llu\n",
           what, st.kv_blocks_used, st.kv_blocks_free, st.kv_blocks_cached,
           st.kv_blocks_total, st.running, st.waiting, (unsigned long long)st.prefix_hits,
           (unsigned long long)st.prefix_hit_tokens, (unsigned long long)st.steps);
    CHECK(st.kv_blocks_used == 0);
    CHECK(st.kv_blocks_free == st.kv_blocks_total);
    CHECK(st.running == 0 && st.waiting == 0);
    /* the pure decode steps (bench-serve's dec_t/s) are a subset of the
     * steps, each with at least one row, timed within the steps' time */
    CHECK(st.decode_steps <= st.steps);
    CHECK(st.decode_rows >= st.decode_steps);
    CHECK(st.decode_step_seconds <= st.step_seconds_sum);
}

/* sched_release is asynchronous: a released request is the test's business
 * no more, but the scheduler retires it at its next step. Wait (bounded, so
 * a request that never ends still fails check_idle) until no request runs
 * or waits before checking that every block came back. */
static void wait_quiet(struct sched *s, double timeout_s)
{
    double t_end = harness_now_s() + timeout_s;
    struct sched_stats st;

    for (;;) {
        sched_get_stats(s, &st);
        if ((st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0) ||
            harness_now_s() > t_end)
            return;
        {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
}

/* Run one request alone on s and wait for it. */
static void run_one(struct sched *s, struct client *c, const struct sched_request *r)
{
    struct client *cs[1] = {c};

    CHECK(submit(s, c, r) == 0);
    wait_all(cs, 1, 120);
    CHECK(c->error == 0);
}

#endif
