/* cuda_ops_mm — test_cuda_ops.c's matrix products: every weight type's
 * mul_mat against the CPU and its batch invariance, the F32/F16/BF16
 * products through cuBLASLt, mul_mat_ex's fused sets and the SwiGLU
 * epilogue, get_rows and gather (the F16 path of batch_invariant = false,
 * which test_mul_mat_cublas calls: cuda_ops_deq.h). Header-only, included
 * once by test_cuda_ops.c after cuda_ops_harness.h. */
#ifndef INFERD_TESTS_CUDA_OPS_MM_H
#define INFERD_TESTS_CUDA_OPS_MM_H

#include "engine/cuda/cuda.h"
#include "engine/quant.h"
#include "tests/cuda/cuda_ops_harness.h"

/* ---- mul_mat ------------------------------------------------------------- */

/* The gated metric. With few outputs (ne1 = 1, n = 1: one dot) NMSE's
 * denominator is one sample of the output energy, and a dot that cancels
 * to near zero inflates NMSE by orders of magnitude though every product
 * was computed right (first version, F16: 6e-6 for one dot, 1e-7 at most
 * over 37+ outputs). So mul_mat divides by the larger of sum(cpu^2) and
 * the energy expected for zero-mean activations, sum_j |w_j|^2 *
 * sum_r |x_r|^2 / ne0; over many outputs the two agree (plain NMSE), and a
 * wrong result (error ~ output) fails either way. The plain NMSE is
 * printed too ("raw") where it differs.
 *
 * Thresholds: what backend.h allows a GPU to do differently, not what the
 * current kernels happen to give (H200, 2026-12-01: every type <= 2e-13,
 * as they mirror the CPU's activation types; INFERD_CUDA_OPS_STRICT=1
 * checks that). Measured in brackets on the first version, which kept
 * F32 activations and quantized them to q8_1 for every quantized type:
 *  - F32: the same float products, only the summation order differs
 *    (~1e-14): 1e-10 [1e-13].
 *  - F16/BF16: the CPU rounds the activations to the weight type (ggml's
 *    vec-dot type); a GPU that keeps F32 differs by about the rounding's
 *    mean square relative error: F16 (half ulp 2^-12..2^-11) ~3e-8 [1e-7]
 *    -> 1e-5; BF16 (2^-9..2^-8) ~2.5e-6 [5e-6] -> 5e-5.
 *  - quantized: the CPU quantizes activations to Q8_0 (Q4_0/Q8_0) or Q8_K
 *    (K-quants, one scale per 256); a GPU may use its own 8-bit blocks
 *    (q8_1, one scale per 32): two roundings of the same activations,
 *    each ~(amax/127)^2/12 / E[x^2] ~ 1.5e-5 relative for uniform data
 *    [Q8_0 4e-9, Q4_0 2e-6, K-quants 8e-5] -> 1e-3. */
static double mm_threshold(int type)
{
    switch (type) {
    case QT_F32: return 1e-10;
    case QT_F16: return 1e-5;
    case QT_BF16: return 5e-5;
    default: return 1e-3;
    }
}

#define MM_NMAX 512
#define MM_NTAIL 301 /* a batch no MMQ tile divides (the variants' tail check) */

/* x: MM_NMAX activation rows (host; xg: the same on the device); xn[r]:
 * sum of |x_r'|^2 over rows r' < r. */
static void test_mul_mat_shape(int type, int64_t ne0, int64_t ne1, const float *x, const float *xg,
                               const double *xn)
{
    static const int32_t ns[] = {1, 3, 8, 13, 24, 32, 64, 130, MM_NMAX};
    const char *tn = quant_type_name(type);
    const size_t rb = quant_row_bytes(type, ne0);
    float *wf = xmalloc(sizeof(float) * (size_t)(ne0 * ne1));
    char *wq = xmalloc(rb * (size_t)ne1);
    fill(wf, (size_t)(ne0 * ne1), 1.0f);
    double wn = 0; /* sum of |w_j|^2 of the dequantized rows */
    for (int64_t j = 0; j < ne1; j++) {
        CHECK(quant_quantize_weights(type, wf + j * ne0, wq + j * rb, ne0) == 0);
        quant_dequant_row(type, wq + j * rb, wf + j * ne0, ne0);
        wn += sumsq(wf + j * ne0, (size_t)ne0);
    }
    struct backend_weight wc, wg;
    wreg(cpu, &wc, type, ne0, ne1, wq);
    wreg(gpu, &wg, type, ne0, ne1, wq);
    const size_t ny = (size_t)MM_NMAX * (size_t)ne1;
    float *yc = xmalloc(sizeof(float) * ny), *yh = xmalloc(sizeof(float) * ny);
    float *yb = xmalloc(sizeof(float) * ny);
    float *yg = dalloc(sizeof(float) * ny), *ybg = dalloc(sizeof(float) * ny);
    char shape[64];
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        const int32_t n = ns[k];
        cpu->ops->mul_mat(cpu, &wc, x, yc, n);
        CHECK(cpu->ops->sync(cpu) == 0);
        gpu->ops->mul_mat(gpu, &wg, xg, yg, n);
        dget(yh, yg, sizeof(float) * (size_t)n * (size_t)ne1);
        snprintf(shape, sizeof(shape), "ne0=%lld ne1=%lld n=%d", (long long)ne0, (long long)ne1,
                 n);
        const size_t no = (size_t)n * (size_t)ne1;
        const double num = sqdist(yh, yc, no), den = sumsq(yc, no), den_exp = wn * xn[n] / ne0;
        report_raw("mul_mat", tn, shape, num / fmax(den, den_exp), thr_of(mm_threshold(type), 1e-10),
                   num / den);
        /* quantized weights: the CPU's invariant numerics run the GPU's
         * canonical chain (engine/quant_dot.c quant_kernel_invariant, cuda/
         * qtypes.cuh) on the same integer sums, so every output is the
         * CPU's to the bit, whichever kernel the dispatcher took at n */
        if (quant_block_elems(type) > 1)
            report_bits("mm-cpubits", tn, shape, rows_differ(yh, yc, n, ne1), n);
    }
    /* yh holds the n=512 call. Batch invariance: every row again in calls
     * of one row, then in calls of 13 rows (the last one 512 % 13 = 5),
     * which put row r at index r % 13 of its call instead of r, so in
     * another place of the kernels' row groups (eights today) and with
     * other neighbours; all must be the same bits. */
    for (int step = 1; step <= 13; step += 12) {
        for (int32_t r0 = 0; r0 < MM_NMAX; r0 += step) {
            const int32_t n = MM_NMAX - r0 < step ? MM_NMAX - r0 : step;
            gpu->ops->mul_mat(gpu, &wg, xg + (size_t)r0 * ne0, ybg + (size_t)r0 * ne1, n);
        }
        dget(yb, ybg, sizeof(float) * ny);
        snprintf(shape, sizeof(shape), "ne0=%lld ne1=%lld 512 vs n=%d", (long long)ne0,
                 (long long)ne1, step);
        report_bits("mm-invar", tn, shape, rows_differ(yb, yh, MM_NMAX, ne1), MM_NMAX);
    }
    /* Every kernel of the dispatcher's table for this type (mmvq nc=1..8,
     * each mmq<KDR,EXP>, cublas), forced, gives its rows the bits of the
     * dispatcher's own choice at n=512 (yh); the float kernel too where it
     * is the choice; where cuBLAS is (cuda/mm_cublas.cu), the float kernel
     * is the fallback of another summation order: gated like the product
     * against the CPU ("mm-fallbk"). */
    const int via_cublas = cuda_backend_mm_cublas(gpu, &wg);
    for (int v = 0; v < cuda_mm_variant_count(); v++) {
        if (cuda_mm_variant_type(v) != type)
            continue;
        char vn[64];
        cuda_mm_variant_name(v, vn, sizeof(vn));
        int32_t done = 0;
        const int rc = cuda_backend_mm_variant(gpu, v, &wg, xg, ybg, MM_NMAX, &done);
        /* 1: not on this device; INF_EUNSUPPORTED: not for this shape
         * (KDR = 2 needs ne0 % 512 == 0), which the dispatcher never picks */
        CHECK(rc == 0 || rc == 1 || rc == INF_EUNSUPPORTED);
        if (rc)
            continue;
        CHECK(gpu->ops->sync(gpu) == 0);
        dget(yb, ybg, sizeof(float) * (size_t)done * (size_t)ne1);
        char vshape[128];
        snprintf(vshape, sizeof(vshape), "ne0=%lld ne1=%lld %s", (long long)ne0, (long long)ne1, vn);
        const size_t vl = strlen(vn);
        if (via_cublas && vl > 6 && !strcmp(vn + vl - 6, " float")) {
            const size_t no = (size_t)done * (size_t)ne1;
            const double num = sqdist(yb, yc, no), den = sumsq(yc, no), den_exp = wn * xn[done] / ne0;
            report_raw("mm-fallbk", tn, vshape, num / fmax(den, den_exp),
                       thr_of(mm_threshold(type), 1e-10), num / den);
            continue;
        }
        report_bits("mm-variant", tn, vshape, rows_differ(yb, yh, done, ne1), done);
        /* the MMQ tiles (mmqh's too) again at a batch that is no multiple of their 64 or
         * 128 activation rows (the dispatcher's own choice at 512 is): the
         * last block column's rows past the batch are neither loaded nor
         * stored, and the rows before them keep their bits */
        if (done == MM_NMAX && (strstr(vn, " mmq<") || strstr(vn, " mmqh<") || strstr(vn, " mmq6w<") ||
                                 strstr(vn, " mmq4p<"))) {
            CHECK(cuda_backend_mm_variant(gpu, v, &wg, xg, ybg, MM_NTAIL, &done) == 0);
            CHECK(done == MM_NTAIL && gpu->ops->sync(gpu) == 0);
            dget(yb, ybg, sizeof(float) * (size_t)done * (size_t)ne1);
            snprintf(vshape, sizeof(vshape), "ne0=%lld ne1=%lld %s n=%d", (long long)ne0, (long long)ne1, vn,
                     MM_NTAIL);
            report_bits("mm-vartail", tn, vshape, rows_differ(yb, yh, done, ne1), done);
        }
    }
    cpu->ops->weight_release(cpu, &wc);
    gpu->ops->weight_release(gpu, &wg);
    DFREE(yg, ybg);
    HFREE(yc, yh, yb, wf, wq);
}

/* MM_NMAX activation rows of ne0 into x: uniform, with a per-row scale so
 * rows differ in magnitude (0.01 .. 10) as hidden states do; xn[r]: the
 * sum of squares of rows 0..r-1; returns the rows' device copy */
static float *mm_fill_x(float *x, int64_t ne0, double xn[MM_NMAX + 1])
{
    for (int32_t r = 0; r < MM_NMAX; r++)
        fill(x + (size_t)r * ne0, (size_t)ne0, powf(10.0f, 2.0f * frand() - 1.0f));
    xn[0] = 0;
    for (int32_t r = 0; r < MM_NMAX; r++)
        xn[r + 1] = xn[r] + sumsq(x + (size_t)r * ne0, (size_t)ne0);
    return dup_host(x, sizeof(float) * MM_NMAX * (size_t)ne0);
}

static void test_mul_mat(void)
{
    static const int types[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q8_0,
                                QT_Q4_K, QT_Q5_K, QT_Q6_K};
    /* K-quants: 256, 768 (one-super-block stages only) and 1024 (KDR = 2) */
    /* ... and 10240 (40 super-blocks: the decode kernel's 2- and 4-warp
     * rows over several windows; K-quants, 37 rows only) */
    static const int64_t ne0_all[] = {96, 256, 416, 768, 1024, 10240};
    static const int64_t ne1s[] = {1, 37, 301};
    const int64_t ne0_max = 10240;
    float *x = xmalloc(sizeof(float) * MM_NMAX * ne0_max);
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        for (size_t a = 0; a < sizeof(ne0_all) / sizeof(ne0_all[0]); a++) {
            const int64_t ne0 = ne0_all[a];
            if (ne0 % quant_block_elems(types[t]) || (ne0 > 1024 && quant_block_elems(types[t]) != 256))
                continue;
            double xn[MM_NMAX + 1];
            float *xg = mm_fill_x(x, ne0, xn);
            for (size_t b = 0; b < sizeof(ne1s) / sizeof(ne1s[0]); b++)
                if (ne0 <= 1024 || ne1s[b] == 37)
                    test_mul_mat_shape(types[t], ne0, ne1s[b], x, xg, xn);
            dfree(xg);
        }
    }
    /* Q6_K's one-row halves form (cuda/mmvt.cu HV 2, session 56), which
     * cuda_mmvt takes by shape: a block's one 32-row group of several
     * stages (2304 = 9 super-blocks) and at least 2048 rows (64 groups: one
     * a block where the GPU has 64+ SMs); its rows against n = 512's bits
     * and the CPU like every shape above */
    {
        const int64_t ne0 = 2304, ne1 = 2048;
        double xn[MM_NMAX + 1];
        float *xg = mm_fill_x(x, ne0, xn);
        test_mul_mat_shape(QT_Q6_K, ne0, ne1, x, xg, xn);
        dfree(xg);
    }
    free(x);
}

/* ---- F32/F16/BF16 through cuBLASLt (cuda/mm_cublas.cu) -------------------
 *
 * Model-sized and odd shapes (ne1 = 1000: y rows 16-byte aligned; 4097: not)
 * at the row counts a step has (1, 2, 7, 8, 9, 64, 511), gated against the
 * CPU with the mul_mat thresholds above (the products of two 16-bit floats
 * are exact in f32 on both sides, so only the summation order differs);
 * and DESIGN gate 4 for the one-algorithm-per-shape rule: every row of the
 * n=511 call bit-identical to the same row alone (n=1) and in calls of 7
 * written to y + 1 float (misaligned: the output scratch and epilogue
 * kernel path instead of the direct store). `be` is the backend under test
 * (gpu, or one with batch_invariant off: invar = 0 skips the bit checks,
 * which that mode does not promise). Without cuBLASLt the float kernel
 * serves and must pass the same checks; the line says which path ran. */
#define MMC_NMAX 511

static void test_mm_cublas_shape(struct backend *be, int invar, int type, int64_t ne0, int64_t ne1)
{
    static const int32_t ns[] = {1, 2, 7, 8, 9, 64, MMC_NMAX};
    const char *tn = quant_type_name(type);
    const size_t rb = quant_row_bytes(type, ne0);
    float *wf = xmalloc(sizeof(float) * (size_t)ne0), *x = xmalloc(sizeof(float) * MMC_NMAX * (size_t)ne0);
    char *wq = xmalloc(rb * (size_t)ne1);
    double wn = 0;
    for (int64_t j = 0; j < ne1; j++) {
        fill(wf, (size_t)ne0, 1.0f);
        CHECK(quant_quantize_weights(type, wf, wq + (size_t)j * rb, ne0) == 0);
        quant_dequant_row(type, wq + (size_t)j * rb, wf, ne0);
        wn += sumsq(wf, (size_t)ne0);
    }
    double xn[MMC_NMAX + 1] = {0};
    for (int32_t r = 0; r < MMC_NMAX; r++) {
        fill(x + (size_t)r * ne0, (size_t)ne0, powf(10.0f, 2.0f * frand() - 1.0f));
        xn[r + 1] = xn[r] + sumsq(x + (size_t)r * ne0, (size_t)ne0);
    }
    struct backend_weight wc, wg;
    wreg(cpu, &wc, type, ne0, ne1, wq);
    wreg(be, &wg, type, ne0, ne1, wq);
    const int via = cuda_backend_mm_cublas(be, &wg), deq = cuda_backend_mm_deq_min(be, &wg);
    const int quantized = type != QT_F32 && type != QT_F16 && type != QT_BF16;
    const size_t ny = (size_t)MMC_NMAX * (size_t)ne1;
    float *yc = xmalloc(sizeof(float) * ny), *yh = xmalloc(sizeof(float) * ny), *yb = xmalloc(sizeof(float) * ny);
    float *xg = be->ops->alloc(be, sizeof(float) * MMC_NMAX * (size_t)ne0);
    float *yg = be->ops->alloc(be, sizeof(float) * (ny + 1)), *ybg = be->ops->alloc(be, sizeof(float) * (ny + 1));
    CHECK(xg && yg && ybg);
    if (!xg || !yg || !ybg)
        exit(1);
    be->ops->upload(be, xg, x, sizeof(float) * MMC_NMAX * (size_t)ne0);
    char shape[96];
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        const int32_t n = ns[k];
        const size_t no = (size_t)n * (size_t)ne1;
        cpu->ops->mul_mat(cpu, &wc, x, yc, n);
        CHECK(cpu->ops->sync(cpu) == 0);
        be->ops->mul_mat(be, &wg, xg, yg, n);
        CHECK(be->ops->sync(be) == 0);
        be->ops->download(be, yh, yg, sizeof(float) * no);
        CHECK(be->ops->sync(be) == 0);
        snprintf(shape, sizeof(shape), "ne0=%lld ne1=%lld n=%d %s%s", (long long)ne0, (long long)ne1, n,
                 via ? "cublas" : deq && n >= deq ? "f16 cublas" : quantized ? "int8" : "float",
                 invar ? "" : " per-n");
        const double num = sqdist(yh, yc, no), den = sumsq(yc, no), den_exp = wn * xn[n] / ne0;
        report_raw("mm-cublas", tn, shape, num / fmax(den, den_exp), thr_of(mm_threshold(type), 1e-10),
                   num / den);
    }
    /* yh: the n=511 call. Rows alone, then in calls of 7 (the last one 511
     * % 7 = 0 .. 6 rows) at y + 1 float. */
    for (int step = 1; invar && step <= 7; step += 6) {
        const int off = step == 7;
        for (int32_t r0 = 0; r0 < MMC_NMAX; r0 += step) {
            const int32_t n = MMC_NMAX - r0 < step ? MMC_NMAX - r0 : step;
            be->ops->mul_mat(be, &wg, xg + (size_t)r0 * ne0, ybg + off + (size_t)r0 * ne1, n);
        }
        CHECK(be->ops->sync(be) == 0);
        be->ops->download(be, yb, ybg + off, sizeof(float) * ny);
        CHECK(be->ops->sync(be) == 0);
        snprintf(shape, sizeof(shape), "ne0=%lld ne1=%lld 511 vs n=%d%s %s", (long long)ne0, (long long)ne1,
                 step, off ? " y+1" : "", via ? "cublas" : "float");
        report_bits("mmc-invar", tn, shape, rows_differ(yb, yh, MMC_NMAX, ne1), MMC_NMAX);
    }
    cpu->ops->weight_release(cpu, &wc);
    be->ops->weight_release(be, &wg);
    be->ops->free(be, xg);
    be->ops->free(be, yg);
    be->ops->free(be, ybg);
    HFREE(yc, yh, yb, wf, wq, x);
}

static void test_mm_deq(struct backend *pn, int type);
static void test_mm_deq_resident(struct backend *pn, struct backend *pf, int type);

static void test_mul_mat_cublas(void)
{
    static const int types[] = {QT_F32, QT_F16, QT_BF16};
    static const int64_t shapes[][2] = {{256, 1000}, {4096, 4097}};
    for (size_t t = 0; t < 3; t++)
        for (size_t s = 0; s < 2; s++)
            test_mm_cublas_shape(gpu, 1, types[t], shapes[s][0], shapes[s][1]);
    /* batch_invariant = false: a backend of its own (the mode is fixed
     * before its first weight); only the CPU gate applies */
    struct inf_error err;
    memset(&err, 0, sizeof(err));
    /* the K-quants' F16 path from 64 rows (the default is 256 on sm_90,
     * off elsewhere: cuda/mm_deq.cu; 64 puts this file's shapes on it),
     * read at cuda_backend_new; a value the caller set stays */
    setenv("INFERD_MMD_MIN", "64", 0);
    struct backend *pn = cuda_backend_new(0, &err);
    CHECK(pn != NULL);
    if (!pn)
        return;
    CHECK(cuda_backend_set_batch_invariant(pn, 0) == 0);
    const struct backend_reserve rs = {512, 4096, 16, 1, 1};
    CHECK(pn->ops->reserve(pn, &rs) == 0);
    test_mm_cublas_shape(pn, 0, QT_F16, 4096, 4097);
    test_mm_cublas_shape(pn, 0, QT_BF16, 256, 1000);
    /* and the K-quants' F16 path of that mode (cuda/mm_deq.cu): the CPU
     * gate at every n (below the path's first row count: the int8
     * kernels), its own tighter gate, and the fused sets (test_mm_deq) */
    static const int kq[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K};
    for (size_t t = 0; t < 3; t++) {
        test_mm_cublas_shape(pn, 0, kq[t], 4096, 4097);
        test_mm_deq(pn, kq[t]);
    }
    /* the same mode with resident F16 copies (config f16_weights_mb): 1
     * MiB, so of test_mm_deq_resident's two 1024 x 512 weights (1 MiB as
     * F16 each) the first gets a copy and the second does not */
    struct backend *pf = cuda_backend_new(0, &err);
    CHECK(pf != NULL);
    if (pf) {
        CHECK(cuda_backend_set_batch_invariant(pf, 0) == 0);
        CHECK(cuda_backend_set_f16_weights(pf, (size_t)1 << 20) == 0);
        CHECK(pf->ops->reserve(pf, &rs) == 0);
        for (size_t t = 0; t < 3; t++)
            test_mm_deq_resident(pn, pf, kq[t]);
        backend_free(pf);
    }
    backend_free(pn);
}

/* ---- get_rows, gather ---------------------------------------------------- */

/* get_rows dequantizes with the same formulas on both sides; the GPU may
 * contract d*sc*q - dmin*m into one FMA (last-bit differences): 1e-10. */
/* ops->mul_mat_ex (one activation through several weights, bias and
 * residual epilogues) gives the bits of mul_mat then add_bias / add, on
 * mixed weight types sharing the activation (Q/K/V of a Q4_K_M model:
 * q4_K, q4_K, q6_K; plus q8_0 and f16 so two quantizations and the float
 * kernel meet in one call), at decode and prefill row counts. */
static void test_mul_mat_ex(void)
{
    if (!gpu->ops->mul_mat_ex) {
        printf("mul_mat_ex: not in the cuda op table\n");
        fails++;
        return;
    }
    enum { NE0 = 512, NE1 = 96, NOUT = 5 };
    static const int types[NOUT] = {QT_Q4_K, QT_Q4_K, QT_Q6_K, QT_Q8_0, QT_F16};
    static const int32_t ns[] = {1, 5, 8, 40, 300};
    const int32_t nmax = 300;
    struct backend_weight w[NOUT], b;
    char *wq[NOUT];
    float *wf = xmalloc(sizeof(float) * NE0 * NE1);
    for (int i = 0; i < NOUT; i++) {
        const size_t rb = quant_row_bytes(types[i], NE0);
        wq[i] = xmalloc(rb * NE1);
        fill(wf, (size_t)NE0 * NE1, 1.0f);
        for (int j = 0; j < NE1; j++)
            CHECK(quant_quantize_weights(types[i], wf + (size_t)j * NE0, wq[i] + (size_t)j * rb, NE0) == 0);
        wreg(gpu, &w[i], types[i], NE0, NE1, wq[i]);
    }
    float *bh = xmalloc(sizeof(float) * NE1);
    fill(bh, NE1, 1.0f);
    wreg(gpu, &b, QT_F32, NE1, 1, bh);
    float *x = xmalloc(sizeof(float) * (size_t)nmax * NE0);
    fill(x, (size_t)nmax * NE0, 3.0f);
    float *y0 = xmalloc(sizeof(float) * (size_t)nmax * NE1);
    fill(y0, (size_t)nmax * NE1, 2.0f);
    float *xg = dup_host(x, sizeof(float) * (size_t)nmax * NE0);
    float *ya[NOUT], *yb[NOUT];
    for (int i = 0; i < NOUT; i++) {
        ya[i] = dalloc(sizeof(float) * (size_t)nmax * NE1);
        yb[i] = dalloc(sizeof(float) * (size_t)nmax * NE1);
    }
    float *tmp = dalloc(sizeof(float) * (size_t)nmax * NE1);
    float *ha = xmalloc(sizeof(float) * (size_t)nmax * NE1), *hb = xmalloc(sizeof(float) * (size_t)nmax * NE1);
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        const int32_t n = ns[k];
        const size_t ny = sizeof(float) * (size_t)n * NE1;
        struct backend_mm_out o[NOUT];
        for (int i = 0; i < NOUT; i++) {
            /* out 0 and 3 with a bias, 1 and 4 accumulating into y0, 2 plain */
            const int acc = i == 1 || i == 4, bias = i == 0 || i == 3;
            gpu->ops->upload(gpu, ya[i], y0, ny);
            gpu->ops->upload(gpu, yb[i], y0, ny);
            gpu->ops->mul_mat(gpu, &w[i], xg, acc ? tmp : ya[i], n);
            if (bias)
                gpu->ops->add_bias(gpu, ya[i], &b, n);
            if (acc)
                gpu->ops->add(gpu, ya[i], tmp, (int64_t)n * NE1);
            o[i] = (struct backend_mm_out){&w[i], yb[i], bias ? &b : NULL, acc};
        }
        gpu->ops->mul_mat_ex(gpu, xg, n, o, NOUT);
        CHECK(gpu->ops->sync(gpu) == 0);
        for (int i = 0; i < NOUT; i++) {
            dget(ha, ya[i], ny);
            dget(hb, yb[i], ny);
            char shape[96];
            snprintf(shape, sizeof(shape), "ne0=%d ne1=%d n=%d %s", NE0, NE1, n,
                     i == 1 || i == 4 ? "accumulate" : i == 0 || i == 3 ? "bias" : "plain");
            report_bits("mm-ex", quant_type_name(types[i]), shape, rows_differ(hb, ha, n, NE1), n);
        }
    }
    for (int i = 0; i < NOUT; i++) {
        gpu->ops->weight_release(gpu, &w[i]);
        DFREE(ya[i], yb[i]);
        free(wq[i]);
    }
    gpu->ops->weight_release(gpu, &b);
    DFREE(xg, tmp);
    HFREE(wf, bh, x, y0, ha, hb);
}

/* ops->weight_fuse + mul_mat_ex over the fused rows: one launch whose
 * segmented epilogue stores each weight's rows to its own output gives
 * the bits of separate mul_mat then add_bias / add on unfused copies of
 * the same bytes, for Q/K/V-like sets (3 weights, ne1 not multiples of
 * the 64-row tile, so tiles straddle segments) and gate/up-like pairs,
 * bias on the first segment only, accumulate on one segment; also a
 * member alone (plain mul_mat on a slice), a sub-run of the group, and
 * outs of one group that are not adjacent (separate launches). */
enum { FU_NE0 = 512, FU_NMAX = 300, FU_MAXW = 3 };

static void fused_case(const char *tn, const char *what, struct backend_weight *const *wf,
                       struct backend_weight *const *ws, int k, int32_t n, int bias_seg, int acc_seg,
                       const struct backend_weight *b, const float *xg, const float *y0, float **ya,
                       float **yb, float *tmp, float *ha, float *hb)
{
    struct backend_mm_out o[FU_MAXW];
    for (int i = 0; i < k; i++) {
        const size_t ny = sizeof(float) * (size_t)n * (size_t)ws[i]->ne1;
        const int acc = i == acc_seg, bias = i == bias_seg;
        gpu->ops->upload(gpu, ya[i], y0, ny);
        gpu->ops->upload(gpu, yb[i], y0, ny);
        gpu->ops->mul_mat(gpu, ws[i], xg, acc ? tmp : ya[i], n);
        if (bias)
            gpu->ops->add_bias(gpu, acc ? tmp : ya[i], b, n);
        if (acc)
            gpu->ops->add(gpu, ya[i], tmp, (int64_t)n * ws[i]->ne1);
        o[i] = (struct backend_mm_out){wf[i], yb[i], bias ? b : NULL, acc};
    }
    gpu->ops->mul_mat_ex(gpu, xg, n, o, k);
    CHECK(gpu->ops->sync(gpu) == 0);
    int bad = 0, total = 0;
    for (int i = 0; i < k; i++) {
        const size_t ny = sizeof(float) * (size_t)n * (size_t)ws[i]->ne1;
        dget(ha, ya[i], ny);
        dget(hb, yb[i], ny);
        bad += rows_differ(hb, ha, n, ws[i]->ne1);
        total += n;
    }
    char shape[96];
    snprintf(shape, sizeof(shape), "%s k=%d n=%d bias=%d acc=%d", what, k, n, bias_seg, acc_seg);
    report_bits("mm-fused", tn, shape, bad, total);
}

/* ops->mul_mat_swiglu on a gate/up pair (w[0], w[1]): silu(gate) * up
 * must be bit-identical to mul_mat_ex of the unfused copies (ws) then
 * silu_mul, whether the pair is a fused group (the MMQ kernels' SwiGLU
 * epilogue past 8 rows, cuda/tiles.cuh) or not (the two ops). F = 100 is
 * not a multiple of the 32 gate rows an MMQ block pairs, and its last
 * 100 % 8 columns take the CPU's libm exp, not the polynomial. */
static void swiglu_case(const char *tn, const char *what, struct backend_weight *const *w,
                        struct backend_weight *const *ws, int32_t n, const float *xg, float **ya, float **yb,
                        float *ha, float *hb)
{
    const int64_t F = ws[0]->ne1;
    const struct backend_mm_out o[2] = {{ws[0], ya[0], NULL, 0}, {ws[1], ya[1], NULL, 0}};
    gpu->ops->mul_mat_ex(gpu, xg, n, o, 2);
    gpu->ops->silu_mul(gpu, ya[0], ya[1], (int64_t)n * F, F);
    gpu->ops->mul_mat_swiglu(gpu, xg, n, w[0], w[1], yb[0], yb[1]);
    CHECK(gpu->ops->sync(gpu) == 0);
    const size_t ny = sizeof(float) * (size_t)n * (size_t)F;
    dget(ha, ya[0], ny);
    dget(hb, yb[0], ny);
    char shape[64];
    snprintf(shape, sizeof(shape), "%s F=%lld n=%d", what, (long long)F, n);
    report_bits("mm-swiglu", tn, shape, rows_differ(hb, ha, n, F), n);
}

/* One weight set of type `type` (ne1s[0..k)), fused (wf) and not (ws). */
static void test_mul_mat_fused_set(int type, int expand, const int64_t *ne1s, int k, const float *xg,
                                   const float *y0, float **ya, float **yb, float *tmp, float *ha,
                                   float *hb)
{
    static const int32_t ns[] = {1, 5, 8, 9, 64, FU_NMAX};
    const size_t rb = quant_row_bytes(type, FU_NE0);
    struct backend_weight wfa[FU_MAXW], wsa[FU_MAXW], b;
    struct backend_weight *wf[FU_MAXW], *ws[FU_MAXW];
    char *wq[FU_MAXW];
    float *wtmp = xmalloc(sizeof(float) * FU_NE0 * 256);
    int64_t bmax = 0;
    if (!expand) /* read at each weight_register (cuda/weights.cu) */
        setenv("INFERD_NO_Q6K_EXPAND", "1", 1);
    for (int i = 0; i < k; i++) {
        wq[i] = xmalloc(rb * (size_t)ne1s[i]);
        for (int64_t j = 0; j < ne1s[i]; j++) {
            fill(wtmp, FU_NE0, 1.0f);
            CHECK(quant_quantize_weights(type, wtmp, wq[i] + (size_t)j * rb, FU_NE0) == 0);
        }
        wreg(gpu, &wfa[i], type, FU_NE0, ne1s[i], wq[i]);
        wreg(gpu, &wsa[i], type, FU_NE0, ne1s[i], wq[i]);
        wf[i] = &wfa[i];
        ws[i] = &wsa[i];
        bmax = ne1s[i] > bmax ? ne1s[i] : bmax;
    }
    unsetenv("INFERD_NO_Q6K_EXPAND");
    const char *tn = type == QT_Q6_K ? (expand ? "q6_Kx" : "q6_K") : quant_type_name(type);
    if (type == QT_Q6_K)
        CHECK(!wfa[0].aux == !expand);
    void *const data0 = wfa[0].data;
    if (type == QT_F32 || type == QT_F16 || type == QT_BF16) {
        /* float weights are not fused (cuda/weights.cu: one cuBLASLt
         * algorithm per shape), and stay as they were */
        CHECK(gpu->ops->weight_fuse(gpu, wf, k) == INF_EUNSUPPORTED);
        CHECK(wfa[0].data == data0 && !wfa[0].group);
        report_bits("mm-fused", tn, "refused (float type)", 0, 1);
        if (k == 2)
            for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++)
                swiglu_case(tn, "unfused", wf, ws, ns[t], xg, ya, yb, ha, hb);
        for (int i = 0; i < k; i++) {
            gpu->ops->weight_release(gpu, wf[i]);
            gpu->ops->weight_release(gpu, ws[i]);
            free(wq[i]);
        }
        free(wtmp);
        return;
    }
    CHECK(gpu->ops->weight_fuse(gpu, wf, k) == 0);
    CHECK(gpu->ops->sync(gpu) == 0);
    CHECK(wfa[0].data != data0); /* moved into the group */
    int adj = 1;
    for (int i = 0; i + 1 < k; i++) {
        adj &= (char *)wfa[i + 1].data == (char *)wfa[i].data + (size_t)ne1s[i] * rb;
        adj &= wfa[i].group && wfa[i].group == wfa[i + 1].group;
        if (wfa[i].aux) /* Q6_K expanded: 288 bytes per super-block (cuda/mmqk_impl.cuh) */
            adj &= (char *)wfa[i + 1].aux == (char *)wfa[i].aux + (size_t)(FU_NE0 / QK_K) * 288 * (size_t)ne1s[i];
    }
    CHECK(adj);
    /* a fused weight cannot be fused again */
    CHECK(gpu->ops->weight_fuse(gpu, wf, k) == INF_EINVAL);
    float *bh = xmalloc(sizeof(float) * (size_t)bmax);
    fill(bh, (size_t)bmax, 1.0f);
    wreg(gpu, &b, QT_F32, bmax, 1, bh); /* only the first segment takes a bias: ne1s[0] == bmax */
    for (size_t t = 0; t < sizeof(ns) / sizeof(ns[0]); t++) {
        const int32_t n = ns[t];
        /* bias on the first segment only; then accumulate on the last too */
        fused_case(tn, "all", wf, ws, k, n, 0, -1, &b, xg, y0, ya, yb, tmp, ha, hb);
        fused_case(tn, "all", wf, ws, k, n, 0, k - 1, &b, xg, y0, ya, yb, tmp, ha, hb);
        fused_case(tn, "all", wf, ws, k, n, -1, 0, &b, xg, y0, ya, yb, tmp, ha, hb);
        if (k == 3) {
            /* a sub-run of the group (K, V), and Q with V (not adjacent) */
            fused_case(tn, "tail", wf + 1, ws + 1, 2, n, -1, 1, &b, xg, y0, ya, yb, tmp, ha, hb);
            struct backend_weight *qvf[2] = {wf[0], wf[2]}, *qvs[2] = {ws[0], ws[2]};
            fused_case(tn, "q+v", qvf, qvs, 2, n, 0, 1, &b, xg, y0, ya, yb, tmp, ha, hb);
        }
        if (k == 2) {
            swiglu_case(tn, "fused", wf, ws, n, xg, ya, yb, ha, hb);
            swiglu_case(tn, "unfused", ws, ws, n, xg, ya, yb, ha, hb);
        }
        /* each member alone through plain mul_mat (a slice's own launch) */
        int bad = 0;
        for (int i = 0; i < k; i++) {
            const size_t ny = sizeof(float) * (size_t)n * (size_t)ne1s[i];
            gpu->ops->mul_mat(gpu, ws[i], xg, ya[i], n);
            gpu->ops->mul_mat(gpu, wf[i], xg, yb[i], n);
            dget(ha, ya[i], ny);
            dget(hb, yb[i], ny);
            bad += rows_differ(hb, ha, n, ne1s[i]);
        }
        char shape[64];
        snprintf(shape, sizeof(shape), "members alone k=%d n=%d", k, n);
        report_bits("mm-fused", tn, shape, bad, k * n);
    }
    /* released out of order: the group goes with its last member */
    for (int i = k - 1; i >= 0; i--) {
        gpu->ops->weight_release(gpu, wf[(i + 1) % k]);
        gpu->ops->weight_release(gpu, ws[i]);
    }
    for (int i = 0; i < k; i++)
        CHECK(wfa[i].data == NULL && wfa[i].aux == NULL && wfa[i].group == NULL);
    CHECK(gpu->ops->sync(gpu) == 0);
    gpu->ops->weight_release(gpu, &b);
    for (int i = 0; i < k; i++)
        free(wq[i]);
    HFREE(bh, wtmp);
}

/* The fused sets of types[0..nt) on gpu (Q6_K with and without its
 * expanded copy) */
static void test_mul_mat_fused_types(const int *types, int nt)
{
    static const int64_t qkv[3] = {136, 40, 40}, gu[2] = {100, 100};
    const int64_t ymax = 136;
    float *x = xmalloc(sizeof(float) * FU_NMAX * FU_NE0);
    fill(x, (size_t)FU_NMAX * FU_NE0, 3.0f);
    float *y0 = xmalloc(sizeof(float) * FU_NMAX * (size_t)ymax);
    fill(y0, (size_t)FU_NMAX * (size_t)ymax, 2.0f);
    float *xg = dup_host(x, sizeof(float) * FU_NMAX * FU_NE0);
    float *ya[FU_MAXW], *yb[FU_MAXW];
    for (int i = 0; i < FU_MAXW; i++) {
        ya[i] = dalloc(sizeof(float) * FU_NMAX * (size_t)ymax);
        yb[i] = dalloc(sizeof(float) * FU_NMAX * (size_t)ymax);
    }
    float *tmp = dalloc(sizeof(float) * FU_NMAX * (size_t)ymax);
    float *ha = xmalloc(sizeof(float) * FU_NMAX * (size_t)ymax);
    float *hb = xmalloc(sizeof(float) * FU_NMAX * (size_t)ymax);
    for (int t = 0; t < nt; t++)
        for (int expand = types[t] == QT_Q6_K; expand >= 0; expand--) {
            test_mul_mat_fused_set(types[t], expand, qkv, 3, xg, y0, ya, yb, tmp, ha, hb);
            test_mul_mat_fused_set(types[t], expand, gu, 2, xg, y0, ya, yb, tmp, ha, hb);
        }
    for (int i = 0; i < FU_MAXW; i++)
        DFREE(ya[i], yb[i]);
    DFREE(xg, tmp);
    HFREE(x, y0, ha, hb);
}

static void test_mul_mat_fused(void)
{
    if (!gpu->ops->weight_fuse) {
        printf("weight_fuse: not in the cuda op table\n");
        fails++;
        return;
    }
    static const int types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q8_0, QT_Q4_0, QT_F16};
    test_mul_mat_fused_types(types, (int)(sizeof(types) / sizeof(types[0])));
    /* refused: one weight, mixed types, one weight twice; nothing moves */
    {
        const size_t r4 = quant_row_bytes(QT_Q4_K, FU_NE0), r8 = quant_row_bytes(QT_Q8_0, FU_NE0);
        char *b4 = calloc(8, r4), *b8 = calloc(8, r8);
        struct backend_weight a, c;
        wreg(gpu, &a, QT_Q4_K, FU_NE0, 8, b4);
        wreg(gpu, &c, QT_Q8_0, FU_NE0, 8, b8);
        void *const da = a.data, *const dc = c.data;
        struct backend_weight *mix[2] = {&a, &c}, *twice[2] = {&a, &a};
        const int r1 = gpu->ops->weight_fuse(gpu, mix, 1), r2 = gpu->ops->weight_fuse(gpu, mix, 2),
                  r3 = gpu->ops->weight_fuse(gpu, twice, 2);
        const int ok = r1 == INF_EINVAL && r2 == INF_EINVAL && r3 == INF_EINVAL && a.data == da &&
                       c.data == dc && !a.group && !c.group;
        report_bits("fuse-refuse", "mixed", "n=1, q4_K+q8_0, a+a", !ok, 1);
        gpu->ops->weight_release(gpu, &a);
        gpu->ops->weight_release(gpu, &c);
        CHECK(gpu->ops->sync(gpu) == 0);
        HFREE(b4, b8);
    }
}

static void test_get_rows(int type, int64_t ne0)
{
    enum { NROW = 301, NID = 97 };
    const size_t rb = quant_row_bytes(type, ne0);
    float *wf = xmalloc(sizeof(float) * NROW * (size_t)ne0);
    char *wq = xmalloc(rb * NROW);
    fill(wf, NROW * (size_t)ne0, 2.0f);
    for (int j = 0; j < NROW; j++)
        CHECK(quant_quantize_weights(type, wf + (size_t)j * ne0, wq + (size_t)j * rb, ne0) == 0);
    int32_t ids[NID];
    for (int i = 0; i < NID; i++) /* random order, repeats, both ends */
        ids[i] = i == 0 ? NROW - 1 : i == 1 ? 0 : i % 7 == 3 ? ids[i - 2] : irand(NROW);
    struct backend_weight wc, wg;
    wreg(cpu, &wc, type, ne0, NROW, wq);
    wreg(gpu, &wg, type, ne0, NROW, wq);
    const size_t ny = NID * (size_t)ne0;
    float *yc = xmalloc(sizeof(float) * ny), *yh = xmalloc(sizeof(float) * ny);
    int32_t *idg = dup_host(ids, sizeof(ids));
    float *yg = dalloc(sizeof(float) * ny);
    cpu->ops->get_rows(cpu, &wc, ids, NID, yc);
    gpu->ops->get_rows(gpu, &wg, idg, NID, yg);
    dget(yh, yg, sizeof(float) * ny);
    char shape[64];
    snprintf(shape, sizeof(shape), "ne0=%lld rows=%d ids=%d", (long long)ne0, NROW, NID);
    report("get_rows", quant_type_name(type), shape, nmse(yh, yc, ny), 1e-10);
    cpu->ops->weight_release(cpu, &wc);
    gpu->ops->weight_release(gpu, &wg);
    DFREE(idg, yg);
    HFREE(yc, yh, wf, wq);
}

/* gather copies rows: bit-exact. */
static void test_gather(void)
{
    enum { ROWS = 64, LEN = 896, N = 100 };
    float *x = xmalloc(sizeof(float) * ROWS * LEN);
    float *yc = xmalloc(sizeof(float) * N * LEN), *yh = xmalloc(sizeof(float) * N * LEN);
    int32_t rows[N];
    fill(x, ROWS * LEN, 5.0f);
    for (int i = 0; i < N; i++)
        rows[i] = i % 9 == 4 ? rows[i - 1] : irand(ROWS);
    float *xg = dup_host(x, sizeof(float) * ROWS * LEN), *yg = dalloc(sizeof(float) * N * LEN);
    int32_t *rg = dup_host(rows, sizeof(rows));
    cpu->ops->gather(cpu, x, rows, N, LEN, yc);
    gpu->ops->gather(gpu, xg, rg, N, LEN, yg);
    dget(yh, yg, sizeof(float) * N * LEN);
    report_bits("gather", "f32", "rows=64 len=896 n=100", rows_differ(yh, yc, N, LEN), N);
    DFREE(xg, yg, rg);
    HFREE(x, yc, yh);
}

#endif
