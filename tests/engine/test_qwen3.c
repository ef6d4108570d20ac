/* test_qwen3 — the qwen3 path (QK-norm: RMSNorm over each head of q and k
 * before RoPE, NEOX rotation) against a plain double-precision forward pass
 * written here independently from the GGUF tensors.
 *
 * usage: test_qwen3 PATH/TO/inferd
 * `inferd mkmodel --preset tiny-qwen3 --quant f32` writes the model; the
 * engine's logits for a few tokens must match the reference within the F16
 * KV-cache precision, and the same reference without QK-norm must not (so the
 * test sees the QK-norm path).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/gguf.h"
#include "engine/graph.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "tests/check.h"


enum { NT = 6 };
static const struct gguf_file *gf;
static const struct model_hparams *hp;

/* A tensor as doubles ([ne1][ne0]); NULL when absent. */
static double *tensor(const char *name, int64_t *ne0, int64_t *ne1)
{
    const struct gguf_tensor *t = gguf_find_tensor(gf, name);
    if (!t)
        return NULL;
    *ne0 = t->ne[0];
    *ne1 = t->ne[1];
    double *d = malloc(sizeof(double) * (size_t)(t->ne[0] * t->ne[1]));
    float *row = malloc(sizeof(float) * (size_t)t->ne[0]);
    size_t rb = quant_row_bytes((int)t->type, t->ne[0]);
    for (int64_t r = 0; r < t->ne[1]; r++) {
        quant_dequant_row((int)t->type, (const char *)t->data + r * rb, row, t->ne[0]);
        for (int64_t i = 0; i < t->ne[0]; i++)
            d[r * t->ne[0] + i] = row[i];
    }
    free(row);
    return d;
}

static double *ltensor(int il, const char *suffix, int64_t *ne0, int64_t *ne1)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%d.%s", il, suffix);
    return tensor(name, ne0, ne1);
}

/* y[j] = sum_i W[j][i] x[i] */
static void matvec(const double *W, int64_t n_in, int64_t n_out, const double *x, double *y)
{
    for (int64_t j = 0; j < n_out; j++) {
        double s = 0;
        for (int64_t i = 0; i < n_in; i++)
            s += W[j * n_in + i] * x[i];
        y[j] = s;
    }
}

static void rmsnorm(double *x, const double *w, int64_t n, double eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    const double sc = 1.0 / sqrt(ss / n + eps);
    for (int64_t i = 0; i < n; i++)
        x[i] = x[i] * sc * (w ? w[i] : 1.0);
}

/* Rotate one head: pairs (i, i + hd/2), angle p * base^(-2i/hd). */
static void rope_neox(double *v, int64_t hd, int pos, double base)
{
    for (int64_t i = 0; i < hd / 2; i++) {
        const double th = pos * pow(base, -2.0 * (double)i / (double)hd);
        const double a = v[i], b = v[i + hd / 2];
        v[i] = a * cos(th) - b * sin(th);
        v[i + hd / 2] = a * sin(th) + b * cos(th);
    }
}

/* The whole forward pass in double; logits [NT][V]. */
static void reference(const int32_t *tok, int qk_norm, double *logits)
{
    const int64_t E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int64_t Q = NH * HD, KV = NKV * HD, F = hp->n_ff, V = hp->n_vocab;
    int64_t a, b;
    double *emb = tensor("token_embd.weight", &a, &b);
    double *x = calloc((size_t)(NT * E), sizeof(double)), *h = malloc(sizeof(double) * E);
    double *q = malloc(sizeof(double) * NT * Q), *k = malloc(sizeof(double) * NT * KV);
    double *v = malloc(sizeof(double) * NT * KV), *att = malloc(sizeof(double) * Q);
    double *o = malloc(sizeof(double) * E), *g = malloc(sizeof(double) * F);
    double *u = malloc(sizeof(double) * F);
    for (int t = 0; t < NT; t++)
        memcpy(x + t * E, emb + (int64_t)tok[t] * E, sizeof(double) * E);
    for (int il = 0; il < hp->n_layer; il++) {
        double *an = ltensor(il, "attn_norm.weight", &a, &b);
        double *wq = ltensor(il, "attn_q.weight", &a, &b), *wk = ltensor(il, "attn_k.weight", &a, &b);
        double *wv = ltensor(il, "attn_v.weight", &a, &b);
        double *wo = ltensor(il, "attn_output.weight", &a, &b);
        double *qn = ltensor(il, "attn_q_norm.weight", &a, &b);
        double *kn = ltensor(il, "attn_k_norm.weight", &a, &b);
        double *fn = ltensor(il, "ffn_norm.weight", &a, &b);
        double *wg = ltensor(il, "ffn_gate.weight", &a, &b), *wu = ltensor(il, "ffn_up.weight", &a, &b);
        double *wd = ltensor(il, "ffn_down.weight", &a, &b);
        CHECK(qn && kn);
        for (int t = 0; t < NT; t++) {
            memcpy(h, x + t * E, sizeof(double) * E);
            rmsnorm(h, an, E, hp->rms_eps);
            matvec(wq, E, Q, h, q + t * Q);
            matvec(wk, E, KV, h, k + t * KV);
            matvec(wv, E, KV, h, v + t * KV);
            for (int64_t hh = 0; hh < NH; hh++) {
                if (qk_norm)
                    rmsnorm(q + t * Q + hh * HD, qn, HD, hp->rms_eps);
                rope_neox(q + t * Q + hh * HD, HD, t, hp->rope_base);
            }
            for (int64_t hh = 0; hh < NKV; hh++) {
                if (qk_norm)
                    rmsnorm(k + t * KV + hh * HD, kn, HD, hp->rms_eps);
                rope_neox(k + t * KV + hh * HD, HD, t, hp->rope_base);
            }
        }
        for (int t = 0; t < NT; t++) {
            for (int64_t hh = 0; hh < NH; hh++) {
                const int64_t kvh = hh / (NH / NKV);
                double s[NT], mx = -1e300, sum = 0;
                for (int p = 0; p <= t; p++) {
                    double d = 0;
                    for (int64_t i = 0; i < HD; i++)
                        d += q[t * Q + hh * HD + i] * k[p * KV + kvh * HD + i];
                    s[p] = d / sqrt((double)HD);
                    mx = fmax(mx, s[p]);
                }
                for (int p = 0; p <= t; p++)
                    sum += s[p] = exp(s[p] - mx);
                for (int64_t i = 0; i < HD; i++) {
                    double acc = 0;
                    for (int p = 0; p <= t; p++)
                        acc += s[p] / sum * v[p * KV + kvh * HD + i];
                    att[hh * HD + i] = acc;
                }
            }
            matvec(wo, Q, E, att, o);
            for (int64_t i = 0; i < E; i++)
                x[t * E + i] += o[i];
            memcpy(h, x + t * E, sizeof(double) * E);
            rmsnorm(h, fn, E, hp->rms_eps);
            matvec(wg, E, F, h, g);
            matvec(wu, E, F, h, u);
            for (int64_t i = 0; i < F; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            matvec(wd, F, E, g, o);
            for (int64_t i = 0; i < E; i++)
                x[t * E + i] += o[i];
        }
        free(an), free(wq), free(wk), free(wv), free(wo), free(qn), free(kn), free(fn);
        free(wg), free(wu), free(wd);
    }
    double *on = tensor("output_norm.weight", &a, &b);
    double *out = tensor("output.weight", &a, &b);
    for (int t = 0; t < NT; t++) {
        memcpy(h, x + t * E, sizeof(double) * E);
        rmsnorm(h, on, E, hp->rms_eps);
        matvec(out ? out : emb, E, V, h, logits + (int64_t)t * V);
    }
    free(on), free(out), free(emb), free(x), free(h), free(q), free(k), free(v), free(att);
    free(o), free(g), free(u);
}

int main(int argc, char **argv)
{
    const char *shared = getenv("INFERD_SHARED");
    if (argc < 2 || !shared)
        return 77;
    char dir[] = "/tmp/inferd-test-qwen3-XXXXXX", path[256], cmd[2048];
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/tiny-qwen3.gguf", dir);
    snprintf(cmd, sizeof(cmd),
             "'%s' mkmodel --preset tiny-qwen3 --quant f32 --vocab '%s/vocab/ggml-vocab-qwen2.gguf' "
             "--out '%s' --seed 7 > /dev/null",
             argv[1], shared, path);
    if (system(cmd) != 0) {
        fprintf(stderr, "mkmodel failed: %s\n", cmd);
        rmdir(dir);
        return 1;
    }
    struct backend *be = cpu_backend_new(2);
    struct model *m;
    struct inf_error err = {0, ""};
    int rc = model_load(path, be, &m, &err);
    unlink(path);
    rmdir(dir);
    if (rc) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    hp = model_hparams(m);
    gf = model_gguf(m);
    CHECK(hp->arch == MODEL_ARCH_QWEN3 && hp->rope_neox == 1);
    CHECK(model_weights(m)->layers[0].q_norm != NULL);
    const int64_t V = hp->n_vocab;

    const int32_t tok[NT] = {9707, 11, 1879, 0, 785, 3974};
    struct graph_params gp = {NT, NT, 1, 16, 0};
    struct graph *g;
    CHECK(graph_new(m, &gp, &g, &err) == 0);
    float *lg = malloc(sizeof(float) * (size_t)(NT * V));
    int32_t pos[NT], seq[NT], rows[NT], bt[1] = {0};
    for (int i = 0; i < NT; i++)
        pos[i] = rows[i] = i, seq[i] = 0;
    const int32_t *tables[1] = {bt};
    struct graph_batch b = {NT, tok, pos, seq, 1, tables, NT, rows, lg, 0};
    CHECK(graph_forward(g, &b) == 0);

    double *ref = malloc(sizeof(double) * (size_t)(NT * V));
    double *ref_nonorm = malloc(sizeof(double) * (size_t)(NT * V));
    reference(tok, 1, ref);
    reference(tok, 0, ref_nonorm);
    double scale = 0, err_eng = 0, err_nonorm = 0;
    for (int64_t i = 0; i < NT * V; i++) {
        scale = fmax(scale, fabs(ref[i]));
        err_eng = fmax(err_eng, fabs(ref[i] - lg[i]));
        err_nonorm = fmax(err_nonorm, fabs(ref[i] - ref_nonorm[i]));
    }
    printf("max |logit| %.3g; engine vs reference %.3g; reference without QK-norm differs by %.3g\n",
           scale, err_eng, err_nonorm);
    /* F16 K/V and accumulator: ~1e-3 relative; QK-norm must matter far more */
    CHECK(err_eng <= 5e-3 * scale);
    CHECK(err_nonorm > 20 * err_eng);
    free(lg);
    free(ref);
    free(ref_nonorm);
    graph_free(g);
    model_free(m);
    backend_free(be);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
