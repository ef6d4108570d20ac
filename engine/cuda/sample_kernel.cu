/* cuda/sample_kernel — the sampling kernel of ops->sample: one block per
 * request runs engine/sample.c's sample_state_step (bias, penalties,
 * greedy, top-k, top-p, min-p, temperature, the seeded draw) with the CPU's
 * bits; cuda/sample.cu's opening comment has the rules that make them
 * exact. Launched by cuda/sample.cu through smp_sample_launch.
 */
#include <limits.h>
#include <math.h>

#include "engine/cuda/sample.cuh"
#include "engine/cuda/sample_block.cuh"
#include "engine/sample_exp.h"

/* ---- the sampling kernel --------------------------------------------------- */

/* The per-block scratch of smp_block_bytes (sample.cuh), carved the same way. */
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
    cuda_pdl_enter();
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
    /* a JSON constraint's allowed bits (NULL: none) ban the rest first,
     * as the host's copy of the row with -inf outside the set does */
    const uint32_t *allow = q.allow;
    for (int32_t i = tid; i < V; i += SMP_THREADS) {
        const float l = L[i];
        work[i] = isnan(l) || (allow && !sample_allowed(allow, i)) ? -INFINITY : l;
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
            drew = true;
            const int32_t i = blk_draw(wts, V, S.ck, &sh);
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
        drew = true;
        const int32_t j = blk_draw(wts, n, S.ck, &sh);
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

int smp_sample_launch(struct cuda_ctx *c, const float *logits, int32_t V,
                      const struct backend_sample_req *jobs, int32_t job0, int32_t n_blocks,
                      char *scratch, size_t block_bytes, struct backend_sample_out *out)
{
    cuda_launch(c, smp_sample_kernel, n_blocks, SMP_THREADS, 0, logits, V, jobs, job0, scratch,
                                                               block_bytes, out);
    if (CUDA_CHECK_LAUNCH(c, "smp_sample_kernel"))
        return c->err;
    return 0;
}
