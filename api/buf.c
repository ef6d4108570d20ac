/* buf — growable buffers and JSON string escaping (see buf.h). */
#include "api/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/err.h"

int buf_reserve(struct buf *b, size_t n)
{
    if (n > SIZE_MAX / 2 - b->len - 1)
        return INF_ENOMEM;
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return INF_ENOMEM;
    b->p = p;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t n)
{
    if (buf_reserve(b, n))
        return INF_ENOMEM;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    char tmp[256];
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return INF_EINVAL;
    if ((size_t)n < sizeof(tmp))
        return buf_append(b, tmp, (size_t)n);
    if (buf_reserve(b, (size_t)n))
        return INF_ENOMEM;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

size_t buf_utf8_seq(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

int buf_utf8_valid(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = buf_utf8_seq(u + i, n - i);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

int buf_json_str(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    /* worst case: every byte becomes \u00XX (6) or U+FFFD (3) */
    if (n > SIZE_MAX / 8 || buf_reserve(b, n * 6 + 2))
        return INF_ENOMEM;
    char *o = b->p + b->len;
    *o++ = '"';
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c >= 0x80) {
            size_t l = buf_utf8_seq(u + i, n - i);
            if (l) {
                memcpy(o, u + i, l);
                o += l;
                i += l;
            } else {
                memcpy(o, "\xef\xbf\xbd", 3);
                o += 3;
                i++;
            }
            continue;
        }
        i++;
        switch (c) {
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                memcpy(o, "\\u00", 4);
                o[4] = hex[c >> 4];
                o[5] = hex[c & 15];
                o += 6;
            } else {
                *o++ = (char)c;
            }
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    b->p[b->len] = '\0';
    return 0;
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->p, b->p + n, b->len - n);
        b->len -= n;
    }
    if (b->p)
        b->p[b->len] = '\0';
}

void buf_clear(struct buf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

void buf_free(struct buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}
