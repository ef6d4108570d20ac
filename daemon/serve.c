/* serve — `inferd serve`: the daemon's life from argv to exit status.
 *
 * Order: config (file, env, flags) -> HTTP up at once (/health says 503
 * "loading") -> the model loads on a libuv worker thread while the loop keeps
 * serving (EXTEND_TIMEOUT_USEC= every few seconds so systemd waits) -> graph,
 * scheduler, engine thread -> one prewarm request -> READY=1, /health 200.
 *
 * Signals are uv_signal handles: the loop acts, no code runs in a handler.
 * SIGHUP rebuilds the whole config from the same sources and keeps the old
 * one if that fails; only the keys that need no model reload change.
 * SIGTERM/SIGINT: STOPPING=1, stop accepting, let running requests finish up
 * to drain_timeout_s (then cancel them), stop the engine, exit 0. A second
 * signal cuts the drain short.
 * A lost device (sched_device_error, ROBUSTNESS 35) takes the same drain
 * (every request in flight has failed already) and exits 1, which systemd
 * restarts (Restart=on-failure): a new process gets a new CUDA context.
 *
 * WATCHDOG=1 comes from the engine loop (sched_start's watchdog callback), so
 * a stuck engine step stops the pings and systemd restarts us; while the
 * model loads (no engine loop yet) the loop thread sends them.
 * Thread: the loop thread, except serve_load_work (a libuv worker) and
 * serve_watchdog (the engine thread).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "api/api.h"
#include "daemon/backend_open.h"
#include "daemon/config.h"
#include "daemon/crash.h"
#include "daemon/firstrun.h"
#include "daemon/fit.h"
#include "daemon/sdnotify.h"
#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/gguf.h"
#include "engine/graph.h"
#include "engine/log.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/sched.h"
#include "tools/cmds.h"

struct serve {
    int argc;
    char **argv;
    struct cfg cfg;
    const char *config_path;
    uv_loop_t loop;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t load_timer;
    uv_timer_t stop_timer;
    uv_work_t load_work;
    struct api *api;

    /* built by the load worker */
    struct backend *be;
    struct model *model;
    struct graph *graph;
    struct sched *sched;
    int32_t n_ctx;
    int load_rc;
    int load_cannot_work; /* the configuration cannot work: exit CMD_CONFIG */
    struct inf_error load_err;
    double load_seconds;

    int loading;
    int stopping;
    int exit_code;
    int closed;
};

static double serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void serve_api_config(const struct cfg *c, struct api_config *a)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->host, sizeof(a->host), "%s", c->host);
    a->port = c->port;
    a->agent_port = c->agent_port;
    if (c->model_id[0]) {
        snprintf(a->model_id, sizeof(a->model_id), "%s", c->model_id);
    } else {
        /* the file name without directory and .gguf */
        const char *b = strrchr(c->model, '/');
        b = b ? b + 1 : c->model;
        size_t n = strlen(b);
        if (n > 5 && !strcmp(b + n - 5, ".gguf"))
            n -= 5;
        if (n >= sizeof(a->model_id))
            n = sizeof(a->model_id) - 1;
        memcpy(a->model_id, b, n);
        a->model_id[n] = '\0';
    }
    snprintf(a->api_key, sizeof(a->api_key), "%s", c->api_key);
    a->max_body_bytes = c->max_body_bytes;
    a->max_header_bytes = c->max_header_bytes;
    a->max_connections = c->max_connections;
    a->max_connections_per_ip = c->max_connections_per_ip;
    a->idle_timeout_s = c->idle_timeout_s;
    a->read_timeout_s = c->read_timeout_s;
    a->ping_interval_s = c->ping_interval_s;
    a->retry_after_s = c->retry_after_s;
    a->drain_flush_s = c->drain_flush_s;
    a->engine_stall_s = c->engine_stall_s;
    a->max_tokens = c->max_tokens;
    a->default_max_tokens = c->default_max_tokens;
    a->max_n = c->max_n;
    a->max_prompts = c->max_prompts;
    a->max_stop = c->max_stop;
    a->max_stop_len = c->max_stop_len;
    a->max_logprobs = c->max_logprobs;
    a->max_logit_bias = c->max_logit_bias;
    snprintf(a->chat_template, sizeof(a->chat_template), "%s", c->chat_template);
    snprintf(a->trusted_proxies, sizeof(a->trusted_proxies), "%s", c->trusted_proxies);
}

/* ---- engine thread ---------------------------------------------------- */

static void serve_watchdog(void *ud)
{
    (void)ud;
    sdn_watchdog(); /* rate-limited to WATCHDOG_USEC/2, never blocks */
}

/* ---- loading (worker thread) ------------------------------------------- */

static void serve_prewarm_report(void *ud, const char *name, double ms)
{
    (*(int *)ud)++;
    log_info("prewarm: %s %.3f ms", name, ms);
}

/* KV cache size in tokens, from the first key that is set: kv_tokens,
 * kv_bytes, kv_percent (of the GPU memory free once the weights are
 * resident), else n_ctx * max_seqs. Logs what it holds. 0 or INF_EINVAL. */
static int serve_kv_tokens(struct serve *S, int32_t n_ctx, int64_t *out, struct inf_error *err)
{
    const struct model_hparams *hp = model_hparams(S->model);
    const int64_t tok_bytes = 2 * (int64_t)hp->n_layer *
                              (int64_t)quant_row_bytes(S->be->ops->kv_type,
                                                       (int64_t)hp->n_head_kv * hp->head_dim);
    const char *from = "n_ctx * max_seqs";
    int64_t kv = (int64_t)n_ctx * S->cfg.max_seqs;
    if (S->cfg.kv_tokens) {
        kv = S->cfg.kv_tokens;
        from = "kv_tokens";
    } else if (S->cfg.kv_bytes) {
        kv = S->cfg.kv_bytes / tok_bytes;
        from = "kv_bytes";
    } else if (S->cfg.kv_percent) {
        size_t w = 0, fr = 0, tot = 0;
        if (strcmp(S->be->ops->name, "cuda") || cuda_backend_mem(S->be, &w, &fr, &tot)) {
            log_warn("kv_percent applies to the cuda backend; the %s backend sizes the KV cache "
                     "by n_ctx * max_seqs",
                     S->be->ops->name);
        } else {
            kv = (int64_t)(fr / 100 * (size_t)S->cfg.kv_percent) / tok_bytes;
            from = "kv_percent";
        }
    }
    if (kv > (1 << 28))
        kv = 1 << 28;
    if (kv < n_ctx) {
        S->load_cannot_work = 1;
        return inf_error_set(err, INF_EINVAL,
                             "the KV cache from %s holds %lld tokens (%lld bytes each), fewer than "
                             "n_ctx %d: no sequence could fit",
                             from, (long long)kv, (long long)tok_bytes, n_ctx);
    }
    log_info("KV cache: %lld tokens, %.1f MiB (%s)", (long long)kv,
             (double)(kv * tok_bytes) / 1048576.0, from);
    *out = kv;
    return 0;
}

static void serve_load_work(uv_work_t *w)
{
    struct serve *S = w->data;
    double t0 = serve_now();
    struct inf_error *err = &S->load_err;

    struct backend_open_params bp = {0, S->cfg.gpu_device, S->cfg.threads,
                                     S->cfg.llamacpp_numerics ? CPU_NUMERICS_LLAMACPP
                                                              : CPU_NUMERICS_INVARIANT,
                                     !S->cfg.batch_invariant, 0, S->cfg.f16_weights_mb,
                                     S->cfg.q6_planes_percent};
    backend_kind_parse(S->cfg.backend, &bp.kind); /* cfg_validate checked both */
    attention_scores_parse(S->cfg.attention_scores, &bp.attention_tc);
    if (getenv("INFERD_BACKEND")) /* test runs pin the backend for a whole suite */
        bp.kind = backend_kind_default();
    /* llama.cpp's numbers need its kernels and its graph order together */
    S->load_rc = backend_open(&bp, &S->be, err);
    if (S->load_rc)
        return;
    /* does it fit (fit.h): the weights before they go up */
    struct gguf_file *gf;
    S->load_rc = gguf_open(S->cfg.model, &gf, err);
    if (S->load_rc)
        return;
    struct fit_mem fm;
    struct fit_need need = {fit_gguf_weight_bytes(gf), 0, 0, 0};
    fit_device(S->be, &fm);
    S->load_rc = fit_check("before the weights upload", &need, &fm, err);
    if (S->load_rc) {
        gguf_close(gf);
        S->load_cannot_work = 1;
        return;
    }
    S->load_rc = model_load_gguf(gf, S->cfg.model, S->be, &S->model, err); /* owns gf */
    if (S->load_rc == INF_ENOMEM && fm.known) {
        S->load_rc = fit_explain("uploading the weights", &need, &fm, err);
        S->load_cannot_work = 1;
    }
    if (S->load_rc)
        return;
    backend_log_resident(S->be, serve_now() - t0);
    const struct model_hparams *hp = model_hparams(S->model);
    int32_t n_ctx = S->cfg.n_ctx;
    if (n_ctx <= 0)
        n_ctx = hp->n_ctx_train > 0 && hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    S->n_ctx = n_ctx;

    struct sched_config sc;
    sched_config_default(&sc);
    sc.max_seqs = S->cfg.max_seqs;
    sc.queue_len = S->cfg.queue_len;
    sc.n_ctx = n_ctx;
    sc.block_size = S->cfg.block_size;
    sc.step_tokens = S->cfg.step_tokens;
    sc.prefix_cache = S->cfg.prefix_cache;
    /* idle pings at least four times per watchdog period: the rate limit
     * sends one per half period, so an idle daemon is never late */
    const uint64_t wd_quarter_ms = sdn_watchdog_usec() / 4000;
    if (sdn_watchdog_usec() && wd_quarter_ms < (uint64_t)sc.idle_wait_ms)
        sc.idle_wait_ms = wd_quarter_ms > 0 ? (int32_t)wd_quarter_ms : 1;
    int64_t kv = 0;
    S->load_rc = serve_kv_tokens(S, n_ctx, &kv, err);
    if (S->load_rc)
        return;
    sc.kv_tokens = (int32_t)kv;

    struct graph_params gp;
    memset(&gp, 0, sizeof(gp));
    gp.block_size = sc.block_size;
    gp.n_blocks = (sc.kv_tokens + sc.block_size - 1) / sc.block_size;
    /* a step holds at most step_tokens (prefill chunk + decodes), and at
     * least one decode token per running sequence */
    gp.max_tokens = sc.step_tokens > sc.max_seqs ? sc.step_tokens : sc.max_seqs;
    /* logits: one per sequence per step, or every row (echo + logprobs) */
    gp.max_logits = gp.max_tokens;
    gp.late_out_rows = S->cfg.llamacpp_numerics;
    /* does it fit: the KV cache and the activations beside the weights */
    size_t w_res = 0, fr_ = 0, tot_ = 0;
    if (!strcmp(S->be->ops->name, "cuda") && cuda_backend_mem(S->be, &w_res, &fr_, &tot_) == 0)
        need.weights = w_res;
    need.resident = 1;
    graph_memory(S->model, &gp, &need.kv, &need.act);
    fit_device(S->be, &fm);
    /* a GPU's free memory has the weights taken out already; the test
     * budget on a backend without device memory does not */
    if (fm.known && strcmp(S->be->ops->name, "cuda"))
        fm.free_b = fm.free_b > need.weights ? fm.free_b - need.weights : 0;
    S->load_rc = fit_check("with the weights resident", &need, &fm, err);
    if (S->load_rc) {
        S->load_cannot_work = 1;
        return;
    }
    S->load_rc = graph_new(S->model, &gp, &S->graph, err);
    if (S->load_rc == INF_ENOMEM && fm.known) {
        S->load_rc = fit_explain("allocating the KV cache and activations", &need, &fm, err);
        S->load_cannot_work = 1;
    }
    if (S->load_rc)
        return;
    /* every kernel the backend can dispatch to, once, before READY=1 */
    if (S->cfg.prewarm && S->be->ops->prewarm) {
        const double tp = serve_now();
        int n = 0;
        log_info("prewarming the %s kernels", S->be->ops->name);
        S->load_rc = S->be->ops->prewarm(S->be, serve_prewarm_report, &n);
        if (S->load_rc) {
            inf_error_set(err, S->load_rc, "kernel prewarm failed after %d kernels: %s", n,
                          inf_strerror(S->load_rc));
            return;
        }
        log_info("prewarmed %d kernels in %.1f ms", n, (serve_now() - tp) * 1e3);
    }
    S->load_rc = sched_new(S->model, S->graph, &sc, &S->sched, err);
    if (S->load_rc)
        return;
    /* response_format / tools' vocabulary tables now, not in the first
     * constrained request's time to first token; without them that request
     * builds them (and reports a failure to) */
    if (S->cfg.prewarm) {
        const double tj = serve_now();
        const int jrc = sched_prepare_json(S->sched);
        if (jrc)
            log_warn("JSON constraint tables not built at startup (%s): the first constrained request builds them",
                     inf_strerror(jrc));
        else
            log_info("JSON constraint tables built in %.1f ms", (serve_now() - tj) * 1e3);
    }
    S->load_seconds = serve_now() - t0;
}

static void serve_close_handles(struct serve *S)
{
    if (S->closed)
        return;
    S->closed = 1;
    uv_close((uv_handle_t *)&S->sig_term, NULL);
    uv_close((uv_handle_t *)&S->sig_int, NULL);
    uv_close((uv_handle_t *)&S->sig_hup, NULL);
    uv_close((uv_handle_t *)&S->load_timer, NULL);
    uv_close((uv_handle_t *)&S->stop_timer, NULL);
}

/* Everything has drained (or there was nothing to drain): stop the engine,
 * let the loop run out. Runs from a timer, never from inside MHD. */
static void serve_teardown(uv_timer_t *t)
{
    struct serve *S = t->data;
    log_info("drained; stopping the engine");
    if (S->sched)
        sched_stop(S->sched, 1);
    if (S->api) {
        api_free(S->api);
        S->api = NULL;
    }
    serve_close_handles(S);
}

/* api_shutdown's callback: it may run deep inside an MHD callback, so the
 * teardown (which stops MHD) is deferred to the next loop iteration. */
static void serve_drained(void *ud)
{
    struct serve *S = ud;
    uv_timer_start(&S->stop_timer, serve_teardown, 0, 0);
}

static void serve_stop(struct serve *S, const char *why)
{
    if (S->stopping) {
        log_warn("%s again: cutting the drain short", why);
        if (S->api)
            api_shutdown(S->api, 0, serve_drained, S);
        return;
    }
    S->stopping = 1;
    log_info("%s: stopping (drain up to %d s)", why, S->cfg.drain_timeout_s);
    sdn_send("STOPPING=1\nSTATUS=draining");
    if (S->loading) /* the worker cannot be interrupted; it finishes first */
        return;
    if (S->api)
        api_shutdown(S->api, (uint64_t)S->cfg.drain_timeout_s * 1000u, serve_drained, S);
    else
        serve_close_handles(S);
}

/* api_on_fatal: the engine's device is lost; nothing in this process can
 * compute again. */
static void serve_fatal(void *ud, int code)
{
    struct serve *S = ud;
    S->exit_code = CMD_FAIL;
    sdn_send("STATUS=device lost: %s", inf_strerror(code));
    serve_stop(S, "device lost");
}

static void serve_prewarmed(void *ud, int rc)
{
    struct serve *S = ud;
    uv_timer_stop(&S->load_timer);
    if (rc) {
        log_error("prewarm failed: %s", inf_strerror(rc));
        S->exit_code = CMD_FAIL;
        serve_stop(S, "prewarm failure");
        return;
    }
    log_info("ready: model=%s n_ctx=%d max_seqs=%d port=%d load_s=%.2f", S->cfg.model,
             (int)S->n_ctx, S->cfg.max_seqs, api_port(S->api), S->load_seconds);
    sdn_send("READY=1\nSTATUS=serving on %s:%d", S->cfg.host, api_port(S->api));
}

static void serve_load_done(uv_work_t *w, int status)
{
    struct serve *S = w->data;
    S->loading = 0;
    if (status == 0 && S->load_rc == 0 && S->sched) {
        int rc = sched_start(S->sched, serve_watchdog, S);
        if (rc)
            S->load_rc = inf_error_set(&S->load_err, rc, "sched_start failed: %s",
                                       inf_strerror(rc));
    }
    if (status || S->load_rc) {
        log_error("loading \"%s\" failed: %s", S->cfg.model,
                  S->load_err.msg[0] ? S->load_err.msg : inf_strerror(S->load_rc));
        sdn_send("STATUS=model load failed: %s", S->load_err.msg);
        /* asked to stop while loading: the failure is moot; a configuration
         * that cannot work is not worth a restart (CMD_CONFIG) */
        S->exit_code = S->stopping ? CMD_OK : S->load_cannot_work ? CMD_CONFIG : CMD_FAIL;
        uv_timer_stop(&S->load_timer);
        S->stopping = 1;
        if (S->api)
            api_shutdown(S->api, 0, serve_drained, S);
        else
            serve_close_handles(S);
        return;
    }
    log_info("model loaded in %.2f s (n_ctx %d)", S->load_seconds, (int)S->n_ctx);
    api_set_engine(S->api, S->model, S->sched, S->n_ctx);
    if (S->stopping) { /* SIGTERM during the load */
        uv_timer_stop(&S->load_timer);
        api_shutdown(S->api, 0, serve_drained, S);
        return;
    }
    sdn_send("STATUS=prewarming");
    if (!S->cfg.prewarm || api_prewarm(S->api, serve_prewarmed, S)) {
        api_set_ready(S->api);
        serve_prewarmed(S, 0);
    }
}

static void serve_load_tick(uv_timer_t *t)
{
    (void)t;
    /* a long load must not look like a hang to systemd */
    sdn_send("EXTEND_TIMEOUT_USEC=%llu", 30ull * 1000000ull);
    sdn_watchdog();
}

/* ---- signals ------------------------------------------------------------ */

static void serve_on_signal(uv_signal_t *h, int signum)
{
    struct serve *S = h->data;
    if (signum == SIGHUP) {
        struct cfg next;
        struct inf_error err = {0};
        const char *cp;
        int help;
        if (cfg_build(&next, S->argc, S->argv, &cp, &help, &err)) {
            log_error("reload: %s; keeping the current configuration", err.msg);
            return;
        }
        char ignored[512];
        int changed = cfg_reload(&S->cfg, &next, ignored, sizeof(ignored));
        log_set_level(S->cfg.log_level);
        struct api_config ac;
        serve_api_config(&S->cfg, &ac);
        if (S->api)
            api_reconfigure(S->api, &ac);
        log_info("reload: %d settings changed%s%s%s", changed,
                 ignored[0] ? " (need a restart, unchanged: " : "", ignored,
                 ignored[0] ? ")" : "");
        sdn_send("STATUS=configuration reloaded");
        return;
    }
    serve_stop(S, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* ---- entry -------------------------------------------------------------- */

int cmd_serve(int argc, char **argv)
{
    struct serve *S = calloc(1, sizeof(*S));
    if (!S)
        return CMD_FAIL;
    S->argc = argc;
    S->argv = argv;
    struct inf_error err = {0};
    int help = 0;
    int rc = cfg_build(&S->cfg, argc, argv, &S->config_path, &help, &err);
    if (help) {
        cfg_usage(stdout);
        free(S);
        return CMD_OK;
    }
    if (rc) {
        fprintf(stderr, "inferd serve: %s\n", err.msg);
        if (rc == INF_ENOTFOUND)
            fprintf(stderr, "(inferd serve --help lists the options)\n");
        /* Without a config file every setting came from argv (or the
         * environment): a bad value or a missing --model is a usage error
         * (cmds.h), like the other subcommands. A bad file is a failure. */
        int usage = rc == INF_ENOTFOUND || (rc == INF_EINVAL && !S->config_path);
        free(S);
        return usage ? CMD_USAGE : CMD_FAIL;
    }
    log_set_level(S->cfg.log_level);
    if (isatty(STDERR_FILENO))
        log_set_timestamps(1);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error code, not a kill */
    if (crash_install())     /* before any thread: a fatal signal's stack goes to the log */
        log_warn("no crash report handler (sigaction failed): a fatal signal leaves no stack in the log");
    sdn_init();

    /* first-run mistakes: one line each, before anything starts (firstrun.h) */
    char why[2048];
    if (firstrun_check_model(S->cfg.model, S->config_path, why, sizeof(why)) ||
        firstrun_check_port(S->cfg.host, S->cfg.port, why, sizeof(why))) {
        fprintf(stderr, "inferd serve: %s\n", why);
        sdn_send("STATUS=%s", why);
        sdn_close();
        free(S);
        return CMD_FAIL;
    }
    if (S->cfg.model_defaulted)
        log_info("no model configured: serving the bundled demo model %s (to serve yours: "
                 "--model FILE.gguf, or model = in the config file)", S->cfg.model);

    uv_loop_init(&S->loop);
    struct api_config ac;
    serve_api_config(&S->cfg, &ac);
    rc = api_new(&S->loop, &ac, &S->api, &err);
    /* the agent port taken is a setup error like the API's own port; the
     * api's handles then close through the loop before it is closed */
    if (!rc && (rc = api_agent_start(S->api, &err)) != 0) {
        api_free(S->api);
        uv_run(&S->loop, UV_RUN_DEFAULT);
    }
    if (rc) {
        log_error("%s", err.msg);
        sdn_send("STATUS=cannot listen: %s", err.msg);
        uv_loop_close(&S->loop);
        sdn_close();
        free(S);
        return CMD_FAIL;
    }
    api_on_fatal(S->api, serve_fatal, S);
    log_info("listening on %s:%d (model id \"%s\"%s)", S->cfg.host, api_port(S->api),
             ac.model_id, ac.api_key[0] ? ", API key required" : "");

    uv_signal_init(&S->loop, &S->sig_term);
    uv_signal_init(&S->loop, &S->sig_int);
    uv_signal_init(&S->loop, &S->sig_hup);
    S->sig_term.data = S->sig_int.data = S->sig_hup.data = S;
    uv_signal_start(&S->sig_term, serve_on_signal, SIGTERM);
    uv_signal_start(&S->sig_int, serve_on_signal, SIGINT);
    uv_signal_start(&S->sig_hup, serve_on_signal, SIGHUP);

    uv_timer_init(&S->loop, &S->load_timer);
    uv_timer_init(&S->loop, &S->stop_timer);
    S->load_timer.data = S->stop_timer.data = S;
    uv_timer_start(&S->load_timer, serve_load_tick, 0, 5000);
    sdn_send("STATUS=loading %s", S->cfg.model);

    S->loading = 1;
    S->load_work.data = S;
    rc = uv_queue_work(&S->loop, &S->load_work, serve_load_work, serve_load_done);
    if (rc) {
        log_error("uv_queue_work() failed (%s)", uv_strerror(rc));
        S->loading = 0;
        S->exit_code = CMD_FAIL;
        api_shutdown(S->api, 0, serve_drained, S);
    }

    uv_run(&S->loop, UV_RUN_DEFAULT);

    sched_free(S->sched);
    graph_free(S->graph);
    model_free(S->model);
    backend_free(S->be);
    if (uv_loop_close(&S->loop) == UV_EBUSY)
        log_warn("event loop closed with handles still open");
    sdn_close();
    int code = S->exit_code;
    log_info("exit %d", code);
    free(S);
    return code;
}
