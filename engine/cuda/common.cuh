/* cuda/common — what every op file of the CUDA backend shares: the backend
 * context, CUDA_CHECK, launch checking and small device helpers.
 *
 * Errors: an op never returns a code (backend.h); the first failure is kept
 * in the context with the statement, file:line and device, every later op is
 * skipped, and ops->sync reports it (cuda_error_code classifies):
 * cudaErrorMemoryAllocation is INF_ENOMEM (recoverable: the daemon answers
 * 503 and lives); the errors CUDA clears and survives (a bad argument or
 * launch configuration) are INF_EINTERNAL (that step's requests fail, 500);
 * the sticky ones (cudaErrorIllegalAddress, cudaErrorLaunchFailure, ...:
 * the context is lost, every later call fails) and anything unknown are
 * INF_EDEVICE: the daemon stops, drains and exits (ROBUSTNESS 34, 35).
 */
#ifndef INFERD_CUDA_COMMON_CUH
#define INFERD_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "engine/backend.h"
#include "engine/err.h"
#include "engine/quant_blocks.h"
#include "engine/cuda/wcopies.cuh"
}

#define CUDA_WARP 32
/* K-quant products of 9 to at most this many activation rows may run
 * through mmqs (cuda/mmqs_impl.cuh) instead of MMQ, by cuda/mul_mat.cu's
 * shape rule: bench/RESULTS.md 2026-12-03 22:45 */
#define CUDA_MMQS_MAX 64
/* Q4_K batches from this many rows through the exact F16 product by
 * default, where it runs in a wgmma form (sm_90a builds on compute
 * capability 9.0), and only on shapes whose 128 x 128 blocks cover 2/5 of
 * the SMs (cuda_mmqh_fills); Q6_K batches through int8 wgmma (cuda/
 * mmq6w.cu) by the same rule. The CPU's bits; at 4096 x 14336 x 512 on the
 * H100 mmqw 0.79x mmqk's time, but 2.2x at 128 rows (bench/RESULTS.md
 * 2026-12-05 session 40), mmqr (cuda/mmqr.cu, the default form) 0.81x
 * mmqw's, mmq6w 0.49x mmqk's (session 42). Its mma.sync form (other
 * devices) is slower than mmqk everywhere: never by default there.
 * INFERD_MMQH=N / INFERD_MMQ6W=N take them from N rows on every shape,
 * for A/B runs. From 256 rows since session 43 (H100, one call, forced on
 * every shape against this rule at 512): at 384 rows q4_K 0.59-0.74x and
 * q6_K 0.44-0.61x mmqk's time, 7B-shaped pp384 +34%; at 256 rows the fill
 * rule keeps the shapes where mmqr lost (1.03-1.09x: 56-64 blocks) on
 * mmqk and passes the one where it won (0.76x), and q6_K's 56-64-block
 * shapes (mmq6w 0.73-0.79x there) stay on mmqk for want of a rule of their
 * own (bench/RESULTS.md). From 128 rows and 2/5 of the SMs since session
 * 44 (H100, call 6, forced against the rule at 64-256 rows, after mmqr's
 * turns and min term by wgmma): at 56-64 blocks q4_K 0.93-0.95x (one
 * short-K shape 1.01-1.03x) and q6_K 0.72-0.79x; at 128 rows on the 7B's
 * ffn-up (148 blocks) 0.88x / 0.66x; at 28-32 blocks 1.3-1.6x (kept off);
 * at 64 rows q4_K 1.30x even at 148 blocks (kept off). */
#define CUDA_MMQW_MIN 128
/* bytes every weight allocation (registered or fused) holds past its
 * data: the one-row kernel's bulk copies (cuda/mmvt.cu) move whole 16-byte
 * granules, and a Q6_K row run (210-byte blocks) may end inside one */
#define CUDA_W_SLACK 16
/* decode batches of up to this many rows take the attention split
 * (cuda/attention_dec.cu): bench/RESULTS.md 2026-12-03 22:45 calls 1-2,
 * 64 against 16 rows +5-9% decode rate at 32-64 streams */
#define CUDA_ATT_SPLIT 64

/* A product's epilogue (ops->mul_mat_ex): y = acc, then + bias[j] (add_bias's
 * rounding) or y = y + acc (add's): the separate ops' bits, without the
 * round trip of acc through memory.
 *
 * Segments: one launch over the rows of fused weights (ops->weight_fuse:
 * Q/K/V, gate/up) stores each weight's rows to its own output. n_seg = 0:
 * one output, the kernel's y [n_rows][n_w], with bias/accumulate above
 * (plain mul_mat and every unfused product). n_seg >= 2: weight row j
 * belongs to the last segment s with seg[s].j0 <= j and goes to
 * seg[s].y[r * seg[s].ne1 + (j - j0)] with that segment's bias and
 * accumulate; the kernel's y and the fields above are not used. */
#define CUDA_EPI_SEGS 3
struct cuda_epi_seg {
    float *y;          /* [n_rows][ne1] */
    const float *bias; /* [ne1] or NULL */
    int32_t j0;        /* first row of the fused weight in this segment */
    int32_t ne1;       /* its rows */
    int accumulate;
};
static_assert(CUDA_EPI_SEGS == 3, "cuda_epi_store picks among 3 segments");
struct cuda_epi {
    const float *bias; /* [ne1] or NULL */
    int accumulate;
    /* F > 0: the MMQ kernels' SwiGLU epilogue over a fused gate/up weight
     * of 2F rows (gate rows 0..F-1, then up): y[r][j] = silu(gate_j . x_r)
     * * (up_j . x_r), y [n_rows][F] (cuda/glu_rows.h mmq_wrow) */
    int32_t glu;
    int n_seg;
    struct cuda_epi_seg seg[CUDA_EPI_SEGS];
};

struct cuda_ctx {
    int device;
    int sm;            /* major * 10 + minor */
    int n_sm;
    cudaStream_t stream;
    int err;           /* first error (INF_E*), 0 when none */
    char err_msg[256];
    /* activation scratch: max_rows rows of max_ne0 elements quantized
     * (Q8_K or Q8_0, whichever is larger) */
    void *xq;
    size_t xq_bytes;
    /* mmqh's activations as f16 (cuda/mmqh_impl.cuh): max_rows x max_ne0
     * halves, where c->mmqh is on */
    void *x16;
    size_t x16_bytes;
    /* 1 while x16 holds the activations c->xq holds, as f16 in mmqr's k
     * order: set by the quantizer that writes both (cuda_quantize_x16p)
     * and by mmqr's own conversion (mmqh_x16), cleared by every other
     * write of c->xq or c->x16; mmqr then skips its conversion */
    int x16p_ready;
    int x16only;       /* leave the int8 plane out where only mmqr reads (INFERD_X16ONLY=0: never; A/B) */
    int mm_x16_ok;     /* the op's every product may read x16 alone (mul_mat.cu, set per op) */
    int xq_no_qs;      /* c->xq's int8 plane was not written (cuda_quantize_x16p's no_qs: every
                        * product of the op reads x16, mul_mat.cu MM_HELD_X16) */
    size_t weight_bytes; /* resident weights, for the load log */
    size_t aux_bytes;    /* the weights' second layouts (Q6_K expanded) */
    struct cuda_sample *smp; /* ops->sample scratch (cuda/sample.cu), NULL until used */
    /* the epilogue of the product being launched: set by mul_mat_ex around
     * each of its products, zero otherwise (plain mul_mat) */
    struct cuda_epi epi;
    /* the sizes ops->reserve was asked for (largest of each), so scratch a
     * later weight needs (cuda/mm_cublas.cu) can be sized at registration */
    int32_t res_rows;
    int64_t res_ne0;
    /* cuBLASLt for F32/F16/BF16 weights (cuda/mm_cublas.cu): NULL until the
     * first such weight, or for good when mmc_off (library not there) */
    struct cuda_mmc *mmc;
    int mmc_off;
    int batch_variant; /* config batch_invariant = false: cuBLAS's per-n choice */
    /* batch_invariant = false: K-quant products of mmd_min rows or more as F16 through cuBLASLt
     * (cuda/mm_deq.cu); mmd_w: the dequantized weight, mmd_need the largest one registered */
    int32_t mmd_min;
    /* the same where every member of the product has a resident F16 copy (config f16_weights_mb:
     * f16w, cuda/wcopies.cuh) */
    int32_t mmd_min_res;
    struct cuda_wcopies f16w;
    /* mmq6w's planes made at load (cuda/q6planes.cu; config q6_planes_percent, env INFERD_Q6P_MB:
     * q6p_env) */
    struct cuda_wcopies q6p;
    int q6p_env;
    int32_t q6p_min;   /* rows from which mmq6w reads them (CUDA_Q6P_MIN; INFERD_Q6P_MIN=N, A/B) */
    int q4p;           /* Q4_K weights get planes too (cuda/q6planes.cu, cuda/mmq4p.cu; INFERD_Q4P=0: not, A/B) */
    int32_t q6p_turns; /* the planes kernels' (mmq6w<true>, mmq4p) warpgroups in turns (1, the default;
                        * INFERD_Q6P_TURNS=0 none, A/B; the bits do not depend on it) */
    size_t mem_total;  /* the device's memory (cudaDeviceProp.totalGlobalMem) */
    int mmc_cvt8;      /* activations to F16/BF16 eight a thread where aligned (INFERD_MMC_CVT8=0: one, A/B) */
    int mmc_tune;      /* INFERD_MMC_TUNE=1: batch-variant buckets' algorithms timed at load (A/B) */
    void *mmd_w;
    size_t mmd_w_bytes, mmd_need;
    int pdl;           /* step kernels launched as programmatic dependents (cuda_launch) */
    int pdl_early;     /* the activation quantizer before mmvt lets it launch at the quantizer's start
                        * (cuda_pdl_trigger; INFERD_PDL_EARLY=0: at its exit, A/B) */
    int mmvq_wpr;      /* INFERD_MMVQ_WPR=1|2|4: the decode kernel's warps per row, forced (A/B) */
    int att_tc;        /* attention scores by tensor cores (config attention_scores = "tensor"); 0: the CPU's bits */
    int att_pair;      /* exact scores: two rows a block from ATT_PAIR_MIN rows (INFERD_ATT_PAIR=0: one; A/B) */
    int att_split;     /* exact scores: decode batches of up to this many rows score apart from the walk
                        * (cuda/attention_dec.cu; CUDA_ATT_SPLIT, INFERD_ATT_SPLIT=0..256; 0: fused) */
    int att_walk;      /* the split's walk: 0 by its grid, 1 one warp a head, 2 with helper warps (INFERD_ATT_WALK) */
    float *att_sc;     /* the split's scores (cuda/attention_dec.cu att_dec_scratch), att_sc_n floats */
    size_t att_sc_n;
    void *att_sc_old[8]; /* outgrown score buffers, kept for recordings until destroy */
    int att_sc_nold;
    size_t att_sc_fail;  /* the largest score buffer cudaMalloc refused (not asked again) */
    int mmvt;          /* one-row K-quant products through mmvt (sm_90+; INFERD_MMVT=0: mmvq, A/B) */
    int mmvt_hv;       /* mmvt's Q6_K halves form, 16 compute warps on the quantizer's planes (cuda/mmvt.cu
                        * HV 2): -1 by shape (cuda_mmvt), 1 wherever it reads planes, 0 never
                        * (INFERD_MMVT_HV; A/B, session 56) */
    int mmvt_cw;       /* mmvt's compute warps a block, forced (0: by shape; INFERD_MMVT_CW=8|12|14, A/B) */
    int mmvt_trig;     /* mmvt's early trigger (cuda_mmvt_trig): 1 where the op says its successor is a small
                        * kernel (default), 0 never, 2 always (INFERD_MMVT_TRIG=0|2, A/B) */
    int pdl_small;     /* cuda_small_early up to this many rows (1; INFERD_PDL_SMALL=0: off, =2..8, A/B) */
    int pdl_att;       /* cuda_small_early for the decode attention: 2 rope_kv_store, its score and walk
                        * kernels (default), 1 the walk only, 0 none (INFERD_PDL_ATT, A/B) */
    int rope_kv;       /* rope_kv_store in one kernel (INFERD_ROPE_KV=0: the three, A/B) */
    int mm_not_k;      /* matrices registered that are not K-quants (cuda_small_early) */
    int mm_tail;       /* the product being launched is the last of its op, whose next launch is not a
                        * product (set by mul_mat_ex around its last launch; cuda_mmvt_trig) */
    int mmqh;          /* Q4_K batches of at least this many rows through mmqh (cuda/mmqh_impl.cuh; 0 never;
                        * CUDA_MMQW_MIN by default where its wgmma form runs; INFERD_MMQH=N, A/B) */
    int mmq6w;         /* Q6_K batches of at least this many rows on int8 wgmma (cuda/mmq6w.cu); 0 never */
    int mmq6w_fill;    /* mmq6w only on shapes cuda_mmqh_fills passes (the default; not under INFERD_MMQ6W) */
    int mmqw;          /* mmqh's wgmma form where built: cuda/mmqr.cu 3 (turns, the default) or 2; 1 cuda/mmqw.cu; 0 the mma.sync form */
    int mmqh_fill;     /* mmqh only on shapes cuda_mmqh_fills passes (the default; not under INFERD_MMQH) */
    int mmvt_rb;       /* mmvt's rows a group, forced (0: by shape; INFERD_MMVT_RB=16|32, A/B) */
    int mmvt_fq;       /* mmvt quantizes its row itself where a block has one row group and a row at most this
                        * many super-blocks, or a row fits one stage (cuda/mmvt.cu; -1: by type, cuda/mmq.cuh;
                        * INFERD_MMVT_FQ=N, 0: never, A/B) */
    int glu_off;       /* INFERD_NO_GLU: no SwiGLU epilogue (cuda_op_mul_mat_swiglu) */
    int mmqt;          /* K-quant products of 2-8 rows through mmqt (sm_90+; INFERD_MMQT=0: mmqs, A/B) */
    int mmqt_tl;       /* its 16-row tiles a block, forced (0: by shape; INFERD_MMQT=tl1|tl2, A/B) */
    int tma_rows;      /* mmqt's stages by tensor copies of this many rows where a map fits (0: a copy a row) */
    int mmqs_min;      /* K-quant rows from which mmqs serves, <= 8; 0: per type (cuda/mul_mat.cu; INFERD_MMQS_MIN) */
    int mmqs_max;      /* K-quant rows up to which mmqs may serve, 8..64 (CUDA_MMQS_MAX; INFERD_MMQS_MAX) */
    /* test builds, INFERD_FAULT_DEVICE_FREE (engine/fault.h): the device has
     * budget bytes free at cuda_backend_new; cuda_malloc counts against it */
    int budget_set;
    size_t budget, alloc_total;
};

/* The KV cache (backend.h's opaque handle, cuda/kv.cu): one allocation,
 * per layer the K plane then the V plane, each [n_blocks * block_size]
 * [row_len] F16, so a block of every plane is one run of rows and a block
 * copy of all layers is one strided 2-D copy. */
struct backend_kv {
    struct backend_kv_shape s;
    size_t row_bytes; /* row_len F16 */
    size_t plane;     /* bytes of one layer's K (or V) */
    char *data;       /* device: [n_layer][2][slots][row_len] */
};

static inline quant_f16 *cuda_kv_plane(const struct backend_kv *kv, int32_t layer, int v)
{
    return (quant_f16 *)(kv->data + ((size_t)layer * 2 + (size_t)v) * kv->plane);
}

static inline struct cuda_ctx *cuda_ctx_of(struct backend *be)
{
    return (struct cuda_ctx *)be->ctx;
}

/* Every device allocation and free-memory query of the backend goes through
 * these two: cudaMalloc / cudaMemGetInfo, within the test-only budget. */
cudaError_t cuda_malloc(struct cuda_ctx *c, void **p, size_t bytes);
cudaError_t cuda_mem_info(const struct cuda_ctx *c, size_t *free_b, size_t *total);

/* A scratch buffer (*p, *bytes) grown to at least need bytes: nothing when
 * it holds that already, else a new allocation replaces it once the stream
 * no longer reads the old one. 0, or INF_ENOMEM with the old one kept. */
int cuda_scratch_grow(struct cuda_ctx *c, void **p, size_t *bytes, size_t need);

/* INF_ENOMEM, INF_EINTERNAL or INF_EDEVICE for a failed call's e (see above). */
int cuda_error_code(cudaError_t e);
/* Record a failed CUDA call (first one wins); returns 1 when e is an error. */
int cuda_fail(struct cuda_ctx *c, cudaError_t e, const char *stmt, const char *file, int line);

#define CUDA_CHECK_CTX(c, stmt) cuda_fail((c), (stmt), #stmt, __FILE__, __LINE__)
/* After a launch: the launch's own error (bad configuration, no kernel image). */
#define CUDA_CHECK_LAUNCH(c, what) cuda_fail((c), cudaGetLastError(), what, __FILE__, __LINE__)

/* An op entry starts with this: skip when an earlier op failed, and make the
 * backend's device current on this thread (the engine thread is not the one
 * that loaded the model). */
int cuda_op_begin(struct cuda_ctx *c);

static inline unsigned cuda_blocks(int64_t n, int per)
{
    return (unsigned)((n + per - 1) / per);
}

/* Blocks of 256 threads for a grid-stride loop over n items: one an item,
 * at most 8 an SM (the rest loop) */
static inline unsigned cuda_stride_grid(const struct cuda_ctx *c, int64_t n)
{
    const unsigned g = cuda_blocks(n, 256), cap = (unsigned)(c->n_sm > 0 ? c->n_sm * 8 : 1024);
    return g < cap ? g : cap;
}

/* ---- programmatic dependent launch (sm_90 and later) ------------------- *
 * A step is a chain of a few hundred small kernels (a 7B decode step: ~13
 * a layer), each reading what the one before wrote. In a plain stream the
 * next kernel is launched only once the one before has completed. Launched
 * through cuda_launch (the attribute
 * cudaLaunchAttributeProgrammaticStreamSerialization), a kernel is launched
 * as soon as every block of the kernel before it has exited (the implicit
 * trigger: no kernel calls griddepcontrol.launch_dependents), and its
 * blocks wait in griddepcontrol.wait until that kernel has completed and
 * its writes are visible. The rules, for every kernel cuda_launch starts:
 *  - before cuda_pdl_wait it reads only weights and writes nothing: the
 *    kernel before may not have completed;
 *  - every block reaches cuda_pdl_wait before it can return, so each grid
 *    completes after the one before it and a wait covers every earlier
 *    kernel, not only the last.
 * An explicit trigger at each kernel's start was measured and is slower
 * (bench/RESULTS.md, 2026-12-01 22:08): the next kernels' blocks then take
 * SM slots while the current grid still has work; the few kernels that
 * trigger early are listed at cuda_pdl_trigger. Off (INFERD_NO_PDL=1, or
 * a device before sm_90): launches are ordinary and the wait is a no-op.
 * Results do not depend on it. */
static __device__ __forceinline__ void cuda_pdl_wait(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Let the kernel after this one launch now instead of at this grid's exit.
 * Who calls it (each chosen by measurement, bench/RESULTS.md):
 *  - the activation quantizer before mmvt, at its start (where mmvt does
 *    not quantize its row itself: cuda/mmvt.cu): mmvt is one wave of
 *    blocks whose feed warps queue their first weight stages before the
 *    wait, so the weight stream starts while the quantizer runs (2026-12-04
 *    14:35-: q4_K 4096 x 14336 n = 1 10.6 -> 9.7 us, the 7B's tg128 +5%);
 *    before the other products it measured slower (Q4_0/Q8_0 up to 1.4x,
 *    mmqt's Q5_K 1.03-1.09x);
 *  - the small kernels a one-row product reads next (rms_norm, silu_mul,
 *    the decode attention's walk), at their start, on K-quant models
 *    (cuda_small_early), and the ones before that walk (rope_kv_store, the
 *    attention's score kernel), so each small kernel of the chain is
 *    launched and waiting when the one before it completes;
 *  - mmvt, once its last stage is queued and after its own wait, where
 *    the op says a small kernel follows (cuda_mmvt_trig).
 * mmvt triggers only after its own wait, so a chain of grids waiting
 * early ends at the next product: at most the small kernels before it,
 * the quantizer and the mmvt (an early trigger in every kernel, 2026-12-01
 * 22:08, let a chain of waiting grids fill the SMs). The trigger fires
 * once every block of this grid has called it or exited, so the early
 * grid never takes an SM slot this one still needs. */
static __device__ __forceinline__ void cuda_pdl_trigger(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Whether the mmvt being launched triggers its successor once every block
 * has queued its last weight stage (mmvt_kernel) instead of at its exit.
 * Where the next kernel is a small one (an elementwise, a norm: every
 * decode product of the step is followed by one, ops->mul_mat_ex says so
 * by c->mm_tail), that kernel then launches and waits on the SMs while
 * mmvt's last stages are multiplied, and starts at mmvt's completion
 * instead of a launch later. Where the next kernel is another product it
 * is not done: the early grid's feed warps then stream into the current
 * grid's last stages and back-to-back products lose (bench/RESULTS.md
 * 2026-12-04 17:45- call 12 and 20:30- call 1: `bench --op` rows up to
 * 1.08x with the trigger everywhere). Measured: 20:30- calls 1-2. */
static inline int cuda_mmvt_trig(const struct cuda_ctx *c)
{
    return c->mmvt_trig == 2 || (c->mmvt_trig == 1 && c->mm_tail);
}

/* Whether a small kernel that a product reads next (the model-width
 * rms_norm, silu_mul: engine/graph.c) lets that product launch at its
 * start, as the activation quantizer does before mmvt. One-row steps
 * (c->pdl_small rows) of a model whose every matrix is a K-quant (so
 * every one-row product is an mmvt, one wave whose feed warps then queue
 * their first weight stages while the small kernel runs; Q4_0/Q8_0's
 * products measured up to 1.4x slower launched early: bench/RESULTS.md
 * 2026-12-04 14:35-).
 * A trigger fires only once every block of its grid has issued it, so
 * the grids it lets launch never hold an SM slot its own blocks need.
 * Measured (20:30- calls 2-3, 6): 7B tg128 +3% over the mmvt trigger
 * alone, +1.3% more with the attention's walk (before wo), +1.5% more
 * with rope_kv_store and the score kernel. */
static inline int cuda_small_early(const struct cuda_ctx *c, int32_t n_rows)
{
    return n_rows <= c->pdl_small && c->mmvt && c->mm_not_k == 0;
}

/* the first statement of a kernel with nothing to read before the wait */
static __device__ __forceinline__ void cuda_pdl_enter(void)
{
    cuda_pdl_wait();
}

/* Launch kernel k (grid, block, dynamic shared memory smem) on the
 * backend's stream, as a programmatic dependent when c->pdl; a launch
 * error is recorded in c (CUDA_CHECK_LAUNCH after it reports it too). */
template <typename... P, typename... A>
static inline void cuda_launch(struct cuda_ctx *c, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                               A &&...args)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = c->stream;
    cfg.attrs = at;
    cfg.numAttrs = c->pdl ? 1 : 0;
    CUDA_CHECK_CTX(c, cudaLaunchKernelEx(&cfg, k, static_cast<A &&>(args)...));
}

/* ---- device helpers --------------------------------------------------- */

static __device__ __forceinline__ float cuda_h2f(quant_f16 h)
{
    return __half2float(__ushort_as_half(h));
}

/* the F16 bits of v, rounded to nearest even (the KV cache's conversion:
 * kv_store and rope_kv_store both store through it) */
static __device__ __forceinline__ quant_f16 cuda_f2h(float v)
{
    return (quant_f16)__half_as_ushort(__float2half_rn(v));
}

static __device__ __forceinline__ float cuda_bf2f(quant_bf16 h)
{
    return __uint_as_float((uint32_t)h << 16);
}

/* Store product (activation row r, weight row j) of a launch over n_w
 * weight rows (struct cuda_epi). The n_seg == 0 branch is the unfused
 * store: one uniform test of a kernel parameter in front of it. */
static __device__ __forceinline__ void cuda_epi_store(float *y, int32_t r, int32_t j, int32_t n_w,
                                                      float v, const struct cuda_epi &E)
{
    if (E.n_seg == 0) {
        const int64_t i = (int64_t)r * n_w + j;
        if (E.bias)
            v = __fadd_rn(v, E.bias[j]);
        if (E.accumulate)
            v = __fadd_rn(y[i], v);
        y[i] = v;
        return;
    }
    /* constant indices only: E.seg[s] with a computed s would copy the
     * kernel parameter to local memory (a 112-byte stack frame in every
     * kernel, and spills in the tight MMQ ones) */
    const bool s1 = j >= E.seg[1].j0, s2 = E.n_seg > 2 && j >= E.seg[2].j0;
#define CUDA_EPI_SEL(f) (s2 ? E.seg[2].f : s1 ? E.seg[1].f : E.seg[0].f)
    const int32_t js = j - CUDA_EPI_SEL(j0);
    float *ys = CUDA_EPI_SEL(y) + (int64_t)r * CUDA_EPI_SEL(ne1) + js;
    const float *bias = CUDA_EPI_SEL(bias);
    const int acc = CUDA_EPI_SEL(accumulate);
#undef CUDA_EPI_SEL
    if (bias)
        v = __fadd_rn(v, bias[js]);
    if (acc)
        v = __fadd_rn(*ys, v);
    *ys = v;
}

/* exp(x) as the CPU backend's SwiGLU computes it (engine/cpu_avx2.h
 * cpu_poly_expf: ggml's vector expf, the same operations, each rounded as
 * there), so SiLU gives the CPU's bits. */
static __device__ __forceinline__ float cuda_silu_expf(float x)
{
    const float shift = 0x1.8p23f;
    const float z = __fmaf_rn(x, 0x1.715476p+0f, shift);
    const float n = __fsub_rn(z, shift);
    const float b = __fmaf_rn(-n, 0x1.7f7d1cp-20f, __fmaf_rn(-n, 0x1.62e4p-1f, x));
    const uint32_t e = __float_as_uint(z) << 23;
    const float k = __uint_as_float(e + 0x3f800000u); /* 2^n for |n| <= 126 */
    const float u = __fmul_rn(b, b);
    const float j = __fmaf_rn(__fmaf_rn(__fmaf_rn(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                        __fmaf_rn(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                              u, __fmul_rn(0x1.ffffecp-1f, b));
    if (!(fabsf(n) > 126.0f))
        return __fmaf_rn(j, k, k);
    /* 2^n would leave the exponent range: scale in two steps */
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = __uint_as_float(g + 0x7f000000u), s2 = __uint_as_float(e - g);
    if (fabsf(n) > 192.0f)
        return __fmul_rn(s1, s1);
    return __fmul_rn(__fmaf_rn(s2, j, s2), s1);
}

/* silu(v) = v / (1 + exp(-v)) of element `col` of a row of row_len, as the
 * CPU computes it: each full group of 8 of a row through the polynomial,
 * the row's last row_len % 8 elements through libm's expf (correctly
 * rounded: here exp in double, rounded to float). silu_mul_kernel and the
 * SwiGLU epilogue of the MMQ kernels (cuda/tiles.cuh) both call it. */
static __device__ __forceinline__ float cuda_silu(float v, int64_t col, int64_t row_len)
{
    const float e = col < row_len - row_len % 8 ? cuda_silu_expf(__fsub_rn(0.0f, v)) : (float)exp(-(double)v);
    return __fdiv_rn(v, __fadd_rn(1.0f, e));
}

/* Butterfly sum over the warp: every lane ends with the same value, in the
 * same order whatever the caller's batch, so results are batch invariant. */
static __device__ __forceinline__ float cuda_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float cuda_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* ---- op entries (one file each) --------------------------------------- */

/* cuda/weights.cu */
int cuda_be_weight_register(struct backend *be, struct backend_weight *w);
void cuda_be_weight_release(struct backend *be, struct backend_weight *w);
int cuda_be_weight_fuse(struct backend *be, struct backend_weight **w, int n);

void cuda_op_get_rows(struct backend *be, const struct backend_weight *w, const int32_t *ids,
                      int32_t n, float *y);
void cuda_op_gather(struct backend *be, const float *x, const int32_t *rows, int32_t n,
                    int32_t row_len, float *y);
void cuda_op_rms_norm(struct backend *be, const float *x, const struct backend_weight *w,
                      float *y, int32_t n_rows, int32_t n, float eps);
void cuda_op_mul_mat_swiglu(struct backend *be, const float *x, int32_t n_rows, const struct backend_weight *gate,
                            const struct backend_weight *up, float *y, float *u);
void cuda_op_mul_mat_ex(struct backend *be, const float *x, int32_t n_rows, const struct backend_mm_out *out,
                        int n_out);
void cuda_op_mul_mat(struct backend *be, const struct backend_weight *w, const float *x,
                     float *y, int32_t n_rows);
void cuda_op_add_bias(struct backend *be, float *y, const struct backend_weight *b,
                      int32_t n_rows);
void cuda_op_rope(struct backend *be, float *x, int32_t n_rows, int32_t n_head,
                  const int32_t *pos, const struct backend_rope *r);
void cuda_op_rope_kv_store(struct backend *be, float *q, float *k, const float *v, int32_t n_rows,
                           int32_t n_head, int32_t n_head_kv, const int32_t *pos, const struct backend_rope *r,
                           struct backend_kv *kv, int32_t layer, const int32_t *slots);
/* kv_store and attention on raw cache planes (prewarm's scratch and the
 * table entries below share them) */
void cuda_op_kv_store(struct backend *be, void *k_cache, void *v_cache, const float *k,
                      const float *v, const int32_t *slots, int32_t n_rows, int32_t row_len);
void cuda_op_attention(struct backend *be, const float *q, const void *k_cache,
                       const void *v_cache, float *out, int32_t n_rows, const int32_t *pos,
                       const int32_t *seq, const int32_t *block_table,
                       const struct backend_attn *a);
/* the table's entries: the layer's planes from the cache handle */
void cuda_op_kv_store_layer(struct backend *be, struct backend_kv *kv, int32_t layer,
                            const float *k, const float *v, const int32_t *slots,
                            int32_t n_rows);
void cuda_op_attention_layer(struct backend *be, const float *q, struct backend_kv *kv,
                             int32_t layer, float *out, int32_t n_rows, const int32_t *pos,
                             const int32_t *seq, const int32_t *block_table,
                             const struct backend_attn *a);
/* cuda/kv.cu */
int cuda_kv_alloc(struct backend *be, const struct backend_kv_shape *s, struct backend_kv **out);
void cuda_kv_free(struct backend *be, struct backend_kv *kv);
void cuda_kv_copy_blocks(struct backend *be, struct backend_kv *kv, const int32_t *src,
                         const int32_t *dst, int32_t n);
int cuda_kv_read(struct backend *be, struct backend_kv *kv, int32_t layer, int64_t slot0,
                 int64_t n, void *k_host, void *v_host);
void cuda_op_silu_mul(struct backend *be, float *gate, const float *up, int64_t n,
                      int64_t row_len);
void cuda_op_add(struct backend *be, float *y, const float *x, int64_t n);

/* ops->sample (cuda/sample.cu); cuda_sample_free releases its scratch. */
int cuda_op_sample(struct backend *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                   const struct backend_sample_req *reqs, int32_t n_reqs,
                   struct backend_sample_out *out);
void cuda_sample_free(struct cuda_ctx *c);

/* cuda/backend.cu: (re)size c->xq and the cuBLAS path's scratch for
 * c->res_rows x c->res_ne0 (startup only: it allocates). 0 or INF_ENOMEM. */
int cuda_scratch_update(struct cuda_ctx *c);

/* cuda/mm_cublas.cu — F32/F16/BF16 products through cuBLASLt.
 * weight_add / weight_drop: at registration (algorithms are chosen there,
 * never in a recording); try: the product when w's shape has cuBLAS
 * algorithms (1), else 0 and nothing done (the float kernel's turn);
 * variant: forced (tests, prewarm: 0, 1 when cuBLASLt is not here,
 * INF_EUNSUPPORTED for a shape it does not take); act_bytes: the
 * activation scratch it needs beside the quantized one's; reserve: its
 * output scratch; uses: 1 when w's products go through it. */
int cuda_mmc_weight_add(struct cuda_ctx *c, const struct backend_weight *w);
void cuda_mmc_weight_drop(struct cuda_ctx *c, const struct backend_weight *w);
int cuda_mmc_set_batch_invariant(struct cuda_ctx *c, int on);
int cuda_mmc_try(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                 int32_t n_rows, int *held);
int cuda_mmc_variant(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                     int32_t n_rows);
int cuda_mmc_uses(struct cuda_ctx *c, const struct backend_weight *w);
size_t cuda_mmc_act_bytes(const struct cuda_ctx *c);
int cuda_mmc_reserve(struct cuda_ctx *c);
int cuda_mmc_prewarm(struct cuda_ctx *c, void (*report)(void *ud, const char *name, double ms), void *ud,
                     double (*now)(void));
void cuda_mmc_free(struct cuda_ctx *c);

/* cuda/mm_cublas.cu for cuda/mm_deq.cu: F16 shapes without a weight of their own (a dequantized
 * K-quant's), referenced at registration (f16_add: 0, or 1 when cuBLASLt has nothing: the int8
 * kernels serve); run_f16: the product with w16 (F16, [ne1][ne0]) as the weight, 1 when the shape
 * is there, else 0 and nothing done. */
int cuda_mmc_f16_add(struct cuda_ctx *c, int64_t ne0, int64_t ne1, const char *name);
void cuda_mmc_f16_drop(struct cuda_ctx *c, int64_t ne0, int64_t ne1);
int cuda_mmc_has_f16(const struct cuda_ctx *c, int64_t ne0, int64_t ne1);
int cuda_mmc_run_f16(struct cuda_ctx *c, int64_t ne0, int64_t ne1, const void *w16, const float *x, float *y,
                     int32_t n_rows, int *held);

/* cuda/mm_deq.cu — with batch_invariant = false, the K-quant products of c->mmd_min rows or
 * more: the weight dequantized to F16, then cuBLASLt. weight_add / weight_drop at registration
 * (0 or INF_ENOMEM); takes: 1 when a product of w at n_rows goes this way (mul_mat.cu asks
 * before MMQ and its SwiGLU epilogue); try: that product (1), or 0 and nothing done; variant:
 * forced (prewarm; 1 where the mode is off or cuBLASLt missing); reserve: its scratch. */
int cuda_mmd_weight_add(struct cuda_ctx *c, const struct backend_weight *w);
void cuda_mmd_weight_drop(struct cuda_ctx *c, const struct backend_weight *w);
int cuda_mmd_takes(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows);
int cuda_mmd_min_rows(const struct cuda_ctx *c, const struct backend_weight *w); /* takes' first row, 0: never */
int cuda_mmd_try(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y, int32_t n_rows,
                 int *held);
int cuda_mmd_variant(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y,
                     int32_t n_rows);
int cuda_mmd_reserve(struct cuda_ctx *c);
int cuda_mmd_min_default(int sm); /* c->mmd_min at cuda_backend_new (INFERD_MMD_MIN, else sm_90: 256, others 0: never) */
int cuda_mmd_min_res_default(int sm); /* c->mmd_min_res (INFERD_MMD_RES_MIN, else sm_90: 64, others 0) */
/* resident F16 copies (config f16_weights_mb): rekey when weight_fuse moves a weight's rows from
 * `from` to `to`; resident: 1 when w has one; free: all of them (destroy) */
void cuda_mmd_rekey(struct cuda_ctx *c, const void *from, const void *to);
int cuda_mmd_resident(const struct cuda_ctx *c, const struct backend_weight *w);
void cuda_mmd_free(struct cuda_ctx *c);

/* cuda/knobs.cu: the environment switches into c (cuda_backend_new, once c->sm is set) */
void cuda_knobs_read(struct cuda_ctx *c);

/* cuda/mul_mat.cu: launch entry i of the dispatcher's table (prewarm) */
int cuda_mm_variant_run(struct cuda_ctx *c, int i, const struct backend_weight *w, const float *x, float *y,
                        int32_t n_rows);
/* Activations to vec_dot_type (QT_Q8_K: n % 256 == 0, or QT_Q8_0: n % 32
 * == 0), n_rows rows of n floats, the CPU's bytes (cuda/quantize.cu).
 * before_mmvt: the next launch is mmvt (one row of a K-quant), which then
 * launches at the quantizer's start (cuda_pdl_trigger; c->pdl_early). */
void cuda_quantize_act(struct cuda_ctx *c, int vec_dot_type, const float *x, void *dst,
                       int32_t n_rows, int64_t n, int before_mmvt);
/* The same Q8_K planes, and each value also as f16 into x16 in mmqr's k
 * order (cuda/mmqh_impl.cuh mmqh_x16p_elem): mmqh_x16p_kernel's bytes
 * without reading the planes back (c->x16p_ready = 1) */
void cuda_quantize_x16p(struct cuda_ctx *c, const float *x, void *dst, int32_t n_rows, int64_t n, void *x16,
                        int no_qs);
/* Whether mmqr takes this Q4_K product as it is launched now (c->epi
 * included): every check cuda_mmqr and its launcher make before it reads
 * x16 (cuda/mmqr.cu) */
int cuda_mmqr_takes(struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows);

#endif
