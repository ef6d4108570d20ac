/* toolcall — tool calls read back out of a choice's text (api/tools.h).
 * Thread: any. */
#include "api/tools.h"

#include <stdio.h>
#include <string.h>

static const char tc_open[] = "<tool_call>", tc_close[] = "</tool_call>";
#define TC_OPEN_LEN (sizeof(tc_open) - 1)
#define TC_CLOSE_LEN (sizeof(tc_close) - 1)

static int tc_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* How many bytes at the end of p[0..n) could be the start of tag. */
static size_t tc_partial(const char *p, size_t n, const char *tag, size_t tag_len)
{
    for (size_t k = tag_len - 1 < n ? tag_len - 1 : n; k > 0; k--)
        if (!memcmp(p + n - k, tag, k))
            return k;
    return 0;
}

/* p[i..n) starts a JSON value jansson accepted: the index past it. */
static size_t tc_skip(const char *p, size_t i, size_t n)
{
    int depth = 0;
    do {
        char c = p[i];
        if (c == '"') {
            for (i++; i < n && p[i] != '"'; i++)
                if (p[i] == '\\')
                    i++;
            i++;
        } else if (c == '{' || c == '[') {
            depth++, i++;
        } else if (c == '}' || c == ']') {
            depth--, i++;
        } else if (depth) {
            i++; /* ws, ':', ',' and scalars inside a container */
        } else {
            while (i < n && !tc_space(p[i]) && p[i] != ',' && p[i] != '}' && p[i] != ']')
                i++;
        }
    } while (depth > 0 && i < n);
    return i;
}

static size_t tc_ws(const char *p, size_t i, size_t n)
{
    while (i < n && tc_space(p[i]))
        i++;
    return i;
}

/* The raw text of member key of the object p[0..n) jansson accepted (the
 * last one of that name, as jansson keeps); 0 when absent. */
static int tc_member(const char *p, size_t n, const char *key, size_t *off, size_t *len)
{
    size_t kl = strlen(key), i = tc_ws(p, 0, n) + 1;
    int found = 0;
    for (;;) {
        i = tc_ws(p, i, n);
        if (i >= n || p[i] != '"')
            return found;
        size_t k0 = i + 1, k1 = tc_skip(p, i, n) - 1;
        i = tc_ws(p, k1 + 1, n) + 1; /* past ':' */
        i = tc_ws(p, i, n);
        size_t v = i;
        i = tc_skip(p, i, n);
        if (k1 - k0 == kl && !memcmp(p + k0, key, kl)) {
            *off = v;
            *len = i - v;
            found = 1;
        }
        i = tc_ws(p, i, n);
        if (i < n && p[i] == ',')
            i++;
    }
}

/* text[a..b) as a call of one of t's tools: {"name": NAME, KEY: {...}},
 * KEY "arguments" (or, for llama3.1, "parameters"). */
static int tc_call(const struct api_tools *t, const char *text, size_t a, size_t b,
                   struct toolcall_piece *out)
{
    json_t *v = json_loadb(text + a, b - a, 0, NULL);
    json_t *name = json_object_get(v, "name");
    const char *key = "arguments";
    json_t *args = json_object_get(v, key);
    if (!args && t->format == TOOLS_FMT_JSON)
        args = json_object_get(v, key = "parameters");
    int ok = json_is_string(name) && (!args || json_is_object(args));
    int32_t k = 0;
    for (; ok && k < t->n; k++)
        if (!strcmp(t->names[k], json_string_value(name)))
            break;
    ok = ok && k < t->n;
    if (ok) {
        memset(out, 0, sizeof(*out));
        out->kind = TOOLCALL_CALL;
        snprintf(out->name, sizeof(out->name), "%s", t->names[k]);
        if (args && tc_member(text + a, b - a, key, &out->off, &out->len))
            out->off += a;
        else
            out->off = out->len = 0;
    }
    json_decref(v);
    return ok;
}

static int tc_content(struct toolcall_piece *out, size_t a, size_t b)
{
    memset(out, 0, sizeof(*out));
    out->kind = TOOLCALL_CONTENT;
    out->off = a;
    out->len = b - a;
    return TOOLCALL_CONTENT;
}

void toolcall_start(const struct api_tools *t, struct toolcall_scan *s)
{
    memset(s, 0, sizeof(*s));
    /* a forced chatml call: the prompt ended with the opening tag */
    s->in_call = t && t->forced && t->format == TOOLS_FMT_TAGS;
}

/* TOOLS_FMT_JSON: the answer is a call object or content, as a whole. */
static int tc_next_json(const struct api_tools *t, struct toolcall_scan *s, const char *text,
                        size_t lim, int done, struct toolcall_piece *out)
{
    if (!s->started) {
        size_t i = tc_ws(text, s->pos, lim);
        if (i == lim && !done)
            return TOOLCALL_NONE;
        s->started = 1;
        s->in_call = i < lim && text[i] == '{';
        s->plain = !s->in_call;
        s->open = s->pos = i; /* leading whitespace dropped */
    }
    if (s->plain) {
        size_t a = s->pos;
        s->pos = lim;
        return a < lim ? tc_content(out, a, lim) : TOOLCALL_NONE;
    }
    if (!done || s->pos == lim)
        return TOOLCALL_NONE;
    size_t a = s->open;
    s->pos = lim;
    if (tc_call(t, text, a, lim, out)) {
        out->index = s->n_calls++;
        return TOOLCALL_CALL;
    }
    return tc_content(out, a, lim);
}

int toolcall_next(const struct api_tools *t, struct toolcall_scan *s, const char *text,
                  size_t safe, size_t len, int done, struct toolcall_piece *out)
{
    size_t lim = done ? len : safe < len ? safe : len;
    if (t->format == TOOLS_FMT_JSON)
        return tc_next_json(t, s, text, lim, done, out);
    while (s->pos < lim || (s->in_call && done)) {
        if (!s->in_call) {
            if (s->started) { /* whitespace after a call is dropped */
                s->pos = tc_ws(text, s->pos, lim);
                if (s->pos == lim)
                    return TOOLCALL_NONE;
                s->started = 0;
            }
            const char *hit = memmem(text + s->pos, lim - s->pos, tc_open, TC_OPEN_LEN);
            size_t end = hit ? (size_t)(hit - text) : lim, keep = end;
            if (!hit && !done)
                keep -= tc_partial(text + s->pos, end - s->pos, tc_open, TC_OPEN_LEN);
            if (hit || !done) /* whitespace before a call is dropped */
                while (keep > s->pos && tc_space(text[keep - 1]))
                    keep--;
            if (keep > s->pos) {
                size_t a = s->pos;
                s->pos = keep;
                return tc_content(out, a, keep);
            }
            if (!hit)
                return TOOLCALL_NONE;
            s->open = keep; /* the whitespace before it: content again if no call */
            s->pos = end + TC_OPEN_LEN;
            s->in_call = 1;
            continue;
        }
        const char *hit = memmem(text + s->pos, lim - s->pos, tc_close, TC_CLOSE_LEN);
        if (!hit && !done)
            return TOOLCALL_NONE;
        size_t body = hit ? (size_t)(hit - text) : lim, after = hit ? body + TC_CLOSE_LEN : lim;
        size_t a = s->pos, open = s->open;
        s->in_call = 0;
        s->pos = after;
        if (tc_call(t, text, a, body, out)) {
            s->started = 1;
            if (s->n_calls > 0 && !t->parallel)
                continue; /* parallel_tool_calls false: the first call only */
            out->index = s->n_calls++;
            return TOOLCALL_CALL;
        }
        return tc_content(out, open, after);
    }
    return TOOLCALL_NONE;
}

void toolcall_id(const char *rid, int choice, int index, char *out)
{
    static const char digits[] =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the response id */
    for (const char *p = rid; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= ((uint64_t)(uint32_t)choice << 32) | (uint32_t)index;
    memcpy(out, "call_", 5);
    for (int i = 0; i < 24; i++) {
        /* splitmix64 steps: every character from a fresh mix of h */
        uint64_t z = (h += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        out[5 + i] = digits[z % 62];
    }
    out[29] = '\0';
}
