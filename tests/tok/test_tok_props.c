/* test_tok_props — round-trip properties of the real vocabularies.
 *
 * For each vocab (llama-spm, llama-bpe, qwen2 from ../shared/vocab and the
 * stories260K model):
 *  - random valid UTF-8 (ASCII, accents, CJK, emoji, combining marks, odd
 *    whitespace, digits, apostrophes): decode(encode(s)) == s, and the
 *    streaming decoder gives the same text;
 *  - random bytes (mostly invalid UTF-8): encoding does not crash and is
 *    still lossless (byte fallback / byte-level BPE keep every byte); the
 *    streaming decoder emits only valid UTF-8, never more than
 *    tok_stream_cap() per push, and equals the whole decode with each
 *    ill-formed subpart replaced by U+FFFD;
 *  - every single token: its text encodes back to text that decodes to the
 *    same bytes, and to that very token in most cases (counted, reported);
 *    control/user-defined tokens are matched whole with parse_special;
 *  - random id sequences through the streaming decoder (tokens that hold
 *    part of a character included).
 * Deterministic: a fixed-seed xorshift generator.
 */
#include "engine/unicode.h"
#include "tests/tok/tok_test.h"
#include "tests/xorshift.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    return (uint32_t)(rng_step(&rng_state) >> 11);
}

/* A random valid UTF-8 string of up to max_cp code points into buf (>= 4 * max_cp). */
static size_t random_utf8(char *buf, int max_cp)
{
    static const uint32_t pool[] = {
        ' ',    ' ',     '\t',    '\n',    '\r',   '\'',    '\'',   's',     'S',     't',    'l',    'L', 'd',
        'a',    'Z',     '0',     '7',     '.',    ',',     '!',    '<',     '|',     '>',    '_',    '-', 0xE9,
        0xBD,   0xA0,    0x85,    0x301,   0x663,  0x5D0,   0xE01,  0x3000,  0x2003,  0x200D, 0xFE0F, 0x4E2D, 0x6587,
        0x3042, 0xAC00,  0x1F600, 0x1F680, 0x2028, 0xFEFF,  0xAD,   0x10348, 0xB2,    0x2160, 0x1680, 0x7F, 0x1C,
        0x0B,   0x10FFFD};
    int n = (int)(rnd() % (unsigned)max_cp) + 1;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        uint32_t cp;
        switch (rnd() % 4) {
        case 0: cp = 0x20 + rnd() % 0x5F; break;             /* printable ASCII */
        case 1: cp = 0x80 + rnd() % (0x3000 - 0x80); break;  /* BMP low */
        case 2: cp = pool[rnd() % (sizeof(pool) / sizeof(pool[0]))]; break;
        default: cp = rnd() % 0x110000; break;               /* anything */
        }
        if (cp >= 0xD800 && cp <= 0xDFFF)
            cp = 'x';
        o += (size_t)unicode_utf8_encode(cp, buf + o);
    }
    return o;
}

/* Independent reference for the stream: replace ill-formed subparts of a
 * whole byte string with U+FFFD. */
static size_t sanitize(const char *in, size_t n, char *out)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        int d = unicode_utf8_decode((const unsigned char *)in + i, n - i, &cp);
        if (d > 0) {
            memcpy(out + o, in + i, (size_t)d);
            o += (size_t)d;
            i += (size_t)d;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += d < 0 ? (size_t)-d : n - i; /* a truncated tail is one subpart */
        }
    }
    return o;
}

static int valid_utf8(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int d = unicode_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (d <= 0)
            return 0;
        i += (size_t)d;
    }
    return 1;
}

/* Stream ids; returns the concatenated output (malloc'd) and checks each piece. */
static char *stream_all(const struct tok *t, const int32_t *ids, size_t n, int render, size_t *len)
{
    struct tok_stream st;
    size_t cap = tok_stream_cap(t), o = 0, ocap = 64;
    char *chunk = malloc(cap), *all = malloc(ocap);
    tok_stream_init(&st, t, render);
    for (size_t i = 0; i <= n; i++) {
        int k = i < n ? tok_stream_push(&st, ids[i], chunk, cap) : tok_stream_flush(&st, chunk, cap);
        CHECK(k >= 0 && (size_t)k <= cap);
        if (k < 0)
            break;
        CHECK(valid_utf8(chunk, (size_t)k)); /* never part of a character */
        while (o + (size_t)k > ocap)
            all = realloc(all, ocap *= 2);
        memcpy(all + o, chunk, (size_t)k);
        o += (size_t)k;
    }
    free(chunk);
    *len = o;
    return all;
}

static void roundtrip(const struct tok *t, const char *s, size_t n, const char *what)
{
    size_t nid, need, slen;
    int32_t *ids = tt_encode(t, s, n, 0, 0, &nid);
    need = tok_decode(t, ids, nid, 0, 1, NULL, 0);
    char *back = malloc(need + 1);
    tok_decode(t, ids, nid, 0, 1, back, need + 1);
    /* SPM cannot tell U+2581 in the text from a space: expect spaces there */
    char *exp = malloc(n + 1);
    size_t en = 0;
    for (size_t i = 0; i < n; i++) {
        if (tok_kind(t) == TOK_KIND_SPM && i + 2 < n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
            exp[en++] = ' ';
            i += 2;
        } else {
            exp[en++] = s[i];
        }
    }
    if (need != en || memcmp(back, exp, en) != 0) {
        fprintf(stderr, "%s: round trip of %zu bytes gives %zu bytes\n", what, n, need);
        fails++;
    }
    for (size_t i = 0; i < nid; i++)
        CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t));
    /* the stream equals the whole decode, sanitized (no stripping there) */
    size_t whole_n = tok_decode(t, ids, nid, 0, 0, NULL, 0);
    char *whole = malloc(whole_n + 1), *ref = malloc(3 * whole_n + 3);
    tok_decode(t, ids, nid, 0, 0, whole, whole_n + 1);
    size_t ref_n = sanitize(whole, whole_n, ref);
    char *st = stream_all(t, ids, nid, 0, &slen);
    CHECK(slen == ref_n && memcmp(st, ref, ref_n) == 0);
    free(st);
    free(ref);
    free(whole);
    free(back);
    free(exp);
    free(ids);
}

static void check_vocab(const char *rel)
{
    struct gguf_file *f;
    struct tok *t;
    char buf[4096], what[300];
    int32_t n_vocab;
    size_t exact = 0, normal = 0;

    if (tt_open(rel, &f, &t))
        return;
    n_vocab = tok_n_vocab(t);

    for (int i = 0; i < 400; i++) {
        size_t n = random_utf8(buf, 40);
        snprintf(what, sizeof(what), "%s utf8 #%d", rel, i);
        roundtrip(t, buf, n, what);
    }
    for (int i = 0; i < 400; i++) {
        size_t n = rnd() % 64 + 1;
        for (size_t j = 0; j < n; j++)
            buf[j] = (char)(rnd() % 4 == 0 ? rnd() % 0x80 : 0x80 + rnd() % 0x80);
        snprintf(what, sizeof(what), "%s bytes #%d", rel, i);
        roundtrip(t, buf, n, what);
    }

    /* every token alone */
    for (int32_t id = 0; id < n_vocab; id++) {
        char piece[8192];
        int k = tok_token_bytes(t, id, 1, piece, sizeof(piece));
        size_t nid, plen;
        const char *raw = tok_piece(t, id, &plen);
        CHECK(k >= 0 && (size_t)k <= tok_max_token_bytes(t) && raw);
        if (k <= 0)
            continue;
        if (tok_is_special(t, id)) {
            int32_t *ids = tt_encode(t, piece, (size_t)k, 0, 1, &nid);
            /* whole-token match; a duplicate text may map to another id */
            size_t ol;
            const char *other = nid == 1 ? tok_piece(t, ids[0], &ol) : NULL;
            CHECK(nid == 1 && other && ol == plen && memcmp(other, raw, plen) == 0);
            free(ids);
            continue;
        }
        int32_t *ids = tt_encode(t, piece, (size_t)k, 0, 0, &nid);
        size_t need = tok_decode(t, ids, nid, 0, 1, NULL, 0);
        char *back = malloc(need + 1);
        tok_decode(t, ids, nid, 0, 1, back, need + 1);
        if (need != (size_t)k || memcmp(back, piece, (size_t)k) != 0) {
            fprintf(stderr, "%s: token %d does not round trip\n", rel, id);
            fails++;
        }
        free(back);
        if (tok_kind(t) == TOK_KIND_BPE) {
            normal++;
            exact += nid == 1 && ids[0] == id;
        } else if (piece[0] == ' ' && k > 1) {
            /* SPM puts the leading space back itself: encode the rest; pieces
             * without a leading space cannot come out alone (the text gets one) */
            normal++;
            free(ids);
            ids = tt_encode(t, piece + 1, (size_t)k - 1, 0, 0, &nid);
            exact += nid == 1 && ids[0] == id;
        }
        free(ids);
    }
    printf("%s: %zu/%zu %s tokens encode back to themselves alone\n", rel, exact, normal,
           tok_kind(t) == TOK_KIND_SPM ? "space-led" : "non-special");
    /* llama.cpp's own check; most tokens must come back as themselves */
    CHECK(exact * 10 >= normal * 8);

    /* random id sequences: the stream equals the sanitized whole decode */
    for (int i = 0; i < 300; i++) {
        int32_t ids[24];
        size_t n = rnd() % 24 + 1, slen, whole_n, ref_n;
        for (size_t j = 0; j < n; j++)
            ids[j] = (int32_t)(rnd() % (uint32_t)n_vocab);
        whole_n = tok_decode(t, ids, n, 1, 0, NULL, 0);
        char *whole = malloc(whole_n + 1), *ref = malloc(3 * whole_n + 3);
        tok_decode(t, ids, n, 1, 0, whole, whole_n + 1);
        ref_n = sanitize(whole, whole_n, ref);
        char *st = stream_all(t, ids, n, 1, &slen);
        CHECK(slen == ref_n && memcmp(st, ref, ref_n) == 0);
        free(st);
        free(ref);
        free(whole);
    }

    /* contract details */
    {
        size_t n;
        int32_t small[2];
        const char *txt = "Hello world, hello tokenizer";
        CHECK(tok_encode(t, txt, strlen(txt), 0, 0, NULL, 0, &n) == INF_ETOOBIG && n > 2);
        CHECK(tok_encode(t, txt, strlen(txt), 0, 0, small, 2, &n) == INF_ETOOBIG && n > 2);
        CHECK(tok_encode(t, "", 0, 0, 0, NULL, 0, &n) == 0 && n == 0);
        CHECK(tok_encode(t, NULL, 0, 1, 0, small, 2, &n) == 0 && n == (size_t)(tok_add_bos(t) + tok_add_eos(t)));
        CHECK(tok_token_bytes(t, -1, 0, buf, sizeof(buf)) == INF_EINVAL);
        CHECK(tok_token_bytes(t, n_vocab, 0, buf, sizeof(buf)) == INF_EINVAL);
        CHECK(tok_piece(t, n_vocab, NULL) == NULL);
        struct tok_stream st;
        tok_stream_init(&st, t, 0);
        CHECK(tok_stream_push(&st, n_vocab, buf, sizeof(buf)) == INF_EINVAL);
        if (tok_bos(t) >= 0) {
            CHECK(tok_token_bytes(t, tok_bos(t), 0, buf, sizeof(buf)) == 0); /* control: hidden */
            CHECK(tok_token_bytes(t, tok_bos(t), 1, buf, sizeof(buf)) > 0);
        }
        CHECK(tok_eos(t) < 0 || tok_is_eog(t, tok_eos(t)));
    }
    tok_free(t);
    gguf_close(f);
}

int main(void)
{
    struct gguf_file *f;
    struct tok *t;
    const char *vocabs[] = {"vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-llama-bpe.gguf",
                            "vocab/ggml-vocab-qwen2.gguf", "models/stories260K.gguf"};
    int present = 0;
    for (size_t i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        int rc = tt_open(vocabs[i], &f, &t);
        if (rc == 77)
            continue;
        present++;
        tok_free(t);
        gguf_close(f);
        check_vocab(vocabs[i]);
    }
    if (!present)
        return 77;

    /* streaming across a character split over tokens, by hand: qwen2 has
     * byte-level tokens for single bytes of a UTF-8 sequence */
    if (tt_open("vocab/ggml-vocab-qwen2.gguf", &f, &t) == 0) {
        size_t n;
        const char *emoji = " \xF0\x9F\x9A\x80"; /* U+1F680 after a space */
        int32_t *ids = tt_encode(t, emoji, 5, 0, 0, &n);
        CHECK(n >= 3); /* " \xF0\x9F", "\x9A", "\x80" in this vocab */
        struct tok_stream st;
        char out[4096];
        tok_stream_init(&st, t, 0);
        int total = 0;
        for (size_t i = 0; i + 1 < n; i++)
            total += tok_stream_push(&st, ids[i], out, sizeof(out));
        CHECK(total == 1); /* the space; the character is held until complete */
        CHECK(tok_stream_push(&st, ids[n - 1], out, 3) == INF_ETOOBIG); /* state kept */
        CHECK(tok_stream_push(&st, ids[n - 1], out, sizeof(out)) == 4 && memcmp(out, emoji + 1, 4) == 0);
        /* an unfinished character at the end flushes as U+FFFD */
        tok_stream_init(&st, t, 0);
        CHECK(tok_stream_push(&st, ids[0], out, sizeof(out)) == 1 && out[0] == ' ');
        CHECK(tok_stream_flush(&st, out, sizeof(out)) == 3 && memcmp(out, "\xEF\xBF\xBD", 3) == 0);
        CHECK(tok_stream_flush(&st, out, sizeof(out)) == 0);
        free(ids);
        tok_free(t);
        gguf_close(f);
    }
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
