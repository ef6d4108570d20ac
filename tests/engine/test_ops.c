/* test_ops — the CPU backend's ops against plain double-precision math, and
 * their invariances: a row's result is bit-identical alone or in a batch, and
 * with 1, 2 or 3 threads; mul_mat equals its kernel's dot (the invariant
 * numerics' quant_kernel_invariant) element by element;
 * the AVX2 paths (cpu_avx2.c) give the same bits as the plain C ops
 * (cpu_backend_force_plain), including expf against libm's; the KV cache
 * ops (kv_alloc, kv_store, kv_copy_blocks, kv_read) move exactly the rows
 * they name.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cpu_avx2.h"
#include "engine/err.h"
#include "engine/quant.h"
#include "tests/check.h"
#include "tests/xorshift.h"


static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    return (float)((rng_step(&rng_state) >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

#define N_BE 3
static struct backend *bes[N_BE]; /* 1, 2, 3 threads */

/* ---- mul_mat ----------------------------------------------------------- */

static void test_mul_mat(int type)
{
    const int64_t ne0 = 512, ne1 = 67;
    const int32_t n_rows = 37; /* a full 32-row tile, a partial one */
    const size_t rb = quant_row_bytes(type, ne0);
    float *wf = malloc(sizeof(float) * ne0 * ne1);
    char *wq = malloc(rb * ne1);
    float *x = malloc(sizeof(float) * ne0 * n_rows);
    float *wd = malloc(sizeof(float) * ne0);
    float *xd = malloc(sizeof(float) * ne0);
    const int vdt = quant_vec_dot_type(type);
    /* every output is the invariant numerics' kernel: the canonical chain
     * shared with the CUDA backend for quantized types, llama.cpp's
     * single-row kernel for float ones */
    const int kernel = quant_kernel_invariant(type);
    char *xq = malloc(sizeof(float) * ne0 + 64);
    float *y[N_BE], *y1 = malloc(sizeof(float) * ne1);
    for (int i = 0; i < ne0 * ne1; i++)
        wf[i] = frand() * 0.1f;
    for (int i = 0; i < ne0 * n_rows; i++)
        x[i] = frand();
    for (int64_t j = 0; j < ne1; j++)
        CHECK(quant_quantize_weights(type, wf + j * ne0, wq + j * rb, ne0) == 0);

    struct backend_weight w;
    memset(&w, 0, sizeof(w));
    w.type = type;
    w.ne0 = ne0;
    w.ne1 = ne1;
    w.row_bytes = rb;
    w.host = wq;
    for (int b = 0; b < N_BE; b++) {
        struct backend_reserve r = {64, 1024, 64, 8, 64};
        CHECK(bes[b]->ops->reserve(bes[b], &r) == 0);
        CHECK(bes[b]->ops->weight_register(bes[b], &w) == 0);
        y[b] = malloc(sizeof(float) * ne1 * n_rows);
        bes[b]->ops->mul_mat(bes[b], &w, x, y[b], n_rows);
        CHECK(bes[b]->ops->sync(bes[b]) == 0);
    }
    /* threads change nothing */
    for (int b = 1; b < N_BE; b++)
        CHECK(memcmp(y[0], y[b], sizeof(float) * ne1 * n_rows) == 0);
    /* a row alone gives the same bits as in the batch, and every element is
     * quant_vec_dot of its row and column (whatever the tiling); the plain
     * C ops give the same bits */
    double max_err = 0;
    int dot_mismatch = 0;
    for (int32_t r = 0; r < n_rows; r++) {
        bes[1]->ops->mul_mat(bes[1], &w, x + r * ne0, y1, 1);
        CHECK(memcmp(y1, y[0] + r * ne1, sizeof(float) * ne1) == 0);
        cpu_backend_force_plain(bes[1], 1);
        bes[1]->ops->mul_mat(bes[1], &w, x + r * ne0, y1, 1);
        cpu_backend_force_plain(bes[1], 0);
        CHECK(memcmp(y1, y[0] + r * ne1, sizeof(float) * ne1) == 0);
        if (vdt == QT_F32)
            memcpy(xq, x + r * ne0, sizeof(float) * ne0);
        else
            quant_quantize_row(vdt, x + r * ne0, xq, ne0);
        for (int64_t j = 0; j < ne1; j++) {
            const float d = quant_kernel_func(kernel)(ne0, wq + j * rb, xq);
            dot_mismatch += memcmp(&d, &y[0][r * ne1 + j], sizeof(d)) != 0;
        }
        /* against dequant(w) . dequant(quantized x) in double */
        if (vdt == QT_F32) {
            memcpy(xd, x + r * ne0, sizeof(float) * ne0);
        } else {
            quant_quantize_row(vdt, x + r * ne0, xq, ne0);
            quant_dequant_row(vdt, xq, xd, ne0);
        }
        for (int64_t j = 0; j < ne1; j++) {
            quant_dequant_row(type, wq + j * rb, wd, ne0);
            double s = 0, sa = 0;
            for (int64_t i = 0; i < ne0; i++) {
                s += (double)wd[i] * xd[i];
                sa += fabs((double)wd[i] * xd[i]);
            }
            double e = fabs(s - y[0][r * ne1 + j]) / (sa + 1e-30);
            if (e > max_err)
                max_err = e;
        }
    }
    printf("mul_mat %-5s max rel err %.3g, %d elements differ from its kernel's dot\n",
           quant_type_name(type), max_err, dot_mismatch);
    CHECK(max_err < 1e-5);
    CHECK(dot_mismatch == 0);
    for (int b = 0; b < N_BE; b++)
        free(y[b]);
    free(y1);
    free(wf);
    free(wq);
    free(x);
    free(wd);
    free(xd);
    free(xq);
}

/* ---- rms_norm, rope, elementwise ---------------------------------------- */

static void test_rms_norm(void)
{
    const int n = 96, rows = 5;
    float x[5 * 96], y[5 * 96], wv[96];
    for (int i = 0; i < n * rows; i++)
        x[i] = frand() * 3;
    for (int i = 0; i < n; i++)
        wv[i] = frand();
    struct backend_weight w = {.type = QT_F32, .ne0 = n, .ne1 = 1, .row_bytes = n * 4,
                               .host = wv, .data = wv};
    bes[0]->ops->rms_norm(bes[0], x, &w, y, rows, n, 1e-5f);
    double me = 0;
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)x[r * n + i] * x[r * n + i];
        double sc = 1.0 / sqrt(ss / n + 1e-5);
        for (int i = 0; i < n; i++)
            me = fmax(me, fabs(x[r * n + i] * sc * wv[i] - y[r * n + i]));
    }
    CHECK(me < 1e-5);
    /* in place, no weight */
    memcpy(y, x, sizeof(x));
    bes[0]->ops->rms_norm(bes[0], y, NULL, y, rows, n, 1e-5f);
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)y[i] * y[i];
    CHECK(fabs(ss / n - 1.0) < 1e-4);
}

static void test_rope(int neox, int with_ff)
{
    const int hd = 16, nh = 3, rows = 4;
    float x[4 * 3 * 16], x0[4 * 3 * 16], ff[8];
    int32_t pos[4] = {0, 1, 17, 1000};
    for (int i = 0; i < rows * nh * hd; i++)
        x0[i] = x[i] = frand();
    for (int i = 0; i < hd / 2; i++)
        ff[i] = 1.0f + (float)i;
    struct backend_rope rp = {hd, neox, 10000.0f, 0.5f, with_ff ? ff : NULL};
    bes[0]->ops->rope(bes[0], x, rows, nh, pos, &rp);
    double me = 0;
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < nh; h++)
            for (int i = 0; i < hd / 2; i++) {
                double th = 0.5 * pos[r] * pow(10000.0, -2.0 * i / hd) / (with_ff ? ff[i] : 1.0);
                int a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
                const float *v0 = x0 + (r * nh + h) * hd;
                const float *v = x + (r * nh + h) * hd;
                double e0 = v0[a] * cos(th) - v0[b] * sin(th);
                double e1 = v0[a] * sin(th) + v0[b] * cos(th);
                me = fmax(me, fmax(fabs(e0 - v[a]), fabs(e1 - v[b])));
            }
    printf("rope neox=%d ff=%d max err %.3g\n", neox, with_ff, me);
    CHECK(me < 2e-4); /* angles up to 500 rad rounded in float */
}

static void test_elementwise(void)
{
    float g[100], u[100], g0[100], y[100];
    for (int i = 0; i < 100; i++) {
        g0[i] = g[i] = frand() * 8;
        u[i] = frand();
        y[i] = frand();
    }
    bes[1]->ops->silu_mul(bes[1], g, u, 100, 50);
    for (int i = 0; i < 100; i++)
        CHECK(fabs(g[i] - g0[i] / (1.0 + exp(-g0[i])) * u[i]) < 1e-5);
    float y0[100];
    memcpy(y0, y, sizeof(y));
    bes[1]->ops->add(bes[1], y, u, 100);
    for (int i = 0; i < 100; i++)
        CHECK(y[i] == y0[i] + u[i]);
    /* get_rows of a Q8_0 table == dequantized rows */
    const int64_t ne0 = 64, nrow = 10;
    float tab[640], deq[64], out[3 * 64];
    for (int i = 0; i < 640; i++)
        tab[i] = frand();
    size_t rb = quant_row_bytes(QT_Q8_0, ne0);
    char *q = malloc(rb * nrow);
    for (int r = 0; r < nrow; r++)
        quant_quantize_weights(QT_Q8_0, tab + r * ne0, q + r * rb, ne0);
    struct backend_weight w = {.type = QT_Q8_0, .ne0 = ne0, .ne1 = nrow, .row_bytes = rb,
                               .host = q, .data = q};
    int32_t ids[3] = {7, 0, 7};
    bes[0]->ops->get_rows(bes[0], &w, ids, 3, out);
    for (int k = 0; k < 3; k++) {
        quant_dequant_row(QT_Q8_0, q + ids[k] * rb, deq, ne0);
        CHECK(memcmp(deq, out + k * ne0, sizeof(deq)) == 0);
    }
    free(q);
}

/* ---- attention over a paged cache --------------------------------------- */

static void test_attention(void)
{
    enum { NH = 4, NKV = 2, HD = 16, BS = 4, NBLK = 24, NSEQ = 3 };
    const int kvdim = NKV * HD, qdim = NH * HD;
    /* the cache holds F16 (the backend's kv_type); the reference reads the
     * same values, rounded to F16 */
    CHECK(bes[0]->ops->kv_type == QT_F16);
    quant_f16 *kc = calloc((size_t)NBLK * BS * kvdim, sizeof(quant_f16));
    quant_f16 *vc = calloc((size_t)NBLK * BS * kvdim, sizeof(quant_f16));
    float *kf = calloc((size_t)NBLK * BS * kvdim, sizeof(float));
    float *vf = calloc((size_t)NBLK * BS * kvdim, sizeof(float));
    for (int i = 0; i < NBLK * BS * kvdim; i++) {
        kf[i] = frand();
        vf[i] = frand();
    }
    /* a two-layer cache per backend; the rows go to layer 1, layer 0 holds
     * other values (the layers must not overlap) */
    struct backend_kv *kv[N_BE];
    const struct backend_kv_shape ks = {2, NBLK, BS, kvdim};
    /* kv_store converts rows into their slots */
    {
        int32_t slots[NBLK * BS];
        for (int i = 0; i < NBLK * BS; i++)
            slots[i] = NBLK * BS - 1 - i;
        float *kr = malloc(sizeof(float) * NBLK * BS * kvdim), *vr = malloc(sizeof(float) * NBLK * BS * kvdim);
        for (int i = 0; i < NBLK * BS; i++) {
            memcpy(kr + (size_t)i * kvdim, kf + (size_t)slots[i] * kvdim, sizeof(float) * kvdim);
            memcpy(vr + (size_t)i * kvdim, vf + (size_t)slots[i] * kvdim, sizeof(float) * kvdim);
        }
        for (int b = 0; b < N_BE; b++) {
            CHECK(bes[b]->ops->kv_alloc(bes[b], &ks, &kv[b]) == 0);
            bes[b]->ops->kv_store(bes[b], kv[b], 0, vr, kr, slots, NBLK * BS);
            bes[b]->ops->kv_store(bes[b], kv[b], 1, kr, vr, slots, NBLK * BS);
        }
        CHECK(bes[0]->ops->kv_read(bes[0], kv[0], 1, 0, NBLK * BS, kc, vc) == 0);
        free(kr);
        free(vr);
    }
    for (int i = 0; i < NBLK * BS * kvdim; i++) {
        CHECK(kc[i] == quant_f32_to_f16(kf[i]) && vc[i] == quant_f32_to_f16(vf[i]));
        kf[i] = quant_f16_to_f32(kc[i]);
        vf[i] = quant_f16_to_f32(vc[i]);
    }
    /* three sequences of 21, 5 and 30 positions over shuffled blocks */
    const int len[NSEQ] = {21, 5, 30};
    int32_t bt[NSEQ * 8];
    int perm[NBLK];
    for (int i = 0; i < NBLK; i++)
        perm[i] = i;
    for (int i = NBLK - 1; i > 0; i--) {
        int j = (int)((frand() + 1) * 0.5f * (float)(i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < NSEQ * 8; i++)
        bt[i] = perm[i];
    /* rows: a few positions of each sequence */
    int32_t pos[7] = {20, 0, 4, 29, 3, 15, 7}, seq[7] = {0, 1, 1, 2, 2, 2, 0};
    const int n = 7;
    float q[7 * NH * HD], out[7 * NH * HD], out1[NH * HD];
    for (int i = 0; i < n * qdim; i++)
        q[i] = frand() * 2;
    struct backend_attn a = {NH, NKV, HD, BS, 8, 1.0f / sqrtf(HD), 30, 0};
    for (int b = 0; b < N_BE; b++) {
        struct backend_reserve r = {64, 1024, 64, 8, 64};
        CHECK(bes[b]->ops->reserve(bes[b], &r) == 0);
    }
    bes[1]->ops->attention(bes[1], q, kv[1], 1, out, n, pos, seq, bt, &a);
    CHECK(bes[1]->ops->sync(bes[1]) == 0);
    double me = 0;
    for (int r = 0; r < n; r++) {
        CHECK(pos[r] < len[seq[r]]);
        for (int h = 0; h < NH; h++) {
            const int kvh = h / (NH / NKV);
            double s[64], mx = -1e300, sum = 0;
            for (int p = 0; p <= pos[r]; p++) {
                int slot = bt[seq[r] * 8 + p / BS] * BS + p % BS;
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += (double)quant_f16_to_f32(quant_f32_to_f16(q[r * qdim + h * HD + i])) *
                         kf[slot * kvdim + kvh * HD + i];
                s[p] = d / sqrt((double)HD);
                mx = fmax(mx, s[p]);
            }
            for (int p = 0; p <= pos[r]; p++)
                sum += s[p] = exp(s[p] - mx);
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int p = 0; p <= pos[r]; p++) {
                    int slot = bt[seq[r] * 8 + p / BS] * BS + p % BS;
                    o += s[p] / sum * vf[slot * kvdim + kvh * HD + i];
                }
                me = fmax(me, fabs(o - out[r * qdim + h * HD + i]));
            }
        }
        /* alone and with other thread counts: same bits */
        for (int b = 0; b < N_BE; b++) {
            bes[b]->ops->attention(bes[b], q + r * qdim, kv[b], 1, out1, 1, pos + r, seq + r, bt,
                                   &a);
            CHECK(memcmp(out1, out + r * qdim, sizeof(out1)) == 0);
        }
    }
    printf("attention max err %.3g\n", me);
    CHECK(me < 2e-3); /* F16 accumulator, as llama.cpp */
    for (int b = 0; b < N_BE; b++)
        bes[b]->ops->kv_free(bes[b], kv[b]);
    free(kc);
    free(vc);
    free(kf);
    free(vf);
}

/* ---- the KV cache the backend owns -------------------------------------- */

/* kv_copy_blocks moves whole blocks of every layer's K and V and nothing
 * else; kv_read and kv_alloc check their arguments; host_alloc memory takes
 * a download_async. */
static void test_kv_ops(void)
{
    enum { NL = 3, NBLK = 7, BS = 5, RL = 12 };
    const int slots = NBLK * BS;
    struct backend *be = bes[1];
    struct backend_kv *kv = NULL;
    const struct backend_kv_shape bad = {NL, 0, BS, RL};
    CHECK(be->ops->kv_alloc(be, &bad, &kv) == INF_EINVAL && kv == NULL);
    const struct backend_kv_shape ks = {NL, NBLK, BS, RL};
    CHECK(be->ops->kv_alloc(be, &ks, &kv) == 0 && kv != NULL);
    float *k = malloc(sizeof(float) * slots * RL), *v = malloc(sizeof(float) * slots * RL);
    int32_t sl[NBLK * BS];
    for (int i = 0; i < slots; i++)
        sl[i] = i;
    /* expected planes, on the host: [NL][slots][RL] F16 */
    quant_f16 *ek = malloc(sizeof(quant_f16) * NL * slots * RL);
    quant_f16 *ev = malloc(sizeof(quant_f16) * NL * slots * RL);
    quant_f16 *gk = malloc(sizeof(quant_f16) * slots * RL), *gv = malloc(sizeof(quant_f16) * slots * RL);
    for (int l = 0; l < NL; l++) {
        for (int i = 0; i < slots * RL; i++) {
            k[i] = frand();
            v[i] = frand();
            ek[(size_t)l * slots * RL + i] = quant_f32_to_f16(k[i]);
            ev[(size_t)l * slots * RL + i] = quant_f32_to_f16(v[i]);
        }
        be->ops->kv_store(be, kv, l, k, v, sl, slots);
    }
    /* blocks 1 -> 4, 6 -> 0, 2 -> 5 in one call */
    const int32_t src[3] = {1, 6, 2}, dst[3] = {4, 0, 5};
    be->ops->kv_copy_blocks(be, kv, src, dst, 3);
    for (int l = 0; l < NL; l++)
        for (int i = 0; i < 3; i++) {
            const size_t bb = (size_t)BS * RL, base = (size_t)l * slots * RL;
            memcpy(ek + base + dst[i] * bb, ek + base + src[i] * bb, bb * sizeof(quant_f16));
            memcpy(ev + base + dst[i] * bb, ev + base + src[i] * bb, bb * sizeof(quant_f16));
        }
    for (int l = 0; l < NL; l++) {
        CHECK(be->ops->kv_read(be, kv, l, 0, slots, gk, gv) == 0);
        CHECK(memcmp(gk, ek + (size_t)l * slots * RL, sizeof(quant_f16) * slots * RL) == 0);
        CHECK(memcmp(gv, ev + (size_t)l * slots * RL, sizeof(quant_f16) * slots * RL) == 0);
    }
    /* a part of a layer */
    CHECK(be->ops->kv_read(be, kv, 2, 7, 3, gk, gv) == 0);
    CHECK(memcmp(gk, ek + (size_t)2 * slots * RL + 7 * RL, sizeof(quant_f16) * 3 * RL) == 0);
    CHECK(be->ops->kv_read(be, kv, NL, 0, 1, gk, gv) == INF_EINVAL);
    CHECK(be->ops->kv_read(be, kv, 0, slots - 1, 2, gk, gv) == INF_EINVAL);
    CHECK(be->ops->sync(be) == 0);
    be->ops->kv_free(be, kv);
    be->ops->kv_free(be, NULL);

    float *h = be->ops->host_alloc(be, sizeof(float) * 100);
    float *d = be->ops->alloc(be, sizeof(float) * 100);
    CHECK(h && d && h[99] == 0.0f);
    be->ops->upload(be, d, k, sizeof(float) * 100);
    be->ops->download_async(be, h, d, sizeof(float) * 100);
    CHECK(be->ops->sync(be) == 0 && memcmp(h, k, sizeof(float) * 100) == 0);
    be->ops->host_free(be, h);
    be->ops->host_free(be, NULL);
    be->ops->free(be, d);
    CHECK(be->ops->async == 0);
    free(k);
    free(v);
    free(ek);
    free(ev);
    free(gk);
    free(gv);
}

/* ---- AVX2 paths against the plain C ops, bit for bit -------------------- */

static int bits_eq(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* expf of cpu_avx2.c against libm (the plain path calls libm): special
 * values, a dense sweep over the range the ops use, random bit patterns. */
static void test_expf(void)
{
#ifdef INFERD_HAVE_AVX2
    if (!quant_have_avx2())
        return;
    enum { N = 1 << 16 };
    static float x[N], y[N];
    int bad = 0;
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.0f, -88.0f, 88.72283f, 88.7229f,
                             -103.27893f, -103.278931f, -103.97207f, -103.972084f, -104.0f,
                             -150.0f, 1e-30f, -1e-30f, 0x1p-149f, INFINITY, -INFINITY, NAN,
                             89.0f, 1e30f, -1e30f, 0.5f, -0.5f};
    const int ns = (int)(sizeof(special) / sizeof(special[0]));
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < N; i++) {
            if (round == 0 && i < ns) {
                x[i] = special[i];
            } else if (round < 20) {
                x[i] = -110.0f + 200.0f * (float)(round * N + i) / (20.0f * N);
            } else {
                rng_state ^= rng_state << 13;
                rng_state ^= rng_state >> 7;
                rng_state ^= rng_state << 17;
                uint32_t u = (uint32_t)(rng_state >> 17);
                memcpy(&x[i], &u, sizeof(u));
            }
        }
        cpu_avx2_expf(x, y, N);
        for (int i = 0; i < N; i++) {
            const float e = expf(x[i]);
            if (memcmp(&e, &y[i], sizeof(e)) != 0 && !(isnan(e) && isnan(y[i]))) {
                if (bad++ < 5)
                    fprintf(stderr, "expf(%a): libm %a, avx2 %a\n", x[i], e, y[i]);
            }
        }
    }
    printf("expf avx2 vs libm: %d of %d differ\n", bad, 40 * N);
    CHECK(bad == 0);
#endif
}

static void test_simd_elementwise(void)
{
    enum { ROWS = 7, NMAX = 8 * 97 };
    const int32_t ns[] = {64, 96, 172, 255, 768};
    static float x[ROWS * NMAX], w[NMAX], a[ROWS * NMAX], b[ROWS * NMAX], u[ROWS * NMAX];
    for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
        const int32_t n = ns[k];
        for (int i = 0; i < ROWS * n; i++) {
            x[i] = frand() * (i % 5 == 0 ? 40.0f : 3.0f);
            u[i] = frand();
        }
        for (int i = 0; i < n; i++)
            w[i] = frand();
        struct backend_weight wt = {.type = QT_F32, .ne0 = n, .ne1 = 1, .row_bytes = n * 4,
                                    .host = w, .data = w};
        for (int with_w = 0; with_w < 2; with_w++) {
            for (int32_t rows = 1; rows <= ROWS; rows += 3) {
                bes[1]->ops->rms_norm(bes[1], x, with_w ? &wt : NULL, a, rows, n, 1e-5f);
                cpu_backend_force_plain(bes[1], 1);
                bes[1]->ops->rms_norm(bes[1], x, with_w ? &wt : NULL, b, rows, n, 1e-5f);
                cpu_backend_force_plain(bes[1], 0);
                CHECK(bits_eq(a, b, (size_t)rows * n));
            }
        }
        memcpy(a, x, sizeof(float) * ROWS * n);
        memcpy(b, x, sizeof(float) * ROWS * n);
        bes[1]->ops->silu_mul(bes[1], a, u, (int64_t)ROWS * n - 3, n);
        cpu_backend_force_plain(bes[1], 1);
        bes[1]->ops->silu_mul(bes[1], b, u, (int64_t)ROWS * n - 3, n);
        cpu_backend_force_plain(bes[1], 0);
        CHECK(bits_eq(a, b, (size_t)ROWS * n));
    }
    /* big enough for the pool: thread counts change nothing */
    enum { BIG = 64 * 768 };
    float *g0 = malloc(sizeof(float) * BIG), *g1 = malloc(sizeof(float) * BIG);
    float *up = malloc(sizeof(float) * BIG);
    for (int i = 0; i < BIG; i++) {
        g0[i] = g1[i] = frand() * 30.0f;
        up[i] = frand();
    }
    bes[0]->ops->silu_mul(bes[0], g0, up, BIG, 768);
    bes[2]->ops->silu_mul(bes[2], g1, up, BIG, 768);
    CHECK(bits_eq(g0, g1, BIG));
    bes[0]->ops->rms_norm(bes[0], up, NULL, g0, 64, 768, 1e-6f);
    bes[2]->ops->rms_norm(bes[2], up, NULL, g1, 64, 768, 1e-6f);
    CHECK(bits_eq(g0, g1, BIG));
    free(g0);
    free(g1);
    free(up);
}

/* Rope with the backend's cos/sin table (positions below reserve's max_ctx)
 * and without (a backend that was never reserved) give the same bits, and
 * so does the plain C rotation; head sizes with and without SIMD tails. */
static void test_rope_cache(void)
{
    enum { HDMAX = 64, NH = 3, ROWS = 6 };
    static float x0[ROWS * NH * HDMAX], xa[ROWS * NH * HDMAX], xb[ROWS * NH * HDMAX];
    static float xc[ROWS * NH * HDMAX], ff[HDMAX / 2];
    const int32_t pos[ROWS] = {0, 5, 63, 5, 64, 3000};
    const int32_t hds[] = {64, 12, 20};
    struct backend *fresh = cpu_backend_new(1);
    CHECK(fresh != NULL);
    if (!fresh)
        return;
    for (size_t k = 0; k < sizeof(hds) / sizeof(hds[0]); k++) {
        const int32_t hd = hds[k];
        const size_t n = (size_t)ROWS * NH * hd;
        for (size_t i = 0; i < n; i++)
            x0[i] = frand();
        for (int i = 0; i < hd / 2; i++)
            ff[i] = 1.0f + 0.25f * (float)i;
        for (int v = 0; v < 3; v++) {
            struct backend_rope rp = {hd, v == 1, v == 2 ? 500000.0f : 10000.0f, 1.0f,
                                      v == 2 ? ff : NULL};
            for (int rep = 0; rep < 2; rep++) { /* the second call reads the table */
                memcpy(xa, x0, n * sizeof(float));
                memcpy(xb, x0, n * sizeof(float));
                memcpy(xc, x0, n * sizeof(float));
                bes[1]->ops->rope(bes[1], xa, ROWS, NH, pos, &rp);
                fresh->ops->rope(fresh, xb, ROWS, NH, pos, &rp);
                cpu_backend_force_plain(bes[1], 1);
                bes[1]->ops->rope(bes[1], xc, ROWS, NH, pos, &rp);
                cpu_backend_force_plain(bes[1], 0);
                CHECK(bits_eq(xa, xb, n));
                CHECK(bits_eq(xa, xc, n));
            }
        }
    }
    /* the table follows a change of the freq factors' values */
    const size_t n = (size_t)ROWS * NH * HDMAX;
    struct backend_rope rp = {HDMAX, 0, 10000.0f, 1.0f, ff};
    memcpy(xa, x0, n * sizeof(float));
    bes[1]->ops->rope(bes[1], xa, ROWS, NH, pos, &rp);
    ff[3] = 7.0f;
    memcpy(xa, x0, n * sizeof(float));
    memcpy(xb, x0, n * sizeof(float));
    bes[1]->ops->rope(bes[1], xa, ROWS, NH, pos, &rp);
    fresh->ops->rope(fresh, xb, ROWS, NH, pos, &rp);
    CHECK(bits_eq(xa, xb, n));
    CHECK(bes[1]->ops->sync(bes[1]) == 0 && fresh->ops->sync(fresh) == 0);
    backend_free(fresh);
}

/* The AVX2 attention against the plain one over head sizes that take every
 * path (double tails of 8..24 elements, 32-element steps, both, head_dim not
 * a multiple of 8: plain on both sides), GQA groups of 1..6 (heads in pairs
 * and alone), sequences longer than the kernel's 32-position chunks and not
 * a multiple of 8, scores large enough to underflow expf, and ties. */
static void test_attention_simd(void)
{
    const struct { int nh, nkv, hd; } shapes[] = {
        {8, 4, 8}, {4, 2, 16}, {3, 1, 24}, {4, 2, 32}, {2, 2, 40}, {4, 2, 64},
        {6, 2, 72}, {4, 1, 96}, {2, 1, 128}, {4, 2, 256}, {2, 1, 12},
    };
    enum { BS = 16, NBLK = 16, NSEQ = 2, BT = 8, NR = 6 };
    const int32_t pos[NR] = {0, 31, 32, 77, 100, 127};
    const int32_t seq[NR] = {0, 1, 0, 1, 0, 1};
    int32_t bt[NSEQ * BT];
    for (int i = 0; i < NSEQ * BT; i++)
        bt[i] = (i * 5 + 3) % NBLK;
    for (size_t k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        const int nh = shapes[k].nh, nkv = shapes[k].nkv, hd = shapes[k].hd;
        const int kvdim = nkv * hd, qdim = nh * hd;
        const size_t slots = (size_t)NBLK * BS;
        float *kf = malloc(sizeof(float) * slots * kvdim);
        float *vf = malloc(sizeof(float) * slots * kvdim);
        int32_t *sl = malloc(sizeof(int32_t) * slots);
        float *q = malloc(sizeof(float) * NR * qdim);
        float *oa = malloc(sizeof(float) * NR * qdim), *ob = malloc(sizeof(float) * NR * qdim);
        for (size_t i = 0; i < slots * kvdim; i++) {
            kf[i] = frand() * 2.0f;
            vf[i] = frand();
        }
        for (size_t i = 0; i < slots; i++)
            sl[i] = (int32_t)i;
        /* the same F16 cache on both backends (kv_store rounds as quant_f32_to_f16) */
        const struct backend_kv_shape ks = {1, NBLK, BS, kvdim};
        struct backend_kv *ka, *kb;
        CHECK(bes[2]->ops->kv_alloc(bes[2], &ks, &ka) == 0);
        CHECK(bes[0]->ops->kv_alloc(bes[0], &ks, &kb) == 0);
        bes[2]->ops->kv_store(bes[2], ka, 0, kf, vf, sl, (int32_t)slots);
        bes[0]->ops->kv_store(bes[0], kb, 0, kf, vf, sl, (int32_t)slots);
        /* row 3: scores spread by hundreds (expf underflows); row 5: all
         * scores +-0 (ties: the maximum never grows after position 0) */
        for (int i = 0; i < NR * qdim; i++)
            q[i] = i / qdim == 5 ? 0.0f : frand() * (i / qdim == 3 ? 60.0f : 1.5f);
        struct backend_attn a = {nh, nkv, hd, BS, BT, 1.0f / sqrtf((float)hd), 128, 0};
        struct backend_reserve r = {64, 1024, 256, nh, hd};
        for (int b = 0; b < N_BE; b++)
            CHECK(bes[b]->ops->reserve(bes[b], &r) == 0);
        bes[2]->ops->attention(bes[2], q, ka, 0, oa, NR, pos, seq, bt, &a);
        cpu_backend_force_plain(bes[0], 1);
        bes[0]->ops->attention(bes[0], q, kb, 0, ob, NR, pos, seq, bt, &a);
        cpu_backend_force_plain(bes[0], 0);
        CHECK(bes[2]->ops->sync(bes[2]) == 0 && bes[0]->ops->sync(bes[0]) == 0);
        bes[2]->ops->kv_free(bes[2], ka);
        bes[0]->ops->kv_free(bes[0], kb);
        int same = bits_eq(oa, ob, (size_t)NR * qdim);
        printf("attention avx2 vs plain, heads %d/%d, head_dim %3d: %s\n", nh, nkv, hd,
               same ? "same bits" : "DIFFER");
        CHECK(same);
        free(kf);
        free(vf);
        free(sl);
        free(q);
        free(oa);
        free(ob);
    }
}

int main(void)
{
    for (int b = 0; b < N_BE; b++) {
        bes[b] = cpu_backend_new(b + 1);
        CHECK(bes[b] != NULL);
        if (!bes[b])
            return 1;
        CHECK(cpu_backend_threads(bes[b]) == b + 1);
    }
    const int types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_K, QT_Q5_K, QT_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        test_mul_mat(types[i]);
    test_rms_norm();
    test_rope(0, 0);
    test_rope(1, 0);
    test_rope(0, 1);
    test_elementwise();
    test_attention();
    test_kv_ops();
    test_expf();
    test_simd_elementwise();
    test_rope_cache();
    test_attention_simd();
    for (int b = 0; b < N_BE; b++)
        backend_free(bes[b]);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
