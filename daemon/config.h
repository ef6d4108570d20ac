/* config — the daemon's settings: etc/inferd.conf, INFERD_API_KEY, CLI flags.
 *
 * Precedence (lowest first): built-in defaults, the config file, the
 * environment (INFERD_API_KEY), command-line flags. Every key of the file is
 * also a flag: `n_ctx = 512` in the file is `--n-ctx 512` on the command line.
 * The file format is `key = value` lines; a line whose first non-blank
 * character is '#' is a comment; values may be wrapped in double quotes.
 *
 * A struct cfg is a plain value: cfg_build fills a new one completely or
 * fails, so SIGHUP can build a candidate and keep the old config on error
 * (nginx's rule). cfg_reload copies only the keys marked reloadable.
 * Thread: the loop thread (startup and SIGHUP).
 */
#ifndef INFERD_CONFIG_H
#define INFERD_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "engine/err.h"

#define CFG_STR_MAX 1024

/* The model served when none is configured: stories260K as installed from
 * data/models (meson sets the path from prefix and datadir: daemon/meson.build). */
#ifndef INFERD_DEFAULT_MODEL
#define INFERD_DEFAULT_MODEL "/usr/local/share/inferd/models/stories260K.gguf"
#endif

struct cfg {
    /* model and engine (restart needed to change) */
    char model[CFG_STR_MAX];
    char model_id[256];
    char host[256];
    int port;
    int agent_port; /* the balancer's agent-check port (api/agent.c); 0: none */
    char backend[16];
    int gpu_device;
    int threads;
    int n_ctx;
    int max_seqs;
    int queue_len;
    int kv_tokens;
    int64_t kv_bytes;
    int kv_percent;
    int block_size;
    int step_tokens;
    int prefix_cache;
    int llamacpp_numerics;
    int batch_invariant;
    int f16_weights_mb; /* batch_invariant = false: resident F16 copies of K-quant matrices, MiB */
    int q6_planes_percent; /* the Q6_K / Q4_K planes made at load, % of the GPU's memory (0: none) */
    char attention_scores[16]; /* "exact" | "tensor" */
    int prewarm;
    /* reloadable on SIGHUP */
    char api_key[256];
    int log_level;
    int64_t max_body_bytes;
    int max_header_bytes;
    int max_connections;
    int max_connections_per_ip;
    int idle_timeout_s;
    int read_timeout_s;
    int drain_timeout_s;
    int drain_flush_s;
    int ping_interval_s;
    int retry_after_s;
    int engine_stall_s;
    int max_tokens;     /* cap on a request's max_tokens */
    int default_max_tokens;
    int max_n;
    int max_prompts;
    int max_stop;
    int max_stop_len;
    int max_logprobs;
    int max_logit_bias;
    char chat_template[32]; /* auto, or a family name (api/chat_template.h) */
    /* not a key: model was empty and cfg_build chose INFERD_DEFAULT_MODEL */
    int model_defaulted;
    char trusted_proxies[1024];
};

void cfg_defaults(struct cfg *c);

/* Set one key from text; err names the key and the problem. */
int cfg_set(struct cfg *c, const char *key, const char *value, struct inf_error *err);

/* Read a config file on top of c. Unknown keys and bad values are errors
 * (err says "file:line: ..."). */
int cfg_load_file(struct cfg *c, const char *path, struct inf_error *err);

/* The whole chain: defaults, the file named by --config (if any), the
 * environment, then the other flags of argv (argv[0] is the subcommand).
 * *config_path gets the --config value or NULL. Returns 0, INF_EINVAL for a
 * bad value or file, INF_ENOTFOUND for an unknown flag (usage error). Sets
 * *help when --help was given (c is then only defaults). */
int cfg_build(struct cfg *c, int argc, char **argv, const char **config_path, int *help,
              struct inf_error *err);

/* Cross-field checks (ranges that depend on each other). */
int cfg_validate(const struct cfg *c, struct inf_error *err);

/* Apply the reloadable keys of next to cur; keys that need a restart keep
 * their current value and are named in ignored (a ", "-separated list, may
 * be empty). Returns how many reloadable keys changed. */
int cfg_reload(struct cfg *cur, const struct cfg *next, char *ignored, size_t ignored_cap);

/* Usage text: every key, its default and what it does. */
void cfg_usage(FILE *out);

#endif
