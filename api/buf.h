/* buf — a growable byte buffer and JSON string escaping for the API layer.
 *
 * Buffers grow by doubling, so appending a token's text or an SSE event
 * allocates only when a request's output outgrows what it had (amortized,
 * not per token). Thread: whoever owns the buffer (the loop thread).
 */
#ifndef INFERD_API_BUF_H
#define INFERD_API_BUF_H

#include <stddef.h>

struct buf {
    char *p;
    size_t len;
    size_t cap;
};

/* Make room for n more bytes (p stays NUL-terminated after appends). */
int buf_reserve(struct buf *b, size_t n);
int buf_append(struct buf *b, const void *data, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s[0..n) as a quoted JSON string. Invalid UTF-8 bytes become U+FFFD,
 * so the output is always valid JSON whatever the input. */
int buf_json_str(struct buf *b, const char *s, size_t n);
/* Drop the first n bytes. */
void buf_consume(struct buf *b, size_t n);
void buf_clear(struct buf *b);
void buf_free(struct buf *b);

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when s[0..n) does not
 * start with one (or it is truncated). */
size_t buf_utf8_seq(const unsigned char *s, size_t n);
/* 1 when s[0..n) is entirely valid UTF-8. */
int buf_utf8_valid(const char *s, size_t n);

#endif
