/* fuzz_chat — libFuzzer target for the chat template renderer
 * (api/chat_template.c) and the masked tokenization of its output, plus a
 * corpus replay.
 *
 * Input: byte 0 picks the family (bits 0-2 mod 6: chatml, llama3,
 * llama3.1, llama2, mistral, gemma), add_generation (bit 3), for chatml
 * Qwen3's reasoning turns (bit 4) and the empty think block (bit 5); byte 1 is the length L of a
 * "model template" text that follows (read by chat_template_detect and, for
 * the chatml default system prompt, chat_template_init); then messages,
 * each a role byte (mod 3 + 1) and a length byte, then that many content
 * bytes (any bytes: markers such as <|im_start|> included).
 *
 * Checked on every input:
 *  - detect and init never crash on the template text, and the default
 *    system prompt is NUL-terminated inside its buffer;
 *  - render gives 0 or INF_EINVAL (with a message), never anything else;
 *    on 0 the mask has one byte per text byte, rendering twice gives the
 *    same bytes, and every content byte of the output (mask 0) lies in a
 *    run that is part of one message's content (the template never turns
 *    content into its own bytes, and what is content came from a message);
 *  - with valid UTF-8 contents the text is valid UTF-8;
 *  - tokenized with tok_encode_masked on the family's own vocab (qwen2's
 *    for chatml, llama-bpe's for llama3/3.1, llama-spm's for the others),
 *    no control token comes from content bytes: the text of every control
 *    id found must sit on template bytes (mask 1) — ROBUSTNESS 22 for chat.
 * A broken property calls abort().
 *
 * Built with -fsanitize=fuzzer (clang, -DINFERD_LIBFUZZER) it is a fuzzer
 * (tools/fuzz.sh chat MINUTES); otherwise main() replays the files and
 * directories given (meson: suite `fuzz`, corpus tests/fuzz/corpus/chat).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/buf.h"
#include "api/chat_template.h"
#include "engine/err.h"
#include "engine/gguf.h"
#include "engine/tok.h"
#include "tests/read_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_MSGS 16

#define FZ_NAME "fuzz_chat"
#include "tests/fuzz/vocabs.h"

static void fz_fail(const char *why)
{
    fprintf(stderr, "fuzz_chat: %s\n", why);
    abort();
}

/* The vocab a family's markers belong to. */
static const struct tok *fz_vocab(int family)
{
    switch (family) {
    case CHAT_TEMPLATE_CHATML: return fz_t[2];
    case CHAT_TEMPLATE_LLAMA3:
    case CHAT_TEMPLATE_LLAMA31: return fz_t[1];
    default: return fz_t[0];
    }
}

/* bos / eos texts as a model of the family has them */
static void fz_bos_eos(int family, const char **bos, const char **eos)
{
    switch (family) {
    case CHAT_TEMPLATE_CHATML: *bos = NULL; *eos = "<|im_end|>"; break;
    case CHAT_TEMPLATE_LLAMA3:
    case CHAT_TEMPLATE_LLAMA31: *bos = "<|begin_of_text|>"; *eos = "<|eot_id|>"; break;
    case CHAT_TEMPLATE_GEMMA: *bos = "<bos>"; *eos = "<eos>"; break;
    default: *bos = "<s>"; *eos = "</s>"; break;
    }
}

/* Text bytes at off that the piece p[0..k) spells, or -1. SPM: a space of
 * the piece may stand for U+2581 in the text, and a leading space may be
 * the space prefix (not in the text at all). */
static long fz_piece_at(const struct buf *text, size_t off, const char *p, size_t k, int spm)
{
    size_t o = off, j = 0;
    while (j < k) {
        if (o < text->len && text->p[o] == p[j]) {
            o++;
            j++;
        } else if (spm && p[j] == ' ' && o + 3 <= text->len && !memcmp(text->p + o, "\xe2\x96\x81", 3)) {
            o += 3;
            j++;
        } else if (spm && p[j] == ' ' && j == 0) {
            j++; /* the space prefix */
        } else {
            return -1;
        }
    }
    return (long)(o - off);
}

static void fz_check_tokens(int family, const struct buf *text, const struct buf *mask)
{
    const struct tok *t = fz_vocab(family);
    size_t cap = text->len + 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(*ids));
    if (!ids)
        return;
    int rc = tok_encode_masked(t, text->p ? text->p : "", text->len, 0,
                               (const uint8_t *)(mask->p ? mask->p : ""), ids, cap, &n);
    if (rc == INF_ENOMEM) {
        free(ids);
        return;
    }
    if (rc)
        fz_fail("tok_encode_masked failed on a rendered conversation");
    /* walk the ids over the text: a control token's text must lie on
     * template bytes only. The pieces spell the text, but for SPM's space
     * prefix (a piece may start with a space the text does not have) and
     * U+2581, which SPM renders as a space (fz_piece_at). Should a plain
     * piece not match (a normalization not modelled here), the walk stops:
     * what was checked so far stands. */
    size_t off = 0;
    char tb[512];
    for (size_t i = 0; i < n; i++) {
        int k = tok_token_bytes(t, ids[i], 1, tb, sizeof(tb));
        if (k < 0 || (size_t)k > sizeof(tb))
            fz_fail("an id out of range");
        /* control tokens only: user-defined ones are matched in any text
         * (they render to their text even without render_special) */
        int control = tok_is_special(t, ids[i]) && tok_token_bytes(t, ids[i], 0, NULL, 0) == 0;
        if (control && k > 0) {
            if (off + (size_t)k > text->len || memcmp(text->p + off, tb, (size_t)k))
                fz_fail("a control token whose text is not where the ids say");
            for (size_t j = off; j < off + (size_t)k; j++)
                if (!mask->p[j])
                    fz_fail("a control token was made from message content");
            off += (size_t)k;
            continue;
        }
        long used = fz_piece_at(text, off, tb, (size_t)k, tok_kind(t) == TOK_KIND_SPM);
        if (used < 0)
            break;
        off += (size_t)used;
    }
    free(ids);
}

static int fz_valid_utf8(const char *s, size_t n)
{
    return buf_utf8_valid(s, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || fz_init() != 1)
        return 0;
    int family = (int)((data[0] & 7) % 6) + 1;
    int add_gen = (data[0] >> 3) & 1;
    size_t tl = data[1];
    size_t i = 2;
    if (tl > size - i)
        tl = size - i;
    const char *tmpl = (const char *)data + i;
    i += tl;

    /* detect / init on arbitrary template text */
    int det = chat_template_detect(tmpl, tl);
    if (det < CHAT_TEMPLATE_NONE || det > CHAT_TEMPLATE_GEMMA)
        fz_fail("detect gave no family value");
    const char *bos, *eos;
    fz_bos_eos(family, &bos, &eos);
    struct chat_template ct;
    chat_template_init(&ct, family, tmpl, tl, bos, eos);
    /* bit 4: chatml with Qwen3's reasoning turns (the <think> splits of
     * assistant contents); bit 5: the turn opened with the empty block */
    if (family == CHAT_TEMPLATE_CHATML && (data[0] & 16))
        ct.think = 1;
    struct chat_tools opt = {NULL, 0, (data[0] >> 5) & 1};
    if (!memchr(ct.default_system, '\0', sizeof(ct.default_system)) ||
        !memchr(ct.bos, '\0', sizeof(ct.bos)) || !memchr(ct.eos, '\0', sizeof(ct.eos)))
        fz_fail("an unterminated string in the template state");
    if (!chat_template_eot(&ct))
        fz_fail("no end-of-turn text");

    struct chat_msg msgs[FZ_MAX_MSGS];
    size_t n = 0;
    int all_utf8 = fz_valid_utf8(ct.default_system, strlen(ct.default_system));
    while (n < FZ_MAX_MSGS && i + 2 <= size) {
        msgs[n] = (struct chat_msg){0}; /* no tool calls (test_tools covers those) */
        msgs[n].role = (int)(data[i] % 3) + 1;
        size_t l = data[i + 1];
        i += 2;
        if (l > size - i)
            l = size - i;
        msgs[n].content = (const char *)data + i;
        msgs[n].len = l;
        all_utf8 &= fz_valid_utf8(msgs[n].content, l);
        i += l;
        n++;
    }

    struct buf text = {0}, mask = {0}, text2 = {0}, mask2 = {0};
    char msg[256] = "";
    int rc = chat_template_render_tools(&ct, msgs, n, &opt, add_gen, &text, &mask, msg, sizeof(msg));
    if (rc == INF_ENOMEM)
        goto out;
    if (rc == INF_EINVAL) {
        if (!msg[0])
            fz_fail("EINVAL without a message");
        goto out;
    }
    if (rc)
        fz_fail("render gave neither 0 nor INF_EINVAL");
    if (text.len != mask.len)
        fz_fail("mask and text of different lengths");
    char msg2[256];
    if (chat_template_render_tools(&ct, msgs, n, &opt, add_gen, &text2, &mask2, msg2, sizeof(msg2)) == 0 &&
        (text2.len != text.len || memcmp(text2.p ? text2.p : "", text.p ? text.p : "", text.len) ||
         memcmp(mask2.p ? mask2.p : "", mask.p ? mask.p : "", mask.len)))
        fz_fail("rendering is not deterministic");
    /* every maximal run of content bytes is part of one message's content */
    for (size_t a = 0; a < text.len;) {
        if (mask.p[a]) {
            a++;
            continue;
        }
        size_t b = a;
        while (b < text.len && !mask.p[b])
            b++;
        int found = 0;
        for (size_t m = 0; m < n && !found; m++)
            found = msgs[m].len >= b - a && memmem(msgs[m].content, msgs[m].len, text.p + a, b - a);
        /* the default system prompt (chatml) is the template's: mask 1 */
        if (!found)
            fz_fail("content bytes in the output that no message holds");
        a = b;
    }
    if (all_utf8 && !fz_valid_utf8(text.p ? text.p : "", text.len))
        fz_fail("valid UTF-8 in, invalid UTF-8 out");
    fz_check_tokens(family, &text, &mask);
out:
    buf_free(&text);
    buf_free(&mask);
    buf_free(&text2);
    buf_free(&mask2);
    return 0;
}

#ifndef INFERD_LIBFUZZER
#include "tests/fuzz/replay.h"

int main(int argc, char **argv)
{
    return fuzz_vocab_main(argc, argv);
}
#endif
