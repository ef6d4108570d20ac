/* think — the answer's reasoning and content (think.h). */
#include "api/think.h"

#include <string.h>

static const char think_open[] = "<think>", think_close[] = "</think>";

void think_start(struct think_scan *s, int opened)
{
    memset(s, 0, sizeof(*s));
    if (opened) {
        s->phase = THINK_IN;
        s->opened = s->lead = 1;
    }
}

static int think_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Bytes at the end of text[from..safe) that may begin tag (a proper
 * prefix of it: the rest may come). */
static size_t think_partial(const char *text, size_t from, size_t safe, const char *tag)
{
    const size_t k = strlen(tag);
    for (size_t m = k - 1; m > 0; m--)
        if (safe - from >= m && !memcmp(text + safe - m, tag, m))
            return m;
    return 0;
}

static void think_content(struct think_scan *s, size_t at)
{
    s->phase = THINK_CONTENT;
    s->content = at;
    s->pos = at;
}

int think_next(struct think_scan *s, const char *text, size_t safe, int done, size_t *off,
               size_t *len)
{
    if (s->phase == THINK_LEAD) {
        size_t p = s->pos;
        while (p < safe && think_ws(text[p]))
            p++;
        const size_t have = safe - p, k = sizeof(think_open) - 1;
        if (have >= k && !memcmp(text + p, think_open, k)) {
            s->phase = THINK_IN;
            s->opened = 1;
            s->lead = 1;
            s->pos = p + k;
        } else if (!done && (have == 0 || (have < k && !memcmp(text + p, think_open, have)))) {
            return 0; /* whitespace so far, or the tag's first bytes: wait */
        } else {
            think_content(s, 0); /* no reasoning: the answer as written */
            return 0;
        }
    }
    if (s->phase == THINK_IN) {
        while (s->lead && s->pos < safe && text[s->pos] == '\n')
            s->pos++;
        if (s->pos < safe)
            s->lead = 0;
        const size_t k = sizeof(think_close) - 1;
        const char *hit = s->pos < safe ? memmem(text + s->pos, safe - s->pos, think_close, k) : NULL;
        /* the reasoning ends at the tag, or so far at what may begin it */
        const size_t end = hit    ? (size_t)(hit - text)
                           : done ? safe
                                  : safe - think_partial(text, s->pos, safe, think_close);
        size_t e = end;
        while (e > s->pos && text[e - 1] == '\n') /* newlines that may end the reasoning */
            e--;
        if (hit) {
            s->phase = THINK_AFTER;
            s->content = end + k; /* past the tag */
        } else if (done) {
            s->phase = THINK_CONTENT; /* cut inside: no content */
            s->content = safe;
        }
        if (e > s->pos) {
            *off = s->pos;
            *len = e - s->pos;
            s->pos = hit || done ? (s->phase == THINK_AFTER ? s->content : safe) : e;
            return 1;
        }
        if (hit || done)
            s->pos = s->phase == THINK_AFTER ? s->content : safe;
        if (s->phase != THINK_AFTER)
            return 0;
    }
    if (s->phase == THINK_AFTER) {
        size_t p = s->pos;
        while (p < safe && text[p] == '\n')
            p++;
        if (p < safe || done)
            think_content(s, p);
        else
            s->pos = p;
    }
    return 0;
}
