/* cuda/wgrs — the frame the register-A wgmma kernels share (cuda/mmqr.cu:
 * Q4_K on F16, cuda/mmq6w.cu: Q6_K on int8): two consumer warpgroups that
 * expand their own A fragments and run the chain, and a third warpgroup
 * whose first two warps feed; their barriers, the role split with its
 * setmaxnreg, the feed's tensor copies, the weight rows a warp expands.
 *
 * Registers: 12 warps leave any launch bound 168 a thread (each scheduler
 * holds 3 of them: 16,384 / 3 / 32); the consumers need the accumulator
 * (64), the chain's sums (64) and fragments, so the feed warpgroup gives
 * registers back: 2 x 232 + 40 = 504 a scheduler lane, the 3 x 168 the
 * launch gave. A total above that never completes setmaxnreg.inc (240 /
 * 32 = 512, the physical file, hung every kernel of this frame: session
 * 44 call 4). */
#ifndef INFERD_CUDA_WGRS_CUH
#define INFERD_CUDA_WGRS_CUH

#include <stdarg.h>
#include <stdio.h>

#include "engine/cuda/mma.cuh"
#include "engine/cuda/qtypes.cuh"
#include "engine/cuda/tiles.cuh"
#include "engine/cuda/trace.cuh"
#include "engine/cuda/wgmma.cuh"

#define WGRS_BM 128                   /* weight rows a block: 2 warpgroups x 64 */
#define WGRS_BN 128                   /* activation rows a block (the wgmma's N) */
#define WGRS_CONS 256                 /* consumer threads: 2 warpgroups */
#define WGRS_THREADS (WGRS_CONS + 128) /* + a warpgroup whose first two warps feed */
#define WGRS_CONS_REGS 232
#define WGRS_FEED_REGS 40
static_assert(2 * WGRS_CONS_REGS + WGRS_FEED_REGS <= 3 * 168, "setmaxnreg: within the launch's 168 a thread");

/* The barriers: afull / aempty of ASL activation stages (the feed's
 * arrival with a tensor copy's bytes; every consumer's release), sfull /
 * sempty of RSL super-block slots (the row warp's 32 arrivals after its
 * stores and the copy warp's one telling the copies' bytes; every
 * consumer after its chain), lag (warpgroup 0's 128 threads: warpgroup 1
 * starts a little behind) and turn[w] (the other warpgroup's 128
 * threads: warpgroup w may issue its products; mmqr's turns form).
 * Session 42 tried turns for both kernels: 3.5% slower for mmqr, 1% for
 * mmq6w (bench/RESULTS.md), since each warpgroup's own prologue, products
 * and chain are serial, and (session 43's ncu of a form that overlapped
 * them) mmqr's chain had mma.sync of its own, which waits while wgmma
 * holds the tensor pipe; with mmqr's min term by wgmma, turns measured
 * 0.94-0.975x (session 44). */
template <int ASL, int RSL> struct wgrs_bars {
    uint64_t afull[ASL], aempty[ASL], sfull[RSL], sempty[RSL], lag, turn[2];
};

/* A host check of the kernels' arithmetic (tests/cuda/test_cuda_host.c):
 * its random stream, the differences found and the first one's message */
struct wgrs_check {
    uint64_t st;
    int64_t bad;
    char *msg;
    size_t cap;
};
static inline wgrs_check wgrs_check_start(uint64_t seed, char *msg, size_t cap)
{
    if (msg && cap)
        msg[0] = 0;
    return wgrs_check{seed, 0, msg, cap};
}
/* one step of the host checks' (and bench/mmq_trace's) LCG: the state's
 * high 32 bits */
static inline uint32_t wgrs_lcg(uint64_t &st)
{
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(st >> 32);
}
static inline uint32_t wgrs_rnd(wgrs_check &k)
{
    return wgrs_lcg(k.st);
}
/* one difference; the first one's message into msg */
static inline void __attribute__((format(printf, 2, 3))) wgrs_miss(wgrs_check &k, const char *fmt, ...)
{
    if (!k.bad && k.msg && k.cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(k.msg, k.cap, fmt, ap);
        va_end(ap);
    }
    k.bad++;
}

#if WGMMA_DEVICE
/* A consumer thread's place: warpgroup wg (tile rows 64 wg..), its warp
 * w4 and the warp's 16-row tile q = 4 wg + w4, the lane's group g and
 * t4 (the wgmma accumulator layout: rows 16 q + g (A) and + 8 (B),
 * activation rows 8 j + 2 t4 (+1), j = 0..15, the m16n8 layout in 16 n8
 * tiles), and the weight rows A and B as a slot holds them: the tile rows,
 * or under the SwiGLU epilogue gate row 8 q + g and up row 64 + 8 q + g
 * (mmq_tiles_store undoes that map) */
struct wgrs_lane {
    int wg, w4, q, g, t4, ra, rb;
};
static __device__ __forceinline__ wgrs_lane wgrs_lane_of(int32_t glu)
{
    wgrs_lane l;
    const int lane = threadIdx.x % CUDA_WARP;
    l.q = threadIdx.x / CUDA_WARP;
    l.wg = l.q >> 2;
    l.w4 = l.q & 3;
    l.g = lane >> 2;
    l.t4 = lane & 3;
    l.ra = glu ? 8 * l.q + l.g : 16 * l.q + l.g;
    l.rb = glu ? 64 + 8 * l.q + l.g : 16 * l.q + l.g + 8;
    return l;
}

/* thread 0 initializes, then the block synchronizes */
template <int ASL, int RSL> static __device__ __forceinline__ void wgrs_init(wgrs_bars<ASL, RSL> &B)
{
    if (threadIdx.x == 0) {
        for (int i = 0; i < ASL; i++) {
            cuda_mbar_init(&B.afull[i], 1);
            cuda_mbar_init(&B.aempty[i], WGRS_CONS);
        }
        for (int i = 0; i < RSL; i++) {
            cuda_mbar_init(&B.sfull[i], CUDA_WARP + 1);
            cuda_mbar_init(&B.sempty[i], WGRS_CONS);
        }
        cuda_mbar_init(&B.lag, WGRS_CONS / 2);
        cuda_mbar_init(&B.turn[0], WGRS_CONS / 2);
        cuda_mbar_init(&B.turn[1], WGRS_CONS / 2);
        cuda_mbar_init_fence();
    }
    __syncthreads();
}

/* The kernel's start: the barriers, the trace mark, the dependent-launch
 * wait (the feed reads the previous kernel's activations) */
template <int ASL, int RSL> static __device__ __forceinline__ void wgrs_start(wgrs_bars<ASL, RSL> &B)
{
    wgrs_init(B);
    cuda_tr_block(0);
    cuda_pdl_enter();
}

/* The role split: the feed warpgroup gives registers back and its first
 * two warps run feed(fw), fw 0 and 1 (wgrs_feed); 1 for the consumers,
 * which take theirs */
template <class F> static __device__ __forceinline__ bool wgrs_roles(F feed)
{
    if (threadIdx.x >= WGRS_CONS) {
        wgmma_regs_dec<WGRS_FEED_REGS>();
        const int fw = threadIdx.x / CUDA_WARP - WGRS_CONS / CUDA_WARP;
        if (fw < 2)
            feed(fw);
        return false;
    }
    wgmma_regs_inc<WGRS_CONS_REGS>();
    return true;
}

/* The feed, once slot rs may be written (its empty waited for): lane 0
 * tells sfull the bytes and copies super-block x8 (in 8-byte words) of the
 * block's 128 weight rows into dst (rows rb bytes apart), under the SwiGLU
 * epilogue the 64 gate rows then the 64 up rows (mmq_wrow's map) */
static __device__ __forceinline__ void wgrs_feed_rows(uint64_t *full, uint8_t *dst, uint32_t rb,
                                                      const CUtensorMap *wmap, int32_t x8, int32_t m0, int32_t glu)
{
    if ((threadIdx.x & (CUDA_WARP - 1)) != 0)
        return;
    cuda_mbar_expect(full, WGRS_BM * rb);
    if (glu) {
        cuda_tma_rows(dst, wmap, x8, m0 / 2, full);
        cuda_tma_rows(dst + WGRS_BM / 2 * rb, wmap, x8, glu + m0 / 2, full);
    } else {
        cuda_tma_rows(dst, wmap, x8, m0, full);
    }
}

/* WGRS_LEVER: a lever sweep's probe builds of bench/mmq_trace only (as
 * mmqr's MMQR_LEVER): 1 the feed's tensor copies stop once every ring slot
 * has been filled once, its arrivals after that carrying no bytes (stale
 * stages: wrong results, timing only). What the products gain is what the
 * copies' shared-memory traffic costs them (session 50: mmq6w's int8 steps
 * and mmqr's f16 steps at ~120 cycles against the probe's 68-92). 0
 * everywhere else. */
#ifndef WGRS_LEVER
#define WGRS_LEVER 0
#endif

/* The feed: activation stage i (bytes of 128 rows, element x of the map,
 * rows n0..) into its slot once both warpgroups released stage i - ASL */
template <int ASL, int RSL>
static __device__ __forceinline__ void wgrs_feed_act(wgrs_bars<ASL, RSL> &B, uint8_t *slot, uint32_t bytes,
                                                     const CUtensorMap *xmap, int32_t i, int32_t x, int32_t n0)
{
    const int as = i % ASL;
    if (i >= ASL)
        cuda_mbar_wait(&B.aempty[as], (uint32_t)(i / ASL - 1) & 1);
    if ((threadIdx.x & (CUDA_WARP - 1)) == 0) {
        if (WGRS_LEVER == 1 && i >= ASL) {
            cuda_mbar_expect(&B.afull[as], 0);
            return;
        }
        cuda_mbar_expect(&B.afull[as], bytes);
        cuda_tma_rows(slot, xmap, x, n0, &B.afull[as]);
    }
}

/* A consumer's end: its 64 x 128 block part out (mmq_tiles_store: the
 * epilogue), the trace's end mark */
static __device__ __forceinline__ void wgrs_store(const float acc[1][16][4], const wgrs_lane &P, int32_t m0, int32_t n0,
                                                  int32_t n_w, int32_t n_rows, float *y, const struct cuda_epi &E)
{
    mmq_tiles_store<1, 16>(acc, m0, n0, P.q, 0, P.g, P.t4, n_w, n_rows, y, E);
    if (P.q == 0)
        cuda_tr_block(1);
}

/* The feed's lanes over the block's 128 activation rows n0..: store(r,
 * xd, hl) with row r's d and 32-sums of super-block s (0 past the batch's
 * rows) */
template <class F>
static __device__ __forceinline__ void wgrs_feed_xrows(const cuda_q8k &X, int32_t nbr, int32_t n_rows, int32_t n0,
                                                       int32_t s, int lane, F store)
{
#pragma unroll
    for (int i = 0; i < WGRS_BN / CUDA_WARP; i++) {
        const int r = lane + CUDA_WARP * i;
        float xd = 0.0f;
        uint4 hl = make_uint4(0, 0, 0, 0);
        if (n0 + r < n_rows) {
            const size_t b = (size_t)(n0 + r) * (size_t)nbr + (size_t)s;
            xd = __ldg(X.d + b);
            hl = __ldg((const uint4 *)(X.hl + b * CUDA_Q8K_HL));
        }
        store(r, xd, hl);
    }
}

/* The row warp's super-block s (wgrs_feed's fw 1; mmq4p's): what the
 * chain needs of the block's activation rows by store(slot, r, xd, hl),
 * loaded before the slot's wait (their global latency under it), then its
 * 32 arrivals. AFENCE: store() writes what a wgmma reads, so each lane
 * fences its stores for the async proxy before it arrives. */
template <bool AFENCE, class SM, class F>
static __device__ __forceinline__ void wgrs_feed_row(SM &S, int32_t s, int lane, const cuda_q8k &X, int32_t nbr,
                                                     int32_t n_rows, int32_t n0, F store)
{
    constexpr int RSL = sizeof(S.ss) / sizeof(S.ss[0]);
    constexpr int NR = WGRS_BN / CUDA_WARP;
    const int rs = s % RSL;
    float xd[NR];
    uint4 hl[NR];
    wgrs_feed_xrows(X, nbr, n_rows, n0, s, lane, [&](int r, float d, uint4 h) {
        xd[r / CUDA_WARP] = d;
        hl[r / CUDA_WARP] = h;
    });
    if (s >= RSL)
        cuda_mbar_wait(&S.bar.sempty[rs], (uint32_t)(s / RSL - 1) & 1);
#pragma unroll
    for (int i = 0; i < NR; i++)
        store(S.ss[rs], lane + CUDA_WARP * i, xd[i], hl[i]);
    if (AFENCE)
        cuda_fence_async_smem();
    cuda_mbar_arrive(&S.bar.sfull[rs]);
    if (lane == 0)
        cuda_tr(s, CUDA_TR_FEED);
}

/* The feed (mmqr's and mmq6w's), two warps. fw 0, the copy warp: for
 * each super-block s, once both warpgroups' chains are past s - RSL, the
 * block's weight rows (rb bytes of each a super-block) into slot s % RSL's
 * `rows` (its one arrival on the slot's barrier tells the copies' bytes),
 * then the super-block's NA activation stages (64 elements of the map
 * each) into their ASL-ring slots once both warpgroups are done with the
 * stage ASL before. fw 1, the row warp: what the chain needs of the
 * activation rows by store(slot, r, xd, hl), once the slot is free, then
 * its 32 arrivals. Why two (bench/RESULTS.md session 44): in one warp the
 * next super-block's activation-row loads waited behind the activation
 * stages' waits, their global latency on the feed's path, and with
 * mmqr's min-term rows to convert the feed fell from ~4.5 us ahead of the
 * consumers to ~1 us. AFENCE: store() writes what a wgmma reads (mmqr's
 * min-term B tile), so each lane fences its stores for the async proxy
 * before it arrives. */
template <int NA, bool AFENCE, class SM, class F>
static __device__ __forceinline__ void wgrs_feed(SM &S, int fw, uint32_t rb, int lane, const CUtensorMap *wmap,
                                                 const CUtensorMap *xmap, const cuda_q8k &X, int32_t nbr,
                                                 int32_t n_rows, int32_t m0, int32_t n0, int32_t glu, F store)
{
    constexpr int RSL = sizeof(S.ss) / sizeof(S.ss[0]), ASL = sizeof(S.act) / sizeof(S.act[0]);
    for (int32_t s = 0; s < nbr; s++) {
        const int rs = s % RSL;
        auto &L = S.ss[rs];
        if (fw == 0) {
            if (s >= RSL)
                cuda_mbar_wait(&S.bar.sempty[rs], (uint32_t)(s / RSL - 1) & 1);
            if (WGRS_LEVER == 1 && s >= RSL) {
                if (lane == 0)
                    cuda_mbar_expect(&S.bar.sfull[rs], 0);
            } else {
                wgrs_feed_rows(&S.bar.sfull[rs], (uint8_t *)&L.rows[0][0], rb, wmap, s * (int32_t)(rb / 8), m0, glu);
            }
#pragma unroll 1
            for (int h = 0; h < NA; h++)
                wgrs_feed_act(S.bar, S.act[(NA * s + h) % ASL], sizeof(S.act[0]), xmap, NA * s + h,
                              s * 64 * NA + 64 * h, n0);
            continue;
        }
        /* the rows' d and 32-sums are loaded before the slot's wait,
         * their global latency (~1 us) under it */
        wgrs_feed_row<AFENCE>(S, s, lane, X, nbr, n_rows, n0, store);
    }
}

/* A consumer is done with super-block s's slot rs (its chain read it) */
template <int ASL, int RSL>
static __device__ __forceinline__ void wgrs_slot_done(wgrs_bars<ASL, RSL> &B, int rs, int32_t s, int wg, int w4)
{
    cuda_mbar_arrive(&B.sempty[rs]);
    if (w4 == 0)
        cuda_tr(s, wg ? CUDA_TR_DONEL : CUDA_TR_DONE0);
}

#endif

#endif
