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
#include "engine/log.h"
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
/* default c->mmd_min_res: the same for a product whose weight has a
 * resident F16 copy (config f16_weights_mb), which pays no dequantization:
 * INFERD_MMD_RES_MIN=N overrides, 0 takes c->mmd_min. sm_90: 64, measured
 * (bench/RESULTS.md 2026-12-05 13:42, H100): against the int8 kernels the
 * copy's GEMM is 0.43-0.98x at 64 rows on the 4096 x 14336 and 7B shapes
 * but for the 3584 x 512 K/V projections (1.37-1.43x: MMD_FEW_ROWS), and
 * from 32 rows already wins on most (0.46-0.77x; q4_K 7B ffn-up 1.17x at
 * 32). Elsewhere 0 (c->mmd_min: never). */
#define MMD_MIN_RES_ROWS_SM90 64
/* ... but from MMD_FEW_ROWS_MIN rows for a product of at most MMD_FEW_ROWS
 * output rows (cuda_mmd_takes) */
#define MMD_FEW_ROWS 1024
#define MMD_FEW_ROWS_MIN 96

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

/* ---- the values, few instructions an element ----
 * The first form of this kernel (per element: the quant bits to an int,
 * an I2F, the scale) was issue-bound where the copy should be
 * memory-bound (ncu, q6_K 4096 x 14336: 65 us for 165 MB, 2.5 TB/s of the
 * 4.49 ceiling): Q6_K read its 16 quant bytes one LDG.U8 each (210-byte
 * blocks are only 2-byte aligned), and every element was a quarter-rate
 * I2F. This form gives the same floats (the host check runs it against
 * engine/quant.c): Q6_K's eight ql and eight qh bytes from three aligned
 * words each and funnel shifts, four 6-bit values a word operation (masks
 * and shifts on packed bytes), and every small integer to float by the
 * 2^23 trick (0x4B000000 | b is the float 2^23 + b; one subtraction gives
 * b - bias exactly): (d * sc) * (float)q for Q6_K and Q4_K / Q5_K's d * sc
 * * q - dm * m. Measured against the first form (bench/RESULTS.md
 * 2026-12-05 12:42, H200, interleaved): the F16 path's q6_K 4096 x 14336
 * n = 512 173.2 -> 159.5 us, q4_K 157.2 -> 152.4; the first form deleted. */

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
template <bool Q5>
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
    /* the nibbles of eight bytes at once, the fifth bits moved in as packed bytes */
    const float dsc = d * (float)sc, dmm = dm * (float)m;
    const uint32_t lo = ((q.x >> sh) & 0x0f0f0f0fu) | (((h.x >> s) & 0x01010101u) << 4);
    const uint32_t hi = ((q.y >> sh) & 0x0f0f0f0fu) | (((h.y >> s) & 0x01010101u) << 4);
    for (int t = 0; t < 8; t++) { /* a constant trip count: nvcc unrolls it */
        const float qv = mmd_magic(((t < 4 ? lo : hi) >> (8 * (t % 4))) & 0xff) - 8388608.0f;
        v[t] = dsc * qv - dmm;
    }
}

template <> struct mmd_deq8<QT_Q4_K> {
    static constexpr size_t bytes = sizeof(struct block_q4_K);
    static __host__ __device__ __forceinline__ void run(const uint8_t *blk, int e, float v[8])
    {
        const struct block_q4_K *b = (const struct block_q4_K *)blk;
        mmd_k45<false>(b->scales, b->d, b->dmin, b->qs, NULL, e, v);
    }
};

template <> struct mmd_deq8<QT_Q5_K> {
    static constexpr size_t bytes = sizeof(struct block_q5_K);
    static __host__ __device__ __forceinline__ void run(const uint8_t *blk, int e, float v[8])
    {
        const struct block_q5_K *b = (const struct block_q5_K *)blk;
        mmd_k45<true>(b->scales, b->d, b->dmin, b->qs, b->qh, e, v);
    }
};

template <> struct mmd_deq8<QT_Q6_K> {
    static constexpr size_t bytes = sizeof(struct block_q6_K);
    static __host__ __device__ __forceinline__ void run(const uint8_t *blk, int e, float v[8])
    {
        const struct block_q6_K *b = (const struct block_q6_K *)blk;
        const int h = e / 128, t4 = (e % 128) / 32, l = e % 32;
        const float d = mmd_h2f(b->d);
        const float sc = (float)b->scales[8 * h + l / 16 + 2 * t4]; /* l .. l + 7: one 16-group */
        const uint8_t *ql = b->ql + 64 * h + 32 * (t4 & 1) + l, *qh = b->qh + 32 * h + l;
        /* word loads, four 6-bit values a word operation */
        const float ds = d * sc;
        const uint2 wl = mmd_load8_a2(ql), wh = mmd_load8_a2(qh);
        const unsigned ns = t4 < 2 ? 0 : 4, hs = 2 * t4;
        const uint32_t lo = ((wl.x >> ns) & 0x0f0f0f0fu) | (((wh.x >> hs) & 0x03030303u) << 4);
        const uint32_t hi = ((wl.y >> ns) & 0x0f0f0f0fu) | (((wh.y >> hs) & 0x03030303u) << 4);
        for (int t = 0; t < 8; t++) /* (float)(q - 32), exactly: 2^23 + q - (2^23 + 32) */
            v[t] = ds * (mmd_magic(((t < 4 ? lo : hi) >> (8 * (t % 4))) & 0xff) - 8388640.0f);
    }
};

/* Elements 8i .. 8i + 7 of rows of ne0 elements (row_bytes apart; ne0 % 256
 * == 0), counted row-major: what thread i of the kernel below converts, and
 * what the host check runs */
template <int T>
static __host__ __device__ __forceinline__ void mmd_run8(const uint8_t *w, size_t row_bytes, int64_t ne0, int64_t i,
                                                         float v[8])
{
    const int64_t per_row = ne0 / 8, r = i / per_row, k = (i % per_row) * 8;
    mmd_deq8<T>::run(w + r * row_bytes + (k / QK_K) * mmd_deq8<T>::bytes, (int)(k % QK_K), v);
}

/* rows x ne0 elements of w (row_bytes apart) to F16, row-major: thread i
 * writes elements 8i .. 8i + 7 (one 16-byte store; ne0 % 256 == 0). Waits
 * for the launches before it first: the previous GEMM may still read out. */
template <int T>
static __global__ void __launch_bounds__(256)
mmd_dequant_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int64_t ne0, int64_t n8, __half *__restrict__ out)
{
    cuda_pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        float v[8];
        mmd_run8<T>(w, row_bytes, ne0, i, v);
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

/* ---- resident F16 copies (config f16_weights_mb) ----
 * The dequantization is a fixed cost a product (q4_K 4096 x 14336: ~36 us
 * of the path's ~145 at n = 512, at the read + write floor of its 150 MB),
 * which no kernel change removes. With memory to spare (a 7B model's K-quant
 * matrices are ~13 GB as F16; an H200 has 141 GB) the copy can be made once,
 * at registration, and kept: the product is then cuBLASLt's GEMM alone.
 * Same kernel, same GEMM algorithm (the shape's), so the same bits as the
 * per-product copy. Up to c->f16w.budget bytes, in registration order; a
 * weight that does not fit (budget or device memory) keeps the per-product
 * copy. Entries are keyed by the weight's device rows (what a fused view's
 * segment points at), re-keyed when weight_fuse moves them
 * (cuda/wcopies.cuh). */
static const struct cuda_wcopy *mmd_resident(const struct cuda_ctx *c, const void *src, int64_t ne0, int64_t ne1)
{
    return cuda_wcopy_find(&c->f16w, src, ne0, ne1);
}

static void mmd_dequant_to(struct cuda_ctx *c, const struct backend_weight *w, int64_t j0, int64_t ne1,
                           __half *out);

/* A resident copy of w, if the budget and the device allow: 1 made, 0 not
 * (the per-product copy serves), or a negative INF_E* code (the device) */
static int mmd_resident_add(struct cuda_ctx *c, const struct backend_weight *w)
{
    const size_t bytes = mmd_bytes(w->ne0, w->ne1);
    if (!cuda_wcopy_room(&c->f16w, bytes, 0))
        return 0;
    void *p = NULL;
    if (cuda_malloc(c, &p, bytes) != cudaSuccess) {
        cudaGetLastError();
        if (!c->f16w.full)
            log_warn("cuda: f16_weights_mb: no device memory for the F16 copy of '%s' (%zu MiB): its large "
                     "products dequantize a product (further refusals not logged)",
                     w->name, bytes >> 20);
        c->f16w.full = 1;
        return 0;
    }
    mmd_dequant_to(c, w, 0, w->ne1, (__half *)p);
    if (c->err || CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream))) {
        cudaStreamSynchronize(c->stream);
        cudaFree(p);
        return c->err ? c->err : INF_EDEVICE;
    }
    cuda_wcopy_put(&c->f16w, w->data, w->ne0, w->ne1, p, bytes);
    return 1;
}

void cuda_mmd_rekey(struct cuda_ctx *c, const void *from, const void *to)
{
    cuda_wcopy_rekey(&c->f16w, from, to);
}

void cuda_mmd_free(struct cuda_ctx *c)
{
    cuda_wcopy_free(&c->f16w);
}

int cuda_mmd_resident(const struct cuda_ctx *c, const struct backend_weight *w)
{
    return w->data && mmd_resident(c, w->data, w->ne0, w->ne1) != NULL;
}

int cuda_mmd_weight_add(struct cuda_ctx *c, const struct backend_weight *w)
{
    if (!mmd_eligible(c, w))
        return 0;
    if (cuda_mmc_f16_add(c, w->ne0, w->ne1, w->name))
        return 0; /* no cuBLASLt (or no algorithm): MMQ serves it */
    int rc = mmd_resident_add(c, w);
    if (rc == 1)
        return 0; /* no scratch needed for it */
    const size_t need = c->mmd_need;
    if (!rc && mmd_bytes(w->ne0, w->ne1) > need)
        c->mmd_need = mmd_bytes(w->ne0, w->ne1);
    if (!rc)
        rc = cuda_scratch_update(c);
    if (rc) { /* not registered: neither its shape nor its scratch need stays */
        cuda_mmc_f16_drop(c, w->ne0, w->ne1);
        c->mmd_need = need;
    }
    return rc;
}

void cuda_mmd_weight_drop(struct cuda_ctx *c, const struct backend_weight *w)
{
    if (!mmd_eligible(c, w))
        return;
    cuda_mmc_f16_drop(c, w->ne0, w->ne1);
    if (w->data)
        cuda_wcopy_drop(&c->f16w, w->data, w->ne0, w->ne1); /* the caller synchronized the stream */
}

int cuda_mmd_reserve(struct cuda_ctx *c)
{
    return cuda_scratch_grow(c, &c->mmd_w, &c->mmd_w_bytes, c->mmd_need);
}

/* Member s of the product of w with the epilogue E (a fused view's
 * segment, or w whole): its first row and rows, and its resident copy or
 * NULL. E is passed, not read from c: cuda_mmd_try sets each member's own
 * epilogue into c->epi before its GEMM. */
static const struct cuda_wcopy *mmd_member(const struct cuda_ctx *c, const struct cuda_epi &E,
                                          const struct backend_weight *w, int s, int64_t *j0, int64_t *ne1)
{
    *j0 = E.n_seg ? E.seg[s].j0 : 0;
    *ne1 = E.n_seg ? E.seg[s].ne1 : w->ne1;
    return mmd_resident(c, (const char *)w->data + (size_t)*j0 * w->row_bytes, w->ne0, *ne1);
}

/* The row count from which the product of w (with the epilogue c->epi: a
 * fused view's segments, each its own GEMM; never the SwiGLU epilogue) goes
 * this way, 0 never: c->mmd_min, or c->mmd_min_res where every member has
 * a resident copy (no dequantization to pay for); a member without one
 * must fit the scratch. The one rule for cuda_mmd_takes (cuda_mmd_try,
 * mm_takes_mmq: what one declines the other serves) and bench --op's
 * labels (cuda_backend_mm_deq_min). */
int cuda_mmd_min_rows(const struct cuda_ctx *c, const struct backend_weight *w)
{
    const struct cuda_epi &E = c->epi;
    if (!c->batch_variant || c->mmd_min <= 0 || !mmd_type(w->type) || w->ne0 % QK_K || E.glu)
        return 0;
    int all_res = 1;
    for (int s = 0; s < (E.n_seg ? E.n_seg : 1); s++) {
        int64_t j0, ne1;
        const struct cuda_wcopy *r = mmd_member(c, E, w, s, &j0, &ne1);
        if (!cuda_mmc_has_f16(c, w->ne0, ne1))
            return 0;
        if (r)
            continue;
        all_res = 0;
        if (mmd_bytes(w->ne0, ne1) > c->mmd_w_bytes)
            return 0;
    }
    int32_t min = c->mmd_min;
    if (all_res && c->mmd_min_res > 0) {
        min = c->mmd_min_res;
        /* a product of few output rows (a GQA model's K or V projection:
         * 3584 x 512) keeps the int8 kernels longer: measured (H100,
         * 2026-12-05 13:42) int8 8.2-10.1 us vs the copy's GEMM 12.9-13.8
         * up to 64 rows, 23.6-27.5 vs 13.1-13.6 from 96 */
        if (w->ne1 <= MMD_FEW_ROWS && min < MMD_FEW_ROWS_MIN)
            min = MMD_FEW_ROWS_MIN;
    }
    return min;
}

int cuda_mmd_takes(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows)
{
    const int min = cuda_mmd_min_rows(c, w);
    return min > 0 && n_rows >= min;
}

/* Rows j0 .. j0 + ne1 - 1 of w into out as F16 */
static void mmd_dequant_to(struct cuda_ctx *c, const struct backend_weight *w, int64_t j0, int64_t ne1,
                           __half *out)
{
    const uint8_t *src = (const uint8_t *)w->data + (size_t)j0 * w->row_bytes;
    const int64_t n8 = ne1 * w->ne0 / 8;
    const unsigned g = cuda_stride_grid(c, n8);
    switch (w->type) {
    case QT_Q4_K:
        cuda_launch(c, mmd_dequant_kernel<QT_Q4_K>, g, 256, 0, src, w->row_bytes, w->ne0, n8, out);
        break;
    case QT_Q5_K:
        cuda_launch(c, mmd_dequant_kernel<QT_Q5_K>, g, 256, 0, src, w->row_bytes, w->ne0, n8, out);
        break;
    default:
        cuda_launch(c, mmd_dequant_kernel<QT_Q6_K>, g, 256, 0, src, w->row_bytes, w->ne0, n8, out);
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
        int64_t j0, ne1;
        const struct cuda_wcopy *r = mmd_member(c, E, w, s, &j0, &ne1);
        const void *w16 = r ? r->p : c->mmd_w;
        if (!r)
            mmd_dequant_to(c, w, j0, ne1, (__half *)c->mmd_w);
        if (c->err)
            break;
        /* the member's own epilogue, unsegmented: its y, bias, accumulate */
        c->epi = cuda_epi{};
        c->epi.bias = E.n_seg ? E.seg[s].bias : E.bias;
        c->epi.accumulate = E.n_seg ? E.seg[s].accumulate : E.accumulate;
        cuda_mmc_run_f16(c, w->ne0, ne1, w16, x, E.n_seg ? E.seg[s].y : y, n_rows, held);
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

/* rows from the environment variable `name` (0..65536, negative 0), else dflt */
static int mmd_env_rows(const char *name, int dflt)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    const long v = strtol(e, NULL, 10);
    return v < 0 ? 0 : v > 65536 ? 65536 : (int)v;
}

int cuda_mmd_min_default(int sm)
{
    return mmd_env_rows("INFERD_MMD_MIN", sm == 90 ? MMD_MIN_ROWS_SM90 : 0);
}

int cuda_mmd_min_res_default(int sm)
{
    return mmd_env_rows("INFERD_MMD_RES_MIN", sm == 90 ? MMD_MIN_RES_ROWS_SM90 : 0);
}

/* The kernel's per-thread arithmetic on the host: n_rows rows of ne0
 * elements of type T (bytes as weight_register gets them), every
 * eight-element run through mmd_run8, what mmd_dequant_kernel's thread i
 * runs, against engine/quant.c's quant_dequant_row, F16-rounded
 * both sides (the kernel's store); the first mismatch into msg. Returns
 * the mismatching elements, or -1 for a type this path does not take. No
 * GPU needed: the index arithmetic and formulas are what it checks. */
extern "C" int64_t cuda_mmd_host_check(int type, const void *w, int64_t ne0, int64_t n_rows, char *msg,
                                       size_t cap)
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
        switch (type) {
        case QT_Q4_K: mmd_run8<QT_Q4_K>(wb, rb, ne0, i, v); break;
        case QT_Q5_K: mmd_run8<QT_Q5_K>(wb, rb, ne0, i, v); break;
        default: mmd_run8<QT_Q6_K>(wb, rb, ne0, i, v); break;
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
