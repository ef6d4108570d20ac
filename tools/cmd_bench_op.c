/* cmd_bench_op — `inferd bench --op`: one matrix product at a time, as the
 * seeds measure kernels: µs per product, TOPS and weight GB/s, beside the
 * H200's measured ceilings and llama.cpp's figures for the same product.
 *
 *   inferd bench --op [--backend cuda] [--types q4_K,q6_K,...] [--n 1,8,512,2048]
 *                     [--shapes llama3-ffn-down,qwen7b] [--reps 30]
 *                     [--batch-invariant true|false]
 *
 * Weights: random rows quantized by quant_quantize_weights, 64 distinct rows
 * tiled over the matrix (speed does not depend on the values; quantizing a
 * 58M-element matrix would dominate the run). Activations: random floats.
 * Time: reps products queued back to back, then one sync; the activation
 * quantization the product needs is inside it (as llama.cpp's
 * test-backend-ops MUL_MAT includes its src1 conversion).
 * Single-threaded CLI code.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/backend_open.h"
#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/err.h"
#include "engine/quant.h"
#include "tools/cmds.h"

/* ../shared/peer/h200-ceilings.md (measured 2026-12-01) */
#define OP_PEAK_TOPS 1287.0  /* mma.sync m16n8k32 s8 */
#define OP_PEAK_GBS 4490.0   /* streaming read */

struct op_shape {
    const char *name;
    int64_t ne0, ne1; /* weight: ne1 rows of ne0 */
};

static const struct op_shape op_shapes[] = {
    {"llama3-ffn-down", 14336, 4096}, /* the 4096 x 14336 product of the peer file */
    {"qwen7b-attn-q", 3584, 3584},
    {"qwen7b-attn-kv", 3584, 512},
    {"qwen7b-ffn-up", 3584, 18944},
    {"qwen7b-ffn-down", 18944, 3584},
};

/* llama.cpp on the H200, 4096 x 14336, µs at n = 1 / 8 / 512
 * (../shared/peer/llamacpp-h200.md, test-backend-ops, 2026-11-29) */
static const struct {
    int type;
    double us[3];
} op_peer[] = {
    {QT_Q4_0, {14.4, 33.1, 312}}, {QT_Q8_0, {23.1, 46.0, 315}}, {QT_Q4_K, {15.9, 47.1, 349}},
    {QT_Q5_K, {19.2, 48.8, 360}}, {QT_Q6_K, {29.4, 62.5, 427}}, {QT_F16, {29.8, 48.7, 117}},
};

static double op_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int op_type_parse(const char *s)
{
    for (int t = 0; t < QT_COUNT; t++) {
        const char *n = quant_type_name(t);
        if (n && quant_type_supported(t) && !strcmp(n, s))
            return t;
    }
    return -1;
}

static double op_peer_us(int type, const struct op_shape *sh, int n)
{
    if (strcmp(sh->name, "llama3-ffn-down"))
        return 0;
    const int k = n == 1 ? 0 : n == 8 ? 1 : n == 512 ? 2 : -1;
    for (size_t i = 0; k >= 0 && i < sizeof(op_peer) / sizeof(op_peer[0]); i++)
        if (op_peer[i].type == type)
            return op_peer[i].us[k];
    return 0;
}

/* xorshift: a fixed stream, so every run measures the same bytes */
static float op_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

/* One (type, shape): weight registered with be, products for each n. */
static int op_run_one(struct backend *be, int type, const struct op_shape *sh, const int *ns,
                      int n_n, int reps)
{
    const size_t rb = quant_row_bytes(type, sh->ne0);
    const size_t bytes = rb * (size_t)sh->ne1;
    enum { DISTINCT = 64 };
    uint8_t *host = malloc(bytes);
    float *row = malloc(sizeof(float) * (size_t)sh->ne0);
    int maxn = 1;
    for (int i = 0; i < n_n; i++)
        maxn = ns[i] > maxn ? ns[i] : maxn;
    float *xh = malloc(sizeof(float) * (size_t)sh->ne0 * (size_t)maxn);
    if (!host || !row || !xh) {
        free(host);
        free(row);
        free(xh);
        fprintf(stderr, "inferd bench --op: out of memory\n");
        return CMD_FAIL;
    }
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < DISTINCT && r < sh->ne1; r++) {
        for (int64_t i = 0; i < sh->ne0; i++)
            row[i] = op_rand(&seed) * 0.05f;
        quant_quantize_weights(type, row, host + (size_t)r * rb, sh->ne0);
    }
    for (int64_t r = DISTINCT; r < sh->ne1; r++)
        memcpy(host + (size_t)r * rb, host + (size_t)(r % DISTINCT) * rb, rb);
    for (size_t i = 0; i < (size_t)sh->ne0 * (size_t)maxn; i++)
        xh[i] = op_rand(&seed);

    struct backend_weight w;
    memset(&w, 0, sizeof(w));
    snprintf(w.name, sizeof(w.name), "bench.%s", quant_type_name(type));
    w.type = type;
    w.ne0 = sh->ne0;
    w.ne1 = sh->ne1;
    w.row_bytes = rb;
    w.host = host;
    int rc = CMD_FAIL;
    float *dx = NULL, *dy = NULL;
    struct backend_reserve res = {maxn, sh->ne0, 16, 1, 1};
    if (be->ops->weight_register(be, &w) || be->ops->reserve(be, &res)) {
        fprintf(stderr, "inferd bench --op: cannot place the %s weight on %s\n",
                quant_type_name(type), be->ops->name);
        goto out;
    }
    dx = be->ops->alloc(be, sizeof(float) * (size_t)sh->ne0 * (size_t)maxn);
    dy = be->ops->alloc(be, sizeof(float) * (size_t)sh->ne1 * (size_t)maxn);
    if (!dx || !dy)
        goto out;
    be->ops->upload(be, dx, xh, sizeof(float) * (size_t)sh->ne0 * (size_t)maxn);
    /* which kernel family the CUDA dispatcher gave a float weight: the
     * table's type column says it (f16/cublas vs f16/float) */
    char tname[32];
    snprintf(tname, sizeof(tname), "%s", quant_type_name(type));
    if (!strcmp(be->ops->name, "cuda") && (type == QT_F32 || type == QT_F16 || type == QT_BF16))
        snprintf(tname, sizeof(tname), "%s/%s", quant_type_name(type),
                 cuda_backend_mm_cublas(be, &w) ? "cublas" : "float");
    /* batch_invariant = false: K-quants from this many rows as F16 through
     * cuBLAS (cuda/mm_deq.cu), shown as q4_K/f16 */
    const int deq = !strcmp(be->ops->name, "cuda") ? cuda_backend_mm_deq_min(be, &w) : 0;
    const int f16r = deq && cuda_backend_mm_deq_resident(be, &w); /* a resident F16 copy: /f16r */
    for (int k = 0; k < n_n; k++) {
        const int n = ns[k];
        if (deq)
            snprintf(tname, sizeof(tname), "%s%s", quant_type_name(type),
                     n < deq ? "" : f16r ? "/f16r" : "/f16");
        for (int i = 0; i < 3; i++) /* warm-up: module load, clocks */
            be->ops->mul_mat(be, &w, dx, dy, n);
        if (be->ops->sync(be))
            goto out;
        /* fewer repetitions where one product takes long (CPU) */
        const double t0 = op_now();
        int done = 0;
        do {
            for (int i = 0; i < reps; i++)
                be->ops->mul_mat(be, &w, dx, dy, n);
            if (be->ops->sync(be))
                goto out;
            done += reps;
        } while (op_now() - t0 < 0.05 && done < 100 * reps);
        const double us = (op_now() - t0) / done * 1e6;
        const double ops = 2.0 * (double)sh->ne0 * (double)sh->ne1 * n;
        const double tops = ops / us * 1e-6, gbs = (double)bytes / us * 1e-3;
        const double peer = op_peer_us(type, sh, n);
        char peer_s[48] = "–";
        if (peer > 0)
            snprintf(peer_s, sizeof(peer_s), "%.1f (%.2fx)", peer, peer / us);
        printf("| %s | %s %lldx%lld | %d | %.1f | %.1f | %.0f | %.1f%% | %.1f%% | %s |\n",
               tname, sh->name, (long long)sh->ne0, (long long)sh->ne1, n, us,
               tops, gbs, 100.0 * tops / OP_PEAK_TOPS, 100.0 * gbs / OP_PEAK_GBS, peer_s);
        fflush(stdout);
    }
    rc = CMD_OK;
out:
    be->ops->free(be, dx);
    be->ops->free(be, dy);
    if (w.data)
        be->ops->weight_release(be, &w);
    free(host);
    free(row);
    free(xh);
    return rc;
}

static int op_list(const char *s, int *out, int cap)
{
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 65536 || (*end && *end != ','))
            return -1;
        out[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

int cmd_bench_op(int argc, char **argv)
{
    char types_s[256] = "q4_K,q6_K,q5_K,q8_0,q4_0,f16";
    char shapes_s[256] = "llama3-ffn-down";
    int ns[16] = {1, 8, 512, 2048}, n_n = 4, reps = 30, kind = backend_kind_default();
    int no_inv = 0, f16_mb = 0;
    long threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--op"))
            continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: inferd bench --op [--backend auto|cuda|cpu] [--types q4_K,q6_K,...]\n"
                   "                    [--n 1,8,512,2048] [--shapes NAME,...|all] [--reps 30]\n"
                   "                    [--threads 2] [--batch-invariant true|false] [--f16-weights MiB]\n"
                   "shapes: llama3-ffn-down (4096x14336, the peer file's), qwen7b-attn-q,\n"
                   "        qwen7b-attn-kv, qwen7b-ffn-up, qwen7b-ffn-down; all = every one\n"
                   "--batch-invariant false: cuBLAS picks its algorithm per n for F32/F16/BF16,\n"
                   "        and K-quants from INFERD_MMD_MIN=N rows run as F16 through cuBLAS\n"
                   "        (the config key batch_invariant; default true: one per shape, int8)\n"
                   "--f16-weights MiB: with --batch-invariant false, the weight's F16 copy made once\n"
                   "        at registration and kept (config key f16_weights_mb), shown as q4_K/f16r\n");
            return CMD_OK;
        }
        if (!v) {
            fprintf(stderr, "inferd bench --op: %s needs a value\n", a);
            return CMD_USAGE;
        }
        i++;
        if (!strcmp(a, "--types"))
            snprintf(types_s, sizeof(types_s), "%s", v);
        else if (!strcmp(a, "--shapes"))
            snprintf(shapes_s, sizeof(shapes_s), "%s", v);
        else if (!strcmp(a, "--n")) {
            if ((n_n = op_list(v, ns, 16)) < 1) {
                fprintf(stderr, "inferd bench --op: bad --n list '%s'\n", v);
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--reps") || !strcmp(a, "--threads")) {
            char *end;
            long x = strtol(v, &end, 10);
            if (*end || x < 1 || x > 10000) {
                fprintf(stderr, "inferd bench --op: bad %s '%s'\n", a, v);
                return CMD_USAGE;
            }
            if (!strcmp(a, "--reps"))
                reps = (int)x;
            else
                threads = x;
        } else if (!strcmp(a, "--batch-invariant")) {
            if (batch_invariant_parse(v, &no_inv)) {
                fprintf(stderr, "inferd bench --op: --batch-invariant must be true or false\n");
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--f16-weights")) {
            if (f16_weights_parse(v, &f16_mb)) {
                fprintf(stderr, "inferd bench --op: --f16-weights expects MiB (0..4194304)\n");
                return CMD_USAGE;
            }
        } else if (!strcmp(a, "--backend")) {
            if (backend_kind_parse(v, &kind)) {
                fprintf(stderr, "inferd bench --op: --backend must be auto, cuda or cpu\n");
                return CMD_USAGE;
            }
        } else {
            fprintf(stderr, "inferd bench --op: unknown flag %s\n", a);
            return CMD_USAGE;
        }
    }
    struct inf_error err = {0, ""};
    struct backend *be = NULL;
    const struct backend_open_params bp = {kind, 0, (int)threads, CPU_NUMERICS_INVARIANT, no_inv, 0, f16_mb,
                                            CUDA_Q6P_PERCENT};
    if (backend_open(&bp, &be, &err)) {
        fprintf(stderr, "inferd bench --op: %s\n", err.msg);
        return CMD_FAIL;
    }
    printf("backend %s; ceilings: mma.sync %.0f TOPS, read %.0f GB/s "
           "(../shared/peer/h200-ceilings.md); llama.cpp: ../shared/peer/llamacpp-h200.md\n",
           be->ops->name, OP_PEAK_TOPS, OP_PEAK_GBS);
    printf("| type | shape (ne0 x ne1) | n | µs | TOPS | weight GB/s | of mma peak | of read BW "
           "| llama.cpp µs (speed-up) |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    int rc = CMD_OK;
    char *save = NULL;
    for (char *t = strtok_r(types_s, ",", &save); t && rc == CMD_OK; t = strtok_r(NULL, ",", &save)) {
        const int type = op_type_parse(t);
        if (type < 0) {
            fprintf(stderr, "inferd bench --op: unknown type '%s'\n", t);
            rc = CMD_USAGE;
            break;
        }
        for (size_t s = 0; s < sizeof(op_shapes) / sizeof(op_shapes[0]) && rc == CMD_OK; s++)
            if (!strcmp(shapes_s, "all") || strstr(shapes_s, op_shapes[s].name))
                rc = op_run_one(be, type, &op_shapes[s], ns, n_n, reps);
    }
    backend_free(be);
    return rc;
}
