/* cuda/mmqr — mmqh's exact F16 Q4_K product on wgmma with the weights in
 * registers (sm_90a): each consumer thread expands its own A fragment from
 * the raw Q4_K bytes and hands it to `wgmma.mma_async` as registers; the
 * activations come from shared memory by descriptor, as in cuda/mmqw.cu.
 * The arithmetic and so the bits are mmqh's (cuda/mmqh_impl.cuh): A = q x
 * sc - 480, one exact f32 sum a super-block, v1 = sum + 480 S by one add,
 * then mmqk's chain and min term in the CPU's order (the min term's exact
 * integer by one more wgmma since session 44: mmqr_min_frag).
 *
 * Why (bench/RESULTS.md 2026-12-05 session 41, a prediction: no device
 * time was left to run it): mmqw is shared-memory bound by arithmetic. A
 * super-block of its 128 x 128 block moves ~340 KB through shared memory
 * (the producers' 64 KB of expanded weights written and read twice, once
 * by each warpgroup's wgmma... 64 KB of activations written by the tensor
 * copies and read by both warpgroups, 18 KB of raw blocks), ~2,650 cycles
 * at 128 B a cycle against ~2,050 of wgmma work; and every expanded
 * stage waits for a producer warpgroup. Here the expanded weights never
 * touch shared memory (~230 KB a super-block, ~1,800 cycles: under the
 * tensor work), and there is no producer hand-off for them.
 *
 * The k order: lane t4 of a warp owns its rows' 32-byte chunk t4 (sub-
 * blocks 2 t4 and 2 t4 + 1) of each super-block; its fragment words at
 * 16-column step j are word j & 7 of the chunk, low nibbles for j < 8 and
 * high ones after, bytes 0/1 and 2/3 (mmqh_w2: one PRMT and one HFMA2 a
 * pair, one scale a step). The activations are laid out to match by the
 * quantizer itself where the dispatcher knows mmqr takes the product
 * (cuda_quantize_x16p, c->x16p_ready: 0.965-0.972x at 4096 x 14336 x 512,
 * session 45), else by mmqh_x16p_kernel; a super-block's exact sum does
 * not depend on the order, so the bits are mmqw's.
 *
 * Shape: 2 consumer warpgroups of 64 weight rows x 128 activation rows
 * (the wgmma accumulator: 64 floats a thread, 64 more for the chain's
 * sums, 32 for two fragment sets) and a third warpgroup whose first two
 * warps feed (wgrs_feed): 384 threads. The register file is split among the 4 schedulers
 * and each holds 3 of the 12 warps, so any launch bound leaves 168 a
 * thread (a 9-warp block too: ptxas gave 168 and 600 bytes of spills);
 * setmaxnreg moves them: 232 for the consumers, 40 for the feed. Rings: 8 activation stages (a quarter
 * super-block each, one tensor copy: 128-byte swizzled, cuda_tmap_f16_sw128)
 * and 3 super-block slots (the raw Q4_K blocks by one tensor copy, two
 * under the SwiGLU epilogue, and the activations' d, 480 S and the min
 * term's B, stored by the feed's row warp). Each warpgroup runs a super-block as four
 * commit groups of four k16 steps, expanding group G + 1's fragments
 * while group G's wgmma run (two fragment sets: the registers a wgmma
 * reads must not change before a wait covers it); warpgroup 1 starts a
 * little behind warpgroup 0 (the lag barrier). Measured (bench/RESULTS.md
 * 2026-12-05 session 42, H100): a super-block every ~2.35 us at 4096 x
 * 14336 x 512, each warpgroup's prologue (~0.45 us), products (~1.0 us,
 * both warpgroups' at once: the tensor cores' rate) and chain (~1.0 us)
 * serial; turns between the warpgroups were slower. Session 43 (H200 and
 * H100): each warpgroup's part as two n64 halves, one half's chain under
 * the other's products, 1.18-1.20x slower: the chain's min-term mma.sync
 * waits for the tensor pipe the other half's wgmma holds (ncu: IMMA
 * stalled on `math`), the same cause as the turns'; the next slot landed
 * under group 3 and the heads decoded among the issues, 1.03-1.05x slower.
 * Session 44 (H100): with the min term by wgmma, the feed in two warps and
 * the warpgroups' products in turns (the default, TURNS), 0.932x session
 * 43's time at 4096 x 14336 x 512. Its marks: one warpgroup's 16 k16
 * steps on one accumulator set take ~1.2 us whether the other warpgroup's
 * run too or not (~137 cycles a step against 64 of tensor work), so a
 * super-block costs each warpgroup ~1.2 us of products plus its chain
 * (0.46 us in turns) and landing (~0.4 us); a second accumulator set a
 * warpgroup, which would hide the chain, does not fit its registers
 * (mmqr_pipe_kernel: 772 B of spills, 1.6x slower; bench/RESULTS.md).
 *
 * Built where gpu_arch has 90 (compute_90a, -DINFERD_MMQW=1, as mmqw.cu);
 * the default form of mmqh there (INFERD_MMQW=1: mmqw's, 2: this one
 * without turns; cuda/knobs.cu). */
#include <stddef.h>
#include <string.h>

#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqh_impl.cuh"
#include "engine/cuda/mmqmin.cuh"
#include "engine/cuda/trace.cuh"
#include "engine/cuda/wgrs.cuh"

/* MMQR_LEVER: a lever sweep's probe builds of bench/mmq_trace only (the
 * seeds' method: take a piece out, see what the stage time does; wrong
 * results): 1 no chain, 2 no min term, 3 no weight expansion (the raw
 * words as fragments). 0 everywhere else. */
#ifndef MMQR_LEVER
#define MMQR_LEVER 0
#endif

/* MMQR_TURN_AT: after which commit group's issue a warpgroup passes the
 * turn (TURNS): 3, its last (the engine's); 2 in bench/mmq_trace's probe
 * builds only (session 50: the turn's timing is mmqr's path, and a turn
 * passed a group earlier lets the other warpgroup's first group queue
 * behind this one's third). The bits do not depend on it. Measured
 * (session 51, H100): 2 is 1.003x in mmq_trace, 1.014x in bench --op at
 * 4096 x 14336 x 512; the engine keeps 3. */
#ifndef MMQR_TURN_AT
#define MMQR_TURN_AT 3
#endif

#define MMQR_ASL 8                       /* activation stages (quarter super-blocks) */
#define MMQR_RSL 3                       /* super-block slots */
#define MMQR_ATILE (MMQH_BN * 128)       /* an activation stage: 128 rows x 64 halves */

/* a super-block's slot: its raw Q4_K blocks (a tensor copy) and what the
 * chain needs of the activation rows (the feed's row warp's stores) */
struct mmqr_sslot {
    uint32_t rows[MMQH_BM][36];      /* the raw blocks */
    uint8_t mb[2 * MMQR_MBG];        /* the min term's B: core matrices (mmqr_min_brow) */
    float xd[MMQH_BN];               /* the activations' d */
    float sf[MMQH_BN];               /* 480 S */
};
struct mmqr_smem {
    uint8_t act[MMQR_ASL][MMQR_ATILE]; /* first: each tile on a 1,024-byte boundary */
    mmqr_sslot ss[MMQR_RSL];
    wgrs_bars<MMQR_ASL, MMQR_RSL> bar;
};
static_assert(MMQH_BM == WGRS_BM && MMQH_BN == WGRS_BN, "the block wgrs.cuh feeds");
static_assert(offsetof(mmqr_sslot, mb) % 16 == 0, "mmqr: wgmma's core matrices start 16-byte aligned");
static_assert(sizeof(mmqr_sslot) % 128 == 0, "mmqr: the raw blocks' tensor copies land 128-byte aligned");
#if defined(INFERD_MMQW) /* the launcher's (builds with gpu_arch 90) */
static constexpr size_t mmqr_smem_bytes = sizeof(mmqr_smem) + 1024; /* + the base's alignment */
#endif

/* Step kk of commit group G of a super-block: the fragment words of rows
 * A (g) and B (g + 8) from their chunk words qa, qb (word 4 (G & 1) + kk;
 * the high nibbles for G >= 2), each pair one PRMT and one HFMA2 */
static __host__ __device__ __forceinline__ void mmqr_frag(uint32_t f[4], uint32_t qa, uint32_t qb, bool hi, __half2 ma,
                                                 __half2 ca, __half2 mb, __half2 cb)
{
    const uint32_t la = (hi ? qa >> 4 : qa) & 0x0f0f0f0fu, lb = (hi ? qb >> 4 : qb) & 0x0f0f0f0fu;
    f[0] = mmqh_w2(la, 0x4140u, ma, ca); /* row g, k 2 t4, 2 t4 + 1: bytes 0, 1 */
    f[1] = mmqh_w2(lb, 0x4140u, mb, cb); /* row g + 8 */
    f[2] = mmqh_w2(la, 0x4342u, ma, ca); /* row g, k 2 t4 + 8, + 9: bytes 2, 3 */
    f[3] = mmqh_w2(lb, 0x4342u, mb, cb);
}

/* The min term by wgmma (one m64n128k16 step a super-block into dd, once
 * the chain has read the main sums): v2 = sum_j m_j S_j over the row's 8
 * mins and the activation row's 32-sums S_j = 128 hi_j + lo_j (cuda_q8k's
 * hl bytes), as A = (128 m_0..7, m_0..7) and B = (hi_0..7, lo_0..7), all
 * exact in f16 (128 m <= 8,064, a multiple of 128); every product and
 * partial sum an integer below 2^21, so the f32 sum is v2 exactly, the
 * integer mmqk's two mma.sync and (float)(128 ch + cl) give. Why: those
 * IMMA, IMAD and I2F were ~170 of the chain's ~560 instructions a thread
 * and super-block, and the IMMA wait on the tensor pipe while any wgmma
 * holds it (bench/RESULTS.md session 43). */

#if WGMMA_DEVICE
/* The chain's first half (mmqk's chain in the CPU's order, split around
 * the min term's wgmma): acc = fma(d x, dd + 480 S, acc) with dd the main
 * sums; columns 8 j + 2 t4 (+ 1), rows A (hd[0]) and B (hd[1]); the second
 * half, with v2, is cuda/mmqmin.cuh's mmqr_chain_v2 */
static __device__ __forceinline__ void mmqr_chain_v1(float acc[16][4], const float dd[16][4], const mmqr_sslot &L,
                                                     const mmqk_head hd[2], int t4)
{
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float2 xd = *(const float2 *)&L.xd[8 * j + 2 * t4];
        const float2 sf = *(const float2 *)&L.sf[8 * j + 2 * t4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float p1 = __fmul_rn(hd[k >> 1].d, k & 1 ? xd.y : xd.x);
            acc[j][k] = __fmaf_rn(p1, __fadd_rn(dd[j][k], k & 1 ? sf.y : sf.x), acc[j][k]);
        }
    }
}
#endif

/* TURNS (the default, INFERD_MMQW=3; 2 without): the warpgroups issue
 * their products in turns (turn[]: warpgroup 1's super-block s after
 * warpgroup 0's, 0's s + 1 after 1's s), so one's chain runs under the
 * other's products; with the min term off mma.sync the chain no longer
 * waits on the tensor pipe for its own IMMA (session 43), though its
 * min-term wgmma queues behind the other's products. Measured 0.93-0.99x
 * the time without turns (session 44). */
template <bool TURNS>
static __global__ void __launch_bounds__(WGRS_THREADS, 1)
mmqr_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, cuda_q8k X,
            int32_t nbr, int32_t n_w, float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
#if WGMMA_DEVICE
    extern __shared__ __align__(1024) uint8_t mmqr_smem_raw[];
    mmqr_smem &S = wgmma_smem<mmqr_smem>(mmqr_smem_raw);
    const int32_t m0 = blockIdx.x * MMQH_BM, n0 = blockIdx.y * MMQH_BN;
    wgrs_start(S.bar);
    /* the feed: 144 bytes of raw Q4_K a row and super-block, four quarter
     * stages of f16 activations */
    if (!wgrs_roles([&](int fw) {
            wgrs_feed<4, true>(S, fw, 144, threadIdx.x % CUDA_WARP, &wmap, &xmap, X, nbr, n_rows, m0, n0, E.glu,
                               [](mmqr_sslot &L, int r, float xd, uint4 hl) {
                                   L.xd[r] = xd;
                                   L.sf[r] = mmqh_sf(hl);
                                   mmqr_min_store(L.mb, r, hl);
                               });
        }))
        return;
    const wgrs_lane P = wgrs_lane_of(E.glu); /* this thread's rows and lanes */
    const int wg = P.wg, w4 = P.w4, t4 = P.t4, ra = P.ra, rb = P.rb;
    const uint32_t sb = cuda_saddr(S.act[0]);

    float acc[1][16][4], dd[16][4];
    wgmma_zero(&acc[0][0][0]);
    uint32_t fa[4][4], fb[4][4]; /* two commit groups' fragments (4 steps x 4 words) */
    uint4 qa[2], qb[2];          /* rows A and B's chunk t4 of the super-block */
    __half2 ma[2], ca[2], mb[2], cb[2]; /* their low / high nibbles' mmqh_w2 constants */

    auto expand = [&](int G, uint32_t (&f)[4][4]) {
        const bool hi = G >= 2;
        const uint4 &wa = qa[G & 1], &wb = qb[G & 1];
        if (MMQR_LEVER == 3) {
            const uint32_t v[4] = {wa.x, wa.y, wb.x, wb.y};
            for (int i = 0; i < 4; i++)
                for (int r = 0; r < 4; r++)
                    f[i][r] = v[r] ^ (uint32_t)i;
            return;
        }
        mmqr_frag(f[0], wa.x, wb.x, hi, ma[hi], ca[hi], mb[hi], cb[hi]);
        mmqr_frag(f[1], wa.y, wb.y, hi, ma[hi], ca[hi], mb[hi], cb[hi]);
        mmqr_frag(f[2], wa.z, wb.z, hi, ma[hi], ca[hi], mb[hi], cb[hi]);
        mmqr_frag(f[3], wa.w, wb.w, hi, ma[hi], ca[hi], mb[hi], cb[hi]);
    };
    /* group G of super-block s: its activation stage, four k16 steps as
     * one commit group (a super-block's first step without an accumulator);
     * B: the swizzled tile, step kk 32 bytes into its rows (SBO 1,024 B) */
    auto issue = [&](int32_t s, int G, const uint32_t (&f)[4][4]) {
        const int32_t i = 4 * s + G;
        cuda_mbar_wait(&S.bar.afull[i % MMQR_ASL], (uint32_t)(i / MMQR_ASL) & 1);
        wgmma_fence();
        const uint32_t ao = sb + (uint32_t)(i % MMQR_ASL) * MMQR_ATILE;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const uint64_t db = wgmma_desc(ao + 32 * kk, 16, 1024, 1);
            if (G == 0 && kk == 0)
                wgmma_rs_z(&dd[0][0], f[kk], db);
            else
                wgmma_rs(&dd[0][0], f[kk], db);
        }
        wgmma_commit();
    };
    auto release = [&](int32_t i) { cuda_mbar_arrive(&S.bar.aempty[i % MMQR_ASL]); };

    if (!TURNS && wg == 1)
        cuda_mbar_wait(&S.bar.lag, 0);
    for (int32_t s = 0; s < nbr; s++) {
        const int rs = s % MMQR_RSL;
        const mmqr_sslot &L = S.ss[rs];
        cuda_mbar_wait(&S.bar.sfull[rs], (uint32_t)(s / MMQR_RSL) & 1);
        const uint32_t *wa = L.rows[ra], *wb = L.rows[rb];
        qa[0] = *(const uint4 *)&wa[4 + 8 * t4];
        qa[1] = *(const uint4 *)&wa[8 + 8 * t4];
        qb[0] = *(const uint4 *)&wb[4 + 8 * t4];
        qb[1] = *(const uint4 *)&wb[8 + 8 * t4];
        mmqh_quarter_scales(wa, t4, ma[0], ca[0], ma[1], ca[1]);
        mmqh_quarter_scales(wb, t4, mb[0], cb[0], mb[1], cb[1]);
        if (w4 == 0)
            cuda_tr(s, wg ? CUDA_TR_LANDL : CUDA_TR_LAND0);
        expand(0, fa);
        if (TURNS && (wg == 1 || s > 0))
            cuda_mbar_wait(&S.bar.turn[wg], (uint32_t)(wg ? s : s - 1) & 1);
        issue(s, 0, fa);
        expand(1, fb);
        issue(s, 1, fb);
        wgmma_wait<1>(); /* group 0 read: its stage and fragments are free */
        wgmma_keep(fa);
        release(4 * s);
        expand(2, fa);
        issue(s, 2, fa);
        if (TURNS && MMQR_TURN_AT == 2)
            cuda_mbar_arrive(&S.bar.turn[wg ^ 1]);
        wgmma_wait<1>();
        wgmma_keep(fb);
        release(4 * s + 1);
        if (!TURNS && s == 0 && wg == 0)
            cuda_mbar_arrive(&S.bar.lag);
        expand(3, fb);
        issue(s, 3, fb);
        if (TURNS && MMQR_TURN_AT == 3)
            cuda_mbar_arrive(&S.bar.turn[wg ^ 1]);
        wgmma_wait<0>();
        wgmma_pin(&dd[0][0]);
        wgmma_keep(fa);
        wgmma_keep(fb);
        release(4 * s + 2);
        release(4 * s + 3);
        if (w4 == 0)
            cuda_tr(s, wg ? CUDA_TR_CHAIN : CUDA_TR_PARK0);
        /* the chain of the super-block: v1 = dd + 480 S into the chain,
         * then the min term v2 by one wgmma into dd, into the chain (the
         * heads from the raw blocks) */
        mmqk_head hd[2];
        mmqk_k45_head(wa, hd[0]);
        mmqk_k45_head(wb, hd[1]);
        if (MMQR_LEVER != 1)
            mmqr_chain_v1(acc[0], dd, L, hd, t4);
        if (MMQR_LEVER == 0 || MMQR_LEVER == 3) {
            uint32_t fm[1][4];
            mmqr_min_issue(dd, fm, wa, wb, L.mb, t4);
            mmqr_min_finish(acc[0], dd, fm, L.xd, hd, t4);
        }
        wgrs_slot_done(S.bar, rs, s, wg, w4);
    }
    wgrs_store(acc, P, m0, n0, n_w, n_rows, y, E);
#endif
}

/* mmqr's weight side and activation order on the host (tests/cuda/
 * test_cuda_host.c): for random Q4_K super-blocks (rows A and B) and
 * random int8 activations, every lane's fragments as the kernel expands
 * them (mmqh_quarter_scales, mmqr_frag), placed by wgmma's A layout (warp
 * rows g / g + 8, k 2 t4.. / 2 t4 + 8..), times the activations in
 * mmqh_x16p_kernel's order, summed exactly, against the natural order's
 * sum of (q sc - 480) x; and the min term's fragments (mmqr_min_pair,
 * mmqr_min_frag) times 8 activation rows' B rows (mmqr_min_brow) in
 * wgmma's layouts against sum_j m_j S_j. Returns the rows that differ
 * (the first into msg). No GPU needed: the expansion, the k order and the
 * layout assumption are what it checks. */
extern "C" int64_t cuda_mmqr_host_check(int n_blocks, char *msg, size_t cap)
{
    wgrs_check k = wgrs_check_start(0x6a09e667f3bcc909ull, msg, cap);
    /* the quantizer's f16 stores (cuda_x16p_pos) land where this order
     * reads each element (the 128 pairs of a super-block) */
    for (int lane = 0; lane < CUDA_WARP; lane++)
        for (int p = 0; p < 4; p++) {
            const int pos = cuda_x16p_pos(lane, p), e = 8 * lane + 2 * p;
            if (mmqh_x16p_elem(pos) != e || mmqh_x16p_elem(pos + 1) != e + 1)
                wgrs_miss(k, "x16p: element %d at position %d, which holds %d", e, pos, mmqh_x16p_elem(pos));
        }
    for (int b = 0; b < n_blocks; b++) {
        uint32_t blk[2][36]; /* rows A and B: d/dmin, 12 scale bytes, 128 nibble bytes */
        int8_t x[QK_K];
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 36; i++)
                blk[r][i] = wgrs_rnd(k);
        for (int i = 0; i < QK_K; i++)
            x[i] = (int8_t)(b % 5 == 0 ? (i & 1 ? 127 : -128) : (int)(wgrs_rnd(k) & 0xff));
        int64_t want[2] = {0, 0}, got[2] = {0, 0};
        for (int r = 0; r < 2; r++) {
            const uint8_t *q = (const uint8_t *)&blk[r][4], *scb = (const uint8_t *)&blk[r][1];
            for (int e = 0; e < QK_K; e++) {
                int sc, mn;
                cuda_k4_scale_min(scb, e / 32, &sc, &mn);
                const int c = e / 64, l = e % 64;
                const int v = l < 32 ? q[32 * c + l] & 15 : q[32 * c + l - 32] >> 4;
                want[r] += (int64_t)(v * sc - MMQH_CENTER) * x[e];
            }
        }
        for (int t4 = 0; t4 < 4; t4++) {
            __half2 ma[2], ca[2], mb[2], cb[2];
            mmqh_quarter_scales(blk[0], t4, ma[0], ca[0], ma[1], ca[1]);
            mmqh_quarter_scales(blk[1], t4, mb[0], cb[0], mb[1], cb[1]);
            for (int j = 0; j < 16; j++) {
                const bool hi = j >= 8;
                const int wi = j & 7;
                uint32_t f[4];
                mmqr_frag(f, blk[0][4 + 8 * t4 + wi], blk[1][4 + 8 * t4 + wi], hi, ma[hi], ca[hi], mb[hi], cb[hi]);
                for (int reg = 0; reg < 4; reg++)
                    for (int e = 0; e < 2; e++) {
                        __half_raw hr;
                        hr.x = (unsigned short)(f[reg] >> (16 * e));
                        const float a = __half2float(__half(hr));
                        const int k = 16 * j + 2 * t4 + 8 * (reg >> 1) + e; /* the A layout */
                        got[reg & 1] += (int64_t)a * x[mmqh_x16p_elem(k)];
                    }
            }
        }
        for (int r = 0; r < 2; r++)
            if (got[r] != want[r])
                wgrs_miss(k, "block %d row %c: %lld, natural order %lld", b, r ? 'B' : 'A', (long long)got[r],
                          (long long)want[r]);
        /* the min term: the rows' fragments (mmqr_min_frag) times the B
         * rows (mmqr_min_brow) of 8 activation rows, in wgmma's layouts,
         * against sum_j m_j S_j; column 0 takes this block's x, the others
         * random 32-sums (every third block the extremes) */
        for (int n = 0; n < 8; n++) {
            int sj[8];
            uint8_t hl[16];
            for (int j = 0; j < 8; j++) {
                int sum = 0;
                if (n == 0)
                    for (int e = 0; e < 32; e++)
                        sum += x[32 * j + e];
                else
                    sum = b % 3 == 0 ? ((wgrs_rnd(k) & 1) ? 4064 : -4096) : (int)(wgrs_rnd(k) % 8161) - 4096;
                sj[j] = sum;
                hl[j] = (uint8_t)(int8_t)cuda_q8k_hi(sum);
                hl[8 + j] = (uint8_t)(int8_t)cuda_q8k_lo(sum);
            }
            uint4 hv;
            memcpy(&hv, hl, 16);
            uint32_t bw[8];
            mmqr_min_brow(hv, bw);
            int64_t mw[2] = {0, 0}, mg[2] = {0, 0};
            for (int r = 0; r < 2; r++)
                for (int j = 0; j < 8; j++) {
                    int sc, mn;
                    cuda_k4_scale_min((const uint8_t *)&blk[r][1], j, &sc, &mn);
                    mw[r] += (int64_t)mn * sj[j];
                }
            for (int t4 = 0; t4 < 4; t4++) {
                uint32_t f[4];
                mmqr_min_frag(mmqr_min_pair(blk[0], t4), mmqr_min_pair(blk[1], t4), f);
                for (int reg = 0; reg < 4; reg++)
                    for (int e = 0; e < 2; e++) {
                        const int kk = 2 * t4 + 8 * (reg >> 1) + e; /* the A layout */
                        __half_raw ha, hb;
                        ha.x = (unsigned short)(f[reg] >> (16 * e));
                        hb.x = (unsigned short)(bw[kk >> 1] >> (16 * (kk & 1)));
                        const double p = (double)__half2float(__half(ha)) * (double)__half2float(__half(hb));
                        mg[reg & 1] += (int64_t)p;
                        if (p != (double)(int64_t)p)
                            mg[reg & 1] += 1 << 30; /* not an integer: a miss */
                    }
            }
            for (int r = 0; r < 2; r++)
                if (mg[r] != mw[r])
                    wgrs_miss(k, "block %d row %c column %d: min term %lld, want %lld", b, r ? 'B' : 'A', n,
                              (long long)mg[r], (long long)mw[r]);
        }
    }
    return k.bad;
}

#if defined(INFERD_MMQW)
/* mmqr's own checks: its tensor maps (mmqw's: the x16 in this kernel's k
 * order) and room for its form (3 turns, the default; 2 without, A/B
 * runs); 0, INF_EUNSUPPORTED or -1 as cuda_mmqr returns them.
 * cuda_mmqr and cuda_mmqr_takes both ask it. */
static int mmqr_maps(struct cuda_ctx *c, const struct backend_weight *w, const __half *x16, int32_t n_rows,
                     CUtensorMap *wm, CUtensorMap *xm)
{
    if (cuda_mmqh_tmaps(c, w, x16, n_rows, wm, xm))
        return INF_EUNSUPPORTED;
    return (c->mmqw == 3 ? mmq_occupancy_once<mmqr_kernel<true>>(mmqr_smem_bytes, WGRS_THREADS)
                         : mmq_occupancy_once<mmqr_kernel<false>>(mmqr_smem_bytes, WGRS_THREADS)) == 0
               ? -1
               : 0;
}
#endif

int cuda_mmqr(struct cuda_ctx *c, const struct backend_weight *w, cuda_q8k X, __half *x16, float *y,
              int32_t n_rows)
{
#if defined(INFERD_MMQW)
    CUtensorMap wm, xm;
    const int rc = mmqr_maps(c, w, x16, n_rows, &wm, &xm);
    if (rc)
        return rc;
    auto *k = c->mmqw == 3 ? mmqr_kernel<true> : mmqr_kernel<false>;
    if (!c->x16p_ready || x16 != (__half *)c->x16) {
        /* the conversion reads the int8 plane; mul_mat.cu leaves it out
         * only where cuda_mmqr_takes said this product reads x16 as the
         * quantizer wrote it, so this is a bug, never a wrong product */
        if (c->xq_no_qs) {
            c->err = INF_EINTERNAL;
            snprintf(c->err_msg, sizeof(c->err_msg), "mmqr: the activations' int8 plane was not written");
            return 0;
        }
        mmqh_x16(c, X, n_rows, w->ne0, x16, true);
    }
    const dim3 grid(cuda_blocks(w->ne1, MMQH_BM), cuda_blocks(n_rows, MMQH_BN));
    cuda_launch(c, k, grid, WGRS_THREADS, mmqr_smem_bytes, wm, xm, X, (int32_t)(w->ne0 / QK_K), (int32_t)w->ne1, y,
                n_rows, c->epi);
    return 0;
#else
    (void)c, (void)w, (void)X, (void)x16, (void)y, (void)n_rows;
    return INF_EUNSUPPORTED;
#endif
}

int cuda_mmqr_takes(struct cuda_ctx *c, const struct backend_weight *w, int32_t n_rows)
{
#if defined(INFERD_MMQW)
    /* mmqh_launch's checks before it calls cuda_mmqr, then cuda_mmqr's */
    CUtensorMap wm, xm;
    return c->mmqw >= 2 && w->type == QT_Q4_K && mmqh_fits(c, w, n_rows) &&
           mmqr_maps(c, w, (const __half *)c->x16, n_rows, &wm, &xm) == 0;
#else
    (void)c, (void)w, (void)n_rows;
    return 0;
#endif
}
