/* quant_blocks — ggml's type ids and block layouts, bit for bit, in one header
 * that compiles as C11 (engine/) and as CUDA C++ (engine/cuda/), so the CPU
 * and the GPU can never disagree on a struct. Leaf header: no functions.
 *
 * block_q8_1 is the GPU's activation block (ggml's layout): 32 int8 values,
 * their scale d and s = d * sum(qs), the term the K-quant mins and Q4_0's
 * -8 offset need, so a dot never re-sums the activations.
 */
#ifndef INFERD_QUANT_BLOCKS_H
#define INFERD_QUANT_BLOCKS_H

#include <stdint.h>

#ifdef __cplusplus
#define QUANT_STATIC_ASSERT static_assert
#else
#define QUANT_STATIC_ASSERT _Static_assert
#endif

/* Values are ggml's (GGUF tensor type ids). Only the types marked "supported"
 * compute; the others are known so GGUF files that hold them can be described. */
enum quant_type {
    QT_F32 = 0,   /* supported */
    QT_F16 = 1,   /* supported */
    QT_Q4_0 = 2,  /* supported */
    QT_Q4_1 = 3,
    QT_Q5_0 = 6,
    QT_Q5_1 = 7,
    QT_Q8_0 = 8,  /* supported */
    QT_Q8_1 = 9,
    QT_Q2_K = 10,
    QT_Q3_K = 11,
    QT_Q4_K = 12, /* supported */
    QT_Q5_K = 13, /* supported */
    QT_Q6_K = 14, /* supported */
    QT_Q8_K = 15, /* activations only */
    QT_IQ2_XXS = 16,
    QT_IQ2_XS = 17,
    QT_IQ3_XXS = 18,
    QT_IQ1_S = 19,
    QT_IQ4_NL = 20,
    QT_IQ3_S = 21,
    QT_IQ2_S = 22,
    QT_IQ4_XS = 23,
    QT_I8 = 24,
    QT_I16 = 25,
    QT_I32 = 26,
    QT_I64 = 27,
    QT_F64 = 28,
    QT_IQ1_M = 29,
    QT_BF16 = 30, /* supported */
    QT_TQ1_0 = 34,
    QT_TQ2_0 = 35,
    QT_MXFP4 = 39,
    QT_COUNT = 40,
};

#define QK4_0 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef uint16_t quant_f16; /* IEEE half, stored as bits */
typedef uint16_t quant_bf16;

struct block_q4_0 {
    quant_f16 d;
    uint8_t qs[QK4_0 / 2];
};
struct block_q8_0 {
    quant_f16 d;
    int8_t qs[QK8_0];
};
struct block_q4_K {
    quant_f16 d;
    quant_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
struct block_q5_K {
    quant_f16 d;
    quant_f16 dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    quant_f16 d;
};
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};

QUANT_STATIC_ASSERT(sizeof(struct block_q4_0) == 18, "ggml layout");
QUANT_STATIC_ASSERT(sizeof(struct block_q8_0) == 34, "ggml layout");
QUANT_STATIC_ASSERT(sizeof(struct block_q4_K) == 144, "ggml layout");
QUANT_STATIC_ASSERT(sizeof(struct block_q5_K) == 176, "ggml layout");
QUANT_STATIC_ASSERT(sizeof(struct block_q6_K) == 210, "ggml layout");
QUANT_STATIC_ASSERT(sizeof(struct block_q8_K) == 292, "ggml layout");

#define QK8_1 32
/* d and s as two halves, as ggml packs them (half2 ds on the GPU). */
struct block_q8_1 {
    quant_f16 d;
    quant_f16 s;
    int8_t qs[QK8_1];
};
QUANT_STATIC_ASSERT(sizeof(struct block_q8_1) == 36, "ggml layout");

#endif
