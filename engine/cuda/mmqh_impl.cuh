/* cuda/mmqh_impl — Q4_K batches on the F16 tensor cores with the CPU's bits:
 * mmqh_kernel<T> (included by mmq_q4_k.cu after cuda/mmqk_impl.cuh, whose
 * head and min-term helpers it uses).
 *
 * Why (bench/RESULTS.md 2026-12-05 session 39): the int8 MMQ (mmqk) pays
 * four IMADs per m16n8k32 for the sub-block scales (an mma's int32 sum
 * times the row's 6-bit scale into the block sum: 29.4 M of its 117.8 M
 * warp instructions on the 4096 x 14336 x 512 product, 251 us, the issue's
 * 117 out of reach). Folded into the weights, the scale costs nothing in
 * the inner loop: q x sc (Q4_K: <= 15 x 63 = 945) is an integer f16
 * holds exactly, as are the q8 activations (-127..127), so
 * mma.sync m16n8k16 f16 x f16 -> f32 multiplies exactly, and the f32
 * accumulator adds integers exactly while every partial sum stays under
 * 2^24 (bench/hmma_probe: 0 of 844 K outputs differ from the int64 sums,
 * the largest magnitudes included). Centred (below), a whole super-block
 * stays under 2^24, so one accumulator serves it. Then the canonical chain
 * (cuda/qtypes.cuh) as mmqk runs it, the min term by its int8 mma: a
 * row's bits are mmqk's, the CPU's.
 * The F16 product does half an int8 mma's MACs an instruction at the same
 * rate (hmma_probe, H100: 635 TFLOPS against 1,286 TOPS, 6.7 SMSP cycles
 * each): the floor for 4096 x 14336 x 512 is ~95 us; mmqk's instruction
 * count, not its tensor time, held it at 2.6x that.
 *
 * One accumulator a super-block: A = q x sc - 480 (|A| <= 480), so a
 * super-block's sum is at most 256 x 480 x 127 < 2^24, exact; v1 = that
 * sum + 480 S (S the activation's sum over the super-block, from its
 * 32-sums), both exact floats, added with one rounding: (float)v1. (The
 * first form, session 39 call 5, kept two half-super-block accumulators
 * and 32 x 32 warp tiles: exact, but shared-memory bound: 1.4x slower
 * than mmqk.)
 *
 * Shape: 128 weight rows x 128 activation rows a block; 8 consumer warps
 * of 64 x 32 multiply and run the chain, 4 producer warps copy and expand
 * (warp specialization). A stage is a quarter super-block (64 elements,
 * one 32-byte chunk of each Q4_K row: sub-blocks 2q, 2q + 1) in one of four
 * slots, paced by mbarriers: full (every producer's cp.async landed, by
 * cp.async.mbarrier.arrive, and its expansion stored) and empty (every
 * consumer done with the slot). The consumers are two groups of 4 warps
 * (rows 0-63, 64-127; each scheduler holds one warp of each), the second
 * started half a super-block behind the first so that one group's chain
 * can run under the other's mma. Producers: the activations as F16 (x16:
 * the quantized activations' qs converted once a product by
 * mmqh_x16_kernel), the weights' raw blocks a super-block ahead (waiting
 * for that copy group alone), each thread a row's expansion (PRMT to
 * 16-bit lanes under a 0x64 byte, HFMA2 by the scale: exact), and
 * at a last quarter the super-block's heads, d and 32-sums into the slot,
 * so the chain reads only its slot. Rows of 64 halves + 16 bytes (9
 * granules: ldmatrix's 8 rows in 8 bank groups). 203 KB of shared memory:
 * one block an SM on sm_90 (227 KB); sm_121's ~100 KB cannot hold it
 * (mmqk serves there).
 *
 * Measured (H100, bench/RESULTS.md session 39 calls 5-9): the CPU's bits
 * everywhere (cuda-ops, q7, racecheck and synccheck clean). Speed at 4096 x
 * 14336 x 512 against mmqk's 250 us: 345 (two half accumulators, 32 x 32
 * tiles, one barrier a stage: shared-memory bound), 340 (centred weights,
 * 64 x 32; expand / multiply / chain in lockstep, IPC 0.28), 262 (warp
 * specialization), 261 (this form). A block's stage sequence is still the
 * time (128 rows take as long as 512; the HMMA pipe 37% busy): each
 * consumer step issues its 6 ldmatrix then its 16 HMMA, with no registers
 * left (168 of the 170 the launch bound allows) to load the next step's
 * fragments early (session 40: two producer warps and double-buffered
 * fragments, 395 us, were slower still). This mma.sync form is never the
 * default; on sm_90 builds the same producers' work feeds wgmma instead
 * (cuda/mmqw.cu: 0.76x mmqk at 4096 x 14336 x 512, on by default from
 * CUDA_MMQW_MIN rows).
 */
#ifndef INFERD_CUDA_MMQH_IMPL_CUH
#define INFERD_CUDA_MMQH_IMPL_CUH

#include <cuda_fp16.h>
#include <type_traits>

#define MMQH_BM 128
#define MMQH_BN 128
#define MMQH_CONS 256 /* consumer threads: 8 warps (2 x 4) of 64 x 32 */
#define MMQH_PROD 128 /* producer threads: 4 warps */
#define MMQH_THREADS (MMQH_CONS + MMQH_PROD)
#define MMQH_RS 144    /* bytes a row of an F16 stage: 64 halves + 16 (9 granules) */
#define MMQH_SLOTS 4   /* stages in flight: a quarter super-block each */
#define MMQH_CENTER 480 /* A = q x sc - 480: |A| <= 480 (mmqh_scale2: why 480) */

/* a stage (a quarter super-block) as the consumers read it; the last
 * quarter's slot also carries what the super-block's chain needs */
struct mmqh_slot {
    uint8_t a16[MMQH_BM][MMQH_RS];      /* q x sc - 480 */
    uint8_t b16[MMQH_BN][MMQH_RS];      /* activations */
    uint32_t head[MMQH_BM][4];          /* the rows' d, dmin and scale bytes */
    float xd[MMQH_BN];                  /* the activations' d */
    int8_t xhl[MMQH_BN][CUDA_Q8K_HL];   /* and 32-sums (cuda_q8k) */
};
struct mmqh_smem {
    mmqh_slot slot[MMQH_SLOTS];
    uint32_t raw[2][MMQH_BM][36]; /* Q4_K blocks of two super-blocks (producers only) */
    uint64_t full[MMQH_SLOTS], empty[MMQH_SLOTS], lag;
};

/* S, an activation's sum over a super-block, from its 32-sums (hl: 8
 * high, 8 low bytes; S = 128 sum hi + sum lo; |S| <= 32,512) */
static __device__ __forceinline__ int mmqh_ssum(uint4 hl)
{
    const int sh = __dp4a((int)hl.x, 0x01010101, __dp4a((int)hl.y, 0x01010101, 0));
    const int sl = __dp4a((int)hl.z, 0x01010101, __dp4a((int)hl.w, 0x01010101, 0));
    return 128 * sh + sl;
}

/* 480 S: |.| <= 480 x 32,512 < 2^24, exact */
static __device__ __forceinline__ float mmqh_sf(uint4 hl)
{
    return (float)(MMQH_CENTER * mmqh_ssum(hl));
}

/* x16[i] = qs[i] as f16 (exact), 8 a thread */
static __global__ void mmqh_x16_kernel(const int8_t *__restrict__ qs, __half *__restrict__ x16, int64_t n8)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n8)
        return;
    const uint2 v = ((const uint2 *)qs)[i];
    const int8_t *b = (const int8_t *)&v;
    __align__(16) __half h[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        h[k] = __int2half_rn((int)b[k]);
    ((uint4 *)x16)[i] = *(const uint4 *)h;
}

/* The activations as f16 in cuda/mmqr.cu's k order: within each super-
 * block, position 16 j + 8 P + 2 t + e (16-column step j = 8 h + i) holds
 * element 64 t + 32 h + 4 i + 2 P + e. Why: mmqr's lane t4 then expands
 * the weights of its step from one 32-bit word of its own 32-byte chunk
 * of each row (word i, the low nibbles for h = 0 and the high for h = 1:
 * one scale a step), straight into its wgmma A fragment (k 2 t4, 2 t4 + 1
 * and 2 t4 + 8, 2 t4 + 9). A super-block's sum is exact in any order, so
 * the k order is free (the bits are the natural order's). 8 a thread. */
static __host__ __device__ __forceinline__ int mmqh_x16p_elem(int pos)
{
    const int m = pos >> 3, j = m >> 1; /* 8-position group m: step j, P = m & 1 */
    return 64 * ((pos & 7) >> 1) + 32 * (j >> 3) + 4 * (j & 7) + 2 * (m & 1) + (pos & 1);
}

/* Two int8 bytes of wx = w ^ 0x80808080 (sel: 0x4140 bytes 0, 1; 0x4342
 * bytes 2, 3) as an f16 pair, exactly: each byte + 128 under a 0x64 byte
 * is the f16 1024 + u, less 1152 by one HADD2 (the host's form: the same
 * f16 bits and the same exact difference, for the host checks) */
static __host__ __device__ __forceinline__ uint32_t mmqh_i8x2(uint32_t wx, uint32_t sel)
{
    const uint32_t v = cuda_prmt(wx, 0x64646464u, sel);
#ifdef __CUDA_ARCH__
    const __half2 h = __hsub2(*(const __half2 *)&v, __half2half2(__ushort_as_half((unsigned short)0x6480u)));
    return *(const uint32_t *)&h;
#else
    uint32_t r = 0;
    for (int i = 0; i < 2; i++) {
        __half_raw hv;
        hv.x = (unsigned short)(v >> (16 * i));
        const __half_raw o = __half_raw(__float2half_rn(__half2float(__half(hv)) - 1152.0f));
        r |= (uint32_t)o.x << (16 * i);
    }
    return r;
#endif
}

/* A thread's 8 positions are 4 pairs of neighbouring elements (e, e + 1
 * at e0, + 64, + 128, + 192; e0 even): 4 two-byte loads. A pair as f16,
 * exactly (mmqh_i8x2 after one XOR), instead of 8 byte loads and a quarter-
 * rate I2F a value: 8.58 -> 8.19 us for 512 x 14336 on the H100 (ncu,
 * bench/RESULTS.md session 43; L2 70% busy: the 22 MB of traffic bind it) */
static __global__ void mmqh_x16p_kernel(const int8_t *__restrict__ qs, __half *__restrict__ x16, int64_t n8)
{
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n8)
        return;
    const uint16_t *src = (const uint16_t *)(qs + (i >> 5) * QK_K + mmqh_x16p_elem(8 * (int)(i & 31)));
    uint32_t p[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        p[k] = (uint32_t)__ldg(src + 32 * k) ^ 0x8080u; /* element e0 + 64 k: 32 k halfwords on */
    uint32_t o[4];
#pragma unroll
    for (int k = 0; k < 4; k++)
        o[k] = mmqh_i8x2(p[k], 0x4140u);
    ((uint4 *)x16)[i] = make_uint4(o[0], o[1], o[2], o[3]);
}

/* x16 <- the n_rows x ne0 activations' qs as f16, in the natural k order
 * or (perm) in mmqr's; launched by a form once it knows it runs, so a
 * form that declines costs no conversion */
static inline void mmqh_x16(struct cuda_ctx *c, const cuda_q8k &X, int32_t n_rows, int64_t ne0, __half *x16, bool perm)
{
    const int64_t n8 = (int64_t)n_rows * ne0 / 8;
    const unsigned nb = (unsigned)((n8 + 255) / 256);
    if (perm)
        mmqh_x16p_kernel<<<nb, 256, 0, c->stream>>>(X.qs, x16, n8);
    else
        mmqh_x16_kernel<<<nb, 256, 0, c->stream>>>(X.qs, x16, n8);
    c->x16p_ready = perm; /* the other order overwrote mmqr's */
}

/* A sub-block's constants for mmqh_w2: (sc, sc) and -(1024 sc + 480) in
 * both halves, both exact in f16 (1024 sc + 480 = 32 (32 sc + 15) <=
 * 64,992: a multiple of 32, f16's spacing up to 65,504) */
static __host__ __device__ __forceinline__ void mmqh_scale2(uint32_t sc, __half2 &m, __half2 &c)
{
    m = __half2half2(__int2half_rn((int)sc));
    c = __half2half2(__int2half_rn(-(int)(1024 * sc + MMQH_CENTER)));
}

/* two weights (nibble bytes 0/1 or 2/3 of x, sel) as f16 q x sc - 480: one
 * PRMT puts the nibbles in 16-bit lanes under a 0x64 byte (f16 1024 + q),
 * one HFMA2 takes (1024 + q) sc - (1024 sc + 480): an exact result in
 * [-480, 465], rounded once, exact (session 39's form, PRMT, IMAD by sc
 * plus 0x6400 and HSUB2, was one instruction more a pair) */
static __host__ __device__ __forceinline__ uint32_t mmqh_w2(uint32_t x, uint32_t sel, __half2 m, __half2 c)
{
    const uint32_t v = cuda_prmt(x, 0x64646464u, sel);
#ifdef __CUDA_ARCH__
    const __half2 r = __hfma2(*(const __half2 *)&v, m, c);
    return *(const uint32_t *)&r;
#else
    /* the host's form (tests/cuda/test_cuda_host.c): the same exact
     * product and sum, rounded once */
    uint32_t mw, cw, r = 0;
    memcpy(&mw, &m, 4);
    memcpy(&cw, &c, 4);
    for (int i = 0; i < 2; i++) {
        __half_raw hv, hm, hc;
        hv.x = (unsigned short)(v >> (16 * i));
        hm.x = (unsigned short)(mw >> (16 * i));
        hc.x = (unsigned short)(cw >> (16 * i));
        const __half_raw o =
            __half_raw(__float2half_rn(__half2float(__half(hv)) * __half2float(__half(hm)) + __half2float(__half(hc))));
        r |= (uint32_t)o.x << (16 * i);
    }
    return r;
#endif
}

/* mmqh_w2's constants of quarter qd of a Q4_K row (its block rw): sub-
 * block 2 qd's (the quarter's low nibbles) and 2 qd + 1's (the high ones) */
static __host__ __device__ __forceinline__ void mmqh_quarter_scales(const uint32_t *rw, int qd, __half2 &mlo, __half2 &clo,
                                                           __half2 &mhi, __half2 &chi)
{
    /* the scale bytes of sub-blocks 0-3 or 4-7 (mmqk_k45_head's sc[0],
     * sc[1]), picked by a select: qd is a runtime value, and an indexed
     * mmqk_head put the struct in local memory (a 32-byte stack frame and
     * its loads in every stage) */
    const uint32_t s0 = rw[1], s2 = rw[3];
    const uint32_t scw = qd < 2 ? s0 & 0x3f3f3f3fu : (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t sw = scw >> (16 * (qd & 1)); /* scales 2qd, 2qd + 1 in bytes 0, 1 */
    mmqh_scale2(sw & 0xff, mlo, clo);
    mmqh_scale2((sw >> 8) & 0xff, mhi, chi);
}

/* Quarter qd of a Q4_K row (its block rw, 144 bytes) as the f16 weights q
 * x sc - 480 of sub-blocks 2 qd (k 0..31 of the quarter: the low nibbles)
 * and 2 qd + 1 (k 32..63: the high ones): granule c of gr holds k 8c..8c+7 */
static __device__ __forceinline__ void mmqh_expand(const uint32_t *rw, int qd, uint4 gr[8])
{
    __half2 mlo, clo, mhi, chi;
    mmqh_quarter_scales(rw, qd, mlo, clo, mhi, chi);
#pragma unroll
    for (int q = 0; q < 2; q++) {
        const uint4 qv = *(const uint4 *)&rw[4 + 8 * qd + 4 * q];
        const uint32_t qw[4] = {qv.x, qv.y, qv.z, qv.w};
        uint32_t lo[8], hi[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t l = qw[k] & 0x0f0f0f0fu, u = (qw[k] >> 4) & 0x0f0f0f0fu;
            lo[2 * k] = mmqh_w2(l, 0x4140u, mlo, clo);
            lo[2 * k + 1] = mmqh_w2(l, 0x4342u, mlo, clo);
            hi[2 * k] = mmqh_w2(u, 0x4140u, mhi, chi);
            hi[2 * k + 1] = mmqh_w2(u, 0x4342u, mhi, chi);
        }
        /* weights 16 q + j (low nibbles) and 32 + 16 q + j (high) */
        gr[2 * q] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        gr[2 * q + 1] = make_uint4(lo[4], lo[5], lo[6], lo[7]);
        gr[4 + 2 * q] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        gr[5 + 2 * q] = make_uint4(hi[4], hi[5], hi[6], hi[7]);
    }
}

/* The heads of an m16n8 tile's accumulator rows g and g + 8 (the first 4
 * words of their Q4_K blocks, ra and rb) and their mins as
 * mmqk_min_words' A words, for mmqh_chain_tile */
static __device__ __forceinline__ void mmqh_tile_heads(const uint32_t *ra, const uint32_t *rb, int t4,
                                                       mmqk_head hd[2], int mh[2], int ml[2])
{
    mmqk_k45_head(ra, hd[0]);
    mmqk_k45_head(rb, hd[1]);
    mmqk_min_words(hd, t4, mh, ml);
}

/* The chain of one m16n8 tile at a super-block's end (both forms): dd its
 * exact sums of (q sc - 480) x, hd the heads of accumulator rows g and g +
 * 8 (mmqk_min_words' mh, ml), bhl the activation columns' 32-sums (the min
 * term's B word), x0/x1 and s0/s1 columns 2 t4 and 2 t4 + 1's d and 480
 * S. v1 = dd + 480 S by one add (exact operands, one rounding: (float)v1),
 * then mmqk's chain and min term in the CPU's order. */
static __device__ __forceinline__ void mmqh_chain_tile(float acc[4], const float dd[4], const int mh[2],
                                                       const int ml[2], int bhl, const mmqk_head hd[2], float x0,
                                                       float x1, float s0, float s1)
{
    int ch[4], cl[4];
    cuda_mma_k16(ch, mh[0], mh[1], bhl);
    cuda_mma_k16(cl, ml[0], ml[1], bhl);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const mmqk_head &H = hd[k >> 1];
        const float x = k & 1 ? x1 : x0;
        const float p1 = __fmul_rn(H.d, x);
        const float v1 = __fadd_rn(dd[k], k & 1 ? s1 : s0);
        const float a2 = __fmaf_rn(p1, v1, acc[k]);
        const float p2 = -__fmul_rn(H.dmin, x);
        acc[k] = __fmaf_rn(p2, (float)(ch[k] * 128 + cl[k]), a2);
    }
}

/* The chain of a warp's 16 m16n8 tiles at a super-block's end (the wgmma
 * forms: one m64n128 accumulator set dd), the slot L holding the
 * activations' d, 480 S and 32-sums of the block's 128 activation rows */
template <class L>
static __device__ __forceinline__ void mmqh_chain_row(float acc[16][4], const float dd[16][4], const L &slot,
                                                      const mmqk_head hd[2], const int mh[2], const int ml[2], int g,
                                                      int t4)
{
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float2 xd = *(const float2 *)&slot.xd[8 * j + 2 * t4];
        const float2 sf = *(const float2 *)&slot.sf[8 * j + 2 * t4];
        mmqh_chain_tile(acc[j], dd[j], mh, ml, *(const int *)&slot.xhl[8 * j + g][4 * t4], hd, xd.x, xd.y, sf.x,
                        sf.y);
    }
}

/* the producers' own barrier (named barrier 1: the consumers never wait
 * on it) */
static __device__ __forceinline__ void mmqh_prod_sync(void)
{
    asm volatile("bar.sync 1, %0;\n" ::"n"(MMQH_PROD) : "memory");
}

/* bar completes its phase once every cp.async this thread issued so far
 * has landed (one pending arrival each, counted in bar's init) */
static __device__ __forceinline__ void mmqh_cp_arrive(uint64_t *bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(cuda_saddr(bar)) : "memory");
}

/* The producers (4 warps, p = their thread 0..127): stage i's activations
 * (and at a last quarter the super-block's d, 32-sums and weight heads)
 * into slot i % 4 once both consumer groups have released it, the next
 * super-block's raw weights a super-block ahead, and stage i's weights
 * expanded from them (row p: chunk i % 4 of its block, 32 bytes, 64
 * weights). full[slot] completes when every producer thread's copies have
 * landed and its expansion is stored. */
static __device__ __forceinline__ void mmqh_produce(mmqh_smem &S, int p, const uint8_t *w, size_t row_bytes,
                                                    int32_t n_w, const cuda_q8k &X, const __half *x16, int64_t nbr,
                                                    int32_t n_rows, int32_t m0, int32_t n0, int32_t glu)
{
    const int64_t ne0 = nbr * QK_K, n_st = 4 * nbr;
    /* 32-bit offsets from block-uniform bases (the launcher keeps them
     * under 4 GB): raw chunks c = p + 128 k (9 a row); activation chunk p &
     * 7 of rows (p >> 3) + 16 k */
    const int32_t wr0 = glu ? m0 / 2 : m0;
    const uint8_t *wbase = w + (size_t)wr0 * row_bytes;
    uint32_t roff[9];
    uint32_t rmask = 0;
#pragma unroll
    for (int k = 0; k < 9; k++) {
        const int c = p + MMQH_PROD * k, r = c / 9, ch = c % 9;
        const int32_t wr = mmq_wrow(m0, r, n_w, glu);
        roff[k] = wr >= 0 ? (uint32_t)((size_t)(wr - wr0) * row_bytes) + 16 * ch : 0;
        rmask |= (wr >= 0 ? 1u : 0u) << k;
    }
    const __half *xbase = x16 + (size_t)n0 * ne0;
    const uint32_t boff = (uint32_t)((p >> 3) * ne0 + 8 * (p & 7));
    const int bval = n_rows - n0 - (p >> 3) > 0 ? (n_rows - n0 - (p >> 3) + 15) / 16 : 0; /* rows k < bval exist */
    auto issue_raw = [&](int64_t s) {
#pragma unroll
        for (int k = 0; k < 9; k++) {
            const int c = p + MMQH_PROD * k;
            if ((rmask >> k) & 1)
                __pipeline_memcpy_async((uint8_t *)&S.raw[s & 1][0][0] + (c / 9) * 144 + 16 * (c % 9),
                                        wbase + roff[k] + (size_t)s * 144, 16);
        }
    };
    issue_raw(0);
    __pipeline_commit();
    for (int64_t i = 0; i < n_st; i++) {
        const int64_t s = i >> 2;
        const int qd = (int)(i & 3), sl = (int)(i % MMQH_SLOTS);
        mmqh_slot &L = S.slot[sl];
        if (i >= MMQH_SLOTS)
            cuda_mbar_wait(&S.empty[sl], (uint32_t)(i / MMQH_SLOTS - 1) & 1);
        const uint32_t so = (uint32_t)(s * QK_K + 64 * qd);
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < bval)
                __pipeline_memcpy_async(&L.b16[(p >> 3) + 16 * k][16 * (p & 7)],
                                        xbase + boff + (uint32_t)(16 * k) * (uint32_t)ne0 + so, 16);
        if (qd == 3 && n0 + p < n_rows) {
            __pipeline_memcpy_async(&L.xd[p], X.d + (size_t)(n0 + p) * nbr + s, 4);
            __pipeline_memcpy_async(&L.xhl[p][0], X.hl + ((size_t)(n0 + p) * nbr + s) * CUDA_Q8K_HL, CUDA_Q8K_HL);
        }
        __pipeline_commit();
        mmqh_cp_arrive(&S.full[sl]); /* full counts these copies' landing */
        if (qd == 0) {
            /* raw(s), committed before the last four stages' activations
             * (one, at s = 0): wait for it alone, not for the activations
             * in flight (waiting for every older group held the producers
             * a stage's load latency behind: session 39 call 8); the
             * barrier also says every producer is past stage i - 1's
             * expansion, so raw[(s + 1) & 1] (super-block s - 1's) is free
             * for the next one's */
            if (s == 0)
                __pipeline_wait_prior(1);
            else
                __pipeline_wait_prior(MMQH_SLOTS);
            mmqh_prod_sync();
            if (s + 1 < nbr) {
                issue_raw(s + 1);
                __pipeline_commit();
            }
        }
        const uint32_t *rw = S.raw[s & 1][p];
        uint4 gr[8];
        mmqh_expand(rw, qd, gr);
#pragma unroll
        for (int c = 0; c < 8; c++)
            *(uint4 *)&L.a16[p][16 * c] = gr[c];
        if (qd == 3)
            *(uint4 *)L.head[p] = *(const uint4 *)rw;
        cuda_mbar_arrive(&S.full[sl]);
    }
    __pipeline_wait_prior(0);
}

template <int T>
static __global__ void __launch_bounds__(MMQH_THREADS, 1)
mmqh_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X,
            const __half *__restrict__ x16, int64_t nbr, float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) uint8_t mmqh_smem_raw[];
    mmqh_smem &S = *(mmqh_smem *)mmqh_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int32_t m0 = blockIdx.x * MMQH_BM, n0 = blockIdx.y * MMQH_BN;
    if (tid == 0) {
        for (int i = 0; i < MMQH_SLOTS; i++) {
            /* full: each producer's cp.async completion and its arrival after
             * the expansion; empty: every consumer thread */
            cuda_mbar_init(&S.full[i], 2 * MMQH_PROD);
            cuda_mbar_init(&S.empty[i], MMQH_CONS);
        }
        cuda_mbar_init(&S.lag, MMQH_CONS / 2);
        cuda_mbar_init_fence();
    }
    __syncthreads();
    cuda_pdl_enter();
    if (tid >= MMQH_CONS) {
        mmqh_produce(S, tid - MMQH_CONS, w, row_bytes, n_w, X, x16, nbr, n_rows, m0, n0, E.glu);
        return;
    }
    /* two groups of 4 warps, rows 64 wm.. (warp w runs on scheduler w % 4:
     * each scheduler holds one warp of each group); group 1 starts half a
     * super-block behind group 0, so one group's chain (every fourth
     * stage) runs while the other's mma keep the tensor pipe busy */
    const int wm = warp >> 2, wn = warp & 3; /* rows 64 wm.., activation rows 32 wn.. */
    const int g = lane >> 2, t4 = lane & 3;

    /* ldmatrix row addresses (slot 0): A rows 64 wm + 16 mt + (l & 7) + 8
     * ((l >> 3) & 1), halves 8 (l >> 4); B rows 32 wn + 16 np + 8 (l >> 4) +
     * (l & 7), halves 8 ((l >> 3) & 1) */
    const uint32_t sa = cuda_saddr(&S.slot[0].a16[64 * wm + (lane & 7) + 8 * ((lane >> 3) & 1)][16 * (lane >> 4)]);
    const uint32_t sb = cuda_saddr(&S.slot[0].b16[32 * wn + 8 * (lane >> 4) + (lane & 7)][16 * ((lane >> 3) & 1)]);
    constexpr uint32_t SL = (uint32_t)sizeof(mmqh_slot);

    /* dd: a super-block's integer sum, written whole by its first step
     * (cuda_mma_f16_k16_z) */
    float acc[4][4][4], dd[4][4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[a][b][i] = 0.0f;

    /* stage i (FIRST: a super-block's first quarter, its first step
     * without an accumulator) */
    auto stage = [&](int64_t i, auto first) {
        cuda_mbar_wait(&S.full[i % MMQH_SLOTS], (uint32_t)(i / MMQH_SLOTS) & 1);
        const uint32_t so = (uint32_t)(i % MMQH_SLOTS) * SL;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t af[4][4], bf[2][4];
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
                cuda_ldsm_x4(af[mt], sa + so + 16 * mt * MMQH_RS + 32 * kk);
#pragma unroll
            for (int np = 0; np < 2; np++)
                cuda_ldsm_x4(bf[np], sb + so + 16 * np * MMQH_RS + 32 * kk);
#pragma unroll
            for (int mt = 0; mt < 4; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) {
                    const uint32_t b0 = bf[nt >> 1][2 * (nt & 1)], b1 = bf[nt >> 1][2 * (nt & 1) + 1];
                    if (decltype(first)::value && kk == 0)
                        cuda_mma_f16_k16_z(dd[mt][nt], af[mt], b0, b1);
                    else
                        cuda_mma_f16_k16(dd[mt][nt], af[mt], b0, b1);
                }
        }
    };

    if (wm == 1)
        cuda_mbar_wait(&S.lag, 0); /* group 0 is through stage 1 */
    for (int64_t s = 0; s < nbr; s++) {
        stage(4 * s, std::true_type{});
        cuda_mbar_arrive(&S.empty[0]);
        stage(4 * s + 1, std::false_type{});
        cuda_mbar_arrive(&S.empty[1]);
        if (s == 0 && wm == 0)
            cuda_mbar_arrive(&S.lag);
        stage(4 * s + 2, std::false_type{});
        cuda_mbar_arrive(&S.empty[2]);
        stage(4 * s + 3, std::false_type{});
        /* the super-block ends (its d, 32-sums and heads are in this slot).
         * dd = sum (q sc - 480) x = v1 - 480 S, exact (|.| <= 256 x 480 x
         * 127 < 2^24); v1 = dd + 480 S by one add: exact operands, one
         * rounding, = (float)v1. S: the activation's sum over the
         * super-block, 128 sum hi + sum lo of its 32-sums. Then mmqk's chain
         * and min term. */
        const mmqh_slot &L = S.slot[3];
        float xd[4][2], sf[4][2];
        int bhl[4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int col = 32 * wn + 8 * nt + 2 * t4 + e;
                xd[nt][e] = L.xd[col];
                sf[nt][e] = mmqh_sf(*(const uint4 *)&L.xhl[col][0]);
            }
            bhl[nt] = *(const int *)&L.xhl[32 * wn + 8 * nt + g][4 * t4];
        }
#pragma unroll
        for (int mt = 0; mt < 4; mt++) {
            mmqk_head hd[2];
            int mh[2], ml[2];
            mmqh_tile_heads(L.head[64 * wm + 16 * mt + g], L.head[64 * wm + 16 * mt + g + 8], t4, hd, mh, ml);
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
                mmqh_chain_tile(acc[mt][nt], dd[mt][nt], mh, ml, bhl[nt], hd, xd[nt][0], xd[nt][1], sf[nt][0],
                                sf[nt][1]);
        }
        cuda_mbar_arrive(&S.empty[3]);
    }
    mmq_tiles_store<4, 4>(acc, m0, n0, 4 * wm, 32 * wn, g, t4, n_w, n_rows, y, E);
#endif
}

/* the wgmma form of the kernel (cuda/mmqw.cu: sm_90a builds on compute
 * capability 9.0; it fills x16 from X when it runs): 0 launched,
 * INF_EUNSUPPORTED not here, -1 no room */
int cuda_mmqw(struct cuda_ctx *c, const struct backend_weight *w, cuda_q8k X, __half *x16, float *y,
              int32_t n_rows);
/* the wgmma forms' tensor maps (cuda/mmqw.cu): the weight's rows (144-byte
 * boxes of 128 rows, or of 64 under the SwiGLU epilogue) and the f16
 * activations (64 x 128, swizzled); 0, or INF_EUNSUPPORTED (not compute
 * capability 9.0, a shape the maps cannot take) */
int cuda_mmqh_tmaps(const struct cuda_ctx *c, const struct backend_weight *w, const __half *x16, int32_t n_rows,
                    CUtensorMap *wm, CUtensorMap *xm);
/* its register-A form (cuda/mmqr.cu; x16 in mmqh_x16p_kernel's order;
 * the default where built): the same answers */
int cuda_mmqr(struct cuda_ctx *c, const struct backend_weight *w, cuda_q8k X, __half *x16, float *y,
              int32_t n_rows);

static_assert(MMQH_BM == CUDA_MMQH_TILE && MMQH_BN == CUDA_MMQH_TILE, "cuda_mmqh_fills counts these blocks");

/* Whether every form of the exact F16 product can take w at n_rows as
 * launched now (c->epi included): whole super-blocks, x16 room, sm_80,
 * and the kernels' 32-bit loader offsets (a block's weight rows, under
 * the SwiGLU epilogue up to F + 128 rows past its base, and a block's 128
 * activation rows of f16 under 4 GB). mmqh_launch and cuda_mmqr_takes
 * (cuda/mmqr.cu) both ask it. */
static inline bool mmqh_fits(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows)
{
    return w->ne0 % QK_K == 0 && cuda_x16_room(c, n_rows, w->ne0) && c->sm >= 80 &&
           (uint64_t)(c->epi.glu + MMQH_BM) * w->row_bytes < (1ull << 32) &&
           (uint64_t)MMQH_BN * (uint64_t)w->ne0 * 2 < (1ull << 32);
}

template <int T>
static int mmqh_launch(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows)
{
    static_assert(T == QT_Q4_K, "mmqh: Q4_K's scales and nibbles only (Q5_K's q x sc, up to 1,953, centred "
                                "still passes 2^24 in a super-block: two accumulators)");
    const int64_t nbr = w->ne0 / QK_K;
    if (!mmqh_fits(c, w, n_rows))
        return INF_EUNSUPPORTED;
    const cuda_q8k X = cuda_q8k_planes(xq, (int64_t)n_rows * nbr);
    /* each form converts the activations to f16 (x16) once it runs, unless
     * (mmqr) x16 holds them already in its order (c->x16p_ready: the
     * quantizer wrote them, or an earlier product of the same quantized
     * activation did) */
    if (c->mmqw) {
        /* the register-A form (cuda/mmqr.cu, the default) or mmqw's */
        if ((c->mmqw >= 2 ? cuda_mmqr(c, w, X, (__half *)c->x16, y, n_rows)
                          : cuda_mmqw(c, w, X, (__half *)c->x16, y, n_rows)) == 0)
            return 0;
        /* the default asks for the wgmma form only (no tensor-map entry
         * point in the driver, say): mmqk, faster than the mma.sync form */
        if (c->mmqh_fill)
            return INF_EUNSUPPORTED;
    }
    /* the mma.sync form's own room (the wgmma forms ask for theirs) */
    if (mmq_occupancy_once<mmqh_kernel<T>>(sizeof(mmqh_smem), MMQH_THREADS) == 0)
        return -1;
    mmqh_x16(c, X, n_rows, w->ne0, (__half *)c->x16, false);
    const dim3 grid(cuda_blocks(w->ne1, MMQH_BM), cuda_blocks(n_rows, MMQH_BN));
    cuda_launch(c, mmqh_kernel<T>, grid, MMQH_THREADS, sizeof(mmqh_smem), (const uint8_t *)w->data, w->row_bytes,
                (int32_t)w->ne1, X, (const __half *)c->x16, nbr, y, n_rows, c->epi);
    return 0;
}

#define MMQH_DEFINE(T)                                                                            \
    template <>                                                                                   \
    int cuda_mmqh<T>(struct cuda_ctx * c, const struct backend_weight *w, const void *xq, float *y, \
                     int32_t n_rows)                                                              \
    {                                                                                             \
        return mmqh_launch<T>(c, w, xq, y, n_rows);                                               \
    }

#endif
