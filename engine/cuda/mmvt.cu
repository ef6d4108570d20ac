/* cuda/mmvt — the one-row (decode) product of K-quant weights (Q4_K, Q5_K,
 * Q6_K) with a lane per weight row, fed by the tensor memory accelerator.
 *
 * Why (bench/RESULTS.md, 2026-12-03 and 12-04): the warp-per-row kernel
 * (cuda/mmvq.cu) gives a super-block 8 lanes, so every super-block costs
 * shuffles to meet its 8 partial sums, a head on one lane and a chain on
 * another: ~25-29 warp instructions a row-super-block, issued at ~0.5 a
 * scheduler-cycle, hold it at 12.9 us on a 4096 x 14336 Q4_K weight (DRAM
 * ~57%). With a lane per row, one warp instruction does the same work for
 * 32 row-super-blocks: no shuffle, the head and the float chain on every
 * lane, the activations a broadcast (every lane reads the same
 * super-block of the one activation row), ~6 warp instructions a
 * row-super-block. (It replaces cuda/mmvs.cu, per-warp cp.async rings
 * with 4 lanes a super-block: slower than mmvq at one row, off by
 * default since 2026-12-03, removed 2026-12-04.)
 *
 * Shape: a block of CW compute warps and one feed warp holds RB
 * weight rows at a time (a row group; blocks take groups blockIdx.x,
 * + gridDim.x, ..., the ring running on from one group into the next).
 * A stage is C = CW * 32 / RB consecutive super-blocks of each of
 * the group's rows: the feed warp's lane r copies row r's run of them
 * (C x 144, 176 or 210 contiguous bytes) with one cp.async.bulk into the
 * stage's slot, rows RS bytes apart (RS = the run + 16, so the 16-byte
 * reads of 8 neighbouring rows fall in 8 distinct bank groups; Q6_K's
 * 2-byte aligned runs + 32, read as words). Lane
 * (r = lane % RB, kk = lane / RB) of compute warp w takes super-block
 * column w * (32 / RB) + kk of row r: its exact integer sums (the scale
 * dots, the min term), its float head, parked (p1, v1, p2, v2) per
 * (column, row); then the feed warp's lane r runs row r's float chain
 * over the stage's columns in k order, stores the row's result at the
 * group's last stage and reuses the slot for the stage D (the ring's
 * depth) on.
 * The chain is cuda/qtypes.cuh's, the one every product kernel runs: a
 * row's bits here are mmvq's, mmqs's and MMQ's.
 *
 * Barriers: full[slot] (one arrival with the stage's byte count, then the
 * bulk copies' bytes) and done[slot] (every compute lane, after its
 * park). The park of a slot is rewritten only after full[slot] of the
 * next use, which the feed warp arms after its chain has read the park.
 *
 * Before the PDL wait (cuda/common.cuh) the feed warp queues the first D
 * stages (weights only); activations and y come after it.
 * The activations: where each block has one row group (FQ), the compute
 * warps quantize the float row themselves, a stage's columns at a time,
 * into shared memory, and no quantizer kernel runs before the product;
 * where blocks stream several groups of rows that fit one stage, the
 * same form quantizes the row once, at the block's first stage (a warp's
 * columns are the same in every group); elsewhere (several groups of
 * several stages, whose every group would quantize again) they read the
 * quantizer kernel's planes, and that quantizer lets mmvt launch at its
 * start (cuda_pdl_trigger). Measured (bench/RESULTS.md 2026-12-04 17:45-,
 * call 10): the 7B's ffn-up at one row q4_K 11-13 -> 10.0 us, q6_K 18.5 ->
 * 17.4; tg128 +3.2%.
 * sm_90 and later (bulk copies); the dispatcher asks for it nowhere else.
 *
 * Measured (H200, bench/RESULTS.md 2026-12-04 03:15- and 06:10-; bits
 * equal to mmvq's and the CPU's, memcheck and racecheck clean): q6_K
 * 4096 x 14336 23.8 -> 18.7 us, the 7B's ffn-up (18944 rows) -19 to -23%
 * for every type, 7B tg128 355 -> 390 tok/s. On one-group shapes (4096
 * and 3584 rows: a block's lanes do their row-super-blocks in series,
 * ~1 us each: ncu 17% issue, DRAM 52%, 35% of stall samples on the
 * activations' L2 loads) 14 (Q4_K) or 12 compute warps instead of 8
 * (mmvt_cw): q4_K 4096 x 14336 12.6 -> 10.5 us, the 7B's ffn-down 14.8 ->
 * 11.5; elsewhere 8 warps with a four-stage ring. Staging the quantized
 * activations in shared memory by copies (a stage's, or the whole row
 * once), or prefetching them to L1, measured slower everywhere; written
 * there by the warps that quantize them (FQ) they are faster (2026-12-04
 * 14:35-: q4_K 4096 x 14336 9.6 -> 8.2 us, the 7B's tg128 433 -> 440).
 * Also measured there and not kept: the block's first stage read by the
 * compute lanes themselves from global memory or by their own cp.async
 * (1.1-1.4x slower: 32 rows a warp instruction), 16-row groups on
 * one-group shapes.
 * Q6_K (session 45, bench/RESULTS.md 2026-12-06 08:10-): where the warps
 * quantize the row they also keep its 16-sums as -32 S_j, the start of
 * each sub-block's dot product (mmvt_terms_q6: 13% fewer instructions,
 * the same integers; 0.98-1.015x on the H100, whose Q6_K product is bound
 * by the stream: tasks ~0.75-1.1 us, stages landing ~2 us apart). Tried
 * and withdrawn: tensor copies that would land every super-block 16-byte
 * aligned (a box must start 16-byte aligned: "illegal instruction",
 * bench/tma_probe.cu), and, for rows of whole 8-super-block runs, each
 * warp's phase as a compile-time constant with 16-byte loads (half the
 * wavefronts, but 8 copies of the terms missed the instruction cache:
 * tasks 2.3-2.75 us).
 */
#include "engine/cuda/mma.cuh"
#include "engine/cuda/mmq.cuh"
#include "engine/cuda/qtypes.cuh"
#include "engine/cuda/tiles.cuh"
#include "engine/cuda/trace.cuh"

/* CW, the compute warps a block (one more feeds and chains): 8, 12 or 14,
 * by shape (mmvt_cw) */

/* D, the stages in the ring (a template argument). sm_90: Q4_K/Q5_K at 8
 * compute warps four (166 / 199 KB: one block an SM, three stages of 37-46
 * KB in flight while one is multiplied; four against three measured -5% /
 * -3% on the 7B's 18944-row ffn-up, where a block streams ~9 row groups
 * and the ring binds: bench/RESULTS.md 2026-12-04 06:10-, call 9), Q6_K
 * (55 KB stages) and the 12-warp form three; sm_121's ~100 KB per SM
 * holds two (83 / 99 KB; reasoned from its limits, not measured: no GB10
 * here). */

/* BS bytes a super-block; QS the offset of Q4_K/Q5_K's 4-bit values */
template <int T> struct mmvt_t {
    enum {
        BS = T == QT_Q4_K   ? sizeof(struct block_q4_K)
             : T == QT_Q5_K ? sizeof(struct block_q5_K)
                            : sizeof(struct block_q6_K),
        QS = T == QT_Q5_K ? 48 : 16,
    };
};

#define MMVT_XS (QK_K + CUDA_Q8K_HL + 16) /* a quantized activation super-block in shared memory */
/* Q6_K's, with its sixteen 16-sums S_j as -32 S_j (int32, at MMVT_XS: the
 * dot products' starting values, mmvt_terms_q6) */
#define MMVT_XS6 (MMVT_XS + 64)

/* FQ: 0 the quantizer kernel's planes; 1 the stage's columns quantized by
 * the compute warps (mmvt_kernel says when and why) */
/* HV: compute warps a column (2: Q6_K's halves form, mmvt_kernel) */
template <int T, int RB, int D, int CW, int FQ = 0, int HV = 1> struct mmvt_geom {
    enum {
        KL = 32 / RB,           /* lanes of a warp along k */
        C = CW / HV * KL,       /* super-block columns a stage */
        CB = C * mmvt_t<T>::BS, /* bytes of a row's run */
        /* PAD: the bytes a row's slot holds past its run, 16 or 32, so that
         * the row stride RS is an odd number of 16-byte granules: the
         * 16-byte reads of 8 neighbouring rows then fall in 8 distinct bank
         * groups (Q4_K/Q5_K: CB / 16 is even, 16), and Q6_K's word reads
         * (its 210-byte blocks are 2-byte aligned: a run is copied from the
         * granule its first byte lies in, up to 14 bytes early, so at least
         * 16) stay 4-way at worst. Q6_K was 32 for every geometry: right at
         * 8 columns a stage (RS 1,712 B), but at 16 (the 16-row groups of
         * the multi-group shapes) RS was 3,392 B = 64 mod 128, rows two bank
         * groups apart: 8-way conflicts on every word a half-warp read. */
        PAD = (CB / 16) % 2 ? 32 : 16,
        RS = CB + PAD, /* its stride in the slot (CB % 16 == 0: 144 / 176-byte blocks, Q6_K's C % 8 == 0) */
        SLOT = RB * RS,
        PARK = C * RB * 16,
        XW = T == QT_Q6_K ? MMVT_XS6 : MMVT_XS, /* a column's activations in xs */
        XS = FQ ? XW * C : 0,                  /* FQ: the stage's activations, quantized by the compute warps */
        SMEM = D * (SLOT + PARK) + 2 * D * 8 + XS, /* the ring, its park, full[D], done[D], the activations */
    };
    static_assert(CB % 16 == 0, "a row's run must be whole 16-byte granules");
};

/* The activations of one super-block: in the global planes of the
 * quantizer kernel (read by the read-only path), or, FQ, in shared memory
 * (MMVT_XS bytes: qs, hl, d as the planes hold them), quantized there from
 * the float row by the warp whose lanes read them (mmvt_kernel says when
 * and why). */
struct mmvt_x {
    const uint4 *qs, *hl;
    const float *d;
};
static __device__ __forceinline__ mmvt_x mmvt_xat(const uint8_t *xs)
{
    return {(const uint4 *)xs, (const uint4 *)(xs + QK_K), (const float *)(xs + QK_K + CUDA_Q8K_HL)};
}
template <bool FQ, typename V> static __device__ __forceinline__ V mmvt_ld(const V *p)
{
    if constexpr (FQ)
        return *p;
    else
        return __ldg(p);
}

/* Row-super-block (smem block b, activation super-block sb of the one
 * activation row): p1 = d * xd, p2 = -(dmin * xd), v1 = sum_j sc_j dot_j,
 * v2 = sum_j m_j s_j (cuda/qtypes.cuh's head and terms). Q4_K's high
 * nibbles are multiplied in place, as 16 x their value, by an unsigned x
 * signed dp4a: the sum is exactly 16 x the dot. */
template <int T, bool FQ>
static __device__ __forceinline__ float4 mmvt_terms(const uint8_t *b, const mmvt_x &xa)
{
    const uint32_t m = 0x0f0f0f0fu;
    const uint4 hd = *(const uint4 *)b;
    uint4 h0, h1;
    if (T == QT_Q5_K) {
        h0 = *(const uint4 *)(b + 16);
        h1 = *(const uint4 *)(b + 32);
    }
    int v1 = 0;
#pragma unroll
    for (int p = 0; p < 4; p++) {
        const uint4 q0 = *(const uint4 *)(b + mmvt_t<T>::QS + 32 * p);
        const uint4 q1 = *(const uint4 *)(b + mmvt_t<T>::QS + 32 * p + 16);
        const uint32_t qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
        const uint4 a0 = mmvt_ld<FQ>(xa.qs + 4 * p), a1 = mmvt_ld<FQ>(xa.qs + 4 * p + 1);
        const uint4 a2 = mmvt_ld<FQ>(xa.qs + 4 * p + 2), a3 = mmvt_ld<FQ>(xa.qs + 4 * p + 3);
        const int al[8] = {(int)a0.x, (int)a0.y, (int)a0.z, (int)a0.w, (int)a1.x, (int)a1.y, (int)a1.z, (int)a1.w};
        const int ah[8] = {(int)a2.x, (int)a2.y, (int)a2.z, (int)a2.w, (int)a3.x, (int)a3.y, (int)a3.z, (int)a3.w};
        int sc0, sc1; /* the 6-bit scales of sub-blocks 2p, 2p + 1 */
        cuda_k45_pair_scales(hd, p, &sc0, &sc1);
        int dl = 0, dh = 0;
        if (T == QT_Q4_K) {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                dl = __dp4a((int)(qw[i] & m), al[i], dl);
                dh = cuda_dp4a_us(qw[i] & ~m, ah[i], dh);
            }
            dh >>= 4; /* 16 x the sum: exact */
        } else {
            const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
            const uint32_t o = 0x01010101u;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t lo = (qw[i] & m) | (((hw[i] >> (2 * p)) & o) << 4);
                const uint32_t hi = ((qw[i] >> 4) & m) | (((hw[i] >> (2 * p + 1)) & o) << 4);
                dl = __dp4a((int)lo, al[i], dl);
                dh = __dp4a((int)hi, ah[i], dh);
            }
        }
        v1 += sc0 * dl + sc1 * dh;
    }
    float p1, p2;
    int v2;
    cuda_k45_head(hd, mmvt_ld<FQ>(xa.d), mmvt_ld<FQ>(xa.hl), &p1, &p2, &v2);
    return make_float4(p1, (float)v1, p2, (float)v2);
}

/* Q6_K: the row-super-block at b (shared memory, 2-byte aligned): p1 =
 * d * xd, v1 = sum_j sc_j dot_j over its 16 sixteen-element sub-blocks
 * (cuda/qtypes.cuh's Q6_K terms; no min term). Half h: ql bytes 64h ..
 * +64 (the quarters' low nibbles: quarter k of 32 elements from byte
 * 32(k & 1), high nibble when k >= 2), qh bytes 128 + 32h .. (2 bits a
 * quarter), scales 192 + 8h + 2k + l / 16. q - 32 per byte as (q + 0x60) ^
 * 0x80: q < 64, so no byte carries. */
/* [[maybe_unused]]: sm_80/sm_89 compile the kernel empty (no bulk copies) */
/* xq, xd: the activation super-block's 16 granules of qs and its d, loaded
 * by the caller before the stage's wait (mmvt_kernel says why) */
/* NS: ns[j] = -32 S_j, the activations' 16-sums (FQ: quantized with them),
 * the start of sub-block j's dot product, which then takes the 6-bit
 * values as they are (0..63): sum_i (q_i - 32) a_i = sum_i q_i a_i - 32
 * S_j, the same integer, two operations a word fewer; else q - 32 per
 * byte */
/* NH: the halves h0 .. h0 + NH - 1 only (xq, ns: theirs; the halves form:
 * mmvt_kernel's HV); returns v1, its integer, with p1 */
template <bool NS, int NH = 2>
[[maybe_unused]] static __device__ __forceinline__ int mmvt_terms_q6(const uint8_t *b, const uint4 *xq, float xd,
                                                                     const int *ns, float *p1, int h0 = 0)
{
    const uint32_t m = 0x0f0f0f0fu, m2 = 0x30303030u, k60 = 0x60606060u, k80 = 0x80808080u;
    int v1 = 0;
#pragma unroll
    for (int hh = 0; hh < NH; hh++) {
        const int h = h0 + hh;
        uint32_t ql[16], qh[8], sw[2];
        cuda_ld_a2<16>(b + 64 * h, ql);
        cuda_ld_a2<8>(b + 128 + 32 * h, qh);
        cuda_ld_a2<2>(b + 192 + 8 * h, sw);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 a0 = xq[8 * hh + 2 * k], a1 = xq[8 * hh + 2 * k + 1];
            const int a[8] = {(int)a0.x, (int)a0.y, (int)a0.z, (int)a0.w, (int)a1.x, (int)a1.y, (int)a1.z, (int)a1.w};
            int d0 = NS ? ns[8 * hh + 2 * k] : 0, d1 = NS ? ns[8 * hh + 2 * k + 1] : 0;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const uint32_t l = ql[8 * (k & 1) + i];
                const uint32_t lo = k >= 2 ? (l >> 4) & m : l & m;
                const uint32_t hi = (k == 0 ? qh[i] << 4 : k == 1 ? qh[i] << 2 : k == 2 ? qh[i] : qh[i] >> 2) & m2;
                const int q = NS ? (int)(lo | hi) : (int)(((lo | hi) + k60) ^ k80);
                if (i < 4)
                    d0 = __dp4a(q, a[i], d0);
                else
                    d1 = __dp4a(q, a[i], d1);
            }
            const int s0 = (int)(int8_t)(sw[k >> 1] >> (16 * (k & 1))), s1 = (int)(int8_t)(sw[k >> 1] >> (16 * (k & 1) + 8));
            v1 += s0 * d0 + s1 * d1;
        }
    }
    *p1 = __fmul_rn(cuda_h2f(*(const quant_f16 *)(b + 208)), xd);
    return v1;
}

template <int T, int RB, int D, int CW, int FQ, int HV>
static __global__ void __launch_bounds__((CW + 1) * CUDA_WARP, 1)
mmvt_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X, const float *__restrict__ x,
            int32_t nbr, float *__restrict__ y, struct cuda_epi E, int32_t trig)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    typedef mmvt_geom<T, RB, D, CW, FQ, HV> G;
    extern __shared__ __align__(128) uint8_t mmvt_sm[];
    float4 *park = (float4 *)(mmvt_sm + D * G::SLOT);
    uint64_t *full = (uint64_t *)(mmvt_sm + D * (G::SLOT + G::PARK));
    uint64_t *done = full + D;
    uint8_t *xs = mmvt_sm + D * (G::SLOT + G::PARK) + 2 * D * 8;
    const int warp = threadIdx.x / CUDA_WARP, lane = threadIdx.x % CUDA_WARP;
    const int32_t n_grp = (n_w + RB - 1) / RB;
    const int32_t ns = (nbr + G::C - 1) / G::C; /* stages a row group */
    const int32_t n_st = ((n_grp - 1 - (int32_t)blockIdx.x) / (int32_t)gridDim.x + 1) * ns;
    if (threadIdx.x == 0) {
        for (int i = 0; i < D; i++) {
            cuda_mbar_init(&full[i], 1);
            cuda_mbar_init(&done[i], CW * CUDA_WARP);
        }
        cuda_mbar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0)
        cuda_tr_block(0);
    if (warp == CW) {
        /* the feed and chain warp: stage f into its slot, a bulk copy a
         * row (cuda_feed_rows) */
        cuda_stage fp = cuda_stage_first<G::C>(nbr);
        int32_t f = 0;
        auto feed = [&]() {
            if (CUDA_TR_PROBE == 3) {
                if (lane == 0)
                    cuda_mbar_expect(&full[f % D], 0);
                __syncwarp();
            } else
                cuda_feed_rows(mmvt_sm + (f % D) * G::SLOT, G::RS, w, row_bytes, n_w, fp.g * RB, RB,
                           (size_t)fp.st * G::CB, (uint32_t)(fp.cnt * mmvt_t<T>::BS), &full[f % D]);
            cuda_tr(f, CUDA_TR_FEED);
            f++;
            cuda_stage_next<G::C>(fp, ns, nbr);
        };
        while (f < n_st && f < D)
            feed();
        cuda_pdl_wait();
        /* trig (cuda_mmvt_trig): the kernel after this one may launch once
         * every block has queued its last stage; only after the wait, so
         * a chain of grids waiting early ends here (cuda_pdl_trigger) */
        if (trig && f == n_st)
            cuda_pdl_trigger();
        cuda_stage cp = cuda_stage_first<G::C>(nbr);
        float acc = 0.0f;
        for (int32_t s = 0; s < n_st; s++, cuda_stage_next<G::C>(cp, ns, nbr)) {
            cuda_mbar_wait(&done[s % D], (uint32_t)(s / D) & 1);
            const int32_t row = cp.g * RB + lane;
            if (lane < RB && row < n_w) {
                const float4 *pk = park + (size_t)(s % D) * G::C * RB + lane;
#pragma unroll
                for (int j = 0; j < G::C; j++) {
                    if (j < cp.cnt) {
                        const float4 t = pk[j * RB];
                        if (HV == 2) /* v1's halves as ints: the same integer, then the float */
                            acc = __fmaf_rn(t.x, (float)(__float_as_int(t.y) + __float_as_int(t.z)), acc);
                        else
                            acc = __fmaf_rn(t.x, t.y, acc);
                        if (T != QT_Q6_K)
                            acc = __fmaf_rn(t.z, t.w, acc);
                    }
                }
                if (cp.st == ns - 1) {
                    cuda_epi_store(y, 0, row, n_w, acc, E);
                    acc = 0.0f;
                }
            }
            __syncwarp();
            cuda_tr(s, CUDA_TR_CHAIN);
            if (f < n_st) {
                feed();
                if (trig && f == n_st)
                    cuda_pdl_trigger();
            }
        }
        cuda_tr_block(1);
        return;
    }
    cuda_pdl_wait();
    /* the compute lane's row r and column j of each stage: lane = row (r,
     * the stage's column warp's), or, in the halves form (HV 2: Q6_K,
     * 32-row groups, the quantizer's planes), rows 8 (wc / 2) .. + 7 by
     * lane % 8, columns wc % 2 + 2 (lane / 8), wc the warp's column warp.
     * Why: Q6_K's 4-byte word reads at 32 rows 16 * odd bytes apart fall
     * in 8 bank groups, 4 lanes on each bank (4 wavefronts a read); columns
     * two apart start 105 words apart, so the four octets' reads land on
     * the four words of a bank group: one wavefront where rows are 16-byte
     * multiples, two where not (every other row's run then starts 4, 8 or
     * 12 bytes into its slot row; a row a lane: four either way).
     * bench/RESULTS.md session 56 (-1.2 us on the L2-held proxy in a
     * withdrawn form; here with the halves). */
    /* HV 2: warps w and w + 8 take the same row-super-blocks,
     * halves 0 and 1 of each (mmvt_terms_q6's h: its sub-blocks 0-7 and
     * 8-15); the chain adds the two halves' integers before the float
     * multiply, so the bits are the one-lane form's. Why: a task's ~600
     * dependent instructions on two warps a scheduler ran ~1 us (latency,
     * issue ~32%); four warps a scheduler with half the work each.
     * Measured (H100, bench/RESULTS.md session 56): the L2-held 4096 x
     * 8192 weight 11.0 -> 9.0 us on the planes (mmq_trace), 4096 x 14336
     * 22.5 -> 21.6-21.9 (bench --op, quantizer included); cuda_mmvt says
     * where it runs. Not kept: the stage's floats by the feed warp's bulk
     * copies for the in-kernel quantization (queued behind the ring's
     * weight copies, they landed late: 11.0 -> 14.6-14.7 us, and 23.9 ->
     * 26.0 at 4096 x 14336). */
    const int wc = HV == 2 ? warp % (CW / 2) : warp, h0 = HV == 2 ? warp / (CW / 2) : 0;
    const int r = HV == 2 ? 8 * (wc >> 1) + (lane & 7) : lane % RB;
    const int j = HV == 2 ? (wc & 1) + 2 * (lane >> 3) : wc * G::KL + lane / RB;
    cuda_stage cp = cuda_stage_first<G::C>(nbr);
    /* FQ (a block with one row group, rows of at most c->mmvt_fq
     * super-blocks: cuda_mmvt): each compute warp quantizes its columns of
     * a stage from the float row into xs (cuda_q8k_warp_v: the quantizer
     * kernel's bytes) before the stage's wait, so no quantizer kernel runs
     * before the product: its launch and completion sat between two
     * products. The floats of the next stage's columns are loaded during
     * this one (xf): without that the L2 read sat on every stage's path and
     * long rows lost (call 7). Measured (H200, bench/RESULTS.md 2026-12-04
     * 14:35- call 8, us, quantizer + planes -> FQ): q4_K 4096 x 14336 9.6
     * -> 8.2, the 7B's attn-q 6.3 -> 3.8, q5_K 4096 x 14336 10.7 -> 10.4,
     * q6_K 15.6 both; the 7B's tg128 433 -> 440. */
    float xf[FQ ? G::KL : 1][8];
    auto xload = [&](const cuda_stage &st) {
#pragma unroll
        for (int kk = 0; kk < G::KL; kk++) {
            const int jq = warp * G::KL + kk;
            if (jq < st.cnt) {
                const float4 *p = (const float4 *)(x + ((int64_t)st.st * G::C + jq) * QK_K + 8 * lane);
                const float4 a = p[0], b = p[1];
                xf[kk][0] = a.x, xf[kk][1] = a.y, xf[kk][2] = a.z, xf[kk][3] = a.w;
                xf[kk][4] = b.x, xf[kk][5] = b.y, xf[kk][6] = b.z, xf[kk][7] = b.w;
            }
        }
    };
    if constexpr (FQ == 1) {
        if (n_st > 0)
            xload(cp);
    }
    for (int32_t s = 0; s < n_st; s++, cuda_stage_next<G::C>(cp, ns, nbr)) {
        mmvt_x xa;
        if constexpr (!FQ) {
            const int64_t sb = (int64_t)cp.st * G::C + j;
            xa = {(const uint4 *)(X.qs + sb * QK_K), (const uint4 *)(X.hl + sb * CUDA_Q8K_HL), X.d + sb};
        } else {
            /* a row of one stage (ns == 1: every group's stage is the whole
             * row, and a warp's columns are the same in each) is quantized
             * once, at the block's first stage; the groups after it read
             * the same bytes */
            if (ns > 1 || s == 0) {
                __syncwarp(); /* the lanes are done reading the previous stage's */
#pragma unroll
                for (int kk = 0; kk < G::KL; kk++) {
                    const int jq = warp * G::KL + kk;
                    if (jq < cp.cnt) {
                        uint32_t q[2];
                        int sum, s16 = 0;
                        float d;
                        cuda_q8k_warp_v(xf[kk], lane, q, &sum, &d, T == QT_Q6_K ? &s16 : nullptr);
                        int8_t *xb = (int8_t *)(xs + jq * G::XW); /* mmvt_xat's layout */
                        cuda_q8k_put(xb, xb + QK_K, (float *)(xb + QK_K + CUDA_Q8K_HL), lane, q, sum, d);
                        if (T == QT_Q6_K && !(lane & 1)) /* sub-block lane / 2's sum */
                            ((int *)(xb + MMVT_XS))[lane / 2] = -32 * s16;
                    }
                }
                __syncwarp();
            }
            if (warp == 0)
                cuda_tr(s, CUDA_TR_X0);
            xa = mmvt_xat(xs + j * G::XW);
            if (ns > 1 && s + 1 < n_st) {
                cuda_stage nx = cp;
                cuda_stage_next<G::C>(nx, ns, nbr);
                xload(nx);
            }
        }
        /* Q6_K: the activation super-block into registers before the
         * stage's wait (loaded inside the terms from global memory, a Q6_K
         * task took ~2-2.5 us against Q4_K's ~0.6: bench/mmq_trace,
         * 2026-12-04); Q4_K/Q5_K at 12-14 warps have no 64 registers to
         * spare */
        enum { NH = HV == 2 ? 1 : 2 }; /* Q6_K halves a lane */
        uint4 xq[T == QT_Q6_K ? 8 * NH : 1];
        int4 nsum[T == QT_Q6_K && FQ ? 2 * NH : 1]; /* the values -32 S_j of its halves (MMVT_XS6) */
        float xd = 0.0f;
        if constexpr (T == QT_Q6_K) {
            if (j < cp.cnt) {
#pragma unroll
                for (int i = 0; i < 8 * NH; i++)
                    xq[i] = mmvt_ld<FQ != 0>(xa.qs + 8 * h0 + i);
                xd = mmvt_ld<FQ != 0>(xa.d);
                if constexpr (FQ) {
#pragma unroll
                    for (int i = 0; i < 2 * NH; i++)
                        nsum[i] = ((const int4 *)((const uint8_t *)xa.qs + MMVT_XS))[2 * h0 + i];
                }
            }
        }
        if (warp == 0)
            cuda_tr(s, CUDA_TR_X1);
        cuda_mbar_wait(&full[s % D], (uint32_t)(s / D) & 1);
        if (warp == 0 || warp == CW - 1)
            cuda_tr(s, warp ? CUDA_TR_LANDL : CUDA_TR_LAND0);
        if (j < cp.cnt && cp.g * RB + r < n_w) {
            /* the run starts (row * row_bytes) % 16 bytes into the slot's row
             * (the weight 16-byte aligned, G::CB a multiple of 16) */
            const uint8_t *b = mmvt_sm + (s % D) * G::SLOT + r * G::RS +
                               (((size_t)(cp.g * RB + r) * row_bytes) & 15) + j * mmvt_t<T>::BS +
                               (T == QT_Q6_K && CUDA_TR_PROBE == 2 ? 4 * ((lane >> 3) & 3) : 0);
            float4 *pk = park + ((size_t)(s % D) * G::C + j) * RB + r;
            if (CUDA_TR_PROBE == 1) {
                *pk = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            } else if constexpr (T == QT_Q6_K) {
                float p1;
                const int v1 = mmvt_terms_q6<FQ != 0, NH>(b, xq, xd, (const int *)nsum, &p1, h0);
                if (HV == 1)
                    *pk = make_float4(p1, (float)v1, 0.0f, 0.0f);
                else if (h0 == 0)
                    *(float2 *)pk = make_float2(p1, __int_as_float(v1));
                else
                    ((float *)pk)[2] = __int_as_float(v1);
            } else {
                *pk = mmvt_terms<T, FQ != 0>(b, xa);
            }
        }
        if (warp == 0 || warp == CW - 1)
            cuda_tr(s, warp ? CUDA_TR_DONEL : CUDA_TR_DONE0);
        cuda_mbar_arrive(&done[s % D]);
    }
#endif
}

template <int T, int RB, int D, int CW, int FQ, int HV = 1>
static int mmvt_launch_fq(struct cuda_ctx *c, const struct backend_weight *w, const float *x, const void *xq, float *y,
                          int max_blocks)
{
    typedef mmvt_geom<T, RB, D, CW, FQ, HV> G;
    const int occ = mmq_occupancy_once<mmvt_kernel<T, RB, D, CW, FQ, HV>>(G::SMEM, (CW + 1) * CUDA_WARP);
    if (occ == 0)
        return -1;
    const int64_t nbr = w->ne0 / QK_K;
    const int64_t blocks = cuda_stream_blocks((w->ne1 + RB - 1) / RB, occ, c->n_sm, max_blocks);
    const cuda_q8k planes = xq ? cuda_q8k_planes(xq, nbr) : cuda_q8k{};
    cuda_launch(c, mmvt_kernel<T, RB, D, CW, FQ, HV>, dim3((unsigned)blocks), (CW + 1) * CUDA_WARP, (size_t)G::SMEM,
                (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1, planes, x, (int32_t)nbr, y, c->epi,
                (int32_t)cuda_mmvt_trig(c));
    return 0;
}

/* Q6_K's halves form (HV 2: 16 compute warps, 32-row groups, three
 * stages, sm_90) on the quantizer's planes xq; -1 where it does not fit */
static int mmvt_launch_hv(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y,
                          int max_blocks)
{
    return mmvt_launch_fq<QT_Q6_K, 32, 3, 16, 0, 2>(c, w, NULL, xq, y, max_blocks);
}

/* x: the float row, quantized by mmvt itself (FQ); else xq: the
 * quantizer kernel's planes, read by the halves form where hv (Q6_K at
 * 32 rows and 8 warps: mmvt_launch_hv; -1, no room, falls to 8) */
template <int T, int RB, int D, int CW>
static int mmvt_launch(struct cuda_ctx *c, const struct backend_weight *w, const float *x, const void *xq, float *y,
                       int max_blocks, bool hv)
{
    if constexpr (T == QT_Q6_K && RB == 32 && D == 3 && CW == 8) {
        if (hv && !x) {
            const int rc = mmvt_launch_hv(c, w, xq, y, max_blocks);
            if (rc != -1)
                return rc;
        }
    }
    return x ? mmvt_launch_fq<T, RB, D, CW, 1>(c, w, x, NULL, y, max_blocks)
             : mmvt_launch_fq<T, RB, D, CW, 0>(c, w, NULL, xq, y, max_blocks);
}

/* Compute warps a block by shape (speed only). Where a block has one
 * 32-row group to do (rows <= 32 x SMs: the 4096- and 3584-row weights),
 * its lanes do their row-super-blocks one after another, ~1 us each
 * (latency: L2 activation loads, 17% issue), so the series is the time:
 * 12 warps (12 columns a stage) cut it. Where a block streams several
 * groups the ring's refills bind instead, and 8 warps' smaller stages
 * keep more of them in flight. Measured (H200, bench/RESULTS.md
 * 2026-12-04 06:10-, n = 1, us, 8 -> 12 warps): q4_K 4096 x 14336 12.6 ->
 * 10.6, 7B ffn-down (3584 rows) 15.8 -> 12.8, q5_K 13.2 -> 11.9 and 16.8
 * -> 15.4; the 7B's 18944-row ffn-up 12.4 -> 13.5 (q4_K), 14.6 -> 15.0
 * (q5_K); 16 warps (two stages, 165-198 KB) lost to 12 everywhere. Q6_K
 * stays at 8: 12 needs 16-row groups (24 columns of 210 bytes a stage)
 * and then only two stages fit (20.8 against 18.6 us). Q4_K takes 14
 * (call 11: the 7B's ffn-down 12.9 -> 11.5 us, 74 super-blocks a row in 6
 * stages instead of 7; 4096 x 14336 10.7 -> 10.6), 217 KB with three
 * stages; 12 warps need 186 / 223 KB (Q4_K / Q5_K): sm_90's 227 KB, not
 * sm_121's ~100 KB (there cuda_mmvt takes 8 warps, two stages, before
 * asking). */
static inline int mmvt_cw(int type, int64_t n_w, int n_sm)
{
    if (type == QT_Q6_K || (n_w + 31) / 32 > n_sm)
        return 8;
    return type == QT_Q4_K ? 14 : 12;
}

/* Every warp count cuda_mmvt can run a type at, into cw: 8 (Q6_K's only;
 * every type's on multi-group shapes), then mmvt_cw's one-group counts
 * (Q4_K's 12 where INFERD_MMVT_CW forces it); prewarm launches each
 * (cuda/prewarm.cu) */
int cuda_mmvt_cws(int type, int cw[3])
{
    cw[0] = 8;
    if (type == QT_Q6_K)
        return 1;
    cw[1] = 12;
    if (type != QT_Q4_K)
        return 2;
    cw[2] = 14;
    return 3;
}

/* Rows a group by shape (speed only). Where a block streams several
 * groups (more 32-row groups than SMs: 8 compute warps, 8 super-block
 * columns a stage at 32 rows, 16 at 16), its feed warp queues a bulk copy
 * a row each stage at ~33 ns a copy, and that queue paces the stream:
 * 16-row stages carry as many bytes for half the copies. Measured (H200,
 * bench/RESULTS.md 2026-12-04 14:35- call 5, harness, us, 32 -> 16 rows):
 * the 7B's fused gate-up (37888 x 3584 Q4_K) 25.8 -> 23.0, its output
 * head (152064 x 3584 Q6_K) 121.8 -> 112.0. Not where the 16-row stages
 * would leave more columns empty than the 32-row ones (q6_K 4096 x 14336
 * forced to 16: 14.8 -> 21.6, four stages a group with the last half
 * empty); one-group shapes keep cuda_group_rows (q4_K 4096 x 14336 8.8 ->
 * 9.0 at 16, the 7B's ffn-down 10.1 -> 10.9). */
static inline int mmvt_rows(int64_t n_w, int64_t nbr, int n_sm)
{
    if ((n_w + 31) / 32 > n_sm) {
        const int64_t idle32 = (nbr + 7) / 8 * 8 - nbr, idle16 = (nbr + 15) / 16 * 16 - nbr;
        if (idle16 <= idle32)
            return 16;
    }
    return cuda_group_rows(n_w, n_sm);
}

template <int T, int D, int CW>
static int mmvt_launch_rb(struct cuda_ctx *c, const struct backend_weight *w, const float *x, const void *xq,
                          float *y, int rb, int max_blocks, bool hv = false)
{
    return rb == 16 ? mmvt_launch<T, 16, D, CW>(c, w, x, xq, y, max_blocks, hv)
                    : mmvt_launch<T, 32, D, CW>(c, w, x, xq, y, max_blocks, hv);
}

template <int T>
int cuda_mmvt(struct cuda_ctx *c, const struct backend_weight *w, const float *x, const void *xq, float *y,
              int32_t n_rows, int rb, int max_blocks, int cw)
{
    /* one activation row; whole super-blocks; a 16-byte aligned weight
     * (Q4_K/Q5_K rows are then aligned too: 144 / 176 bytes a block);
     * sm_90 and later */
    if (n_rows != 1 || w->ne0 % QK_K || ((uintptr_t)w->data & 15) || c->sm < 90 || w->ne1 > INT32_MAX - 32)
        return INF_EUNSUPPORTED;
    if (rb <= 0)
        rb = c->mmvt_rb ? c->mmvt_rb : mmvt_rows(w->ne1, w->ne0 / QK_K, c->n_sm); /* at most 32: one warp instruction covers 32 rows of a super-block */
    /* the row quantized here where each block has one row group (one
     * block an SM: every mmvt form's shared memory), or where a row is one
     * stage (below); where blocks stream several groups of several stages
     * every group would quantize its columns again: the 7B's 18944-row
     * ffn-up (rows of 14 super-blocks, then 8 a stage) 11.1 -> 16.1 us
     * (RESULTS 2026-12-04 14:35- call 7). Rows past the type's bound
     * (c->mmvt_fq, or by type: cuda/mmq.cuh) take the quantizer's planes:
     * the 7B's 18944-wide ffn-down was 21.2 -> 22.0 us for Q6_K with FQ,
     * 10.9 -> 10.2 for Q4_K (call 8). The warps read the row's floats 16
     * bytes at a time. */
    const int64_t fq_sb = c->mmvt_fq >= 0 ? c->mmvt_fq : T == QT_Q6_K ? MMVT_FQ_SB : MMVT_FQ_SB_Q45;
    /* INFERD_MMVT_CW=8|12|14 forces the warps (A/B runs); sm_121: 8 */
    if (cw == 0)
        cw = c->mmvt_cw ? c->mmvt_cw : mmvt_cw(T, w->ne1, c->n_sm);
    if (c->sm >= 120)
        cw = 8;
    /* Where blocks stream several groups but a row is one stage (at most
     * cw * 32 / rb super-blocks: the 7B's 3584-wide gate-up, ffn-up and
     * output head), each block quantizes the row once, at its first stage
     * (mmvt_kernel), and no quantizer kernel runs either. */
    const int64_t nbr = w->ne0 / QK_K;
    const bool one_grp = (w->ne1 + rb - 1) / rb <= c->n_sm, one_st = nbr <= (int64_t)cw * 32 / rb;
    /* Q6_K where a block's one 32-row group has several stages, of at
     * least 2048 rows: the quantizer's planes and the halves form rather
     * than the row quantized here (c->mmvt_hv < 0, the default; 1: the
     * halves form wherever mmvt reads the planes, 0: never). Measured
     * (H100, bench/RESULTS.md session 56, us): 4096 x 14336 22.5-22.6 ->
     * 21.6-21.9 (bench --op, the quantizer kernel included), and on the
     * L2-held 4096 x 8192 (the H200's stream rate) 11.0 -> 9.0 in
     * mmq_trace; the planes form at 8 warps is no faster there (22.5-22.6),
     * and the halves form is not where the row is quantized here cheaply
     * (the 7B's 512-row attn-kv: the quantizer kernel costs more than it
     * saves, 4.8 -> 6.8-8.0) nor measured faster on the 7B's ffn-down
     * (planes already; 26.2-26.3 -> 26.5). */
    const bool hv_rule = T == QT_Q6_K && rb == 32 && one_grp && !one_st && nbr <= fq_sb && w->ne1 >= 2048;
    const bool hv = c->sm < 120 && (c->mmvt_hv > 0 || (c->mmvt_hv < 0 && hv_rule));
    const bool fq_on = c->mmvt_fq != 0 && (one_st || (one_grp && nbr <= fq_sb)) && !(hv && hv_rule);
    if (x && !(fq_on && !((uintptr_t)x & 15)))
        x = NULL;
    if (!x && !xq)
        return INF_EUNSUPPORTED;
    if (c->sm >= 120)
        return mmvt_launch_rb<T, 2, 8>(c, w, x, xq, y, rb, max_blocks);
    /* 14 (Q4_K only: Q5_K's three stages do not fit) or 12 warps with
     * three stages, 8 with four (see D above); -1 (the device cannot hold
     * it, or no such form) falls to 8 warps with three */
    int rc = -1;
    if constexpr (T != QT_Q6_K) {
        if (cw == 14) {
            if constexpr (T == QT_Q4_K)
                rc = mmvt_launch_rb<T, 3, 14>(c, w, x, xq, y, rb, max_blocks);
        } else {
            rc = cw == 12 ? mmvt_launch_rb<T, 3, 12>(c, w, x, xq, y, rb, max_blocks)
                          : mmvt_launch_rb<T, 4, 8>(c, w, x, xq, y, rb, max_blocks);
        }
    }
    return rc != -1 ? rc : mmvt_launch_rb<T, 3, 8>(c, w, x, xq, y, rb, max_blocks, hv);
}

template int cuda_mmvt<QT_Q4_K>(struct cuda_ctx *, const struct backend_weight *, const float *, const void *,
                                float *, int32_t, int, int, int);
template int cuda_mmvt<QT_Q5_K>(struct cuda_ctx *, const struct backend_weight *, const float *, const void *,
                                float *, int32_t, int, int, int);
template int cuda_mmvt<QT_Q6_K>(struct cuda_ctx *, const struct backend_weight *, const float *, const void *,
                                float *, int32_t, int, int, int);

/* prewarm (cuda/prewarm.cu): the form cuda_mmvt takes for (x or xq, rb,
 * cw: 0 by shape) on w, launched once; 0 where this device holds no such
 * form */
int cuda_mmvt_prewarm(struct cuda_ctx *c, int type, const struct backend_weight *w, const float *x, const void *xq,
                      float *y, int rb, int cw)
{
    const int rc = type == QT_Q4_K   ? cuda_mmvt<QT_Q4_K>(c, w, x, xq, y, 1, rb, 0, cw)
                   : type == QT_Q5_K ? cuda_mmvt<QT_Q5_K>(c, w, x, xq, y, 1, rb, 0, cw)
                                     : cuda_mmvt<QT_Q6_K>(c, w, x, xq, y, 1, rb, 0, cw);
    if (rc != -1 && rc != INF_EUNSUPPORTED && rc != 0)
        return rc;
    /* Q6_K's halves form reads the planes where cuda_mmvt's rule (or
     * INFERD_MMVT_HV=1) takes it, on shapes this scratch is not: launched
     * beside the 32-row planes form, under its name */
    if (type == QT_Q6_K && xq && rb == 32 && c->mmvt_hv != 0 && c->sm >= 90 && c->sm < 120) {
        const int r2 = mmvt_launch_hv(c, w, xq, y, 0);
        return r2 == -1 ? 0 : r2;
    }
    return 0;
}
