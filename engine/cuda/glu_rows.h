/* cuda/glu_rows — the row map of the MMQ kernels' SwiGLU epilogue
 * (cuda/tiles.cuh mmq_tile_store, ops->mul_mat_swiglu), in a header that
 * compiles as C11 and as CUDA C++, so tests/unit/test_glu_rows.c checks the
 * map on a machine without a GPU. */
#ifndef INFERD_CUDA_GLU_ROWS_H
#define INFERD_CUDA_GLU_ROWS_H

#include <stdint.h>

#ifdef __CUDACC__
#define GLU_HD __host__ __device__ __forceinline__
#else
#define GLU_HD inline
#endif

/* The weight row of tile row tr (0..63) of the MMQ block whose first tile
 * row is m0 (a multiple of 64), or -1 past the weight. The identity, except
 * under the SwiGLU epilogue (glu = F: a fused gate/up weight of 2F rows,
 * gate rows 0..F-1 then up), where m16 tile q of the block (tile rows
 * 16q..16q+15) takes gate rows jb + 8q .. jb + 8q + 7, then the same rows
 * of up (F + j), jb = m0 / 2: the m16n8 layout then hands each thread gate
 * row j in accumulator row g and up row j in g + 8, for the same activation
 * rows. Only which rows a tile reads changes, never a row's arithmetic: the
 * bits are the plain product's. */
static GLU_HD int32_t mmq_wrow(int32_t m0, int tr, int32_t n_w, int32_t glu)
{
    if (!glu)
        return m0 + tr < n_w ? m0 + tr : -1;
    const int32_t j = m0 / 2 + 8 * (tr >> 4) + (tr & 7);
    return j < glu ? j + ((tr & 8) ? glu : 0) : -1;
}

/* Under the epilogue: the gate row (the output column, stored when < F)
 * whose silu(gate) * up the thread with accumulator rows g and g + 8 of m16
 * tile q (0..3) of the block at m0 holds */
static GLU_HD int32_t mmq_glu_out(int32_t m0, int q, int g)
{
    return m0 / 2 + 8 * q + g;
}

#endif
