/* cuda/mmq6w — Q6_K batches on Hopper's int8 wgmma with the CPU's bits
 * (sm_90a; by default from 512 rows, cuda/knobs.cu): each consumer thread turns its
 * weights into two u8 planes in registers and hands them to
 * `wgmma.mma_async m64n128k32 .s32.u8.s8`; the activations (the quantizer's
 * int8 qs, unchanged) come from shared memory by descriptor.
 *
 * Why (bench/RESULTS.md 2026-12-05 sessions 41 and 42): #11's q6_K 4096
 * x 14336 x 512 stood at 305-309 us (mmqk; target 140, llama.cpp 427);
 * this form measured 149.8 us on the H100. mmqk pays an IMAD per int32 result
 * for each 16-element scale (Q6_K's scales are per 16: twice Q4_K's rate),
 * and an exact F16 form would need two products a step (q x sc reaches
 * 4,096, past f16's exact odd integers). In int8 the scale folds into the
 * weights as two planes: A' = sc (q - 32) in [-4064, 4096] is 32 P1 + P2
 * with P1 = floor((A' - 1) / 32) in [-128, 127] and P2 in [1, 32]; stored
 * as u8 (P1 + 128, P2 - 1), one accumulator takes the first plane, is
 * multiplied by 32 less 4095 S once the plane's wgmma are done, and takes
 * the second: since 32 sum (P1 + 128) x + sum (P2 - 1) x = v1 + 4095 S (S
 * the activation's sum over the super-block, from its 32-sums), D = v1,
 * the exact int mmqk forms (every partial sum below 2^31). Two int8 planes cost the
 * tensor time of one F16 product (int8 runs at twice the rate). The chain
 * is mmqk's Q6_K chain: p1 = d x xd, acc = fma(p1, (float) v1, acc).
 *
 * The weights: the expanded copy Q6_K matrices get at load (cuda/
 * mmq_q6_k.cu: 288 bytes a super-block, the int8 q - 32 in k order, 16
 * scales, the float d; 16-byte aligned rows, so one tensor copy moves a
 * super-block of 128 rows) in the natural k order, so the activations
 * need no reordering. A thread's four weights of a fragment word share a
 * scale; the planes of a word: one LOP3 to q = (q - 32) + 32, two PRMT to
 * 16-bit lanes, per pair of lanes one IMAD (q sc + 4095 - 32 sc: the
 * lanes A' + 4095 in [31, 8191], no borrow between them), then a shift a
 * pair and one PRMT for P1 + 128, one PRMT and one AND for P2 - 1
 * (mmq6w_planes; cuda_mmq6w_host_check runs it on every value and scale
 * and on random super-blocks, tests/cuda/test_cuda_host.c).
 *
 * Shape: as cuda/mmqr.cu (2 consumer warpgroups of 64 weight rows x 128
 * activation rows, two feed warps, setmaxnreg 232 / 40), the super-block in
 * two halves of activations (tensor copies of 128 rows x 128 bytes,
 * 128-byte swizzled) and four slots of 128 expanded rows (36,864 bytes)
 * with the activations' d and 4095 S. A warpgroup runs the first plane's
 * 8 wgmma (two commit groups: steps 0-3, with steps 4-7 expanded under
 * them, then 4-7), shifts, runs the second plane with the next super-
 * block's steps 0-3 expanded under it, then the chain: each expansion
 * under its own products, in two register banks whose layout alternates
 * (mmq6w_kernel; with the feed's early activation loads and the fourth
 * slot, 0.955-0.974x the time of expanding a whole super-block first on
 * the H100's large shapes, bench/RESULTS.md session 43). Where it declines
 * (no expanded copy, not compute capability 9.0, a build without gpu_arch
 * 90), mmqk serves.
 *
 * mmq6w_kernel<EXP>: <false> the above; <true> (the design card's EXP:
 * the weights expanded at load) reads both planes of each weight made
 * once at registration (cuda/q6planes.cu) by tensor copy and descriptor,
 * so it has no expansion, with the activation blocks along the grid's x
 * so that the blocks sharing a weight tile run together (session 53, H100:
 * 0.87-0.92x of <false> at 512 rows, the same bits; session 54: 0.89-0.95x
 * at 256, and each plane into its own accumulator set with one wait a
 * super-block, 0.96-0.98x again; the launcher takes it from c->q6p_min
 * rows where the weight has planes). */
#include <type_traits>

#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqh_impl.cuh"
#include "engine/cuda/mmq6w_planes.cuh"
#include "engine/cuda/mmqp.cuh"
#include "engine/cuda/trace.cuh"
#include "engine/cuda/wgrs.cuh"

/* MMQ6W_LEVER: a lever sweep's probe builds of bench/mmq_trace only (the
 * seeds' method, as MMQR_LEVER in cuda/mmqr.cu; wrong results, timing
 * only): 1 no chain (ptxas then drops the wgmma whose sums nothing reads:
 * session 54's marks, so it times the feed, not the products), 2 no first
 * drain (the planes run as one series into the accumulators: no wait and
 * no shift between them), 3 no plane expansion (the raw words as the
 * planes); 2 and 3 are the expanded form's. Session 51's probe found int8
 * m64n128k32 with A from registers at the int8 rate (72 cycles a step
 * alone, 64 with two warpgroups) and mmq6w at ~120: the sweep says which
 * of its parts holds the rest. 0 everywhere else. */
#ifndef MMQ6W_LEVER
#define MMQ6W_LEVER 0
#endif

#define MMQ6W_WROW (MMQ_Q6X_BYTES / 4)       /* words of an expanded super-block */

struct mmq6w_sslot {
    uint32_t rows[MMQH_BM][MMQ6W_WROW]; /* 128 expanded rows (a tensor copy) */
    float xd[MMQH_BN];               /* the activations' d */
    int s4095[MMQH_BN];              /* 4095 S */
};
struct mmq6w_smem {
    uint8_t act[MMQ6W_ASL][MMQ6W_ATILE]; /* first: 1,024-byte aligned tiles */
    mmq6w_sslot ss[MMQ6W_RSL];
    wgrs_bars<MMQ6W_ASL, MMQ6W_RSL> bar;
};
static_assert(MMQH_BM == WGRS_BM && MMQH_BN == WGRS_BN, "the block wgrs.cuh feeds");
static_assert(sizeof(mmq6w_sslot) % 128 == 0, "mmq6w: the rows' tensor copies land 128-byte aligned");

/* EXP: the planes made at load (cuda/q6planes.cu). A plane slot holds one
 * plane of a super-block for the block's 128 rows as two tensor copies of
 * 128 rows x 128 bytes (k 0-127, 128-255), 128-byte swizzled as the
 * activations' halves are, so A comes by descriptor like B; four slots
 * (two super-blocks) are a plane ahead of what the expanded copy's four
 * super-block slots are, in 128 KB. The side slot: the activations' d and
 * 4095 S and the weight rows' d (the chain's), from the row warp. */
struct mmq6p_side {
    float xd[MMQH_BN];
    int s4095[MMQH_BN];
    float wd[MMQH_BM];
};
typedef mmqp_smem<mmq6p_side> mmq6p_smem;
#if defined(INFERD_MMQW) /* the launcher's (builds with gpu_arch 90) */
static constexpr size_t mmq6w_smem_bytes = sizeof(mmq6w_smem) + 1024;
static constexpr size_t mmq6p_smem_bytes = sizeof(mmq6p_smem) + 1024;
#endif

#if WGMMA_DEVICE

/* EXP's feed. fw 0, the copy warp: for each super-block s its first plane
 * (once both warpgroups are done with the plane four slots back), its two
 * activation halves (wgrs_feed_act), its second plane. fw 1, the row warp:
 * the activation rows' d and 4095 S and the weight rows' d (the expanded
 * copy's float at byte 272 of each super-block; 0 past the weight) into the
 * side slot, loaded before the slot's wait, then its 32 arrivals and lane
 * 0's one more (the count wgrs_init gives sfull: the copy warp's arrival in
 * the expanded copy's form). */
static __device__ __forceinline__ void mmq6p_feed(mmq6p_smem &S, int fw, int lane, const CUtensorMap *pmap,
                                                  const CUtensorMap *xmap, const cuda_q8k &X, const uint8_t *aux,
                                                  int32_t nbr, int32_t n_w, int32_t n_rows, int32_t m0, int32_t n0)
{
    constexpr int NR = WGRS_BN / CUDA_WARP;
    for (int32_t s = 0; s < nbr; s++) {
        const int rs = s % MMQ6W_RSL;
        if (fw == 0) {
            mmqp_feed_copy(S, lane, pmap, xmap, nbr, m0, n0, s);
            continue;
        }
        float xd[NR], wd[NR];
        uint4 hl[NR];
        wgrs_feed_xrows(X, nbr, n_rows, n0, s, lane, [&](int r, float d, uint4 h) {
            xd[r / CUDA_WARP] = d;
            hl[r / CUDA_WARP] = h;
        });
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const int32_t r = m0 + lane + CUDA_WARP * i;
            wd[i] = r < n_w ? __ldg((const float *)(aux + ((size_t)r * (size_t)nbr + (size_t)s) * MMQ_Q6X_BYTES + 272))
                            : 0.0f;
        }
        if (s >= MMQ6W_RSL)
            cuda_mbar_wait(&S.bar.sempty[rs], (uint32_t)(s / MMQ6W_RSL - 1) & 1);
        mmq6p_side &L = S.ss[rs];
#pragma unroll
        for (int i = 0; i < NR; i++) {
            const int r = lane + CUDA_WARP * i;
            L.xd[r] = xd[i];
            L.s4095[r] = 4095 * mmqh_ssum(hl[i]);
            L.wd[r] = wd[i];
        }
        cuda_mbar_arrive(&S.bar.sfull[rs]);
        if (lane == 0) {
            cuda_mbar_arrive(&S.bar.sfull[rs]);
            cuda_tr(s, CUDA_TR_FEED);
        }
    }
}


/* the first plane's sums times 32 less 4095 S: before the second plane's
 * products into the same set (<false>), or before adding its set (<true>);
 * D = v1 at the end (one IMAD an output instead of a shift and a
 * subtraction in the chain; int32 sums, so the same integer) */
static __device__ __forceinline__ void mmq6w_shift(int (&dd)[16][4], const int *s4095, int t4)
{
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int2 sv = *(const int2 *)&s4095[8 * j + 2 * t4];
#pragma unroll
        for (int k = 0; k < 4; k++)
            dd[j][k] = dd[j][k] * 32 - (k & 1 ? sv.y : sv.x);
    }
}

/* the chain: D = v1, then mmqk's Q6_K chain (no min term: mmqp_chain_v1);
 * da, db the weight rows A and B's d; none in the lever's no-chain build */
static __device__ __forceinline__ void mmq6w_chain(float (&acc)[16][4], const int (&dd)[16][4], float da, float db,
                                                   const float *xds, int t4)
{
    if (MMQ6W_LEVER != 1)
        mmqp_chain_v1(acc, dd, da, db, xds, t4);
}
#endif

/* scale k (0..15) of the 16 int8 scales, sign-extended, from their word
 * k / 4 (w; the kernel loads that word alone) */
static __host__ __device__ __forceinline__ int mmq6w_scale_w(uint32_t w, int k)
{
    return (int)(int8_t)(uint8_t)(w >> (8 * (k & 3)));
}
/* the same from all 16 in s (the host check's form: its words picked as
 * the kernel's loads pick them, word k / 4 of the row's scale words) */
static __host__ __device__ __forceinline__ int mmq6w_scale(const uint4 &s, int k)
{
    return mmq6w_scale_w(k < 4 ? s.x : k < 8 ? s.y : k < 12 ? s.z : s.w, k);
}


/* EXP (the weights' planes made at load, cuda/q6planes.cu): wmap maps
 * the planes (cuda_q6p_find's rows: plane 1 then plane 2, seen as halves)
 * and aux is the expanded copy, whose float d the row warp reads; else
 * wmap maps the expanded copy and aux is unused. */
template <bool EXP>
static __global__ void __launch_bounds__(WGRS_THREADS, 1)
mmq6w_kernel(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap xmap, cuda_q8k X,
             int32_t nbr, int32_t n_w, float *__restrict__ y, int32_t n_rows, struct cuda_epi E,
             const uint8_t *__restrict__ aux, int32_t turns)
{
#if WGMMA_DEVICE
    typedef typename std::conditional<EXP, mmq6p_smem, mmq6w_smem>::type SM;
    extern __shared__ __align__(1024) uint8_t mmq6w_smem_raw[];
    SM &S = wgmma_smem<SM>(mmq6w_smem_raw);
    /* EXP: the grid's x the activation blocks, so the blocks that share
     * a weight tile run together and read it once from DRAM (its planes
     * are 2 bytes a weight: on the 7B's ffn-up, 4.5 waves of row blocks,
     * each wave's tiles read again for every activation block measured
     * 1.41x the expanded form; session 53) */
    const int32_t m0 = (EXP ? blockIdx.y : blockIdx.x) * MMQH_BM, n0 = (EXP ? blockIdx.x : blockIdx.y) * MMQH_BN;
    if constexpr (EXP)
        mmqp_init(S);
    wgrs_start(S.bar);
    /* the feed: the expanded rows (EXP: the planes), two half stages of
     * int8 activations (seen as halves by cuda_tmap_f16_sw128's map: 64 =
     * 128 bytes) */
    if (!wgrs_roles([&](int fw) {
            if constexpr (EXP)
                mmq6p_feed(S, fw, threadIdx.x % CUDA_WARP, &wmap, &xmap, X, aux, nbr, n_w, n_rows, m0, n0);
            else
                wgrs_feed<2, false>(S, fw, MMQ_Q6X_BYTES, threadIdx.x % CUDA_WARP, &wmap, &xmap, X, nbr, n_rows,
                                    m0, n0, E.glu, [](mmq6w_sslot &L, int r, float xd, uint4 hl) {
                                        L.xd[r] = xd;
                                        L.s4095[r] = 4095 * mmqh_ssum(hl);
                                    });
        }))
        return;
    const wgrs_lane P = wgrs_lane_of(E.glu); /* this thread's rows and lanes */
    const int wg = P.wg, w4 = P.w4, t4 = P.t4, ra = P.ra, rb = P.rb;
    const uint32_t sb = cuda_saddr(S.act[0]);

    float acc[1][16][4];
    int dd[16][4];
    wgmma_zero(&acc[0][0][0]);
    if constexpr (EXP) {
        /* super-block s: each plane's 8 steps by descriptors, A from the
         * plane slot (this warpgroup's 64 rows), B the activations, plane
         * 1 into dd and plane 2 into de (the 64 registers the expansion
         * freed), both issued at once with one wait; then v1 = 32 D1 -
         * 4095 S + D2 (mmq6w_shift and an add: the same int32 integer) and
         * the chain. No expansion: the products are the warpgroup's only
         * tensor work, and its integer work and chain run under the other
         * warpgroup's products (the lag). Session 54 (H100): 0.96-0.98x
         * the one set with the drain and shift between the planes (the
         * lever without them: 0.86x; shifting the first set while the
         * second plane ran: 1.00x). */
        /* turns (c->q6p_turns, the default; INFERD_Q6P_TURNS=0 without;
         * mmqp_planes): session 55 (H100, bench --op): 0.95-0.97x without
         * turns on 4096 x 14336 and the 7B's ffn-down at 512 and 2048 rows,
         * 1.00 on the 7B's ffn-up; the turn passed once the first plane's
         * products were done measured the same, once both were done 1.00-
         * 1.05x (the pipe idle while the other warpgroup issues). */
        mmqp_lag(S, wg, turns);
        int de[16][4];
#pragma unroll 1
        for (int32_t s = 0; s < nbr; s++) {
            const int rs = s % MMQ6W_RSL;
            const mmq6p_side &Ls = S.ss[rs];
            mmqp_planes(S, dd, de, s, wg, w4, sb, turns);
            mmq6w_shift(dd, Ls.s4095, t4);
#pragma unroll
            for (int j = 0; j < 16; j++)
#pragma unroll
                for (int k = 0; k < 4; k++)
                    dd[j][k] += de[j][k];
            mmq6w_chain(acc[0], dd, Ls.wd[ra], Ls.wd[rb], Ls.xd, t4);
            wgrs_slot_done(S.bar, rs, s, wg, w4);
        }
    } else {
    /* Two banks of 8 fragment sets (a super-block is 8 k32 steps x 2 planes
     * = 16 sets). Layout 0: step j's first plane in FX[j], its second in
     * FY[j]; layout 1: steps 0-3 in FX (first plane FX[j], second FX[4 + j]),
     * steps 4-7 in FY (FY[j - 4], FY[j]). Super-block s + 1's steps 0-3 go
     * where s's first plane was (free once it is done, while the second
     * plane runs), its steps 4-7 where s's second plane was: the layouts
     * alternate, so the loop runs two super-blocks a turn. */
    uint32_t FX[8][4], FY[8][4];
    auto set = [&](auto L, int p, int j) -> uint32_t (&)[4] {
        if (!decltype(L)::value)
            return p ? FY[j] : FX[j];
        return j < 4 ? (p ? FX[4 + j] : FX[j]) : (p ? FY[j] : FY[j - 4]);
    };
    /* steps j0..j1 - 1 of super-block s, both planes (slot s landed):
     * rows A, B's words at k 32 j + 4 t4 (scale 2 j) and + 16 (scale
     * 2 j + 1); the words are loaded here, below the last wgmma's memory
     * clobber, and the sets are used at the end (an asm reads them), so
     * the expansion stays where it is written: under the products */
    auto expand = [&](auto L, int32_t s, int j0, int j1) {
        const mmq6w_sslot &Ls = S.ss[s % MMQ6W_RSL];
        const uint32_t *wa = Ls.rows[ra], *wb = Ls.rows[rb];
#pragma unroll
        for (int j = j0; j < j1; j++) {
            uint32_t(&u)[4] = set(L, 0, j);
            uint32_t(&v)[4] = set(L, 1, j);
            /* the scale word of step j (scales 2 j, 2 j + 1) of each row, as
             * loaded: a whole 16-byte scale load held through the
             * expansion spilled */
            const uint32_t sa = wa[64 + j / 2], sbw = wb[64 + j / 2];
            if (MMQ6W_LEVER == 3) {
                u[0] = v[0] = wa[8 * j + t4], u[1] = v[1] = wb[8 * j + t4];
                u[2] = v[2] = wa[8 * j + 4 + t4] ^ sa, u[3] = v[3] = wb[8 * j + 4 + t4] ^ sbw;
            } else {
                mmq6w_planes(wa[8 * j + t4], mmq6w_scale_w(sa, 2 * j), u[0], v[0]);
                mmq6w_planes(wb[8 * j + t4], mmq6w_scale_w(sbw, 2 * j), u[1], v[1]);
                mmq6w_planes(wa[8 * j + 4 + t4], mmq6w_scale_w(sa, 2 * j + 1), u[2], v[2]);
                mmq6w_planes(wb[8 * j + 4 + t4], mmq6w_scale_w(sbw, 2 * j + 1), u[3], v[3]);
            }
            asm volatile("" ::"r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3]), "r"(v[0]), "r"(v[1]), "r"(v[2]),
                         "r"(v[3])
                         : "memory");
        }
    };
    /* plane p's steps j0..j1 - 1 as one commit group: step j reads half j /
     * 4 of the super-block's activations, 32 bytes a step into its
     * swizzled rows (SBO 1,024 B) */
    auto plane = [&](auto L, int32_t s, int p, bool first, int j0, int j1) {
        wgmma_fence();
#pragma unroll
        for (int j = j0; j < j1; j++) {
            const uint32_t ao = sb + (uint32_t)((2 * s + j / 4) % MMQ6W_ASL) * MMQ6W_ATILE;
            const uint64_t db = wgmma_desc(ao + 32 * (j & 3), 16, 1024, 1);
            if (first && j == 0)
                wgmma_u8s8_z(&dd[0][0], set(L, p, j), db);
            else
                wgmma_u8s8(&dd[0][0], set(L, p, j), db);
        }
        wgmma_commit();
    };
    /* super-block s under layout L (its steps 0-3 expanded): the first
     * plane's steps 0-3, steps 4-7 expanded under them, the rest of the
     * plane; the shift; the second plane, with s + 1's steps 0-3 expanded
     * under it (more: s + 1 exists); the chain */
    auto step = [&](auto L, int32_t s, bool more) {
        const int rs = s % MMQ6W_RSL;
        const mmq6w_sslot &Ls = S.ss[rs];
        mmq6w_acts(S.bar, s);
        plane(L, s, 0, true, 0, 4);
        expand(L, s, 4, 8);
        plane(L, s, 0, false, 4, 8);
        if (MMQ6W_LEVER != 2) {
            wgmma_wait<0>();
            wgmma_pin_i(&dd[0][0]);
            wgmma_keep(FX);
            wgmma_keep(FY);
            mmq6w_shift(dd, Ls.s4095, t4);
        }
        if (s == 0 && wg == 0)
            cuda_mbar_arrive(&S.bar.lag);
        plane(L, s, 1, false, 0, 8);
        if (more) {
            mmq6w_land(S.bar, s + 1, wg, w4);
            expand(std::integral_constant<bool, !decltype(L)::value>{}, s + 1, 0, 4);
        }
        wgmma_wait<0>();
        wgmma_pin_i(&dd[0][0]);
        wgmma_keep(FX);
        wgmma_keep(FY);
        mmq6w_retire(S.bar, s, wg, w4);
        mmq6w_chain(acc[0], dd, __uint_as_float(Ls.rows[ra][68]), __uint_as_float(Ls.rows[rb][68]), Ls.xd, t4);
        wgrs_slot_done(S.bar, rs, s, wg, w4);
    };

    if (wg == 1)
        cuda_mbar_wait(&S.bar.lag, 0);
    mmq6w_land(S.bar, 0, wg, w4);
    expand(std::false_type{}, 0, 0, 4);
    int32_t s = 0;
    for (; s + 1 < nbr; s += 2) {
        step(std::false_type{}, s, true);
        step(std::true_type{}, s + 1, s + 2 < nbr);
    }
    if (s < nbr)
        step(std::false_type{}, s, false);
    }
    wgrs_store(acc, P, m0, n0, n_w, n_rows, y, E);
#endif
}

/* mmq6w's planes on the host (tests/cuda/test_cuda_host.c): (1) every
 * q - 32 in [-32, 31] at each byte of a word, with every scale in [-128,
 * 127]: 32 (P1 + 128 - 128) + (P2 - 1 + 1) = sc (q - 32); (2) n_blocks
 * random super-blocks (the expanded copy's int8 values and scales, int8
 * activations, the extremes among them): the fragment words as the kernel
 * picks them (words 8 j + t4 and 8 j + 4 + t4, scales 2 j and 2 j + 1),
 * 32 x the first plane's sum + the second's, less 4095 S, against sum sc
 * (q - 32) x. Returns what differs (the first into msg). No GPU needed. */
extern "C" int64_t cuda_mmq6w_host_check(int n_blocks, char *msg, size_t cap)
{
    wgrs_check k = wgrs_check_start(0xbb67ae8584caa73bull, msg, cap);
    for (int sc = -128; sc <= 127; sc++)
        for (int v = -32; v <= 31; v++)
            for (int pos = 0; pos < 4; pos++) {
                uint32_t w = wgrs_rnd(k) & 0x3f3f3f3fu; /* other bytes: any 6-bit two's complement value */
                w = (w & ~(0xffu << (8 * pos))) | ((uint32_t)(uint8_t)(int8_t)v << (8 * pos));
                uint32_t p1, p2;
                mmq6w_planes(w, sc, p1, p2);
                const int a = (int)((p1 >> (8 * pos)) & 0xff) - 128, b = (int)((p2 >> (8 * pos)) & 0xff) + 1;
                if (32 * a + b != sc * v || b < 1 || b > 32)
                    wgrs_miss(k, "sc %d, q - 32 = %d at byte %d: planes %d, %d", sc, v, pos, a, b);
            }
    for (int blk = 0; blk < n_blocks; blk++) {
        int8_t q[QK_K], x[QK_K];
        uint32_t words[QK_K / 4];
        int8_t scl[16];
        uint4 s4;
        const bool ext = blk % 4 == 0; /* the extremes: -32 x -128 x -128 */
        for (int i = 0; i < QK_K; i++) {
            q[i] = (int8_t)(ext ? -32 : (int)(wgrs_rnd(k) % 64) - 32);
            x[i] = (int8_t)(ext ? -128 : (int)(wgrs_rnd(k) & 0xff));
        }
        for (int i = 0; i < 16; i++)
            scl[i] = (int8_t)(ext ? -128 : (int)(wgrs_rnd(k) & 0xff));
        memcpy(words, q, sizeof(words));
        memcpy(&s4, scl, sizeof(s4));
        int64_t want = 0, s = 0, d1 = 0, d2 = 0;
        for (int i = 0; i < QK_K; i++) {
            want += (int64_t)scl[i / 16] * q[i] * x[i];
            s += x[i];
        }
        for (int t4 = 0; t4 < 4; t4++)
            for (int j = 0; j < 8; j++)
                for (int h = 0; h < 2; h++) {
                    const int wi = 8 * j + 4 * h + t4; /* k 32 j + 16 h + 4 t4.. */
                    uint32_t p1, p2;
                    mmq6w_planes(words[wi], mmq6w_scale(s4, 2 * j + h), p1, p2);
                    for (int e = 0; e < 4; e++) {
                        d1 += (int64_t)((p1 >> (8 * e)) & 0xff) * x[4 * wi + e];
                        d2 += (int64_t)((p2 >> (8 * e)) & 0xff) * x[4 * wi + e];
                    }
                }
        const int64_t d = 32 * d1 + d2;
        if (d - 4095 * s != want || d > INT32_MAX || d < INT32_MIN)
            wgrs_miss(k, "block %d: D %lld - 4095 S %lld, want %lld", blk, (long long)d, (long long)(4095 * s),
                      (long long)want);
    }
    return k.bad;
}

int cuda_mmq6w(struct cuda_ctx *c, const struct backend_weight *w, const void *xq, float *y, int32_t n_rows, int exp)
{
#if defined(INFERD_MMQW)
    const int64_t nbr = w->ne0 / QK_K;
    if (c->sm != 90 || w->type != QT_Q6_K || !w->aux || w->ne0 % QK_K || nbr > INT32_MAX / 2)
        return INF_EUNSUPPORTED;
    /* the planes made at load, where w has them, from c->q6p_min rows
     * (CUDA_Q6P_MIN: at 128 rows, one activation block, the planes' 2
     * bytes a weight from DRAM cost more than the expansion saves), and
     * the product is not under the SwiGLU epilogue (its gate and up rows
     * interleave in the tile: the expanded form's row map, which one
     * tensor copy of plane rows does not make) */
    const bool want = exp == 1 || (exp == -1 && n_rows >= c->q6p_min);
    const void *pl = want && !c->epi.glu ? cuda_q6p_find(c, w) : NULL;
    if (exp == 1 && !pl)
        return INF_EUNSUPPORTED;
    const cuda_q8k X = cuda_q8k_planes(xq, (int64_t)n_rows * nbr);
    /* the maps: the expanded rows (288-byte boxes of 128 rows, or of 64
     * under the SwiGLU epilogue) or the planes (rows of 2 ne0 bytes seen as
     * ne0 halves, boxes of 128 bytes x 128 rows, swizzled), and the int8
     * activations seen as halves (boxes of 64 halves = 128 bytes x 128
     * rows, swizzled) */
    CUtensorMap wm, xm;
    memset(&wm, 0, sizeof(wm));
    memset(&xm, 0, sizeof(xm));
    if ((pl ? cuda_tmap_f16_sw128(&wm, pl, w->ne0, w->ne1, MMQH_BM)
            : cuda_tmap_rows(&wm, w->aux, (size_t)nbr * MMQ_Q6X_BYTES, w->ne1, MMQ_Q6X_BYTES,
                             c->epi.glu ? 64 : MMQH_BM)) ||
        cuda_tmap_f16_sw128(&xm, X.qs, w->ne0 / 2, n_rows, MMQH_BN))
        return INF_EUNSUPPORTED;
    const dim3 grid(cuda_blocks(w->ne1, MMQH_BM), cuda_blocks(n_rows, MMQH_BN));
    if (pl) {
        const dim3 gx(grid.y, grid.x); /* the kernel's EXP raster: activation blocks along x */
        if (mmq_occupancy_once<mmq6w_kernel<true>>(mmq6p_smem_bytes, WGRS_THREADS) == 0)
            return -1;
        cuda_launch(c, mmq6w_kernel<true>, gx, WGRS_THREADS, mmq6p_smem_bytes, wm, xm, X, (int32_t)nbr,
                    (int32_t)w->ne1, y, n_rows, c->epi, (const uint8_t *)w->aux, (int32_t)c->q6p_turns);
        return 0;
    }
    if (mmq_occupancy_once<mmq6w_kernel<false>>(mmq6w_smem_bytes, WGRS_THREADS) == 0)
        return -1;
    cuda_launch(c, mmq6w_kernel<false>, grid, WGRS_THREADS, mmq6w_smem_bytes, wm, xm, X, (int32_t)nbr,
                (int32_t)w->ne1, y, n_rows, c->epi, (const uint8_t *)NULL, (int32_t)0);
    return 0;
#else
    (void)c, (void)w, (void)xq, (void)y, (void)n_rows, (void)exp;
    return INF_EUNSUPPORTED;
#endif
}
