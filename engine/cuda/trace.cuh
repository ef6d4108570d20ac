/* cuda/trace — clock marks of a streaming kernel's pipeline (mmvt, mmqt),
 * compiled in only by bench/mmq_trace.cu (-DINFERD_CUDA_TRACE): per block
 * and stage, when the feed warp queued the stage's copies, when the first
 * and last compute warp saw it land and finished it, when the chain had
 * read it. Why: a stage's period (~2.6 us in both kernels on the H200,
 * bench/RESULTS.md 2026-12-04 10:15-) is either the copies' latency or the
 * compute warps' series, and ncu's stall samples do not say which. In the
 * product builds every mark is nothing. */
#ifndef INFERD_CUDA_TRACE_CUH
#define INFERD_CUDA_TRACE_CUH

/* marks of a stage */
enum {
    CUDA_TR_FEED,   /* the feed warp queued the stage's copies */
    CUDA_TR_LAND0,  /* compute warp 0 saw the stage land */
    CUDA_TR_DONE0,  /* compute warp 0 had read the slot */
    CUDA_TR_LANDL,  /* the last compute warp saw it land */
    CUDA_TR_DONEL,  /* the last compute warp had read the slot */
    CUDA_TR_PARK0,  /* compute warp 0 had parked its terms */
    CUDA_TR_CHAIN,  /* the (first) chain warp had read the stage's park */
    CUDA_TR_X0,     /* kernel-specific marks (mmqw: the producer's waits) */
    CUDA_TR_X1,
    CUDA_TR_ACT0,   /* the planes kernels: warpgroup 0 had its activations */
    CUDA_TR_TURN0,  /* ... and its turn (then its plane slots, its issue: x0) */
    CUDA_TR_BLOCK,  /* stage 0: the block's start (clock), 1: start
                     * (globaltimer, ns), 2: end (clock), 3: end (globaltimer) */
    CUDA_TR_MARKS
};

#ifdef INFERD_CUDA_TRACE
#define CUDA_TR_BLOCKS 256
#define CUDA_TR_STAGES 64
__device__ long long cuda_tr_buf[CUDA_TR_BLOCKS][CUDA_TR_STAGES][CUDA_TR_MARKS];

/* A kernel's diagnostic mode, set by bench/mmq_trace from INFERD_TR_PROBE
 * (0 in the product builds): mmvt 1 leaves the compute lanes' terms out
 * (zeros parked, no weight read), 2 reads Q6_K's words 4 bytes further on
 * for each lane octet (conflict-free, wrong values), 3 queues no copies
 * (the stage's barrier completes with no bytes). Why: which of the feed,
 * the terms' shared-memory reads and the structure paces the one-row
 * Q6_K product at the H200's stream rate (bench/RESULTS.md session 56). */
__device__ int cuda_tr_probe;
#define CUDA_TR_PROBE cuda_tr_probe

static __device__ __forceinline__ long long cuda_tr_gtime(void)
{
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* the block's number in a 1- or 2-dimensional grid */
static __device__ __forceinline__ unsigned cuda_tr_bid(void)
{
    return blockIdx.x + gridDim.x * blockIdx.y;
}

/* CUDA_TR_MASK: the marks a trace build records (bit m for mark m; the
 * default all). Why (bench/RESULTS.md session 61): the marks are not free
 * (a clock read and a global store each; prev's planes trace ran 12.6-19%
 * more cycles than its product, a form with four marks fewer looked 9-13%
 * faster for that alone), so a build that times the period keeps few. */
#ifndef CUDA_TR_MASK
#define CUDA_TR_MASK 0xffffffffu
#endif

/* lane 0 of the calling warp records mark m of stage s */
static __device__ __forceinline__ void cuda_tr(int32_t s, int m)
{
    if (((CUDA_TR_MASK >> m) & 1u) && (threadIdx.x & 31) == 0 && cuda_tr_bid() < CUDA_TR_BLOCKS &&
        s < CUDA_TR_STAGES)
        cuda_tr_buf[cuda_tr_bid()][s][m] = clock64();
}

static __device__ __forceinline__ void cuda_tr_block(int end)
{
    if ((threadIdx.x & 31) == 0 && cuda_tr_bid() < CUDA_TR_BLOCKS) {
        cuda_tr_buf[cuda_tr_bid()][2 * end][CUDA_TR_BLOCK] = clock64();
        cuda_tr_buf[cuda_tr_bid()][2 * end + 1][CUDA_TR_BLOCK] = cuda_tr_gtime();
    }
}
#else
#define CUDA_TR_PROBE 0
#define cuda_tr(s, m) ((void)0)
#define cuda_tr_block(end) ((void)0)
#endif

#endif
