/* cuda/qtypes — per-type device code shared by get_rows and the matrix
 * products: element dequantization and the dot of one 32-element sub-block
 * of a weight row with one q8_1 activation block.
 *
 * Layouts are ggml's (engine/quant_blocks.h); the formulas are the ones
 * engine/quant.c documents for the CPU (value = d*scale*q - dmin*min for
 * Q4_K/Q5_K, d*scale*(q-32) for Q6_K, d*(q-8) for Q4_0, d*q for Q8_0).
 *
 * Every sub-block dot is an exact int32 sum (dp4a) turned into float with a
 * fixed sequence of rounded operations (__fmul_rn/__fmaf_rn), so the same
 * (weight row, activation row) pair gives the same bits in every kernel that
 * calls it, whatever else the kernel computes (batch invariance).
 */
#ifndef INFERD_CUDA_QTYPES_CUH
#define INFERD_CUDA_QTYPES_CUH

#include "engine/cuda/common.cuh"

/* 6-bit scale and min j (0..7) of a Q4_K/Q5_K super-block (engine/quant_impl.h).
 * Host-callable too (cuda/mm_deq.cu's host check). */
static __host__ __device__ __forceinline__ void cuda_k4_scale_min(const uint8_t *q, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Element i of a weight row of type T, as float. */
template <int T> __device__ float cuda_dequant1(const uint8_t *row, int64_t i);

template <> __device__ __forceinline__ float cuda_dequant1<QT_F32>(const uint8_t *row, int64_t i)
{
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_F16>(const uint8_t *row, int64_t i)
{
    return cuda_h2f(((const quant_f16 *)row)[i]);
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_BF16>(const uint8_t *row, int64_t i)
{
    return cuda_bf2f(((const quant_bf16 *)row)[i]);
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q4_0>(const uint8_t *row, int64_t i)
{
    const struct block_q4_0 *b = (const struct block_q4_0 *)row + i / QK4_0;
    const int j = (int)(i % QK4_0);
    const int q = j < 16 ? (b->qs[j] & 0x0f) : (b->qs[j - 16] >> 4);
    return (float)(q - 8) * cuda_h2f(b->d);
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q8_0>(const uint8_t *row, int64_t i)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)row + i / QK8_0;
    return (float)b->qs[i % QK8_0] * cuda_h2f(b->d);
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q4_K>(const uint8_t *row, int64_t i)
{
    const struct block_q4_K *b = (const struct block_q4_K *)row + i / QK_K;
    const int e = (int)(i % QK_K), s = e / 32, l = e % 32;
    int sc, m;
    cuda_k4_scale_min(b->scales, s, &sc, &m);
    const uint8_t byte = b->qs[32 * (s / 2) + l];
    const int q = (s & 1) ? (byte >> 4) : (byte & 0x0f);
    return cuda_h2f(b->d) * (float)sc * (float)q - cuda_h2f(b->dmin) * (float)m;
}
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q5_K>(const uint8_t *row, int64_t i)
{
    const struct block_q5_K *b = (const struct block_q5_K *)row + i / QK_K;
    const int e = (int)(i % QK_K), s = e / 32, l = e % 32;
    int sc, m;
    cuda_k4_scale_min(b->scales, s, &sc, &m);
    const uint8_t byte = b->qs[32 * (s / 2) + l];
    const int q = ((s & 1) ? (byte >> 4) : (byte & 0x0f)) | (((b->qh[l] >> s) & 1) << 4);
    return cuda_h2f(b->d) * (float)sc * (float)q - cuda_h2f(b->dmin) * (float)m;
}
/* Q6_K element e: half h = e/128; within it quarter t = (e%128)/32 and l = e%32
 * (engine/quant.c's dequant_q6_K order). */
template <> __device__ __forceinline__ float cuda_dequant1<QT_Q6_K>(const uint8_t *row, int64_t i)
{
    const struct block_q6_K *b = (const struct block_q6_K *)row + i / QK_K;
    const int e = (int)(i % QK_K), h = e / 128, t = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (t & 1) + l];
    const int q = ((t < 2 ? (lo & 0x0f) : (lo >> 4)) | (((b->qh[32 * h + l] >> (2 * t)) & 3) << 4)) - 32;
    return cuda_h2f(b->d) * (float)b->scales[8 * h + l / 16 + 2 * t] * (float)q;
}

/* ---- block terms: the canonical arithmetic of a quantized product -------
 *
 * Activations are quantized exactly as the CPU backend quantizes them
 * (quant_vec_dot_type: Q8_K per 256 for the K-quants, Q8_0 per 32 for
 * Q4_0/Q8_0; cuda/quantize.cu gives the CPU's bytes), so every integer
 * sum below equals the CPU's. One weight block (a 256-element super-block,
 * or a 32-element block) against one activation block gives exact int32
 * sums (v1 = sum over groups of scale * dot, v2 = sum of min * activation
 * sums; the Q8_0/Q4_0 `terms` here, the K-quants' in cuda/mmvq.cu and
 * cuda/mmqk_impl.cuh) and their float scales p1, p2 (`scales`):
 *     acc = fmaf(p1, (float)v1, acc);   acc = fmaf(p2, (float)v2, acc)
 * (p2/v2 only for types with a min term), applied block after block in k
 * order. Every kernel (the warp-per-row product here, the tensor-core MMQ
 * kernels) forms the same ints, however it adds them (integer sums do not
 * depend on the order), and runs the same float chain, so all of them give
 * a row the same bits at every batch size (DESIGN gate 4).
 */
template <int T> struct cuda_qt;

/* Q8_K activations as the GPU keeps them: the CPU's bytes of n_blocks
 * blocks (block ib = activation row * blocks per row + super-block) in
 * three planes, so that a kernel reads 16-byte aligned runs of qs and the
 * quantize prepass writes them in the order the products read them
 * (cuda/quantize.cu). Size: cuda_q8k_bytes(n_blocks). */
struct cuda_q8k {
    int8_t *qs;  /* [n_blocks][256] */
    float *d;    /* [n_blocks] */
    int8_t *hl;  /* [n_blocks][16]: the sum s_j of each 32 qs (the CPU's
                  * bsums in pairs; |s_j| <= 32 * 127) split into int8
                  * halves s_j = 128 hi_j + lo_j, lo_j in [-64, 63] (so
                  * |hi_j| <= 32): hi_0..7, then lo_0..7. int8 so the
                  * K-quant MMQ can take the min term sum_j m_j s_j by mma
                  * (cuda/mmqk_impl.cuh); the decode product by dp4a. */
};

#define CUDA_Q8K_HL (2 * (QK_K / 32)) /* bytes of hl per block */

/* PRMT (__byte_perm) on the device and its host form, for the weight
 * expansions tests/cuda/test_cuda_host.c runs on the host: byte i of the
 * result is byte (s >> 4 i) & 7 of y:x (selector bit 3, the sign-
 * replicate mode, is not used by those) */
static __host__ __device__ __forceinline__ uint32_t cuda_prmt(uint32_t x, uint32_t y, uint32_t s)
{
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
#endif
}

/* the exact split of a sum s of 32 qs into its bytes: s = 128 hi + lo */
static __host__ __device__ __forceinline__ int cuda_q8k_lo(int s)
{
    return ((s + 64) & 127) - 64;
}
static __host__ __device__ __forceinline__ int cuda_q8k_hi(int s)
{
    return (s - cuda_q8k_lo(s)) / 128;
}

static __host__ __device__ __forceinline__ size_t cuda_q8k_align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static __host__ __device__ __forceinline__ size_t cuda_q8k_bytes(int64_t n_blocks)
{
    return (size_t)n_blocks * QK_K + cuda_q8k_align16((size_t)n_blocks * sizeof(float)) +
           (size_t)n_blocks * CUDA_Q8K_HL;
}

static __host__ __device__ __forceinline__ cuda_q8k cuda_q8k_planes(const void *base, int64_t n_blocks)
{
    cuda_q8k x;
    uint8_t *b = (uint8_t *)base;
    x.qs = (int8_t *)b;
    x.d = (float *)(b + (size_t)n_blocks * QK_K);
    x.hl = (int8_t *)(b + (size_t)n_blocks * QK_K + cuda_q8k_align16((size_t)n_blocks * sizeof(float)));
    return x;
}

/* Batches of 2 to CUDA_Q8K_FRAG_ROWS activation rows also get a fourth
 * plane after the three (cuda/quantize.cu writes it): their qs in the order
 * mmqt's B fragments take them (cuda/mmqt_impl.cuh), so a compute lane loads
 * its 64 bytes of a super-block as 4 coalesced 16-byte loads instead of the
 * stage carrying 8 rows of activations through shared memory: uint4
 * [super-block][p = 0..3][lane = 4 g + t4], word q of it = bytes 64 p + 16 q
 * + 4 t4 .. + 3 of row g's super-block (rows past the batch: stale, never
 * stored). Written on every device (two 4-byte stores a lane), read only
 * by mmqt (sm_90 and later). Size with it: cuda_q8k_act_bytes. */
#define CUDA_Q8K_FRAG_ROWS 8

static __host__ __device__ __forceinline__ size_t cuda_q8k_act_bytes(int64_t n_rows, int64_t nb)
{
    const size_t b = cuda_q8k_bytes(n_rows * nb); /* a multiple of 16 */
    return n_rows >= 2 && n_rows <= CUDA_Q8K_FRAG_ROWS ? b + (size_t)nb * CUDA_Q8K_FRAG_ROWS * QK_K : b;
}

static __host__ __device__ __forceinline__ uint4 *cuda_q8k_frag(const void *base, int64_t n_rows, int64_t nb)
{
    return n_rows >= 2 && n_rows <= CUDA_Q8K_FRAG_ROWS ? (uint4 *)((uint8_t *)base + cuda_q8k_bytes(n_rows * nb))
                                                       : NULL;
}

/* Q8_0 activations (the vec-dot type of Q4_0/Q8_0 weights) as the GPU
 * keeps them: the CPU's bytes in two planes, qs [n_blocks][32] (16-byte
 * aligned runs, read by 128-bit loads and cp.async) and d [n_blocks] as
 * float (the block's F16 scale converted: exact). */
struct cuda_q80 {
    int8_t *qs;
    float *d;
};

static __host__ __device__ __forceinline__ size_t cuda_q80_bytes(int64_t n_blocks)
{
    return (size_t)n_blocks * QK8_0 + cuda_q8k_align16((size_t)n_blocks * sizeof(float));
}

static __host__ __device__ __forceinline__ cuda_q80 cuda_q80_planes(const void *base, int64_t n_blocks)
{
    cuda_q80 x;
    x.qs = (int8_t *)base;
    x.d = (float *)((uint8_t *)base + (size_t)n_blocks * QK8_0);
    return x;
}

/* Q4_0/Q8_0 weights as the CUDA backend keeps them (cuda/mmq0_impl.cuh
 * repacks them at weight_register): when a row is a whole number of
 * 256-element stages, each row is rewritten in place, same row bytes, as
 * two planes: the blocks' values [nb][16 or 32] then their F16 scales
 * [nb]. Q4_0's nibbles are stored XOR 8, the 4-bit two's complement of
 * q - 8, so a nibble moved to a byte's high half is the int8 16 * (q - 8)
 * (the kernels fold the 16 into the scale, exactly: see mmq0_impl.cuh).
 * Rows start 16-byte aligned then (18 * nb and 34 * nb are multiples of 16
 * when nb % 8 == 0). Larger rows than a thread block can restage keep
 * ggml's layout (and the warp-per-row kernel). A pure function of the
 * shape, so every reader agrees without a flag. */
#define CUDA_Q0_MAX_ROW (96 * 1024) /* shared memory of one block on sm_121 too */
static __host__ __device__ __forceinline__ bool cuda_q0_packed(int type, int64_t ne0)
{
    return (type == QT_Q4_0 || type == QT_Q8_0) && ne0 % QK_K == 0 &&
           (size_t)(ne0 / 32) * (type == QT_Q4_0 ? 18 : 34) <= CUDA_Q0_MAX_ROW;
}

/* element i of a packed Q4_0/Q8_0 row of ne0 elements (get_rows) */
template <int T> static __device__ __forceinline__ float cuda_q0_packed_elem(const uint8_t *row, int64_t ne0, int64_t i)
{
    const int64_t ib = i / 32;
    const int l = (int)(i % 32);
    const int qb = T == QT_Q4_0 ? 16 : 32;
    const float d = cuda_h2f(((const quant_f16 *)(row + (ne0 / 32) * qb))[ib]);
    if (T == QT_Q8_0)
        return (float)((const int8_t *)row)[i] * d;
    const uint8_t b = row[ib * 16 + (l & 15)];
    const int n = l < 16 ? (b & 0x0f) : (b >> 4); /* (q - 8) mod 16 */
    return (float)((n ^ 8) - 8) * d;
}

static __device__ __forceinline__ int cuda_load_i32(const uint8_t *p)
{
    /* the blocks are only 2-byte aligned (block_q8_0 is 34 bytes) */
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

/* One Q8_K block by one warp, byte for byte what engine/quant.c's
 * reference quantizer writes (cuda/quantize.cu says how): lane l holds
 * elements 8 l .. 8 l + 7 in v. Out: w, the lane's 8 bytes; *sum, the sum
 * of the 32 qs of the lane's group of 4 lanes (every lane of it); *d, the
 * block's d (every lane); *sum16 where asked, the sum of the 16 qs of the
 * lane's pair of lanes. The quantizer kernel and mmvt (which quantizes
 * its one activation row itself) both run it. */
static __device__ __forceinline__ void cuda_q8k_warp_v(const float v[8], int lane, uint32_t w[2], int *sum, float *d,
                                                       int *sum16 = nullptr)
{
    /* the largest magnitude, the first index on ties (the CPU scans in
     * order), and its signed value */
    float amax = 0.0f, vmax = 0.0f;
    int imax = 8 * lane;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if (fabsf(v[k]) > amax) {
            amax = fabsf(v[k]);
            imax = 8 * lane + k;
            vmax = v[k];
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, imax, o);
        const float v2 = __shfl_xor_sync(0xffffffffu, vmax, o);
        if (a2 > amax || (a2 == amax && i2 < imax)) {
            amax = a2;
            imax = i2;
            vmax = v2;
        }
    }
    w[0] = w[1] = 0;
    *sum = 0;
    *d = 0.0f;
    if (sum16)
        *sum16 = 0;
    if (amax == 0.0f)
        return;
    const float iscale = -127.0f / vmax;
    int s = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        int q = (int)rintf(__fmul_rn(iscale, v[k]));
        q = q > 127 ? 127 : q;
        w[k / 4] |= (uint32_t)(uint8_t)(int8_t)q << (8 * (k % 4));
        s += q;
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1); /* 32 elements = 4 lanes */
    if (sum16)
        *sum16 = s; /* 16 elements: this lane's and its neighbour's (Q6_K's sub-blocks: cuda/mmvt.cu) */
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    *sum = s;
    *d = 1.0f / iscale;
}

/* The position in mmqr's k order (cuda/mmqh_impl.cuh mmqh_x16p_elem:
 * position 16 j + 8 P + 2 t + e holds element 64 t + 32 h + 4 i + 2 P + e,
 * j = 8 h + i) of element 8 lane + 2 p of a super-block, p = 0..3 (the
 * quantizing lane's 4 pairs; element + 1 sits at position + 1): t = lane
 * / 8, h = (lane / 4) % 2, i = (2 lane + p / 2) % 8, P = p % 2. The
 * quantizer writes mmqr's f16 there (cuda_quantize_x16p);
 * cuda_mmqr_host_check checks it is mmqh_x16p_elem's inverse. */
static __host__ __device__ __forceinline__ int cuda_x16p_pos(int lane, int p)
{
    return 16 * (8 * ((lane >> 2) & 1) + ((2 * lane + (p >> 1)) & 7)) + 8 * (p & 1) + 2 * (lane >> 3);
}

/* Store cuda_q8k_warp(_v)'s results for one block: the lane's 8 qs at
 * qs + 8 lane, the 32-sums' halves into hl (hi_0..7, lo_0..7), d. The
 * quantizer kernel stores into the planes (not qs where its consumers
 * read x16 only), mmvt into shared memory. */
static __device__ __forceinline__ void cuda_q8k_put(int8_t *qs, int8_t *hl, float *d, int lane, const uint32_t w[2],
                                                    int sum, float dv)
{
    if (qs) /* NULL: the int8 plane not kept (cuda_quantize_x16p's no_qs) */
        *(uint2 *)(qs + 8 * lane) = make_uint2(w[0], w[1]);
    if ((lane & 3) == 0) {
        hl[lane / 4] = (int8_t)cuda_q8k_hi(sum);
        hl[QK_K / 32 + lane / 4] = (int8_t)cuda_q8k_lo(sum);
    }
    if (lane == 0)
        *d = dv;
}

/* the same from the 256 floats at xb */
static __device__ __forceinline__ void cuda_q8k_warp(const float *__restrict__ xb, int lane, uint32_t w[2], int *sum,
                                                     float *d)
{
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        v[k] = xb[8 * lane + k];
    cuda_q8k_warp_v(v, lane, w, sum, d);
}

/* int32 dot of 8 packed int8 quads with 8 quads of activations */
static __device__ __forceinline__ int cuda_dot8(const int q[8], const int *x)
{
    int s = 0;
#pragma unroll
    for (int k = 0; k < 8; k++)
        s = __dp4a(q[k], x[k], s);
    return s;
}

/* 4N bytes at a 2-byte aligned address (global or shared) as N words: N + 1
 * aligned words, funnel-shifted (the last word must lie in the same
 * allocation: every use reads inside its block). Q6_K's 210-byte blocks. */
template <int N> static __device__ __forceinline__ void cuda_ld_a2(const uint8_t *p, uint32_t o[N])
{
    /* by pointer arithmetic, not an integer round trip: the compiler then
     * still knows a shared-memory p as shared (LDS, not generic loads:
     * ncu of mmvt's Q6_K, bench/RESULTS.md 2026-12-04 06:10-) */
    const uint32_t *w = (const uint32_t *)(p - ((uintptr_t)p & 3));
    const int sh = (int)((uintptr_t)p & 3) * 8;
    uint32_t v[N + 1];
#pragma unroll
    for (int i = 0; i <= N; i++)
        v[i] = w[i];
#pragma unroll
    for (int i = 0; i < N; i++)
        o[i] = __funnelshift_r(v[i], v[i + 1], sh);
}

/* The 6-bit scales of sub-blocks 2p and 2p + 1 of a Q4_K/Q5_K super-block
 * whose first 16 bytes (d, dmin, scales[12]) are hd: engine/quant_impl.h's
 * k4_scale_min for four at once, the side of `j < 4` selected without
 * a branch (lanes of one warp take both sides). */
static __device__ __forceinline__ void cuda_k45_pair_scales(uint4 hd, int p, int *sc0, int *sc1)
{
    const uint32_t w03 = hd.y & 0x3f3f3f3fu;
    const uint32_t w47 = (hd.w & 0x0f0f0f0fu) | ((hd.y >> 2) & 0x30303030u);
    const uint32_t sw = (p < 2 ? w03 : w47) >> (16 * (p & 1));
    *sc0 = (int)(sw & 0xff);
    *sc1 = (int)((sw >> 8) & 0xff);
}

/* The head of a Q4_K/Q5_K super-block (first 16 bytes hd) against an
 * activation block of scale xd and sum bytes hl (cuda_q8k.hl): its float
 * scales p1 = d * xd, p2 = -(dmin * xd) and its whole min term v2 = sum_j
 * m_j * s_j, 8 mins against the sums' 8 high and 8 low bytes in four dp4a,
 * exact. */
static __device__ __forceinline__ void cuda_k45_head(uint4 hd, float xd, uint4 hl, float *p1, float *p2, int *v2)
{
    *p1 = __fmul_rn(cuda_h2f((quant_f16)(hd.x & 0xffff)), xd);
    *p2 = -__fmul_rn(cuda_h2f((quant_f16)(hd.x >> 16)), xd);
    const uint32_t mw0 = hd.z & 0x3f3f3f3fu;                                      /* m0..m3 */
    const uint32_t mw1 = ((hd.w >> 4) & 0x0f0f0f0fu) | ((hd.z >> 2) & 0x30303030u); /* m4..m7 */
    const int vh = __dp4a((int)hl.y, (int)mw1, __dp4a((int)hl.x, (int)mw0, 0));
    *v2 = __dp4a((int)hl.w, (int)mw1, __dp4a((int)hl.z, (int)mw0, vh * 128));
}

/* Q4_K and Q5_K share the 6-bit scales and mins and the min term through
 * the activation sums (their products: cuda/mmvq.cu, cuda/mmqk_impl.cuh);
 * U supplies unpack(block, j, q[8]) of a sub-block's values. */
template <typename B, typename U> struct cuda_qt_k45 {
    static constexpr int QK = QK_K, HAS_MIN = 1;
};

/* 4-bit values of sub-block j as 8 packed quads */
struct cuda_q4_K_unpack {
    static __device__ __forceinline__ void unpack(const struct block_q4_K *b, int j, int q[8])
    {
        const int *p = (const int *)(b->qs + 32 * (j / 2)); /* 144-byte blocks: 4-aligned */
        const int shift = 4 * (j & 1);
#pragma unroll
        for (int k = 0; k < 8; k++)
            q[k] = (p[k] >> shift) & 0x0f0f0f0f;
    }
};

struct cuda_q5_K_unpack {
    static __device__ __forceinline__ void unpack(const struct block_q5_K *b, int j, int q[8])
    {
        const int *p = (const int *)(b->qs + 32 * (j / 2)); /* 176-byte blocks: 4-aligned */
        const int *qh = (const int *)b->qh;
        const int shift = 4 * (j & 1);
#pragma unroll
        for (int k = 0; k < 8; k++) /* bit j of qh[4k..4k+3] becomes bit 4 of each byte */
            q[k] = ((p[k] >> shift) & 0x0f0f0f0f) | (((qh[k] >> j) & 0x01010101) << 4);
    }
};

template <> struct cuda_qt<QT_Q4_K> : cuda_qt_k45<struct block_q4_K, cuda_q4_K_unpack>,
                                      cuda_q4_K_unpack {};
template <> struct cuda_qt<QT_Q5_K> : cuda_qt_k45<struct block_q5_K, cuda_q5_K_unpack>,
                                      cuda_q5_K_unpack {};

template <> struct cuda_qt<QT_Q6_K> {
    static constexpr int QK = QK_K, HAS_MIN = 0;
    /* q - 32 of sub-block j (elements 32j..32j+31) as 8 signed quads:
     * half h = j/4, quarter t = j%4 (engine/quant.c's dequant_q6_K order) */
    static __device__ __forceinline__ void unpack(const struct block_q6_K *b, int j, int q[8])
    {
        const int h = j / 4, t = j % 4;
        const uint8_t *ql = b->ql + 64 * h + 32 * (t & 1);
        const uint8_t *qh = b->qh + 32 * h;
        const int lshift = 4 * (t >> 1), hshift = 2 * t;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int lo = (cuda_load_i32(ql + 4 * k) >> lshift) & 0x0f0f0f0f;
            const int hi = ((cuda_load_i32(qh + 4 * k) >> hshift) & 0x03030303) << 4;
            q[k] = __vsubss4(lo | hi, 0x20202020);
        }
    }
};

/* Q8_0 / Q4_0 in ggml's layout (rows that are not packed, see
 * cuda_q0_packed) against cuda_q80 activation planes: block ib of a row,
 * activation block xb (row c's is xb + c * xs). */
template <> struct cuda_qt<QT_Q8_0> {
    static constexpr int QK = QK8_0, HAS_MIN = 0;
    static __device__ __forceinline__ void unpack(const struct block_q8_0 *b, int q[8])
    {
#pragma unroll
        for (int k = 0; k < 8; k++)
            q[k] = cuda_load_i32((const uint8_t *)b->qs + 4 * k);
    }
    template <int NC>
    static __device__ __forceinline__ void terms(const uint8_t *row, int64_t ib, const cuda_q80 &X, int64_t xb,
                                                 int64_t xs, int ncols, int v1[NC], int v2[NC])
    {
        int q[8];
        unpack((const struct block_q8_0 *)row + ib, q);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            v1[c] = v2[c] = 0;
            if (c < ncols)
                v1[c] = cuda_dot8(q, (const int *)(X.qs + (xb + c * xs) * QK8_0));
        }
    }
    static __device__ __forceinline__ void scales(const uint8_t *row, int64_t ib, const cuda_q80 &X, int64_t xb,
                                                  float *p1, float *p2)
    {
        *p1 = __fmul_rn(cuda_h2f(((const struct block_q8_0 *)row + ib)->d), X.d[xb]);
        *p2 = 0.0f;
    }
};

template <> struct cuda_qt<QT_Q4_0> {
    static constexpr int QK = QK4_0, HAS_MIN = 0;
    /* q - 8 as 8 signed quads: quads 0-3 elements 0-15 (low nibbles), 4-7 16-31 */
    static __device__ __forceinline__ void unpack(const struct block_q4_0 *b, int q[8])
    {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int v = cuda_load_i32(b->qs + 4 * k);
            q[k] = __vsubss4(v & 0x0f0f0f0f, 0x08080808);
            q[k + 4] = __vsubss4((v >> 4) & 0x0f0f0f0f, 0x08080808);
        }
    }
    template <int NC>
    static __device__ __forceinline__ void terms(const uint8_t *row, int64_t ib, const cuda_q80 &X, int64_t xb,
                                                 int64_t xs, int ncols, int v1[NC], int v2[NC])
    {
        int q[8];
        unpack((const struct block_q4_0 *)row + ib, q);
#pragma unroll
        for (int c = 0; c < NC; c++) {
            v1[c] = v2[c] = 0;
            if (c < ncols)
                v1[c] = cuda_dot8(q, (const int *)(X.qs + (xb + c * xs) * QK8_0));
        }
    }
    static __device__ __forceinline__ void scales(const uint8_t *row, int64_t ib, const cuda_q80 &X, int64_t xb,
                                                  float *p1, float *p2)
    {
        *p1 = __fmul_rn(cuda_h2f(((const struct block_q4_0 *)row + ib)->d), X.d[xb]);
        *p2 = 0.0f;
    }
};

#endif
