/* cuda/prewarm — launch every kernel the dispatcher can choose once, on
 * scratch data, before the daemon reports ready: CUDA loads a module's
 * kernels lazily at their first launch, which would otherwise land on the
 * first request that needs each one. The products come from the
 * dispatcher's own table (cuda/mul_mat.cu: float, cublas, warp-per-row, mmvq
 * nc=1/2/4/8, MMQ, the K-quant mmq<KDR,EXP> instantiations), the cuBLASLt
 * algorithm of every registered F32/F16/BF16 weight shape, then every
 * other op's variants (rms_norm per-warp/per-block, RoPE llama/neox, both
 * activation quantizers). Each is timed (host clock around launch + sync)
 * and reported; the first failure stops it.
 */
#include <stdio.h>
#include <time.h>

#include "engine/cuda/common.cuh"
#include "engine/cuda/mmq.cuh"

extern "C" {
#include "engine/cuda/cuda.h"
#include "engine/quant.h"
}

static double pw_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

#define PW_N 64    /* activation rows: past MM_COLS, so MMQ runs */
#define PW_NE0 512 /* two K-quant super-blocks per row: KDR = 2 runs */

extern "C" int cuda_be_prewarm(struct backend *be,
                               void (*report)(void *ud, const char *name, double ms), void *ud)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return c->err;
    const struct backend_reserve res = {PW_N, PW_NE0, 16, 4, 64};
    int rc = be->ops->reserve(be, &res);
    if (rc)
        return rc;
    /* scratch: zeroed bytes are valid blocks of every type (all scales 0) */
    const size_t wbytes = (size_t)PW_N * PW_NE0 * sizeof(float);
    uint8_t *wd = (uint8_t *)be->ops->alloc(be, wbytes);
    float *x = (float *)be->ops->alloc(be, sizeof(float) * PW_N * PW_NE0);
    float *y = (float *)be->ops->alloc(be, sizeof(float) * PW_N * PW_NE0);
    int32_t *ints = (int32_t *)be->ops->alloc(be, sizeof(int32_t) * PW_N);
    /* a one-layer cache of 16 slots of 256 halves: the K plane, then V */
    quant_f16 *kc = (quant_f16 *)be->ops->alloc(be, sizeof(quant_f16) * 2 * 16 * 4 * 64);
    quant_f16 *vc = kc ? kc + 16 * 4 * 64 : NULL;
    if (!wd || !x || !y || !ints || !kc) {
        rc = INF_ENOMEM;
        goto out;
    }
    {
        static const int types[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q8_0,
                                    QT_Q4_K, QT_Q5_K, QT_Q6_K};
        struct backend_weight w;
        memset(&w, 0, sizeof(w));
        char name[64];
#define PW_RUN(label, stmt)                                                                       \
    do {                                                                                          \
        const double t0 = pw_now();                                                               \
        stmt;                                                                                     \
        if ((rc = be->ops->sync(be)) != 0)                                                        \
            goto out;                                                                             \
        report(ud, label, pw_now() - t0);                                                         \
    } while (0)
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
            const int t = types[i];
            w.type = t;
            w.ne0 = PW_NE0;
            w.ne1 = PW_N;
            w.row_bytes = quant_row_bytes(t, PW_NE0);
            w.data = wd;
            w.aux = NULL;
            snprintf(name, sizeof(name), "get_rows<%s>", quant_type_name(t));
            PW_RUN(name, cuda_op_get_rows(be, &w, ints, 1, y));
            if (t == QT_Q6_K && (rc = cuda_mmq_expand_q6_K(c, &w)) != 0)
                goto out;
            /* mmq6w's planes (cuda/q6planes.cu) for the scratch weight
             * whatever the budget, so its planes form loads wherever
             * mmq6w can run */
            if (t == QT_Q6_K && c->mmq6w && (rc = cuda_q6p_add(c, &w, 1)) < 0) {
                cudaFree(w.aux);
                goto out;
            }
            /* and mmq4p's for the Q4_K one where Q4_K weights get planes
             * (c->q4p) */
            if (t == QT_Q4_K && c->q4p && c->mmqh && (rc = cuda_q6p_add(c, &w, 1)) < 0)
                goto out;
            rc = 0;
            for (int v = 0; v < cuda_mm_variant_count(); v++) {
                if (cuda_mm_variant_type(v) != t)
                    continue;
                cuda_mm_variant_name(v, name, sizeof(name));
                const double t0 = pw_now();
                rc = cuda_mm_variant_run(c, v, &w, x, y, PW_N);
                if (rc == 1 || rc == INF_EUNSUPPORTED) { /* this device cannot hold it (or no
                                                          * cuBLASLt, or not in this mode:
                                                          * batch_invariant): never picked here */
                    rc = 0;
                    strncat(name, " (not picked here)", sizeof(name) - strlen(name) - 1);
                    report(ud, name, 0.0);
                    continue;
                }
                if (rc || (rc = be->ops->sync(be)) != 0) {
                    cuda_q6p_drop(c, &w);
                    cudaFree(w.aux);
                    goto out;
                }
                report(ud, name, pw_now() - t0);
            }
            /* the one-row K-quant product's forms the table's rows do not
             * reach on this scratch (cuda/mmvt.cu): reading the quantizer's
             * planes (the table's rows quantize the row in the kernel: a
             * 64-row weight of 2 super-blocks a row), at each warp count
             * the dispatcher can give them (cuda_mmvt_cws: 8 on shapes of
             * more row groups than SMs, e.g. a 14B's 13824 x 5120 ffn-up at
             * 32 rows a group; 12 or, Q4_K, 14 on one-group shapes; Q6_K 8) */
            if ((t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K) && c->mmvt) {
                cuda_quantize_act(c, QT_Q8_K, x, c->xq, 1, w.ne0, 0);
                int cws[3];
                const int n_cw = cuda_mmvt_cws(t, cws);
                for (int k = 0; k < n_cw; k++)
                    for (int rb = 32; rb >= 16; rb -= 16) {
                        snprintf(name, sizeof(name), "mul_mat<%s> mmvt rb=%d cw=%d planes", quant_type_name(t), rb,
                                 cws[k]);
                        const double t0 = pw_now();
                        if ((rc = cuda_mmvt_prewarm(c, t, &w, NULL, c->xq, y, rb, cws[k])) != 0 ||
                            (rc = be->ops->sync(be)) != 0) {
                            cuda_q6p_drop(c, &w);
                            cudaFree(w.aux);
                            goto out;
                        }
                        report(ud, name, pw_now() - t0);
                    }
            }
            cuda_q6p_drop(c, &w);
            cudaFree(w.aux);
            w.aux = NULL;
        }
        /* cuBLASLt's kernels load lazily too, one per algorithm: each
         * registered float weight shape's own, once */
        if ((rc = cuda_mmc_prewarm(c, report, ud, pw_now)) != 0)
            goto out;
        w.type = QT_F32;
        w.ne0 = PW_NE0;
        w.ne1 = 1;
        w.row_bytes = PW_NE0 * sizeof(float);
        PW_RUN("rms_norm (warp per row)", cuda_op_rms_norm(be, x, &w, y, 4, 128, 1e-6f));
        PW_RUN("rms_norm (block per row)", cuda_op_rms_norm(be, x, &w, y, 4, PW_NE0, 1e-6f));
        PW_RUN("add_bias", cuda_op_add_bias(be, y, &w, 4));
        struct backend_rope r = {64, 0, 10000.0f, 1.0f, NULL};
        PW_RUN("rope (llama)", cuda_op_rope(be, y, 1, 4, ints, &r));
        r.neox = 1;
        PW_RUN("rope (neox)", cuda_op_rope(be, y, 1, 4, ints, &r));
        PW_RUN("kv_store", cuda_op_kv_store(be, kc, vc, x, x, ints, 1, 4 * 64));
        struct backend_kv kvs;
        memset(&kvs, 0, sizeof(kvs));
        kvs.s.n_layer = 1;
        kvs.s.n_blocks = 1;
        kvs.s.block_size = 16;
        kvs.s.row_len = 4 * 64;
        kvs.row_bytes = 4 * 64 * sizeof(quant_f16);
        kvs.plane = 16 * kvs.row_bytes;
        kvs.data = (char *)kc;
        r.neox = 0;
        PW_RUN("rope_kv_store", cuda_op_rope_kv_store(be, y, x, x, 1, 4, 4, ints, &r, &kvs, 0, ints));
        /* every instantiation the dispatcher picks by head_dim: grouped
         * with staged K/V rows (64, 128; the configured scores, CPU-order
         * or tensor-core), grouped (other multiples of 8
         * up to 128: 2 or 4 slots per lane) and per-head (256, or groups
         * past 16), 2, 4 and 8 slots per lane; the cache scratch holds 16
         * slots of 256 halves */
        struct backend_attn a = {4, 4, 64, 16, 1, 0.125f, 0, 0};
        /* one row: the decode split (scores, then the walk; its score
         * buffer is this shape's until a model's larger one), and with the
         * split off the fused kernel that batches of more rows a sequence
         * take */
        const int split = c->att_split, walk = c->att_walk;
        c->att_walk = 2;
        PW_RUN("attention (decode split, helper walk, head_dim 64)",
               cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        c->att_walk = 1;
        PW_RUN("attention (decode split, one-warp walk, head_dim 64)",
               cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        c->att_split = 0;
        PW_RUN("attention (grouped staged, head_dim 64)", cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        a.n_head = 2, a.n_head_kv = 2, a.head_dim = 128;
        PW_RUN("attention (grouped staged, head_dim 128)", cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        c->att_split = split;
        PW_RUN("attention (decode split, one-warp walk, head_dim 128)",
               cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        c->att_walk = 2;
        PW_RUN("attention (decode split, helper walk, head_dim 128)",
               cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        c->att_walk = walk;
        /* exact scores at ATT_PAIR_MIN (32) rows: two rows a block */
        a.head_dim = 64;
        PW_RUN("attention (grouped staged, two rows a block, head_dim 64)",
               cuda_op_attention(be, x, kc, vc, y, 32, ints, ints, ints, &a));
        a.head_dim = 128;
        PW_RUN("attention (grouped staged, two rows a block, head_dim 128)",
               cuda_op_attention(be, x, kc, vc, y, 32, ints, ints, ints, &a));
        a.head_dim = 32;
        PW_RUN("attention (grouped, head_dim 32)", cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        a.head_dim = 96;
        PW_RUN("attention (grouped, head_dim 96)", cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        a.n_head = 1, a.n_head_kv = 1, a.head_dim = 256;
        PW_RUN("attention (per head, head_dim 256)", cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        a.n_head = 34, a.n_head_kv = 1, a.head_dim = 64;
        PW_RUN("attention (per head, head_dim 64)", cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        a.n_head = 17, a.head_dim = 128;
        PW_RUN("attention (per head, head_dim 128)", cuda_op_attention(be, x, kc, vc, y, 1, ints, ints, ints, &a));
        PW_RUN("silu_mul", cuda_op_silu_mul(be, y, x, PW_NE0, PW_NE0));
        PW_RUN("add", cuda_op_add(be, y, x, PW_NE0));
        PW_RUN("gather", cuda_op_gather(be, x, ints, 1, PW_NE0, y));
        {
            /* sample: both of its kernels (a draw over PW_NE0 zero logits
             * and its logprobs); the state lives at the end of y */
            uint64_t blob[16];
            memset(blob, 0, sizeof(blob));
            struct sample_state *hs = (struct sample_state *)blob;
            hs->rng[0] = 1;
            hs->temperature = 1.f;
            hs->top_p = 1.f;
            hs->repetition_penalty = 1.f;
            hs->cap_hist = 4;
            struct sample_state *st = (struct sample_state *)(y + PW_N * PW_NE0 - 64);
            be->ops->upload(be, st, blob, sample_state_bytes(0, 0, 4));
            const struct backend_sample_req rq = {0, -1, 1, 0, st, NULL};
            struct backend_sample_out so;
            PW_RUN("sample",
                   if ((rc = cuda_op_sample(be, x, 1, PW_NE0, &rq, 1, &so)) != 0) goto out);
        }
#undef PW_RUN
    }
out:
    be->ops->free(be, wd);
    be->ops->free(be, x);
    be->ops->free(be, y);
    be->ops->free(be, ints);
    be->ops->free(be, kc);
    return rc;
}
