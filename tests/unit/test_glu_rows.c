/* test_glu_rows — the SwiGLU epilogue's row map (engine/cuda/glu_rows.h),
 * without a GPU: for fused gate/up weights of 2F rows (F not a multiple of
 * the 32 gate rows a 64-row block pairs, and F that is), every fused row is
 * read by exactly one tile row of one block, each gate row j and its up row
 * F + j sit in tile rows tr and tr + 8 of one m16 tile (a thread's
 * accumulator rows g and g + 8), the epilogue stores that pair to output
 * column j, and nothing past the weight is read; without the epilogue the
 * map is the identity. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/cuda/glu_rows.h"
#include "tests/check.h"

static void check_glu(int32_t F)
{
    const int32_t n_w = 2 * F, blocks = (n_w + 63) / 64;
    int *seen = calloc((size_t)n_w, sizeof(int));
    CHECK(seen != NULL);
    if (!seen)
        return;
    int bad = 0;
    for (int32_t b = 0; b < blocks; b++) {
        const int32_t m0 = 64 * b;
        for (int tr = 0; tr < 64; tr++) {
            const int32_t r = mmq_wrow(m0, tr, n_w, F);
            if (r < 0)
                continue;
            bad += r >= n_w;
            if (r < n_w)
                seen[r]++;
            if ((tr & 8) == 0) {
                /* gate row in accumulator row g: up row F + r in g + 8, and
                 * the pair stored to column r */
                bad += r >= F;
                bad += mmq_wrow(m0, tr + 8, n_w, F) != r + F;
                bad += mmq_glu_out(m0, tr >> 4, tr & 7) != r;
            }
        }
    }
    for (int32_t r = 0; r < n_w; r++)
        bad += seen[r] != 1;
    if (bad)
        fprintf(stderr, "F=%d: %d mismatches\n", F, bad);
    CHECK(bad == 0);
    free(seen);
}

int main(void)
{
    static const int32_t fs[] = {1, 7, 8, 31, 32, 33, 100, 18944, 4101};
    for (size_t i = 0; i < sizeof(fs) / sizeof(fs[0]); i++)
        check_glu(fs[i]);
    /* glu = 0: the identity, -1 past the weight */
    for (int tr = 0; tr < 64; tr++) {
        CHECK(mmq_wrow(128, tr, 1000, 0) == 128 + tr);
        CHECK(mmq_wrow(960, tr, 1000, 0) == (960 + tr < 1000 ? 960 + tr : -1));
    }
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
