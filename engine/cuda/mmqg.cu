/* cuda/mmqg — the Q4_K / Q5_K MMQ on Hopper's warpgroup tensor-core
 * instruction (wgmma.mma_async, sm_90a only): 64 weight rows x 64
 * activation rows a block of one warpgroup (128 threads).
 *
 * Why (bench/RESULTS.md, the ncu census of mmqk_kernel<q4_K, 1, false, 4>
 * at n = 512, 2026-12-02/03): 117.8 M warp instructions for 7.34 M mma, 16
 * an mma; 29.4 M of them are the sub-block scale `sum += s * c` (4 IMAD
 * for every m16n8k32 mma: each of its 4 int32 results a thread holds is
 * scaled by its row's 6-bit scale), 11.5 M the B fragments' shared loads,
 * 9.2 M the mma themselves. The mma.sync form cannot drop the scale
 * multiply: a 16 x 8 result is 4 registers a thread whatever the tile.
 * Here the scale goes into the weights instead, where it costs a multiply
 * per 4 weight bytes rather than per output:
 *  - q * s (Q4_K: q <= 15, s <= 63, up to 945) does not fit a byte, but
 *    s = 16 sh + sl (sl <= 15, sh <= 3) gives two u8 planes q * sl <= 225
 *    and q * sh <= 45 (Q5_K: q <= 31, s = 8 sh + sl, sl, sh <= 7: 217);
 *    a plane's 4-byte A fragment word is one IMUL of the nibble word by
 *    the row's scale (every byte product < 256: no carry between bytes);
 *  - one accumulator: the 8 sub-blocks' sh planes accumulate into D (the
 *    first with scale-d = 0), D <<= 4 (3), then the sl planes accumulate
 *    into the same D, which is then sum_j s_j (q_j . x_j), the exact int32
 *    block sum mmqk builds with its IMADs (|D| <= 30.7 M: no overflow,
 *    same integer), so the same bits;
 *  - the activations are wgmma's B operand straight from shared memory
 *    (a matrix descriptor over the stage's tile in the core-matrix layout,
 *    below): no B fragment loads at all;
 *  - the tensor work doubles (two planes) but wgmma's int8 rate is ~1.5x
 *    mma.sync's and it runs asynchronously beside the float chain.
 * The super-block's end is mmqk's, operation for operation: the min term
 * by two m16n8k16 mma on the activation sums (mmqk_min_words), then the
 * float chain of cuda/qtypes.cuh (p1 = d * xd, fma, p2 = -dmin * xd,
 * fma) in k order; so a row's bits are mmqk's, mmvt's and the CPU's.
 *
 * Layouts. A (registers, per warp w of the group: tile rows 16w..16w+15):
 * the m16n8k32 fragment (rows g, g + 8 x bytes 4t.., 16 + 4t..), built as
 * mmqk builds it (one ldmatrix of nibbles for two sub-blocks, mmqk_w's
 * frag2), then the IMUL. B (shared memory): the stage's 64 activation rows
 * x 256 bytes as 16-byte chunks, chunk-major: byte k of row n at
 * (k / 16) * 1024 + n * 16 + k % 16, so each 8-row x 16-byte core matrix
 * is 128 contiguous bytes; the descriptor of sub-block j starts at chunk
 * 2j, the next chunk along K 1,024 bytes on (leading byte offset), the
 * next 8 rows 128 bytes on (stride byte offset), no swizzle. D (registers):
 * d[4i + e] = row g + 8 (e >> 1), activation row 8i + 2t + (e & 1).
 *
 * Staging: mmqk's (cp.async, double-buffered, one barrier a stage), plus a
 * proxy fence, since wgmma reads shared memory through the async proxy.
 */
#include "engine/cuda/mmqk_impl.cuh"

#define MMQG_BN 64
#define MMQG_CH (QK_K / 16) /* 16-byte chunks of an activation super-block */

/* WG warpgroups a block (64 weight rows each, the activation tile shared),
 * ST stages in the cp.async ring (ST - 1 in flight while one computes),
 * OV: the next four sub-blocks' planes built while the wgmma of the four
 * before run (two register sets) instead of after their wait */
template <int T, int WG, int ST> struct mmqg_t {
    typedef mmqk_w<T, 1, false> W;
    /* sl = s & LO, sh = s >> SH (both as bytes of a packed scale word) */
    enum {
        SH = T == QT_Q4_K ? 4 : 3,
        LO = T == QT_Q4_K ? 15 : 7,
        HI = T == QT_Q4_K ? 3 : 7,
        BM = 64 * WG,
        THREADS = 128 * WG,
    };
};

template <int T, int WG, int ST> struct mmqg_smem {
    typedef typename mmqg_t<T, WG, ST>::W W;
    uint32_t w[ST][64 * WG][W::SW];
    int8_t x[ST][MMQG_CH][MMQG_BN][16];
    int8_t xhl[ST][MMQG_BN][CUDA_Q8K_HL];
    float xd[ST][MMQG_BN];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MMQG_DEVICE 1
/* the wgmma of the kernel: D(64 x 64 s32) (+)= A(64 x 32 u8, registers) x
 * B(32 x 64 s8, descriptor); scale_d = 0 ignores D's old value */
static __device__ __forceinline__ void mmqg_mma(int d[32], const uint32_t a[4], uint64_t desc, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
                   "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
                   "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]),
                   "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]),
                   "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d));
}

/* the same with D = A x B (the stage's first: no accumulator read) */
static __device__ __forceinline__ void mmqg_mma0(int d[32], const uint32_t a[4], uint64_t desc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p;\n}\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]),
                   "=r"(d[7]), "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]),
                   "=r"(d[14]), "=r"(d[15]), "=r"(d[16]), "=r"(d[17]), "=r"(d[18]), "=r"(d[19]), "=r"(d[20]),
                   "=r"(d[21]), "=r"(d[22]), "=r"(d[23]), "=r"(d[24]), "=r"(d[25]), "=r"(d[26]), "=r"(d[27]),
                   "=r"(d[28]), "=r"(d[29]), "=r"(d[30]), "=r"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}

/* Pin d's registers at this point of the program: the asm "reads and
 * writes" them, so the compiler cannot move their uses across it (the
 * hardware writes them between the wgmma and its wait_group). */
static __device__ __forceinline__ void mmqg_pin(int d[32])
{
#pragma unroll
    for (int i = 0; i < 32; i++)
        asm volatile("" : "+r"(d[i])::"memory");
}
#else
#define MMQG_DEVICE 0
#endif


/* the shared-memory matrix descriptor of the core-matrix tile at byte
 * address sa: 14-bit fields of address, leading (K) and stride (M/N) byte
 * offsets, each in 16-byte units; bits 62-63 = 0, no swizzle */
static __device__ __forceinline__ uint64_t mmqg_desc(uint32_t sa, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((sa & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}

template <int T, int WG, int ST, bool OV>
static __global__ void __launch_bounds__(128 * WG, WG == 1 ? 4 : 2)
mmqg_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X, int64_t nbr,
            float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
#if MMQG_DEVICE
    cuda_pdl_enter();
    typedef mmqg_t<T, WG, ST> G;
    typedef typename G::W W;
    typedef mmqg_smem<T, WG, ST> SM;
    extern __shared__ __align__(128) uint8_t mmqg_smem_raw[];
    SM &S = *(SM *)mmqg_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int g = lane >> 2, t4 = lane & 3;
    const int wg = warp >> 2, wq = warp & 3; /* warpgroup, its warp: tile rows 64 wg + 16 wq.. */
    const int32_t m0 = blockIdx.x * G::BM, n0 = blockIdx.y * MMQG_BN;

    /* loader: 2 threads a weight row (granules lp, lp + 2, ...), 128 / WG
     * an activation row's chunks (WG = 1: 8 a thread, lp 0 its scale d, lp
     * 1 its sums; WG = 2: 4, parts 0 and 1 likewise); 32-bit offsets from
     * block-uniform bases, as mmqk's */
    const int lr = tid >> 1, lp = tid & 1;
    const int32_t wrl = mmq_wrow(m0 + 64 * (lr >> 6), lr & 63, n_w, E.glu);
    const int32_t wr0 = E.glu ? m0 / 2 : m0;
    const uint8_t *wbase = w + (size_t)wr0 * row_bytes;
    const uint32_t woff = (uint32_t)((size_t)((wrl >= 0 ? wrl : wr0) - wr0) * row_bytes);
    const bool wload = wrl >= 0;
    enum { XP = 2 * WG, XC = MMQG_CH / XP }; /* threads an activation row, chunks a thread */
    const int xr = tid / XP, xp = tid % XP;
    const bool xload = n0 + xr < n_rows;
    const uint32_t xb0 = (uint32_t)(xload ? n0 + xr : 0) * (uint32_t)nbr;

    /* ldmatrix row address of the warp's 16 tile rows in buffer 0 */
    const uint32_t sa = cuda_saddr(&S.w[0][64 * wg + 16 * wq + (lane & 7) + 8 * ((lane >> 3) & 1)][4 * (lane >> 4)]);
    const uint32_t sx = cuda_saddr(&S.x[0][0][0][0]);

    float acc[8][4];
    int d[32];
#pragma unroll
    for (int i = 0; i < 32; i++) {
        acc[i >> 2][i & 3] = 0.0f;
        d[i] = 0;
    }

    /* queue stage s into buffer s % ST (an empty group past the end, so
     * the ring's group count stays uniform) */
#define MMQG_ISSUE(s)                                                                              \
    do {                                                                                           \
        if ((s) < nbr) {                                                                           \
            const int bf = (int)((s) % ST);                                                        \
            if (wload)                                                                             \
                cuda_copy16<W::BW / 4, 2>(S.w[bf][lr], wbase + woff + (size_t)(s) * (W::BW * 4), lp); \
            if (xload) {                                                                           \
                const uint32_t xb = xb0 + (uint32_t)(s);                                           \
                _Pragma("unroll") for (int c = 0; c < XC; c++)                                     \
                    __pipeline_memcpy_async(S.x[bf][XC * xp + c][xr], X.qs + (size_t)xb * QK_K + 16 * (XC * xp + c), 16); \
                if (xp == 1)                                                                       \
                    __pipeline_memcpy_async(S.xhl[bf][xr], X.hl + (size_t)xb * CUDA_Q8K_HL, CUDA_Q8K_HL); \
                else if (xp == 0)                                                                  \
                    __pipeline_memcpy_async(&S.xd[bf][xr], X.d + xb, 4);                           \
            }                                                                                      \
        }                                                                                          \
        __pipeline_commit();                                                                       \
    } while (0)

#pragma unroll
    for (int p = 0; p < ST - 1; p++)
        MMQG_ISSUE((int64_t)p);
    for (int64_t s = 0; s < nbr; s++) {
        __pipeline_wait_prior(ST - 2);
        /* this thread's copies are in; order them before the async
         * proxy's reads (wgmma), then wait for everyone's */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        MMQG_ISSUE(s + ST - 1);
        const int bf = (int)(s % ST);
        const uint32_t *ra = S.w[bf][64 * wg + 16 * wq + g];
        mmqk_head hd[2];
        W::head(ra, 0, t4, hd[0]);
        W::head(ra + 8 * W::SW, 0, t4, hd[1]);
        /* the planes' scales, bytes of the packed words: [row][sub-blocks
         * 4h..4h+3] */
        uint32_t slo[2][2], shi[2][2];
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                slo[r][h] = hd[r].sc[h] & (0x01010101u * G::LO);
                shi[r][h] = (hd[r].sc[h] >> G::SH) & (0x01010101u * G::HI);
            }
        const uint32_t xs = sx + (uint32_t)bf * (uint32_t)sizeof(S.x[0]);
        const uint32_t wsa = sa + (uint32_t)bf * (uint32_t)sizeof(S.w[0]);
        /* the A words of sub-blocks 4h..4h+3 in plane pl (0: sh, 1: sl) */
        auto planes = [&](uint32_t a[4][4], int pl, int h) {
#pragma unroll
            for (int pp = 0; pp < 2; pp++) {
                const int p = 2 * h + pp;
                uint32_t wf[4];
                int lo[4], hi[4];
                mmqk_afrag<W::LDSM>(wf, wsa, ra, W::SW, W::aoff(0, p), t4);
                W::frag2(wf, p, hd[0], hd[1], lo, hi);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    /* word i is of row g (i even) or g + 8 */
                    const uint32_t *sw = pl ? slo[i & 1] : shi[i & 1];
                    a[2 * pp][i] = (uint32_t)lo[i] * (uint32_t)mmqk_ux8(sw[h], (2 * p) & 3);
                    a[2 * pp + 1][i] = (uint32_t)hi[i] * (uint32_t)mmqk_ux8(sw[h], (2 * p + 1) & 3);
                }
            }
        };
        auto issue = [&](const uint32_t a[4][4], int pl, int h) {
            mmqg_pin(d);
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int jj = 0; jj < 4; jj++)
                mmqg_mma(d, a[jj], mmqg_desc(xs + 2 * (4 * h + jj) * (MMQG_BN * 16), MMQG_BN * 16, 128),
                         pl | h | jj);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        };
        /* plane 0: the sh planes; then D <<= SH; plane 1: the sl planes */
#pragma unroll
        for (int pl = 0; pl < 2; pl++) {
            if (pl) {
#pragma unroll
                for (int i = 0; i < 32; i++)
                    d[i] = (int)((uint32_t)d[i] << G::SH);
            }
            if constexpr (OV) {
                uint32_t a0[4][4], a1[4][4];
                planes(a0, pl, 0);
                issue(a0, pl, 0);
                planes(a1, pl, 1); /* while the first four run */
                issue(a1, pl, 1);
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
                mmqg_pin(d);
            } else {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint32_t a[4][4];
                    planes(a, pl, h);
                    issue(a, pl, h);
                    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
                    mmqg_pin(d);
                }
            }
        }
        /* the super-block's end: mmqk's min term and float chain */
        int mh[2], ml[2];
        mmqk_min_words(hd, t4, mh, ml);
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            const int bhl = *(const int *)&S.xhl[bf][8 * nt + g][4 * t4];
            int ch[4], cl[4];
            cuda_mma_k16(ch, mh[0], mh[1], bhl);
            cuda_mma_k16(cl, ml[0], ml[1], bhl);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const mmqk_head &H = hd[i >> 1];
                const float x = S.xd[bf][8 * nt + 2 * t4 + (i & 1)];
                const float p1 = __fmul_rn(H.d, x);
                float a2 = __fmaf_rn(p1, (float)d[4 * nt + i], acc[nt][i]);
                const float p2 = -__fmul_rn(H.dmin, x);
                acc[nt][i] = __fmaf_rn(p2, (float)(ch[i] * 128 + cl[i]), a2);
            }
        }
    }
#undef MMQG_ISSUE
    /* the store: mmq_tile_store's, for one 16-row tile a warp */
    const int32_t mt0 = m0 + 64 * wg;
    if (E.glu) {
        const int32_t j = mmq_glu_out(mt0, wq, g);
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int32_t r = n0 + 8 * nt + 2 * t4 + i;
                if (j < E.glu && r < n_rows)
                    y[(int64_t)r * E.glu + j] = __fmul_rn(cuda_silu(acc[nt][i], j, E.glu), acc[nt][i + 2]);
            }
        return;
    }
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int32_t j = mt0 + 16 * wq + g + 8 * (i >> 1);
            const int32_t r = n0 + 8 * nt + 2 * t4 + (i & 1);
            if (j < n_w && r < n_rows)
                cuda_epi_store(y, r, j, n_w, acc[nt][i], E);
        }
#else
    (void)w, (void)row_bytes, (void)n_w, (void)X, (void)nbr, (void)y, (void)n_rows, (void)E;
#endif
}

/* Launch mmqg_kernel<T, WG, ST, OV>: 0, or -1 where the device cannot hold
 * its shared memory */
template <int T, int WG, int ST, bool OV>
static int mmqg_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                       int32_t n_rows)
{
#if defined(INFERD_MMQG) && INFERD_MMQG
    typedef mmqg_smem<T, WG, ST> SM;
    typedef mmqg_t<T, WG, ST> G;
    if (mmq_occupancy_once<mmqg_kernel<T, WG, ST, OV>>(sizeof(SM), G::THREADS) == 0)
        return -1;
    const int64_t nbr = w->ne0 / QK_K;
    const dim3 grid(cuda_blocks(w->ne1, G::BM), cuda_blocks(n_rows, MMQG_BN));
    cuda_launch(c, mmqg_kernel<T, WG, ST, OV>, grid, G::THREADS, sizeof(SM), (const uint8_t *)w->data,
                w->row_bytes, (int32_t)w->ne1, cuda_q8k_planes(xq, (int64_t)n_rows * nbr), nbr, y, n_rows,
                c->epi);
    return 0;
#else
    (void)c, (void)w, (void)xq, (void)y, (void)n_rows;
    return -1;
#endif
}


/* ---- the warp-specialized form (INFERD_MMQG_CFG=4) -------------------
 * One pair of warpgroups a block, 64 weight rows x 128 activation rows:
 * warpgroup 0 builds the planes and runs the wgmma of stage s at N = 128
 * (m64n128k32: twice the work of an m64n64 for the same A fragment) and
 * parks its D (64 int32 a thread) in shared memory; warpgroup 1 runs the
 * min term and the float chain of stage s - 1 from the park, so neither
 * waits for the other inside a stage. One block barrier a stage (the
 * non-aligned form: the two roles reach it from their own loops) orders
 * the park (written before barrier s + 1, read after it) and the ring of
 * three stages (the wgmma's, the chain's, the one in flight). */
#define MMQG_WS_ST 3
#define MMQG_WS_BN 128
template <int T> struct mmqg_ws_smem {
    typedef mmqk_w<T, 1, false> W;
    uint32_t w[MMQG_WS_ST][64][W::SW];
    int8_t x[MMQG_WS_ST][MMQG_CH][MMQG_WS_BN][16];
    int8_t xhl[MMQG_WS_ST][MMQG_WS_BN][CUDA_Q8K_HL];
    float xd[MMQG_WS_ST][MMQG_WS_BN];
    int4 park[2][4][16][32]; /* [stage & 1][warp][d / 4][lane] */
};

#if MMQG_DEVICE
/* D(64 x 128 s32) (+)= A(64 x 32 u8, registers) x B(32 x 128 s8) */
#define MMQG_D64                                                                                   \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "              \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "               \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define MMQG_DOPS(c)                                                                               \
    c(d[0]), c(d[1]), c(d[2]), c(d[3]), c(d[4]), c(d[5]), c(d[6]), c(d[7]), c(d[8]), c(d[9]),      \
        c(d[10]), c(d[11]), c(d[12]), c(d[13]), c(d[14]), c(d[15]), c(d[16]), c(d[17]), c(d[18]),  \
        c(d[19]), c(d[20]), c(d[21]), c(d[22]), c(d[23]), c(d[24]), c(d[25]), c(d[26]), c(d[27]),  \
        c(d[28]), c(d[29]), c(d[30]), c(d[31]), c(d[32]), c(d[33]), c(d[34]), c(d[35]), c(d[36]),  \
        c(d[37]), c(d[38]), c(d[39]), c(d[40]), c(d[41]), c(d[42]), c(d[43]), c(d[44]), c(d[45]),  \
        c(d[46]), c(d[47]), c(d[48]), c(d[49]), c(d[50]), c(d[51]), c(d[52]), c(d[53]), c(d[54]),  \
        c(d[55]), c(d[56]), c(d[57]), c(d[58]), c(d[59]), c(d[60]), c(d[61]), c(d[62]), c(d[63])
#define MMQG_RW(x) "+r"(x)
#define MMQG_WO(x) "=r"(x)
static __device__ __forceinline__ void mmqg_mma128(int d[64], const uint32_t a[4], uint64_t desc)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 " MMQG_D64
                 ", {%64, %65, %66, %67}, %68, 1;\n"
                 : MMQG_DOPS(MMQG_RW)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
static __device__ __forceinline__ void mmqg_mma128_0(int d[64], const uint32_t a[4], uint64_t desc)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 " MMQG_D64
                 ", {%64, %65, %66, %67}, %68, 0;\n"
                 : MMQG_DOPS(MMQG_WO)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
}
#endif

template <int T>
static __global__ void __launch_bounds__(256, 1)
mmqg_ws_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X, int64_t nbr,
               float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
#if MMQG_DEVICE
    cuda_pdl_enter();
    typedef mmqg_t<T, 1, MMQG_WS_ST> G;
    typedef typename G::W W;
    typedef mmqg_ws_smem<T> SM;
    enum { ST = MMQG_WS_ST, BN = MMQG_WS_BN };
    extern __shared__ __align__(128) uint8_t mmqg_smem_raw[];
    SM &S = *(SM *)mmqg_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int g = lane >> 2, t4 = lane & 3;
    const int chain = warp >> 2, wq = warp & 3; /* role, warp of the group */
    const int32_t m0 = blockIdx.x * 64, n0 = blockIdx.y * BN;

    /* loader: 4 threads a weight row, 2 an activation row (8 chunks each;
     * part 0 its scale d, part 1 its sums) */
    const int lr = tid >> 2, lp = tid & 3;
    const int32_t wrl = mmq_wrow(m0, lr, n_w, E.glu);
    const int32_t wr0 = E.glu ? m0 / 2 : m0;
    const uint8_t *wbase = w + (size_t)wr0 * row_bytes;
    const uint32_t woff = (uint32_t)((size_t)((wrl >= 0 ? wrl : wr0) - wr0) * row_bytes);
    const bool wload = wrl >= 0;
    const int xr = tid >> 1, xp = tid & 1;
    const bool xload = n0 + xr < n_rows;
    const uint32_t xb0 = (uint32_t)(xload ? n0 + xr : 0) * (uint32_t)nbr;
    auto issue_stage = [&](int64_t s) {
        if (s < nbr) {
            const int bf = (int)(s % ST);
            if (wload)
                cuda_copy16<W::BW / 4, 4>(S.w[bf][lr], wbase + woff + (size_t)s * (W::BW * 4), lp);
            if (xload) {
                const uint32_t xb = xb0 + (uint32_t)s;
#pragma unroll
                for (int c = 0; c < 8; c++)
                    __pipeline_memcpy_async(S.x[bf][8 * xp + c][xr], X.qs + (size_t)xb * QK_K + 16 * (8 * xp + c), 16);
                if (xp)
                    __pipeline_memcpy_async(S.xhl[bf][xr], X.hl + (size_t)xb * CUDA_Q8K_HL, CUDA_Q8K_HL);
                else
                    __pipeline_memcpy_async(&S.xd[bf][xr], X.d + xb, 4);
            }
        }
        __pipeline_commit();
    };
    /* step s: stage s has landed everywhere and stage s - 2's readers are
     * done; queue stage s + 1 */
    auto step = [&](int64_t s) {
        __pipeline_wait_prior(0);
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("barrier.sync 0;\n" ::: "memory");
        issue_stage(s + 1);
    };
    issue_stage(0);
    const int rt = 16 * wq; /* the warp's first tile row */

    if (!chain) {
        const uint32_t sa = cuda_saddr(&S.w[0][rt + (lane & 7) + 8 * ((lane >> 3) & 1)][4 * (lane >> 4)]);
        const uint32_t sx = cuda_saddr(&S.x[0][0][0][0]);
        for (int64_t s = 0; s <= nbr; s++) {
            step(s);
            if (s == nbr)
                break;
            const int bf = (int)(s % ST);
            const uint32_t *ra = S.w[bf][rt + g];
            mmqk_head hd[2];
            W::head(ra, 0, t4, hd[0]);
            W::head(ra + 8 * W::SW, 0, t4, hd[1]);
            uint32_t slo[2][2], shi[2][2];
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    slo[r][h] = hd[r].sc[h] & (0x01010101u * G::LO);
                    shi[r][h] = (hd[r].sc[h] >> G::SH) & (0x01010101u * G::HI);
                }
            const uint32_t xs = sx + (uint32_t)bf * (uint32_t)sizeof(S.x[0]);
            const uint32_t wsa = sa + (uint32_t)bf * (uint32_t)sizeof(S.w[0]);
            auto planes = [&](uint32_t a[4][4], int pl, int h) {
#pragma unroll
                for (int pp = 0; pp < 2; pp++) {
                    const int p = 2 * h + pp;
                    uint32_t wf[4];
                    int lo[4], hi[4];
                    mmqk_afrag<W::LDSM>(wf, wsa, ra, W::SW, W::aoff(0, p), t4);
                    W::frag2(wf, p, hd[0], hd[1], lo, hi);
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const uint32_t *sw = pl ? slo[i & 1] : shi[i & 1];
                        a[2 * pp][i] = (uint32_t)lo[i] * (uint32_t)mmqk_ux8(sw[h], (2 * p) & 3);
                        a[2 * pp + 1][i] = (uint32_t)hi[i] * (uint32_t)mmqk_ux8(sw[h], (2 * p + 1) & 3);
                    }
                }
            };
            int d[64];
            auto issue = [&](const uint32_t a[4][4], int pl, int h) {
                asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    const uint64_t ds = mmqg_desc(xs + 2 * (4 * h + jj) * (BN * 16), BN * 16, 128);
                    if ((pl | h | jj) == 0)
                        mmqg_mma128_0(d, a[jj], ds);
                    else
                        mmqg_mma128(d, a[jj], ds);
                }
                asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            };
#pragma unroll
            for (int pl = 0; pl < 2; pl++) {
                uint32_t a0[4][4], a1[4][4];
                planes(a0, pl, 0);
                if (pl) {
#pragma unroll
                    for (int i = 0; i < 64; i++)
                        d[i] = (int)((uint32_t)d[i] << G::SH);
                }
#pragma unroll
                for (int i = 0; i < 64; i++)
                    asm volatile("" : "+r"(d[i])::"memory");
                issue(a0, pl, 0);
                planes(a1, pl, 1); /* while the first four run */
                issue(a1, pl, 1);
                asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
                for (int i = 0; i < 64; i++)
                    asm volatile("" : "+r"(d[i])::"memory");
            }
            int4 *pk = S.park[s & 1][wq][0] + lane;
#pragma unroll
            for (int k = 0; k < 16; k++)
                pk[32 * k] = make_int4(d[4 * k], d[4 * k + 1], d[4 * k + 2], d[4 * k + 3]);
        }
        return;
    }
    float acc[16][4];
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[i >> 2][i & 3] = 0.0f;
    for (int64_t s = 0; s <= nbr; s++) {
        step(s);
        if (s == 0)
            continue;
        const int bf = (int)((s - 1) % ST);
        const uint32_t *ra = S.w[bf][rt + g];
        mmqk_head hd[2];
        W::head(ra, 0, t4, hd[0]);
        W::head(ra + 8 * W::SW, 0, t4, hd[1]);
        int mh[2], ml[2];
        mmqk_min_words(hd, t4, mh, ml);
        const int4 *pk = S.park[(s - 1) & 1][wq][0] + lane;
#pragma unroll
        for (int nt = 0; nt < 16; nt++) {
            const int4 dv = pk[32 * nt];
            const int dd[4] = {dv.x, dv.y, dv.z, dv.w};
            const int bhl = *(const int *)&S.xhl[bf][8 * nt + g][4 * t4];
            int ch[4], cl[4];
            cuda_mma_k16(ch, mh[0], mh[1], bhl);
            cuda_mma_k16(cl, ml[0], ml[1], bhl);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const mmqk_head &H = hd[i >> 1];
                const float x = S.xd[bf][8 * nt + 2 * t4 + (i & 1)];
                const float p1 = __fmul_rn(H.d, x);
                float a2 = __fmaf_rn(p1, (float)dd[i], acc[nt][i]);
                const float p2 = -__fmul_rn(H.dmin, x);
                acc[nt][i] = __fmaf_rn(p2, (float)(ch[i] * 128 + cl[i]), a2);
            }
        }
    }
    if (E.glu) {
        const int32_t j = mmq_glu_out(m0, wq, g);
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const int32_t r = n0 + 8 * nt + 2 * t4 + i;
                if (j < E.glu && r < n_rows)
                    y[(int64_t)r * E.glu + j] = __fmul_rn(cuda_silu(acc[nt][i], j, E.glu), acc[nt][i + 2]);
            }
        return;
    }
#pragma unroll
    for (int nt = 0; nt < 16; nt++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int32_t j = m0 + rt + g + 8 * (i >> 1);
            const int32_t r = n0 + 8 * nt + 2 * t4 + (i & 1);
            if (j < n_w && r < n_rows)
                cuda_epi_store(y, r, j, n_w, acc[nt][i], E);
        }
#else
    (void)w, (void)row_bytes, (void)n_w, (void)X, (void)nbr, (void)y, (void)n_rows, (void)E;
#endif
}

template <int T>
static int mmqg_ws_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                          int32_t n_rows)
{
#if defined(INFERD_MMQG) && INFERD_MMQG
    typedef mmqg_ws_smem<T> SM;
    if (mmq_occupancy_once<mmqg_ws_kernel<T>>(sizeof(SM), 256) == 0)
        return -1;
    const int64_t nbr = w->ne0 / QK_K;
    const dim3 grid(cuda_blocks(w->ne1, 64), cuda_blocks(n_rows, MMQG_WS_BN));
    cuda_launch(c, mmqg_ws_kernel<T>, grid, 256, sizeof(SM), (const uint8_t *)w->data, w->row_bytes,
                (int32_t)w->ne1, cuda_q8k_planes(xq, (int64_t)n_rows * nbr), nbr, y, n_rows, c->epi);
    return 0;
#else
    (void)c, (void)w, (void)xq, (void)y, (void)n_rows;
    return -1;
#endif
}

template <int T>
int cuda_mmqg(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows)
{
#if defined(INFERD_MMQG) && INFERD_MMQG
    if constexpr (T != QT_Q4_K && T != QT_Q5_K) {
        return INF_EUNSUPPORTED;
    } else {
        /* the sm_90a code runs on compute capability 9.0 only */
        if (c->sm != 90)
            return -1;
        if (w->ne0 % QK_K)
            return INF_EUNSUPPORTED;
        /* the loader's 32-bit offsets, as mmqk_launch checks them */
        if ((uint64_t)n_rows * (uint64_t)w->ne0 >= (1ull << 32) ||
            (uint64_t)(c->epi.glu + 128) * w->row_bytes >= (1ull << 32))
            return INF_EUNSUPPORTED;
        switch (c->mmqg_cfg) {
        case 1: return mmqg_launch<T, 1, 2, false>(c, w, xq, y, n_rows);
        case 2: return mmqg_launch<T, 2, 3, false>(c, w, xq, y, n_rows);
        case 3: return mmqg_launch<T, 2, 2, true>(c, w, xq, y, n_rows);
        case 4: return mmqg_ws_launch<T>(c, w, xq, y, n_rows);
        default:
            /* Q5_K's rows (176 bytes a block) hold two blocks an SM at two stages */
            return T == QT_Q4_K ? mmqg_launch<T, 2, 3, true>(c, w, xq, y, n_rows)
                                : mmqg_launch<T, 2, 2, true>(c, w, xq, y, n_rows);
        }
    }
#else
    (void)c, (void)w, (void)xq, (void)y, (void)n_rows;
    return -1; /* built without sm_90a */
#endif
}

template int cuda_mmqg<QT_Q4_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *, int32_t);
template int cuda_mmqg<QT_Q5_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *, int32_t);
template int cuda_mmqg<QT_Q6_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *, int32_t);
