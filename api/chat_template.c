/* chat_template — the families' formats (api/chat_template.h).
 *
 * Each renderer follows its family's published template (the Jinja that
 * ships with the models' tokenizer_config.json) for the cases without
 * tools: the same literal strings, the same trimming (Jinja's trim and
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
    {"chatml", CHAT_TEMPLATE_CHATML}, {"llama3", CHAT_TEMPLATE_LLAMA3},
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

/* ---- the families ----------------------------------------------------- */

static void ct_chatml(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                      int gen, struct ct_out *o)
{
    for (size_t i = 0; i < n; i++) {
        if (i == 0 && m[0].role != CHAT_ROLE_SYSTEM && ct->default_system[0]) {
            ct_t(o, "<|im_start|>system\n");
            ct_t(o, ct->default_system);
            ct_t(o, "<|im_end|>\n");
        }
        ct_t(o, "<|im_start|>");
        ct_t(o, ct_role(m[i].role));
        ct_t(o, "\n");
        ct_c(o, &m[i], 0);
        ct_t(o, "<|im_end|>\n");
    }
    if (gen)
        ct_t(o, "<|im_start|>assistant\n");
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

static void ct_llama31(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                       int gen, struct ct_out *o)
{
    size_t i = 0;
    ct_t(o, ct->bos);
    /* the 3.1 template always writes the system block, with its dates
     * ("26 Jul 2024" is what it uses when no date_string is given) */
    ct_t(o, "<|start_header_id|>system<|end_header_id|>\n\n");
    ct_t(o, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    if (n && m[0].role == CHAT_ROLE_SYSTEM)
        ct_c(o, &m[i++], 1);
    ct_t(o, "<|eot_id|>");
    for (; i < n; i++)
        ct_llama3_turn(&m[i], o);
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

int chat_template_render(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                         int gen, struct buf *text, struct buf *mask, char *msg, size_t cap)
{
    struct ct_out o = {text, mask, 0};
    const char *name = chat_template_name(ct->family);
    msg[0] = '\0';
    switch (ct->family) {
    case CHAT_TEMPLATE_CHATML:
        ct_chatml(ct, m, n, gen, &o);
        break;
    case CHAT_TEMPLATE_LLAMA3:
        ct_llama3(ct, m, n, gen, &o);
        break;
    case CHAT_TEMPLATE_LLAMA31:
        ct_llama31(ct, m, n, gen, &o);
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
