/* test_ops — the CPU backend's ops against plain double-precision math, and
 * their invariances: a row's result is bit-identical alone or in a batch, and
 * with 1, 2 or 3 threads.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/quant.h"

static int fails;
#define CHECK(c)                                                                    \
    do {                                                                            \
        if (!(c)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);   \
            fails++;                                                                \
        }                                                                           \
    } while (0)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

#define N_BE 3
static struct backend *bes[N_BE]; /* 1, 2, 3 threads */

/* ---- mul_mat ----------------------------------------------------------- */

static void test_mul_mat(int type)
{
    const int64_t ne0 = 512, ne1 = 67;
    const int32_t n_rows = 37;
    const size_t rb = quant_row_bytes(type, ne0);
    float *wf = malloc(sizeof(float) * ne0 * ne1);
    char *wq = malloc(rb * ne1);
    float *x = malloc(sizeof(float) * ne0 * n_rows);
    float *wd = malloc(sizeof(float) * ne0);
    float *xd = malloc(sizeof(float) * ne0);
    const int vdt = quant_vec_dot_type(type);
    char *xq = malloc(quant_row_bytes(vdt, ne0) + 64);
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
    /* a row alone gives the same bits as in the batch */
    double max_err = 0;
    for (int32_t r = 0; r < n_rows; r++) {
        bes[1]->ops->mul_mat(bes[1], &w, x + r * ne0, y1, 1);
        CHECK(memcmp(y1, y[0] + r * ne1, sizeof(float) * ne1) == 0);
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
    printf("mul_mat %-5s max rel err %.3g\n", quant_type_name(type), max_err);
    CHECK(max_err < 1e-5);
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
        bes[0]->ops->kv_store(bes[0], kc, vc, kr, vr, slots, NBLK * BS, kvdim);
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
    struct backend_attn a = {NH, NKV, HD, BS, 8, 1.0f / sqrtf(HD)};
    for (int b = 0; b < N_BE; b++) {
        struct backend_reserve r = {64, 1024, 64, 8, 64};
        CHECK(bes[b]->ops->reserve(bes[b], &r) == 0);
    }
    bes[1]->ops->attention(bes[1], q, kc, vc, out, n, pos, seq, bt, &a);
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
            bes[b]->ops->attention(bes[b], q + r * qdim, kc, vc, out1, 1, pos + r, seq + r, bt,
                                   &a);
            CHECK(memcmp(out1, out + r * qdim, sizeof(out1)) == 0);
        }
    }
    printf("attention max err %.3g\n", me);
    CHECK(me < 2e-3); /* F16 accumulator, as llama.cpp */
    free(kc);
    free(vc);
    free(kf);
    free(vf);
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
    for (int b = 0; b < N_BE; b++)
        backend_free(bes[b]);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
