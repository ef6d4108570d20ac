/* tests/cuda/test_cuda_host — CUDA backend code that runs on the host: no
 * GPU needed, so CI (which builds the CUDA backend, sm_90, without a
 * device) runs it.
 *
 * cuda/mm_deq.cu's dequantization (batch_invariant = false: K-quant batches
 * as F16 through cuBLASLt): the per-thread arithmetic of
 * mmd_dequant_kernel (eight elements a thread, the super-block and
 * sub-block offsets, the scale and min decode, the Q5_K/Q6_K high bits) run
 * on the CPU against engine/quant.c's dequantization, every element
 * F16-rounded as the kernel stores it. Rows from quantized random weights,
 * and rows of random bytes (every 6-bit scale/min pattern, both halves of
 * the Q4_K/Q5_K scale packing) with sane F16 d/dmin. And the register-A
 * wgmma kernels' weight arithmetic (cuda/mmqr.cu's fragments in its k
 * order, cuda/mmq6w.cu's two u8 planes) against exact integer sums; the
 * table of resident copies (cuda/wcopies.cuh). Exit 77 without a CUDA
 * build.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/cuda.h"
#include "engine/quant.h"
#include "engine/quant_blocks.h"
#include "tests/check.h"

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float frand(void) /* [-1, 1) */
{
    return (float)rng() / 2147483648.0f - 1.0f;
}

enum { NE0 = 1024, ROWS = 37 };

/* d (and dmin) of super-block i of row r in a row of random bytes: small
 * positive F16 values, as real files have */
static void sane_scales(int type, uint8_t *row)
{
    for (int i = 0; i < NE0 / QK_K; i++) {
        const quant_f16 d = quant_f32_to_f16(0.001f + 0.01f * (frand() + 1.0f));
        const quant_f16 m = quant_f32_to_f16(0.001f + 0.01f * (frand() + 1.0f));
        if (type == QT_Q4_K) {
            struct block_q4_K *b = (struct block_q4_K *)row + i;
            b->d = d;
            b->dmin = m;
        } else if (type == QT_Q5_K) {
            struct block_q5_K *b = (struct block_q5_K *)row + i;
            b->d = d;
            b->dmin = m;
        } else {
            ((struct block_q6_K *)row + i)->d = d;
        }
    }
}

static void check_type(int type)
{
    const size_t rb = quant_row_bytes(type, NE0);
    uint8_t *w = malloc(rb * ROWS);
    float *x = malloc(sizeof(float) * NE0);
    CHECK(w && x);
    if (!w || !x)
        exit(1);
    for (int form = 0; form < 2; form++) {
        for (int r = 0; r < ROWS; r++) {
            uint8_t *row = w + (size_t)r * rb;
            if (form == 0) {
                const float scale = powf(10.0f, 2.0f * frand());
                for (int i = 0; i < NE0; i++)
                    x[i] = scale * frand() + (r % 3 == 0 ? scale : 0.0f); /* some rows off-centre: mins */
                CHECK(quant_quantize_weights(type, x, row, NE0) == 0);
            } else {
                for (size_t i = 0; i < rb; i++)
                    row[i] = (uint8_t)rng();
                sane_scales(type, row);
            }
        }
        char msg[160];
        const int64_t bad = cuda_mmd_host_check(type, w, NE0, ROWS, msg, sizeof(msg));
        printf("mmd-host %-5s %-14s %lld of %d elements differ%s%s\n", quant_type_name(type),
               form ? "random bytes" : "quantized", (long long)bad, NE0 * ROWS, bad ? ": " : "", msg);
        CHECK(bad == 0);
    }
    /* a type the path does not take */
    CHECK(cuda_mmd_host_check(QT_Q8_0, w, NE0, 1, NULL, 0) == -1);
    free(w);
    free(x);
}

/* The wgmma products' shape rule on the H100 / H200's 132 SMs, at the
 * shapes bench/RESULTS.md session 44 measured both ways (calls 6-8; in
 * brackets the wgmma form's time over mmqk's): each choice here is the
 * faster one there */
static void check_rule(void)
{
    static const struct {
        const char *name;
        int q6;
        int64_t ne0, n_w;
        int32_t rows;
        int want;
    } cases[] = {
        {"q4_K 4096 x 14336, 128 rows (32 blocks: 1.56x)", 0, 14336, 4096, 128, 0},
        {"q4_K 4096 x 14336, 192 rows (64 blocks: 0.95x)", 0, 14336, 4096, 192, 1},
        {"q4_K 4096 x 14336, 512 rows", 0, 14336, 4096, 512, 1},
        {"q4_K 3584 x 3584, 256 rows (56 blocks, K 3,584: 1.02-1.05x)", 0, 3584, 3584, 256, 0},
        {"q4_K 3584 x 3584, 384 rows (84 blocks)", 0, 3584, 3584, 384, 1},
        {"q4_K 3584 x 18944, 256 rows (56 blocks, K 18,944: 0.94x)", 0, 18944, 3584, 256, 1},
        {"q4_K 18944 x 3584, 128 rows (148 blocks: 0.87x)", 0, 3584, 18944, 128, 1},
        {"q4_K 18944 x 3584, 64 rows (148 blocks: 1.30x)", 0, 3584, 18944, 64, 0},
        {"q6_K 3584 x 3584, 192 rows (56 blocks: 0.79x)", 1, 3584, 3584, 192, 1},
        {"q6_K 4096 x 14336, 128 rows (32 blocks: 1.31x)", 1, 14336, 4096, 128, 0},
        {"q6_K 512 x 3584, 256 rows (8 blocks: 1.40x)", 1, 3584, 512, 256, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const int got = cuda_mmqh_rule(132, cases[i].q6, cases[i].ne0, cases[i].n_w, cases[i].rows);
        if (got != cases[i].want)
            printf("rule: %s: %s, want %s\n", cases[i].name, got ? "wgmma" : "mmqk", cases[i].want ? "wgmma" : "mmqk");
        CHECK(got == cases[i].want);
    }
    printf("rule       %zu shapes as measured\n", sizeof(cases) / sizeof(cases[0]));
}

int main(void)
{
    if (!cuda_compiled()) {
        printf("built without CUDA: skip\n");
        return 77;
    }
    static const int types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K};
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        check_type(types[t]);
    /* the register-A wgmma kernels' weight arithmetic (cuda/mmqr.cu,
     * cuda/mmq6w.cu) */
    char msg[160];
    int64_t bad = cuda_mmqr_host_check(2000, msg, sizeof(msg));
    printf("mmqr-host  %lld of 4000 rows + 32000 min terms + 128 quantizer positions differ from the natural "
           "order%s%s\n",
           (long long)bad, bad ? ": " : "", msg);
    CHECK(bad == 0);
    bad = cuda_mmq6w_host_check(2000, msg, sizeof(msg));
    printf("mmq6w-host %lld of 65536 words + 2000 super-blocks differ%s%s\n", (long long)bad, bad ? ": " : "", msg);
    CHECK(bad == 0);
    bad = cuda_mmq4p_host_check(2000, msg, sizeof(msg));
    printf("mmq4p-host %lld of 4096 words + 512000 weights differ%s%s\n", (long long)bad, bad ? ": " : "", msg);
    CHECK(bad == 0);
    /* the resident copies' table (F16 copies, mmq6w's Q6_K planes) */
    bad = cuda_wcopies_host_check(msg, sizeof(msg));
    printf("wcopies-host %lld checks failed%s%s\n", (long long)bad, bad ? ": " : "", msg);
    CHECK(bad == 0);
    check_rule();
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
