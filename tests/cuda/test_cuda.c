/* test_cuda — the CUDA backend answers on a machine with a GPU; skips (77)
 * when the binary has no CUDA backend or the machine has no device.
 * Also: the backend's prewarm launches every kernel its dispatcher can pick
 * (cuda_op_mul_mat: the warp-per-row product for every weight type, MMQ for
 * every quantized type past 8 rows; get_rows per type; each variant of the
 * other ops), each once, and reports it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cuda/cuda.h"
#include "engine/err.h"
#include "engine/quant.h"
#include "tests/check.h"

/* every name prewarm reports; more than this is a failure, not a silent
 * truncation (the table outgrew 128 entries once and the later names
 * went unseen) */
#define SEEN_MAX 512
static char seen[SEEN_MAX][96];
static int n_seen, n_lost;

static void record(void *ud, const char *name, double ms)
{
    (void)ud;
    if (n_seen < SEEN_MAX)
        snprintf(seen[n_seen++], sizeof(seen[0]), "%s", name);
    else
        n_lost++;
    printf("prewarm: %-36s %.3f ms\n", name, ms);
}

/* a product variant: its exact name ("... nc=1 w=1" is a prefix of
 * "... nc=1 w=1 u=8") */
static int has_name(const char *p)
{
    for (int i = 0; i < n_seen; i++)
        if (!strcmp(seen[i], p))
            return 1;
    return 0;
}

static int has_prefix(const char *p)
{
    for (int i = 0; i < n_seen; i++)
        if (!strncmp(seen[i], p, strlen(p)))
            return 1;
    return 0;
}

int main(void)
{
    struct cuda_device_info d[8];
    char msg[256];
    if (!cuda_compiled()) {
        printf("built without CUDA: skip\n");
        return 77;
    }
    int n = cuda_devices(d, 8);
    if (n <= 0) {
        printf("no CUDA device: skip\n");
        return 77;
    }
    for (int i = 0; i < n && i < 8; i++)
        printf("device %d: %s sm_%d, %zu MiB, %d SMs\n", d[i].index, d[i].name, d[i].sm,
               d[i].total_mem >> 20, d[i].n_sm);
    int rc = cuda_selftest(msg, sizeof(msg));
    printf("selftest: %s\n", msg);
    CHECK(rc == INF_OK);

    struct inf_error err = {0, ""};
    struct backend *be = cuda_backend_new(0, &err);
    CHECK(be != NULL);
    if (!be)
        return 1;
    CHECK(be->ops->prewarm != NULL);
    CHECK(be->ops->prewarm(be, record, NULL) == 0);
    CHECK(n_lost == 0);
    static const int types[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q8_0, QT_Q4_K, QT_Q5_K,
                                QT_Q6_K};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        char p[64];
        snprintf(p, sizeof(p), "get_rows<%s>", quant_type_name(types[i]));
        CHECK(has_prefix(p));
    }
    /* every product kernel the dispatcher's table names, by its own name;
     * the design card's Q6_K <2,true> and <2,false> among them */
    int n_var = cuda_mm_variant_count(), q6_2t = 0, q6_2f = 0;
    for (int i = 0; i < n_var; i++) {
        char p[64];
        cuda_mm_variant_name(i, p, sizeof(p));
        /* the F16 path of batch_invariant = false: listed, launched below;
         * the exact F16 Q4_K product: launched wherever the dispatcher can
         * pick it (by default where its wgmma form runs: sm_90 builds on
         * compute capability 9.0), listed as not picked elsewhere; Q6_K
         * on int8 wgmma likewise; Q4_K's from its planes (mmq4p) where
         * Q4_K weights get planes (the same devices, unless INFERD_Q4P=0) */
        if ((strstr(p, "f16 cublas") || (strstr(p, "mmqh<") && cuda_backend_mmqh_min(be) == 0) ||
             (strstr(p, "mmq6w<") && cuda_backend_mmq6w_min(be) == 0) || strstr(p, "mmq4p<")) &&
            !has_name(p)) {
            char q[96];
            snprintf(q, sizeof(q), "%s (not picked here)", p);
            CHECK(has_name(q));
            continue;
        }
        if (!has_name(p))
            printf("prewarm did not launch %s\n", p);
        CHECK(has_name(p));
        q6_2t += !strcmp(p, "mul_mat<q6_K> mmq<2,true>");
        q6_2f += !strcmp(p, "mul_mat<q6_K> mmq<2,false>");
    }
    CHECK(n_var >= 8 && q6_2t == 1 && q6_2f == 1);
    const char *others[] = {"rms_norm (warp", "rms_norm (block", "rope (llama)", "rope (neox)",
                            "kv_store", "attention (grouped staged, head_dim 64)", "attention (grouped staged, head_dim 128)",
                            "attention (decode split, helper walk, head_dim 64)", "attention (decode split, helper walk, head_dim 128)",
                            "attention (decode split, one-warp walk, head_dim 64)",
                            "attention (decode split, one-warp walk, head_dim 128)",
                            "attention (grouped staged, two rows a block, head_dim 64)",
                            "attention (grouped staged, two rows a block, head_dim 128)",
                            "attention (grouped, head_dim 32)", "attention (grouped, head_dim 96)",
                            "attention (per head, head_dim 64)", "attention (per head, head_dim 128)",
                            "attention (per head, head_dim 256)", "silu_mul", "add", "add_bias", "gather",
                            "sample"};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++)
        CHECK(has_prefix(others[i]));
    /* the one-row products' quantizer-planes forms (where the device runs
     * mmvt): every warp count the dispatcher can give each type (Q4_K 8,
     * 12, 14; Q5_K 8, 12; Q6_K 8) at 32 and 16 rows a group, or none */
    int n_planes = 0;
    for (int i = 0; i < n_seen; i++)
        n_planes += strstr(seen[i], " planes") != NULL;
    if (n_planes) {
        static const char *tn[] = {"q4_K", "q5_K", "q6_K"};
        static const int n_cw[] = {3, 2, 1}, cws[] = {8, 12, 14};
        for (int t = 0; t < 3; t++)
            for (int k = 0; k < n_cw[t]; k++)
                for (int rb = 32; rb >= 16; rb -= 16) {
                    char q[96];
                    snprintf(q, sizeof(q), "mul_mat<%s> mmvt rb=%d cw=%d planes", tn[t], rb, cws[k]);
                    if (!has_name(q))
                        printf("prewarm did not launch %s\n", q);
                    CHECK(has_name(q));
                }
        CHECK(n_planes == 12);
    }
    printf("prewarm: %d kernels\n", n_seen);
    /* batch_invariant = false: a backend of its own (the mode is fixed
     * before its first weight) whose prewarm launches the F16 path too */
    {
        setenv("INFERD_MMD_MIN", "64", 0); /* the path on from 64 rows on any GPU, read at cuda_backend_new */
        struct backend *pn = cuda_backend_new(0, &err);
        CHECK(pn != NULL);
        if (pn) {
            CHECK(cuda_backend_set_batch_invariant(pn, 0) == 0);
            n_seen = 0;
            CHECK(pn->ops->prewarm(pn, record, NULL) == 0);
            for (int i = 0; i < n_var; i++) {
                char p[64];
                cuda_mm_variant_name(i, p, sizeof(p));
                if (strstr(p, "f16 cublas") && !has_name(p))
                    printf("prewarm (batch_invariant = false) did not launch %s\n", p);
                CHECK(!strstr(p, "f16 cublas") || has_name(p));
            }
            backend_free(pn);
        }
    }
    backend_free(be);
    return fails ? 1 : 0;
}
