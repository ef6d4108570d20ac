/* format — JSON bodies and SSE events (api/format.h).
 *
 * Written with buf_* rather than jansson: one allocation-free append per
 * field on the per-token path, and buf_json_str makes any bytes valid JSON.
 * Thread: the loop thread.
 */
#include "api/format.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/err.h"

/* "bytes:\xNN..." for token text that is not valid UTF-8 on its own (OpenAI's
 * convention), so logprob token strings always make valid JSON. */
static int format_token_str(const struct tok *t, int32_t id, struct buf *o)
{
    char tb[512];
    int n = tok_token_bytes(t, id, 1, tb, sizeof(tb));
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof(tb))
        n = (int)sizeof(tb);
    if (buf_utf8_valid(tb, (size_t)n))
        return buf_json_str(o, tb, (size_t)n);
    char esc[sizeof(tb) * 4 + 8];
    size_t k = (size_t)snprintf(esc, sizeof(esc), "bytes:");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(esc + k, sizeof(esc) - k, "\\x%02x", (unsigned char)tb[i]);
    return buf_json_str(o, esc, k);
}

static double format_lp_value(float lp)
{
    return isfinite(lp) ? (double)lp : -9999.0;
}

/* The legacy completions logprobs object of entries e[0..n). */
static int format_text_lps(const struct tok *t, const struct gen_lp *e, size_t n, struct buf *o)
{
    int rc = buf_puts(o, "{\"tokens\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            rc |= buf_puts(o, ",");
        rc |= format_token_str(t, e[i].token, o);
    }
    rc |= buf_puts(o, "],\"token_logprobs\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            rc |= buf_puts(o, ",");
        if (e[i].has_lp && isfinite(e[i].lp))
            rc |= buf_printf(o, "%.6g", (double)e[i].lp);
        else if (e[i].has_lp)
            rc |= buf_puts(o, "-9999.0");
        else
            rc |= buf_puts(o, "null");
    }
    rc |= buf_puts(o, "],\"top_logprobs\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            rc |= buf_puts(o, ",");
        if (!e[i].has_lp) {
            rc |= buf_puts(o, "null");
            continue;
        }
        rc |= buf_puts(o, "{");
        if (e[i].n_top == 0) { /* logprobs 0: the chosen token only */
            rc |= format_token_str(t, e[i].token, o);
            rc |= buf_printf(o, ":%.6g", format_lp_value(e[i].lp));
        }
        for (int32_t k = 0; k < e[i].n_top; k++) {
            if (k)
                rc |= buf_puts(o, ",");
            rc |= format_token_str(t, e[i].top_ids[k], o);
            rc |= buf_printf(o, ":%.6g", format_lp_value(e[i].top_lps[k]));
        }
        rc |= buf_puts(o, "}");
    }
    rc |= buf_puts(o, "],\"text_offset\":[");
    for (size_t i = 0; i < n; i++)
        rc |= buf_printf(o, "%s%" PRId64, i ? "," : "", e[i].offset);
    rc |= buf_puts(o, "]}");
    return rc;
}

/* Completions logprobs of a choice's entries from `from`, with the prompt's
 * entries first when this is the first output of an echoing choice. */
static int format_text_lps_of(const struct gen *g, const struct gen_choice *ch, size_t from,
                              int with_prompt, struct buf *o)
{
    const struct gen_prompt *p = &g->prompts[ch->prompt];
    size_t n_new = ch->n_lps > from ? ch->n_lps - from : 0;
    if (!with_prompt || !p->plp)
        /* lps is NULL before the first entry (NULL + 0 is UB: fuzz_detok) */
        return format_text_lps(g->tok, ch->lps ? ch->lps + from : NULL, n_new, o);
    /* prompt entries then the completion entries, one object */
    size_t np = (size_t)g->req.prompts[ch->prompt].n, tot = np + n_new;
    struct gen_lp *all = malloc(tot * sizeof(*all));
    if (!all)
        return INF_ENOMEM;
    memcpy(all, p->plp, np * sizeof(*all));
    if (n_new)
        memcpy(all + np, ch->lps + from, n_new * sizeof(*all));
    int rc = format_text_lps(g->tok, all, tot, o);
    free(all);
    return rc;
}

static const char *format_object(const struct gen *g, int chunk)
{
    if (g->req.kind == API_REQ_CHAT)
        return chunk ? "chat.completion.chunk" : "chat.completion";
    return "text_completion";
}

static int format_head(const struct gen *g, const struct format_head *h, int chunk,
                       struct buf *o)
{
    return buf_printf(o, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":",
                      h->id, format_object(g, chunk), h->created) |
           buf_json_str(o, h->model, strlen(h->model));
}

static int format_usage(const struct gen *g, struct buf *o)
{
    int32_t p = g->req.prompt_tokens, c = g->completion_tokens;
    return buf_printf(o, "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                      p, c, p + c);
}

/* text[0..n) of a choice, the prompt's text first when echoing. */
static int format_text_with_echo(const struct gen *g, const struct gen_choice *ch,
                                 int with_echo, const char *text, size_t n, struct buf *o)
{
    if (!with_echo)
        return buf_json_str(o, text ? text : "", n);
    const struct api_req_prompt *rp = &g->req.prompts[ch->prompt];
    struct buf t = {0};
    int rc = buf_append(&t, rp->echo, rp->echo_len);
    if (n)
        rc |= buf_append(&t, text, n);
    rc |= buf_json_str(o, t.p ? t.p : "", t.len);
    buf_free(&t);
    return rc;
}

static int format_text_body(const struct gen *g, const struct format_head *h, struct buf *o)
{
    int rc = format_head(g, h, 0, o);
    rc |= buf_puts(o, ",\"choices\":[");
    for (int i = 0; i < g->n_choices; i++) {
        const struct gen_choice *ch = &g->choices[i];
        if (i)
            rc |= buf_puts(o, ",");
        rc |= buf_printf(o, "{\"index\":%d,\"text\":", i);
        rc |= format_text_with_echo(g, ch, g->req.echo, ch->text.p, ch->text.len, o);
        rc |= buf_puts(o, ",\"logprobs\":");
        if (g->req.logprobs >= 0)
            rc |= format_text_lps_of(g, ch, 0, g->req.echo, o);
        else
            rc |= buf_puts(o, "null");
        rc |= buf_printf(o, ",\"finish_reason\":\"%s\"}", ch->finish ? ch->finish : "stop");
    }
    rc |= buf_puts(o, "],\"usage\":");
    rc |= format_usage(g, o);
    rc |= buf_puts(o, "}\n");
    return rc;
}

/* ---- chat ------------------------------------------------------------- */

/* A token's text as JSON string + its bytes (the chat logprobs format:
 * "token" is the text, U+FFFD where it is not valid UTF-8 on its own, and
 * "bytes" the exact bytes). */
static int format_chat_token(const struct tok *t, int32_t id, double lp, struct buf *o)
{
    char tb[512];
    int n = tok_token_bytes(t, id, 1, tb, sizeof(tb));
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof(tb))
        n = (int)sizeof(tb);
    int rc = buf_puts(o, "{\"token\":");
    rc |= buf_json_str(o, tb, (size_t)n);
    rc |= buf_printf(o, ",\"logprob\":%.6g,\"bytes\":[", lp);
    for (int i = 0; i < n; i++)
        rc |= buf_printf(o, i ? ",%u" : "%u", (unsigned)(unsigned char)tb[i]);
    return rc | buf_puts(o, "]");
}

/* {"content":[...]} of entries e[0..n). */
static int format_chat_lps(const struct tok *t, const struct gen_lp *e, size_t n, struct buf *o)
{
    int rc = buf_puts(o, "{\"content\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            rc |= buf_puts(o, ",");
        rc |= format_chat_token(t, e[i].token, format_lp_value(e[i].lp), o);
        rc |= buf_puts(o, ",\"top_logprobs\":[");
        for (int32_t k = 0; k < e[i].n_top; k++) {
            if (k)
                rc |= buf_puts(o, ",");
            rc |= format_chat_token(t, e[i].top_ids[k], format_lp_value(e[i].top_lps[k]), o);
            rc |= buf_puts(o, "}");
        }
        rc |= buf_puts(o, "]}");
    }
    return rc | buf_puts(o, "],\"refusal\":null}");
}

/* The finish_reason: "tool_calls" when the choice called tools (its
 * reader has read it all) and was not cut short. */
static const char *format_finish(const struct gen *g, const struct gen_choice *ch)
{
    const char *f = ch->finish ? ch->finish : "stop";
    return g->req.tools && ch->tc.n_calls && strcmp(f, "length") ? "tool_calls" : f;
}

/* One tool call: {"id", "type", "function": {"name", "arguments"}}; a
 * stream's delta also has its index. */
static int format_tool_call(const struct format_head *h, int choice,
                            const struct toolcall_piece *pc, const char *text, int with_index,
                            struct buf *o)
{
    char id[32];
    toolcall_id(h->id, choice, pc->index, id);
    int rc = with_index ? buf_printf(o, "{\"index\":%d,", pc->index) : buf_puts(o, "{");
    rc |= buf_printf(o, "\"id\":\"%s\",\"type\":\"function\",\"function\":{\"name\":\"%s\","
                        "\"arguments\":",
                     id, pc->name);
    rc |= pc->len ? buf_json_str(o, text + pc->off, pc->len) : buf_puts(o, "\"{}\"");
    return rc | buf_puts(o, "}}");
}

int format_tool_calls(const struct gen *g)
{
    int n = 0;
    for (int i = 0; g->req.tools && i < g->n_choices; i++)
        n += g->choices[i].tc.n_calls;
    return n;
}

/* A finished choice's message: its reasoning (req.think, when the answer
 * opened a <think> block), its content (null when it only called tools or
 * only reasoned) and tool_calls (with tools), read with the choice's own
 * readers (started over: the body may be written again); the tool reader
 * then holds the count. */
static int format_chat_message(struct gen *g, int i, const struct format_head *h, struct buf *o)
{
    struct gen_choice *ch = &g->choices[i];
    const char *text = ch->text.p ? ch->text.p : "";
    struct toolcall_piece pc;
    struct buf content = {0}, calls = {0}, reasoning = {0};
    size_t from = 0, off, n;
    int rc = 0;
    if (g->req.think) {
        think_start(&ch->th, g->req.think == 2);
        while (think_next(&ch->th, text, ch->text.len, 1, &off, &n))
            rc |= buf_append(&reasoning, text + off, n);
        from = ch->th.content;
    }
    if (g->req.tools) {
        toolcall_start(g->req.tools, &ch->tc);
        ch->tc.pos = from;
        while (toolcall_next(g->req.tools, &ch->tc, text, ch->text.len, ch->text.len, 1, &pc)) {
            if (pc.kind == TOOLCALL_CONTENT) {
                rc |= buf_append(&content, text + pc.off, pc.len);
            } else {
                rc |= buf_puts(&calls, pc.index ? "," : "[");
                rc |= format_tool_call(h, i, &pc, text, 0, &calls);
            }
        }
    }
    /* without tools the content is the text from there on, as it stands */
    const char *cp = g->req.tools ? content.p : text + from;
    const size_t cn = g->req.tools ? content.len : ch->text.len - from;
    const int calls_made = g->req.tools && ch->tc.n_calls;
    rc |= buf_puts(o, "\"content\":");
    if ((calls_made || ch->th.opened) && !cn)
        rc |= buf_puts(o, "null");
    else
        rc |= buf_json_str(o, cp ? cp : "", cn);
    if (g->req.think && ch->th.opened) {
        rc |= buf_puts(o, ",\"reasoning_content\":");
        rc |= buf_json_str(o, reasoning.p ? reasoning.p : "", reasoning.len);
    }
    if (calls_made) {
        rc |= buf_puts(o, ",\"tool_calls\":");
        rc |= buf_append(o, calls.p, calls.len);
        rc |= buf_puts(o, "]");
    }
    buf_free(&content);
    buf_free(&calls);
    buf_free(&reasoning);
    return rc;
}

static int format_chat_body(struct gen *g, const struct format_head *h, struct buf *o)
{
    int rc = format_head(g, h, 0, o);
    rc |= buf_puts(o, ",\"choices\":[");
    for (int i = 0; i < g->n_choices; i++) {
        const struct gen_choice *ch = &g->choices[i];
        if (i)
            rc |= buf_puts(o, ",");
        rc |= buf_printf(o, "{\"index\":%d,\"message\":{\"role\":\"assistant\",", i);
        rc |= format_chat_message(g, i, h, o);
        rc |= buf_puts(o, ",\"refusal\":null},\"logprobs\":");
        if (g->req.logprobs >= 0)
            rc |= format_chat_lps(g->tok, ch->lps, ch->n_lps, o);
        else
            rc |= buf_puts(o, "null");
        rc |= buf_printf(o, ",\"finish_reason\":\"%s\"}", format_finish(g, ch));
    }
    rc |= buf_puts(o, "],\"usage\":");
    rc |= format_usage(g, o);
    rc |= buf_puts(o, ",\"system_fingerprint\":null}\n");
    return rc;
}

static int format_chat_event_head(const struct gen *g, const struct format_head *h, int idx,
                                  struct buf *o)
{
    int rc = buf_puts(o, "data: ");
    rc |= format_head(g, h, 1, o);
    rc |= buf_printf(o, ",\"system_fingerprint\":null,\"choices\":[{\"index\":%d,\"delta\":", idx);
    return rc;
}

static int format_chat_event_tail(const struct gen *g, struct buf *o)
{
    int rc = buf_puts(o, "}]");
    if (g->req.include_usage)
        rc |= buf_puts(o, ",\"usage\":null");
    return rc | buf_puts(o, "}\n\n");
}

/* One delta event of choice idx: its text (content, or with reasoning
 * set reasoning_content), or one tool call, and the logprobs not sent
 * yet. */
static int format_chat_delta(struct gen *g, int idx, const struct format_head *h,
                             const char *content, size_t n, const struct toolcall_piece *call,
                             int reasoning, struct buf *o)
{
    struct gen_choice *ch = &g->choices[idx];
    size_t new_lps = ch->n_lps > ch->lp_sent ? ch->n_lps - ch->lp_sent : 0;
    int rc = format_chat_event_head(g, h, idx, o);
    rc |= buf_puts(o, ch->started ? "{" : "{\"role\":\"assistant\",");
    if (call) {
        rc |= buf_puts(o, ch->started ? "\"tool_calls\":[" : "\"content\":null,\"tool_calls\":[");
        rc |= format_tool_call(h, idx, call, ch->text.p, 1, o);
        rc |= buf_puts(o, "]");
    } else {
        rc |= buf_puts(o, reasoning ? "\"reasoning_content\":" : "\"content\":");
        rc |= buf_json_str(o, content, n);
    }
    rc |= buf_puts(o, "},\"logprobs\":");
    if (g->req.logprobs >= 0 && new_lps)
        rc |= format_chat_lps(g->tok, ch->lps + ch->lp_sent, new_lps, o);
    else
        rc |= buf_puts(o, "null");
    rc |= buf_puts(o, ",\"finish_reason\":null");
    rc |= format_chat_event_tail(g, o);
    ch->started = 1;
    ch->lp_sent = ch->n_lps;
    return rc;
}

/* A chat stream, per choice: the first event carries the role (and what
 * text there is), then one event per new text (with tools: per piece of
 * content and per call, as the reader finds them in final text), then an
 * event with an empty delta and the finish_reason, as OpenAI streams. */
static int format_chat_chunk(struct gen *g, int idx, const struct format_head *h,
                             struct buf *o)
{
    struct gen_choice *ch = &g->choices[idx];
    const char *text = ch->text.p ? ch->text.p : "";
    int finish_now = ch->done && !ch->reported;
    int rc = 0;
    if (g->req.think && ch->th.phase != THINK_CONTENT) { /* the reasoning first */
        size_t off, n;
        while (think_next(&ch->th, text, ch->safe, ch->done, &off, &n))
            rc |= format_chat_delta(g, idx, h, text + off, n, NULL, 1, o);
        if (ch->th.phase != THINK_CONTENT)
            goto tail; /* the content's start is not known yet */
        ch->sent = ch->tc.pos = ch->th.content; /* known now: the content reader starts there */
    }
    if (g->req.tools) {
        struct toolcall_piece pc;
        while (toolcall_next(g->req.tools, &ch->tc, text, ch->safe, ch->text.len, ch->done, &pc))
            rc |= format_chat_delta(g, idx, h, text + pc.off, pc.len,
                                    pc.kind == TOOLCALL_CALL ? &pc : NULL, 0, o);
    } else {
        size_t new_text = ch->safe > ch->sent ? ch->safe - ch->sent : 0;
        if (new_text)
            rc |= format_chat_delta(g, idx, h, text + ch->sent, new_text, NULL, 0, o);
        ch->sent += new_text;
    }
tail:
    if (!ch->started || ch->n_lps > ch->lp_sent)
        rc |= format_chat_delta(g, idx, h, "", 0, NULL, 0, o);
    if (finish_now) {
        rc |= format_chat_event_head(g, h, idx, o);
        rc |= buf_printf(o, "{},\"logprobs\":null,\"finish_reason\":\"%s\"",
                         format_finish(g, ch));
        rc |= format_chat_event_tail(g, o);
        ch->reported = 1;
    }
    return rc;
}

int format_body(struct gen *g, const struct format_head *h, struct buf *o)
{
    buf_clear(o);
    if (g->req.kind == API_REQ_CHAT)
        return format_chat_body(g, h, o);
    return format_text_body(g, h, o);
}

static int format_text_chunk(struct gen *g, int idx, const struct format_head *h,
                             struct buf *o)
{
    struct gen_choice *ch = &g->choices[idx];
    int echo_now = g->req.echo && !ch->started;
    size_t new_text = ch->safe > ch->sent ? ch->safe - ch->sent : 0;
    int finish_now = ch->done && !ch->reported;
    size_t new_lps = ch->n_lps > ch->lp_sent ? ch->n_lps - ch->lp_sent : 0;
    if (!echo_now && !new_text && !finish_now && !new_lps)
        return 0;
    int rc = buf_puts(o, "data: ");
    rc |= format_head(g, h, 1, o);
    rc |= buf_printf(o, ",\"choices\":[{\"index\":%d,\"text\":", idx);
    rc |= format_text_with_echo(g, ch, echo_now, ch->text.p ? ch->text.p + ch->sent : "",
                                new_text, o);
    rc |= buf_puts(o, ",\"logprobs\":");
    if (g->req.logprobs >= 0) {
        rc |= format_text_lps_of(g, ch, ch->lp_sent, echo_now, o);
        ch->lp_sent = ch->n_lps;
    } else {
        rc |= buf_puts(o, "null");
    }
    rc |= buf_puts(o, ",\"finish_reason\":");
    if (finish_now) {
        rc |= buf_printf(o, "\"%s\"", ch->finish ? ch->finish : "stop");
        ch->reported = 1;
    } else {
        rc |= buf_puts(o, "null");
    }
    rc |= buf_puts(o, "}]");
    if (g->req.include_usage)
        rc |= buf_puts(o, ",\"usage\":null");
    rc |= buf_puts(o, "}\n\n");
    ch->started = 1;
    ch->sent += new_text;
    return rc;
}

int format_chunk(struct gen *g, int i, const struct format_head *h, struct buf *o)
{
    if (g->req.kind == API_REQ_CHAT)
        return format_chat_chunk(g, i, h, o);
    return format_text_chunk(g, i, h, o);
}

int format_stream_end(const struct gen *g, const struct format_head *h, struct buf *o)
{
    int rc = 0;
    if (g->req.include_usage) {
        rc |= buf_puts(o, "data: ");
        rc |= format_head(g, h, 1, o);
        rc |= buf_puts(o, ",\"choices\":[],\"usage\":");
        rc |= format_usage(g, o);
        rc |= buf_puts(o, "}\n\n");
    }
    rc |= buf_puts(o, "data: [DONE]\n\n");
    return rc;
}

int format_stream_error(const struct gen *g, struct buf *o)
{
    const char *type = g->fail_status == 400 ? "invalid_request_error" : "server_error";
    int rc = buf_puts(o, "data: {\"error\":{\"message\":");
    rc |= buf_json_str(o, g->fail_msg, strlen(g->fail_msg));
    rc |= buf_printf(o, ",\"type\":\"%s\",\"param\":null,\"code\":%d}}\n\n", type,
                     g->fail_status);
    rc |= buf_puts(o, "data: [DONE]\n\n");
    return rc;
}
