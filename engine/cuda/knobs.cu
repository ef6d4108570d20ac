/* cuda/knobs — the CUDA backend's environment switches, read once at
 * cuda_backend_new (cuda/backend.cu) into the context. Almost all are for
 * A/B runs on the GPU machine and leave results unchanged (docs/TOOLS.md
 * lists them); the ones that change results say so. Needs c->sm set. */
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/common.cuh"
#include "engine/cuda/mmq.cuh"

/* name=1 in the environment */
static int knob_on(const char *name)
{
    const char *v = getenv(name);
    return v && !strcmp(v, "1");
}

void cuda_knobs_read(struct cuda_ctx *c)
{
    /* programmatic dependent launch (cuda/common.cuh): sm_90 and later;
     * INFERD_NO_PDL=1 turns it off (A/B runs; results do not change) */
    c->pdl = c->sm >= 90 && !getenv("INFERD_NO_PDL");
    /* batch_invariant = false only: K-quant products from this many rows
     * as F16 through cuBLASLt (cuda/mm_deq.cu: 256 on sm_90, measured; 0,
     * never, elsewhere; INFERD_MMD_MIN overrides) */
    c->mmd_min = cuda_mmd_min_default(c->sm);
    /* the same for weights with a resident F16 copy (config f16_weights_mb;
     * INFERD_MMD_RES_MIN overrides, 0: c->mmd_min) */
    c->mmd_min_res = cuda_mmd_min_res_default(c->sm);
    /* the activations' F16/BF16 conversion eight elements a thread
     * (cuda/mm_cublas.cu; measured 2026-12-05: 0.95x the scalar form's
     * product time at n = 512-2048); INFERD_MMC_CVT8=0 the scalar form
     * (A/B runs; the same values) */
    const char *cv8 = getenv("INFERD_MMC_CVT8");
    c->mmc_cvt8 = !(cv8 && !strcmp(cv8, "0"));
    /* batch_invariant = false: cuBLASLt's algorithm for each bucket of 64+
     * rows timed among its candidates at load (cuda/mm_cublas_algo.cu
     * mmc_tune; changes bits only as the mode's per-n choice already may).
     * Stays an A/B knob: measured 2026-12-05, 0.98-1.01x at n = 512 and
     * 0.97-1.00x at 2048, and a choice by timing may differ from one start
     * to the next, so a restarted daemon could give other bits for the
     * same request */
    c->mmc_tune = knob_on("INFERD_MMC_TUNE");
    /* the quantizers' early trigger (cuda_pdl_trigger); INFERD_PDL_EARLY=0
     * leaves it out (A/B runs; results do not change) */
    const char *early = getenv("INFERD_PDL_EARLY");
    c->pdl_early = c->pdl && !(early && !strcmp(early, "0"));
    /* INFERD_X16ONLY=0: the activation quantizer always writes the int8
     * plane, also where every product of the op is an mmqr reading x16
     * (cuda/mul_mat.cu MM_HELD_X16; A/B, session 48) */
    const char *x16o = getenv("INFERD_X16ONLY");
    c->x16only = !(x16o && !strcmp(x16o, "0"));
    const char *wpr = getenv("INFERD_MMVQ_WPR");
    c->mmvq_wpr = wpr && (!strcmp(wpr, "1") || !strcmp(wpr, "2") || !strcmp(wpr, "4")) ? atoi(wpr) : 0;
    /* INFERD_NO_GLU=1: mul_mat_swiglu as the two products then silu_mul
     * (A/B runs and tests; results do not change) */
    c->glu_off = getenv("INFERD_NO_GLU") != NULL;
    /* attention scores in the CPU's order with glibc's expf (the CPU
     * backend's bits) unless asked for the tensor cores' sums
     * (cuda_backend_set_attention_tc: config attention_scores = "tensor";
     * INFERD_ATT_SCORES=tensor for A/B runs) */
    const char *asc = getenv("INFERD_ATT_SCORES");
    c->att_tc = asc && !strcmp(asc, "tensor");
    /* INFERD_ATT_PAIR=0: the exact-score attention one row a block at every
     * batch (A/B runs; the bits do not change) */
    const char *apr = getenv("INFERD_ATT_PAIR");
    c->att_pair = !(apr && !strcmp(apr, "0"));
    /* decode batches up to CUDA_ATT_SPLIT (64) rows take the attention
     * split: the score buffer is 64 rows x heads x the sequence capacity
     * (235 MB for the 7B at 32 K, 29 MB at 4 K); INFERD_ATT_SPLIT=0..256
     * moves the bound for A/B runs (0: the fused kernel everywhere) */
    const char *asp = getenv("INFERD_ATT_SPLIT");
    c->att_split = asp && atoi(asp) >= 0 && atoi(asp) <= 256 ? atoi(asp) : CUDA_ATT_SPLIT;
    /* the split's walk: 0 by its grid (cuda/attention_dec.cu), for A/B runs
     * INFERD_ATT_WALK=1 the one-warp walk, 2 the walk with helpers */
    const char *awk = getenv("INFERD_ATT_WALK");
    c->att_walk = awk && (!strcmp(awk, "1") || !strcmp(awk, "2")) ? awk[0] - '0' : 0;
    /* one-row K-quant products through the lane-per-row kernel fed by
     * bulk copies (cuda/mmvt.cu; sm_90 and later); INFERD_MMVT=0 gives
     * them to mmvq for A/B runs (the bits do not change) */
    const char *mvt = getenv("INFERD_MMVT");
    c->mmvt = c->sm >= 90 && !(mvt && !strcmp(mvt, "0"));
    /* INFERD_MMVT_CW=8|12|14: its compute warps a block, forced (A/B runs;
     * the bits do not change) */
    const char *mcw = getenv("INFERD_MMVT_CW");
    c->mmvt_cw = mcw && (atoi(mcw) == 8 || atoi(mcw) == 12 || atoi(mcw) == 14) ? atoi(mcw) : 0;
    /* INFERD_MMVT_RB=16|32: mmvt's rows a group, forced (A/B runs; results
     * do not change) */
    const char *mrb = getenv("INFERD_MMVT_RB");
    c->mmvt_rb = mrb && (atoi(mrb) == 16 || atoi(mrb) == 32) ? atoi(mrb) : 0;
    /* INFERD_MMVT_FQ=N: the longest rows (super-blocks) mmvt quantizes its
     * activation row for itself where a block has one row group, every
     * type (by default -1: per type, cuda/mmq.cuh MMVT_FQ_SB /
     * MMVT_FQ_SB_Q45; rows of one stage always); 0: never, the quantizer
     * kernel runs first; A/B runs; results do not change */
    const char *mfq = getenv("INFERD_MMVT_FQ");
    c->mmvt_fq = mfq && atoi(mfq) >= 0 ? atoi(mfq) : -1;
    /* mmvt's Q6_K halves form: -1 by shape (cuda_mmvt's rule), =1 wherever
     * it reads the quantizer's planes, =0 never (A/B; the same bits) */
    const char *mhv = getenv("INFERD_MMVT_HV");
    c->mmvt_hv = mhv && (!strcmp(mhv, "0") || !strcmp(mhv, "1")) ? mhv[0] - '0' : -1;
    /* mmvt's early trigger (cuda_mmvt_trig): by the op sequence;
     * INFERD_MMVT_TRIG=0 never, =2 before every successor (A/B runs; results
     * do not change) */
    const char *mtr = getenv("INFERD_MMVT_TRIG");
    c->mmvt_trig = !c->pdl ? 0 : mtr && (!strcmp(mtr, "0") || !strcmp(mtr, "2")) ? mtr[0] - '0' : 1;
    /* the early trigger of the small kernels before one-row products
     * (cuda_small_early); INFERD_PDL_SMALL=0 leaves it out, =N (2-8) takes
     * it to batches of N rows (A/B runs; results do not change);
     * INFERD_PDL_ATT=0 leaves the decode attention out of it, =1 keeps
     * only its walk's trigger (by default rope_kv_store and the score
     * kernel trigger at their start too) */
    const char *psm = getenv("INFERD_PDL_SMALL");
    const int psn = psm ? atoi(psm) : 1;
    c->pdl_small = !c->pdl ? 0 : psn < 0 || psn > 8 ? 1 : psn;
    const char *rkv = getenv("INFERD_ROPE_KV");
    c->rope_kv = !(rkv && !strcmp(rkv, "0"));
    const char *pat = getenv("INFERD_PDL_ATT");
    c->pdl_att = pat && (!strcmp(pat, "0") || !strcmp(pat, "1")) ? pat[0] - '0' : 2;
    /* K-quant products of 2-8 rows (Q6_K 3-8) through mmqs's form fed by
     * bulk copies where its ring fills (cuda/mmqt_impl.cuh; sm_90 and
     * later); INFERD_MMQT=0 leaves them to mmqs and the dp4a kernel for A/B
     * runs, =tl1|tl2 forces its 16-row tiles a block (the same bits either
     * way) */
    const char *mqt = getenv("INFERD_MMQT");
    c->mmqt = c->sm >= 90 && !(mqt && !strcmp(mqt, "0"));
    c->mmqt_tl = mqt && (!strcmp(mqt, "tl1") || !strcmp(mqt, "tl2")) ? mqt[2] - '0' : 0;
    /* mmqt's weight stages by tensor copies of this many rows where a map
     * fits (cuda/tiles.cuh cuda_tmap_rows); INFERD_TMA=0 copies a row at a
     * time, =8|16|32 sets the rows a copy (A/B runs; the bytes that land,
     * so the bits, are the same) */
    const char *tma = getenv("INFERD_TMA");
    c->tma_rows = tma && (!strcmp(tma, "0") || !strcmp(tma, "8") || !strcmp(tma, "16") || !strcmp(tma, "32"))
                      ? atoi(tma)
                      : 32;
    /* K-quant products of mmqs_min..8 rows through the tensor-core kernel
     * (cuda/mmqs_impl.cuh), fewer through the dp4a one (cuda/mmvq.cu): the
     * same bits. 0: the per-type rule of cuda/mul_mat.cu (mm_mmqs_min);
     * INFERD_MMQS_MIN=1..9 sets one count for every type, for A/B runs (9:
     * never) */
    const char *qmin = getenv("INFERD_MMQS_MIN");
    c->mmqs_min = qmin && atoi(qmin) >= 1 && atoi(qmin) <= 9 ? atoi(qmin) : 0;
    /* Q4_K batches of at least mmqh rows through the exact F16 MMQ (the
     * same bits as mmqk), in its register-A wgmma form where the build has
     * it (cuda/mmqr.cu, sm_90a: 0.81-0.86x mmqw's time from 512 rows on
     * the H100, session 42), its warpgroups' products in turns (3, the
     * default: 0.935-0.963x the form without turns' time, session 44;
     * where it declines, mmqk); INFERD_MMQW=2 without turns (A/B runs),
     * INFERD_MMQW=1 the form with
     * both operands in shared memory (cuda/mmqw.cu), INFERD_MMQW=0 the
     * mma.sync form (cuda/mmqh_impl.cuh, sm_80+ with 203 KB of shared
     * memory). By default from CUDA_MMQW_MIN rows on shapes cuda_mmqh_fills
     * passes where a wgmma form runs, else never (the mma.sync form is
     * slower than mmqk); INFERD_MMQH=N from N rows on every shape (A/B
     * runs, the tests) */
    const char *mqh = getenv("INFERD_MMQH");
    const char *mqw = getenv("INFERD_MMQW");
    c->mmqw = !mqw ? 3 : atoi(mqw) == 0 ? 0 : atoi(mqw) == 1 ? 1 : atoi(mqw) == 2 ? 2 : 3;
    c->mmqh_fill = !(mqh && atoi(mqh) >= 0);
    c->mmqh = c->sm < 80 ? 0
              : !c->mmqh_fill ? atoi(mqh)
              : c->mmqw && c->sm == 90 && cuda_mmqw_built() ? CUDA_MMQW_MIN
                                                             : 0;
    /* Q6_K batches through the int8 wgmma product (cuda/mmq6w.cu, sm_90a;
     * the same bits as mmqk; 0.49-0.64x mmqk's time from 512 rows on the
     * H100, bench/RESULTS.md 2026-12-05 session 42): by default as the
     * Q4_K one (from CUDA_MMQW_MIN rows on shapes cuda_mmqh_fills passes,
     * where built); INFERD_MMQ6W=N from N rows on every shape, 0 never,
     * -1 the default */
    const char *mq6 = getenv("INFERD_MMQ6W");
    c->mmq6w_fill = !(mq6 && atoi(mq6) >= 0);
    c->mmq6w = !c->mmq6w_fill ? atoi(mq6) : c->sm == 90 && cuda_mmqw_built() ? CUDA_MMQW_MIN : 0;
    /* mmq6w's weight planes made at load for Q6_K weights (cuda/
     * q6planes.cu): INFERD_Q6P_MB=N up to N MiB (0: none), over the
     * default (cuda_q6p_budget) and the config key q6_planes_percent */
    const char *q6p = getenv("INFERD_Q6P_MB");
    c->q6p_env = q6p != NULL;
    const char *q6m = getenv("INFERD_Q6P_MIN");
    c->q6p_min = q6m && atoi(q6m) > 0 ? atoi(q6m) : CUDA_Q6P_MIN;
    c->q6p.budget = q6p && atoll(q6p) > 0 ? (size_t)atoll(q6p) << 20 : 0;
    /* Q4_K weights get planes under the same budget too, and their batches
     * from c->q6p_min rows run on mmq4p (cuda/mmq4p.cu; the same bits as
     * mmqr); INFERD_Q4P=0: Q6_K's only (A/B runs) */
    const char *q4p = getenv("INFERD_Q4P");
    c->q4p = !(q4p && !strcmp(q4p, "0"));
    /* mmq6w<true>'s warpgroups in turns (cuda/mmq6w.cu); INFERD_Q6P_TURNS=0
     * without (A/B runs; results do not change) */
    const char *q6t = getenv("INFERD_Q6P_TURNS");
    c->q6p_turns = !(q6t && !strcmp(q6t, "0"));
    /* K-quant products of 9..mmqs_max rows through mmqs too (two n8 tiles
     * a block) where cuda/mul_mat.cu's shape rule (mm_mmqs_mid) says, past
     * it MMQ; INFERD_MMQS_MAX=8..64 for A/B runs (8: MMQ from 9 rows, the
     * rule before) */
    const char *qmax = getenv("INFERD_MMQS_MAX");
    c->mmqs_max = qmax && atoi(qmax) >= 8 && atoi(qmax) <= 64 ? atoi(qmax) : CUDA_MMQS_MAX;
}

/* The wgmma products' default shape rule (cuda/mmq.cuh cuda_mmqh_takes
 * from CUDA_MMQW_MIN rows with the fill rule) on a device of n_sm SMs: 1
 * where a Q4_K (q6 0) or Q6_K (q6 1) product of n_rows activation rows by
 * an n_w x ne0 weight goes to mmqr / mmq6w. For the host test of the rule
 * (tests/cuda/test_cuda_host.c); the build's gpu_arch does not enter. */
extern "C" int cuda_mmqh_rule(int n_sm, int q6, int64_t ne0, int64_t n_w, int32_t n_rows)
{
    struct cuda_ctx c;
    memset(&c, 0, sizeof(c));
    c.n_sm = n_sm;
    return cuda_mmqh_takes(&c, CUDA_MMQW_MIN, 1, q6 ? QT_Q6_K : QT_Q4_K, ne0, n_w, n_rows);
}
