/* test_cuda_model — the whole model on the GPU (DESIGN.md gates 3 and 4).
 *
 * usage: test_cuda_model REFERENCE.json   (INFERD_SHARED set; skips 77 without a GPU)
 * For every case of ../shared/reference/REFERENCE.json, on the model it names:
 *  gate 3a (teacher-forced, CUDA vs the CPU backend): prompt + reference
 *    completion in one batch on both backends; at every step |log p| of the
 *    CPU's top-5 tokens agree within TOL, and the top-1 agrees wherever the
 *    CPU's top-1/top-2 gap exceeds 0.05 nats;
 *  gate 3b (free-running greedy): the GPU's greedy continuation equals the
 *    CPU's up to the first step whose CPU gap is below 0.05 nats;
 * TOL: the GPU computes the CPU's integer sums exactly (it quantizes the
 * activations to the CPU's bytes), every quantized product in the CPU's
 * float chain (mm-cpubits), the attention in the CPU's order with its
 * expf (att-cpubits), and rounds norms, RoPE and SiLU as the CPU does: on
 * quantized models the backends agree to ~1e-6 (7B-shaped and
 * tiny-llama-Q4_K_M: 0), so TOL is DESIGN's 0.05 and top-1 and greedy must
 * match (a mismatch fails). Where products have F32/F16/BF16 weights
 * (float_products) cuBLAS sums them in its own order: the trained
 * stories260K keeps that at ~6e-3 nats (TOL 1e-2, strict), tiny-llama-
 * mixed's two random F16 weights amplify it to ~0.13 (the loose rule
 * below). With INFERD_ATT_SCORES=tensor (config
 * attention_scores = tensor) the scores are the tensor cores' sums, ulps
 * from the CPU's, which the random-weight models amplify (an ulp flips an
 * 8-bit rounding of the next activation) to ~0.3 nats: TOL 0.3, top-1 and
 * greedy mismatches reported, not failed, as test_parity's "loose" does.
 *  gate 4 (chunk and batch invariance on the GPU): the same tokens prefilled
 *    in chunks of 1, 3 and 7 rows, and mixed into one batch with a second
 *    sequence, give logits bit-identical to the one-batch run.
 * Prints the largest difference per case and file.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/gguf.h"
#include "engine/graph.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "tests/check.h"

#define GAP_MIN 0.05

/* 1 when a product's weight is F32/F16/BF16 (cuBLAS sums those in its own
 * order: ulps from the CPU's): a 2-D float tensor other than the token
 * embedding (a row gather, exact) unless the embedding is also the output
 * (tied: no output.weight) */
static int float_products(const char *path)
{
    struct gguf_file *f = NULL;
    struct inf_error err = {0, ""};
    if (gguf_open(path, &f, &err))
        return 1; /* eng_open reports the error */
    int any = 0;
    const int tied = gguf_find_tensor(f, "output.weight") == NULL;
    for (int64_t i = 0; i < gguf_n_tensors(f) && !any; i++) {
        const struct gguf_tensor *t = gguf_tensor_at(f, i);
        const int flt = t->type == QT_F32 || t->type == QT_F16 || t->type == QT_BF16;
        any = flt && t->n_dims >= 2 && t->ne[1] > 1 && (tied || strcmp(t->name, "token_embd.weight"));
    }
    gguf_close(f);
    return any;
}
enum { MAXT = 256, NB = 2 * MAXT / 16 };

struct eng {
    struct backend *be;
    struct model *m;
    struct graph *g;
};

static int eng_open(struct eng *e, struct backend *be, const char *path)
{
    struct inf_error err = {0, ""};
    e->be = be;
    if (model_load(path, be, &e->m, &err)) {
        fprintf(stderr, "cannot load %s on %s: %s\n", path, be->ops->name, err.msg);
        return 1;
    }
    struct graph_params gp = {2 * MAXT, 2 * MAXT, NB, 16, 0};
    if (graph_new(e->m, &gp, &e->g, &err)) {
        fprintf(stderr, "graph_new on %s: %s\n", be->ops->name, err.msg);
        return 1;
    }
    return 0;
}

static void eng_close(struct eng *e)
{
    graph_free(e->g);
    model_free(e->m);
    backend_free(e->be);
}

/* Rows [0, n) of sequence 0 (block table bt) at positions pos0.., logits of
 * every row from first_out on. */
static int run(struct graph *g, const int32_t *bt, const int32_t *tok, int32_t n, int32_t pos0,
               int32_t first_out, float *logits)
{
    int32_t pos[MAXT], seq[MAXT], rows[MAXT];
    for (int32_t i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        seq[i] = 0;
        rows[i] = first_out + i;
    }
    const int32_t *tables[1] = {bt};
    const int32_t nl = n - first_out > 0 ? n - first_out : 0;
    struct graph_batch b = {n, tok, pos, seq, 1, tables, nl, rows, logits, 0};
    return graph_forward(g, &b);
}

static void log_softmax(const float *l, int32_t n, double *out)
{
    float mx = l[0];
    for (int32_t i = 1; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    double s = 0;
    for (int32_t i = 0; i < n; i++)
        s += exp((double)l[i] - mx);
    const double ls = log(s);
    for (int32_t i = 0; i < n; i++)
        out[i] = (double)l[i] - mx - ls;
}

/* top-2 of a row: ids a (best), b */
static void top2(const double *lp, int32_t n, int32_t *a, int32_t *b)
{
    *a = 0;
    *b = 1;
    if (lp[1] > lp[0]) {
        *a = 1;
        *b = 0;
    }
    for (int32_t i = 2; i < n; i++) {
        if (lp[i] > lp[*a]) {
            *b = *a;
            *a = i;
        } else if (lp[i] > lp[*b]) {
            *b = i;
        }
    }
}

/* Where a failing step's raw logits differ, GPU against CPU: spread over
 * the vocabulary (ulps carried through the layers move every logit a
 * little) or concentrated on a few rows (a product or gather bug moves
 * those alone). */
static void logit_diff_report(const float *g, const float *c, int32_t V)
{
    double sum = 0, mean_c = 0;
    int32_t worst[4] = {-1, -1, -1, -1}, n_big = 0;
    for (int32_t t = 0; t < V; t++) {
        const double d = fabs((double)g[t] - c[t]);
        sum += d;
        mean_c += fabs((double)c[t]);
        n_big += d > 0.1;
        for (int k = 0; k < 4; k++)
            if (worst[k] < 0 || d > fabs((double)g[worst[k]] - c[worst[k]])) {
                for (int m = 3; m > k; m--)
                    worst[m] = worst[m - 1];
                worst[k] = t;
                break;
            }
    }
    fprintf(stderr, "  raw logits: mean |gpu - cpu| %.4g (mean |cpu| %.4g), %d of %d differ by > 0.1; largest:",
            sum / V, mean_c / V, n_big, V);
    for (int k = 0; k < 4; k++)
        fprintf(stderr, " id %d %.4f vs %.4f;", worst[k], g[worst[k]], c[worst[k]]);
    fprintf(stderr, "\n");
}

static int32_t *json_ids(json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n + 1) * sizeof(int32_t));
    for (size_t i = 0; i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

int main(int argc, char **argv)
{
    const char *shared = getenv("INFERD_SHARED");
    struct inf_error err = {0, ""};
    if (argc < 2 || !shared) {
        fprintf(stderr, "usage: test_cuda_model REFERENCE.json (INFERD_SHARED set)\n");
        return 77;
    }
    struct backend *gbe = cuda_backend_new(0, &err);
    if (!gbe) {
        printf("skip: %s\n", err.msg);
        return 77;
    }
    /* INFERD_BATCH_VARIANT=1: the GPU backend with batch_invariant = false
     * (cuBLAS's per-n algorithms; K-quant batches from INFERD_MMD_MIN rows
     * as F16, cuda/mm_deq.cu): gates 3a/3b with the loose tolerance, gate 4
     * not asked (that mode does not promise it) */
    const char *bv = getenv("INFERD_BATCH_VARIANT");
    const int variant = bv && *bv && *bv != '0';
    if (variant)
        CHECK(cuda_backend_set_batch_invariant(gbe, 0) == 0);
    /* INFERD_F16_WEIGHTS_MB=N with it: resident F16 copies (config
     * f16_weights_mb), the same gates */
    const char *fw = getenv("INFERD_F16_WEIGHTS_MB");
    if (variant && fw && atoi(fw) > 0)
        CHECK(cuda_backend_set_f16_weights(gbe, (size_t)atoi(fw) << 20) == 0);
    char path[1024];
    snprintf(path, sizeof(path), "%s/reference/%s", shared, argv[1]);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr);
    if (!ref) {
        printf("skip: cannot read %s: %s\n", path, jerr.text);
        backend_free(gbe);
        return 77;
    }
    snprintf(path, sizeof(path), "%s/models/%s", shared,
             json_string_value(json_object_get(ref, "model_file")));
    const int trained = strstr(argv[1], "stories260K") != NULL;
    /* exact attention scores (the default; INFERD_ATT_SCORES=tensor: the
     * tensor cores') give the CPU's bits in every op but the float-weight
     * products (cuBLAS) */
    const int exact = !variant && !cuda_backend_attention_tc(gbe) && !float_products(path);
    const double tol = trained ? 1e-2 : exact ? GAP_MIN : 0.3;
    const int strict = trained || exact; /* top-1 and greedy mismatches fail */
    int n_top1_bad = 0, n_greedy_bad = 0;

    struct eng G, C;
    if (eng_open(&G, gbe, path) || eng_open(&C, cpu_backend_new(2), path))
        return 1;
    const int32_t V = model_hparams(G.m)->n_vocab;
    int32_t bt[MAXT / 16], bt2[MAXT / 16];
    for (int i = 0; i < MAXT / 16; i++) {
        bt[i] = MAXT / 16 - 1 - i;  /* any physical order works */
        bt2[i] = MAXT / 16 + i;     /* the second sequence's blocks */
    }
    float *lg = malloc(sizeof(float) * (size_t)V * MAXT);
    float *lc = malloc(sizeof(float) * (size_t)V * MAXT);
    float *lx = malloc(sizeof(float) * (size_t)V * 2 * MAXT);
    double *pg = malloc(sizeof(double) * (size_t)V), *pc = malloc(sizeof(double) * (size_t)V);
    CHECK(lg && lc && lx && pg && pc);

    json_t *cases = json_object_get(ref, "cases");
    double file_max = 0, ref_gpu = 0, ref_cpu = 0; /* ref_*: against llama.cpp's logprobs */
    int n_top1 = 0, n_greedy = 0, n_inv = 0, n_ref = 0;
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        size_t np, nc;
        int32_t *pt = json_ids(json_object_get(cs, "prompt_tokens"), &np);
        int32_t *ct = json_ids(json_object_get(cs, "completion_tokens"), &nc);
        CHECK(np + nc <= (size_t)MAXT && np > 0);
        int32_t all[MAXT];
        memcpy(all, pt, np * sizeof(int32_t));
        memcpy(all + np, ct, nc * sizeof(int32_t));
        const int32_t n = (int32_t)(np + nc - 1), first = (int32_t)np - 1, nl = n - first;

        /* gate 3a: teacher-forced, every step in one batch on both */
        CHECK(run(G.g, bt, all, n, 0, first, lg) == 0);
        CHECK(run(C.g, bt, all, n, 0, first, lc) == 0);
        double case_max = 0;
        int32_t first_low_gap = nl;
        for (int32_t i = 0; i < nl; i++) {
            log_softmax(lg + (size_t)i * V, V, pg);
            log_softmax(lc + (size_t)i * V, V, pc);
            int32_t a, b, ga, gb;
            top2(pc, V, &a, &b);
            top2(pg, V, &ga, &gb);
            /* the CPU's top-5 */
            int32_t top[5] = {a, b, -1, -1, -1};
            for (int k = 2; k < 5 && k < V; k++) {
                int32_t best = -1;
                for (int32_t t = 0; t < V; t++) {
                    int used = 0;
                    for (int q = 0; q < k; q++)
                        used |= top[q] == t;
                    if (!used && (best < 0 || pc[t] > pc[best]))
                        best = t;
                }
                top[k] = best;
            }
            for (int k = 0; k < 5 && top[k] >= 0; k++) {
                const double d = fabs(pg[top[k]] - pc[top[k]]);
                case_max = d > case_max ? d : case_max;
                if (d > tol) {
                    fprintf(stderr, "case %zu step %d id %d: gpu %.6f cpu %.6f\n", c, i, top[k],
                            pg[top[k]], pc[top[k]]);
                    logit_diff_report(lg + (size_t)i * V, lc + (size_t)i * V, V);
                }
                CHECK(d <= tol);
            }
            /* beside the gate, both backends against llama.cpp's own top-5
             * logprobs where the reference has them (step i predicts
             * completion token i): what a user comparing with llama.cpp
             * sees; reported, not gated (test_parity gates the CPU) */
            json_t *rs = json_array_get(json_object_get(cs, "steps"), (size_t)i);
            if (rs && (int32_t)json_integer_value(json_object_get(rs, "id")) == ct[i]) {
                json_t *top = json_object_get(rs, "top");
                for (size_t k = 0; k < json_array_size(top); k++) {
                    json_t *e = json_array_get(top, k);
                    const int32_t id = (int32_t)json_integer_value(json_object_get(e, "id"));
                    const double lp = json_real_value(json_object_get(e, "logprob"));
                    if (id < 0 || id >= V)
                        continue;
                    ref_gpu = fmax(ref_gpu, fabs(pg[id] - lp));
                    ref_cpu = fmax(ref_cpu, fabs(pc[id] - lp));
                }
                n_ref++;
            }
            const double gap = pc[a] - pc[b];
            if (gap > GAP_MIN) {
                if (ga != a) {
                    fprintf(stderr, "case %zu step %d: top-1 gpu %d cpu %d (gap %.3f)\n", c, i, ga,
                            a, gap);
                    n_top1_bad++;
                    CHECK(!strict);
                }
                n_top1++;
            } else if (first_low_gap == nl) {
                first_low_gap = i;
            }
        }

        /* gate 3b: free-running greedy, GPU against CPU */
        int32_t cur[MAXT];
        memcpy(cur, pt, np * sizeof(int32_t));
        CHECK(run(G.g, bt, cur, (int32_t)np, 0, first, lg) == 0);
        CHECK(run(C.g, bt, cur, (int32_t)np, 0, first, lc) == 0);
        int32_t i;
        for (i = 0; i < first_low_gap && i < (int32_t)nc; i++) {
            log_softmax(lc, V, pc);
            int32_t a, b;
            top2(pc, V, &a, &b);
            log_softmax(lg, V, pg);
            int32_t ga, gb;
            top2(pg, V, &ga, &gb);
            if (pc[a] - pc[b] < GAP_MIN)
                break;
            if (ga != a) {
                fprintf(stderr, "case %zu: greedy step %d gpu %d cpu %d\n", c, i, ga, a);
                n_greedy_bad++;
                CHECK(!strict);
                break;
            }
            n_greedy++;
            cur[np + i] = a;
            CHECK(run(G.g, bt, &cur[np + i], 1, (int32_t)np + i, 0, lg) == 0);
            CHECK(run(C.g, bt, &cur[np + i], 1, (int32_t)np + i, 0, lc) == 0);
        }

        /* gate 4: the one-batch logits again, then the same rows in chunks */
        CHECK(run(G.g, bt, all, n, 0, first, lg) == 0);
        const int chunks[3] = {1, 3, 7};
        for (int k = 0; k < 3 && !variant; k++) { /* variant: not promised, skipped */
            int32_t done = 0;
            while (done < n) {
                int32_t m = n - done < chunks[k] ? n - done : chunks[k];
                /* logits of the rows at or past `first` in this chunk */
                int32_t fo = first - done > 0 ? first - done : 0;
                if (fo > m)
                    fo = m;
                float *dst = fo < m ? lx + (size_t)(done + fo - first) * V : lx;
                CHECK(run(G.g, bt, all + done, m, done, fo, dst) == 0);
                done += m;
            }
            CHECK(memcmp(lx, lg, sizeof(float) * (size_t)V * nl) == 0);
            n_inv++;
        }
        /* mixed with another sequence (the case's tokens reversed) in one batch */
        if (!variant) {
            int32_t tok[2 * MAXT], pos[2 * MAXT], seq[2 * MAXT], rows[MAXT];
            for (int32_t t = 0; t < n; t++) {
                tok[2 * t] = all[t];
                pos[2 * t] = t;
                seq[2 * t] = 0;
                tok[2 * t + 1] = all[n - 1 - t];
                pos[2 * t + 1] = t;
                seq[2 * t + 1] = 1;
            }
            for (int32_t t = 0; t < nl; t++)
                rows[t] = 2 * (first + t);
            const int32_t *tables[2] = {bt, bt2};
            struct graph_batch b = {2 * n, tok, pos, seq, 2, tables, nl, rows, lx, 0};
            CHECK(graph_forward(G.g, &b) == 0);
            CHECK(memcmp(lx, lg, sizeof(float) * (size_t)V * nl) == 0);
            n_inv++;
        }
        printf("case %zu: max |dlogprob| gpu vs cpu %.3g over %d steps, greedy %d steps equal\n",
               c, case_max, nl, i);
        file_max = case_max > file_max ? case_max : file_max;
        free(pt);
        free(ct);
    }
    printf("%s: gpu vs cpu max |dlogprob| %.3g (tolerance %g), top-1 %d of %d steps, greedy %d "
           "steps (%d cases stopped early), %d invariance checks bit-identical\n",
           argv[1], file_max, tol, n_top1 - n_top1_bad, n_top1, n_greedy, n_greedy_bad, n_inv);
    if (n_ref)
        printf("%s: against llama.cpp's top-5 logprobs over %d steps: gpu max |dlogprob| %.3g, cpu %.3g\n",
               argv[1], n_ref, ref_gpu, ref_cpu);
    free(lg);
    free(lc);
    free(lx);
    free(pg);
    free(pc);
    eng_close(&G);
    eng_close(&C);
    json_decref(ref);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
