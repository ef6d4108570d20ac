/* cuda/sample.cuh — internal: what the files of ops->sample on the device
 * share (cuda/sample.cu: the op entry and its scratch; sample_kernel.cu: the
 * sampling kernel; sample_logprob.cu: the logprob kernel; sample_block.cuh:
 * the sampling kernel's block primitives). sample.cu's opening comment says
 * how the device reproduces engine/sample.c's bits.
 */
#ifndef INFERD_CUDA_SAMPLE_CUH
#define INFERD_CUDA_SAMPLE_CUH

#include "engine/cuda/common.cuh"

#define SMP_THREADS 1024 /* threads per request (block) */
#define SMP_CH 1024      /* elements per checkpoint of a sequential sum */
#define SMP_SORT 4096    /* keys sorted per chunk in shared memory */
#define SMP_BINS 1024    /* top-p bins: engine/sample.c's TP_BINS over TP_RANGE 32 */
#define LP_THREADS 256   /* threads of the logprob kernel */

/* ---- keys: engine/sample.c's, bit for bit --------------------------------- */

static __device__ __forceinline__ uint32_t smp_float_order(float f)
{
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static __device__ __forceinline__ float smp_order_float(uint32_t u)
{
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    return __uint_as_float(u);
}
static __device__ __forceinline__ unsigned long long smp_key(float l, int32_t id)
{
    return ((unsigned long long)smp_float_order(l) << 32) | (uint32_t)(UINT32_MAX - (uint32_t)id);
}
static __device__ __forceinline__ float smp_key_logit(unsigned long long k)
{
    return smp_order_float((uint32_t)(k >> 32));
}
static __device__ __forceinline__ int32_t smp_key_id(unsigned long long k)
{
    return (int32_t)(UINT32_MAX - (uint32_t)k);
}

/* Per-block scratch: [n_vocab] work, wts (float), A, B, list (keys), and the
 * checkpoints of a sequential sum. smp_block_bytes sizes it (host: the op's
 * reserve), smp_carve (sample_kernel.cu) cuts it with the same rounding. */
struct smp_scratch {
    float *work, *wts;
    unsigned long long *A, *B, *list;
    double *ck;
};

static inline size_t smp_align(size_t b)
{
    return (b + 255) & ~(size_t)255;
}
static inline size_t smp_block_bytes(int32_t V)
{
    return 2 * smp_align(sizeof(float) * (size_t)V) +
           3 * smp_align(sizeof(unsigned long long) * (size_t)V) +
           smp_align(sizeof(double) * (size_t)(V / SMP_CH + 2));
}

/* The launchers (kernel -> launcher -> op entry): on the backend's stream,
 * the requests and results in device memory (cuda_sample's d_jobs, d_out).
 * Each returns 0, or c->err after a failed launch. */

/* smp_sample_kernel for requests [job0, job0 + n_blocks), one block each,
 * over scratch of n_blocks x block_bytes (smp_block_bytes of V or more). */
int smp_sample_launch(struct cuda_ctx *c, const float *logits, int32_t V,
                      const struct backend_sample_req *jobs, int32_t job0, int32_t n_blocks,
                      char *scratch, size_t block_bytes, struct backend_sample_out *out);
/* smp_logprob_kernel for requests [0, n), one block each; reads the token
 * smp_sample_launch wrote to out. */
int smp_logprob_launch(struct cuda_ctx *c, const float *logits, int32_t V,
                       const struct backend_sample_req *jobs, int32_t n,
                       struct backend_sample_out *out);

#endif
