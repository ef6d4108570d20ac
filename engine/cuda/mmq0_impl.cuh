/* cuda/mmq0_impl — the products of Q4_0 and Q8_0 weights in the packed
 * layout (cuda/qtypes.cuh: cuda_q0_packed): the load-time repack, the
 * decode kernel mmvq0_kernel<T, NC> (n <= 8 activation rows) and the
 * tensor-core kernel mmq0_kernel<T, KDR> (included by mmq_q4_0.cu and
 * mmq_q8_0.cu only).
 *
 * Numerics (cuda/qtypes.cuh): per 32-element block an exact int32 sum v1
 * and p1 = d_w * d_x rounded, acc = fmaf(p1, (float)v1, acc) block after
 * block in k order: the chain the warp-per-row kernel of cuda/mul_mat.cu
 * runs on ggml's layout, so the three kernels give a row the same bits.
 *
 * Why the packed layout: ggml's 18- and 34-byte blocks are 2-byte aligned,
 * so the first kernels read them two bytes at a time (q8_0 at n = 1: 53 us
 * for 4096 x 14336 on the H200, against llama.cpp's 23.1). Repacked at load
 * into a value plane and a scale plane per row (same row bytes), the
 * values are 16-byte aligned: one 128-bit load per Q4_0 block, cp.async
 * straight into the MMQ tile.
 *
 * Two exact shortcuts, both proven in the comments where they are used:
 *  - Q4_0's nibbles are stored XOR 8 (the 4-bit two's complement of
 *    q - 8), so a nibble placed in a byte's high half is the int8 16(q - 8):
 *    two logic ops per word build an mma operand, no per-byte subtract;
 *    the integer sum comes out times 16;
 *  - the int32 -> float conversion of a block sum (a quarter-rate I2F on
 *    sm_90, and one per output per 32 elements here) is the sum taken on
 *    the bits of a magic float (the mma's C operand, the dp4a chain's
 *    first accumulator) and one float subtract, exact for the sums these
 *    blocks give (cuda_q0_magic, cuda_q0_unmag), and a magic with a 16
 *    times smaller ulp divides Q4_0's sum by 16 for free.
 */
#include "engine/cuda/mma.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"
#include "engine/cuda/tiles.cuh"

#include <cuda_pipeline.h>

#include <stdio.h>

extern "C" {
#include "engine/quant.h"
}

template <int T> struct mmq0_t;
template <> struct mmq0_t<QT_Q4_0> {
    enum { QB = 16, RB = 18 }; /* value bytes, ggml bytes per block */
};
template <> struct mmq0_t<QT_Q8_0> {
    enum { QB = 32, RB = 34 };
};

/* (float)(v / S) for S = 16 (Q4_0: the integer sum of 16(q - 8) * x) or 1
 * (Q8_0), exactly, without I2F: adding v to the bits of the float
 * M = 1.5 * 2^k (k = 23 - log2 S, whose ulp is 1/S) gives M + v/S exactly
 * while M + v/S stays in [2^k, 2^(k+1)), i.e. |v| < 2^22; the subtract is
 * exact (both operands in one binade). Q4_0: |v| <= 16 * 32 * 8 * 128 =
 * 2^19; Q8_0: |v| <= 32 * 128 * 128 = 2^19. The add is free where the
 * integer sum starts from the magic's bits instead of 0 (the dp4a chain's
 * first accumulator, the mma's C operand): cuda_q0_magic, cuda_q0_unmag. */
template <int T> static __device__ __forceinline__ int cuda_q0_magic(void)
{
    return T == QT_Q4_0 ? 0x49400000 : 0x4B400000; /* the bits of 1.5 * 2^19, 1.5 * 2^23 */
}
template <int T> static __device__ __forceinline__ float cuda_q0_unmag(int mv)
{
    return __fsub_rn(__int_as_float(mv), T == QT_Q4_0 ? 786432.0f : 12582912.0f);
}

/* ---- load-time repack ----------------------------------------------------
 * One thread block per row, in place: the row is staged in shared memory
 * (at most CUDA_Q0_MAX_ROW bytes), then written back as the two planes. */
template <int T>
static __global__ void q0_repack_kernel(uint8_t *__restrict__ w, size_t row_bytes, int64_t nb)
{
    typedef mmq0_t<T> Q;
    extern __shared__ __align__(16) uint8_t q0_row[];
    uint8_t *row = w + (size_t)blockIdx.x * row_bytes;
    for (size_t i = 2 * threadIdx.x; i < row_bytes; i += 2 * blockDim.x) /* 2-byte aligned */
        *(uint16_t *)(q0_row + i) = *(const uint16_t *)(row + i);
    __syncthreads();
    quant_f16 *dp = (quant_f16 *)(row + (size_t)nb * Q::QB);
    for (int64_t k = threadIdx.x; k < nb * Q::QB; k += blockDim.x) {
        const int64_t ib = k / Q::QB;
        const uint8_t b = q0_row[ib * Q::RB + 2 + k % Q::QB];
        row[k] = T == QT_Q4_0 ? (uint8_t)(b ^ 0x88) : b;
    }
    for (int64_t ib = threadIdx.x; ib < nb; ib += blockDim.x)
        dp[ib] = *(const quant_f16 *)(q0_row + ib * Q::RB);
}

template <int T> static int q0_repack(struct cuda_ctx *c, struct backend_weight *w)
{
    const int64_t nb = w->ne0 / 32;
    if (!cuda_q0_packed(T, w->ne0))
        return 0;
    if (CUDA_CHECK_CTX(c, cudaFuncSetAttribute(q0_repack_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               (int)w->row_bytes)))
        return c->err;
    q0_repack_kernel<T><<<(unsigned)w->ne1, 256, w->row_bytes, c->stream>>>((uint8_t *)w->data, w->row_bytes, nb);
    if (CUDA_CHECK_LAUNCH(c, "q0_repack_kernel") || CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream)))
        return c->err;
    return 0;
}

/* ---- decode: mmvq0_kernel<T, NC, RW, WPR, U> ------------------------------
 * A block's 4 warps hold 4 / WPR row groups of RW consecutive weight rows,
 * WPR warps a group. A window of a group is WPR * U * 32 blocks of k:
 * lane l of the group's warp p takes blocks 32 (p + WPR u) + l of each of
 * the RW rows (a warp's value loads are 512 or 1024 consecutive bytes).
 * The window's activation blocks are loaded once for all RW rows, and
 * every load of the window is issued before its first dp4a (indices
 * clamped instead of branched on, so nothing holds a load back behind a
 * test: rows and blocks past the end load valid bytes whose terms are not
 * parked). The warps park (p1, v1) per block, weight row and activation
 * row in shared memory; after one barrier lane (w, r) = (l / NC, l % NC),
 * l < RW * NC, of the group's warp 0 runs the chain of weight row w and
 * activation row r over the window in k order (RW * NC chains in the same
 * warp instructions) while the other warps load the next window into the
 * other buffer (the K-quants' mmvq_kernel frame, cuda/mmvq.cu).
 * Why (bench/RESULTS.md, 2026-12-03 16:10-): a 14336-element Q4_0 row is
 * 448 blocks, and with one warp a row the chain (a shared load and a
 * dependent fma a block, on one lane) was about half the warp's
 * instructions (ncu: 9.61 M for q4_0 4096 x 14336 at n = 1 against
 * q4_K's 6.73 M for the same bytes) and most of its time between loads;
 * RW rows share those instructions, WPR warps a row keep the loads of a
 * few long rows in flight while one lane chains. */
#define MMVQ0_WARPS 4
/* park row stride in float2: odd for NC > 1, so 32 lanes' writes of one
 * activation row spread over the banks instead of 16-way conflicts */
#define MMVQ0_PS(nc) ((nc) == 1 ? 1 : (nc) + 1)

/* the 32 values of a block as 8 words of int8 (Q4_0: 16 (q - 8), the
 * nibble in each byte's high half: cuda_q0_unmag divides by 16) */
template <int T> struct mmvq0_blk {
    uint4 a, b;
};

template <int T>
static __device__ __forceinline__ mmvq0_blk<T> mmvq0_load(const uint8_t *__restrict__ rowq, int64_t ib)
{
    mmvq0_blk<T> q;
    if (T == QT_Q8_0) {
        q.a = __ldg((const uint4 *)(rowq + ib * 32));
        q.b = __ldg((const uint4 *)(rowq + ib * 32 + 16));
    } else {
        q.a = __ldg((const uint4 *)(rowq + ib * 16));
        q.b = q.a;
    }
    return q;
}

template <int T>
static __device__ __forceinline__ int mmvq0_dot(const mmvq0_blk<T> &q, const uint4 &xa, const uint4 &xb)
{
    uint4 lo = q.a, hi = q.b;
    if (T == QT_Q4_0) {
        /* byte k of the block: element k in the low nibble, 16 + k in the high */
        lo = make_uint4((q.a.x << 4) & 0xf0f0f0f0u, (q.a.y << 4) & 0xf0f0f0f0u, (q.a.z << 4) & 0xf0f0f0f0u,
                        (q.a.w << 4) & 0xf0f0f0f0u);
        hi = make_uint4(q.a.x & 0xf0f0f0f0u, q.a.y & 0xf0f0f0f0u, q.a.z & 0xf0f0f0f0u, q.a.w & 0xf0f0f0f0u);
    }
    int s = __dp4a((int)lo.x, (int)xa.x, cuda_q0_magic<T>()); /* the sum on the magic's bits */
    s = __dp4a((int)lo.y, (int)xa.y, s);
    s = __dp4a((int)lo.z, (int)xa.z, s);
    s = __dp4a((int)lo.w, (int)xa.w, s);
    s = __dp4a((int)hi.x, (int)xb.x, s);
    s = __dp4a((int)hi.y, (int)xb.y, s);
    s = __dp4a((int)hi.z, (int)xb.z, s);
    return __dp4a((int)hi.w, (int)xb.w, s);
}

template <int T, int NC, int RW, int WPR, int U>
static __global__ void __launch_bounds__(MMVQ0_WARPS *CUDA_WARP)
mmvq0_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q80 X, int64_t nbr,
             float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    typedef mmq0_t<T> Q;
    /* SBW: blocks of k a window; PW: one weight row's park (float2), + NC
     * so the chain lanes of different rows read different banks */
    enum { G = MMVQ0_WARPS / WPR, SBW = WPR * U * CUDA_WARP, PS = MMVQ0_PS(NC), PW = SBW * PS + NC };
    /* the chain lanes read one float2 each: distinct bank pairs up to 16
     * chains, two lanes a pair at 32 */
    static_assert(RW * NC <= 32, "one chain a lane");
    __shared__ float2 park[2][G][RW * PW];
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int grp = warp / WPR, part = warp % WPR;
    const int32_t jr0 = (blockIdx.x * G + grp) * RW;
    cuda_pdl_enter();
    if (WPR == 1 && jr0 >= n_w)
        return; /* whole warps: no block barrier at WPR 1 */
    const bool valid = jr0 < n_w;
    const int32_t r0 = blockIdx.y * NC;
    const int nr = n_rows - r0 < NC ? n_rows - r0 : NC;
    const int nw = !valid ? 1 : n_w - jr0 < RW ? n_w - jr0 : RW;
    const int cw = lane / NC, cr = lane % NC; /* the chain this lane runs, if any */
    const bool chain = part == 0 && valid && lane < RW * NC && cw < nw && cr < nr;
    const uint8_t *row0 = w + (size_t)(valid ? jr0 : 0) * row_bytes;
    const int64_t xb0 = (int64_t)r0 * nbr;
    float acc = 0.0f;
    int buf = 0;
    for (int64_t win0 = 0; win0 < nbr; win0 += SBW, buf ^= 1) {
        int v[U][RW][NC];
        float p[U][RW][NC];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t ibr = win0 + CUDA_WARP * (part + WPR * u) + lane;
            const int64_t ib = ibr < nbr ? ibr : nbr - 1;
            uint4 xa[NC], xb[NC];
            float xd[NC];
#pragma unroll
            for (int r = 0; r < NC; r++) {
                const int64_t xi = xb0 + (r < nr ? r : nr - 1) * nbr + ib;
                xa[r] = *(const uint4 *)(X.qs + xi * 32);
                xb[r] = *(const uint4 *)(X.qs + xi * 32 + 16);
                xd[r] = X.d[xi];
            }
#pragma unroll
            for (int rw = 0; rw < RW; rw++) {
                const uint8_t *rowq = row0 + (size_t)(rw < nw ? rw : nw - 1) * row_bytes;
                const mmvq0_blk<T> q = mmvq0_load<T>(rowq, ib);
                const float dw = cuda_h2f(__ldg((const quant_f16 *)(rowq + (size_t)nbr * Q::QB) + ib));
#pragma unroll
                for (int r = 0; r < NC; r++) {
                    v[u][rw][r] = mmvq0_dot<T>(q, xa[r], xb[r]);
                    p[u][rw][r] = __fmul_rn(dw, xd[r]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = CUDA_WARP * (part + WPR * u) + lane; /* the block's place in the window */
            if (win0 + k < nbr)
#pragma unroll
                for (int rw = 0; rw < RW; rw++)
#pragma unroll
                    for (int r = 0; r < NC; r++)
                        if (r < nr)
                            park[buf][grp][rw * PW + k * PS + r] =
                                make_float2(p[u][rw][r], cuda_q0_unmag<T>(v[u][rw][r]));
        }
        if (WPR == 1)
            __syncwarp();
        else
            __syncthreads();
        if (chain) {
            const int cnt = nbr - win0 < SBW ? (int)(nbr - win0) : SBW;
            const float2 *pk = &park[buf][grp][cw * PW + cr];
            for (int k = 0; k < cnt; k++) {
                const float2 t = pk[k * PS];
                acc = __fmaf_rn(t.x, t.y, acc);
            }
        }
        /* no second barrier: the next window parks in the other buffer, and
         * the one after passes the next barrier, which the chaining lanes
         * reach only when this chain is done */
    }
    if (chain)
        cuda_epi_store(y, r0 + cr, jr0 + cw, n_w, acc, E);
}

/* (RW, WPR, U) of mmvq0_kernel by type and activation rows per weight
 * read: weight rows a group, warps a group, blocks a lane a window. Rows
 * change speed, never results (every shape runs each (row, activation row)
 * chain in the same order). Measured on the H200 (bench/RESULTS.md,
 * 2026-12-03 16:10-, calls 2, 5 and 6: shapes forced on 4096 x 14336 and
 * three 7B shapes, the fastest summed over the shapes). More rows a group
 * share the activation loads and the chain's instructions among them
 * (q4_0 4096 x 14336: n = 1 18.4 -> 11.9 us at (8, 4, 1), n = 4 43.7 ->
 * 16.2 at (4, 2, 1), n = 8 63.3 -> 32.4 at (2, 1, 1)); more warps a group
 * keep a few long rows' loads in flight. Q8_0's twice larger blocks take
 * fewer rows at one and four activation rows ((8, 4, 1) and (4, 2, 1)
 * were +3% on two of the four shapes there). The park's 48 KB of static
 * shared memory bounds RW * U at eight rows. sm_121 (GB10, not measured)
 * takes the same rows: more rows an SM only adds warps to a grid these
 * already fill. */
struct mmvq0_rwu {
    int rw, wpr, u;
};
static constexpr mmvq0_rwu mmvq0_table(int t, int nc)
{
    return nc == 8   ? mmvq0_rwu{2, 1, 1}
           : nc == 4 ? (t == QT_Q4_0 ? mmvq0_rwu{4, 2, 1} : mmvq0_rwu{2, 4, 1})
           : nc == 2 ? mmvq0_rwu{4, 4, 1}
                     : (t == QT_Q4_0 ? mmvq0_rwu{8, 4, 1} : mmvq0_rwu{2, 2, 2});
}
template <int T, int NC> struct mmvq0_cfg {
    enum { RW = mmvq0_table(T, NC).rw, WPR = mmvq0_table(T, NC).wpr, U = mmvq0_table(T, NC).u };
    static_assert(RW * NC <= 32 && 2 * MMVQ0_WARPS * RW * (U * CUDA_WARP * MMVQ0_PS(NC) + NC) * 8 <= 48 * 1024,
                  "the chain lanes and the park of a block");
};

template <int T, int NC>
static void mmvq0_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                         int32_t n_rows)
{
    typedef mmvq0_cfg<T, NC> C;
    const int64_t nbr = w->ne0 / 32;
    const dim3 grid(cuda_blocks(w->ne1, MMVQ0_WARPS / C::WPR * C::RW), cuda_blocks(n_rows, NC));
    cuda_launch(c, mmvq0_kernel<T, NC, C::RW, C::WPR, C::U>, grid, MMVQ0_WARPS * CUDA_WARP, 0,
        (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1, cuda_q80_planes(xq, (int64_t)n_rows * nbr), nbr,
        y, n_rows, c->epi);
}

/* ---- MMQ: mmq0_kernel<T, KDR, NT> ------------------------------------------
 * The K-quant kernel's frame (cuda/mmqk_impl.cuh): 64 x 32 NT tile, 256
 * threads as 2 x 4 warps of 32 x 8 NT (NT = 2 or 4: the tile table's BN
 * 64 or 128, cuda/tiles.cuh), stages of KDR * 256 elements
 * double-buffered by cp.async, one barrier per stage, row strides odd
 * multiples of 16 bytes so fragment loads are conflict-free. One mma per
 * 32-element block and warp tile; its int32 results enter the float chain
 * at once (a scale per 32: no integer scaling step). */
template <int T, int KDR, int NT> struct mmq0_smem {
    enum { QW = mmq0_t<T>::QB * 8 * KDR / 4 + 4 }; /* value words per row, odd multiple of 4 */
    uint32_t wq[2][MMQ_BM][QW];
    quant_f16 wd[2][MMQ_BM][8 * KDR];
    int8_t xq[2][32 * NT][256 * KDR + 16];
    float xd[2][8 * KDR][32 * NT]; /* transposed: a thread's two columns are adjacent */
};

/* Blocks per SM the register cap is set for: KDR = 1's shared memory
 * (58 / 74 KB) leaves room for three on sm_90, which the registers then
 * decide (65,536 / 768 = 85 per thread: 80, no spills). Measured on the
 * H200 (bench/RESULTS.md, call 2, n = 512): q8_0 414 -> 402 us at three,
 * q4_0 376 -> 380, so Q8_0 only; sm_121 keeps one. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define MMQ0_MIN_BLOCKS(t, kdr, nt) 1
#else
#define MMQ0_MIN_BLOCKS(t, kdr, nt) ((nt) == 4 ? MMQK_NT4_MIN_BLOCKS : (kdr) == 1 && (t) == QT_Q8_0 ? 3 : 2)
#endif

template <int T, int KDR, int NT>
static __global__ void __launch_bounds__(MMQ_THREADS, MMQ0_MIN_BLOCKS(T, KDR, NT))
mmq0_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q80 X, int64_t nbr,
            float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    cuda_pdl_enter();
    typedef mmq0_t<T> Q;
    typedef mmq0_smem<T, KDR, NT> SM;
    extern __shared__ __align__(16) uint8_t mmq0_smem_raw[];
    SM &S = *(SM *)mmq0_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int wm = warp / 4, wn = warp % 4;
    const int g = lane >> 2, t4 = lane & 3;
    const int32_t m0 = blockIdx.x * MMQ_BM, n0 = blockIdx.y * (32 * NT);
    const int64_t n_stages = nbr / (8 * KDR);

    const int lr = tid / 4, lp = tid % 4;
    const int32_t wrl = mmq_wrow(m0, lr, n_w, E.glu);        /* -1: past the weight */
    const int32_t wrow = wrl >= 0 ? wrl : n_w - 1;             /* clamped: never loaded */
    const uint8_t *wq = w + (size_t)wrow * row_bytes;
    const uint8_t *wdp = wq + (size_t)nbr * Q::QB;
    int64_t xb0[NT / 2]; /* activation rows lr, lr + 64: block index of block 0 */
#pragma unroll
    for (int q = 0; q < NT / 2; q++)
        xb0[q] = (int64_t)(n0 + lr + 64 * q < n_rows ? n0 + lr + 64 * q : n_rows - 1) * nbr;

    /* the A fragments' ldmatrix row addresses in buffer 0 (cuda_ldsm_x4;
     * the lanes as in cuda/mmqk_impl.cuh): row (l & 7) + 8 ((l >> 3) & 1)
     * of the warp's 16-row tile mt, words 4 (l >> 4).. of a fragment chunk
     * (Q8_0: a block's words t, t + 4; Q4_0: blocks jj, jj + 1 as a pair).
     * The activations' B fragments stay 32-bit loads (cuda/mmqk_impl.cuh
     * says why). Measured (H200, 2026-12-02, n = 512): q8_0 -5.9%, q4_0
     * -5.1% with the unrolled staging of cuda_copy16. */
    uint32_t sa[2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
        sa[mt] = cuda_saddr(&S.wq[0][32 * wm + 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1)][4 * (lane >> 4)]);
    const uint32_t wbuf = (uint32_t)sizeof(S.wq[0]);

    float acc[2][NT][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < NT; b++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[a][b][i] = 0.0f;

    /* rows past the weight's or the batch's end are not loaded (their
     * products are never stored; cuda/mmqk_impl.cuh says why) */
    const bool wload = wrl >= 0;
#define MMQ0_ISSUE(s)                                                                              \
    do {                                                                                           \
        const int bf = (int)((s) & 1);                                                             \
        const int64_t blk = (s) * 8 * KDR; /* first block of the stage */                          \
        if (wload) {                                                                               \
            cuda_copy16<Q::QB * KDR / 2, 4>(S.wq[bf][lr], wq + blk * Q::QB, lp);                   \
            if (lp < KDR)                                                                          \
                __pipeline_memcpy_async(&S.wd[bf][lr][8 * lp], wdp + (blk + 8 * lp) * 2, 16);      \
        }                                                                                          \
        _Pragma("unroll") for (int q = 0; q < NT / 2; q++)                                         \
        {                                                                                          \
            const int xr = lr + 64 * q;                                                            \
            if (n0 + xr < n_rows) {                                                                \
                cuda_copy16<16 * KDR, 4>(S.xq[bf][xr], X.qs + (xb0[q] + blk) * 32, lp);            \
                _Pragma("unroll") for (int k = 0; k < 2 * KDR; k++)                                \
                    __pipeline_memcpy_async(&S.xd[bf][lp + 4 * k][xr], X.d + xb0[q] + blk + lp + 4 * k, 4); \
            }                                                                                      \
        }                                                                                          \
        __pipeline_commit();                                                                       \
    } while (0)

    MMQ0_ISSUE((int64_t)0);
    for (int64_t s = 0; s < n_stages; s++) {
        __pipeline_wait_prior(0);
        __syncthreads(); /* stage s has landed everywhere; stage s-1's readers are done */
        if (s + 1 < n_stages)
            MMQ0_ISSUE(s + 1);
        const int bf = (int)(s & 1);
        uint32_t q4[2][4]; /* Q4_0: the words of blocks jj, jj + 1 (rows g, g + 8) */
#pragma unroll
        for (int jj = 0; jj < 8 * KDR; jj++) {
            int a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                if (T == QT_Q8_0) {
                    cuda_ldsm_x4((uint32_t *)a[mt], sa[mt] + bf * wbuf + 32 * jj);
                } else {
                    /* bytes 4t.. of the block: elements 4t.. low, 16+4t.. high */
                    if (jj % 2 == 0)
                        cuda_ldsm_x4(q4[mt], sa[mt] + bf * wbuf + 16 * jj);
                    const uint32_t u0 = q4[mt][2 * (jj % 2)], u1 = q4[mt][2 * (jj % 2) + 1];
                    a[mt][0] = (int)((u0 << 4) & 0xf0f0f0f0u);
                    a[mt][1] = (int)((u1 << 4) & 0xf0f0f0f0u);
                    a[mt][2] = (int)(u0 & 0xf0f0f0f0u);
                    a[mt][3] = (int)(u1 & 0xf0f0f0f0u);
                }
            }
            int b[NT][2];
            float2 dx[NT];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int rb = 8 * NT * wn + 8 * nt + g;
                b[nt][0] = *(const int *)&S.xq[bf][rb][32 * jj + 4 * t4];
                b[nt][1] = *(const int *)&S.xq[bf][rb][32 * jj + 16 + 4 * t4];
                dx[nt] = *(const float2 *)&S.xd[bf][jj][8 * NT * wn + 8 * nt + 2 * t4];
            }
            float dw[2][2];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++)
                    dw[mt][h] = cuda_h2f(S.wd[bf][32 * wm + 16 * mt + g + 8 * h][jj]);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    int cc[4]; /* the block sums on the magic's bits (cuda_q0_magic) */
                    cuda_mma_k32_c(cc, a[mt], b[nt], cuda_q0_magic<T>());
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float p1 = __fmul_rn(dw[mt][i >> 1], (i & 1) ? dx[nt].y : dx[nt].x);
                        acc[mt][nt][i] = __fmaf_rn(p1, cuda_q0_unmag<T>(cc[i]), acc[mt][nt][i]);
                    }
                }
        }
    }
#undef MMQ0_ISSUE
    mmq_tile_store<NT>(acc, m0, n0, wm, wn, g, t4, n_w, n_rows, y, E);
}

template <int T, int KDR, int NT> static int mmq0_occupancy(void)
{
    return mmq_occupancy_once<mmq0_kernel<T, KDR, NT>>(sizeof(mmq0_smem<T, KDR, NT>));
}

/* 0, -1 when this device cannot hold KDR's shared memory, INF_EUNSUPPORTED
 * for a shape it does not serve */
template <int T, int KDR, int NT>
static int mmq0_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows)
{
    typedef mmq0_smem<T, KDR, NT> SM;
    if (!cuda_q0_packed(T, w->ne0) || w->ne0 % (256 * KDR))
        return INF_EUNSUPPORTED;
    if (mmq0_occupancy<T, KDR, NT>() == 0)
        return -1;
    const int64_t nbr = w->ne0 / 32;
    const dim3 grid(cuda_blocks(w->ne1, MMQ_BM), cuda_blocks(n_rows, 32 * NT));
    cuda_launch(c, mmq0_kernel<T, KDR, NT>, grid, MMQ_THREADS, sizeof(SM),
        (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1, cuda_q80_planes(xq, (int64_t)n_rows * nbr), nbr,
        y, n_rows, c->epi);
    return 0;
}

/* bn: activation rows a block, 64 (or 0) or 128 */
template <int T>
static int mmq0_variant(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows,
                        int kdr, int bn)
{
    if (!mmq_tile_valid(kdr, bn))
        return INF_EUNSUPPORTED;
    if (bn == 128)
        return kdr == 2 ? mmq0_launch<T, 2, 4>(c, w, xq, y, n_rows) : mmq0_launch<T, 1, 4>(c, w, xq, y, n_rows);
    return kdr == 2 ? mmq0_launch<T, 2, 2>(c, w, xq, y, n_rows) : mmq0_launch<T, 1, 2>(c, w, xq, y, n_rows);
}

/* the tile table's choice (cuda/tiles.cuh: mmq_pick_tile), as for the
 * K-quants */
template <int T>
static void mmq0_dispatch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                          int32_t n_rows)
{
    const int occ[2][2] = {{mmq0_occupancy<T, 1, 2>(), mmq0_occupancy<T, 2, 2>()},
                           {mmq0_occupancy<T, 1, 4>(), mmq0_occupancy<T, 2, 4>()}};
    int kdr = 1, bn = 64;
    mmq_pick_tile(c->n_sm, occ, w->ne0, w->ne1, n_rows, &kdr, &bn);
    const int rc = mmq_launch_picked(kdr, [&](int k) { return mmq0_variant<T>(c, w, xq, y, n_rows, k, bn); });
    if (rc) {
        c->err = rc == -1 ? INF_EDEVICE : rc;
        snprintf(c->err_msg, sizeof(c->err_msg), "mmq: no kernel for %s %lld x %lld (kdr %d, bn %d)",
                 quant_type_name(T), (long long)w->ne0, (long long)w->ne1, kdr, bn);
    }
}

template <int T>
static void mmvq0_dispatch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                           int32_t n_rows, int nc)
{
    if (nc <= 0)
        nc = cuda_mmvq_nc(n_rows);
    switch (nc) {
    case 1: mmvq0_launch<T, 1>(c, w, xq, y, n_rows); break;
    case 2: mmvq0_launch<T, 2>(c, w, xq, y, n_rows); break;
    case 4: mmvq0_launch<T, 4>(c, w, xq, y, n_rows); break;
    default: mmvq0_launch<T, 8>(c, w, xq, y, n_rows); break;
    }
}

#define MMQ0_DEFINE(T)                                                                            \
    template <>                                                                                   \
    void cuda_mmq<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                     int32_t n_rows)                                                              \
    {                                                                                             \
        mmq0_dispatch<T>(c, w, xq, y, n_rows);                                                    \
    }                                                                                             \
    template <>                                                                                   \
    int cuda_mmqk_variant<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, \
                             float *y, int32_t n_rows, int kdr, int exp, int bn)                  \
    {                                                                                             \
        return exp ? INF_EUNSUPPORTED : mmq0_variant<T>(c, w, xq, y, n_rows, kdr, bn);            \
    }                                                                                             \
    template <>                                                                                   \
    void cuda_mmvq<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                      int32_t n_rows, int nc, int wpr, int u)                                     \
    {                                                                                             \
        if (wpr > 1 || u > 0) { /* one warp per row, its own table */                             \
            c->err = INF_EUNSUPPORTED;                                                            \
            return;                                                                               \
        }                                                                                         \
        mmvq0_dispatch<T>(c, w, xq, y, n_rows, nc);                                               \
    }                                                                                             \
    template <> int cuda_q0_repack<T>(struct cuda_ctx * c, struct backend_weight * w)             \
    {                                                                                             \
        return q0_repack<T>(c, w);                                                                \
    }
