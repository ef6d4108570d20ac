/* cuda — the CUDA backend's entry points as seen from C (daemon, tools, tests).
 *
 * Built only when meson finds nvcc (option cuda); without it cuda_stub.c
 * answers "no device". Device discovery, and the CUDA backend: an op table
 * (engine/backend.h) whose weights, KV cache and activations live on one
 * device. Discovery may be called from any thread; a backend belongs to
 * the engine thread like every backend.
 */
#ifndef INFERD_CUDA_H
#define INFERD_CUDA_H

#include <stddef.h>
#include <stdint.h>

struct backend;
struct inf_error;

struct cuda_device_info {
    int index;
    char name[256];
    int sm;                 /* major * 10 + minor, e.g. 90, 121 */
    size_t total_mem;
    int n_sm;
};

/* 1 when this binary contains the CUDA backend. */
int cuda_compiled(void);
/* Number of usable devices (0 when none or no driver); fills up to cap infos. */
int cuda_devices(struct cuda_device_info *out, int cap);
/* Run a tiny kernel on device 0 and check its result: 0 on success, or a
 * negative INF_E* code (INF_EUNSUPPORTED when no device). */
int cuda_selftest(char *msg, size_t cap);

/* The CUDA backend on device `device`: NULL with err filled when there is
 * no such device (INF_EUNSUPPORTED without a device or CUDA build). */
struct backend *cuda_backend_new(int device, struct inf_error *err);
/* Resident weight bytes and the device's free/total memory (0 or INF_E*). */
int cuda_backend_mem(const struct backend *be, size_t *weights, size_t *free_b, size_t *total);
/* Batch invariance of the F32/F16/BF16 products through cuBLASLt (config
 * key batch_invariant, default on): off lets cuBLAS pick its algorithm per
 * batch size (faster; a row's bits may then differ by ulps between batch
 * sizes). Call before any weight is registered: 0, or INF_EINVAL after. */
int cuda_backend_set_batch_invariant(struct backend *be, int on);
/* Attention scores by tensor cores (config key attention_scores =
 * "tensor"; on = 1) or, the default (0), in the CPU backend's order with
 * glibc's expf: the GPU's attention then gives the CPU's bits. Any time
 * between steps; every row of a step takes the same kernel. */
void cuda_backend_set_attention_tc(struct backend *be, int on);
/* 1 when the attention scores are the tensor cores' (set above, or
 * INFERD_ATT_SCORES=tensor at cuda_backend_new), 0 when they are the CPU's
 * bits: what a test may then expect. */
int cuda_backend_attention_tc(const struct backend *be);

/* Bytes of the weights' second layouts beside the uploaded bytes
 * cuda_backend_mem counts: aux, Q6_K expanded for MMQ; q6p, mmq6w's and
 * mmq4p's weight planes (config q6_planes_percent, INFERD_Q6P_MB). */
size_t cuda_backend_aux_bytes(const struct backend *be);
size_t cuda_backend_q6p_bytes(const struct backend *be);

/* The dispatcher's table of matrix-product kernels (cuda/mul_mat.cu): how
 * many, the weight type of entry i and its name as prewarm reports it
 * ("mul_mat<q6_K> mmq<2,true>", ...). The stub's table is empty. */
int cuda_mm_variant_count(void);
int cuda_mm_variant_type(int i);
void cuda_mm_variant_name(int i, char *buf, size_t n);
/* Run exactly entry i of that table on a weight of its type (tests: every
 * variant must give each row the bits the dispatcher's choice gives).
 * x, y: device memory, n_rows activation rows available (>= 8; MMQ
 * variants use all of them, the small-batch ones their own row count);
 * *rows_done: rows of y written. 0, 1 when this device cannot hold the
 * variant, or a negative INF_E* code. */
struct backend_weight;
int cuda_backend_mm_variant(struct backend *be, int i, const struct backend_weight *w, const float *x,
                            float *y, int32_t n_rows, int32_t *rows_done);
/* 1 when the registered weight w's products go through cuBLASLt (the
 * library loaded and its shape has an algorithm), 0 when the float kernel
 * serves it (tests, bench --op). */
int cuda_backend_mm_cublas(struct backend *be, const struct backend_weight *w);
/* With batch_invariant = false: the row count from which the registered
 * K-quant weight w's products go through F16 and cuBLASLt
 * (cuda/mm_deq.cu; fewer rows with a resident F16 copy, below), 0 when
 * they never do (tests, bench --op). */
int cuda_backend_mm_deq_min(struct backend *be, const struct backend_weight *w);
/* The row count from which the dispatcher may send Q4_K batches through
 * the exact F16 product (cuda/mmqh_impl.cuh, its wgmma form on sm_90
 * builds), 0 when it never does (tests: its prewarm row must launch where
 * this is not 0). */
int cuda_backend_mmqh_min(struct backend *be);
/* The row count from which Q6_K batches go through int8 wgmma (cuda/
 * mmq6w.cu; by default 512 where it is built and the device is compute
 * capability 9.0; INFERD_MMQ6W), 0 when never (tests: its prewarm row
 * launches where this is not 0) */
int cuda_backend_mmq6w_min(struct backend *be);
/* With batch_invariant = false (set first): keep F16 copies of the K-quant
 * matrices the F16 path takes, up to `bytes` in all, made as each weight
 * registers (config f16_weights_mb), so their large products skip the
 * dequantization (the per-product copy's bits) and take this path from
 * fewer rows (INFERD_MMD_RES_MIN). Call before model_load: 0, or
 * INF_EINVAL once weights are registered. */
int cuda_backend_set_f16_weights(struct backend *be, size_t bytes);

/* Before the weights: the planes made at load (cuda/q6planes.cu) for
 * Q6_K matrices (mmq6w) and Q4_K ones (mmq4p) up to percent of the
 * device's memory (config
 * q6_planes_percent; 0: none; INFERD_Q6P_MB in the environment wins).
 * Where neither mmq6w nor mmq4p runs (not compute capability 9.0) none
 * are made.
 * 0 or INF_EINVAL (weights registered, percent outside 0..100).
 * CUDA_Q6P_PERCENT: the default (cuda_backend_new's; the config key's
 * "5" and the tools' backend_open_params). */
int cuda_backend_set_q6_planes(struct backend *be, int percent);
#define CUDA_Q6P_PERCENT 5
/* Bytes of those copies held; 1 when the registered weight w has one. */
size_t cuda_backend_f16_bytes(const struct backend *be);
int cuda_backend_mm_deq_resident(struct backend *be, const struct backend_weight *w);
/* cuda/mm_deq.cu's dequantization (eight elements a thread) run on the host over
 * n_rows rows of ne0 elements of a K-quant type, against engine/quant.c,
 * F16-rounded: the elements that differ (the first into msg), -1 for a
 * type it does not take or in a build without CUDA. No GPU needed
 * (tests/cuda/test_cuda_host.c). */
int64_t cuda_mmd_host_check(int type, const void *w, int64_t ne0, int64_t n_rows, char *msg, size_t cap);
/* The register-A wgmma kernels' weight arithmetic on the host (no GPU
 * needed; tests/cuda/test_cuda_host.c), over n_blocks random super-blocks:
 * cuda/mmqr.cu's fragments times the activations in its k order against
 * the natural order's exact sums (rows that differ), and cuda/mmq6w.cu's
 * two u8 planes (every value and scale, then whole super-blocks: what
 * differs). The first difference into msg; -1 in a build without CUDA. */
int64_t cuda_mmqr_host_check(int n_blocks, char *msg, size_t cap);
int64_t cuda_mmq6w_host_check(int n_blocks, char *msg, size_t cap);
/* cuda/mmq4p.cu's Q4_K planes (every value and scale, then n_blocks random
 * super-blocks against engine/quant.c's dequantization) */
int64_t cuda_mmq4p_host_check(int n_blocks, char *msg, size_t cap);
/* cuda/wcopies.cuh's table (resident F16 copies, mmq6w's Q6_K planes),
 * on the host: failed checks, the first into msg */
int64_t cuda_wcopies_host_check(char *msg, size_t cap);
/* The wgmma products' default shape rule on a device of n_sm SMs: 1 where
 * a Q4_K (q6 0) or Q6_K (q6 1) product of n_rows rows by an n_w x ne0
 * weight goes to mmqr / mmq6w (cuda/knobs.cu); 0 in a build without CUDA */
int cuda_mmqh_rule(int n_sm, int q6, int64_t ne0, int64_t n_w, int32_t n_rows);

#endif
