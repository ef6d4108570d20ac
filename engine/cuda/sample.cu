/* cuda/sample — ops->sample on the device: logit bias, penalties, greedy,
 * top-k, top-p, min-p, temperature, the seeded draw and the log-softmax
 * top-N for logprobs, one block per request; only the results come back.
 *
 * The oracle is engine/sample.c (the CPU op is sample_state_step), and the
 * sampled token is meant to be the same bits, not just the same
 * distribution. So every float step is the CPU's operation (explicit _rn
 * intrinsics: nvcc would otherwise contract a*b+c), expf is glibc's
 * (engine/sample_exp.h), logf(min_p) comes from the host's libm
 * (sample_state.log_min_p), and the parallel parts compute exact things:
 *  - max and argmax (ties: lowest id), counts, filters, the bias and
 *    penalty updates (per token, so order-free);
 *  - top-k and the top-p crossing bin by an exact radix select of the
 *    CPU's 64-bit keys (logit order, then id) and a bitonic sort of chunks
 *    of SMP_SORT keys in shared memory: a set of unique keys has one order;
 *  - the top-p bin masses with double atomics: every weight in one bin
 *    (bins span 1/32 nat) lies within a factor e^(1/32) of the others, so
 *    their double sum is exact in any order (< 2^18 values of 24 bits
 *    spanning 2 binades need 43 bits). The last bin (everything further
 *    than 32 nats) is not exact, but its mass only decides whether the
 *    mass crosses top_p there, which it always does (top_p < 1 - 2^-24 and
 *    the sums agree to ~1e-11);
 *  - the sums whose order matters (the softmax normalizers, the top-p
 *    cumulative mass, the draw) run sequentially in one thread in the
 *    CPU's order: index order over the vocabulary, or the sorted order of
 *    the survivors. Chunk partial sums are kept, so finding where a
 *    cumulative sum crosses a value is a parallel search over chunks and a
 *    rescan of one. This chain is the cost of exactness: one double add
 *    per vocabulary entry when no top-k bounds it (~0.3-0.7 ms per step at
 *    152k entries; all requests of a call run it concurrently).
 * The RNG is engine/sample.c's xoshiro256**, advanced once per draw exactly
 * when the CPU draws; the state stays on the device.
 *
 * Logprobs (smp_logprob_kernel): the top-N ids and their order are exact;
 * the values are (float)(l - lse) with lse = lmax + log(sum exp(l - lmax))
 * in double like sample_logprobs, but with CUDA's exp/log (not glibc's) and
 * a parallel sum, so lse can differ in its last bits and a logprob by one
 * float ulp in rare cases (tests/cuda/test_cuda_sample allows 2 ulp).
 *
 * Not mirrored: rows with +inf logits (the CPU's weights become NaN there;
 * models and the API's bias range never produce them).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/common.cuh"
#include "engine/sample_exp.h"

#define SMP_THREADS 1024 /* threads per request (block) */
#define SMP_CH 1024      /* elements per checkpoint of a sequential sum */
#define SMP_SORT 4096    /* keys sorted per chunk in shared memory */
#define SMP_BINS 1024    /* top-p bins: engine/sample.c's TP_BINS over TP_RANGE 32 */
#define LP_THREADS 256   /* threads of the logprob kernel */

static_assert(sizeof(struct backend_sample_req) == 24, "request layout shared with C");

/* ---- keys: engine/sample.c's, bit for bit --------------------------------- */

static __device__ __forceinline__ uint32_t smp_float_order(float f)
{
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static __device__ __forceinline__ float smp_order_float(uint32_t u)
{
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    return __uint_as_float(u);
}
static __device__ __forceinline__ unsigned long long smp_key(float l, int32_t id)
{
    return ((unsigned long long)smp_float_order(l) << 32) | (uint32_t)(UINT32_MAX - (uint32_t)id);
}
static __device__ __forceinline__ float smp_key_logit(unsigned long long k)
{
    return smp_order_float((uint32_t)(k >> 32));
}
static __device__ __forceinline__ int32_t smp_key_id(unsigned long long k)
{
    return (int32_t)(UINT32_MAX - (uint32_t)k);
}
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

/* ---- the sampling kernel --------------------------------------------------- */

/* Per-block scratch: [n_vocab] work, wts (float), A, B, list (keys), and the
 * checkpoints of a sequential sum. */
struct smp_scratch {
    float *work, *wts;
    unsigned long long *A, *B, *list;
    double *ck;
};

static size_t smp_align(size_t b)
{
    return (b + 255) & ~(size_t)255;
}
static size_t smp_block_bytes(int32_t V)
{
    return 2 * smp_align(sizeof(float) * (size_t)V) +
           3 * smp_align(sizeof(unsigned long long) * (size_t)V) +
           smp_align(sizeof(double) * (size_t)(V / SMP_CH + 2));
}
static __device__ struct smp_scratch smp_carve(char *p, int32_t V)
{
    struct smp_scratch s;
    const size_t fb = (sizeof(float) * (size_t)V + 255) & ~(size_t)255;
    const size_t kb = (sizeof(unsigned long long) * (size_t)V + 255) & ~(size_t)255;
    s.work = (float *)p;
    s.wts = (float *)(p + fb);
    s.A = (unsigned long long *)(p + 2 * fb);
    s.B = (unsigned long long *)(p + 2 * fb + kb);
    s.list = (unsigned long long *)(p + 2 * fb + 2 * kb);
    s.ck = (double *)(p + 2 * fb + 3 * kb);
    return s;
}

/* One request per block: requests job0 + blockIdx.x. */
static __global__ void __launch_bounds__(SMP_THREADS)
smp_sample_kernel(const float *logits, int32_t V, const struct backend_sample_req *jobs,
                  int32_t job0, char *scratch, size_t block_bytes,
                  struct backend_sample_out *out)
{
    __shared__ struct smp_shared sh;
    const int tid = threadIdx.x;
    const struct backend_sample_req q = jobs[job0 + blockIdx.x];
    struct backend_sample_out *o = &out[job0 + blockIdx.x];
    if (q.token >= 0) { /* scoring only */
        if (tid == 0) {
            o->token = q.token;
            o->logprob = 0.f;
        }
        return;
    }
    struct sample_state *gst = q.state;
    if (tid == 0) {
        sh.st = *gst;
        for (int k = 0; k < 4; k++)
            sh.rng[k] = gst->rng[k];
    }
    __syncthreads();
    const struct sample_state st = sh.st;
    const struct smp_scratch S = smp_carve(scratch + (size_t)blockIdx.x * block_bytes, V);
    const float *L = logits + (size_t)q.row * (size_t)V;
    float *work = S.work;

    /* bias and penalties into work (engine/sample.c apply_bias_penalties) */
    for (int32_t i = tid; i < V; i += SMP_THREADS) {
        const float l = L[i];
        work[i] = isnan(l) ? -INFINITY : l;
    }
    __syncthreads();
    if (q.flags & BACKEND_SAMPLE_MASKED) {
        const int32_t *mask = sample_state_mask(gst);
        for (int32_t k = tid; k < st.n_mask; k += SMP_THREADS)
            if (mask[k] >= 0 && mask[k] < V)
                work[mask[k]] = -INFINITY;
        __syncthreads();
    }
    {
        /* entries in order; a token's first entry applies all of its entries */
        const struct sample_bias *bias = sample_state_bias(gst);
        for (int32_t b = tid; b < st.n_bias; b += SMP_THREADS) {
            const int32_t t = bias[b].token;
            if (t < 0 || t >= V)
                continue;
            bool first = true;
            for (int32_t e = 0; e < b && first; e++)
                first = bias[e].token != t;
            if (!first)
                continue;
            float l = work[t];
            for (int32_t e = b; e < st.n_bias; e++)
                if (bias[e].token == t)
                    l = bias[e].bias <= -100.f ? -INFINITY : __fadd_rn(l, bias[e].bias);
            work[t] = l;
        }
        __syncthreads();
    }
    const float rp = st.repetition_penalty;
    const bool rep = rp != 1.f && rp > 0.f;
    const bool pf = st.presence_penalty != 0.f || st.frequency_penalty != 0.f;
    if (rep || pf) {
        const struct sample_hist *h = sample_state_hist(gst);
        for (int32_t k = tid; k < st.n_hist; k += SMP_THREADS) {
            const int32_t t = h[k].token, c = h[k].count;
            if (t < 0 || t >= V)
                continue;
            float l = work[t];
            if (rep)
                l = l > 0.f ? __fdiv_rn(l, rp) : __fmul_rn(l, rp);
            if (pf && c > 0)
                l = __fsub_rn(l, __fadd_rn(st.presence_penalty,
                                           __fmul_rn(st.frequency_penalty, __int2float_rn(c))));
            work[t] = l;
        }
        __syncthreads();
    }

    const int32_t best = blk_argmax(work, V, &sh);
    const float lmax = work[best];
    const float T = st.temperature;
    int32_t tok = best;
    bool drew = false;
    if (!(T > 0.f) || lmax == -INFINITY)
        goto accept; /* greedy, or everything banned */
    {
        const float lmin = st.min_p > 0.f ? __fadd_rn(lmax, st.log_min_p) : -INFINITY;
        const bool topk = st.top_k > 0 && st.top_k < V, topp = st.top_p < 1.f;
        float *wts = S.wts;
        if (!topk && !topp) {
            /* min-p and the draw straight over the vocabulary */
            for (int32_t i = tid; i < V; i += SMP_THREADS) {
                const float l = work[i];
                wts[i] = l > -INFINITY && l >= lmin
                             ? sample_expf(__fdiv_rn(__fsub_rn(l, lmax), T))
                             : 0.f;
            }
            if (tid == 0)
                sh.last_nz = -1;
            __syncthreads();
            const double z = blk_seq_sum(wts, V, S.ck, &sh);
            if (tid == 0)
                sh.r = __dmul_rn(smp_uniform(sh.rng), z);
            __syncthreads();
            drew = true;
            const int32_t i = blk_first_reach<true>(wts, V, S.ck, sh.r, &sh);
            if (i >= 0) {
                tok = i;
            } else { /* r == z after rounding: the last weight that is not 0 */
                for (int32_t k = tid; k < V; k += SMP_THREADS)
                    if (wts[k] != 0.f)
                        atomicMax(&sh.last_nz, k);
                __syncthreads();
                tok = sh.last_nz >= 0 ? sh.last_nz : best;
            }
            goto accept;
        }

        unsigned long long *list = S.list;
        int32_t n;
        if (topk) {
            const int32_t n_cand = blk_compact(
                V,
                [&](int32_t i, unsigned long long *k) {
                    const float l = work[i];
                    *k = smp_key(l, i);
                    return l > -INFINITY;
                },
                S.A, &sh);
            const int32_t k = min(st.top_k, n_cand);
            unsigned long long ub = ~0ull;
            for (int32_t got = 0; got < k;) {
                const int m = min(SMP_SORT, k - got);
                ub = blk_top_chunk(S.A, n_cand, ub, m, S.B, list + got, &sh);
                got += m;
            }
            n = k;
            if (topp) { /* over the k survivors, in order */
                for (int32_t j = tid; j < n; j += SMP_THREADS)
                    wts[j] = sample_expf(__fsub_rn(smp_key_logit(list[j]), lmax));
                __syncthreads();
                const double z = blk_seq_sum(wts, n, S.ck, &sh);
                const double target = __dmul_rn((double)st.top_p, z);
                const int32_t j = blk_first_reach<false>(wts, n, S.ck, target, &sh);
                if (j >= 0)
                    n = j + 1;
            }
        } else {
            /* top-p over bins (engine/sample.c top_p_keys) */
            for (int b = tid; b < SMP_BINS; b += SMP_THREADS)
                sh.mass[b] = 0.0;
            __syncthreads();
            for (int32_t i = tid; i < V; i += SMP_THREADS) {
                const float l = work[i];
                float w = 0.f;
                if (l > -INFINITY) {
                    w = sample_expf(__fsub_rn(l, lmax));
                    atomicAdd(&sh.mass[smp_bin(l, lmax)], (double)w); /* exact: see top */
                }
                wts[i] = w;
            }
            __syncthreads();
            const double z = blk_seq_sum(wts, V, NULL, &sh);
            if (tid == 0) {
                const double target = __dmul_rn((double)st.top_p, z);
                double cum = 0.0;
                int cross = SMP_BINS - 1;
                for (int b = 0; b < SMP_BINS; b++) {
                    if (__dadd_rn(cum, sh.mass[b]) >= target) {
                        cross = b;
                        break;
                    }
                    cum = __dadd_rn(cum, sh.mass[b]);
                }
                sh.target = target;
                sh.cum = cum;
                sh.cross = cross;
            }
            __syncthreads();
            const int cross = sh.cross;
            const int32_t n1 = blk_compact(
                V,
                [&](int32_t i, unsigned long long *k) {
                    const float l = work[i];
                    *k = smp_key(l, i);
                    return l > -INFINITY && smp_bin(l, lmax) < cross;
                },
                list, &sh);
            const int32_t n_cb = blk_compact(
                V,
                [&](int32_t i, unsigned long long *k) {
                    const float l = work[i];
                    *k = smp_key(l, i);
                    return l > -INFINITY && smp_bin(l, lmax) == cross;
                },
                S.A, &sh);
            /* the crossing bin in logit order, a chunk at a time, until the
             * cumulative mass reaches the target */
            if (tid == 0)
                sh.n = -1;
            __syncthreads();
            unsigned long long ub = ~0ull;
            int32_t got = 0;
            while (got < n_cb) {
                const int m = min(SMP_SORT, n_cb - got);
                ub = blk_top_chunk(S.A, n_cb, ub, m, S.B, list + n1 + got, &sh);
                if (tid == 0) {
                    double cum = sh.cum;
                    for (int j = 0; j < m; j++) {
                        cum = __dadd_rn(
                            cum, (double)sample_expf(__fsub_rn(smp_key_logit(list[n1 + got + j]),
                                                               lmax)));
                        if (cum >= sh.target) {
                            sh.n = n1 + got + j + 1;
                            break;
                        }
                    }
                    sh.cum = cum;
                }
                __syncthreads();
                got += m;
                if (sh.n >= 0)
                    break;
            }
            n = sh.n >= 0 ? sh.n : n1 + n_cb; /* rounding: keep the whole bin */
            __syncthreads();
        }

        if (st.min_p > 0.f) /* p_i >= min_p * p_max  <=>  l_i >= lmax + log(min_p) */
            n = blk_compact(
                n,
                [&](int32_t j, unsigned long long *k) {
                    *k = list[j];
                    return smp_key_logit(*k) >= lmin;
                },
                list, &sh);
        if (n <= 1) {
            tok = n == 1 ? smp_key_id(list[0]) : best;
            goto accept;
        }
        /* temperature, softmax weights, draw */
        for (int32_t j = tid; j < n; j += SMP_THREADS)
            wts[j] = sample_expf(__fdiv_rn(__fsub_rn(smp_key_logit(list[j]), lmax), T));
        __syncthreads();
        const double z = blk_seq_sum(wts, n, S.ck, &sh);
        if (tid == 0)
            sh.r = __dmul_rn(smp_uniform(sh.rng), z);
        __syncthreads();
        drew = true;
        const int32_t j = blk_first_reach<true>(wts, n, S.ck, sh.r, &sh);
        tok = smp_key_id(list[j >= 0 ? j : n - 1]); /* r == z after rounding: the last */
    }

accept:
    /* the token accepted as generated (sampler_accept(t, 0)) */
    if (tid == 0)
        sh.hpos = INT_MAX;
    __syncthreads();
    {
        const struct sample_hist *h = sample_state_hist(gst);
        for (int32_t k = tid; k < st.n_hist; k += SMP_THREADS)
            if (h[k].token == tok)
                atomicMin(&sh.hpos, k);
    }
    __syncthreads();
    if (tid == 0) {
        struct sample_hist *h = sample_state_hist(gst);
        const int k = sh.hpos;
        if (k != INT_MAX) {
            if (h[k].count < INT32_MAX)
                h[k].count++;
        } else if (st.n_hist < st.cap_hist) {
            h[st.n_hist].token = tok;
            h[st.n_hist].count = 1;
            gst->n_hist = st.n_hist + 1;
        }
        if (drew)
            for (int k2 = 0; k2 < 4; k2++)
                gst->rng[k2] = sh.rng[k2];
        o->token = tok;
        o->logprob = 0.f;
    }
}

/* ---- the logprob kernel ---------------------------------------------------- */

static __device__ __forceinline__ unsigned long long smp_warp_max_u64(unsigned long long v)
{
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long y = __shfl_xor_sync(0xffffffffu, v, o);
        v = y > v ? y : v;
    }
    return v;
}

/* engine/sample.c sample_logprobs over the (masked) row, for the token in
 * out (sampled by smp_sample_kernel or given). One block per request. */
static __global__ void __launch_bounds__(LP_THREADS)
smp_logprob_kernel(const float *logits, int32_t V, const struct backend_sample_req *jobs,
                   struct backend_sample_out *out)
{
    __shared__ unsigned long long buf[LP_THREADS * BACKEND_SAMPLE_MAX_TOP];
    __shared__ unsigned long long wk[LP_THREADS / 32];
    __shared__ double wz[LP_THREADS / 32];
    __shared__ float wm[LP_THREADS / 32];
    const struct backend_sample_req q = jobs[blockIdx.x];
    if (q.n_top < 0)
        return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    struct backend_sample_out *o = &out[blockIdx.x];
    const float *L = logits + (size_t)q.row * (size_t)V;
    const bool masked = q.state && (q.flags & BACKEND_SAMPLE_MASKED);
    const int32_t n_mask = masked ? q.state->n_mask : 0;
    const int32_t *mask = masked ? sample_state_mask(q.state) : NULL;
    auto val = [&](int32_t i) {
        float l = L[i];
        for (int32_t k = 0; k < n_mask; k++)
            if (mask[k] == i)
                l = -INFINITY;
        return l;
    };
    const int n = min(q.n_top, V);

    /* max (NaN skipped) */
    float m = -INFINITY;
    for (int32_t i = tid; i < V; i += LP_THREADS) {
        const float l = val(i);
        if (l > m)
            m = l;
    }
    m = cuda_warp_max(m);
    if (lane == 0)
        wm[warp] = m;
    __syncthreads();
    float lmax = wm[0];
    for (int k = 1; k < LP_THREADS / 32; k++)
        lmax = fmaxf(lmax, wm[k]);

    /* sum of exp in double, and each thread's top n keys (NaN as -inf) */
    unsigned long long top[BACKEND_SAMPLE_MAX_TOP];
    int cnt = 0;
    double z = 0.0;
    for (int32_t i = tid; i < V; i += LP_THREADS) {
        float l = val(i);
        if (l > -INFINITY)
            z += exp((double)l - (double)lmax);
        if (isnan(l))
            l = -INFINITY;
        const unsigned long long key = smp_key(l, i);
        if (cnt == n && (n == 0 || key <= top[n - 1]))
            continue;
        int k = cnt < n ? cnt++ : n - 1;
        while (k > 0 && top[k - 1] < key) {
            top[k] = top[k - 1];
            k--;
        }
        top[k] = key;
    }
    for (int o2 = 16; o2 > 0; o2 >>= 1)
        z += __shfl_xor_sync(0xffffffffu, z, o2);
    if (lane == 0)
        wz[warp] = z;
    for (int k = 0; k < n; k++)
        buf[tid * BACKEND_SAMPLE_MAX_TOP + k] = k < cnt ? top[k] : 0ull;
    __syncthreads();
    double zt = 0.0;
    for (int k = 0; k < LP_THREADS / 32; k++)
        zt += wz[k];
    const double lse = (double)lmax + log(zt);

    /* the block's top n: n rounds of the largest key below the last one */
    unsigned long long prev = ~0ull;
    for (int r = 0; r < n; r++) {
        unsigned long long best = 0;
        for (int k = 0; k < n; k++) {
            const unsigned long long v = buf[tid * BACKEND_SAMPLE_MAX_TOP + k];
            if (v < prev && v > best)
                best = v;
        }
        best = smp_warp_max_u64(best);
        if (lane == 0)
            wk[warp] = best;
        __syncthreads();
        best = wk[0];
        for (int k = 1; k < LP_THREADS / 32; k++)
            best = wk[k] > best ? wk[k] : best;
        __syncthreads();
        prev = best;
        if (tid == 0) {
            const float l = smp_key_logit(best);
            o->top_ids[r] = smp_key_id(best);
            o->top_lps[r] = l > -INFINITY ? (float)((double)l - lse) : -INFINITY;
        }
    }
    if (tid == 0) {
        const int32_t t = o->token;
        float lt = -INFINITY;
        if (t >= 0 && t < V)
            lt = val(t);
        o->logprob = lt > -INFINITY ? (float)((double)lt - lse) : -INFINITY;
    }
}

/* ---- op entry -------------------------------------------------------------- */

struct cuda_sample {
    int32_t vocab, rows;          /* scratch: rows blocks of vocab */
    char *scratch;
    size_t block_bytes;
    struct backend_sample_req *d_jobs;
    struct backend_sample_out *d_out;
    int32_t cap_jobs;
};

static int smp_reserve(struct cuda_ctx *c, int32_t V, int32_t rows, int32_t jobs)
{
    struct cuda_sample *s = (struct cuda_sample *)c->smp;
    if (!s) {
        s = (struct cuda_sample *)calloc(1, sizeof(*s));
        if (!s)
            return INF_ENOMEM;
        c->smp = s;
    }
    if (V > s->vocab || rows > s->rows) {
        const int32_t nv = V > s->vocab ? V : s->vocab, nr = rows > s->rows ? rows : s->rows;
        const size_t bb = smp_block_bytes(nv);
        char *p = NULL;
        if (cuda_malloc(c, (void **)&p, bb * (size_t)nr) != cudaSuccess) {
            cudaGetLastError();
            return INF_ENOMEM;
        }
        cudaStreamSynchronize(c->stream);
        cudaFree(s->scratch);
        s->scratch = p;
        s->block_bytes = bb;
        s->vocab = nv;
        s->rows = nr;
    }
    if (jobs > s->cap_jobs) {
        struct backend_sample_req *dj = NULL;
        struct backend_sample_out *dout = NULL;
        if (cuda_malloc(c, (void **)&dj, sizeof(*dj) * (size_t)jobs) != cudaSuccess ||
            cuda_malloc(c, (void **)&dout, sizeof(*dout) * (size_t)jobs) != cudaSuccess) {
            cudaGetLastError();
            cudaFree(dj);
            return INF_ENOMEM;
        }
        cudaStreamSynchronize(c->stream);
        cudaFree(s->d_jobs);
        cudaFree(s->d_out);
        s->d_jobs = dj;
        s->d_out = dout;
        s->cap_jobs = jobs;
    }
    return 0;
}

void cuda_sample_free(struct cuda_ctx *c)
{
    struct cuda_sample *s = (struct cuda_sample *)c->smp;
    if (!s)
        return;
    cudaFree(s->scratch);
    cudaFree(s->d_jobs);
    cudaFree(s->d_out);
    free(s);
    c->smp = NULL;
}

int cuda_op_sample(struct backend *be, const float *logits, int32_t n_rows, int32_t n_vocab,
                   const struct backend_sample_req *reqs, int32_t n_reqs,
                   struct backend_sample_out *out)
{
    struct cuda_ctx *c = cuda_ctx_of(be);
    if (cuda_op_begin(c))
        return c->err;
    if (n_vocab <= 0 || n_reqs < 0)
        return INF_EINVAL;
    if (!reqs) /* reserve */
        return smp_reserve(c, n_vocab, n_reqs > 0 ? n_reqs : 1, n_reqs > 0 ? n_reqs : 1);
    if (n_reqs == 0)
        return 0;
    for (int32_t i = 0; i < n_reqs; i++) {
        const struct backend_sample_req *q = &reqs[i];
        if (q->row < 0 || q->row >= n_rows || q->n_top > BACKEND_SAMPLE_MAX_TOP ||
            q->token >= n_vocab || (q->token < 0 && !q->state))
            return INF_EINVAL;
    }
    struct cuda_sample *s = (struct cuda_sample *)c->smp;
    const int32_t rows = s && s->rows > 0 ? s->rows : (n_reqs < 64 ? n_reqs : 64);
    int rc = smp_reserve(c, n_vocab, rows, n_reqs);
    if (rc)
        return rc;
    s = (struct cuda_sample *)c->smp;
    if (CUDA_CHECK_CTX(c, cudaMemcpyAsync(s->d_jobs, reqs, sizeof(*reqs) * (size_t)n_reqs,
                                          cudaMemcpyHostToDevice, c->stream)))
        return c->err;
    for (int32_t j0 = 0; j0 < n_reqs; j0 += s->rows) {
        const int32_t nb = n_reqs - j0 < s->rows ? n_reqs - j0 : s->rows;
        smp_sample_kernel<<<nb, SMP_THREADS, 0, c->stream>>>(logits, n_vocab, s->d_jobs, j0,
                                                             s->scratch, s->block_bytes,
                                                             s->d_out);
        if (CUDA_CHECK_LAUNCH(c, "smp_sample_kernel"))
            return c->err;
    }
    smp_logprob_kernel<<<n_reqs, LP_THREADS, 0, c->stream>>>(logits, n_vocab, s->d_jobs,
                                                             s->d_out);
    if (CUDA_CHECK_LAUNCH(c, "smp_logprob_kernel") ||
        CUDA_CHECK_CTX(c, cudaMemcpyAsync(out, s->d_out, sizeof(*out) * (size_t)n_reqs,
                                          cudaMemcpyDeviceToHost, c->stream)) ||
        CUDA_CHECK_CTX(c, cudaStreamSynchronize(c->stream)))
        return c->err;
    return 0;
}
