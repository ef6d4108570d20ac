/* test_think — Qwen3's reasoning turns in process: the template side
 * (api/chat_template.c with ct->think) against fixed strings written from
 * Qwen3's published template (the last turn's <think> block, history
 * turns keeping only what follows "</think>", reasoning_content, the turn
 * after the last query, tool-response turns that do not count as a
 * query, enable_thinking false's empty block), and the answer side
 * (api/think.h): fixed answers split into reasoning and content, and
 * random answers read whole and as a stream growing 1-9 bytes at a time,
 * which must give the same strings. Pure: no model, no daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_template.h"
#include "api/think.h"
#include "tests/check.h"
#include "tests/rng.h"

#define MSG(role, s) {role, s, sizeof(s) - 1, NULL, 0, NULL, 0}

static int render_is(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                     int no_think, int gen, const char *want)
{
    struct buf t = {0}, k = {0};
    struct chat_tools opt = {NULL, 0, no_think};
    char msg[256] = "";
    int rc = chat_template_render_tools(ct, m, n, &opt, gen, &t, &k, msg, sizeof(msg));
    int ok = rc == 0 && t.len == strlen(want) && !memcmp(t.p, want, t.len);
    if (!ok)
        fprintf(stderr, "rendered (rc %d %s):\n[%.*s]\nwant:\n[%s]\n", rc, msg, (int)t.len,
                t.p ? t.p : "", want);
    buf_free(&t);
    buf_free(&k);
    return ok;
}

static void test_render(void)
{
    static const char tmpl[] = "{%- if enable_thinking is defined and enable_thinking is false "
                               "%}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}<|im_start|>";
    struct chat_template ct, plain;
    chat_template_init(&ct, CHAT_TEMPLATE_CHATML, tmpl, sizeof(tmpl) - 1, "", "<|im_end|>");
    chat_template_init(&plain, CHAT_TEMPLATE_CHATML, "<|im_start|><tool_call>", 23, "", "");
    CHECK(ct.think && !plain.think && !ct.default_system[0]);
    /* the generation prompt, thinking on and off */
    const struct chat_msg q[] = {MSG(CHAT_ROLE_USER, "Hi")};
    CHECK(render_is(&ct, q, 1, 0, 1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    CHECK(render_is(&ct, q, 1, 1, 1,
                    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                    "<think>\n\n</think>\n\n"));
    CHECK(render_is(&plain, q, 1, 1, 1, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    /* history: an earlier turn keeps what follows </think>; the turn after
     * the last query writes its reasoning (the last message: always) */
    const struct chat_msg h[] = {
        MSG(CHAT_ROLE_SYSTEM, "S"),
        MSG(CHAT_ROLE_USER, "A"),
        MSG(CHAT_ROLE_ASSISTANT, "<think>\nold thought\n</think>\n\nOld answer"),
        MSG(CHAT_ROLE_USER, "B"),
        MSG(CHAT_ROLE_ASSISTANT, "\n<think>\n\nnew thought\n\n</think>\n\n\nNew answer"),
    };
    CHECK(render_is(&ct, h, 5, 0, 0,
                    "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nA<|im_end|>\n"
                    "<|im_start|>assistant\nOld answer<|im_end|>\n<|im_start|>user\nB<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nnew thought\n</think>\n\n"
                    "New answer<|im_end|>\n"));
    /* the same without the template's reasoning turns: content as given */
    CHECK(render_is(&plain, h + 1, 2, 0, 0,
                    "<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\n<think>\nold thought\n"
                    "</think>\n\nOld answer<|im_end|>\n"));
    /* reasoning_content given: it is the reasoning, the content stays whole;
     * a turn after the query that is not the last writes <think> only when
     * it has reasoning; a user turn of <tool_response> blocks is no query */
    struct chat_msg r[] = {
        MSG(CHAT_ROLE_USER, "Q"),
        MSG(CHAT_ROLE_ASSISTANT, "calling"),
        MSG(CHAT_ROLE_USER, "<tool_response>\n5\n</tool_response>"),
        MSG(CHAT_ROLE_ASSISTANT, "five"),
        MSG(CHAT_ROLE_USER, "<tool_response>\n6\n</tool_response>"),
    };
    r[1].reasoning = "\nlook it up\n";
    r[1].reasoning_len = 12;
    CHECK(render_is(&ct, r, 5, 0, 1,
                    "<|im_start|>user\nQ<|im_end|>\n"
                    "<|im_start|>assistant\n<think>\nlook it up\n</think>\n\ncalling<|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\nfive<|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\n6\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n"));
    /* a thinking-only template: the generation prompt opens the block */
    static const char open_tmpl[] = "{{- '<|im_start|>assistant\\n<think>\\n' }}<think>";
    struct chat_template op;
    chat_template_init(&op, CHAT_TEMPLATE_CHATML, open_tmpl, sizeof(open_tmpl) - 1, "", "");
    CHECK(op.think && op.think_open && !ct.think_open);
    CHECK(render_is(&op, q, 1, 0, 1,
                    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n"));
    CHECK(render_is(&op, q, 1, 1, 1,
                    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                    "<think>\n\n</think>\n\n"));
    /* a content with several </think>: content after the last, reasoning
     * before the first, past its last <think> */
    const struct chat_msg s2[] = {MSG(CHAT_ROLE_USER, "Q"),
                                  MSG(CHAT_ROLE_ASSISTANT, "a<think>b<think>\nc\n</think>d</think>\ne")};
    CHECK(render_is(&ct, s2, 2, 0, 0,
                    "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nc\n</think>\n\n"
                    "e<|im_end|>\n"));
}

/* ---- the answer side ---- */

struct split {
    char r[4096], c[4096];
    size_t rn;
    int opened, content_known;
    size_t c_at;
};

static void split_whole(const char *text, size_t n, int opened, struct split *o)
{
    struct think_scan s;
    size_t off, len;
    think_start(&s, opened);
    o->rn = 0;
    while (think_next(&s, text, n, 1, &off, &len)) {
        memcpy(o->r + o->rn, text + off, len);
        o->rn += len;
    }
    o->opened = s.opened;
    o->content_known = s.phase == THINK_CONTENT;
    o->c_at = s.content;
}

static int fixed_from(int from_open, const char *text, const char *want_r, const char *want_c,
                      int opened)
{
    struct split o;
    split_whole(text, strlen(text), from_open, &o);
    const char *c = text + o.c_at;
    int ok = o.content_known && o.opened == opened && o.rn == strlen(want_r) &&
             !memcmp(o.r, want_r, o.rn) && !strcmp(c, want_c);
    if (!ok)
        fprintf(stderr, "split [%s]: reasoning [%.*s] content [%s] opened %d\n", text, (int)o.rn,
                o.r, c, o.opened);
    return ok;
}

static int fixed(const char *text, const char *want_r, const char *want_c, int opened)
{
    return fixed_from(0, text, want_r, want_c, opened);
}

static void test_split(void)
{
    CHECK(fixed("<think>\nhmm\n</think>\n\nHello", "hmm", "Hello", 1));
    CHECK(fixed("  \n<think>a\n\nb</think>x\n", "a\n\nb", "x\n", 1));
    CHECK(fixed("Hello <think>no</think>", "", "Hello <think>no</think>", 0));
    CHECK(fixed("<think>\ncut short\n\n", "cut short", "", 1)); /* max_tokens inside */
    CHECK(fixed("<think></think>", "", "", 1));
    CHECK(fixed("<thin", "", "<thin", 0));
    CHECK(fixed("  ", "", "  ", 0));
    CHECK(fixed("", "", "", 0));
    CHECK(fixed("<think>\n\n</think>\n\n{\"a\": 1}", "", "{\"a\": 1}", 1));
    CHECK(fixed("<think>a</thinkb</think>c", "a</thinkb", "c", 1));
    /* the block opened by the prompt: the answer starts as reasoning */
    CHECK(fixed_from(1, "\nplan\n</think>\n\nAnswer", "plan", "Answer", 1));
    CHECK(fixed_from(1, "still thinking", "still thinking", "", 1));
    CHECK(fixed_from(1, "", "", "", 1));
}

/* Random answers from pieces of the tags: the stream (final text growing
 * 1-9 bytes at a time) gives the reasoning and content the whole text does. */
static void test_stream(void)
{
    static const char *const parts[] = {"<think>", "</think>", "<thi", "</thi", "\n", "\n\n",
                                        " ", "a", "bc", "<", ">", "think", "/"};
    int bad = 0;
    for (int it = 0; it < 3000; it++) {
        char text[512];
        size_t n = 0;
        const int np = 1 + (int)rnd(12);
        for (int k = 0; k < np; k++) {
            const char *p = parts[rnd(sizeof(parts) / sizeof(parts[0]))];
            memcpy(text + n, p, strlen(p));
            n += strlen(p);
        }
        const int opened = it % 2; /* half of them with the block opened by the prompt */
        struct split whole;
        split_whole(text, n, opened, &whole);
        /* the stream: pieces of reasoning as they come, then the content
         * from where the scan says once it knows */
        struct think_scan s;
        char r[4096];
        size_t rn = 0, off, len, safe = 0;
        think_start(&s, opened);
        int done = 0;
        while (!done) {
            safe += 1 + rnd(9);
            if (safe >= n) {
                safe = n;
                done = 1;
            }
            while (think_next(&s, text, safe, done, &off, &len)) {
                if (off + len > safe) {
                    bad++;
                    break;
                }
                memcpy(r + rn, text + off, len);
                rn += len;
            }
        }
        if (s.phase != THINK_CONTENT || rn != whole.rn || memcmp(r, whole.r, rn) ||
            s.content != whole.c_at || s.opened != whole.opened) {
            if (bad++ < 5)
                fprintf(stderr, "stream of [%.*s]: reasoning [%.*s] vs [%.*s], content at %zu vs %zu\n",
                        (int)n, text, (int)rn, r, (int)whole.rn, whole.r, s.content, whole.c_at);
        }
    }
    printf("think reader: 3000 random answers, %d differ between whole and stream\n", bad);
    CHECK(bad == 0);
}

int main(void)
{
    test_render();
    test_split();
    test_stream();
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
