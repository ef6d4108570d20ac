/* fuzz_tok — libFuzzer target for the tokenizer (engine/tok.c) on the three
 * vocabularies of ../shared/vocab, plus a corpus replay.
 *
 * Input: byte 0 picks the vocab (bits 0-1: llama-spm, llama-bpe, qwen2; 3
 * wraps to spm) and the flags (bit 2: parse_special, bit 3: add_special,
 * bit 4: render_special for the id pass); the rest is text. Each input:
 *  1. encode(text, no specials) -> every id in [0, n_vocab), and
 *     decode(ids, strip_leading_space) == text: the three vocabs are
 *     lossless (byte fallback / byte-level BPE), except that SPM cannot tell
 *     U+2581 in the text from a space (it is expected back as ' ');
 *  2. the same ids through tok_stream: each push fits tok_stream_cap(), is
 *     valid UTF-8 on its own, and the concatenation equals the whole decode
 *     with every ill-formed subpart replaced by U+FFFD (an independent
 *     validator below, not engine/unicode.c);
 *  3. encode with the flags of byte 0 -> ids in range; a too-small cap gives
 *     INF_ETOOBIG with the same count, and the prefix it wrote matches;
 *  4. the text read as little-endian 16-bit ids (mod n_vocab + 16, so some
 *     are out of range): tok_decode skips bad ids and never writes past cap;
 *     tok_stream rejects bad ids with INF_EINVAL and stays valid UTF-8.
 * A broken property calls abort() (libFuzzer reports it as a crash).
 *
 * Built with -fsanitize=fuzzer (clang, -DINFERD_LIBFUZZER) it is a fuzzer
 * (tools/fuzz.sh tok MINUTES). Otherwise main() replays the files and
 * directories given as arguments (meson: suite `fuzz`, the corpus in
 * tests/fuzz/corpus/tok), each from an exact-size heap copy. Vocabs come
 * from $INFERD_SHARED/vocab (default ../shared); missing ones skip (77).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/gguf.h"
#include "engine/tok.h"
#include "tests/read_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_NAME "fuzz_tok"
#include "tests/fuzz/vocabs.h"

static void fz_fail(const char *why, size_t n)
{
    fprintf(stderr, "fuzz_tok: %s (input of %zu bytes)\n", why, n);
    abort();
}

/* Length of the well-formed UTF-8 sequence at s (Unicode table 3-7), or 0. */
static size_t fz_utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if (c == 0xED) { len = 3; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c == 0xF4) { len = 4; hi = 0x8F; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return 0;
    if (n < 2 || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (i >= n || s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

static int fz_valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t d = fz_utf8_seq((const unsigned char *)s + i, n - i);
        if (!d)
            return 0;
        i += d;
    }
    return 1;
}

/* U+FFFD for each maximal ill-formed subpart (the "substitution of maximal
 * subparts" practice of Unicode ch. 3): the bytes a well-formed prefix of a
 * sequence covers go as one replacement. out needs 3 * n bytes. */
static size_t fz_sanitize(const char *in, size_t n, char *out)
{
    const unsigned char *s = (const unsigned char *)in;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t d = fz_utf8_seq(s + i, n - i);
        if (d) {
            memcpy(out + o, s + i, d);
            o += d;
            i += d;
            continue;
        }
        /* the longest prefix that could still start a sequence */
        unsigned c = s[i];
        size_t len = 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) { len = 3; lo = 0xA0; }
        else if (c == 0xED) { len = 3; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) len = 3;
        else if (c == 0xF0) { len = 4; lo = 0x90; }
        else if (c == 0xF4) { len = 4; hi = 0x8F; }
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        size_t k = 1;
        if (len && i + 1 < n && s[i + 1] >= lo && s[i + 1] <= hi) {
            k = 2;
            while (k < len && i + k < n && s[i + k] >= 0x80 && s[i + k] <= 0xBF)
                k++;
        }
        memcpy(out + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += k;
    }
    return o;
}

/* Encode with a cap that grows; NULL on INF_ENOMEM (not a finding). */
static int32_t *fz_encode(const struct tok *t, const char *s, size_t n, int add, int parse,
                          size_t *n_ids)
{
    size_t cap = n + 4;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (!ids)
        return NULL;
    int rc = tok_encode(t, s, n, add, parse, ids, cap, n_ids);
    if (rc == INF_ETOOBIG) {
        cap = *n_ids;
        int32_t *p = realloc(ids, (cap ? cap : 1) * sizeof(*ids));
        if (!p) {
            free(ids);
            return NULL;
        }
        ids = p;
        size_t again;
        rc = tok_encode(t, s, n, add, parse, ids, cap, &again);
        if (rc == 0 && again != cap)
            fz_fail("encode count changed between calls", n);
    }
    if (rc == INF_ENOMEM) {
        free(ids);
        return NULL;
    }
    if (rc != 0)
        fz_fail("encode failed on plain text", n);
    return ids;
}

/* Stream ids (some may be out of range) and check every piece; returns the
 * concatenation (malloc'd) or NULL on ENOMEM. */
static char *fz_stream(const struct tok *t, const int32_t *ids, size_t n, int render, size_t *len)
{
    size_t cap = tok_stream_cap(t), o = 0;
    /* every push emits at most cap bytes; the flush at most 3 */
    char *chunk = malloc(cap + 16), *all = malloc(cap * (n + 1) + 16);
    struct tok_stream st;
    if (!chunk || !all) {
        free(chunk);
        free(all);
        return NULL;
    }
    memset(chunk + cap, 0x5A, 16);
    tok_stream_init(&st, t, render);
    for (size_t i = 0; i <= n; i++) {
        int k = i < n ? tok_stream_push(&st, ids[i], chunk, cap) : tok_stream_flush(&st, chunk, cap);
        if (i < n && (ids[i] < 0 || ids[i] >= tok_n_vocab(t))) {
            if (k != INF_EINVAL)
                fz_fail("stream accepted an id out of range", n);
            continue;
        }
        if (k < 0 || (size_t)k > cap)
            fz_fail("stream push failed or overran its cap", n);
        if (!fz_valid_utf8(chunk, (size_t)k))
            fz_fail("stream emitted invalid UTF-8", n);
        memcpy(all + o, chunk, (size_t)k);
        o += (size_t)k;
    }
    for (int i = 0; i < 16; i++)
        if ((unsigned char)chunk[cap + i] != 0x5A)
            fz_fail("stream wrote past cap", n);
    free(chunk);
    *len = o;
    return all;
}

static void fz_one(const struct tok *t, int flags, const char *s, size_t n)
{
    int32_t nv = tok_n_vocab(t);
    size_t nid;
    int32_t *ids = fz_encode(t, s, n, 0, 0, &nid);
    if (!ids)
        return;
    for (size_t i = 0; i < nid; i++)
        if (ids[i] < 0 || ids[i] >= nv)
            fz_fail("encode produced an id out of range", n);

    /* 1. lossless */
    size_t need = tok_decode(t, ids, nid, 0, 1, NULL, 0);
    char *back = malloc(need + 1), *exp = malloc(n + 1);
    if (back && exp) {
        if (tok_decode(t, ids, nid, 0, 1, back, need + 1) != need)
            fz_fail("decode length changed between calls", n);
        if (back[need] != '\0')
            fz_fail("decode did not NUL-terminate", n);
        size_t en = 0;
        for (size_t i = 0; i < n; i++) {
            if (tok_kind(t) == TOK_KIND_SPM && i + 2 < n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                exp[en++] = ' ';
                i += 2;
            } else {
                exp[en++] = s[i];
            }
        }
        if (need != en || memcmp(back, exp, en) != 0)
            fz_fail("decode(encode(x)) != x", n);
    }
    free(back);
    free(exp);

    /* 2. the stream equals the sanitized whole decode (no stripping) */
    size_t wn = tok_decode(t, ids, nid, 0, 0, NULL, 0), sn;
    char *whole = malloc(wn + 1), *ref = malloc(3 * wn + 3);
    char *st = fz_stream(t, ids, nid, 0, &sn);
    if (whole && ref && st) {
        tok_decode(t, ids, nid, 0, 0, whole, wn + 1);
        size_t rn = fz_sanitize(whole, wn, ref);
        if (rn != sn || memcmp(ref, st, rn) != 0)
            fz_fail("stream != sanitized decode", n);
    }
    free(whole);
    free(ref);
    free(st);
    free(ids);

    /* 3. the flags of byte 0, and a cap that is too small */
    int parse = flags & 4 ? 1 : 0, add = flags & 8 ? 1 : 0;
    ids = fz_encode(t, s, n, add, parse, &nid);
    if (!ids)
        return;
    for (size_t i = 0; i < nid; i++)
        if (ids[i] < 0 || ids[i] >= nv)
            fz_fail("encode (specials) produced an id out of range", n);
    if (nid > 1) {
        size_t small = nid / 2, got = 0;
        int32_t *part = malloc((small + 1) * sizeof(*part));
        if (part) {
            part[small] = -77;
            int rc = tok_encode(t, s, n, add, parse, part, small, &got);
            if (rc != INF_ETOOBIG && rc != INF_ENOMEM)
                fz_fail("a too-small cap did not give INF_ETOOBIG", n);
            if (rc == INF_ETOOBIG && got != nid)
                fz_fail("INF_ETOOBIG with a different count", n);
            if (part[small] != -77)
                fz_fail("encode wrote past cap", n);
            free(part);
        }
    }
    free(ids);

    /* 4. the bytes as ids, some out of range */
    size_t nr = n / 2;
    int32_t *raw = malloc((nr + 1) * sizeof(*raw));
    if (!raw)
        return;
    for (size_t i = 0; i < nr; i++) {
        uint32_t v = (uint32_t)(unsigned char)s[2 * i] | (uint32_t)(unsigned char)s[2 * i + 1] << 8;
        /* spread over the whole vocab: 16 bits scaled, the top 16 out of range */
        raw[i] = (int32_t)((uint64_t)v * (uint64_t)(nv + 16) / 65536u) - (v & 1 ? 0 : 8);
    }
    int render = flags & 16 ? 1 : 0;
    size_t dn = tok_decode(t, raw, nr, render, (int)(nr & 1), NULL, 0);
    char *d = malloc(dn + 8);
    if (d) {
        memset(d, 0x5A, dn + 8);
        size_t cap = dn / 2 + 1; /* truncated decode: must stop at cap */
        size_t dn2 = tok_decode(t, raw, nr, render, (int)(nr & 1), d, cap);
        if (dn2 != dn)
            fz_fail("decode length depends on cap", n);
        for (size_t i = cap; i < dn + 8; i++)
            if ((unsigned char)d[i] != 0x5A)
                fz_fail("decode wrote past cap", n);
        free(d);
    }
    st = fz_stream(t, raw, nr, render, &sn);
    free(st);
    free(raw);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || fz_init() != 1)
        return 0;
    int v = data[0] & 3;
    if (v == 3)
        v = 0;
    fz_one(fz_t[v], data[0], (const char *)data + 1, size - 1);
    return 0;
}

#ifndef INFERD_LIBFUZZER
#include "tests/fuzz/replay.h"

int main(int argc, char **argv)
{
    return fuzz_vocab_main(argc, argv);
}
#endif
