/* cuda/mmq_impl — the Q8_0/Q4_0 MMQ kernel template (included by
 * mmq_q8_0.cu and mmq_q4_0.cu only; the K-quants have cuda/mmqk_impl.cuh).
 *
 * Tile: MMQ_BM = 64 weight rows x MMQ_BN = 64 activation rows per 256-thread
 * block; 8 warps as 2 (weight rows) x 4 (activation rows), each warp 32 x 16
 * = 2 x 2 mma tiles. K advances one stage of 256 elements (one K-quant
 * super-block, or 8 Q8_0/Q4_0 blocks): every thread unpacks its share of
 * the weights to int8 (ready for mma) with their integer group scales, and
 * copies its share of the activations, into shared memory; then each warp
 * runs, per scale group of the stage, one mma per tile with a zero
 * accumulator, multiplies the int32 result by the weight row's integer scale
 * and adds it to an int32 block sum (exact); at each float step (the stage
 * for K-quants, each 32 for Q8_0/Q4_0) the block sums enter the float
 * chain exactly as cuda/qtypes.cuh's cuda_qt<T>::terms/scales define it.
 *
 * Shared memory rows are padded to 272 bytes (68 words): the fragment loads
 * (8 rows x 4 words per phase) then fall on 32 distinct banks.
 */
#include "engine/cuda/mma.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"
#include "engine/cuda/tiles.cuh"

#include <cuda_pipeline.h>

#define MMQ_K 256   /* elements per stage */
/* the loader (4 threads per row of each tile) and the 2 x 4 warp grid of
 * 32 x 16 warp tiles are written for this shape */
static_assert(MMQ_THREADS == 4 * MMQ_BM && MMQ_BN == MMQ_BM && MMQ_BM == 64,
              "mmq_kernel is written for 64 x 64 tiles of 256 threads");
#define MMQ_ROW 272 /* padded shared-memory row, bytes */

/* Per-type stage layout: GROUP elements share an integer scale (32, or 16
 * for Q6_K); FS elements share a float step (256 for K-quants, 32 else). */
template <int T> struct mmq_traits;
/* WB/XB: bytes of one stage of a weight / activation row. */
template <> struct mmq_traits<QT_Q8_0> { enum { GROUP = 32, FS = 32, MIN = 0, WB = 272, XB = 272 }; };
template <> struct mmq_traits<QT_Q4_0> { enum { GROUP = 32, FS = 32, MIN = 0, WB = 144, XB = 272 }; };

/* Raw staging: the next stage's bytes, copied with cp.async while the
 * current stage computes. Rows start at a 4-byte boundary at or below the
 * stage (Q6_K's 210-byte and Q8_0's 34-byte blocks are only 2-aligned):
 * up to 2 bytes of slack, rounded up to words. */
#define MMQ_RAW_WORDS 74 /* (292 + 2 + 3) / 4 */

struct mmq_smem {
    int8_t wq[MMQ_BM][MMQ_ROW];     /* weights, int8 */
    int8_t xq[MMQ_BN][MMQ_ROW];     /* activations, int8 */
    int8_t wsc[MMQ_BM][16];         /* integer scale per group */
    int8_t wmin[MMQ_BM][8];         /* Q4_K/Q5_K min per 32 */
    float wd[MMQ_BM][8];            /* weight float scale per float step */
    float wdmin[MMQ_BM];            /* Q4_K/Q5_K dmin */
    float xd[MMQ_BN][8];            /* activation scale per float step */
    int16_t xbs[MMQ_BN][8];         /* activation sums per 32 (K-quants; |sum| <= 32*127) */
    uint32_t raw_w[MMQ_BM][MMQ_RAW_WORDS];
    uint32_t raw_x[MMQ_BN][MMQ_RAW_WORDS];
};

static __device__ __forceinline__ void mmq_st4(int8_t *dst, const int q[8])
{
    int *d = (int *)dst;
#pragma unroll
    for (int k = 0; k < 8; k++)
        d[k] = q[k];
}

/* Unpack part p (0..3: a quarter, 64 elements) of stage s of one weight row. */
template <int T> struct mmq_unpack;

/* Q8_0/Q4_0: blocks 2p and 2p+1 of the stage's 8, each its own float step */
template <int T, typename B> struct mmq_unpack_q0 {
    static __device__ __forceinline__ void run(mmq_smem &S, int r, const uint8_t *row, int64_t s, int p)
    {
        const B *b = (const B *)row + 8 * s;
        for (int j = 2 * p; j < 2 * p + 2; j++) {
            int q[8];
            cuda_qt<T>::unpack(b + j, q);
            mmq_st4(&S.wq[r][32 * j], q);
            S.wsc[r][j] = 1;
            S.wd[r][j] = cuda_h2f(b[j].d);
        }
    }
};
template <> struct mmq_unpack<QT_Q8_0> : mmq_unpack_q0<QT_Q8_0, struct block_q8_0> {};
template <> struct mmq_unpack<QT_Q4_0> : mmq_unpack_q0<QT_Q4_0, struct block_q4_0> {};

/* Part p (0..3) of stage s of one activation row: 64 bytes of qs and the
 * scales/sums of the float steps in it. */
template <int T>
static __device__ __forceinline__ void mmq_load_x(mmq_smem &S, int r, const void *xrow, int64_t s, int p)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)xrow + 8 * s;
    for (int j = 2 * p; j < 2 * p + 2; j++) {
        int q[8];
        cuda_qt<QT_Q8_0>::unpack(b + j, q);
        mmq_st4(&S.xq[r][32 * j], q);
        S.xd[r][j] = cuda_h2f(b[j].d);
    }
}

template <int T>
static __global__ void __launch_bounds__(MMQ_THREADS, MMQ_MIN_BLOCKS)
mmq_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, const void *__restrict__ xq,
           size_t x_row_bytes, int64_t n_stages, float *__restrict__ y, int32_t n_rows,
           struct cuda_epi E)
{
    typedef mmq_traits<T> TR;
    extern __shared__ __align__(16) uint8_t mmq_smem_raw[];
    mmq_smem &S = *(mmq_smem *)mmq_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int wm = warp / 4, wn = warp % 4; /* warp tile: rows 32*wm.., activations 16*wn.. */
    const int g = lane >> 2, t4 = lane & 3;
    const int32_t m0 = blockIdx.x * MMQ_BM, n0 = blockIdx.y * MMQ_BN;

    /* loader roles: 4 threads per row (a quarter of the stage each) */
    const int lr = tid / 4, lp = tid % 4;
    const int32_t wrow = m0 + lr < n_w ? m0 + lr : n_w - 1;        /* clamped: read, never stored */
    const int32_t xrow = n0 + lr < n_rows ? n0 + lr : n_rows - 1;
    const uint8_t *wp = w + (size_t)wrow * row_bytes;
    const uint8_t *xp = (const uint8_t *)xq + (size_t)xrow * x_row_bytes;

    float acc[2][2][4];
    int sum[2][2][4];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                acc[a][b][i] = 0.0f;
                sum[a][b][i] = 0;
            }

    /* stage 0: copy, wait, unpack */
    cuda_raw_copy<TR::WB>(S.raw_w[lr], wp, lp, 4);
    cuda_raw_copy<TR::XB>(S.raw_x[lr], xp, lp, 4);
    __pipeline_commit();
    for (int64_t s = 0; s < n_stages; s++) {
        __pipeline_wait_prior(0);
        __syncthreads(); /* raw stage s has landed; stage s-1's readers are done */
        {
            const uint8_t *rw = (const uint8_t *)S.raw_w[lr] + ((uintptr_t)(wp + s * TR::WB) & 3);
            const uint8_t *rx = (const uint8_t *)S.raw_x[lr] + ((uintptr_t)(xp + s * TR::XB) & 3);
            mmq_unpack<T>::run(S, lr, rw, 0, lp);
            mmq_load_x<T>(S, lr, rx, 0, lp);
        }
        __syncthreads(); /* the tile is ready and the raw buffers are free */
        if (s + 1 < n_stages) {
            cuda_raw_copy<TR::WB>(S.raw_w[lr], wp + (s + 1) * TR::WB, lp, 4);
            cuda_raw_copy<TR::XB>(S.raw_x[lr], xp + (s + 1) * TR::XB, lp, 4);
        }
        __pipeline_commit();

#pragma unroll
        for (int k = 0; k < MMQ_K; k += TR::GROUP) {
            int c[2][2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int ra = 32 * wm + 16 * mt + g;
                int a[4];
                a[0] = *(const int *)&S.wq[ra][k + 4 * t4];
                a[1] = *(const int *)&S.wq[ra + 8][k + 4 * t4];
                if (TR::GROUP == 32) {
                    a[2] = *(const int *)&S.wq[ra][k + 16 + 4 * t4];
                    a[3] = *(const int *)&S.wq[ra + 8][k + 16 + 4 * t4];
                }
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const int rb = 16 * wn + 8 * nt + g;
                    int b[2];
                    b[0] = *(const int *)&S.xq[rb][k + 4 * t4];
                    if (TR::GROUP == 32) {
                        b[1] = *(const int *)&S.xq[rb][k + 16 + 4 * t4];
                        cuda_mma_k32(c[mt][nt], a, b);
                    } else {
                        cuda_mma_k16(c[mt][nt], a[0], a[1], b[0]);
                    }
                }
            }
            /* integer group scale of each C element's weight row */
            const int grp = k / TR::GROUP;
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const int ra = 32 * wm + 16 * mt + g;
                const int s0 = S.wsc[ra][grp], s1 = S.wsc[ra + 8][grp];
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    sum[mt][nt][0] += s0 * c[mt][nt][0];
                    sum[mt][nt][1] += s0 * c[mt][nt][1];
                    sum[mt][nt][2] += s1 * c[mt][nt][2];
                    sum[mt][nt][3] += s1 * c[mt][nt][3];
                }
            }
            /* a float step ends: the block's terms enter the chain */
            if ((k + TR::GROUP) % TR::FS == 0) {
                const int st = k / TR::FS;
                /* min terms: sum_j m_j * bsum_j as two-way int16 x int8 dots
                 * (4 dp2a per element, exact); the rows' mins and the
                 * activations' sums loaded once for the thread's 4 x 4 */
                int wmw[2][2][2], xbw[2][2][4];
                if (TR::MIN) {
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int *m8 = (const int *)S.wmin[32 * wm + 16 * mt + g + 8 * h];
                            wmw[mt][h][0] = m8[0];
                            wmw[mt][h][1] = m8[1];
                        }
#pragma unroll
                    for (int nt = 0; nt < 2; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int *b16 = (const int *)S.xbs[16 * wn + 8 * nt + 2 * t4 + e];
#pragma unroll
                            for (int q = 0; q < 4; q++)
                                xbw[nt][e][q] = b16[q];
                        }
                }
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int nt = 0; nt < 2; nt++)
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            const int h = i >> 1, e = i & 1;
                            const int ra = 32 * wm + 16 * mt + g + 8 * h;
                            const int rb = 16 * wn + 8 * nt + 2 * t4 + e;
                            const float p1 = __fmul_rn(S.wd[ra][st], S.xd[rb][st]);
                            float a2 = __fmaf_rn(p1, (float)sum[mt][nt][i], acc[mt][nt][i]);
                            if (TR::MIN) {
                                int v2 = __dp2a_lo(xbw[nt][e][0], wmw[mt][h][0], 0);
                                v2 = __dp2a_hi(xbw[nt][e][1], wmw[mt][h][0], v2);
                                v2 = __dp2a_lo(xbw[nt][e][2], wmw[mt][h][1], v2);
                                v2 = __dp2a_hi(xbw[nt][e][3], wmw[mt][h][1], v2);
                                const float p2 = -__fmul_rn(S.wdmin[ra], S.xd[rb][0]);
                                a2 = __fmaf_rn(p2, (float)v2, a2);
                            }
                            acc[mt][nt][i] = a2;
                            sum[mt][nt][i] = 0;
                        }
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int32_t j = m0 + 32 * wm + 16 * mt + g + 8 * (i >> 1);
                const int32_t r = n0 + 16 * wn + 8 * nt + 2 * t4 + (i & 1);
                if (j < n_w && r < n_rows)
                    cuda_epi_store(y, r, j, n_w, acc[mt][nt][i], E);
            }
}

template <int T>
void cuda_mmq(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
              int32_t n_rows)
{
    typedef cuda_qt<T> Q;
    const int64_t nb = w->ne0 / Q::QK; /* activation blocks per row */
    const size_t x_row_bytes = (size_t)nb * sizeof(typename Q::xb);
    const dim3 grid(cuda_blocks(w->ne1, MMQ_BM), cuda_blocks(n_rows, MMQ_BN));
    /* past the 48 KB a launch gets without asking; set once per instantiation */
    static int attr_set;
    if (!attr_set) {
        if (cuda_fail(c, cudaFuncSetAttribute(mmq_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)sizeof(mmq_smem)),
                      "cudaFuncSetAttribute(mmq_kernel)", __FILE__, __LINE__))
            return;
        attr_set = 1;
    }
    mmq_kernel<T><<<grid, MMQ_THREADS, sizeof(mmq_smem), c->stream>>>((const uint8_t *)w->data, w->row_bytes,
                                               (int32_t)w->ne1, xq, x_row_bytes, w->ne0 / MMQ_K,
                                               y, n_rows, c->epi);
}
