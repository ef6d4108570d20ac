/* backend_open — the one way serve, generate, score, bench and bench-serve
 * bring up an engine backend (DESIGN.md: the daemon picks the backend and
 * hands its op table to the engine; the engine never includes engine/cuda).
 *
 *   auto: the CUDA backend on device 0 when this binary has it and a device
 *         answers, else the CPU backend (the log says which and why);
 *   cuda: the CUDA backend or an error naming why not;
 *   cpu:  the CPU backend with `threads` threads and `numerics`.
 *
 * llama.cpp numerics (enum cpu_numerics) exist on the CPU backend only; asked
 * for on CUDA it is an error rather than a silent difference.
 */
#ifndef INFERD_BACKEND_OPEN_H
#define INFERD_BACKEND_OPEN_H

struct backend;
struct inf_error;

enum backend_kind { BACKEND_AUTO = 0, BACKEND_CUDA = 1, BACKEND_CPU = 2 };

/* "auto" | "cuda" | "cpu" -> *kind: 0, or INF_EINVAL. */
int backend_kind_parse(const char *s, int *kind);
const char *backend_kind_name(int kind);
/* config attention_scores / --attention-scores: "exact" -> *tc = 0,
 * "tensor" -> *tc = 1 (struct backend_open_params.attention_tc): 0, or
 * INF_EINVAL. */
int attention_scores_parse(const char *s, int *tc);
/* A tool's true|false flag: *on = 1 or 0; 0, or INF_EINVAL. */
int bool_flag_parse(const char *s, int *on);
/* --batch-invariant (the config key batch_invariant): "true" -> *no_inv =
 * 0, "false" -> *no_inv = 1 (struct backend_open_params.no_batch_invariance):
 * 0, or INF_EINVAL. */
int batch_invariant_parse(const char *s, int *no_inv);
/* --f16-weights (the config key f16_weights_mb): MiB, 0..F16_WEIGHTS_MB_MAX
 * (4 TiB) -> *mb: 0, or INF_EINVAL. */
#define F16_WEIGHTS_MB_MAX (1 << 22)
int f16_weights_parse(const char *s, int *mb);
/* The kind a command uses when no --backend is given: INFERD_BACKEND from the
 * environment when it names one (test runs pin a backend that way), else auto. */
int backend_kind_default(void);

struct backend_open_params {
    int kind;      /* enum backend_kind */
    int device;    /* CUDA device index */
    int threads;   /* CPU threads (<= 0: default) */
    int numerics;  /* enum cpu_numerics */
    /* 1: config batch_invariant = false: the CUDA backend's cuBLAS products
     * take cuBLAS's per-batch-size algorithm (0, the default of a zeroed
     * struct: one algorithm per weight shape, batch invariant) */
    int no_batch_invariance;
    /* 1: config attention_scores = "tensor": the CUDA backend's attention
     * scores by tensor cores (0, the default: the CPU backend's order and
     * expf, so the GPU's logits equal the CPU's) */
    int attention_tc;
    /* config f16_weights_mb (with no_batch_invariance): MiB of resident F16
     * copies of K-quant matrices (0: none) */
    int f16_weights_mb;
    /* config q6_planes_percent: the Q6_K and Q4_K planes made at load, up to
     * this percentage of the GPU's memory (cuda_backend_set_q6_planes;
     * the tools pass CUDA_Q6P_PERCENT, engine/cuda/cuda.h: the config
     * key's default) */
    int q6_planes_percent;
};

/* 0 and *out, or a negative INF_E* code with err filled. */
int backend_open(const struct backend_open_params *p, struct backend **out, struct inf_error *err);

/* One log line: which backend, and for CUDA the resident weight bytes and
 * the device memory left (call after model_load). */
void backend_log_resident(const struct backend *be, double load_seconds);

#endif
