/* cuda/sample_block.cuh — internal: the device helpers of the sampling
 * kernel (cuda/sample_kernel.cu only): engine/sample.c's top-p bins and RNG
 * bit for bit, and the block primitives (every thread of the block calls
 * them) it is built from. Exactness rules: cuda/sample.cu.
 */
#ifndef INFERD_CUDA_SAMPLE_BLOCK_CUH
#define INFERD_CUDA_SAMPLE_BLOCK_CUH

#include <math.h>

#include "engine/cuda/sample.cuh"

/* ---- top-p bins and the RNG: engine/sample.c's, bit for bit --------------- */

/* engine/sample.c tp_bin */
static __device__ __forceinline__ int smp_bin(float l, float lmax)
{
    const float d = __fmul_rn(__fsub_rn(lmax, l), (float)SMP_BINS / 32.f);
    return d < (float)(SMP_BINS - 1) ? (int)d : SMP_BINS - 1;
}

static __device__ __forceinline__ uint64_t smp_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}
/* engine/sample.c rng_uniform: one xoshiro256** step, 53 bits */
static __device__ double smp_uniform(uint64_t *s)
{
    const uint64_t r = smp_rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = smp_rotl(s[3], 45);
    return __dmul_rn(__ull2double_rn(r >> 11), 0x1p-53);
}

/* ---- block primitives (every thread of the block calls them) ------------- */

struct smp_shared {
    unsigned long long sortbuf[SMP_SORT];
    double mass[SMP_BINS];
    struct sample_state st; /* header of the request's state */
    uint64_t rng[4];
    float rv[32];
    int ri[32];
    int wcnt[32], wofs[32], wtot;
    int hist[256];
    int sel_d, sel_above, sel_all, nnext, collected;
    int first_c, found, last_nz, hpos;
    double z, cum, target, r;
    int cross, n, n1;
};

/* Lowest id holding the largest value > -inf (NaN never wins); 0 when none:
 * engine/sample.c sample_argmax. */
static __device__ int32_t blk_argmax(const float *w, int32_t n, struct smp_shared *sh)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float v = -INFINITY;
    int idx = INT_MAX;
    for (int32_t i = tid; i < n; i += SMP_THREADS)
        if (w[i] > v) {
            v = w[i];
            idx = i;
        }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_down_sync(0xffffffffu, v, o);
        const int oi = __shfl_down_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) {
            v = ov;
            idx = oi;
        }
    }
    if (lane == 0) {
        sh->rv[warp] = v;
        sh->ri[warp] = idx;
    }
    __syncthreads();
    if (tid == 0) {
        for (int k = 1; k < SMP_THREADS / 32; k++)
            if (sh->rv[k] > v || (sh->rv[k] == v && sh->ri[k] < idx)) {
                v = sh->rv[k];
                idx = sh->ri[k];
            }
        sh->ri[0] = idx == INT_MAX ? 0 : idx;
    }
    __syncthreads();
    const int32_t best = sh->ri[0];
    __syncthreads();
    return best;
}

/* out[0..return) = keys of the i < n with f(i, &key), in index order. In
 * place is allowed (out[j] for j <= i while f reads element i): a tile is
 * read before any of its writes. */
template <typename F>
static __device__ int32_t blk_compact(int32_t n, F f, unsigned long long *out,
                                      struct smp_shared *sh)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int32_t base = 0;
    for (int32_t t0 = 0; t0 < n; t0 += SMP_THREADS) {
        const int32_t i = t0 + tid;
        unsigned long long key = 0;
        const bool p = i < n && f(i, &key);
        const unsigned bal = __ballot_sync(0xffffffffu, p);
        if (lane == 0)
            sh->wcnt[warp] = __popc(bal);
        __syncthreads();
        if (warp == 0) {
            const int v = sh->wcnt[lane];
            int incl = v;
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o)
                    incl += y;
            }
            sh->wofs[lane] = incl - v;
            if (lane == 31)
                sh->wtot = incl;
        }
        __syncthreads();
        if (p)
            out[base + sh->wofs[warp] + __popc(bal & ((1u << lane) - 1u))] = key;
        base += sh->wtot;
        __syncthreads();
    }
    return base;
}

/* Thread 0 sums w[0..n) in index order in double (the CPU's order and
 * roundings); ck[c] = the sum after chunk c. Returns the total. */
static __device__ double blk_seq_sum(const float *w, int32_t n, double *ck,
                                     struct smp_shared *sh)
{
    if (threadIdx.x == 0) {
        double acc = 0.0;
        for (int32_t c0 = 0; c0 < n; c0 += SMP_CH) {
            const int32_t end = min(n, c0 + SMP_CH);
#pragma unroll 8
            for (int32_t i = c0; i < end; i++)
                acc = __dadd_rn(acc, (double)w[i]);
            if (ck)
                ck[c0 / SMP_CH] = acc;
        }
        sh->z = acc;
    }
    __syncthreads();
    const double z = sh->z;
    __syncthreads();
    return z;
}

/* The first i whose running sum (as blk_seq_sum formed it) satisfies
 * LESS ? v < acc : acc >= v; -1 when none. A running sum of weights >= 0
 * only grows, so only the first chunk whose end satisfies it (or is NaN,
 * after which nothing can) is rescanned. */
template <bool LESS>
static __device__ int32_t blk_first_reach(const float *w, int32_t n, const double *ck, double v,
                                          struct smp_shared *sh)
{
    const int32_t nck = (n + SMP_CH - 1) / SMP_CH;
    if (threadIdx.x == 0)
        sh->first_c = INT_MAX;
    __syncthreads();
    for (int32_t c = threadIdx.x; c < nck; c += SMP_THREADS) {
        const double a = ck[c];
        if ((LESS ? v < a : a >= v) || isnan(a))
            atomicMin(&sh->first_c, c);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t found = -1;
        const int32_t c = sh->first_c;
        if (c < nck) {
            double acc = c ? ck[c - 1] : 0.0;
            const int32_t end = min(n, (c + 1) * SMP_CH);
            for (int32_t i = c * SMP_CH; i < end; i++) {
                acc = __dadd_rn(acc, (double)w[i]);
                if (LESS ? v < acc : acc >= v) {
                    found = i;
                    break;
                }
            }
        }
        sh->found = found;
    }
    __syncthreads();
    const int32_t found = sh->found;
    __syncthreads();
    return found;
}

/* The draw over weights w[0..n) (engine/sample.c): r = u * z, u the
 * sequence's next uniform and z the weights' sum in index order, then the
 * first index whose running sum exceeds r; -1 when none does (r == z
 * after rounding: the caller takes its last candidate). ck: scratch of
 * (n + SMP_CH - 1) / SMP_CH chunk sums. */
static __device__ int32_t blk_draw(const float *w, int32_t n, double *ck, struct smp_shared *sh)
{
    const double z = blk_seq_sum(w, n, ck, sh);
    if (threadIdx.x == 0)
        sh->r = __dmul_rn(smp_uniform(sh->rng), z);
    __syncthreads();
    return blk_first_reach<true>(w, n, ck, sh->r, sh);
}

/* dst[0..m) = the m largest of the keys < ub in cand[0..n), sorted
 * descending (1 <= m <= SMP_SORT, at least m such keys; keys are unique).
 * An MSD radix select, 8 bits a pass: the keys above the chosen digit are
 * taken, those on it go on to the next pass (compacted into B). Returns
 * the smallest key taken (the next chunk's ub). */
static __device__ unsigned long long blk_top_chunk(const unsigned long long *cand, int32_t n,
                                                   unsigned long long ub, int m,
                                                   unsigned long long *B,
                                                   unsigned long long *dst,
                                                   struct smp_shared *sh)
{
    const int tid = threadIdx.x;
    const unsigned long long *src = cand;
    int32_t nsrc = n;
    bool first = true;
    int remaining = m;
    if (tid == 0)
        sh->collected = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int d = tid; d < 256; d += SMP_THREADS)
            sh->hist[d] = 0;
        __syncthreads();
        for (int32_t i = tid; i < nsrc; i += SMP_THREADS) {
            const unsigned long long k = src[i];
            if (!(first && k >= ub))
                atomicAdd(&sh->hist[(k >> shift) & 255], 1);
        }
        __syncthreads();
        if (tid == 0) {
            int above = 0, d = 255;
            for (; d > 0; d--) {
                if (above + sh->hist[d] >= remaining)
                    break;
                above += sh->hist[d];
            }
            sh->sel_d = d;
            sh->sel_above = above;
            sh->sel_all = remaining - above == sh->hist[d];
            sh->nnext = 0;
        }
        __syncthreads();
        const int d = sh->sel_d;
        const bool all = sh->sel_all;
        remaining -= sh->sel_above;
        for (int32_t t0 = 0; t0 < nsrc; t0 += SMP_THREADS) {
            const int32_t i = t0 + tid;
            unsigned long long k = 0;
            bool ok = i < nsrc;
            if (ok) {
                k = src[i];
                ok = !(first && k >= ub);
            }
            __syncthreads(); /* B in place: the tile is read before it is written */
            if (ok) {
                const int dig = (int)((k >> shift) & 255);
                if (dig > d || (dig == d && all))
                    sh->sortbuf[atomicAdd(&sh->collected, 1)] = k;
                else if (dig == d)
                    B[atomicAdd(&sh->nnext, 1)] = k;
            }
        }
        __syncthreads();
        if (all)
            break;
        src = B;
        nsrc = sh->nnext;
        first = false;
        __syncthreads();
    }
    /* bitonic sort, descending, padded with 0 (below every real key) */
    int P = 1;
    while (P < m)
        P <<= 1;
    for (int i = m + tid; i < P; i += SMP_THREADS)
        sh->sortbuf[i] = 0;
    __syncthreads();
    for (int k = 2; k <= P; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < P; i += SMP_THREADS) {
                const int ixj = i ^ j;
                if (ixj > i) {
                    const unsigned long long a = sh->sortbuf[i], b = sh->sortbuf[ixj];
                    if ((i & k) == 0 ? a < b : a > b) {
                        sh->sortbuf[i] = b;
                        sh->sortbuf[ixj] = a;
                    }
                }
            }
            __syncthreads();
        }
    for (int i = tid; i < m; i += SMP_THREADS)
        dst[i] = sh->sortbuf[i];
    const unsigned long long last = sh->sortbuf[m - 1];
    __syncthreads();
    return last;
}

#endif
