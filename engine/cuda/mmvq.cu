/* cuda/mmvq — the small-batch (decode) product of K-quant weights, n <= 8
 * activation rows: a stream of the weight bytes, each read once.
 *
 * One warp per weight row (Q6_K's long rows: 4, see mmvq_kernel). A pass
 * of the warp covers U * 4 super-blocks (mmvq_u): 8 lanes per super-block,
 * lane c takes 16-byte chunk c of
 * its packed values (one aligned 128-bit load; Q6_K's 2-byte-aligned
 * blocks take five words and a funnel shift) and the two 16-element runs
 * of activations the chunk's low and high halves multiply (cuda_q8k
 * planes, 16-byte aligned), so consecutive lanes read consecutive bytes.
 * A lane's integer partial terms (scale * dot and min * activation sum of
 * its 32 elements) meet their super-block's other seven by an exact
 * shuffle sum; U lanes of the group then head the group's U super-blocks
 * at once and park (p1, v1, p2, v2) per activation row in shared memory,
 * and one warp of the block runs every row's float chain over the pass's
 * super-blocks in k order (cuda/qtypes.cuh), the chain the MMQ kernels
 * run: a row's bits are the same at every batch.
 *
 * Rows per warp 1: at n = 1 the activations (4.6 KB per 4096 elements) are
 * read from L1 once per weight row, a third of the L1 traffic of the
 * weights' own bytes; U super-blocks per group per pass (4 at nc <= 2, 8
 * at one activation row of a long Q4_K/Q5_K row) keep that many 16-byte
 * weight loads per lane in flight.
 * Tried and reverted (H200, bench/RESULTS.md, 17:48 and 17:52 calls): 2
 * lanes per super-block at nc = 1 (fewer instructions, 4.6 M vs 7.7 M,
 * but each warp instruction then touches 16 lines instead of 4: 18.4 ->
 * 19.2 µs), and prefetching the next pass's weights into registers (80-96
 * registers instead of 46-56, half the resident warps: 18.5 -> 28.2 µs);
 * (22:08-22:28 calls) the whole row prefetched to L2 before the PDL wait
 * (tg128 306 -> 299), and the chain's shared-memory loads issued four at
 * a time (ffn-down 19.5 -> 21.0 µs: other warps hide that latency).
 */
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"

#define MMVQ_WARPS 4 /* weight rows per 128-thread block */
/* super-blocks per 8-lane group per pass: more in flight where the
 * registers allow (v1 is U x NC ints); one activation row of a long Q4_K
 * or Q5_K row takes 8 (mmvq_u) */
#define MMVQ_UN(nc) ((nc) <= 2 ? 4 : 2)

static __device__ __forceinline__ int mmvq_dot4(uint4 q, uint4 x, int s)
{
    s = __dp4a((int)q.x, (int)x.x, s);
    s = __dp4a((int)q.y, (int)x.y, s);
    s = __dp4a((int)q.z, (int)x.z, s);
    return __dp4a((int)q.w, (int)x.w, s);
}

static __device__ __forceinline__ uint4 mmvq_and(uint4 v, uint32_t m)
{
    return make_uint4(v.x & m, v.y & m, v.z & m, v.w & m);
}

static __device__ __forceinline__ uint4 mmvq_shr(uint4 v, int s)
{
    return make_uint4(v.x >> s, v.y >> s, v.z >> s, v.w >> s);
}

/* Per type: chunk c (0..7) of super-block sb of a weight row. load()
 * issues the chunk's weight loads (raw words, nothing computed from them),
 * dot() adds its terms against the activation rows r < nr (block index of
 * row r's super-block: xb0 + r * nbr) to v1; hload()/head() give the
 * super-block's float scales and min term.
 * Tried and reverted (bench/RESULTS.md, 2026-12-03 18:15-): all of a
 * pass's loads issued before its first dp4a, indices clamped instead of
 * the per-super-block branch (the old SASS has each super-block's loads
 * behind its own BRA): +20% instructions, q4_K n = 1 14.0 -> 14.8 us,
 * Q6_K 7B ffn-down +36% (and ptxas sank the loads back beside their dots
 * anyway); then (call 3) a whole window's weight loads as volatile asm
 * (its SASS issues most of a window's weight loads before the first dot):
 * q4_K n = 1 13.65 -> 13.9, q5_K 15.2 -> 16.4, tg128 338 -> 332. The
 * serialized loads are not what binds this kernel. The load()/dot() split
 * stays anyway: merged back into one function per type (the form before
 * the hoisting, Q6_K's words through cuda_ld_a2) the kernels measured the
 * same at one activation row but 4-8% slower at two to four (review call,
 * 2026-12-03 19:53): ptxas schedules the two forms differently. */
template <int T> struct mmvq_chunk;

/* Q4_K/Q5_K: chunk c is bytes 16c.. of qs: pair p = c/2 of sub-blocks
 * (2p in the low nibbles, 2p+1 in the high), elements l0 = 16(c%2) ..+16
 * of each; Q5_K's fifth bits are bits 2p, 2p+1 of qh[l0..l0+16). */
template <int T, typename B, int QS> struct mmvq_chunk_k45 {
    struct raw {
        uint4 hd, qv, qh; /* qh: Q5_K only */
    };
    struct hraw {
        uint4 hd, hl;
        float xd;
    };
    static __device__ __forceinline__ raw load(const uint8_t *row, int sb, int c)
    {
        const uint8_t *b = row + (size_t)sb * sizeof(B);
        raw w;
        w.hd = *(const uint4 *)b; /* d, dmin, scales[12] */
        w.qv = *(const uint4 *)(b + QS + 16 * c);
        if (T == QT_Q5_K)
            w.qh = *(const uint4 *)(b + 16 + 16 * (c & 1));
        return w;
    }
    template <int NC>
    static __device__ __forceinline__ void dot(const raw &w, const uint8_t *, int, int c, const cuda_q8k &X,
                                               int64_t xb0, int64_t nbr, int nr, int v1[NC])
    {
        const int p = c >> 1, l0 = 16 * (c & 1);
        int sc0, sc1; /* the 6-bit scales of sub-blocks 2p, 2p+1 */
        cuda_k45_pair_scales(w.hd, p, &sc0, &sc1);
        uint4 lo = mmvq_and(w.qv, 0x0f0f0f0fu), hi = mmvq_and(mmvq_shr(w.qv, 4), 0x0f0f0f0fu);
        if (T == QT_Q5_K) {
            const uint4 qh = w.qh;
            lo.x |= ((qh.x >> (2 * p)) & 0x01010101u) << 4;
            lo.y |= ((qh.y >> (2 * p)) & 0x01010101u) << 4;
            lo.z |= ((qh.z >> (2 * p)) & 0x01010101u) << 4;
            lo.w |= ((qh.w >> (2 * p)) & 0x01010101u) << 4;
            hi.x |= ((qh.x >> (2 * p + 1)) & 0x01010101u) << 4;
            hi.y |= ((qh.y >> (2 * p + 1)) & 0x01010101u) << 4;
            hi.z |= ((qh.z >> (2 * p + 1)) & 0x01010101u) << 4;
            hi.w |= ((qh.w >> (2 * p + 1)) & 0x01010101u) << 4;
        }
        const int8_t *xs = X.qs + xb0 * QK_K + 64 * p + l0; /* the low run's first element */
#pragma unroll
        for (int r = 0; r < NC; r++) {
            if (r >= nr)
                break;
            const int8_t *xr = xs + r * nbr * QK_K;
            v1[r] += sc0 * mmvq_dot4(lo, *(const uint4 *)xr, 0) + sc1 * mmvq_dot4(hi, *(const uint4 *)(xr + 32), 0);
        }
    }
    static __device__ __forceinline__ hraw hload(const uint8_t *row, int sb, const cuda_q8k &X, int64_t xb)
    {
        hraw h;
        h.hd = *(const uint4 *)(row + (size_t)sb * sizeof(B));
        h.hl = *(const uint4 *)(X.hl + xb * CUDA_Q8K_HL);
        h.xd = X.d[xb];
        return h;
    }
    /* the super-block's float scales against activation block xb, and its
     * whole min term (cuda_k45_head) */
    static __device__ __forceinline__ void head(const hraw &h, float *p1, float *p2, int *v2)
    {
        cuda_k45_head(h.hd, h.xd, h.hl, p1, p2, v2);
    }
};
template <> struct mmvq_chunk<QT_Q4_K> : mmvq_chunk_k45<QT_Q4_K, struct block_q4_K, 16> {};
template <> struct mmvq_chunk<QT_Q5_K> : mmvq_chunk_k45<QT_Q5_K, struct block_q5_K, 48> {};

/* Q6_K: chunk c is bytes 16c.. of ql: half h = c/4, quarter pair tt =
 * (c%4)/2, l0 = 16(c%2); its low nibbles are elements 128h + 32tt + l0
 * ..+16 (scale 8h + 2tt + c%2, high bits 2tt of qh[32h + l0 ..]), its high
 * nibbles the same 32 elements on (scale + 4, high bits 2tt + 4). The
 * 2-byte aligned runs are loaded as five aligned words each (cuda_ld_a2's
 * loads; the funnel shift waits for dot()). */
template <> struct mmvq_chunk<QT_Q6_K> {
    struct raw {
        uint32_t ql[5], qh[5];
        int sc0, sc1;
    };
    struct hraw {
        quant_f16 d;
        float xd;
    };
    static __device__ __forceinline__ const struct block_q6_K *blk(const uint8_t *row, int sb)
    {
        return (const struct block_q6_K *)(row + (size_t)sb * sizeof(struct block_q6_K));
    }
    static __device__ __forceinline__ raw load(const uint8_t *row, int sb, int c)
    {
        const struct block_q6_K *b = blk(row, sb);
        const int h = c >> 2, tt = (c >> 1) & 1, l0 = 16 * (c & 1);
        /* ql + 16c and qh + 32h + l0 share the block's offset mod 4 */
        const uint32_t *wl = (const uint32_t *)((uintptr_t)(b->ql + 16 * c) & ~(uintptr_t)3);
        const uint32_t *wh = (const uint32_t *)((uintptr_t)(b->qh + 32 * h + l0) & ~(uintptr_t)3);
        raw w;
#pragma unroll
        for (int i = 0; i < 5; i++) {
            w.ql[i] = wl[i];
            w.qh[i] = wh[i];
        }
        const int si = 8 * h + 2 * tt + (c & 1);
        w.sc0 = b->scales[si];
        w.sc1 = b->scales[si + 4];
        return w;
    }
    template <int NC>
    static __device__ __forceinline__ void dot(const raw &w, const uint8_t *row, int sb, int c, const cuda_q8k &X,
                                               int64_t xb0, int64_t nbr, int nr, int v1[NC])
    {
        const int sh = (int)((uintptr_t)blk(row, sb) & 3) * 8;
        const int h = c >> 2, tt = (c >> 1) & 1, l0 = 16 * (c & 1);
        const uint4 ql = make_uint4(__funnelshift_r(w.ql[0], w.ql[1], sh), __funnelshift_r(w.ql[1], w.ql[2], sh),
                                    __funnelshift_r(w.ql[2], w.ql[3], sh), __funnelshift_r(w.ql[3], w.ql[4], sh));
        const uint4 qh = make_uint4(__funnelshift_r(w.qh[0], w.qh[1], sh), __funnelshift_r(w.qh[1], w.qh[2], sh),
                                    __funnelshift_r(w.qh[2], w.qh[3], sh), __funnelshift_r(w.qh[3], w.qh[4], sh));
        const uint4 hl = mmvq_and(mmvq_shr(qh, 2 * tt), 0x03030303u);
        const uint4 hh = mmvq_and(mmvq_shr(qh, 2 * tt + 4), 0x03030303u);
        uint4 lo, hi;
        lo.x = __vsubss4((ql.x & 0x0f0f0f0fu) | (hl.x << 4), 0x20202020);
        lo.y = __vsubss4((ql.y & 0x0f0f0f0fu) | (hl.y << 4), 0x20202020);
        lo.z = __vsubss4((ql.z & 0x0f0f0f0fu) | (hl.z << 4), 0x20202020);
        lo.w = __vsubss4((ql.w & 0x0f0f0f0fu) | (hl.w << 4), 0x20202020);
        hi.x = __vsubss4(((ql.x >> 4) & 0x0f0f0f0fu) | (hh.x << 4), 0x20202020);
        hi.y = __vsubss4(((ql.y >> 4) & 0x0f0f0f0fu) | (hh.y << 4), 0x20202020);
        hi.z = __vsubss4(((ql.z >> 4) & 0x0f0f0f0fu) | (hh.z << 4), 0x20202020);
        hi.w = __vsubss4(((ql.w >> 4) & 0x0f0f0f0fu) | (hh.w << 4), 0x20202020);
        const int e0 = 128 * h + 32 * tt + l0;
#pragma unroll
        for (int r = 0; r < NC; r++) {
            if (r >= nr)
                break;
            const int8_t *xs = X.qs + (xb0 + r * nbr) * QK_K + e0;
            v1[r] += w.sc0 * mmvq_dot4(lo, *(const uint4 *)xs, 0) + w.sc1 * mmvq_dot4(hi, *(const uint4 *)(xs + 64), 0);
        }
    }
    static __device__ __forceinline__ hraw hload(const uint8_t *row, int sb, const cuda_q8k &X, int64_t xb)
    {
        hraw h;
        h.d = blk(row, sb)->d;
        h.xd = X.d[xb];
        return h;
    }
    static __device__ __forceinline__ void head(const hraw &h, float *p1, float *p2, int *v2)
    {
        *p1 = __fmul_rn(cuda_h2f(h.d), h.xd);
        *p2 = 0.0f;
        *v2 = 0;
    }
};

/* Sum v[0..NC) over the 8 lanes of a super-block group, transposed: at
 * each of the three xor steps a lane sends the half of its columns its
 * partner keeps, so the group ends with lane c holding the whole sum of
 * column c >> (3 - log2 NC) in v[0] (NC = 8: 7 shuffles, not 24). Integer
 * sums: exact in any order. */
template <int NC> static __device__ __forceinline__ void mmvq_reduce8(int v[NC], int c)
{
    int n = NC;
#pragma unroll
    for (int o = 4; o >= 1; o >>= 1) {
        if (n >= 2) {
            const int h = n / 2;
            const bool up = (c & o) != 0;
#pragma unroll
            for (int i = 0; i < h; i++) {
                const int send = up ? v[i] : v[i + h], keep = up ? v[i + h] : v[i];
                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
            }
            n = h;
        } else {
            v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
        }
    }
}

template <int NC> struct mmvq_cols {
    enum { SHIFT = NC == 8 ? 0 : NC == 4 ? 1 : NC == 2 ? 2 : 3 };
};

/* v[u][0] for a u known only at run time, without indexing the array (a
 * computed index would put it in local memory) */
template <int U, int NC> static __device__ __forceinline__ int mmvq_pick(const int (&v)[U][NC], int u)
{
    int r = v[0][0];
#pragma unroll
    for (int k = 1; k < U; k++)
        r = u == k ? v[k][0] : r;
    return r;
}

/* WPR warps per weight row (1, 2 or 4; the block's 4 warps hold 4 / WPR
 * rows). A window of WPR * SB super-blocks of a row is computed at once:
 * part p of the row's warps takes super-blocks grp + 4 (p + WPR u) of it,
 * every lane with its own (p1, v1, p2, v2) terms parked by super-block
 * index, then (one barrier) the window's chains run in k order (SC below:
 * one warp runs all of the block's rows'; WPR 4: lane r of the row's
 * part-0 warp runs activation row r's) while the other warps start the
 * next window into the other buffer. The chain is the same at
 * every WPR, nc and batch: the bits do not depend on the choice. Long Q6_K
 * rows (a 4096 x 14336 weight: 56 super-blocks) take 4 warps, so a row's
 * bytes are in flight at once instead of in 3.5 dependent passes of one
 * warp; the other types are fastest at one (cuda_mmvq_wpr). The
 * super-block heads (float scales, min term) of a group's U super-blocks
 * are computed by U different lanes in one pass, not one after the other
 * by one lane. */
template <int T, int NC, int WPR, int U>
static __global__ void __launch_bounds__(MMVQ_WARPS *CUDA_WARP)
mmvq_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X, int64_t nbr,
            float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
    typedef mmvq_chunk<T> C;
    enum { SB = 4 * U, R = MMVQ_WARPS / WPR, SBW = WPR * SB, L = 8 / NC };
    /* SC (several rows a block, WPR < 4): the block's R x NC chains run by
     * one warp a window (window i: warp i % 4), lanes (row, activation row)
     * in the same warp instructions, their state in shared memory between
     * windows; the park's row stride is padded (SBW + SC) so the chain
     * lanes of different rows read different banks. Why (bench/RESULTS.md,
     * 2026-12-03 18:15-): at one warp a row, lane 0 alone ran the pass's
     * chain, ~1 M of the 6.74 M warp instructions of q4_K 4096 x 14336 at
     * n = 1 (-15% instructions; 14.0 -> 13.6 us, n = 3-4 -11%, tg128 +1.5%) */
    enum { SC = R > 1 };
    __shared__ float4 park[2][R][SBW + SC][NC];
    __shared__ float accs[SC ? R : 1][NC];
    cuda_pdl_enter();
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int rl = warp / WPR, part = warp % WPR;
    const int32_t jr = blockIdx.x * R + rl;
    const bool valid = jr < n_w; /* rows past the weight stay for the block's barriers */
    const int32_t r0 = blockIdx.y * NC;
    const int nr = n_rows - r0 < NC ? n_rows - r0 : NC;
    const int grp = lane >> 3, c = lane & 7;
    const int col = c >> mmvq_cols<NC>::SHIFT; /* the activation row this lane's sums are of */
    const uint8_t *row = w + (size_t)(valid ? jr : 0) * row_bytes;
    const int64_t xrow0 = (int64_t)r0 * nbr; /* block index of activation row r0, super-block 0 */
    float acc = 0.0f;                        /* part 0, lane r < nr: activation row r0 + r */
    int buf = 0, it = 0;
    for (int64_t win0 = 0; win0 < nbr; win0 += SBW, buf ^= 1, it++) {
        int v1[U][NC];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int r = 0; r < NC; r++)
                v1[u][r] = 0;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t sb = win0 + grp + 4 * (part + WPR * u);
            if (valid && sb < nbr)
                C::template dot<NC>(C::load(row, (int)sb, c), row, (int)sb, c, X, xrow0 + sb, nbr, nr, v1[u]);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            mmvq_reduce8<NC>(v1[u], c);
        /* lane c of a column's L lanes heads super-blocks u = c % L, + L .. */
#pragma unroll
        for (int i = 0; i < (U + L - 1) / L; i++) {
            const int u = (c & (L - 1)) + i * L;
            const int64_t sb = win0 + grp + 4 * (part + WPR * u);
            if (u < U && col < nr && valid && sb < nbr) {
                float p1, p2;
                int v2;
                C::head(C::hload(row, (int)sb, X, xrow0 + col * nbr + sb), &p1, &p2, &v2);
                park[buf][rl][sb - win0][col] = make_float4(p1, (float)mmvq_pick<U, NC>(v1, u), p2, (float)v2);
            }
        }
        if (SC) {
            __syncthreads();
            if (warp == it % MMVQ_WARPS && lane < R * NC) {
                const int cr = lane / NC, cc = lane % NC;
                if (blockIdx.x * R + cr < n_w && cc < nr) {
                    const int cnt = nbr - win0 < SBW ? (int)(nbr - win0) : SBW;
                    float a = win0 ? accs[cr][cc] : 0.0f;
                    for (int k = 0; k < cnt; k++) {
                        const float4 t = park[buf][cr][k][cc];
                        a = __fmaf_rn(t.x, t.y, a);
                        if (T != QT_Q6_K)
                            a = __fmaf_rn(t.z, t.w, a);
                    }
                    accs[cr][cc] = a;
                }
            }
            continue;
        }
        if (WPR == 1)
            __syncwarp();
        else
            __syncthreads();
        if (part == 0 && valid && lane < nr) {
            const int cnt = nbr - win0 < SBW ? (int)(nbr - win0) : SBW;
            for (int k = 0; k < cnt; k++) {
                const float4 t = park[buf][rl][k][lane];
                acc = __fmaf_rn(t.x, t.y, acc);
                if (T != QT_Q6_K)
                    acc = __fmaf_rn(t.z, t.w, acc);
            }
        }
        /* no second barrier: the next window parks in the other buffer, and
         * the one after passes the next barrier, which the chaining lanes
         * reach only when this chain is done */
    }
    if (SC) {
        __syncthreads(); /* the last window's chain is done */
        if (warp == 0 && lane < R * NC) {
            const int cr = lane / NC, cc = lane % NC;
            const int32_t j = blockIdx.x * R + cr;
            if (j < n_w && cc < nr)
                cuda_epi_store(y, r0 + cc, j, n_w, accs[cr][cc], E);
        }
        return;
    }
    if (part == 0 && valid && lane < nr)
        cuda_epi_store(y, r0 + lane, jr, n_w, acc, E);
}

template <int T, int NC, int WPR, int U>
static void mmvq_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                        int32_t n_rows)
{
    const int64_t nbr = w->ne0 / QK_K;
    const cuda_q8k X = cuda_q8k_planes(xq, (int64_t)n_rows * nbr);
    const dim3 grid(cuda_blocks(w->ne1, MMVQ_WARPS / WPR), cuda_blocks(n_rows, NC));
    cuda_launch(c, mmvq_kernel<T, NC, WPR, U>, grid, MMVQ_WARPS * CUDA_WARP, 0, (const uint8_t *)w->data,
                w->row_bytes, (int32_t)w->ne1, X, nbr, y, n_rows, c->epi);
}

template <int T, int NC, int U>
static void mmvq_launch_w(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                          int32_t n_rows, int wpr)
{
    switch (wpr) {
    case 1: mmvq_launch<T, NC, 1, U>(c, w, xq, y, n_rows); break;
    case 2: mmvq_launch<T, NC, 2, U>(c, w, xq, y, n_rows); break;
    default: mmvq_launch<T, NC, 4, U>(c, w, xq, y, n_rows); break;
    }
}

/* U (super-blocks of a group a pass) for nc activation rows of a weight
 * with nbr super-blocks a row (speed only: every U runs each row's chain
 * in the same k order). H200 (bench/RESULTS.md, 2026-12-03 call 5, with
 * the shared chain): 8 instead of 4 at one activation row wins on long
 * Q4_K/Q5_K rows (q4_K 4096 x 14336 13.65 -> 12.7 us, q5_K 7B ffn-down
 * 19.9 -> 17.9) and loses on 14-super-block ones (7B ffn-up +4-5%: half
 * of a pass's slots empty), and at two rows or for Q6_K it moves nothing
 * beyond noise; so 8 from 32 super-blocks a row (two passes' worth at 4).
 * sm_121 (not measured) takes the same rule: it is about a row's length. */
static inline int mmvq_u(int type, int nc, int64_t nbr)
{
    return nc == 1 && type != QT_Q6_K && nbr >= 32 ? 8 : MMVQ_UN(nc);
}

/* nc: cuda_mmvq_nc (cuda/mmq.cuh) unless the caller forces one; wpr:
 * cuda_mmvq_wpr unless forced; u: mmvq_u unless forced (8 at nc = 1) */
template <int T>
void cuda_mmvq(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
               int32_t n_rows, int nc, int wpr, int u)
{
    if (nc <= 0)
        nc = cuda_mmvq_nc(n_rows);
    if (u <= 0 || nc != 1)
        u = mmvq_u(T, nc, w->ne0 / QK_K);
    if (wpr <= 0)
        wpr = c->mmvq_wpr ? c->mmvq_wpr : cuda_mmvq_wpr(T, w->ne0 / QK_K, u * 4, w->ne1, c->n_sm);
    switch (nc) {
    case 1:
        if (u == 8)
            mmvq_launch_w<T, 1, 8>(c, w, xq, y, n_rows, wpr);
        else
            mmvq_launch_w<T, 1, MMVQ_UN(1)>(c, w, xq, y, n_rows, wpr);
        break;
    case 2: mmvq_launch_w<T, 2, MMVQ_UN(2)>(c, w, xq, y, n_rows, wpr); break;
    case 4: mmvq_launch_w<T, 4, MMVQ_UN(4)>(c, w, xq, y, n_rows, wpr); break;
    default: mmvq_launch_w<T, 8, MMVQ_UN(8)>(c, w, xq, y, n_rows, wpr); break;
    }
}

template void cuda_mmvq<QT_Q4_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *,
                                 int32_t, int, int, int);
template void cuda_mmvq<QT_Q5_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *,
                                 int32_t, int, int, int);
template void cuda_mmvq<QT_Q6_K>(struct cuda_ctx *, const struct backend_weight *, const void *, float *,
                                 int32_t, int, int, int);
