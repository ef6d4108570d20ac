/* cmd_bench — `inferd bench`: prefill and decode throughput of the CPU engine,
 * printed like llama-bench (mean ± sd over --reps runs).
 *
 *   ppN: one forward pass over N prompt tokens (positions 0..N-1, logits of
 *        the last row), N / seconds;
 *   tgN: N single-token forward passes (positions 0..N-1), N / seconds.
 * With --peer FILE (a markdown table such as ../shared/peer/llamacpp-cpu.md)
 * the row whose first cell names the model file is printed beside. The
 * machine's load average is printed before and after the runs: wall-clock
 * numbers from a shared machine mean little without it.
 * Single-threaded CLI code (the backend runs its own worker threads).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/backend_open.h"
#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/graph.h"
#include "engine/model.h"
#include "tools/cmds.h"

#define BENCH_MAX_TESTS 16

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "128,512" -> {128, 512}; returns the count or -1. */
static int bench_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 1 || v > 65536 || n >= cap)
            return -1;
        out[n++] = (int)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

/* One run: n tokens as one batch (pp) or one at a time (tg); seconds. */
static double bench_run(struct graph *g, int32_t n_vocab, int n, int one_at_a_time,
                        int32_t *tok, int32_t *pos, int32_t *seq, const int32_t *bt,
                        float *logits, int *rc)
{
    const int32_t *tables[1] = {bt};
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)(((uint32_t)i * 2654435761u) % (uint32_t)n_vocab);
        pos[i] = i;
        seq[i] = 0;
    }
    const double t0 = bench_now();
    if (one_at_a_time) {
        for (int i = 0; i < n && !*rc; i++) {
            int32_t row = 0;
            struct graph_batch b = {1, tok + i, pos + i, seq, 1, tables, 1, &row, logits, 0};
            *rc = graph_forward(g, &b);
        }
    } else {
        int32_t row = n - 1;
        struct graph_batch b = {n, tok, pos, seq, 1, tables, 1, &row, logits, 0};
        *rc = graph_forward(g, &b);
    }
    return bench_now() - t0;
}

/* The peer table's cell for `test` ("pp128", ...) on the row naming model. */
static int bench_peer(const char *file, const char *model, const char *test, char *out,
                      size_t cap)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return -1;
    char line[1024];
    int col = -1, found = -1;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] != '|')
            continue;
        char *cells[16];
        int nc = 0;
        for (char *p = strtok(line + 1, "|"); p && nc < 16; p = strtok(NULL, "|")) {
            while (*p == ' ')
                p++;
            char *e = p + strlen(p);
            while (e > p && (e[-1] == ' ' || e[-1] == '\n'))
                *--e = '\0';
            cells[nc++] = p;
        }
        if (col < 0) {
            for (int i = 0; i < nc; i++)
                if (!strncmp(cells[i], test, strlen(test)) && cells[i][strlen(test)] == ' ')
                    col = i;
            continue;
        }
        if (nc > col && strstr(cells[0], model)) {
            snprintf(out, cap, "%s", cells[col]);
            found = 0;
            break;
        }
    }
    fclose(f);
    return found;
}

/* "load average (1, 5, 15 min) before: 0.52 0.61 0.70" */
static void bench_load(const char *when)
{
    double la[3];
    if (getloadavg(la, 3) == 3)
        printf("load average (1, 5, 15 min) %s: %.2f %.2f %.2f\n", when, la[0], la[1], la[2]);
}

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: inferd bench --model M [--threads 2] [--pp 128,512] [--tg 128] [--reps 3]\n"
               "                    [--peer ../shared/peer/llamacpp-cpu.md] [--backend auto|cuda|cpu]\n"
               "                    [--attention-scores exact|tensor]   (config key attention_scores)\n"
               "                    [--batch-invariant true|false]      (config key batch_invariant)\n"
               "                    [--f16-weights MiB]   (config key f16_weights_mb; with batch-invariant false)\n"
               "       inferd bench --op [...]   one matrix product per type/shape (--op --help)\n");
}

int cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--op"))
            return cmd_bench_op(argc, argv);
    const char *model_path = NULL, *peer = NULL;
    int pp[BENCH_MAX_TESTS] = {128, 512}, tg[BENCH_MAX_TESTS] = {128};
    int n_pp = 2, n_tg = 1;
    long threads = 2, reps = 3;
    int kind = backend_kind_default(), att_tc = 0, no_inv = 0, f16_mb = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage(stdout);
            return CMD_OK;
        }
        static const char *const flags[] = {"--model", "--peer", "--pp", "--tg", "--threads",
                                            "--reps", "--backend", "--attention-scores", "--batch-invariant",
                                            "--f16-weights"};
        int known = 0;
        for (size_t f = 0; f < sizeof(flags) / sizeof(flags[0]); f++)
            known |= !strcmp(a, flags[f]);
        if (!known) {
            fprintf(stderr, "inferd bench: unknown flag %s\n", a);
            bench_usage(stderr);
            return CMD_USAGE;
        }
        if (!v) {
            fprintf(stderr, "inferd bench: missing value for %s\n", a);
            return CMD_USAGE;
        }
        i++;
        if (!strcmp(a, "--model")) {
            model_path = v;
        } else if (!strcmp(a, "--peer")) {
            peer = v;
        } else if (!strcmp(a, "--backend")) {
            if (backend_kind_parse(v, &kind)) {
                fprintf(stderr, "inferd bench: --backend must be auto, cuda or cpu, not '%s'\n", v);
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--attention-scores")) {
            if (attention_scores_parse(v, &att_tc)) {
                fprintf(stderr, "inferd bench: --attention-scores must be exact or tensor, not '%s'\n", v);
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--batch-invariant")) {
            if (batch_invariant_parse(v, &no_inv)) {
                fprintf(stderr, "inferd bench: --batch-invariant must be true or false, not '%s'\n", v);
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--f16-weights")) {
            if (f16_weights_parse(v, &f16_mb)) {
                fprintf(stderr, "inferd bench: --f16-weights expects MiB (0..4194304), not '%s'\n", v);
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--pp")) {
            if ((n_pp = bench_list(v, pp, BENCH_MAX_TESTS)) < 0) {
                fprintf(stderr, "inferd bench: bad --pp list '%s'\n", v);
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--tg")) {
            if ((n_tg = bench_list(v, tg, BENCH_MAX_TESTS)) < 0) {
                fprintf(stderr, "inferd bench: bad --tg list '%s'\n", v);
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--threads") || !strcmp(a, "--reps")) {
            char *end;
            long x = strtol(v, &end, 10);
            if (*end || x < 1 || x > 256) {
                fprintf(stderr, "inferd bench: %s expects 1..256, got '%s'\n", a, v);
                return CMD_USAGE;
            }
            *(!strcmp(a, "--threads") ? &threads : &reps) = x;
        }
    }
    if (!model_path) {
        bench_usage(stderr);
        return CMD_USAGE;
    }

    struct inf_error err = {0, ""};
    struct backend *be = NULL;
    struct model *m = NULL;
    struct graph *g = NULL;
    int status = CMD_FAIL, rc = 0;
    const struct backend_open_params bp = {kind, 0, (int)threads, CPU_NUMERICS_INVARIANT, no_inv, att_tc, f16_mb,
                                            CUDA_Q6P_PERCENT};
    if (backend_open(&bp, &be, &err)) {
        fprintf(stderr, "inferd bench: %s\n", err.msg);
        goto out;
    }
    if (model_load(model_path, be, &m, &err)) {
        fprintf(stderr, "inferd bench: cannot load \"%s\": %s\n", model_path, err.msg);
        goto out;
    }
    const struct model_hparams *hp = model_hparams(m);
    int max_n = 1;
    for (int i = 0; i < n_pp; i++)
        max_n = pp[i] > max_n ? pp[i] : max_n;
    for (int i = 0; i < n_tg; i++)
        max_n = tg[i] > max_n ? tg[i] : max_n;
    if (max_n > hp->n_ctx_train) {
        fprintf(stderr, "inferd bench: %d tokens exceed the model's context (%d)\n", max_n,
                hp->n_ctx_train);
        goto out;
    }
    struct graph_params gp = {max_n, 1, (max_n + 15) / 16, 16, 0};
    if (graph_new(m, &gp, &g, &err)) {
        fprintf(stderr, "inferd bench: %s\n", err.msg);
        goto out;
    }
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)max_n * 3);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)gp.n_blocks);
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    if (!tok || !bt || !logits) {
        free(tok), free(bt), free(logits);
        goto out;
    }
    for (int i = 0; i < gp.n_blocks; i++)
        bt[i] = i;
    const char *base = strrchr(model_path, '/');
    base = base ? base + 1 : model_path;

    bench_load("before");
    /* the CPU's thread count, or the GPU backend's name */
    char where[32];
    if (!strcmp(be->ops->name, "cpu"))
        snprintf(where, sizeof(where), "cpu %ld threads", threads);
    else
        snprintf(where, sizeof(where), "%s", be->ops->name);
    printf("| model | backend | test | t/s |%s\n", peer ? " llama.cpp t/s |" : "");
    printf("|---|---|---:|---:|%s\n", peer ? "---:|" : "");
    for (int k = 0; k < n_pp + n_tg && !rc; k++) {
        const int is_tg = k >= n_pp, n = is_tg ? tg[k - n_pp] : pp[k];
        double sum = 0, sum2 = 0;
        /* one warm-up run, then the measured ones */
        bench_run(g, hp->n_vocab, n, is_tg, tok, tok + max_n, tok + 2 * max_n, bt, logits, &rc);
        for (long r = 0; r < reps && !rc; r++) {
            const double t = bench_run(g, hp->n_vocab, n, is_tg, tok, tok + max_n,
                                       tok + 2 * max_n, bt, logits, &rc);
            const double ts = n / t;
            sum += ts;
            sum2 += ts * ts;
        }
        if (rc)
            break;
        const double mean = sum / (double)reps;
        const double sd = reps > 1 ? sqrt(fmax(0.0, (sum2 - sum * mean) / (double)(reps - 1))) : 0;
        char test[32], peer_cell[64] = "n/a";
        snprintf(test, sizeof(test), "%s%d", is_tg ? "tg" : "pp", n);
        if (peer && bench_peer(peer, base, test, peer_cell, sizeof(peer_cell)) != 0)
            snprintf(peer_cell, sizeof(peer_cell), "n/a");
        printf("| %s | %s | %s | %.0f ± %.0f |", base, where, test, mean, sd);
        if (peer)
            printf(" %s |", peer_cell);
        printf("\n");
        fflush(stdout);
    }
    if (rc) {
        fprintf(stderr, "inferd bench: forward pass failed: %s\n", inf_strerror(rc));
    } else {
        bench_load("after");
        status = CMD_OK;
    }
    free(tok);
    free(bt);
    free(logits);
out:
    graph_free(g);
    model_free(m);
    backend_free(be);
    return status;
}
