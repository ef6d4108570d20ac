/* tok_decode — token ids to text: rendering (control tokens optional, the
 * SPM leading space) and the streaming decoder that holds back an
 * incomplete UTF-8 sequence and replaces invalid bytes with U+FFFD. */
#include <stdlib.h>
#include <string.h>

#include "engine/tok_impl.h"
#include "engine/unicode.h"

/* ---- decoding ------------------------------------------------------------------ */

/* The bytes id renders to (NULL/0 when it renders to nothing). */
static const char *tok_render(const struct tok *t, int32_t id, int render_special, size_t *n)
{
    int ty = t->type[id];
    *n = 0;
    if (ty == TOK_T_UNDEFINED || ty == TOK_T_UNUSED)
        return NULL;
    if (!render_special && (ty == TOK_T_CONTROL || ty == TOK_T_UNKNOWN))
        return NULL;
    *n = t->dec_off[id + 1] - t->dec_off[id];
    return t->dec + t->dec_off[id];
}

int tok_token_bytes(const struct tok *t, int32_t id, int render_special, char *buf, size_t cap)
{
    size_t n;
    const char *p;
    if (id < 0 || id >= t->n_vocab)
        return INF_EINVAL;
    p = tok_render(t, id, render_special, &n);
    if (n && buf)
        memcpy(buf, p, n < cap ? n : cap);
    return (int)n;
}

size_t tok_decode(const struct tok *t, const int32_t *ids, size_t n, int render_special, int strip_leading_space,
                  char *out, size_t cap)
{
    size_t o = 0;
    int strip = strip_leading_space && t->kind == TOK_KIND_SPM && t->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        const char *p;
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            continue;
        p = tok_render(t, ids[i], render_special, &k);
        if (strip && t->type[ids[i]] != TOK_T_CONTROL && t->type[ids[i]] != TOK_T_UNKNOWN) {
            /* the space the encoder put before the first text fragment */
            strip = 0;
            if (k && p[0] == ' ') {
                p++;
                k--;
            }
        }
        if (k && o < cap)
            memcpy(out + o, p, k < cap - o ? k : cap - o);
        o += k;
    }
    if (o < cap)
        out[o] = '\0';
    return o;
}

/* ---- streaming ------------------------------------------------------------------ */

void tok_stream_init(struct tok_stream *s, const struct tok *t, int render_special)
{
    memset(s, 0, sizeof(*s));
    s->t = t;
    s->render_special = render_special;
}

static const char tok_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

struct tok_out {
    char *p;
    size_t cap, n;
};

static void out_put(struct tok_out *o, const void *b, size_t k)
{
    if (o->n + k <= o->cap)
        memcpy(o->p + o->n, b, k);
    o->n += k;
}

/* Emit the complete characters of pending + piece into o; the new pending
 * tail (a valid but unfinished character) into np/nn. */
static void stream_run(const unsigned char *pend, int npend, const unsigned char *piece, size_t n, struct tok_out *o,
                       unsigned char *np, int *nn)
{
    size_t i = 0;
    uint32_t cp;
    *nn = 0;
    if (npend > 0) {
        /* finish the held character with bytes of the new piece */
        unsigned char c[4];
        int k = npend;
        memcpy(c, pend, (size_t)npend);
        for (;;) {
            int d = unicode_utf8_decode(c, (size_t)k, &cp);
            if (d > 0) {
                out_put(o, c, (size_t)d);
                break;
            }
            if (d < 0) {
                /* the held bytes were a valid start: the mismatch is the
                 * last byte taken from the piece, which starts afresh */
                out_put(o, tok_fffd, 3);
                i--;
                break;
            }
            if (i == n) { /* still unfinished: keep holding */
                memcpy(np, c, (size_t)k);
                *nn = k;
                return;
            }
            c[k++] = piece[i++];
        }
    }
    while (i < n) {
        int d = unicode_utf8_decode(piece + i, n - i, &cp);
        if (d > 0) {
            out_put(o, piece + i, (size_t)d);
            i += (size_t)d;
        } else if (d == 0) {
            memcpy(np, piece + i, n - i);
            *nn = (int)(n - i);
            return;
        } else {
            out_put(o, tok_fffd, 3);
            i += (size_t)-d;
        }
    }
}

int tok_stream_push(struct tok_stream *s, int32_t id, char *out, size_t cap)
{
    struct tok_out o = {out, cap, 0};
    unsigned char np[8];
    int nn;
    size_t n;
    const char *p;
    if (id < 0 || id >= s->t->n_vocab)
        return INF_EINVAL;
    p = tok_render(s->t, id, s->render_special, &n);
    stream_run(s->pending, s->n_pending, (const unsigned char *)p, n, &o, np, &nn);
    if (o.n > cap || o.n > INT32_MAX)
        return INF_ETOOBIG; /* nothing consumed: retry with a larger buffer */
    memcpy(s->pending, np, (size_t)nn);
    s->n_pending = nn;
    return (int)o.n;
}

int tok_stream_flush(struct tok_stream *s, char *out, size_t cap)
{
    if (s->n_pending == 0)
        return 0;
    if (cap < 3)
        return INF_ETOOBIG;
    memcpy(out, tok_fffd, 3);
    s->n_pending = 0;
    return 3;
}
