/* cuda_ops_deq — test_cuda_ops.c's cases of the F16 path of
 * batch_invariant = false (cuda/mm_deq.cu): mm-deq (the product against the
 * exact one, the fused sets) and mm-deq-res (resident F16 copies,
 * config f16_weights_mb). Header-only, included once by test_cuda_ops.c
 * after cuda_ops_mm.h (whose test_mul_mat_cublas calls these and whose
 * fused-set helpers they use). */
#ifndef INFERD_TESTS_CUDA_OPS_DEQ_H
#define INFERD_TESTS_CUDA_OPS_DEQ_H

#include "engine/cuda/cuda.h"
#include "engine/quant.h"
#include "tests/cuda/cuda_ops_mm.h"

/* batch_invariant = false, K-quants from INFERD_MMD_MIN rows (64): the
 * weight as F16 through cuBLASLt (cuda/mm_deq.cu). Against the exact
 * product of the dequantized weights (double sums): F16 rounding of
 * weight and activation gives NMSE ~1e-7, the int8 path's Q8_K
 * activations ~1e-5, so 1e-6 also says which path ran. Then the fused
 * sets of test_mul_mat_fused on that backend: each segment's own GEMM,
 * SwiGLU as two products and silu_mul, bit-identical to the unfused
 * copies' products there (same shape, same algorithm). */
static void test_mm_deq(struct backend *pn, int type)
{
    enum { NE0 = 1024, NE1 = 200, N = 100 };
    const char *tn = quant_type_name(type);
    const size_t rb = quant_row_bytes(type, NE0);
    float *wf = xmalloc(sizeof(float) * NE0 * NE1), *x = xmalloc(sizeof(float) * N * NE0);
    float *yr = xmalloc(sizeof(float) * N * NE1), *yh = xmalloc(sizeof(float) * N * NE1);
    char *wq = xmalloc(rb * NE1);
    fill(wf, (size_t)NE0 * NE1, 1.0f);
    fill(x, (size_t)N * NE0, 2.0f);
    for (int j = 0; j < NE1; j++) {
        CHECK(quant_quantize_weights(type, wf + (size_t)j * NE0, wq + (size_t)j * rb, NE0) == 0);
        quant_dequant_row(type, wq + (size_t)j * rb, wf + (size_t)j * NE0, NE0);
    }
    for (int r = 0; r < N; r++)
        for (int j = 0; j < NE1; j++) {
            double acc = 0;
            for (int k = 0; k < NE0; k++)
                acc += (double)wf[(size_t)j * NE0 + k] * (double)x[(size_t)r * NE0 + k];
            yr[(size_t)r * NE1 + j] = (float)acc;
        }
    struct backend_weight w;
    wreg(pn, &w, type, NE0, NE1, wq);
    float *xg = pn->ops->alloc(pn, sizeof(float) * N * NE0), *yg = pn->ops->alloc(pn, sizeof(float) * N * NE1);
    CHECK(xg && yg);
    if (xg && yg) {
        pn->ops->upload(pn, xg, x, sizeof(float) * N * NE0);
        pn->ops->mul_mat(pn, &w, xg, yg, N);
        CHECK(pn->ops->sync(pn) == 0);
        pn->ops->download(pn, yh, yg, sizeof(float) * N * NE1);
        CHECK(pn->ops->sync(pn) == 0);
        /* without cuBLASLt (INFERD_NO_CUBLAS) the int8 kernels serve: their gate */
        const int deq = cuda_backend_mm_deq_min(pn, &w);
        report_raw("mm-deq", tn, deq ? "ne0=1024 ne1=200 n=100 f16 vs exact" : "ne0=1024 ne1=200 n=100 int8 vs exact",
                   nmse(yh, yr, (size_t)N * NE1), deq ? 1e-6 : 1e-3, -1);
    }
    pn->ops->weight_release(pn, &w);
    pn->ops->free(pn, xg);
    pn->ops->free(pn, yg);
    HFREE(wf, x, yr, yh, wq);
    /* the fused sets, on pn (the helpers use the file's gpu) */
    struct backend *const saved = gpu;
    gpu = pn;
    test_mul_mat_fused_types(&type, 1);
    gpu = saved;
}

/* Resident F16 copies (cuda_backend_set_f16_weights): pf keeps 1 MiB of
 * them, pn none. Two 1024 x 512 weights a and b registered on both: a fits
 * pf's budget, b does not (it takes the per-product copy). The products at
 * 100 rows (the path from 64) on pf give pn's bits for both (same kernel,
 * same GEMM algorithm); then a and b fused on pf (b's rows right after
 * a's: the view's first segment is a's resident copy, the second b's
 * scratch copy), a is still found resident (re-keyed to its new rows) and
 * mul_mat_ex over the pair gives the unfused bits. */
static void test_mm_deq_resident(struct backend *pn, struct backend *pf, int type)
{
    enum { NE0 = 1024, NE1 = 512, N = 100 };
    const char *tn = quant_type_name(type);
    const size_t rb = quant_row_bytes(type, NE0);
    float *wf = xmalloc(sizeof(float) * NE0 * NE1), *x = xmalloc(sizeof(float) * N * NE0);
    char *wq[2] = {xmalloc(rb * NE1), xmalloc(rb * NE1)};
    float *yh[4];
    for (int i = 0; i < 4; i++)
        yh[i] = xmalloc(sizeof(float) * N * NE1);
    fill(x, (size_t)N * NE0, 2.0f);
    for (int k = 0; k < 2; k++) {
        fill(wf, (size_t)NE0 * NE1, 1.0f);
        for (int j = 0; j < NE1; j++)
            CHECK(quant_quantize_weights(type, wf + (size_t)j * NE0, wq[k] + (size_t)j * rb, NE0) == 0);
    }
    struct backend_weight wn[2], wp[2];
    struct backend *be[2] = {pn, pf};
    float *xg[2], *yg[2][2];
    for (int b = 0; b < 2; b++) {
        xg[b] = be[b]->ops->alloc(be[b], sizeof(float) * N * NE0);
        yg[b][0] = be[b]->ops->alloc(be[b], sizeof(float) * N * NE1);
        yg[b][1] = be[b]->ops->alloc(be[b], sizeof(float) * N * NE1);
        CHECK(xg[b] && yg[b][0] && yg[b][1]);
        be[b]->ops->upload(be[b], xg[b], x, sizeof(float) * N * NE0);
        for (int k = 0; k < 2; k++)
            wreg(be[b], b ? &wp[k] : &wn[k], type, NE0, NE1, wq[k]);
    }
    /* without cuBLASLt (INFERD_NO_CUBLAS=1) the path never takes a
     * product (MMQ serves), so no weight gets a copy */
    const int path = cuda_backend_mm_deq_min(pn, &wn[0]) > 0;
    const int res_a = cuda_backend_mm_deq_resident(pf, &wp[0]), res_b = cuda_backend_mm_deq_resident(pf, &wp[1]);
    CHECK(cuda_backend_f16_bytes(pf) == (path ? (size_t)NE0 * NE1 * 2 : 0));
    report_bits("mm-deq-res", tn,
                path ? "resident: a yes, b no (1 MiB), pn none" : "no cuBLASLt: no resident copies",
                !(res_a == path && !res_b && !cuda_backend_mm_deq_resident(pn, &wn[0])), 1);
    /* separate products: pn's bits on pf, a (resident) and b (per product) */
    for (int b = 0; b < 2; b++) {
        for (int k = 0; k < 2; k++)
            be[b]->ops->mul_mat(be[b], b ? &wp[k] : &wn[k], xg[b], yg[b][k], N);
        CHECK(be[b]->ops->sync(be[b]) == 0);
        for (int k = 0; k < 2; k++)
            be[b]->ops->download(be[b], yh[2 * b + k], yg[b][k], sizeof(float) * N * NE1);
        CHECK(be[b]->ops->sync(be[b]) == 0);
    }
    report_bits("mm-deq-res", tn, "n=100 resident copy vs per product", rows_differ(yh[2], yh[0], N, NE1), N);
    report_bits("mm-deq-res", tn, "n=100 over budget vs per product", rows_differ(yh[3], yh[1], N, NE1), N);
    /* fused on pf: a's copy follows its rows */
    struct backend_weight *pair[2] = {&wp[0], &wp[1]};
    const int frc = pf->ops->weight_fuse(pf, pair, 2);
    CHECK(frc == 0);
    if (frc == 0) {
        const struct backend_mm_out outs[2] = {{&wp[0], yg[1][0], NULL, 0}, {&wp[1], yg[1][1], NULL, 0}};
        pf->ops->mul_mat_ex(pf, xg[1], N, outs, 2);
        CHECK(pf->ops->sync(pf) == 0);
        for (int k = 0; k < 2; k++)
            pf->ops->download(pf, yh[2 + k], yg[1][k], sizeof(float) * N * NE1);
        CHECK(pf->ops->sync(pf) == 0);
        report_bits("mm-deq-res", tn, path ? "fused a+b: a still resident" : "fused a+b: still no copy",
                    cuda_backend_mm_deq_resident(pf, &wp[0]) != path, 1);
        report_bits("mm-deq-res", tn, "fused a+b n=100 vs unfused",
                    rows_differ(yh[2], yh[0], N, NE1) + rows_differ(yh[3], yh[1], N, NE1), 2 * N);
    }
    for (int b = 0; b < 2; b++) {
        for (int k = 0; k < 2; k++)
            be[b]->ops->weight_release(be[b], b ? &wp[k] : &wn[k]);
        be[b]->ops->free(be[b], xg[b]);
        be[b]->ops->free(be[b], yg[b][0]);
        be[b]->ops->free(be[b], yg[b][1]);
    }
    CHECK(cuda_backend_f16_bytes(pf) == 0);
    HFREE(wf, x, wq[0], wq[1], yh[0], yh[1], yh[2], yh[3]);
}

#endif
