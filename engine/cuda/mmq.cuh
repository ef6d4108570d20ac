/* cuda/mmq — int8 tensor-core products (mma.sync m16n8k32 / m16n8k16) for
 * the quantized weight types, for batches past the warp-per-row product's
 * range. Declarations shared by mul_mat.cu (dispatch) and mmq_<type>.cu (one
 * instantiation file per weight type, so builds run in parallel).
 *
 * Numerics: the same canonical arithmetic as cuda/qtypes.cuh (exact int32
 * block terms, the float chain over blocks in k order), so a row gets the
 * same bits from MMQ as from the warp-per-row kernel at any batch size.
 */
#ifndef INFERD_CUDA_MMQ_CUH
#define INFERD_CUDA_MMQ_CUH

#include "engine/cuda/common.cuh"

/* y[r][j] for n_rows activation rows already quantized (xq: the CPU's
 * vec_dot type of w, n_rows rows; K-quants: cuda_q8k planes) against
 * weight w, with the variant the tile table (cuda/tiles.cuh) picks. */
template <int T>
void cuda_mmq(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
              int32_t n_rows);

/* The MMQ instantiations mmqk_kernel<T, KDR, EXP, NT> (cuda/mmqk_impl.cuh)
 * and, for Q4_0/Q8_0 (EXP = 0), mmq0_kernel<T, KDR, NT>
 * (cuda/mmq0_impl.cuh): KDR super-blocks (256 elements) per k-stage (1 or
 * 2), EXP: the weights' expanded copy (w->aux; Q6_K only), bn: activation
 * rows per block (64, or 0 for 64; 128: NT = 4). Launches exactly that
 * one: 0, INF_EUNSUPPORTED when it does not exist for T or the shape (ne0
 * not a multiple of 256 * KDR, EXP without w->aux), or -1 when this
 * device cannot give it its shared memory. For prewarm, bench --op and the
 * tests; cuda_mmq picks among them. */
template <int T>
int cuda_mmqk_variant(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                      int32_t n_rows, int kdr, int exp, int bn);

/* Q4_K batches on the F16 tensor cores with the CPU's bits (cuda/mmqh_impl.cuh:
 * q x sc - 480 folded into f16 weights, one exact f32 sum a super-block; on
 * sm_90 builds its wgmma form, cuda/mmqw.cu, unless c->mmqw is 0): 0,
 * INF_EUNSUPPORTED (not Q4_K, before sm_80, no x16 scratch for the rows),
 * or -1 when the device cannot hold its shared memory (sm_121; the caller
 * takes mmqk). xq: the cuda_q8k planes of n_rows rows. */
template <int T>
int cuda_mmqh(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows);

/* 1 where the build has mmqh's wgmma form (cuda/mmqw.cu: gpu_arch has 90) */
int cuda_mmqw_built(void);

/* Q6_K batches on int8 wgmma with the CPU's bits (cuda/mmq6w.cu: the scale
 * folded into two u8 weight planes from the expanded copy w->aux): 0,
 * INF_EUNSUPPORTED (no expanded copy, not compute capability 9.0, a build
 * without gpu_arch 90, a shape its maps cannot take) or -1 (no room); the
 * caller takes mmqk. From c->mmq6w rows (by default CUDA_MMQW_MIN on
 * shapes cuda_mmqh_fills passes; INFERD_MMQ6W=N). xq: the cuda_q8k planes of n_rows rows.
 * exp: -1 the planes made at load where w has them (cuda_q6p_find; the
 * design card's EXP = true: no expansion in the kernel), else the
 * expanded copy; 0 the expanded copy; 1 the planes only (INF_EUNSUPPORTED
 * without them). Both forms give the same bits. */
int cuda_mmq6w(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows,
               int exp);

/* Q4_K batches on int8 wgmma from the weight's two u8 planes made at load
 * (cuda/mmq4p.cu; the same bits as mmqr / mmqk): 0, INF_EUNSUPPORTED (no
 * planes for w, fewer than c->q6p_min rows unless force, the SwiGLU
 * epilogue, not compute capability 9.0, the int8 plane not written) or -1
 * (no room); the caller takes mmqr. xq: the cuda_q8k planes of n_rows
 * rows. takes: whether it would run at n_rows as launched now (without
 * looking at the activations: the quantizer then writes the int8 plane,
 * cuda/mul_mat.cu mm_x16p_wanted). */
int cuda_mmq4p(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows,
               int force);
int cuda_mmq4p_takes(const struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows);

/* Whether c->x16 has room for n_rows activation rows of ne0 as f16 (mmqh's
 * forms; the quantizer writing mmqr's: cuda/mul_mat.cu mm_x16p_wanted) */
static inline bool cuda_x16_room(const struct cuda_ctx *c, int32_t n_rows, int64_t ne0)
{
    return c->x16 && (size_t)n_rows * (size_t)ne0 * 2 <= c->x16_bytes;
}

/* The wgmma products' default shape rule: their 128 x 128 blocks cover
 * at least 2/5 of the SMs (4096 x 14336 at 256 rows: 64 blocks; 3584 rows
 * at 256: 56; the 7B's 512-row K/V weight waits for 6,656 rows). Below
 * that a block's serial stages are the product's time and mmqk's smaller
 * tiles win (session 44: 1.3-1.6x at 28-32 blocks, 0.72-0.95x at 56-64;
 * common.cuh, CUDA_MMQW_MIN). */
#define CUDA_MMQH_TILE 128
/* band: the shape may take the blocks between 2/5 and half the SMs too.
 * Q6_K always; Q4_K only where the product is long (K of 32 super-blocks
 * or more): at 56 blocks the 7B's ffn-down (K 18,944) took 0.94x mmqk's
 * time and its attn-q (K 3,584) 1.03-1.05x (session 44 call 7: mmqr's
 * prologue and tail against few super-blocks); mmq6w won at 56 blocks on
 * both (0.71-0.80x). Half the SMs and more, every shape. */
static inline bool cuda_mmqh_fills(const struct cuda_ctx *c, int64_t n_w, int32_t n_rows, bool band)
{
    const int64_t b = (int64_t)cuda_blocks(n_w, CUDA_MMQH_TILE) * (int64_t)cuda_blocks(n_rows, CUDA_MMQH_TILE);
    return 2 * b >= c->n_sm || (band && 5 * b >= 2 * c->n_sm);
}
/* cuda_mmqh_fills' band for a K-quant product of row length ne0 */
static inline bool cuda_mmqh_band(int type, int64_t ne0)
{
    return type == QT_Q6_K || ne0 >= 32 * QK_K;
}
/* Whether the dispatcher gives a batch of n_rows to one of the 128 x 128
 * wgmma products (mmqh's forms: c->mmqh / mmqh_fill; mmq6w: c->mmq6w /
 * mmq6w_fill) for a weight of type and n_w x ne0: from min rows (0:
 * never), on shapes cuda_mmqh_fills passes where fill (the default rule) */
static inline bool cuda_mmqh_takes(const struct cuda_ctx *c, int min, int fill, int type, int64_t ne0, int64_t n_w,
                                   int32_t n_rows)
{
    return min && n_rows >= min && (!fill || cuda_mmqh_fills(c, n_w, n_rows, cuda_mmqh_band(type, ne0)));
}

/* Q4_0/Q8_0: rewrite w->data in place into the packed layout when
 * cuda_q0_packed(type, ne0) (cuda/qtypes.cuh); 0 or the CUDA error. */
template <int T> int cuda_q0_repack(struct cuda_ctx *c, struct backend_weight *w);

/* mmq6w's weight planes made at load (cuda/q6planes.cu; a budget: config
 * q6_planes_percent, env INFERD_Q6P_MB in MiB): for a Q6_K weight with
 * its expanded copy, both u8 planes of every weight (mmq6w_planes' bytes)
 * in k order, a row = plane 1's ne0 bytes then plane 2's, 2 bytes a
 * weight. add: 1 made, 0 not (no budget, no expanded copy, more than 512
 * MiB: the output head, the embedding table, a weight the model will fuse,
 * or no device memory), or a negative INF_E* code; force: past those
 * rules (prewarm's scratch weight). find: w's planes or
 * NULL (keyed by w->data, ne0 and ne1: a fused view never matches). drop:
 * w's, if any (weight_release; weight_fuse drops its members': a product
 * over the group's rows is a view). free: all (destroy). */
int cuda_q6p_add(struct cuda_ctx *c, const struct backend_weight *w, int force);
/* budget: c->q6p's budget at percent of the device's memory where mmq6w
 * or mmq4p runs (compute capability 9.0, a build with them, c->mmq6w, or
 * c->q4p with mmqh's wgmma form, on), else 0 (the planes serve nothing
 * elsewhere); INFERD_Q6P_MB, read by cuda/knobs.cu, wins over it
 * (c->q6p_env). Q4_K weights get planes too where c->q4p (from their raw
 * rows: mmq4p_word). */
/* rows from which mmq6w reads them: session 54 (H100) measured the planes
 * 0.89-0.95x the expanded form at 256 rows on the 4096 x 14336 and the 7B's
 * ffn shapes, 0.91-0.93x at 512 and 2048, but 1.19x at 128 on the 7B's
 * ffn-up (one activation block: each weight tile's 2 bytes a weight read
 * for one block only); 129-255 not measured */
#define CUDA_Q6P_MIN 256
void cuda_q6p_budget(struct cuda_ctx *c, int percent);
static inline const void *cuda_q6p_find(const struct cuda_ctx *c, const struct backend_weight *w)
{
    const struct cuda_wcopy *r = cuda_wcopy_find(&c->q6p, w->data, w->ne0, w->ne1);
    return r ? r->p : NULL; /* [ne1][2 ne0] */
}
void cuda_q6p_drop(struct cuda_ctx *c, const struct backend_weight *w);
void cuda_q6p_free(struct cuda_ctx *c);

/* Q6_K: make w->aux, the expanded copy mmqk_kernel<Q6_K, KDR, true> reads
 * (288 bytes per super-block: 256 int8 values q - 32, 16 int8 scales, the
 * float d). 0, or INF_ENOMEM (w->aux stays NULL; the raw kernels serve). */
int cuda_mmq_expand_q6_K(struct cuda_ctx *c, struct backend_weight *w);
size_t cuda_mmq_expand_q6_K_bytes(const struct backend_weight *w);

/* The small-batch product (K-quants: cuda/mmvq.cu, cuda_q8k planes;
 * Q4_0/Q8_0 in the packed layout: cuda/mmq0_impl.cuh, cuda_q80 planes):
 * n_rows <= 8 activation rows; nc = activation rows per weight read
 * (1, 2, 4 or 8; 0 picks the smallest that holds n_rows); wpr = warps per
 * weight row (K-quants: 1, 2 or 4, 0 picks cuda_mmvq_wpr; Q4_0/Q8_0: 1);
 * u = super-blocks of a lane group a pass (K-quants at nc = 1: 4 or 8, 0
 * picks by the row's length, cuda/mmvq.cu mmvq_u; Q4_0/Q8_0: 0). */
template <int T>
void cuda_mmvq(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
               int32_t n_rows, int nc, int wpr, int u);

/* The K-quant small-batch product on the tensor cores (cuda/mmqs_impl.cuh:
 * mmqs_kernel<T, EXP>, 16 weight rows x up to 8 activation rows a block):
 * n_rows <= 8 activation rows (xq: cuda_q8k planes); exp: 1 the Q6_K
 * expanded copy (w->aux), 0 the raw blocks, -1 whichever w has. The same
 * bits as cuda_mmvq and cuda_mmq. 0, INF_EUNSUPPORTED (not a K-quant, ne0
 * not a multiple of 256, exp without w->aux, n_rows > 8), or -1 when the
 * device cannot hold its shared memory. k: super-blocks a stage, 0 for
 * the kernel's own choice (q4_K 2, else 1; q4_K 1 where the device cannot
 * hold 2), 1 to force one (the dispatcher table's variant). */
template <int T>
int cuda_mmqs(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows,
              int exp, int k);

/* The K-quant small-batch product on the tensor cores fed by bulk copies
 * (cuda/mmqt_impl.cuh: mmqt_kernel<T, TL, C, D>, Q4_K, Q5_K and Q6_K's raw
 * blocks, sm_90+): 1..8 activation rows, the bits of cuda_mmqs. tl: 16-row
 * tiles a block (1 or 2; 0 by shape; Q6_K 2); max_blocks > 0 caps the grid
 * (each block then streams several row groups: tests). 0,
 * INF_EUNSUPPORTED (more than 8 rows, a weight not 16-byte aligned,
 * before sm_90; at tl 0 a shape whose ring would not fill: mmqt_fills), or
 * -1 when the device cannot hold its shared memory (the caller falls back
 * to cuda_mmqs). */
template <int T>
int cuda_mmqt(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows,
              int tl, int max_blocks);

/* The one-row K-quant product with a lane per weight row, its weights
 * streamed by bulk copies (cuda/mmvt.cu: Q4_K, Q5_K, Q6_K; sm_90+):
 * the bits of cuda_mmvq. rb: rows a group (16 or 32; 0 by shape);
 * max_blocks > 0 caps the grid (each block then streams several row
 * groups: tests and A/B); cw: compute warps a block (0 by shape; 8, 12,
 * or 14 for Q4_K, where it fits, else 8). x: the float row, which mmvt
 * quantizes itself where each block has one row group (rows up to
 * c->mmvt_fq super-blocks) or a row fits one stage, or NULL; xq: the
 * quantizer kernel's planes of it, or NULL. 0, INF_EUNSUPPORTED (n_rows
 * != 1, a weight not 16-byte aligned, before sm_90, or x alone where mmvt
 * does not quantize: the caller then quantizes and asks again with xq),
 * or -1 when the device cannot hold its shared memory (the caller falls
 * back to cuda_mmvq). */
/* c->mmvt_fq's default (-1), by type: the longest rows (super-blocks) mmvt
 * quantizes its row for itself (cuda/mmvt.cu). Q6_K: 14336-wide rows; on the
 * 7B's 18944-wide ffn-down it lost (21.2 -> 22.0 us); Q4_K/Q5_K gained
 * there (10.9 -> 10.2, 14.6 -> 13.8), so their bound is that row, the
 * longest measured (bench/RESULTS.md 2026-12-04 14:35- call 8) */
#define MMVT_FQ_SB 56
#define MMVT_FQ_SB_Q45 74
template <int T>
int cuda_mmvt(struct cuda_ctx *c, const struct backend_weight *w, const float *x, const void *xq, float *y,
              int32_t n_rows, int rb, int max_blocks, int cw);
int cuda_mmvt_prewarm(struct cuda_ctx *c, int type, const struct backend_weight *w, const float *x, const void *xq,
                      float *y, int rb, int cw);
int cuda_mmvt_cws(int type, int cw[3]);

/* the nc cuda_mmvq takes for nc = 0: the smallest instantiation that holds
 * the call's rows (the row count changes how many activation rows share
 * a weight read, never a row's arithmetic) */
static inline int cuda_mmvq_nc(int32_t n_rows)
{
    return n_rows <= 1 ? 1 : n_rows <= 2 ? 2 : n_rows <= 4 ? 4 : 8;
}

/* K-quants (cuda/mmvq.cu): warps per weight row for n_w rows of nbr
 * super-blocks when one warp covers sb of them at a time, on n_sm SMs
 * (speed only: every choice gives the same bits). Measured on the H200
 * (bench/RESULTS.md, 2026-12-01 22:28, every nc x wpr forced on 4096 x
 * 14336 and the 7B shapes): Q4_K and Q5_K are fastest at one warp a row
 * everywhere (q4_K n=1 4096 x 14336: 15.2 µs at 1, 18.6 at 2, 16.4 at 4);
 * Q6_K, whose 2-byte-aligned blocks cost more instructions per byte, at 4
 * once a row has 4 warp-loads (23.9 µs at 4, 26.4 at 1) and the grid of one
 * warp a row leaves warp slots empty (4096 rows on 132 SMs: 31 an SM). The
 * split only adds warps where the grid has too few: on GB10 (sm_121, 48
 * SMs, not measured) the same 4096 rows are 85 warps an SM, more than an
 * SM holds, so there it stays at one. Q4_0/Q8_0 take wpr 1 only. */
#define MMVQ_SPLIT_ROWS_PER_SM 48
static inline int cuda_mmvq_wpr(int type, int64_t nbr, int sb, int64_t n_w, int n_sm)
{
    return type == QT_Q6_K && (nbr + sb - 1) / sb >= 4 && n_w < (int64_t)MMVQ_SPLIT_ROWS_PER_SM * n_sm ? 4 : 1;
}
#endif
