/* cuda/tiles — the per-architecture tile table of the product kernels.
 *
 * Rows here change speed, never results: every kernel runs the same
 * canonical block arithmetic (cuda/qtypes.cuh) whatever its tile shape or
 * occupancy, so a row may be retuned without touching a test's expectations.
 *
 * sm_90 (H100/H200: 132 SMs, 228 KB shared memory and 64 K registers per SM,
 * measured in bench/RESULTS.md):
 *   MMQ 64 x 64 tile, 256 threads, 79 KB of dynamic shared memory (the int8
 *   tile, scales, and the cp.async raw staging of the next stage): two
 *   blocks fit (158 KB), so __launch_bounds__(256, 2) caps registers at
 *   65,536 / 512 = 128 (q6_K spills 72 bytes under that cap). The
 *   K-quants past 128 activation rows: 64 x 128 (NT = 4), 93-184 KB, two
 *   blocks where KDR = 1's 93-111 KB fit, registers capped at 128 again.
 * sm_121 (GB10, DGX Spark: 48 SMs, about 100 KB of shared memory per SM, 64 K
 *   registers, no wgmma; reasoned from those limits, not measured: no GB10
 *   here): the same 79 KB tile leaves room for one block per SM, so the
 *   register cap of two blocks would only cost spills: minimum one block,
 *   up to 255 registers. With 48 SMs a 4096-row product at 512 tokens is
 *   64 x 8 = 512 blocks, ~11 waves, enough to keep the tile.
 * Other targets of the fat binary (sm_80, sm_89) take the sm_90 row.
 */
#ifndef INFERD_CUDA_TILES_CUH
#define INFERD_CUDA_TILES_CUH

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define MMQ_MIN_BLOCKS 1 /* sm_12x: ~100 KB shared memory per SM */
#else
#define MMQ_MIN_BLOCKS 2 /* sm_80 .. sm_90: 164-228 KB per SM */
#endif
/* The K-quant kernel by warp tile: NT = 2 (64 x 64 block tile) as above;
 * NT = 4 (64 x 128) holds 64 accumulators a thread (32 float, 32 int) and
 * wants 179-252 registers (ptxas, sm_90, 0 spills). Measured on the H200
 * (bench/RESULTS.md, 2026-12-01 23:40-, n = 512 / 2048): held to 128 for
 * two blocks per SM (ptxas: q4_K 32-64 B of stack, q5_K 64-136, q6_K raw
 * 120-168, q6_K EXP 24-40) it is
 * 4-9% faster than one block at full registers for q4_K/q5_K and even for
 * q6_K (7B pp512 11,948 vs 11,279 tok/s): the spills cost less than half
 * the warps. sm_121 (~100 KB per SM) holds one block of either tile. */
#ifndef MMQK_NT4_MIN_BLOCKS
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define MMQK_NT4_MIN_BLOCKS 1
#else
#define MMQK_NT4_MIN_BLOCKS 2
#endif
#endif
#define MMQK_MIN_BLOCKS(nt) ((nt) == 2 ? MMQ_MIN_BLOCKS : MMQK_NT4_MIN_BLOCKS)

#define MMQ_BM 64      /* weight rows per block */
#define MMQ_BN 64      /* activation rows per block */
#define MMQ_THREADS 256

#include <cuda.h>
#include <cudaTypedefs.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/common.cuh"
#include "engine/cuda/glu_rows.h"

/* K-stage depth of the K-quant MMQ (mmqk_kernel<T, KDR, EXP>): KDR = 2
 * halves the barriers and pipeline turns per super-block but doubles the
 * stage buffers. occ1, occ2: blocks per SM of the two depths on this
 * device (cudaOccupancyMaxActiveBlocksPerMultiprocessor; 0 = does not
 * fit). Measured on the H200 (bench/RESULTS.md, 2026-12-01 17:36): q4_K
 * keeps 2 blocks per SM at either depth (56 / 112 KB, registers cap it at
 * 2) and KDR = 2 wins at every n (6-12%); q5_K and q6_K drop to 1 block
 * at KDR = 2 (120 / 148 KB) and it wins only while the grid fits one
 * wave of those (n = 16, 64: 10-15%), losing 7-11% at n = 512, 2048. So:
 * KDR = 2 when it keeps the occupancy, or when the whole grid is
 * resident at its occupancy anyway. On sm_121 (~100 KB per SM) KDR = 2
 * does not fit: occ2 = 0, KDR = 1. INFERD_MMQ_KDR=1|2 forces one for A/B
 * measurement. Rows change speed, never results. bn: the tile's
 * activation rows (the grid is ne1 / 64 x n_rows / bn blocks). */
static inline int mmq_pick_kdr(int n_sm, int occ1, int occ2, int64_t ne0, int64_t ne1, int32_t n_rows, int bn)
{
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("INFERD_MMQ_KDR");
        forced = e && (e[0] == '1' || e[0] == '2') ? e[0] - '0' : 0;
    }
    if (ne0 % 512 || occ2 == 0)
        return 1;
    if (forced)
        return forced;
    if (occ2 >= occ1)
        return 2;
    const int64_t blocks = ((ne1 + MMQ_BM - 1) / MMQ_BM) * ((n_rows + bn - 1) / bn);
    return blocks <= (int64_t)n_sm * occ2 ? 2 : 1;
}

/* The MMQ tile (the K-quants' and, since 2026-12-03, Q4_0/Q8_0's: their
 * 64 x 128 block measured -12.5% / -11% at n = 512 against 64 x 64, both
 * with the magic C operand, bench/RESULTS.md 2026-12-03 16:10-): BN = 64
 * or 128 activation rows a block (the warp tile 32 x 16 or 32 x 32: twice
 * the mma per fragment load and per super-block head at 128), and KDR by
 * mmq_pick_kdr among that BN's two depths.
 * occ[b][k]: blocks per SM at BN = 64 << b, KDR = k + 1. Measured on the
 * H200 (bench/RESULTS.md, 2026-12-01 23:40-): BN = 128 is 13-22% faster at
 * n = 512 and 2048 on every K-quant 7B shape, and 8-50% slower at n = 128
 * (one block column: half the blocks of BN = 64). So BN = 128 past 128
 * rows wherever its grid has a block for every SM: a grid short of one
 * full wave at two blocks per SM still wins (4096 rows at n = 512: 256
 * blocks for 264 slots, 256.5 us against 288 at BN = 64; the first rule,
 * a full wave, took BN = 64 there). INFERD_MMQ_BN=64|128 forces one for
 * A/B measurement. Rows change speed, never results (each output's
 * arithmetic is the same at either width). */
static inline void mmq_pick_tile(int n_sm, const int occ[2][2], int64_t ne0, int64_t ne1, int32_t n_rows,
                                 int *kdr, int *bn)
{
    static int forced = -1;
    if (forced < 0) {
        const char *e = getenv("INFERD_MMQ_BN");
        forced = e && !strcmp(e, "64") ? 64 : e && !strcmp(e, "128") ? 128 : 0;
    }
    const int64_t mb = (ne1 + MMQ_BM - 1) / MMQ_BM;
    const int k4 = mmq_pick_kdr(n_sm, occ[1][0], occ[1][1], ne0, ne1, n_rows, 128);
    const int o4 = occ[1][k4 - 1];
    int wide = n_rows > 128 && o4 > 0 && mb * ((n_rows + 127) / 128) >= (int64_t)n_sm;
    if (forced)
        wide = forced == 128 && o4 > 0;
    *bn = wide ? 128 : 64;
    *kdr = wide ? k4 : mmq_pick_kdr(n_sm, occ[0][0], occ[0][1], ne0, ne1, n_rows, MMQ_BN);
}

/* The (KDR, bn) pairs an MMQ variant launcher takes (cuda_mmqk_variant):
 * KDR 1 or 2, bn 64 (or 0 for 64) or 128 */
static inline bool mmq_tile_valid(int kdr, int bn)
{
    return (kdr == 1 || kdr == 2) && (bn == 0 || bn == 64 || bn == 128);
}

/* Blocks of one MMQ instantiation (`threads` a block: MMQ_THREADS, or the
 * small-batch kernel's, cuda/mmqs_impl.cuh) resident per SM on this device
 * (0: its shared memory does not fit), after raising its dynamic shared
 * memory past the 48 KB a launch gets without asking. Each instantiation caches
 * its answer (the device does not change under a backend). */
static inline int mmq_occupancy(const void *kernel, size_t smem, int threads = MMQ_THREADS)
{
    int n = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    return n;
}

/* mmq_occupancy of kernel K, asked once: an instantiation's shared
 * memory and threads are fixed, so its first answer stands */
template <auto K> static int mmq_occupancy_once(size_t smem, int threads = MMQ_THREADS)
{
    static int occ = -1;
    if (occ < 0)
        occ = mmq_occupancy((const void *)K, smem, threads);
    return occ;
}

/* The weight rows a block's row group of the streaming kernels (cuda/
 * mmvt.cu, cuda/mmqt_impl.cuh) holds, by shape (speed only: every choice
 * runs each output's chain in the same order): 32 unless 32-row groups
 * spread worse over the SMs than 16-row ones do (a 18944-row weight: 592
 * groups are 4.5 an SM, 1,184 are 8.97). */
static inline int cuda_group_rows(int64_t n_w, int n_sm)
{
    const int64_t g32 = (n_w + 31) / 32, g16 = (n_w + 15) / 16;
    const double b32 = (double)g32 / (double)(((g32 + n_sm - 1) / n_sm) * n_sm);
    const double b16 = (double)g16 / (double)(((g16 + n_sm - 1) / n_sm) * n_sm);
    return b16 > b32 + 0.05 ? 16 : 32;
}

/* The grid of a streaming kernel: a block a row group, at most occ an SM
 * (the blocks then stream several groups each), at most max_blocks where
 * that is > 0 (tests) */
static inline int64_t cuda_stream_blocks(int64_t groups, int occ, int n_sm, int max_blocks)
{
    int64_t blocks = groups < (int64_t)occ * n_sm ? groups : (int64_t)occ * n_sm;
    if (max_blocks > 0 && blocks > max_blocks)
        blocks = max_blocks;
    return blocks;
}

/* A streaming kernel's stage (cuda/mmvt.cu, cuda/mmqt_impl.cuh): row group
 * g (global), its stage st, cnt super-blocks. Blocks take groups
 * blockIdx.x, + gridDim.x, ...; a group has ns stages of C super-blocks
 * out of nbr. */
struct cuda_stage {
    int32_t g, st, cnt;
};

/* the block's first stage */
template <int C> static __device__ __forceinline__ cuda_stage cuda_stage_first(int32_t nbr)
{
    return {(int32_t)blockIdx.x, 0, nbr < C ? nbr : C};
}

/* the stage after p: the group's next C super-blocks, or the first ones of
 * the block's next group */
template <int C> static __device__ __forceinline__ void cuda_stage_next(cuda_stage &p, int32_t ns, int32_t nbr)
{
    if (++p.st == ns) {
        p.st = 0;
        p.g += gridDim.x;
    }
    p.cnt = nbr - p.st * C < C ? nbr - p.st * C : C;
}

/* The store of a thread's MT x NT m16n8 accumulator tiles, the same in
 * every MMQ kernel: it holds rows 16 (q0 + mt) + g (+8) of the block at
 * m0 and activation rows c0 + 8 nt + 2 t4 (+1) (c0 counted from n0); what
 * lies past the weight or the batch is not stored. With E.glu (mmq_wrow):
 * silu(gate) * up of accumulator rows g and g + 8, the operations of
 * silu_mul_kernel on the same two values. */
template <int MT, int NT>
static __device__ __forceinline__ void mmq_tiles_store(const float acc[MT][NT][4], int32_t m0, int32_t n0, int q0,
                                                       int c0, int g, int t4, int32_t n_w, int32_t n_rows,
                                                       float *y, const struct cuda_epi &E)
{
    if (E.glu) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const int32_t j = mmq_glu_out(m0, q0 + mt, g);
                    const int32_t r = n0 + c0 + 8 * nt + 2 * t4 + i;
                    if (j < E.glu && r < n_rows)
                        y[(int64_t)r * E.glu + j] =
                            __fmul_rn(cuda_silu(acc[mt][nt][i], j, E.glu), acc[mt][nt][i + 2]);
                }
        return;
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int32_t j = m0 + 16 * (q0 + mt) + g + 8 * (i >> 1);
                const int32_t r = n0 + c0 + 8 * nt + 2 * t4 + (i & 1);
                if (j < n_w && r < n_rows)
                    cuda_epi_store(y, r, j, n_w, acc[mt][nt][i], E);
            }
}

/* the 64 x 32 NT tile of warp (wm, wn) of the 2 x 4: rows 32 wm + 16 mt +
 * g (+8), activation rows 8 NT wn + 8 nt + 2 t4 (+1) */
template <int NT>
static __device__ __forceinline__ void mmq_tile_store(const float acc[2][NT][4], int32_t m0, int32_t n0, int wm,
                                                      int wn, int g, int t4, int32_t n_w, int32_t n_rows,
                                                      float *y, const struct cuda_epi &E)
{
    mmq_tiles_store<2, NT>(acc, m0, n0, 2 * wm, 8 * NT * wn, g, t4, n_w, n_rows, y, E);
}

/* Launch at the KDR the table picked; where the device cannot hold
 * KDR = 2's shared memory (launch returns -1), at KDR = 1. launch(kdr):
 * 0, -1, or an INF_E* code; returns the last one. */
template <typename F> static inline int mmq_launch_picked(int kdr, F launch)
{
    const int rc = launch(kdr);
    return rc == -1 && kdr == 2 ? launch(1) : rc;
}

/* ---- tensor maps (host) ------------------------------------------------ *
 * A 2-D map of a weight's rows for cuda_tma_rows: rows of row_bytes, seen
 * as 8-byte words, boxes of box_rows rows x box_bytes. 0, or -1 where the
 * driver has no tensor maps or the weight does not fit one (its base not
 * 16-byte aligned, rows not a multiple of 16 bytes: Q6_K's on most
 * widths; box_bytes past 2048, 256 words). The caller then copies a row at
 * a time. cuTensorMapEncodeTiled is the driver's (libcuda), found through
 * the runtime so the build links nothing more; encoding is host work only. */
static inline PFN_cuTensorMapEncodeTiled_v12000 cuda_tmap_encoder(void)
{
    static const PFN_cuTensorMapEncodeTiled_v12000 enc = [] {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = NULL;
        return (PFN_cuTensorMapEncodeTiled_v12000)f;
    }();
    return enc;
}

static inline int cuda_tmap_rows(CUtensorMap *m, const void *base, size_t row_bytes, int64_t rows, uint32_t box_bytes,
                                 uint32_t box_rows)
{
    const PFN_cuTensorMapEncodeTiled_v12000 enc = cuda_tmap_encoder();
    if (!enc || ((uintptr_t)base & 15) || row_bytes % 16 || box_bytes % 16 || box_bytes > 2048 || box_rows < 1 ||
        box_rows > 256 || rows < 1 || rows > INT32_MAX)
        return -1;
    const cuuint64_t dim[2] = {(cuuint64_t)(row_bytes / 8), (cuuint64_t)rows};
    const cuuint64_t stride[1] = {(cuuint64_t)row_bytes};
    const cuuint32_t box[2] = {box_bytes / 8, box_rows}, es[2] = {1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, (void *)base, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
                   CUDA_SUCCESS
               ? 0
               : -1;
}

/* A 2-D map of an f16 matrix (rows of ne0 halves) for cuda_tma_rows
 * (coordinates: the half, the row): boxes of 64 halves x box_rows rows,
 * landing 128-byte swizzled (16-byte granule c of box row r at granule c ^
 * (r & 7) of its 128 bytes: wgmma's SWIZZLE_128B K-major layout); rows
 * past the matrix land as zeros. 0 or -1 (no driver entry, a shape the
 * map cannot take). */
static inline int cuda_tmap_f16_sw128(CUtensorMap *m, const void *base, int64_t ne0, int64_t rows, uint32_t box_rows)
{
    const PFN_cuTensorMapEncodeTiled_v12000 enc = cuda_tmap_encoder();
    if (!enc || ((uintptr_t)base & 15) || ne0 % 64 || box_rows < 1 || box_rows > 256 || rows < 1 || rows > INT32_MAX)
        return -1;
    const cuuint64_t dim[2] = {(cuuint64_t)ne0, (cuuint64_t)rows};
    const cuuint64_t stride[1] = {(cuuint64_t)ne0 * 2};
    const cuuint32_t box[2] = {64, box_rows}, es[2] = {1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)base, dim, stride, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
                   CUDA_SUCCESS
               ? 0
               : -1;
}

#endif
