/* cuda/sample_logprob — the logprob kernel of ops->sample: engine/sample.c
 * sample_logprobs (the token's log-softmax and the top-N) over the (masked)
 * row, one block per request. The ids and their order are exact; the values
 * may differ from the CPU's by a float ulp (cuda/sample.cu says why).
 * Launched by cuda/sample.cu through smp_logprob_launch, after the
 * sampling kernel wrote the tokens.
 */
#include <math.h>

#include "engine/cuda/sample.cuh"

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
    cuda_pdl_enter();
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
    const uint32_t *allow = q.allow;
    auto val = [&](int32_t i) {
        float l = allow && !sample_allowed(allow, i) ? -INFINITY : L[i];
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

int smp_logprob_launch(struct cuda_ctx *c, const float *logits, int32_t V,
                       const struct backend_sample_req *jobs, int32_t n,
                       struct backend_sample_out *out)
{
    cuda_launch(c, smp_logprob_kernel, n, LP_THREADS, 0, logits, V, jobs, out);
    if (CUDA_CHECK_LAUNCH(c, "smp_logprob_kernel"))
        return c->err;
    return 0;
}
