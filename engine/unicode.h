/* unicode — code point properties and UTF-8 helpers for the tokenizers.
 *
 * unicode_props() reads a two-stage table generated from the Unicode
 * Character Database by tools/gen_unicode.py (engine/unicode_data.c): the
 * general category class (what \p{L}, \p{N}, ... match) and White_Space
 * (what \s matches). The UTF-8 decoder never reads past the length it is
 * given and classifies invalid input the way WHATWG/Unicode "maximal
 * subpart" decoding does, so callers can replace or keep bad bytes.
 *
 * Pure functions over constant tables: any thread may call them.
 */
#ifndef INFERD_UNICODE_H
#define INFERD_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Category class in bits 0-2 of a property byte. */
enum unicode_cat {
    UNICODE_CN = 0, /* unassigned (and anything past U+10FFFF) */
    UNICODE_L = 1,  /* letters: Lu Ll Lt Lm Lo */
    UNICODE_N = 2,  /* numbers: Nd Nl No */
    UNICODE_M = 3,  /* marks: Mn Mc Me */
    UNICODE_P = 4,  /* punctuation */
    UNICODE_S = 5,  /* symbols */
    UNICODE_Z = 6,  /* separators: Zs Zl Zp */
    UNICODE_C = 7,  /* other assigned: Cc Cf Cs Co */
};
#define UNICODE_CAT_MASK 7u
#define UNICODE_WS 8u /* White_Space property bit */

#define UNICODE_TABLE_SHIFT 7
extern const uint16_t unicode_stage1[0x110000 >> UNICODE_TABLE_SHIFT];
extern const uint8_t unicode_stage2[];

/* Property byte of cp: category class | UNICODE_WS. */
static inline unsigned unicode_props(uint32_t cp)
{
    if (cp >= 0x110000)
        return UNICODE_CN;
    return unicode_stage2[((uint32_t)unicode_stage1[cp >> UNICODE_TABLE_SHIFT]
                           << UNICODE_TABLE_SHIFT) |
                          (cp & ((1u << UNICODE_TABLE_SHIFT) - 1))];
}

static inline unsigned unicode_cat(uint32_t cp)
{
    return unicode_props(cp) & UNICODE_CAT_MASK;
}

/* Decode one UTF-8 character from s[0..n), n >= 1.
 *  > 0: a valid character of that many bytes, *cp set;
 *    0: s[0..n) is a valid but truncated start of a character (more bytes
 *       may complete it);
 *  < 0: invalid; -k means the first k bytes (1..3, the "maximal subpart")
 *       form one ill-formed sequence to replace or skip.
 * Overlong forms, surrogates and values past U+10FFFF are invalid. */
int unicode_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Encode cp (< 0x110000) as UTF-8 into out[0..3]; returns the byte count,
 * or 0 for a value that is not a Unicode scalar value. */
int unicode_utf8_encode(uint32_t cp, char *out);

#endif
