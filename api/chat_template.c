/* chat_template — the families' formats (api/chat_template.h).
 *
 * Each renderer follows its family's published template (the Jinja that
 * ships with the models' tokenizer_config.json; for tools Qwen2.5's and
 * Llama 3.1's): the same literal strings, the same trimming (Jinja's trim and
 * Python's strip, here ASCII whitespace), the same placement of bos_token
 * and eos_token. Where a template raises (roles that do not alternate, a
 * system message it cannot place) the renderer returns INF_EINVAL with the
 * reason.
 * Thread: any.
 */
#include "api/chat_template.h"

#include <stdio.h>
#include <string.h>

#include "engine/err.h"

static const struct {
    const char *name;
    int family;
} chat_template_names[] = {
    {"chatml", CHAT_TEMPLATE_CHATML}, {"qwen3", CHAT_TEMPLATE_CHATML},
    {"llama3", CHAT_TEMPLATE_LLAMA3},
    {"llama3.1", CHAT_TEMPLATE_LLAMA31}, {"llama2", CHAT_TEMPLATE_LLAMA2},
    {"mistral", CHAT_TEMPLATE_MISTRAL}, {"gemma", CHAT_TEMPLATE_GEMMA},
};

#define CT_NNAMES (sizeof(chat_template_names) / sizeof(chat_template_names[0]))

int chat_template_family(const char *name)
{
    for (size_t i = 0; i < CT_NNAMES; i++)
        if (!strcmp(chat_template_names[i].name, name))
            return chat_template_names[i].family;
    return -1;
}

int chat_template_named_think(const char *name)
{
    return !strcmp(name, "qwen3");
}

const char *chat_template_name(int family)
{
    for (size_t i = 0; i < CT_NNAMES; i++)
        if (chat_template_names[i].family == family)
            return chat_template_names[i].name;
    return "none";
}

static int ct_has(const char *s, size_t n, const char *needle)
{
    return s && memmem(s, n, needle, strlen(needle)) != NULL;
}

int chat_template_detect(const char *t, size_t n)
{
    /* Markers that only the family's format writes; checked most specific
     * first ("[INST]" with "<<SYS>>" is Llama 2, without it Mistral). */
    if (ct_has(t, n, "<|im_start|>"))
        return CHAT_TEMPLATE_CHATML;
    if (ct_has(t, n, "<|start_header_id|>"))
        return ct_has(t, n, "Cutting Knowledge Date") ? CHAT_TEMPLATE_LLAMA31
                                                      : CHAT_TEMPLATE_LLAMA3;
    if (ct_has(t, n, "<start_of_turn>"))
        return CHAT_TEMPLATE_GEMMA;
    if (ct_has(t, n, "[INST]"))
        return ct_has(t, n, "<<SYS>>") ? CHAT_TEMPLATE_LLAMA2 : CHAT_TEMPLATE_MISTRAL;
    return CHAT_TEMPLATE_NONE;
}

/* ChatML templates that insert a system message when the conversation has
 * none write it as one literal: '<|im_start|>system\n<text><|im_end|>'.
 * Find the first such literal whose text is plain (no quote, no Jinja
 * expression); "\n" may be a newline or the two-character escape. */
static void ct_default_system(const char *t, size_t n, char *out, size_t cap)
{
    static const char open[] = "<|im_start|>system";
    static const char close[] = "<|im_end|>";
    out[0] = '\0';
    const char *p = t, *end = t + n;
    while (p && p < end) {
        const char *m = memmem(p, (size_t)(end - p), open, sizeof(open) - 1);
        if (!m)
            return;
        const char *s = m + sizeof(open) - 1;
        p = s;
        if (s < end && *s == '\n')
            s += 1;
        else if (end - s >= 2 && s[0] == '\\' && s[1] == 'n')
            s += 2;
        else
            continue;
        const char *c = memmem(s, (size_t)(end - s), close, sizeof(close) - 1);
        if (!c || c == s)
            continue;
        size_t k = 0;
        int plain = 1;
        for (const char *q = s; q < c && plain; q++) {
            if (*q == '\'' || *q == '"' || *q == '{' || *q == '}' || *q == '+') {
                plain = 0;
            } else if (*q == '\\') {
                if (q + 1 < c && q[1] == 'n') {
                    if (k + 1 < cap)
                        out[k++] = '\n';
                    q++;
                } else {
                    plain = 0;
                }
            } else if (k + 1 < cap) {
                out[k++] = *q;
            }
        }
        out[plain ? k : 0] = '\0';
        if (plain && k)
            return;
    }
}

void chat_template_init(struct chat_template *ct, int family, const char *tmpl, size_t len,
                        const char *bos, const char *eos)
{
    memset(ct, 0, sizeof(*ct));
    ct->family = family;
    snprintf(ct->bos, sizeof(ct->bos), "%s", bos ? bos : "");
    snprintf(ct->eos, sizeof(ct->eos), "%s", eos ? eos : "");
    if (family == CHAT_TEMPLATE_CHATML && tmpl)
        ct_default_system(tmpl, len, ct->default_system, sizeof(ct->default_system));
    /* A ChatML template without <tool_call> (Qwen2's, most non-Qwen
     * ChatML models) was not trained on Qwen's tool format: refused rather
     * than prompted in a format the model never saw. Naming the family in
     * the config is the operator saying it was (the caller sets tools). */
    ct->tools = family == CHAT_TEMPLATE_LLAMA31 ||
                (family == CHAT_TEMPLATE_CHATML && (!tmpl || ct_has(tmpl, len, "<tool_call>")));
    /* Qwen3's: its turns carry <think> blocks and enable_thinking empties
     * the new one; Qwen3's thinking-only releases (and QwQ's) read no
     * enable_thinking but open the block in the generation prompt (the
     * Jinja literal, its \n written as the two characters or as a newline) */
    ct->think_open = family == CHAT_TEMPLATE_CHATML &&
                     (ct_has(tmpl, len, "'<|im_start|>assistant\\n<think>\\n'") ||
                      ct_has(tmpl, len, "'<|im_start|>assistant\n<think>\n'"));
    ct->think = family == CHAT_TEMPLATE_CHATML && ct_has(tmpl, len, "<think>") &&
                (ct_has(tmpl, len, "enable_thinking") || ct->think_open);
}

const char *chat_template_eot(const struct chat_template *ct)
{
    switch (ct->family) {
    case CHAT_TEMPLATE_CHATML: return "<|im_end|>";
    case CHAT_TEMPLATE_LLAMA3:
    case CHAT_TEMPLATE_LLAMA31: return "<|eot_id|>";
    case CHAT_TEMPLATE_GEMMA: return "<end_of_turn>";
    default: return ct->eos; /* [INST] formats end a turn with eos_token */
    }
}

/* ---- output ---------------------------------------------------------- */

struct ct_out {
    struct buf *text, *mask;
    int rc;
};

static void ct_put(struct ct_out *o, const char *s, size_t n, int tmpl)
{
    static const char ones[64] = {
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
        1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    static const char zeros[64];
    if (o->rc || !n)
        return;
    o->rc = buf_append(o->text, s, n);
    for (size_t i = 0; i < n && !o->rc; i += sizeof(ones)) {
        size_t k = n - i < sizeof(ones) ? n - i : sizeof(ones);
        o->rc = buf_append(o->mask, tmpl ? ones : zeros, k);
    }
}

static void ct_t(struct ct_out *o, const char *s)
{
    ct_put(o, s, strlen(s), 1);
}

static int ct_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Content, optionally trimmed (Jinja's trim / Python's strip). */
static void ct_c(struct ct_out *o, const struct chat_msg *m, int trim)
{
    const char *s = m->content;
    size_t n = m->len;
    if (trim) {
        while (n && ct_space(*s))
            s++, n--;
        while (n && ct_space(s[n - 1]))
            n--;
    }
    ct_put(o, s, n, 0);
}

/* Strip the whitespace at both ends of what was written since offset
 * from: the Llama 2 template strips a turn's whole content, system block
 * included. */
static void ct_strip_since(struct ct_out *o, size_t from)
{
    struct buf *t = o->text, *m = o->mask;
    if (o->rc || t->len <= from)
        return;
    size_t s = from;
    while (s < t->len && ct_space(t->p[s]))
        s++;
    size_t e = t->len;
    while (e > s && ct_space(t->p[e - 1]))
        e--;
    memmove(t->p + from, t->p + s, e - s);
    memmove(m->p + from, m->p + s, e - s);
    t->len = m->len = from + (e - s);
    t->p[t->len] = '\0';
    m->p[m->len] = '\0';
}

static const char *ct_role(int role)
{
    return role == CHAT_ROLE_SYSTEM ? "system" : role == CHAT_ROLE_USER ? "user" : "assistant";
}

static int ct_fail(char *msg, size_t cap, const char *fmt, const char *family)
{
    snprintf(msg, cap, fmt, family);
    return INF_EINVAL;
}

/* Jinja's tojson (Python's json.dumps, ensure_ascii off): indent 0 is one
 * line with ", " and ": ", else one member a line. Content bytes (mask 0):
 * a signature's text must not become special tokens. */
static int ct_json_cb(const char *p, size_t n, void *ud)
{
    ct_put(ud, p, n, 0);
    return ((struct ct_out *)ud)->rc ? -1 : 0;
}

static void ct_json(struct ct_out *o, json_t *v, int indent)
{
    if (o->rc)
        return;
    if (json_dump_callback(v, ct_json_cb, o, JSON_INDENT(indent) | JSON_ENCODE_ANY) && !o->rc)
        o->rc = -1;
}

/* One call as both formats write it: {"name": "NAME", "KEY": ARGS} */
static void ct_call(struct ct_out *o, const struct chat_call *c, const char *key)
{
    ct_t(o, "{\"name\": \"");
    ct_put(o, c->name, strlen(c->name), 0);
    ct_t(o, "\", \"");
    ct_t(o, key);
    ct_t(o, "\": ");
    ct_json(o, c->args, 0);
    ct_t(o, "}");
}

static int ct_uses_tools(const struct chat_msg *m, size_t n, const struct chat_tools *tools)
{
    if (tools && json_array_size(tools->defs))
        return 1;
    for (size_t i = 0; i < n; i++)
        if (m[i].role == CHAT_ROLE_TOOL || m[i].n_calls)
            return 1;
    return 0;
}

/* ---- the families ----------------------------------------------------- */

/* Qwen2.5's tool template (Qwen3's writes the same bytes when the
 * conversation has a system message or the template no default one). */
static void ct_chatml_tools_system(const struct chat_template *ct, const struct chat_msg *sys,
                                   json_t *defs, struct ct_out *o)
{
    ct_t(o, "<|im_start|>system\n");
    if (sys)
        ct_c(o, sys, 0);
    else
        ct_t(o, ct->default_system);
    if ((sys && sys->len) || (!sys && ct->default_system[0]))
        ct_t(o, "\n\n");
    ct_t(o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            "<tools>");
    for (size_t k = 0; k < json_array_size(defs); k++) {
        ct_t(o, "\n");
        ct_json(o, json_array_get(defs, k), 0);
    }
    ct_t(o, "\n</tools>\n\nFor each function call, return a json object with function name "
            "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
            "</tool_call><|im_end|>\n");
}

/* ---- Qwen3's reasoning turns (ct->think) ---- */

/* The last needle in s[0..n), or NULL (the first one: memmem). */
static const char *ct_find_last(const char *s, size_t n, const char *needle)
{
    const size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, needle, k))
            return s + i;
    return NULL;
}

/* Past the newlines at the start of [p, e); before those at its end. */
static const char *ct_skip_nl(const char *p, const char *e)
{
    while (p < e && *p == '\n')
        p++;
    return p;
}

static const char *ct_back_nl(const char *p, const char *e)
{
    while (e > p && e[-1] == '\n')
        e--;
    return e;
}

/* An assistant message's content and reasoning as the template reads them:
 * its reasoning_content when given, else (when "</think>" is in the
 * content) the content after the last "</think>" with its leading
 * newlines dropped, and the reasoning the part before the first one, past
 * its last "<think>", newlines dropped at both ends. */
struct ct_think {
    const char *c, *r;
    size_t cn, rn;
};

static void ct_think_split(const struct chat_msg *m, struct ct_think *t)
{
    t->c = m->content ? m->content : "";
    t->cn = m->len;
    t->r = m->reasoning ? m->reasoning : "";
    t->rn = m->reasoning ? m->reasoning_len : 0;
    const char *first = m->reasoning ? NULL : memmem(t->c, t->cn, "</think>", 8);
    if (!first)
        return;
    const char *end = t->c + t->cn;
    const char *last = ct_skip_nl(ct_find_last(t->c, t->cn, "</think>") + 8, end);
    const char *r = t->c, *re = ct_back_nl(r, first);
    const char *open = ct_find_last(r, (size_t)(re - r), "<think>");
    r = ct_skip_nl(open ? open + 7 : r, re);
    t->r = r;
    t->rn = (size_t)(re - r);
    t->c = last;
    t->cn = (size_t)(end - last);
}

/* The index of the last user message that is a query (not a turn of
 * <tool_response> blocks a client wrote as user), n - 1 when none. */
static size_t ct_last_query(const struct chat_msg *m, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        const char *c = m[i].content ? m[i].content : "";
        const size_t k = m[i].len;
        const int wrapped = k >= 15 && !memcmp(c, "<tool_response>", 15) && k >= 16 &&
                            !memcmp(c + k - 16, "</tool_response>", 16);
        if (m[i].role == CHAT_ROLE_USER && !wrapped)
            return i;
    }
    return n ? n - 1 : 0;
}

/* An assistant turn of a ct->think template (i of n, lq the last query). */
static void ct_think_turn(const struct chat_msg *m, size_t i, size_t n, size_t lq, struct ct_out *o)
{
    struct ct_think t;
    ct_think_split(&m[i], &t);
    ct_t(o, "<|im_start|>assistant\n");
    if (i > lq && (i + 1 == n || t.rn)) {
        const char *r = ct_skip_nl(t.r, t.r + t.rn), *re = ct_back_nl(r, t.r + t.rn);
        const char *c = ct_skip_nl(t.c, t.c + t.cn), *ce = t.c + t.cn;
        ct_t(o, "<think>\n");
        ct_put(o, r, (size_t)(re - r), 0);
        ct_t(o, "\n</think>\n\n");
        ct_put(o, c, (size_t)(ce - c), 0);
    } else {
        ct_put(o, t.c, t.cn, 0);
    }
    for (size_t k = 0; k < m[i].n_calls; k++) {
        if (k || t.cn)
            ct_t(o, "\n");
        ct_t(o, "<tool_call>\n");
        ct_call(o, &m[i].calls[k], "arguments");
        ct_t(o, "\n</tool_call>");
    }
    ct_t(o, "<|im_end|>\n");
}

static void ct_chatml_tools(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                            const struct chat_tools *tools, int gen, struct ct_out *o)
{
    const size_t lq = ct->think ? ct_last_query(m, n) : 0;
    size_t i = 0;
    json_t *defs = tools ? tools->defs : NULL;
    if (json_array_size(defs)) {
        const struct chat_msg *sys = n && m[0].role == CHAT_ROLE_SYSTEM ? &m[i++] : NULL;
        ct_chatml_tools_system(ct, sys, defs, o);
    } else if (n && m[0].role != CHAT_ROLE_SYSTEM && ct->default_system[0]) {
        ct_t(o, "<|im_start|>system\n");
        ct_t(o, ct->default_system);
        ct_t(o, "<|im_end|>\n");
    }
    for (; i < n; i++) {
        if (m[i].role == CHAT_ROLE_TOOL) {
            if (i == 0 || m[i - 1].role != CHAT_ROLE_TOOL)
                ct_t(o, "<|im_start|>user");
            ct_t(o, "\n<tool_response>\n");
            ct_c(o, &m[i], 0);
            ct_t(o, "\n</tool_response>");
            if (i + 1 == n || m[i + 1].role != CHAT_ROLE_TOOL)
                ct_t(o, "<|im_end|>\n");
            continue;
        }
        if (ct->think && m[i].role == CHAT_ROLE_ASSISTANT) {
            ct_think_turn(m, i, n, lq, o);
            continue;
        }
        ct_t(o, "<|im_start|>");
        ct_t(o, ct_role(m[i].role));
        if (!m[i].n_calls || m[i].len) { /* a call-only turn has no newline of its own */
            ct_t(o, "\n");
            ct_c(o, &m[i], 0);
        }
        for (size_t k = 0; k < m[i].n_calls; k++) {
            ct_t(o, "\n<tool_call>\n");
            ct_call(o, &m[i].calls[k], "arguments");
            ct_t(o, "\n</tool_call>");
        }
        ct_t(o, "<|im_end|>\n");
    }
    if (gen) {
        ct_t(o, "<|im_start|>assistant\n");
        if (ct->think && tools && tools->no_think)
            ct_t(o, "<think>\n\n</think>\n\n");
        else if (ct->think_open)
            ct_t(o, "<think>\n");
        if (tools && tools->forced)
            ct_t(o, "<tool_call>\n");
    }
}

static void ct_llama3_turn(const struct chat_msg *m, struct ct_out *o)
{
    ct_t(o, "<|start_header_id|>");
    ct_t(o, ct_role(m->role));
    ct_t(o, "<|end_header_id|>\n\n");
    ct_c(o, m, 1);
    ct_t(o, "<|eot_id|>");
}

static void ct_llama3(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                      int gen, struct ct_out *o)
{
    for (size_t i = 0; i < n; i++) {
        if (i == 0)
            ct_t(o, ct->bos);
        ct_llama3_turn(&m[i], o);
    }
    if (gen)
        ct_t(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 3.1's template, tools_in_user_message (its default): the
 * signatures open the first message after the system one. */
static void ct_llama31(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                       const struct chat_tools *tools, int gen, struct ct_out *o)
{
    size_t i = 0;
    json_t *defs = tools ? tools->defs : NULL;
    ct_t(o, ct->bos);
    /* the 3.1 template always writes the system block, with its dates
     * ("26 Jul 2024" is what it uses when no date_string is given) */
    ct_t(o, "<|start_header_id|>system<|end_header_id|>\n\n");
    if (json_array_size(defs))
        ct_t(o, "Environment: ipython\n");
    ct_t(o, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    if (n && m[0].role == CHAT_ROLE_SYSTEM)
        ct_c(o, &m[i++], 1);
    ct_t(o, "<|eot_id|>");
    if (json_array_size(defs)) {
        ct_t(o, "<|start_header_id|>user<|end_header_id|>\n\n");
        ct_t(o, "Given the following functions, please respond with a JSON for a function call "
                "with its proper arguments that best answers the given prompt.\n\n"
                "Respond in the format {\"name\": function name, \"parameters\": dictionary "
                "of argument name and its value}.Do not use variables.\n\n");
        for (size_t k = 0; k < json_array_size(defs); k++) {
            ct_json(o, json_array_get(defs, k), 4);
            ct_t(o, "\n\n");
        }
        ct_c(o, &m[i++], 1);
        ct_t(o, "<|eot_id|>");
    }
    for (; i < n; i++) {
        if (m[i].role == CHAT_ROLE_TOOL) {
            /* the template's `content is iterable` holds for a string too:
             * tojson writes it quoted */
            json_t *s = json_stringn_nocheck(m[i].content ? m[i].content : "", m[i].len);
            ct_t(o, "<|start_header_id|>ipython<|end_header_id|>\n\n");
            if (!s)
                o->rc = -1;
            else
                ct_json(o, s, 0);
            json_decref(s);
            ct_t(o, "<|eot_id|>");
        } else if (m[i].n_calls) {
            ct_t(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
            ct_call(o, &m[i].calls[0], "parameters");
            ct_t(o, "<|eot_id|>");
        } else {
            ct_llama3_turn(&m[i], o);
        }
    }
    if (gen)
        ct_t(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* The [INST] and Gemma formats take a leading system message (placed into
 * the first user turn) and then strictly user, assistant, user, ... */
static int ct_alternating(const struct chat_msg *m, size_t n, const char *family, char *msg,
                          size_t cap)
{
    size_t i = n && m[0].role == CHAT_ROLE_SYSTEM ? 1 : 0;
    if (i == n)
        return ct_fail(msg, cap, "the %s template needs a user message", family);
    for (size_t k = 0; i < n; i++, k++) {
        if (m[i].role == CHAT_ROLE_SYSTEM)
            return ct_fail(msg, cap,
                           "the %s template allows a system message only as the first message",
                           family);
        if ((m[i].role == CHAT_ROLE_USER) != (k % 2 == 0))
            return ct_fail(msg, cap,
                           "the %s template needs roles that alternate user/assistant/user/... "
                           "(after an optional first system message)",
                           family);
    }
    return 0;
}

static void ct_llama2(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                      struct ct_out *o)
{
    const struct chat_msg *sys = m[0].role == CHAT_ROLE_SYSTEM ? &m[0] : NULL;
    for (size_t i = sys ? 1 : 0, k = 0; i < n; i++, k++) {
        if (m[i].role == CHAT_ROLE_USER) {
            ct_t(o, ct->bos);
            ct_t(o, "[INST] ");
            size_t from = o->text->len;
            if (k == 0 && sys) {
                ct_t(o, "<<SYS>>\n");
                ct_c(o, sys, 0);
                ct_t(o, "\n<</SYS>>\n\n");
            }
            ct_c(o, &m[i], 0);
            ct_strip_since(o, from);
            ct_t(o, " [/INST]");
        } else {
            ct_t(o, " ");
            ct_c(o, &m[i], 1);
            ct_t(o, " ");
            ct_t(o, ct->eos);
        }
    }
}

static void ct_mistral(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                       struct ct_out *o)
{
    const struct chat_msg *sys = m[0].role == CHAT_ROLE_SYSTEM ? &m[0] : NULL;
    ct_t(o, ct->bos);
    for (size_t i = sys ? 1 : 0, k = 0; i < n; i++, k++) {
        if (m[i].role == CHAT_ROLE_USER) {
            ct_t(o, "[INST] ");
            if (k == 0 && sys) {
                ct_c(o, sys, 0);
                ct_t(o, "\n\n");
            }
            ct_c(o, &m[i], 0);
            ct_t(o, " [/INST]");
        } else {
            ct_c(o, &m[i], 0);
            ct_t(o, ct->eos);
        }
    }
}

static void ct_gemma(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                     int gen, struct ct_out *o)
{
    const struct chat_msg *sys = m[0].role == CHAT_ROLE_SYSTEM ? &m[0] : NULL;
    ct_t(o, ct->bos);
    for (size_t i = sys ? 1 : 0, k = 0; i < n; i++, k++) {
        ct_t(o, "<start_of_turn>");
        ct_t(o, m[i].role == CHAT_ROLE_USER ? "user" : "model");
        ct_t(o, "\n");
        if (k == 0 && sys) {
            ct_c(o, sys, 0);
            ct_t(o, "\n\n");
        }
        ct_c(o, &m[i], 1);
        ct_t(o, "<end_of_turn>\n");
    }
    if (gen)
        ct_t(o, "<start_of_turn>model\n");
}

int chat_template_no_tools(const struct chat_template *ct, char *msg, size_t cap)
{
    const char *name = chat_template_name(ct->family);
    if (ct->tools)
        return 0;
    return ct->family == CHAT_TEMPLATE_CHATML
               ? ct_fail(msg, cap,
                         "the model's %s template has no tool-call format (no <tool_call> in "
                         "tokenizer.chat_template); set chat_template = chatml in the config if "
                         "the model was trained on Qwen's",
                         name)
               : ct_fail(msg, cap, "the %s chat template has no tool-call format", name);
}

/* What the tool formats cannot take; 0 when the conversation renders. */
static int ct_tools_check(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                          const struct chat_tools *tools, char *msg, size_t cap)
{
    const char *name = chat_template_name(ct->family);
    if (chat_template_no_tools(ct, msg, cap))
        return INF_EINVAL;
    if (ct->family != CHAT_TEMPLATE_LLAMA31)
        return 0;
    size_t first = n && m[0].role == CHAT_ROLE_SYSTEM ? 1 : 0;
    if (tools && json_array_size(tools->defs) && first == n)
        return ct_fail(msg, cap,
                       "the %s template puts the tools in the first user message: the "
                       "conversation needs one",
                       name);
    for (size_t i = 0; i < n; i++)
        if (m[i].n_calls > 1)
            return ct_fail(msg, cap,
                           "the %s template takes one tool call an assistant message", name);
    return 0;
}

int chat_template_render_tools(const struct chat_template *ct, const struct chat_msg *m,
                               size_t n, const struct chat_tools *tools, int gen,
                               struct buf *text, struct buf *mask, char *msg, size_t cap)
{
    struct ct_out o = {text, mask, 0};
    const char *name = chat_template_name(ct->family);
    msg[0] = '\0';
    if (ct->family != CHAT_TEMPLATE_NONE && ct_uses_tools(m, n, tools) &&
        ct_tools_check(ct, m, n, tools, msg, cap))
        return INF_EINVAL;
    switch (ct->family) {
    case CHAT_TEMPLATE_CHATML:
        ct_chatml_tools(ct, m, n, tools, gen, &o);
        break;
    case CHAT_TEMPLATE_LLAMA3:
        ct_llama3(ct, m, n, gen, &o);
        break;
    case CHAT_TEMPLATE_LLAMA31:
        ct_llama31(ct, m, n, tools, gen, &o);
        break;
    case CHAT_TEMPLATE_LLAMA2:
    case CHAT_TEMPLATE_MISTRAL:
    case CHAT_TEMPLATE_GEMMA:
        if (ct_alternating(m, n, name, msg, cap))
            return INF_EINVAL;
        if (ct->family == CHAT_TEMPLATE_LLAMA2)
            ct_llama2(ct, m, n, &o);
        else if (ct->family == CHAT_TEMPLATE_MISTRAL)
            ct_mistral(ct, m, n, &o);
        else
            ct_gemma(ct, m, n, gen, &o);
        break;
    default:
        return ct_fail(msg, cap, "no chat template (%s)", name);
    }
    return o.rc ? INF_ENOMEM : 0;
}

int chat_template_render(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                         int gen, struct buf *text, struct buf *mask, char *msg, size_t cap)
{
    return chat_template_render_tools(ct, m, n, NULL, gen, text, mask, msg, cap);
}
