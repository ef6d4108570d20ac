/* unicode — UTF-8 decoding/encoding (the property tables are generated, see
 * unicode_data.c). The decoder follows Unicode's table of well-formed byte
 * sequences (Table 3-7), so overlongs, surrogates and > U+10FFFF are
 * rejected with the maximal-subpart length. Any thread.
 */
#include "engine/unicode.h"

int unicode_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    int need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    uint32_t v;

    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        else if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90; /* overlong */
        else if (c == 0xF4)
            hi = 0x8F; /* > U+10FFFF */
    } else {
        return -1; /* continuation byte, C0/C1, F5..FF */
    }
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n)
            return 0; /* valid so far, truncated */
        unsigned char b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
            return -i;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need;
}

int unicode_utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return 0;
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp < 0x110000) {
        out[0] = (char)(0xF0 | (cp >> 18));
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}
