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

#endif
