/* sample — turn a row of logits into the next token.
 *
 * Order of operations (the same as llama.cpp's default chain where it has
 * the same knobs): logit bias -> penalties (repetition, presence, frequency)
 * -> greedy if temperature == 0 -> top-k -> top-p -> min-p -> temperature ->
 * draw with the per-request RNG. Same seed + same logits ⇒ same tokens.
 * A struct sampler belongs to one sequence; its scratch is allocated once in
 * sampler_new so sampling allocates nothing per token.
 */
#ifndef INFERD_SAMPLE_H
#define INFERD_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

struct sample_bias {
    int32_t token;
    float bias; /* added to the logit; <= -100 bans the token (OpenAI's
                 * meaning), +100 in practice forces it */
};

struct sample_params {
    float temperature;        /* 0 = greedy */
    int32_t top_k;            /* 0 = off */
    float top_p;              /* 1 = off */
    float min_p;              /* 0 = off */
    float repetition_penalty; /* 1 = off; applies to prompt + generated tokens */
    float presence_penalty;   /* 0 = off; generated tokens */
    float frequency_penalty;  /* 0 = off; generated tokens */
    uint64_t seed;
    const struct sample_bias *bias; /* copied by sampler_new */
    int32_t n_bias;
};

/* temperature 1, every filter and penalty off, seed 0, no bias. */
void sample_params_default(struct sample_params *p);

struct sampler;
/* Returns NULL on allocation failure. */
struct sampler *sampler_new(int32_t n_vocab, const struct sample_params *p);
void sampler_free(struct sampler *s);
/* Tell the sampler about tokens of the context: prompt tokens (is_prompt=1)
 * count for the repetition penalty only, generated ones for all penalties. */
void sampler_accept(struct sampler *s, int32_t token, int is_prompt);
/* Pick the next token from logits[n_vocab] (not modified). */
int32_t sampler_sample(struct sampler *s, const float *logits);

/* The logits after logit bias and penalties (the first two steps of
 * sampler_sample) into out[n_vocab]: for tests and debugging. */
void sampler_penalized_logits(struct sampler *s, const float *logits, float *out);

/* Log-softmax of the raw logits: the logprob of `token` and the top n (by
 * logit, ties by lower id) written to top_ids/top_lps. n may be 0; at most
 * n_vocab entries are written. NaN logits count as -inf; a token out of range
 * or at -inf gets -INFINITY. */
float sample_logprobs(const float *logits, int32_t n_vocab, int32_t token, int n,
                      int32_t *top_ids, float *top_lps);

/* Greedy argmax (ties: lowest id). */
int32_t sample_argmax(const float *logits, int32_t n_vocab);

/* ---- the sampler's state in flat form (for a backend's sample op) -------
 *
 * One contiguous block that holds everything a step needs, so a device can
 * keep it resident and update it in place: the parameters, the xoshiro256**
 * state, the logit bias, a mask (token ids set to -inf before everything
 * while a step asks for it: the scheduler's min_tokens masking of end
 * tokens), and the penalty history as a list of the distinct context tokens
 * with their counts among generated tokens (every entry counts for the
 * repetition penalty; order does not matter). Layout (shared by C and CUDA;
 * 8-byte aligned):
 *
 *   struct sample_state                  header
 *   struct sample_bias bias[n_bias]
 *   int32_t mask[n_mask]
 *   struct sample_hist hist[cap_hist]    n_hist of them in use
 *
 * A step over it (sample_state_step, or a backend's op) samples exactly as
 * sampler_sample would with the same parameters, accepted tokens and RNG
 * state, advances the RNG exactly as sampler_sample does (one draw when a
 * draw happens: not when greedy, everything banned, or one candidate left),
 * and then accepts the token as sampler_accept(token, 0) does. A history
 * that is full drops new tokens (size cap_hist for prompt + max_tokens and
 * it never is). */
struct sample_hist {
    int32_t token;
    int32_t count; /* occurrences among generated tokens */
};

struct sample_state {
    uint64_t rng[4];
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    float log_min_p; /* logf(min_p) from the host's libm (0 when min_p <= 0),
                      * so a device never needs a logf of its own */
    float repetition_penalty;
    float presence_penalty;
    float frequency_penalty;
    int32_t n_bias;
    int32_t n_mask;
    int32_t n_hist;
    int32_t cap_hist;
};

#ifdef __CUDACC__
#define SAMPLE_STATE_FN static inline __host__ __device__
#else
#define SAMPLE_STATE_FN static inline
#endif

/* Whether token i is in an allowed-token set of bits (bit i % 32 of word
 * i / 32: backend_sample_req.allow, a JSON constraint's). */
SAMPLE_STATE_FN int sample_allowed(const uint32_t *bits, int32_t i)
{
    return (int)((bits[i >> 5] >> (i & 31)) & 1u);
}

SAMPLE_STATE_FN size_t sample_state_bytes(int32_t n_bias, int32_t n_mask, int32_t cap_hist)
{
    size_t b = sizeof(struct sample_state) + (size_t)n_bias * sizeof(struct sample_bias) +
               (size_t)n_mask * sizeof(int32_t);
    b = (b + 7) & ~(size_t)7;
    return b + (size_t)cap_hist * sizeof(struct sample_hist);
}
SAMPLE_STATE_FN struct sample_bias *sample_state_bias(struct sample_state *st)
{
    return (struct sample_bias *)(st + 1);
}
SAMPLE_STATE_FN int32_t *sample_state_mask(struct sample_state *st)
{
    return (int32_t *)(sample_state_bias(st) + st->n_bias);
}
SAMPLE_STATE_FN struct sample_hist *sample_state_hist(struct sample_state *st)
{
    const size_t off = sample_state_bytes(st->n_bias, st->n_mask, 0);
    return (struct sample_hist *)((char *)st + off);
}

/* Write s's state (parameters, RNG, bias, history of accepted tokens) and
 * mask[n_mask] into blob (bytes >= sample_state_bytes(n_bias, n_mask,
 * cap_hist), 8-byte aligned). 0, or -1 when it does not fit (cap_hist below
 * the distinct tokens accepted so far, or bytes too small). */
int sampler_export(const struct sampler *s, const int32_t *mask, int32_t n_mask,
                   int32_t cap_hist, void *blob, size_t bytes);

/* One step over a flat state (the CPU reference of a backend's sample op):
 * logits[n_vocab] (not modified), masked first when `masked`; work[n_vocab]
 * and keys[n_vocab] are scratch. Returns the token; st is advanced and the
 * token accepted (see above). */
int32_t sample_state_step(struct sample_state *st, int32_t n_vocab, const float *logits,
                          int masked, float *work, uint64_t *keys);

#endif
