/* cuda/mmvs — the single-row (decode) product of Q4_K/Q5_K weights as a
 * stream: each warp's weight bytes flow through its own cp.async ring in
 * shared memory, so the loads of the next stages are in flight while the
 * warp multiplies this one, and the integer work reads shared memory laid
 * out for it instead of global memory in the order DRAM prefers.
 *
 * Why (bench/RESULTS.md, 2026-12-02 and 2026-12-03): the warp-per-row
 * kernel (cuda/mmvq.cu) issues all of a pass's loads at its start and then
 * its ~500 instructions with no load of its own in flight: 41-43% of DRAM
 * on the 7B's rows, 0.6 instructions a scheduler-cycle, long-scoreboard
 * stalls on half the samples. Here the loads are cp.async copies (no
 * registers held: the ring is the prefetch the register version could not
 * afford), and the lanes' work per super-block is about half of mmvq's.
 *
 * Shape: a block of MMVS_WARPS warps; warp gw of the grid takes weight rows
 * gw, gw + W, ... (W the grid's warps), each row in stages of MMVS_SB
 * consecutive super-blocks, one contiguous run of the row copied to the
 * warp's ring (MMVS_DEPTH stages deep, carried across rows). The
 * activation row (its Q8_K values) is copied once per block into shared
 * memory, its 16-byte granules placed so that the lanes' reads are free of
 * bank conflicts (mmvs_xslot). In a stage, lane (s = lane / 4, q = lane %
 * 4) takes sub-block pair q of super-block s: 32 bytes of 4-bit values
 * (two 16-byte reads, conflict-free: a 144-byte block stride moves 4 banks)
 * against four 16-byte runs of activations. The four lanes' exact integer
 * sums meet by shuffles; the group heads its super-block (float scales, min
 * term), parks (p1, v1, p2, v2), and lane 0 runs the float chain over the
 * stage's super-blocks in k order: cuda/qtypes.cuh's chain, the one
 * cuda/mmvq.cu, mmqs and MMQ run, so a row gets the same bits here as in
 * every other kernel at every batch size.
 *
 * Before the PDL wait (cuda/common.cuh) a warp queues its first stages of
 * weights, which no earlier kernel writes; the activations are read after it.
 *
 * Measured (H200, bench/RESULTS.md 2026-12-03 call 1; bits equal to
 * mmvq's, memcheck and racecheck clean): slower than mmvq at one row on
 * every shape (q4_K 4096 x 14336 14.0 -> 15.7 us, 7B ffn-down 15.7 ->
 * 20.4), faster at four rows of short weight rows (7B ffn-up q4_K 33.4 ->
 * 27.5) and for Q6_K on them (30.3 -> 28.2 at one row), much slower at
 * four rows of long ones (ffn-down 36 -> 55: 117 KB a block, one block an
 * SM). ncu at one row (4096 x 14336 q4_K): 9.33 M warp instructions
 * against mmvq's 6.74 M (40.7 vs 29.4 a super-block), both issued at
 * ~0.5-0.6 a scheduler-cycle with DRAM at ~40%: the per-stage bookkeeping
 * (64-bit copy addresses per granule, the stage's run recomputed for the
 * consumer, the head and the chain as warp instructions on 8 and 1 lanes)
 * is the cost to cut, to under ~20 a super-block. So the dispatcher leaves
 * it off (c->mmvs_max = 0; INFERD_MMVS_MAX=1..4 for A/B).
 */
#include "engine/cuda/mma.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"
#include "engine/cuda/tiles.cuh"

#define MMVS_WARPS 8 /* warps (independent row streams) a block */
#define MMVS_SB 8    /* super-blocks a stage: one per four-lane group */
#define MMVS_DEPTH 4 /* stages in a warp's ring */

/* per type: BS bytes a super-block, SLOT bytes a ring slot (a stage's
 * MMVS_SB blocks; Q6_K's 2-byte aligned runs are copied from the 16-byte
 * granule below their start to the one past their end, up to 30 bytes
 * more), QS the offset of the 4-bit values (Q4_K/Q5_K) */
template <int T> struct mmvs_t {
    enum {
        BS = T == QT_Q4_K ? sizeof(struct block_q4_K) : T == QT_Q5_K ? sizeof(struct block_q5_K)
                                                                    : sizeof(struct block_q6_K),
        QS = T == QT_Q5_K ? 48 : 16,
        SLOT = (MMVS_SB * BS + 15) / 16 * 16 + (BS % 16 ? 16 : 0),
    };
};

/* The shared-memory slot (in 16-byte granules, within its super-block's
 * 256 bytes) of activation granule g of super-block sb, so that the eight
 * lanes of a quarter warp (four-lane groups of two neighbouring
 * super-blocks, lane q of a group reading its k-th granule) land in eight
 * distinct bank groups. Q4_K/Q5_K: lane q reads granule 4q + k; granules
 * 8 + k and 12 + k move by 2 and odd super-blocks by 1: {k, 4+k, k^2,
 * 4+k^2} and the same ^ 1. Q6_K: lane q = 2h + t reads 8h + 2t + c (c = 0,
 * 1, 4, 5); the upper half moves by 1 and odd super-blocks by 4:
 * {c, 2+c} ^ {0, 1} ^ {0, 4} gives all eight. */
template <int T> static __device__ __forceinline__ int mmvs_xslot(int64_t sb, int g)
{
    if (T == QT_Q6_K)
        return g ^ ((g >> 3) & 1) ^ ((int)(sb & 1) << 2);
    return g ^ (((g >> 3) & 1) << 1) ^ (int)(sb & 1);
}

/* the activation granule lane q of a group reads k-th (k = 0..3) */
template <int T> static __device__ __forceinline__ int mmvs_xgran(int q, int k)
{
    if (T == QT_Q6_K)
        return 8 * (q >> 1) + 2 * (q & 1) + (k & 1) + 4 * (k >> 1);
    return 4 * q + k;
}

/* A lane's weights of one super-block, unpacked: v[4k..4k+3] multiply
 * activation granule k (mmvs_xgran), with scale sc[k]; Q4_K's high
 * nibbles stay in place (16 x value, unsigned: u16 = 1), and their exact
 * dot is divided by 16. */
struct mmvs_wv {
    uint32_t v[16];
    int sc[4];
};

/* Q4_K/Q5_K lane q: sub-block pair q, its 32 bytes of qs w0 (elements
 * 0-15), w1 (16-31): low nibbles sub-block 2q (granules 4q, 4q + 1),
 * high 2q + 1 (4q + 2, 4q + 3); Q5_K ors in the fifth bits (qh bits 2q,
 * 2q + 1 of h0, h1). hd: the block's d, dmin, scales. */
template <int T>
static __device__ __forceinline__ void mmvs_unpack_k45(const uint8_t *b, int q, uint4 hd, mmvs_wv &u)
{
    const uint32_t m = 0x0f0f0f0fu;
    const uint4 w0 = *(const uint4 *)(b + mmvs_t<T>::QS + 32 * q), w1 = *(const uint4 *)(b + mmvs_t<T>::QS + 32 * q + 16);
    const uint32_t wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    if (T == QT_Q4_K) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            u.v[i] = wv[i] & m;
            u.v[8 + i] = wv[i] & ~m;
        }
    } else {
        const uint4 h0 = *(const uint4 *)(b + 16), h1 = *(const uint4 *)(b + 32);
        const uint32_t hv[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
        const uint32_t o = 0x01010101u;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            u.v[i] = (wv[i] & m) | (((hv[i] >> (2 * q)) & o) << 4);
            u.v[8 + i] = ((wv[i] >> 4) & m) | (((hv[i] >> (2 * q + 1)) & o) << 4);
        }
    }
    int sc0, sc1; /* the 6-bit scales of sub-blocks 2q, 2q + 1 */
    cuda_k45_pair_scales(hd, q, &sc0, &sc1);
    u.sc[0] = u.sc[1] = sc0;
    u.sc[2] = u.sc[3] = sc1;
}

/* Q6_K lane q = 2h + t of a group: quarters t and t + 2 of half h (the
 * 32-element sub-blocks 4h + t, 4h + t + 2; engine/quant.c's
 * dequant_q6_K order): ql bytes 64h + 32t .., high bits qh[32h ..] at 2t
 * and 2t + 4, the four 16-element scales 8h + 2t + {0, 1, 4, 5}, against
 * activation granules 8h + 2t + {0, 1, 4, 5}. b: the block in shared
 * memory, 2-byte aligned. q - 32 per byte as (q + 0x60) ^ 0x80: q < 64,
 * so no byte carries. */
static __device__ __forceinline__ void mmvs_unpack_q6(const uint8_t *b, int q, mmvs_wv &u)
{
    const int h = q >> 1, t = q & 1;
    uint32_t ql[8], qh[8];
    cuda_ld_a2<8>(b + 64 * h + 32 * t, ql);
    cuda_ld_a2<8>(b + 128 + 32 * h, qh);
    const uint16_t s01 = *(const uint16_t *)(b + 192 + 8 * h + 2 * t);
    const uint16_t s45 = *(const uint16_t *)(b + 196 + 8 * h + 2 * t);
    u.sc[0] = (int8_t)(s01 & 0xff);
    u.sc[1] = (int8_t)(s01 >> 8);
    u.sc[2] = (int8_t)(s45 & 0xff);
    u.sc[3] = (int8_t)(s45 >> 8);
    const uint32_t m = 0x0f0f0f0fu, m2 = 0x30303030u, k60 = 0x60606060u, k80 = 0x80808080u;
    const int lsh = 4 - 2 * t, hsh = 2 * t;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        u.v[i] = (((ql[i] & m) | ((qh[i] << lsh) & m2)) + k60) ^ k80;
        u.v[8 + i] = ((((ql[i] >> 4) & m) | ((qh[i] >> hsh) & m2)) + k60) ^ k80;
    }
}

/* the lane's exact integer term against one activation row's granules */
template <int T> static __device__ __forceinline__ int mmvs_dot(const mmvs_wv &u, const uint4 a[4])
{
    int d[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t *x = (const uint32_t *)&a[k];
        int s = 0;
#pragma unroll
        for (int i = 0; i < 4; i++)
            s = T == QT_Q4_K && k >= 2 ? cuda_dp4a_us(u.v[4 * k + i], (int)x[i], s) : __dp4a((int)u.v[4 * k + i], (int)x[i], s);
        d[k] = T == QT_Q4_K && k >= 2 ? s >> 4 : s; /* 16 x the sum: exact */
    }
    return u.sc[0] * d[0] + u.sc[1] * d[1] + u.sc[2] * d[2] + u.sc[3] * d[3];
}

/* bytes of shared memory a block takes for nc activation rows of nbr
 * super-blocks: the activation values, the rings, the parked terms */
template <int T> static inline size_t mmvs_smem(int nc, int64_t nbr)
{
    return (size_t)nc * nbr * QK_K + (size_t)MMVS_WARPS * MMVS_DEPTH * mmvs_t<T>::SLOT +
           (size_t)MMVS_WARPS * MMVS_SB * nc * sizeof(float4);
}

/* The bytes of stage st of weight row `row`: from w (byte offset) .. +n */
template <int T>
static __device__ __forceinline__ void mmvs_run(size_t row_bytes, int32_t row, int st, int64_t nbr, size_t *off,
                                                int *n)
{
    const int64_t sb0 = (int64_t)st * MMVS_SB;
    *off = (size_t)row * row_bytes + (size_t)sb0 * mmvs_t<T>::BS;
    *n = (int)((nbr - sb0 < MMVS_SB ? nbr - sb0 : MMVS_SB) * mmvs_t<T>::BS);
}

/* Queue the copy of stage st of weight row `row` into ring slot dst: the
 * 16-byte granules holding its bytes (the caller commits; nothing when the
 * row is past the weight; bytes past the weight's end are not read) */
template <int T>
static __device__ __forceinline__ void mmvs_issue(uint8_t *dst, const uint8_t *__restrict__ w, size_t row_bytes,
                                                  int32_t row, int32_t n_w, int st, int64_t nbr, int lane)
{
    enum { N = mmvs_t<T>::SLOT / 16 };
    if (row >= n_w)
        return;
    size_t off;
    int n;
    mmvs_run<T>(row_bytes, row, st, nbr, &off, &n);
    const uintptr_t a = (uintptr_t)(w + off), a0 = a & ~(uintptr_t)15;
    const uintptr_t end = (uintptr_t)(w + (size_t)n_w * row_bytes);
    const int ng = (int)((a + n + 15 - a0) / 16);
#pragma unroll
    for (int k = 0; k < (N + CUDA_WARP - 1) / CUDA_WARP; k++) {
        const int i = lane + CUDA_WARP * k;
        if (i < ng) {
            const uintptr_t src = a0 + 16 * (uintptr_t)i;
            if (mmvs_t<T>::BS % 16 == 0 || src + 16 <= end) {
                __pipeline_memcpy_async(dst + 16 * i, (const void *)src, 16);
            } else {
                /* the weight's last granule ends inside the window: its
                 * bytes by plain 2-byte loads (a cp.async of fewer source
                 * bytes still reads 16 under memcheck: 2026-12-03 call 2);
                 * the warp's barrier before the stage is read orders them */
                for (int k2 = 0; k2 < (int)(end - src); k2 += 2)
                    *(uint16_t *)(dst + 16 * i + k2) = *(const uint16_t *)(src + k2);
            }
        }
    }
}

/* NC: activation rows the weights are read for at once (1, 2 or 4; the
 * call's n_rows <= NC). Lane q of a super-block's group heads activation
 * row q's terms; lane r runs row r's chain. */
template <int T, int NC>
static __global__ void __launch_bounds__(MMVS_WARPS *CUDA_WARP)
mmvs_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X, int64_t nbr,
            float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    enum { BS = mmvs_t<T>::BS, SLOT = mmvs_t<T>::SLOT };
    static_assert(NC == 1 || NC == 2 || NC == 4, "a super-block's four lanes head at most four rows");
    extern __shared__ __align__(16) uint8_t mmvs_raw[];
    uint8_t *xs = mmvs_raw;                             /* [NC][nbr][256] activation values */
    uint8_t *ring = mmvs_raw + (size_t)NC * nbr * QK_K; /* [warp][DEPTH][SLOT] */
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    float4 *park = (float4 *)(ring + (size_t)MMVS_WARPS * MMVS_DEPTH * SLOT) + warp * MMVS_SB * NC; /* [SB][NC] */
    ring += (size_t)warp * MMVS_DEPTH * SLOT;
    const int32_t W = (int32_t)gridDim.x * MMVS_WARPS;
    const int32_t gw = (int32_t)blockIdx.x * MMVS_WARPS + warp;
    const int nst = (int)((nbr + MMVS_SB - 1) / MMVS_SB); /* stages a row */
    const int nr = n_rows < NC ? n_rows : NC;

    /* the stream of (row, stage) items this warp takes, item i: row gw +
     * W * (i / nst), stage i % nst; (prow, pst), item ip: the next to queue */
    int32_t prow = gw;
    int pst = 0, ip = 0;
#pragma unroll
    for (int k = 0; k < MMVS_DEPTH - 1; k++, ip++) {
        mmvs_issue<T>(ring + (ip % MMVS_DEPTH) * SLOT, w, row_bytes, prow, n_w, pst, nbr, lane);
        __pipeline_commit();
        if (++pst == nst) {
            pst = 0;
            prow += W;
        }
    }

    cuda_pdl_wait(); /* the activations are the kernel before's output */
    {
        /* block r * nbr + sb of the planes is row r's super-block sb; rows
         * past the call's are not read (their terms are never parked) */
        const int64_t ng = (int64_t)nr * nbr * (QK_K / 16);
        for (int64_t i = threadIdx.x; i < ng; i += MMVS_WARPS * CUDA_WARP) {
            const int64_t rb = i / (QK_K / 16), sb = rb % nbr;
            const int g = (int)(i % (QK_K / 16));
            const uint4 v = *(const uint4 *)(X.qs + 16 * i);
            *(uint4 *)(xs + rb * QK_K + 16 * mmvs_xslot<T>(sb, g)) = v;
        }
    }
    __syncthreads();

    const int s = lane >> 2, q = lane & 3;
    /* this lane's four activation granules, as offsets in a super-block
     * (stage starts are even super-blocks: sb & 1 == s & 1) */
    int xo[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        xo[k] = 16 * mmvs_xslot<T>(s, mmvs_xgran<T>(q, k));
    float acc = 0.0f; /* lane r < nr: activation row r's chain of the current weight row */
    int st = 0;
    for (int32_t row = gw; row < n_w; ip++) {
        __pipeline_wait_prior(MMVS_DEPTH - 2);
        __syncwarp(); /* every lane's copies of this stage landed; every lane is done with the slot queued next */
        mmvs_issue<T>(ring + (ip % MMVS_DEPTH) * SLOT, w, row_bytes, prow, n_w, pst, nbr, lane);
        __pipeline_commit();
        if (++pst == nst) {
            pst = 0;
            prow += W;
        }

        size_t off;
        int nbytes;
        mmvs_run<T>(row_bytes, row, st, nbr, &off, &nbytes);
        /* the stage's first block: its offset in the slot's first granule */
        const uint8_t *stage = ring + ((ip - (MMVS_DEPTH - 1)) % MMVS_DEPTH) * SLOT + ((uintptr_t)(w + off) & 15);
        const int64_t sb = (int64_t)st * MMVS_SB + s;
        const int cnt = nbytes / BS;
        /* a group past the stage's last block (a row's last stage) sums
         * zeros: the shuffles below need every lane of the warp */
        const bool valid = s < cnt;
        const uint8_t *b = stage + s * BS;
        int v1[NC];
        uint4 hd = make_uint4(0, 0, 0, 0);
        {
            mmvs_wv u;
            if (valid) {
                if constexpr (T == QT_Q6_K) {
                    mmvs_unpack_q6(b, q, u);
                } else {
                    hd = *(const uint4 *)b; /* d, dmin, scales[12] */
                    mmvs_unpack_k45<T>(b, q, hd, u);
                }
            }
#pragma unroll
            for (int r = 0; r < NC; r++) {
                v1[r] = 0;
                if (valid && r < nr) {
                    uint4 a[4];
                    const uint8_t *xr = xs + ((int64_t)r * nbr + sb) * QK_K;
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        a[k] = *(const uint4 *)(xr + xo[k]);
                    v1[r] = mmvs_dot<T>(u, a);
                }
                v1[r] += __shfl_xor_sync(0xffffffffu, v1[r], 1);
                v1[r] += __shfl_xor_sync(0xffffffffu, v1[r], 2);
            }
        }
        if (valid && q < nr) {
            /* the head of activation row q: float scales and the whole
             * min term (cuda_k45_head) */
            int vq = v1[0];
#pragma unroll
            for (int r = 1; r < NC; r++)
                vq = q == r ? v1[r] : vq;
            const int64_t xb = (int64_t)q * nbr + sb;
            const float xd = X.d[xb];
            if constexpr (T == QT_Q6_K) {
                const float p1 = __fmul_rn(cuda_h2f(*(const quant_f16 *)(b + 208)), xd);
                park[s * NC + q] = make_float4(p1, (float)vq, 0.0f, 0.0f);
            } else {
                float p1, p2;
                int v2;
                cuda_k45_head(hd, xd, *(const uint4 *)(X.hl + xb * CUDA_Q8K_HL), &p1, &p2, &v2);
                park[s * NC + q] = make_float4(p1, (float)vq, p2, (float)v2);
            }
        }
        __syncwarp();
        if (lane < nr) {
#pragma unroll
            for (int k = 0; k < MMVS_SB; k++) /* unrolled: the parked terms load at once */
                if (k < cnt) {
                    const float4 t = park[k * NC + lane];
                    acc = __fmaf_rn(t.x, t.y, acc);
                    if (T != QT_Q6_K)
                        acc = __fmaf_rn(t.z, t.w, acc);
                }
        }
        if (++st == nst) {
            if (lane < nr)
                cuda_epi_store(y, lane, row, n_w, acc, E);
            acc = 0.0f;
            st = 0;
            row += W;
        }
    }
    __pipeline_wait_prior(0); /* no copy outlives the block */
}

/* blocks an SM holds at `smem` bytes (0: none), asked once per size. The
 * kernel's dynamic shared-memory limit only ever rises: a launch with the
 * largest size asked so far must stay valid after a smaller one is asked
 * (setting the limit to each size in turn made the larger launches fail
 * with "invalid argument": 2026-12-03 call 1, the 7B's mixed row lengths). */
template <int T, int NC> static int mmvs_occupancy(size_t smem)
{
    static size_t sizes[8], limit;
    static int occs[8], n;
    for (int i = 0; i < n; i++)
        if (sizes[i] == smem)
            return occs[i];
    const void *k = (const void *)mmvs_kernel<T, NC>;
    int occ = 0;
    if (smem > limit) {
        if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        limit = smem;
    }
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k, MMVS_WARPS * CUDA_WARP, smem) != cudaSuccess) {
        cudaGetLastError();
        occ = 0;
    }
    if (n < 8) {
        sizes[n] = smem;
        occs[n++] = occ;
    }
    return occ;
}

template <int T, int NC>
static int mmvs_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                       int32_t n_rows, int max_blocks)
{
    const int64_t nbr = w->ne0 / QK_K;
    const size_t smem = mmvs_smem<T>(NC, nbr);
    const int occ = mmvs_occupancy<T, NC>(smem);
    if (occ == 0)
        return -1;
    /* whole rows per warp, no more blocks than the SMs hold at once
     * (max_blocks > 0: at most that many, so that each warp streams
     * several rows: tests and A/B) */
    int64_t blocks = ((int64_t)w->ne1 + MMVS_WARPS - 1) / MMVS_WARPS;
    if (blocks > (int64_t)occ * c->n_sm)
        blocks = (int64_t)occ * c->n_sm;
    if (max_blocks > 0 && blocks > max_blocks)
        blocks = max_blocks;
    cuda_launch(c, mmvs_kernel<T, NC>, dim3((unsigned)blocks), MMVS_WARPS * CUDA_WARP, smem,
                (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1,
                cuda_q8k_planes(xq, (int64_t)n_rows * nbr), nbr, y, n_rows, c->epi);
    return 0;
}

/* nc: activation rows a weight read serves (1, 2, 4; 0 the smallest that
 * holds n_rows). 0; INF_EUNSUPPORTED (more than nc or 4 rows, a row
 * length that is no whole number of super-blocks, Q4_K/Q5_K rows not
 * 16-byte aligned); -1 when the device cannot hold the block (the caller
 * falls back to cuda_mmvq, same bits) */
template <int T>
int cuda_mmvs(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows,
              int nc, int max_blocks)
{
    if (nc <= 0)
        nc = n_rows <= 1 ? 1 : n_rows <= 2 ? 2 : 4;
    /* Q4_K/Q5_K blocks are read by 16-byte loads from the ring: their
     * rows must start 16-byte aligned (every registered weight does) */
    if (n_rows < 1 || n_rows > nc || nc > 4 || w->ne0 % QK_K ||
        (T != QT_Q6_K && ((uintptr_t)w->data & 15)))
        return INF_EUNSUPPORTED;
    switch (nc) {
    case 1: return mmvs_launch<T, 1>(c, w, xq, y, n_rows, max_blocks);
    case 2: return mmvs_launch<T, 2>(c, w, xq, y, n_rows, max_blocks);
    default: return mmvs_launch<T, 4>(c, w, xq, y, n_rows, max_blocks);
    }
}

template int cuda_mmvs<QT_Q4_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *, int32_t,
                                int, int);
template int cuda_mmvs<QT_Q5_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *, int32_t,
                                int, int);
template int cuda_mmvs<QT_Q6_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *, int32_t,
                                int, int);
