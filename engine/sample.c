/* sample — logits -> next token: bias, penalties, greedy, top-k, top-p, min-p,
 * temperature, and a seeded draw; plus log-softmax / top-N for logprobs.
 *
 * Invariants: every per-token step works in the scratch arrays allocated by
 * sampler_new (nothing is allocated per token), and the result depends only on
 * the logits, the parameters, the accepted tokens and the seed (same inputs =>
 * same token, on any machine with IEEE float and the same libm expf).
 *
 * Candidates are kept as 64-bit keys: the logit mapped to an order-preserving
 * unsigned integer in the high half, (UINT32_MAX - id) in the low half. So one
 * integer comparison orders by logit (descending) with ties to the lower id,
 * and selection and sorting need no comparison callback with context.
 *
 * The step itself (sample_ctx_step) reads its inputs through a struct
 * sample_ctx, so a struct sampler and the flat struct sample_state that a
 * backend's sample op keeps on its device (sample.h) run the same code: the
 * CPU op is this file, and the device ops are tested against it.
 *
 * Threads: a struct sampler belongs to one sequence and is used by one thread
 * at a time (the engine thread); sample_logprobs and sample_argmax are pure.
 */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sampler {
    int32_t n_vocab;
    struct sample_params p;
    struct sample_bias *bias; /* p.bias points here */
    uint64_t rng[4];          /* xoshiro256** state */

    /* penalty bookkeeping: only the touched tokens are visited per step.
     * Every token of the context is in hist once (all count for the
     * repetition penalty), with its count among generated tokens. */
    int32_t *pos;             /* [n_vocab] 1 + index in hist, 0 = not seen */
    struct sample_hist *hist; /* [n_vocab] distinct tokens seen */
    int32_t n_hist;

    /* per-step scratch */
    float *work;    /* [n_vocab] logits after bias/penalties, then weights */
    uint64_t *keys; /* [n_vocab] candidates */
};

/* What one step reads and writes: a struct sampler's fields, or a flat
 * struct sample_state's (sample_state_step), so both run the same code. */
struct sample_ctx {
    const struct sample_params *p;
    uint64_t *rng;
    const struct sample_hist *hist;
    int32_t n_hist;
    const int32_t *mask; /* set to -inf before bias (NULL: none) */
    int32_t n_mask;
    int32_t n_vocab;
    float *work;
    uint64_t *keys;
};

/* ------------------------------------------------------------------ RNG */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(struct sample_ctx *s)
{
    return (double)(xoshiro_next(s->rng) >> 11) * 0x1p-53;
}

/* ----------------------------------------------------------------- keys */

static uint32_t float_order(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static float order_float(uint32_t u)
{
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t make_key(float logit, int32_t id)
{
    return ((uint64_t)float_order(logit) << 32) | (uint32_t)(UINT32_MAX - (uint32_t)id);
}

static float key_logit(uint64_t k) { return order_float((uint32_t)(k >> 32)); }
static int32_t key_id(uint64_t k) { return (int32_t)(UINT32_MAX - (uint32_t)k); }

static void swap_key(uint64_t *a, uint64_t *b)
{
    uint64_t t = *a;
    *a = *b;
    *b = t;
}

/* Rearrange a[0..n) so that a[0..k) hold the k largest keys (in any order).
 * Quickselect with a median-of-three pivot; keys are unique (the id is part
 * of them), so partitions always shrink. */
static void select_top(uint64_t *a, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    if (k <= 0 || k >= n)
        return;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] > a[lo])
            swap_key(&a[mid], &a[lo]);
        if (a[hi] > a[lo])
            swap_key(&a[hi], &a[lo]);
        if (a[hi] > a[mid])
            swap_key(&a[hi], &a[mid]);
        uint64_t pivot = a[mid]; /* median of the three */
        int64_t i = lo, j = hi;
        while (i <= j) { /* descending Hoare partition */
            while (a[i] > pivot)
                i++;
            while (a[j] < pivot)
                j--;
            if (i <= j) {
                swap_key(&a[i], &a[j]);
                i++;
                j--;
            }
        }
        /* now a[lo..j] >= pivot >= a[i..hi], j < i, and anything between
         * j and i equals the pivot: the boundary before index k is settled
         * unless it falls strictly inside one of the two sides */
        if (k <= j)
            hi = j;
        else if (k > i)
            lo = i;
        else
            return;
    }
}

static int cmp_key_desc(const void *pa, const void *pb)
{
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* --------------------------------------------------------------- public */

void sample_params_default(struct sample_params *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 1.f;
    p->top_k = 0;
    p->top_p = 1.f;
    p->min_p = 0.f;
    p->repetition_penalty = 1.f;
}

struct sampler *sampler_new(int32_t n_vocab, const struct sample_params *p)
{
    if (n_vocab <= 0 || !p || p->n_bias < 0 || (p->n_bias > 0 && !p->bias))
        return NULL;
    struct sampler *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n_vocab = n_vocab;
    s->p = *p;
    s->pos = calloc((size_t)n_vocab, sizeof(int32_t));
    s->hist = malloc((size_t)n_vocab * sizeof(struct sample_hist));
    s->work = malloc((size_t)n_vocab * sizeof(float));
    s->keys = malloc((size_t)n_vocab * sizeof(uint64_t));
    if (!s->pos || !s->hist || !s->work || !s->keys)
        goto err;
    if (p->n_bias > 0) {
        s->bias = malloc((size_t)p->n_bias * sizeof(*s->bias));
        if (!s->bias)
            goto err;
        memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof(*s->bias));
    }
    s->p.bias = s->bias;
    uint64_t seed = p->seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&seed);
    return s;
err:
    sampler_free(s);
    return NULL;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->pos);
    free(s->hist);
    free(s->work);
    free(s->keys);
    free(s->bias);
    free(s);
}

void sampler_accept(struct sampler *s, int32_t token, int is_prompt)
{
    if (token < 0 || token >= s->n_vocab)
        return; /* not a token of this vocabulary: nothing to penalize */
    if (!s->pos[token]) {
        s->hist[s->n_hist] = (struct sample_hist){token, 0};
        s->pos[token] = ++s->n_hist;
    }
    struct sample_hist *h = &s->hist[s->pos[token] - 1];
    if (!is_prompt && h->count < INT32_MAX)
        h->count++;
}

static struct sample_ctx sampler_ctx(struct sampler *s)
{
    return (struct sample_ctx){&s->p, s->rng, s->hist, s->n_hist, NULL, 0,
                               s->n_vocab, s->work, s->keys};
}

/* Bias and penalties into s->work. A bias of -100 or less bans the token
 * (OpenAI's documented meaning); other biases are added. Repetition penalty
 * (llama/HF): a positive logit is divided by it, a negative one multiplied.
 * Presence/frequency (OpenAI): logit -= presence*(count>0) + frequency*count
 * over generated tokens. */
static void apply_bias_penalties(struct sample_ctx *s, const float *logits)
{
    const struct sample_params *p = s->p;
    for (int32_t i = 0; i < s->n_vocab; i++)
        s->work[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    for (int32_t m = 0; m < s->n_mask; m++) /* the caller's masking of logits */
        if (s->mask[m] >= 0 && s->mask[m] < s->n_vocab)
            s->work[s->mask[m]] = -INFINITY;
    for (int32_t b = 0; b < p->n_bias; b++) {
        int32_t t = p->bias[b].token;
        if (t < 0 || t >= s->n_vocab)
            continue;
        s->work[t] = p->bias[b].bias <= -100.f ? -INFINITY : s->work[t] + p->bias[b].bias;
    }
    int rep = p->repetition_penalty != 1.f && p->repetition_penalty > 0.f;
    int pf = p->presence_penalty != 0.f || p->frequency_penalty != 0.f;
    if (!rep && !pf)
        return;
    for (int32_t k = 0; k < s->n_hist; k++) {
        int32_t t = s->hist[k].token, count = s->hist[k].count;
        float l = s->work[t];
        if (rep) /* every history token occurred in the prompt or the output */
            l = l > 0.f ? l / p->repetition_penalty : l * p->repetition_penalty;
        if (pf && count > 0)
            l -= p->presence_penalty + p->frequency_penalty * (float)count;
        s->work[t] = l;
    }
}

void sampler_penalized_logits(struct sampler *s, const float *logits, float *out)
{
    struct sample_ctx c = sampler_ctx(s);
    apply_bias_penalties(&c, logits);
    memcpy(out, s->work, (size_t)s->n_vocab * sizeof(float));
}

int32_t sample_argmax(const float *logits, int32_t n_vocab)
{
    int32_t best = 0;
    float bv = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (logits[i] > bv) { /* strict: ties keep the lower id; NaN never wins */
            bv = logits[i];
            best = i;
        }
    }
    return best;
}

/* Top k of the finite logits in s->work into keys[0..k), sorted. For a small
 * k a min-heap of keys in one pass (almost every logit fails the first
 * comparison); for a large k quickselect over all keys. Returns the count. */
static int64_t top_k_keys(struct sample_ctx *s, int64_t k)
{
    uint64_t *h = s->keys;
    int64_t n = 0;
    if (k <= 512) {
        for (int32_t i = 0; i < s->n_vocab; i++) {
            if (!(s->work[i] > -INFINITY))
                continue;
            uint64_t key = make_key(s->work[i], i);
            int64_t j;
            if (n < k) { /* sift up */
                j = n++;
                while (j > 0 && h[(j - 1) / 2] > key) {
                    h[j] = h[(j - 1) / 2];
                    j = (j - 1) / 2;
                }
            } else if (key > h[0]) { /* replace the smallest, sift down */
                j = 0;
                for (;;) {
                    int64_t c = 2 * j + 1;
                    if (c >= n)
                        break;
                    if (c + 1 < n && h[c + 1] < h[c])
                        c++;
                    if (h[c] >= key)
                        break;
                    h[j] = h[c];
                    j = c;
                }
            } else {
                continue;
            }
            h[j] = key;
        }
    } else {
        for (int32_t i = 0; i < s->n_vocab; i++)
            if (s->work[i] > -INFINITY)
                h[n++] = make_key(s->work[i], i);
        select_top(h, n, k);
        if (n > k)
            n = k;
    }
    qsort(h, (size_t)n, sizeof(uint64_t), cmp_key_desc);
    return n;
}

/* Top-p over every finite logit without sorting the vocabulary: bucket the
 * logits by distance to the max (TP_BINS bins over TP_RANGE nats; the last
 * bin takes everything further), find the bin where the mass crosses top_p,
 * and sort only that bin. keys[0..return) get the kept tokens: those of the
 * higher bins (in id order), then the crossing bin's prefix in logit order. */
#define TP_BINS 1024
#define TP_RANGE 32.f

static int tp_bin(float l, float lmax)
{
    float d = (lmax - l) * ((float)TP_BINS / TP_RANGE);
    return d < (float)(TP_BINS - 1) ? (int)d : TP_BINS - 1;
}

static int64_t top_p_keys(struct sample_ctx *s, float lmax, float top_p)
{
    double mass[TP_BINS] = {0};
    double z = 0.0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = s->work[i];
        if (!(l > -INFINITY))
            continue;
        double w = expf(l - lmax);
        mass[tp_bin(l, lmax)] += w;
        z += w;
    }
    double target = (double)top_p * z, cum = 0.0;
    int cross = TP_BINS - 1;
    for (int b = 0; b < TP_BINS; b++) {
        if (cum + mass[b] >= target) {
            cross = b;
            break;
        }
        cum += mass[b];
    }
    int64_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = s->work[i];
        if (l > -INFINITY && tp_bin(l, lmax) < cross)
            s->keys[n++] = make_key(l, i);
    }
    int64_t start = n;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = s->work[i];
        if (l > -INFINITY && tp_bin(l, lmax) == cross)
            s->keys[n++] = make_key(l, i);
    }
    qsort(s->keys + start, (size_t)(n - start), sizeof(uint64_t), cmp_key_desc);
    for (int64_t i = start; i < n; i++) {
        cum += expf(key_logit(s->keys[i]) - lmax);
        if (cum >= target)
            return i + 1;
    }
    return n; /* rounding: keep the whole bin */
}

static int32_t sample_ctx_step(struct sample_ctx *s, const float *logits)
{
    const struct sample_params *p = s->p;
    apply_bias_penalties(s, logits);
    int32_t best = sample_argmax(s->work, s->n_vocab);
    float lmax = s->work[best];
    if (!(p->temperature > 0.f) || lmax == -INFINITY)
        return best; /* greedy, or everything banned */
    float lmin = p->min_p > 0.f ? lmax + logf(p->min_p) : -INFINITY;

    if (!(p->top_k > 0 && p->top_k < s->n_vocab) && !(p->top_p < 1.f)) {
        /* no ranking filter: min-p and the draw straight over the vocabulary
         * (weights replace the logits in work) */
        double z = 0.0;
        for (int32_t i = 0; i < s->n_vocab; i++) {
            float l = s->work[i];
            /* divide (not multiply by 1/T): 0/T stays 0 for a tiny T */
            float w = l > -INFINITY && l >= lmin ? expf((l - lmax) / p->temperature) : 0.f;
            s->work[i] = w;
            z += w;
        }
        double r = rng_uniform(s) * z, acc = 0.0;
        int32_t last = best;
        for (int32_t i = 0; i < s->n_vocab; i++) {
            if (s->work[i] == 0.f)
                continue;
            acc += s->work[i];
            last = i;
            if (r < acc)
                return i;
        }
        return last; /* r == z after rounding */
    }

    int64_t n;
    if (p->top_k > 0 && p->top_k < s->n_vocab) {
        n = top_k_keys(s, p->top_k);
        if (p->top_p < 1.f) { /* over the k survivors, in order */
            double z = 0.0, cum = 0.0;
            for (int64_t i = 0; i < n; i++)
                z += expf(key_logit(s->keys[i]) - lmax);
            for (int64_t i = 0; i < n; i++) {
                cum += expf(key_logit(s->keys[i]) - lmax);
                if (cum >= (double)p->top_p * z) {
                    n = i + 1;
                    break;
                }
            }
        }
    } else {
        n = top_p_keys(s, lmax, p->top_p);
    }

    if (p->min_p > 0.f) {
        /* p_i >= min_p * p_max  <=>  l_i >= lmax + log(min_p) */
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++)
            if (key_logit(s->keys[i]) >= lmin)
                s->keys[m++] = s->keys[i];
        n = m;
    }
    if (n <= 1)
        return n == 1 ? key_id(s->keys[0]) : best;

    /* temperature, softmax weights (stored in work, free now), draw */
    double z = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float w = expf((key_logit(s->keys[i]) - lmax) / p->temperature);
        s->work[key_id(s->keys[i])] = w;
        z += w;
    }
    double r = rng_uniform(s) * z, acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        acc += s->work[key_id(s->keys[i])];
        if (r < acc)
            return key_id(s->keys[i]);
    }
    return key_id(s->keys[n - 1]); /* r == z after rounding */
}

int32_t sampler_sample(struct sampler *s, const float *logits)
{
    struct sample_ctx c = sampler_ctx(s);
    return sample_ctx_step(&c, logits);
}

float sample_logprobs(const float *logits, int32_t n_vocab, int32_t token, int n,
                      int32_t *top_ids, float *top_lps)
{
    float lmax = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > lmax)
            lmax = logits[i];
    double z = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (logits[i] > -INFINITY) /* also skips NaN */
            z += exp((double)logits[i] - (double)lmax);
    double lse = (double)lmax + log(z); /* -inf when every logit is */

    if (n > n_vocab)
        n = n_vocab;
    int got = 0;
    for (int32_t i = 0; i < n_vocab && n > 0; i++) {
        float l = isnan(logits[i]) ? -INFINITY : logits[i];
        /* strictly better than the current last: ties keep the lower id */
        if (got == n && !(l > top_lps[n - 1]))
            continue;
        int k = got < n ? got++ : n - 1;
        while (k > 0 && l > top_lps[k - 1]) {
            top_lps[k] = top_lps[k - 1];
            top_ids[k] = top_ids[k - 1];
            k--;
        }
        top_lps[k] = l;
        top_ids[k] = i;
    }
    for (int k = 0; k < got; k++)
        top_lps[k] = top_lps[k] > -INFINITY ? (float)((double)top_lps[k] - lse) : -INFINITY;

    if (token < 0 || token >= n_vocab || !(logits[token] > -INFINITY))
        return -INFINITY;
    return (float)((double)logits[token] - lse);
}

/* ------------------------------------------------------------ flat state */

int sampler_export(const struct sampler *s, const int32_t *mask, int32_t n_mask,
                   int32_t cap_hist, void *blob, size_t bytes)
{
    const struct sample_params *p = &s->p;
    if (n_mask < 0 || cap_hist < s->n_hist ||
        bytes < sample_state_bytes(p->n_bias, n_mask, cap_hist))
        return -1;
    struct sample_state *st = blob;
    memset(st, 0, sizeof(*st));
    memcpy(st->rng, s->rng, sizeof(st->rng));
    st->temperature = p->temperature;
    st->top_k = p->top_k;
    st->top_p = p->top_p;
    st->min_p = p->min_p;
    st->log_min_p = p->min_p > 0.f ? logf(p->min_p) : 0.f;
    st->repetition_penalty = p->repetition_penalty;
    st->presence_penalty = p->presence_penalty;
    st->frequency_penalty = p->frequency_penalty;
    st->n_bias = p->n_bias;
    st->n_mask = n_mask;
    st->n_hist = s->n_hist;
    st->cap_hist = cap_hist;
    if (p->n_bias > 0)
        memcpy(sample_state_bias(st), p->bias, (size_t)p->n_bias * sizeof(*p->bias));
    if (n_mask > 0)
        memcpy(sample_state_mask(st), mask, (size_t)n_mask * sizeof(*mask));
    if (s->n_hist > 0)
        memcpy(sample_state_hist(st), s->hist, (size_t)s->n_hist * sizeof(*s->hist));
    return 0;
}

int32_t sample_state_step(struct sample_state *st, int32_t n_vocab, const float *logits,
                          int masked, float *work, uint64_t *keys)
{
    struct sample_params p;
    sample_params_default(&p);
    p.temperature = st->temperature;
    p.top_k = st->top_k;
    p.top_p = st->top_p;
    p.min_p = st->min_p;
    p.repetition_penalty = st->repetition_penalty;
    p.presence_penalty = st->presence_penalty;
    p.frequency_penalty = st->frequency_penalty;
    p.bias = sample_state_bias(st);
    p.n_bias = st->n_bias;
    struct sample_hist *h = sample_state_hist(st);
    struct sample_ctx c = {&p, st->rng, h, st->n_hist, sample_state_mask(st),
                           masked ? st->n_mask : 0, n_vocab, work, keys};
    const int32_t t = sample_ctx_step(&c, logits);
    /* sampler_accept(t, 0) on the list */
    if (t >= 0 && t < n_vocab) {
        int32_t k = 0;
        while (k < st->n_hist && h[k].token != t)
            k++;
        if (k == st->n_hist && k < st->cap_hist)
            h[st->n_hist++] = (struct sample_hist){t, 0};
        if (k < st->n_hist && h[k].count < INT32_MAX)
            h[k].count++;
    }
    return t;
}
