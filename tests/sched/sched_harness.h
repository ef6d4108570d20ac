/* sched_harness — what the scheduler tests (test_sched.c, test_sample_path.c)
 * share: an engine (a graph and a scheduler over a loaded model), a
 * monotonic clock and a plain greedy request. Header-only: each test is one translation unit. */
#ifndef INFERD_TESTS_SCHED_HARNESS_H
#define INFERD_TESTS_SCHED_HARNESS_H

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/graph.h"
#include "engine/sched.h"

static inline double harness_now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct engine {
    struct graph *g;
    struct sched *s;
};

/* The graph sched_graph_params asks for c, then the scheduler on it; 0, or
 * -1 with the reason on stderr and nothing left allocated. */
static inline int engine_open(struct engine *e, struct model *m, const struct sched_config *c)
{
    struct graph_params gp;
    struct inf_error err = {0};

    sched_graph_params(c, &gp);
    if (graph_new(m, &gp, &e->g, &err) != 0) {
        fprintf(stderr, "graph_new: %s\n", err.msg);
        return -1;
    }
    if (sched_new(m, e->g, c, &e->s, &err) != 0) {
        fprintf(stderr, "sched_new: %s\n", err.msg);
        graph_free(e->g);
        return -1;
    }
    return 0;
}

/* One greedy choice of prompt[0..n), max_tokens, no logprobs. */
static inline void request_init(struct sched_request *r, const int32_t *prompt, int32_t n,
                                int32_t max_tokens)
{
    memset(r, 0, sizeof(*r));
    r->prompt = prompt;
    r->n_prompt = n;
    r->n_choices = 1;
    r->max_tokens = max_tokens;
    r->logprobs = -1;
    sample_params_default(&r->sampling);
    r->sampling.temperature = 0.0f;
}

static inline void engine_free(struct engine *e)
{
    sched_free(e->s);
    graph_free(e->g);
}

#endif
