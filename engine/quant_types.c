/* quant_types — the table of ggml tensor types: name, block size in elements
 * and in bytes, and whether the CPU engine computes with the type.
 *
 * Split from quant.c so the GGUF reader (which must size every tensor of any
 * file it describes) does not depend on the numeric code. Values are ggml's
 * type ids and block sizes as documented by the GGUF format; ids that ggml
 * removed (4, 5, 31-33, 36-38) are unknown here (block size 0).
 * Pure functions: any thread.
 */
#include "quant.h"

struct quant_type_info {
    const char *name;
    int blck;     /* elements per block; 0 = unknown id */
    size_t bytes; /* bytes per block */
    int supported;
};

static const struct quant_type_info quant_types[QT_COUNT] = {
    [QT_F32] = {"f32", 1, 4, 1},
    [QT_F16] = {"f16", 1, 2, 1},
    [QT_Q4_0] = {"q4_0", QK4_0, sizeof(struct block_q4_0), 1},
    [QT_Q4_1] = {"q4_1", 32, 20, 0},
    [QT_Q5_0] = {"q5_0", 32, 22, 0},
    [QT_Q5_1] = {"q5_1", 32, 24, 0},
    [QT_Q8_0] = {"q8_0", QK8_0, sizeof(struct block_q8_0), 1},
    [QT_Q8_1] = {"q8_1", 32, 36, 0},
    [QT_Q2_K] = {"q2_K", QK_K, 84, 0},
    [QT_Q3_K] = {"q3_K", QK_K, 110, 0},
    [QT_Q4_K] = {"q4_K", QK_K, sizeof(struct block_q4_K), 1},
    [QT_Q5_K] = {"q5_K", QK_K, sizeof(struct block_q5_K), 1},
    [QT_Q6_K] = {"q6_K", QK_K, sizeof(struct block_q6_K), 1},
    [QT_Q8_K] = {"q8_K", QK_K, sizeof(struct block_q8_K), 0},
    [QT_IQ2_XXS] = {"iq2_xxs", QK_K, 66, 0},
    [QT_IQ2_XS] = {"iq2_xs", QK_K, 74, 0},
    [QT_IQ3_XXS] = {"iq3_xxs", QK_K, 98, 0},
    [QT_IQ1_S] = {"iq1_s", QK_K, 50, 0},
    [QT_IQ4_NL] = {"iq4_nl", 32, 18, 0},
    [QT_IQ3_S] = {"iq3_s", QK_K, 110, 0},
    [QT_IQ2_S] = {"iq2_s", QK_K, 82, 0},
    [QT_IQ4_XS] = {"iq4_xs", QK_K, 136, 0},
    [QT_I8] = {"i8", 1, 1, 0},
    [QT_I16] = {"i16", 1, 2, 0},
    [QT_I32] = {"i32", 1, 4, 0},
    [QT_I64] = {"i64", 1, 8, 0},
    [QT_F64] = {"f64", 1, 8, 0},
    [QT_IQ1_M] = {"iq1_m", QK_K, 56, 0},
    [QT_BF16] = {"bf16", 1, 2, 1},
    [QT_TQ1_0] = {"tq1_0", QK_K, 54, 0},
    [QT_TQ2_0] = {"tq2_0", QK_K, 66, 0},
    [QT_MXFP4] = {"mxfp4", 32, 17, 0},
};

static const struct quant_type_info *quant_info(int type)
{
    if (type < 0 || type >= QT_COUNT || quant_types[type].blck == 0)
        return NULL;
    return &quant_types[type];
}

const char *quant_type_name(int type)
{
    const struct quant_type_info *t = quant_info(type);
    return t ? t->name : NULL;
}

int quant_block_elems(int type)
{
    const struct quant_type_info *t = quant_info(type);
    return t ? t->blck : 0;
}

size_t quant_block_bytes(int type)
{
    const struct quant_type_info *t = quant_info(type);
    return t ? t->bytes : 0;
}

int quant_type_supported(int type)
{
    const struct quant_type_info *t = quant_info(type);
    return t ? t->supported : 0;
}

/* 0 for an unknown type or an n that is not a whole number of blocks: callers
 * on untrusted shapes validate first (gguf.c does), so 0 signals a bug. */
size_t quant_row_bytes(int type, int64_t n)
{
    const struct quant_type_info *t = quant_info(type);
    if (!t || n < 0 || n % t->blck != 0)
        return 0;
    return (size_t)(n / t->blck) * t->bytes;
}
