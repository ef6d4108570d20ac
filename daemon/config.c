/* config — parse etc/inferd.conf, the environment and CLI flags into a struct cfg.
 *
 * One table (cfg_keys) describes every key: its type, range, default, whether
 * SIGHUP may change it, and the help line; the file parser, the flag parser,
 * --help and cfg_reload are all driven by it, so a key cannot be known to one
 * and missing from another. Thread: the loop thread.
 */
#include "daemon/config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/chat_template.h"
#include "api/proxy.h"
#include "daemon/backend_open.h"
#include "engine/log.h"

enum cfg_type { CFG_INT, CFG_I64, CFG_STR, CFG_BOOL, CFG_LEVEL };

struct cfg_key {
    const char *name;
    int type;
    size_t off;
    size_t size;     /* CFG_STR: buffer size */
    int64_t lo, hi;  /* CFG_INT / CFG_I64 range */
    const char *def; /* default, as text (parsed by the same code as the file) */
    int reload;      /* 1: SIGHUP may change it */
    const char *help;
};

#define CFG_OFF(f) offsetof(struct cfg, f), sizeof(((struct cfg *)0)->f)

static const struct cfg_key cfg_keys[] = {
    {"model", CFG_STR, CFG_OFF(model), 0, 0, "", 0,
     "GGUF model file to serve (empty: the bundled demo model " INFERD_DEFAULT_MODEL
     " when installed)"},
    {"model_id", CFG_STR, CFG_OFF(model_id), 0, 0, "", 0,
     "model id clients send in \"model\" (empty: the file name without .gguf)"},
    {"host", CFG_STR, CFG_OFF(host), 0, 0, "127.0.0.1", 0, "listen address (IPv4 or IPv6)"},
    {"port", CFG_INT, CFG_OFF(port), 0, 65535, "8080", 0, "listen port (0: any free port, logged)"},
    {"agent_port", CFG_INT, CFG_OFF(agent_port), 0, 65535, "0", 0,
     "TCP port on host that answers a load balancer's agent check (HAProxy agent-check) with "
     "this daemon's weight, the free share of its KV cache (0: none)"},
    {"backend", CFG_STR, CFG_OFF(backend), 0, 0, "auto", 0,
     "engine backend: auto (the GPU when one answers, else the CPU), cuda, or cpu"},
    {"gpu_device", CFG_INT, CFG_OFF(gpu_device), 0, 255, "0", 0, "CUDA device index (backend cuda/auto)"},
    {"threads", CFG_INT, CFG_OFF(threads), 1, 256, "2", 0, "CPU engine threads"},
    {"n_ctx", CFG_INT, CFG_OFF(n_ctx), 0, 1 << 20, "0", 0,
     "context per sequence: prompt + max_tokens (0: the model's training context, at most 4096)"},
    {"max_seqs", CFG_INT, CFG_OFF(max_seqs), 1, 4096, "16", 0, "sequences generating at once"},
    {"queue_len", CFG_INT, CFG_OFF(queue_len), 1, 1 << 20, "64",
     0, "requests waiting for admission before 429"},
    {"kv_bytes", CFG_I64, CFG_OFF(kv_bytes), 0, INT64_MAX, "0", 0,
     "KV cache size in bytes, K and V of every layer (0: see kv_percent / kv_tokens)"},
    {"kv_percent", CFG_INT, CFG_OFF(kv_percent), 0, 95, "0", 0,
     "KV cache as a percentage of the GPU memory free once the weights are resident "
     "(cuda backend; 0: off; what is left must hold the activations)"},
    {"kv_tokens", CFG_INT, CFG_OFF(kv_tokens), 0, 1 << 28, "0", 0,
     "KV cache size in tokens; wins over kv_bytes and kv_percent (all 0: n_ctx * max_seqs)"},
    {"block_size", CFG_INT, CFG_OFF(block_size), 1, 1024, "16", 0, "tokens per KV cache block"},
    {"step_tokens", CFG_INT, CFG_OFF(step_tokens), 1, 1 << 20, "512", 0,
     "token budget of one engine step (prefill chunk + decodes)"},
    {"prefix_cache", CFG_BOOL, CFG_OFF(prefix_cache), 0, 1, "true", 0,
     "reuse KV blocks of identical prompt prefixes"},
    {"llamacpp_numerics", CFG_BOOL, CFG_OFF(llamacpp_numerics), 0, 1, "false", 0,
     "compute with llama.cpp's batch-dependent CPU kernels: a request served alone gets "
     "llama.cpp's numbers bit for bit, but a sequence's logits then depend on what it is "
     "batched with (false: batch invariant)"},
    {"batch_invariant", CFG_BOOL, CFG_OFF(batch_invariant), 0, 1, "true", 0,
     "GPU (cuda backend): F32/F16/BF16 weight products through cuBLAS with one algorithm per "
     "weight shape, so a row's result does not depend on what it is batched with (false: "
     "cuBLAS picks per batch size, faster, a row may then differ by ulps between batch sizes)"},
    {"f16_weights_mb", CFG_INT, CFG_OFF(f16_weights_mb), 0, F16_WEIGHTS_MB_MAX, "0", 0,
     "GPU (cuda backend), with batch_invariant = false: keep F16 copies of the Q4_K/Q5_K/Q6_K "
     "matrices, up to this many MiB, so prefill products of many rows skip dequantizing the "
     "weight (about 2 bytes an element: ~13 GiB for a 7B model; the F16 path then serves from 64 "
     "rows instead of 256, with the numbers it gives anyway; the memory comes out of what the KV "
     "cache would get). 0: off"},
    {"q6_planes_percent", CFG_INT, CFG_OFF(q6_planes_percent), 0, 50, "5" /* CUDA_Q6P_PERCENT */, 0,
     "GPU (cuda backend, compute capability 9.0: H100/H200): keep the Q6_K and Q4_K matrices' int8 "
     "planes the prefill kernels read (2 bytes an element), in load order, up to this percentage of "
     "the GPU's memory, so batches of 256 rows and more skip expanding them (Q6_K 0.84-0.92x the "
     "time, Q4_K 0.89-0.95x; the same numbers; the memory comes out of what the KV cache would "
     "get; the name is from when only Q6_K had them). 0: off"},
    {"attention_scores", CFG_STR, CFG_OFF(attention_scores), 0, 0, "exact", 0,
     "GPU (cuda backend): attention scores \"exact\" (the CPU backend's order and expf: the "
     "GPU's logits equal the CPU's) or \"tensor\" (tensor-core sums, ulps from the CPU's; "
     "faster prefill at long context)"},
    {"prewarm", CFG_BOOL, CFG_OFF(prewarm), 0, 1, "true", 0,
     "before reporting ready: launch every kernel the backend can pick, build the JSON constraint's "
     "vocabulary tables, run one tiny request through the engine"},
    {"api_key", CFG_STR, CFG_OFF(api_key), 0, 0, "", 1,
     "when set, every route but /health needs 'Authorization: Bearer <key>' "
     "(INFERD_API_KEY overrides)"},
    {"log_level", CFG_LEVEL, CFG_OFF(log_level), 0, 0, "info", 1, "error, warn, info or debug"},
    {"max_body_bytes", CFG_I64, CFG_OFF(max_body_bytes), 1024, (int64_t)1 << 30, "4194304", 1,
     "largest request body (413 above)"},
    {"max_header_bytes", CFG_INT, CFG_OFF(max_header_bytes), 1024, 1 << 20, "16384", 1,
     "largest request line + headers (431 above)"},
    {"max_connections", CFG_INT, CFG_OFF(max_connections), 1, 1 << 20, "512", 1,
     "open connections in total; more are refused at accept"},
    {"max_connections_per_ip", CFG_INT, CFG_OFF(max_connections_per_ip), 1, 1 << 20, "64", 1,
     "open connections from one client address"},
    {"idle_timeout_s", CFG_INT, CFG_OFF(idle_timeout_s), 1, 86400, "60", 1,
     "close a connection idle this long"},
    {"read_timeout_s", CFG_INT, CFG_OFF(read_timeout_s), 1, 3600, "30", 1,
     "deadline to receive a whole request (headers + body), counted from the connection's "
     "start or the previous response: against slow clients"},
    {"drain_timeout_s", CFG_INT, CFG_OFF(drain_timeout_s), 0, 3600, "30", 1,
     "on SIGTERM, wait this long for running requests before canceling them"},
    {"drain_flush_s", CFG_INT, CFG_OFF(drain_flush_s), 0, 3600, "5", 1,
     "then give clients this long to read what was already sent their way (the cancel's "
     "error events, [DONE]) before closing their connections"},
    {"ping_interval_s", CFG_INT, CFG_OFF(ping_interval_s), 1, 3600, "15", 1,
     "SSE comment ': ping' on a stream idle this long"},
    {"retry_after_s", CFG_INT, CFG_OFF(retry_after_s), 1, 3600, "1", 1,
     "Retry-After of a 429 (queue full) or 503 (loading)"},
    {"engine_stall_s", CFG_INT, CFG_OFF(engine_stall_s), 0, 86400, "10", 1,
     "/health answers 503 \"stalled\" once the engine loop has not run for this long "
     "(a stuck step; 0: never; systemd's watchdog restarts a stuck daemon at WatchdogSec)"},
    {"max_tokens", CFG_INT, CFG_OFF(max_tokens), 1, 1 << 20, "4096", 1,
     "cap on a request's max_tokens (400 above)"},
    {"default_max_tokens", CFG_INT, CFG_OFF(default_max_tokens), 1, 1 << 20, "16", 1,
     "max_tokens when the request does not say"},
    {"max_n", CFG_INT, CFG_OFF(max_n), 1, 128, "16", 1, "largest n (choices per prompt)"},
    {"max_prompts", CFG_INT, CFG_OFF(max_prompts), 1, 1024, "16",
     1, "most prompts in one request (prompt array)"},
    {"max_stop", CFG_INT, CFG_OFF(max_stop), 0, 64, "4", 1, "most stop strings"},
    {"max_stop_len", CFG_INT, CFG_OFF(max_stop_len), 1, 4096, "256", 1,
     "longest stop string in bytes"},
    {"max_logprobs", CFG_INT, CFG_OFF(max_logprobs), 0, 20, "20", 1, "largest logprobs"},
    {"max_logit_bias", CFG_INT, CFG_OFF(max_logit_bias), 0, 1 << 20, "1024", 1,
     "most logit_bias entries"},
    {"chat_template", CFG_STR, CFG_OFF(chat_template), 0, 0, "auto", 0,
     "chat template family for /v1/chat/completions: auto (recognise the GGUF's "
     "tokenizer.chat_template), chatml, qwen3, llama3, llama3.1, llama2, mistral or gemma"},
    {"trusted_proxies", CFG_STR, CFG_OFF(trusted_proxies), 0, 0, "", 1,
     "reverse proxies (addresses/CIDRs, comma-separated) whose X-Forwarded-For is believed"},
};

#define CFG_NKEYS (sizeof(cfg_keys) / sizeof(cfg_keys[0]))

static const struct cfg_key *cfg_find(const char *name)
{
    for (size_t i = 0; i < CFG_NKEYS; i++)
        if (!strcmp(cfg_keys[i].name, name))
            return &cfg_keys[i];
    return NULL;
}

static int cfg_parse_i64(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return INF_EINVAL;
    *out = v;
    return 0;
}

static int cfg_set_key(struct cfg *c, const struct cfg_key *k, const char *value,
                       struct inf_error *err)
{
    char *field = (char *)c + k->off;
    int64_t v;
    int lvl;

    switch (k->type) {
    case CFG_STR:
        if (strlen(value) >= k->size)
            return inf_error_set(err, INF_EINVAL, "%s: value longer than %zu bytes", k->name,
                                 k->size - 1);
        /* zero the tail too: cfg_reload compares whole buffers */
        memset(field, 0, k->size);
        memcpy(field, value, strlen(value));
        return 0;
    case CFG_BOOL:
        if (!strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "1") ||
            !strcmp(value, "on"))
            *(int *)field = 1;
        else if (!strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "0") ||
                 !strcmp(value, "off"))
            *(int *)field = 0;
        else
            return inf_error_set(err, INF_EINVAL, "%s: \"%s\" is not a boolean (true/false)",
                                 k->name, value);
        return 0;
    case CFG_LEVEL:
        if (log_parse_level(value, &lvl))
            return inf_error_set(err, INF_EINVAL,
                                 "%s: \"%s\" is not one of error, warn, info, debug", k->name,
                                 value);
        *(int *)field = lvl;
        return 0;
    case CFG_INT:
    case CFG_I64:
        if (cfg_parse_i64(value, &v))
            return inf_error_set(err, INF_EINVAL, "%s: \"%s\" is not an integer", k->name, value);
        if (!(v >= k->lo && v <= k->hi))
            return inf_error_set(err, INF_EINVAL, "%s: %lld is out of range [%lld, %lld]",
                                 k->name, (long long)v, (long long)k->lo, (long long)k->hi);
        if (k->type == CFG_INT)
            *(int *)field = (int)v;
        else
            *(int64_t *)field = v;
        return 0;
    }
    return inf_error_set(err, INF_EINTERNAL, "%s: bad key type", k->name);
}

void cfg_defaults(struct cfg *c)
{
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        int rc = cfg_set_key(c, &cfg_keys[i], cfg_keys[i].def, NULL);
        (void)rc;
    }
}

int cfg_set(struct cfg *c, const char *key, const char *value, struct inf_error *err)
{
    const struct cfg_key *k = cfg_find(key);
    if (!k)
        return inf_error_set(err, INF_ENOTFOUND, "unknown key \"%s\"", key);
    return cfg_set_key(c, k, value, err);
}

static char *cfg_trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    return s;
}

int cfg_load_file(struct cfg *c, const char *path, struct inf_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return inf_error_set(err, INF_EIO, "open() \"%s\" failed (%d: %s)", path, errno,
                             strerror(errno));
    char line[4096];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
            rc = inf_error_set(err, INF_EINVAL, "%s:%d: line too long", path, lineno);
            break;
        }
        char *s = cfg_trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = inf_error_set(err, INF_EINVAL, "%s:%d: expected 'key = value'", path, lineno);
            break;
        }
        *eq = '\0';
        char *key = cfg_trim(s);
        char *val = cfg_trim(eq + 1);
        size_t vl = strlen(val);
        if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
            val[vl - 1] = '\0';
            val++;
        }
        struct inf_error e;
        if (cfg_set(c, key, val, &e)) {
            rc = inf_error_set(err, INF_EINVAL, "%s:%d: %s", path, lineno, e.msg);
            break;
        }
    }
    if (!rc && ferror(f))
        rc = inf_error_set(err, INF_EIO, "read() \"%s\" failed", path);
    fclose(f);
    return rc;
}

/* "--n-ctx" -> "n_ctx" */
static int cfg_flag_key(const char *flag, char *key, size_t cap)
{
    if (strncmp(flag, "--", 2))
        return INF_EINVAL;
    size_t n = strlen(flag + 2);
    if (n == 0 || n >= cap)
        return INF_EINVAL;
    for (size_t i = 0; i <= n; i++)
        key[i] = flag[2 + i] == '-' ? '_' : flag[2 + i];
    return 0;
}

int cfg_build(struct cfg *c, int argc, char **argv, const char **config_path, int *help,
              struct inf_error *err)
{
    cfg_defaults(c);
    *config_path = NULL;
    *help = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            *help = 1;
            return 0;
        }
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc)
                return inf_error_set(err, INF_ENOTFOUND, "--config needs a file name");
            *config_path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            *config_path = argv[i] + 9;
        }
    }
    if (*config_path) {
        int rc = cfg_load_file(c, *config_path, err);
        if (rc)
            return rc;
    }
    const char *env_key = getenv("INFERD_API_KEY");
    if (env_key && *env_key) {
        int rc = cfg_set(c, "api_key", env_key, err);
        if (rc)
            return rc;
    }
    for (int i = 1; i < argc; i++) {
        char key[64];
        const char *val;
        if (!strcmp(argv[i], "--config")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--config=", 9))
            continue;
        const char *eq = strchr(argv[i], '=');
        if (eq && !strncmp(argv[i], "--", 2)) {
            size_t kl = (size_t)(eq - argv[i]);
            char flag[64];
            if (kl >= sizeof(flag))
                return inf_error_set(err, INF_ENOTFOUND, "unknown option '%s'", argv[i]);
            memcpy(flag, argv[i], kl);
            flag[kl] = '\0';
            if (cfg_flag_key(flag, key, sizeof(key)))
                return inf_error_set(err, INF_ENOTFOUND, "unknown option '%s'", argv[i]);
            val = eq + 1;
        } else {
            if (cfg_flag_key(argv[i], key, sizeof(key)) || !cfg_find(key))
                return inf_error_set(err, INF_ENOTFOUND, "unknown option '%s'", argv[i]);
            if (i + 1 >= argc)
                return inf_error_set(err, INF_ENOTFOUND, "%s needs a value", argv[i]);
            val = argv[++i];
        }
        if (!cfg_find(key))
            return inf_error_set(err, INF_ENOTFOUND, "unknown option '--%s'", key);
        int rc = cfg_set(c, key, val, err);
        if (rc)
            return rc;
    }
    /* no model configured: the bundled demo model, where it is installed */
    if (c->model[0] == '\0' && access(INFERD_DEFAULT_MODEL, F_OK) == 0) {
        snprintf(c->model, sizeof(c->model), "%s", INFERD_DEFAULT_MODEL);
        c->model_defaulted = 1;
    }
    return cfg_validate(c, err);
}

int cfg_validate(const struct cfg *c, struct inf_error *err)
{
    if (c->model[0] == '\0')
        return inf_error_set(err, INF_EINVAL,
                             "model: no model configured: pass --model FILE.gguf or set "
                             "model = in the config file (the default %s is not installed; "
                             "a checkout has data/models/stories260K.gguf)",
                             INFERD_DEFAULT_MODEL);
    if (c->f16_weights_mb && c->batch_invariant)
        return inf_error_set(err, INF_EINVAL,
                             "f16_weights_mb (%d) needs batch_invariant = false: the F16 copies serve the "
                             "batch-variant prefill path only",
                             c->f16_weights_mb);
    if (strcmp(c->attention_scores, "exact") && strcmp(c->attention_scores, "tensor"))
        return inf_error_set(err, INF_EINVAL, "attention_scores: \"%s\" is not exact or tensor",
                             c->attention_scores);
    if (strcmp(c->backend, "auto") && strcmp(c->backend, "cuda") && strcmp(c->backend, "cpu"))
        return inf_error_set(err, INF_EINVAL, "backend: \"%s\" is not auto, cuda or cpu",
                             c->backend);
    if (c->default_max_tokens > c->max_tokens)
        return inf_error_set(err, INF_EINVAL, "default_max_tokens (%d) exceeds max_tokens (%d)",
                             c->default_max_tokens, c->max_tokens);
    if (c->agent_port && c->agent_port == c->port)
        return inf_error_set(err, INF_EINVAL, "agent_port (%d) is the API's port", c->agent_port);
    if (c->max_connections_per_ip > c->max_connections)
        return inf_error_set(err, INF_EINVAL,
                             "max_connections_per_ip (%d) exceeds max_connections (%d)",
                             c->max_connections_per_ip, c->max_connections);
    if (c->chat_template[0] && strcmp(c->chat_template, "auto") &&
        chat_template_family(c->chat_template) < 0)
        return inf_error_set(err, INF_EINVAL,
                             "chat_template: \"%s\" is not one of auto, chatml, qwen3, llama3, llama3.1, "
                             "llama2, mistral, gemma",
                             c->chat_template);
    struct proxy_list pl;
    char pmsg[160];
    if (proxy_list_parse(c->trusted_proxies, &pl, pmsg, sizeof(pmsg)))
        return inf_error_set(err, INF_EINVAL, "%s", pmsg);
    if (c->kv_tokens && c->n_ctx && c->kv_tokens < c->n_ctx)
        return inf_error_set(err, INF_EINVAL,
                             "kv_tokens (%d) is smaller than n_ctx (%d): no sequence could fit",
                             c->kv_tokens, c->n_ctx);
    return 0;
}

int cfg_reload(struct cfg *cur, const struct cfg *next, char *ignored, size_t ignored_cap)
{
    int changed = 0;
    size_t used = 0;
    if (ignored_cap)
        ignored[0] = '\0';
    for (size_t i = 0; i < CFG_NKEYS; i++) {
        const struct cfg_key *k = &cfg_keys[i];
        char *dst = (char *)cur + k->off;
        const char *src = (const char *)next + k->off;
        if (!memcmp(dst, src, k->size))
            continue;
        if (k->reload) {
            memcpy(dst, src, k->size);
            changed++;
        } else if (ignored_cap) {
            int w = snprintf(ignored + used, ignored_cap - used, "%s%s", used ? ", " : "",
                             k->name);
            if (w > 0 && (size_t)w < ignored_cap - used)
                used += (size_t)w;
        }
    }
    return changed;
}

void cfg_usage(FILE *out)
{
    fprintf(out, "usage: inferd serve [--config FILE] [--KEY VALUE ...]\n\n"
                 "Every config-file key is also a flag (n_ctx -> --n-ctx). Flags override the\n"
                 "file; INFERD_API_KEY overrides api_key from the file.\n"
                 "SIGHUP reloads the keys marked (r); SIGTERM/SIGINT drain and exit 0.\n\n"
                 "keys (default):\n");
    for (size_t i = 0; i < CFG_NKEYS; i++)
        fprintf(out, "  %-24s %s%s (default: \"%s\")\n", cfg_keys[i].name,
                cfg_keys[i].reload ? "(r) " : "", cfg_keys[i].help, cfg_keys[i].def);
}
