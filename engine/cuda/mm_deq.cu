/* cuda/mm_deq — with config batch_invariant = false, the K-quant products of
 * many activation rows the way llama.cpp's cuBLAS path runs them: the
 * weight dequantized to F16 into a scratch, the activations rounded to F16,
 * one cuBLASLt GEMM with f32 accumulation (cuda/mm_cublas.cu, its per-n
 * algorithm choice).
 *
 * Why a second path at all: under the canonical chain (cuda/qtypes.cuh)
 * every 32-element sub-block's int32 sum is scaled by its own 6-bit scale
 * and every super-block's by a float fma in k order, so that the GPU gives
 * the CPU's bits at every batch size. On mma.sync that costs 16
 * instructions an mma (bench/RESULTS.md, 2026-12-02/03 census): MMQ runs
 * q4_K 4096 x 14336 at n = 512 in ~250 us, where cuBLAS on F16 weights
 * runs the same product in ~69 us (../shared/peer/h200-ceilings.md) and
 * the dequantization reads 33 MB and writes 117 MB. Issue #11 asks for
 * "what is faster" where the int8 kernel cannot beat cuBLAS; this is it,
 * but it gives up what the default promises (DESIGN gate 4: a row's bits
 * the same at every batch size, and equal to the CPU's), so it is only
 * taken in the mode that already gives that up for cuBLAS's speed.
 * Numerics there: the weight's F32 value (cuda_dequant1's formula, as
 * get_rows) rounded to F16 (|w| far inside F16's range; relative error <=
 * 2^-11), x rounded to F16 (mm_cublas's convert), products exact in f32,
 * f32 accumulation: NMSE against the exact product ~1e-7, below the Q8_K
 * activation rounding of the int8 path (~1e-5); tests/cuda/test_cuda_ops.c
 * (mm-deq) gates it against the CPU.
 *
 * Rows from c->mmd_min (INFERD_MMD_MIN; the dequantization is a fixed cost
 * per product that only pays from some row count: MMD_MIN_ROWS_SM90); weights up to
 * MMD_MAX_BYTES as F16 (the output head's 1 GB copy is not worth it: at
 * prefill it multiplies a few rows). Fused views (mul_mat_ex's segments)
 * run a GEMM per member, each member's rows dequantized in turn into the
 * one scratch (the stream orders them); the SwiGLU epilogue is MMQ's:
 * mm_takes_mmq says no here, so gate and up come out apart and silu_mul
 * follows (cuda/mul_mat.cu).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_fp16.h>

#include "engine/cuda/qtypes.cuh"

extern "C" {
#include "engine/quant.h"
}

#define MMD_MAX_BYTES ((size_t)512 << 20) /* largest F16 copy dequantized a call */
/* default c->mmd_min, per architecture (INFERD_MMD_MIN=N overrides: from
 * N rows, 0 never). sm_90: 256, the crossover measured on the H200
 * (bench/RESULTS.md 2026-12-05 04:23-: against the int8 kernels the path
 * is 1.14-1.20x slower at 64-128 rows on the 4096 x 14336 and 7B ffn
 * shapes, 0.71-0.79x at 256, 0.56-0.64x at 512, 0.38-0.46x at 2048; the
 * 7B's attn-kv loses 2.6-2.8x at 64 rows). Elsewhere 0, never, until
 * measured: the F16 copy moves ~8x the weight's bytes (0.56 read, 2
 * written, 2 read again a Q4_K weight), which an H200's 4.8 TB/s hides
 * behind cuBLAS's F16 rate, but a GB10 (sm_121, ~273 GB/s, no wgmma: ~1 ms
 * of copy a 4096 x 14336 product) likely never does. */
#define MMD_MIN_ROWS_SM90 256

/* F16 bits to float on either side (the host check below runs mmd_deq8 on
 * the CPU) */
static __host__ __device__ __forceinline__ float mmd_h2f(quant_f16 h)
{
#ifdef __CUDA_ARCH__
    return cuda_h2f(h);
#else
    return quant_f16_to_f32(h);
#endif
}

/* ---- two forms of the same values ----
 * Form 1 (the default): per element, the quant bits to an int, I2F, the
 * scale. Form 2 (V2 = 1, INFERD_MMD_DQ2=1, A/B; 2026-12-05, not yet run on
 * a GPU): the same floats with fewer instructions an element. Form 1 is
 * issue-bound where the copy should be memory-bound (ncu, q6_K 4096 x
 * 14336: 65 us for 165 MB, 2.5 TB/s of the 4.49 ceiling): Q6_K reads its
 * 16 quant bytes one LDG.U8 each (210-byte blocks are only 2-byte
 * aligned), and every element is an I2F (a quarter-rate conversion) before
 * its multiply. Form 2: Q6_K's eight ql and eight qh bytes from three
 * aligned words each and funnel shifts, four 6-bit values a word operation
 * (masks and shifts on packed bytes), and every small integer to float by
 * the 2^23 trick (0x4B000000 | b is the float 2^23 + b; one subtraction
 * gives b - bias exactly): (d * sc) * (float)q for Q6_K and Q4_K / Q5_K's
 * d * sc * q - dm * m, the host check runs both forms against
 * engine/quant.c. The form the A/B loses is deleted after it. */

/* The float 2^23 + b (b < 2^23) from its bits */
static __host__ __device__ __forceinline__ float mmd_magic(uint32_t b)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(0x4B000000u | b);
#else
    const uint32_t u = 0x4B000000u | b;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

/* Eight bytes at p (2-byte aligned) as two words, from aligned word loads */
static __host__ __device__ __forceinline__ uint2 mmd_load8_a2(const uint8_t *p)
{
    const uintptr_t a = (uintptr_t)p;
    const uint8_t *base = (const uint8_t *)(a & ~(uintptr_t)3);
    const unsigned sh = (unsigned)(a & 3) * 8; /* 0 or 16 */
#ifdef __CUDA_ARCH__
    const unsigned int *w = (const unsigned int *)base; /* the weights: read-only global memory */
    const uint32_t w0 = __ldg(w), w1 = __ldg(w + 1), w2 = sh ? __ldg(w + 2) : 0u;
    return make_uint2(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh));
#else
    uint32_t w[3] = {0, 0, 0};
    memcpy(w, base, sh ? 12 : 8);
    return make_uint2(sh ? (w[0] >> sh) | (w[1] << (32 - sh)) : w[0],
                      sh ? (w[1] >> sh) | (w[2] << (32 - sh)) : w[1]);
#endif
}

/* Eight consecutive elements e .. e + 7 (e % 8 == 0, within one 32-element
 * sub-block) of super-block b, each as cuda_dequant1<T> forms it, scales
 * read once. Host-callable: cuda_mmd_host_check runs the same code on the
 * CPU against engine/quant.c's rows. */
template <int T> struct mmd_deq8;

/* Q4_K and Q5_K: sub-block s's 6-bit scale and min, the low nibbles (or
 * high, odd s) of qs, and for Q5_K (qh not NULL) bit s of qh as the fifth
 * bit. 144- and 176-byte blocks: qs + 32 (s / 2) + l and qh + l are 8-byte
 * aligned. */
template <bool Q5, int V2>
static __host__ __device__ __forceinline__ void mmd_k45(const uint8_t *scales, quant_f16 dh, quant_f16 mh,
                                                        const uint8_t *qs, const uint8_t *qh, int e, float v[8])
{
    const int s = e / 32, l = e % 32;
    int sc, m;
    cuda_k4_scale_min(scales, s, &sc, &m);
    const float d = mmd_h2f(dh), dm = mmd_h2f(mh);
    const uint2 q = *(const uint2 *)(qs + 32 * (s / 2) + l);
    const uint2 h = Q5 ? *(const uint2 *)(qh + l) : make_uint2(0, 0);
    const int sh = (s & 1) * 4;
    if (V2) { /* the nibbles of eight bytes at once, the fifth bits moved in as packed bytes */
        const float dsc = d * (float)sc, dmm = dm * (float)m;
        const uint32_t lo = ((q.x >> sh) & 0x0f0f0f0fu) | (((h.x >> s) & 0x01010101u) << 4);
        const uint32_t hi = ((q.y >> sh) & 0x0f0f0f0fu) | (((h.y >> s) & 0x01010101u) << 4);
        for (int t = 0; t < 8; t++) { /* a constant trip count: nvcc unrolls it */
            const float qv = mmd_magic(((t < 4 ? lo : hi) >> (8 * (t % 4))) & 0xff) - 8388608.0f;
            v[t] = dsc * qv - dmm;
        }
    } else {
        for (int t = 0; t < 8; t++) { /* a constant trip count: nvcc unrolls it */
            const int byte = (int)(((t < 4 ? q.x : q.y) >> (8 * (t % 4))) & 0xff);
            const int hb = (int)(((t < 4 ? h.x : h.y) >> (8 * (t % 4))) & 0xff);
            const int qv = ((byte >> sh) & 0x0f) | (((hb >> s) & 1) << 4);
            v[t] = d * (float)sc * (float)qv - dm * (float)m;
        }
    }
}

template <> struct mmd_deq8<QT_Q4_K> {
    static constexpr size_t bytes = sizeof(struct block_q4_K);
    template <int V2> static __host__ __device__ __forceinline__ void run(const uint8_t *blk, int e, float v[8])
    {
        const struct block_q4_K *b = (const struct block_q4_K *)blk;
        mmd_k45<false, V2>(b->scales, b->d, b->dmin, b->qs, NULL, e, v);
    }
};

template <> struct mmd_deq8<QT_Q5_K> {
    static constexpr size_t bytes = sizeof(struct block_q5_K);
    template <int V2> static __host__ __device__ __forceinline__ void run(const uint8_t *blk, int e, float v[8])
    {
        const struct block_q5_K *b = (const struct block_q5_K *)blk;
        mmd_k45<true, V2>(b->scales, b->d, b->dmin, b->qs, b->qh, e, v);
    }
};

template <> struct mmd_deq8<QT_Q6_K> {
    static constexpr size_t bytes = sizeof(struct block_q6_K);
    template <int V2> static __host__ __device__ __forceinline__ void run(const uint8_t *blk, int e, float v[8])
    {
        const struct block_q6_K *b = (const struct block_q6_K *)blk;
        const int h = e / 128, t4 = (e % 128) / 32, l = e % 32;
        const float d = mmd_h2f(b->d);
        const float sc = (float)b->scales[8 * h + l / 16 + 2 * t4]; /* l .. l + 7: one 16-group */
        const uint8_t *ql = b->ql + 64 * h + 32 * (t4 & 1) + l, *qh = b->qh + 32 * h + l;
        if (V2) { /* word loads, four 6-bit values a word operation */
            const float ds = d * sc;
            const uint2 wl = mmd_load8_a2(ql), wh = mmd_load8_a2(qh);
            const unsigned ns = t4 < 2 ? 0 : 4, hs = 2 * t4;
            const uint32_t lo = ((wl.x >> ns) & 0x0f0f0f0fu) | (((wh.x >> hs) & 0x03030303u) << 4);
            const uint32_t hi = ((wl.y >> ns) & 0x0f0f0f0fu) | (((wh.y >> hs) & 0x03030303u) << 4);
            for (int t = 0; t < 8; t++) /* (float)(q - 32), exactly: 2^23 + q - (2^23 + 32) */
                v[t] = ds * (mmd_magic(((t < 4 ? lo : hi) >> (8 * (t % 4))) & 0xff) - 8388640.0f);
        } else { /* 210-byte blocks: byte loads */
            for (int t = 0; t < 8; t++) { /* a constant trip count: nvcc unrolls it */
                const int lo = ql[t];
                const int q = ((t4 < 2 ? (lo & 0x0f) : (lo >> 4)) | (((qh[t] >> (2 * t4)) & 3) << 4)) - 32;
                v[t] = d * sc * (float)q;
            }
        }
    }
};

/* Elements 8i .. 8i + 7 of rows of ne0 elements (row_bytes apart; ne0 % 256
 * == 0), counted row-major: what thread i of the kernel below converts, and
 * what the host check runs */
template <int T, int V2>
static __host__ __device__ __forceinline__ void mmd_run8(const uint8_t *w, size_t row_bytes, int64_t ne0, int64_t i,
                                                         float v[8])
{
    const int64_t per_row = ne0 / 8, r = i / per_row, k = (i % per_row) * 8;
    mmd_deq8<T>::template run<V2>(w + r * row_bytes + (k / QK_K) * mmd_deq8<T>::bytes, (int)(k % QK_K), v);
}

/* rows x ne0 elements of w (row_bytes apart) to F16, row-major: thread i
 * writes elements 8i .. 8i + 7 (one 16-byte store; ne0 % 256 == 0). Waits
 * for the launches before it first: the previous GEMM may still read out. */
template <int T, int V2>
static __global__ void __launch_bounds__(256)
mmd_dequant_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int64_t ne0, int64_t n8, __half *__restrict__ out)
{
    cuda_pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        mmd_run8<T, V2>(w, row_bytes, ne0, i, v);
        uint4 o;
        __half2 p;
        p = __floats2half2_rn(v[0], v[1]);
        o.x = *(const uint32_t *)&p;
        p = __floats2half2_rn(v[2], v[3]);
        o.y = *(const uint32_t *)&p;
        p = __floats2half2_rn(v[4], v[5]);
        o.z = *(const uint32_t *)&p;
        p = __floats2half2_rn(v[6], v[7]);
        o.w = *(const uint32_t *)&p;
        *(uint4 *)(out + 8 * i) = o;
    }
}

static int mmd_type(int type)
{
    return type == QT_Q4_K || type == QT_Q5_K || type == QT_Q6_K;
}

/* bytes of an ne0 x ne1 weight as F16 */
static size_t mmd_bytes(int64_t ne0, int64_t ne1)
{
    return (size_t)ne0 * (size_t)ne1 * sizeof(__half);
}

/* Does weight w (whole, as registered) take this path at some row count?
 * The same answer at registration and at release: batch_variant is fixed
 * before the first weight. */
static int mmd_eligible(const struct cuda_ctx *c, const struct backend_weight *w)
{
    return c->batch_variant && c->mmd_min > 0 && mmd_type(w->type) && w->ne1 > 1 && w->ne0 % QK_K == 0 &&
           mmd_bytes(w->ne0, w->ne1) <= MMD_MAX_BYTES &&
           strncmp(w->name, "token_embd", 10) != 0;
}

int cuda_mmd_weight_add(struct cuda_ctx *c, const struct backend_weight *w)
{
    if (!mmd_eligible(c, w))
        return 0;
    if (cuda_mmc_f16_add(c, w->ne0, w->ne1, w->name))
        return 0; /* no cuBLASLt (or no algorithm): MMQ serves it */
    const size_t need = c->mmd_need;
    if (mmd_bytes(w->ne0, w->ne1) > need)
        c->mmd_need = mmd_bytes(w->ne0, w->ne1);
    const int rc = cuda_scratch_update(c);
    if (rc) { /* not registered: neither its shape nor its scratch need stays */
        cuda_mmc_f16_drop(c, w->ne0, w->ne1);
        c->mmd_need = need;
    }
    return rc;
}

void cuda_mmd_weight_drop(struct cuda_ctx *c, const struct backend_weight *w)
{
    if (mmd_eligible(c, w))
        cuda_mmc_f16_drop(c, w->ne0, w->ne1);
}

int cuda_mmd_reserve(struct cuda_ctx *c)
{
    return cuda_scratch_grow(c, &c->mmd_w, &c->mmd_w_bytes, c->mmd_need);
}

/* ne0 x ne1 (one member of a product) fits the scratch and has its shape */
static int mmd_fits(const struct cuda_ctx *c, int64_t ne0, int64_t ne1)
{
    return mmd_bytes(ne0, ne1) <= c->mmd_w_bytes && cuda_mmc_has_f16(c, ne0, ne1);
}

/* Does the product of w at n_rows (with the epilogue c->epi: a fused view's
 * segments, each its own GEMM; never the SwiGLU epilogue) go this way?
 * The one rule for cuda_mmd_try and mm_takes_mmq, so that what one declines
 * the other serves. */
int cuda_mmd_takes(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows)
{
    const struct cuda_epi &E = c->epi;
    if (!c->batch_variant || c->mmd_min <= 0 || n_rows < c->mmd_min || !mmd_type(w->type) || w->ne0 % QK_K ||
        E.glu)
        return 0;
    for (int s = 0; s < (E.n_seg ? E.n_seg : 1); s++)
        if (!mmd_fits(c, w->ne0, E.n_seg ? E.seg[s].ne1 : w->ne1))
            return 0;
    return 1;
}

/* Rows j0 .. j0 + ne1 - 1 of w into c->mmd_w as F16 */
static void mmd_dequant(struct cuda_ctx *c, const struct backend_weight *w, int64_t j0, int64_t ne1)
{
    const uint8_t *src = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes;
    const int64_t n8 = ne1 * w->ne0 / 8;
    const unsigned g = cuda_stride_grid(c, n8);
    __half *out = (__half *)c->mmd_w;
    const int v2 = c->mmd_dq2;
    switch (w->type) {
    case QT_Q4_K:
        cuda_launch(c, v2 ? mmd_dequant_kernel<QT_Q4_K, 1> : mmd_dequant_kernel<QT_Q4_K, 0>, g, 256, 0, src,
                    w->row_bytes, w->ne0, n8, out);
        break;
    case QT_Q5_K:
        cuda_launch(c, v2 ? mmd_dequant_kernel<QT_Q5_K, 1> : mmd_dequant_kernel<QT_Q5_K, 0>, g, 256, 0, src,
                    w->row_bytes, w->ne0, n8, out);
        break;
    default:
        cuda_launch(c, v2 ? mmd_dequant_kernel<QT_Q6_K, 1> : mmd_dequant_kernel<QT_Q6_K, 0>, g, 256, 0, src,
                    w->row_bytes, w->ne0, n8, out);
        break;
    }
    CUDA_CHECK_LAUNCH(c, "mmd_dequant_kernel");
}

int cuda_mmd_try(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y, int32_t n_rows,
                 int *held)
{
    if (!cuda_mmd_takes(c, w, n_rows))
        return 0;
    const struct cuda_epi E = c->epi;
    const int ns = E.n_seg ? E.n_seg : 1;
    for (int s = 0; s < ns && !c->err; s++) {
        const int64_t j0 = E.n_seg ? E.seg[s].j0 : 0, ne1 = E.n_seg ? E.seg[s].ne1 : w->ne1;
        mmd_dequant(c, w, j0, ne1);
        if (c->err)
            break;
        /* the member's own epilogue, unsegmented: its y, bias, accumulate */
        c->epi = cuda_epi{};
        c->epi.bias = E.n_seg ? E.seg[s].bias : E.bias;
        c->epi.accumulate = E.n_seg ? E.seg[s].accumulate : E.accumulate;
        cuda_mmc_run_f16(c, w->ne0, ne1, c->mmd_w, x, E.n_seg ? E.seg[s].y : y, n_rows, held);
    }
    c->epi = E;
    return 1;
}

int cuda_mmd_variant(struct cuda_ctx *c, const struct backend_weight *w, const float *x, float *y, int32_t n_rows)
{
    if (!c->batch_variant || c->mmd_min <= 0)
        return 1; /* the mode is off: the dispatcher never picks it */
    if (!mmd_type(w->type) || w->ne0 % QK_K)
        return INF_EUNSUPPORTED;
    /* a shape no registered weight has (prewarm's scratch weight): its
     * algorithms chosen now (startup), dropped after */
    const int had = cuda_mmc_has_f16(c, w->ne0, w->ne1);
    if (!had && cuda_mmc_f16_add(c, w->ne0, w->ne1, "prewarm"))
        return 1; /* no cuBLASLt here */
    int rc = cuda_scratch_update(c); /* the F16 activation scratch, if cuBLASLt came up just now */
    if (!rc)
        rc = cuda_scratch_grow(c, &c->mmd_w, &c->mmd_w_bytes, mmd_bytes(w->ne0, w->ne1));
    if (!rc) {
        const int32_t saved = c->mmd_min;
        int held = -1;
        c->mmd_min = 1;
        rc = cuda_mmd_try(c, w, x, y, n_rows, &held) ? c->err : INF_EUNSUPPORTED;
        c->mmd_min = saved;
    }
    if (!had)
        cuda_mmc_f16_drop(c, w->ne0, w->ne1);
    return rc;
}

int cuda_mmd_min_default(int sm)
{
    const char *e = getenv("INFERD_MMD_MIN");
    if (e && *e) {
        const long v = strtol(e, NULL, 10);
        return v < 0 ? 0 : v > 65536 ? 65536 : (int)v;
    }
    return sm == 90 ? MMD_MIN_ROWS_SM90 : 0;
}

/* The kernel's per-thread arithmetic on the host (form 0 the first, else
 * the second): n_rows rows of ne0
 * elements of type T (bytes as weight_register gets them), every
 * eight-element run through mmd_run8, what mmd_dequant_kernel's thread i
 * runs, against engine/quant.c's quant_dequant_row, F16-rounded
 * both sides (the kernel's store); the first mismatch into msg. Returns
 * the mismatching elements, or -1 for a type this path does not take. No
 * GPU needed: the index arithmetic and formulas are what it checks. */
extern "C" int64_t cuda_mmd_host_check(int type, int form, const void *w, int64_t ne0, int64_t n_rows,
                                       char *msg, size_t cap)
{
    if (!mmd_type(type) || ne0 % QK_K)
        return -1;
    const size_t rb = quant_row_bytes(type, ne0);
    float *ref = (float *)malloc(sizeof(float) * (size_t)ne0);
    if (!ref)
        return -1;
    int64_t bad = 0;
    if (msg && cap)
        msg[0] = 0;
    const uint8_t *wb = (const uint8_t *)w;
    const int64_t per_row = ne0 / 8;
    for (int64_t i = 0; i < n_rows * per_row; i++) {
        const int64_t r = i / per_row, k = (i % per_row) * 8;
        if (k == 0)
            quant_dequant_row(type, wb + r * rb, ref, ne0);
        float v[8];
        switch (type * 2 + (form != 0)) {
        case QT_Q4_K * 2: mmd_run8<QT_Q4_K, 0>(wb, rb, ne0, i, v); break;
        case QT_Q4_K * 2 + 1: mmd_run8<QT_Q4_K, 1>(wb, rb, ne0, i, v); break;
        case QT_Q5_K * 2: mmd_run8<QT_Q5_K, 0>(wb, rb, ne0, i, v); break;
        case QT_Q5_K * 2 + 1: mmd_run8<QT_Q5_K, 1>(wb, rb, ne0, i, v); break;
        case QT_Q6_K * 2: mmd_run8<QT_Q6_K, 0>(wb, rb, ne0, i, v); break;
        default: mmd_run8<QT_Q6_K, 1>(wb, rb, ne0, i, v); break;
        }
        for (int t = 0; t < 8; t++)
            if (quant_f32_to_f16(v[t]) != quant_f32_to_f16(ref[k + t])) {
                if (!bad && msg && cap)
                    snprintf(msg, cap, "row %lld element %lld: %.9g, quant.c %.9g", (long long)r,
                             (long long)(k + t), (double)v[t], (double)ref[k + t]);
                bad++;
            }
    }
    free(ref);
    return bad;
}
