/* messages — chat messages validation (api/messages.h). Thread: any. */
#include "api/messages.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/err.h"

struct msg_err {
    char *param, *msg;
    size_t param_cap, msg_cap;
};

static int msg_fail(const struct msg_err *e, const char *param_fmt, size_t i, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));
static int msg_fail(const struct msg_err *e, const char *param_fmt, size_t i, const char *fmt,
                    ...)
{
    va_list ap;
    snprintf(e->param, e->param_cap, param_fmt, i);
    va_start(ap, fmt);
    vsnprintf(e->msg, e->msg_cap, fmt, ap);
    va_end(ap);
    return INF_EINVAL;
}

static int msg_role(const char *r)
{
    if (!strcmp(r, "tool"))
        return CHAT_ROLE_TOOL;
    if (!strcmp(r, "system") || !strcmp(r, "developer"))
        return CHAT_ROLE_SYSTEM;
    if (!strcmp(r, "user"))
        return CHAT_ROLE_USER;
    if (!strcmp(r, "assistant"))
        return CHAT_ROLE_ASSISTANT;
    return 0;
}

/* An array of content parts: only text parts, joined with "\n". */
static int msg_parts(json_t *c, size_t i, struct messages *ms, const struct msg_err *e)
{
    size_t np = json_array_size(c), total = 0;
    for (size_t k = 0; k < np; k++) {
        json_t *p = json_array_get(c, k);
        json_t *ty = json_is_object(p) ? json_object_get(p, "type") : NULL;
        if (!json_is_string(ty))
            return msg_fail(e, "messages[%zu].content", i,
                            "messages[%zu].content[%zu] must be an object with a string type", i,
                            k);
        if (strcmp(json_string_value(ty), "text"))
            return msg_fail(e, "messages[%zu].content", i,
                            "messages[%zu].content[%zu]: content parts of type '%.32s' are not "
                            "supported (only 'text')",
                            i, k, json_string_value(ty));
        json_t *t = json_object_get(p, "text");
        if (!json_is_string(t))
            return msg_fail(e, "messages[%zu].content", i,
                            "messages[%zu].content[%zu].text must be a string", i, k);
        total += json_string_length(t) + 1;
    }
    char *s = malloc(total + 1);
    if (!s)
        return INF_ENOMEM;
    size_t off = 0;
    for (size_t k = 0; k < np; k++) {
        json_t *t = json_object_get(json_array_get(c, k), "text");
        if (k)
            s[off++] = '\n';
        memcpy(s + off, json_string_value(t), json_string_length(t));
        off += json_string_length(t);
    }
    s[off] = '\0';
    ms->owned[i] = s;
    ms->m[i].content = s;
    ms->m[i].len = off;
    return 0;
}

/* An assistant's tool_calls: [{"id", "type": "function", "function":
 * {"name", "arguments": a string}}]. The arguments are parsed (the
 * templates write the object); a string that is not JSON stays a string. */
static int msg_calls(json_t *tc, size_t i, struct messages *ms, const struct msg_err *e)
{
    if (!json_is_array(tc))
        return msg_fail(e, "messages[%zu].tool_calls", i,
                        "messages[%zu].tool_calls must be an array", i);
    size_t n = json_array_size(tc);
    struct chat_call *calls = calloc(n, sizeof(*calls));
    if (!calls)
        return INF_ENOMEM;
    ms->calls[i] = calls;
    ms->m[i].calls = calls;
    for (size_t k = 0; k < n; k++) {
        json_t *c = json_array_get(tc, k);
        json_t *ty = json_is_object(c) ? json_object_get(c, "type") : NULL;
        json_t *f = json_is_object(c) ? json_object_get(c, "function") : NULL;
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if ((ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "function"))) ||
            !json_is_object(f) || !json_is_string(name) || !json_string_length(name) ||
            strlen(json_string_value(name)) != json_string_length(name) ||
            (args && !json_is_string(args) && !json_is_object(args)))
            return msg_fail(e, "messages[%zu].tool_calls", i,
                            "messages[%zu].tool_calls[%zu] must be {\"type\": \"function\", "
                            "\"function\": {\"name\": a string, \"arguments\": a string}}",
                            i, k);
        calls[k].name = json_string_value(name);
        if (json_is_object(args)) {
            calls[k].args = json_incref(args);
        } else if (args) {
            calls[k].args = json_loadb(json_string_value(args), json_string_length(args),
                                       JSON_DECODE_ANY, NULL);
            if (!calls[k].args)
                calls[k].args = json_incref(args);
        } else {
            calls[k].args = json_object();
        }
        if (!calls[k].args)
            return INF_ENOMEM;
        ms->m[i].n_calls = k + 1;
    }
    return 0;
}

int messages_parse(json_t *v, struct messages *ms, char *param, size_t param_cap, char *msg,
                   size_t msg_cap)
{
    struct msg_err e = {param, msg, param_cap, msg_cap};
    memset(ms, 0, sizeof(*ms));
    if (!v || json_is_null(v))
        return msg_fail(&e, "messages", 0, "messages is required");
    if (!json_is_array(v))
        return msg_fail(&e, "messages", 0, "messages must be an array of message objects");
    size_t n = json_array_size(v);
    if (n == 0)
        return msg_fail(&e, "messages", 0, "messages must not be empty");
    ms->m = calloc(n, sizeof(*ms->m));
    ms->owned = calloc(n, sizeof(*ms->owned));
    ms->calls = calloc(n, sizeof(*ms->calls));
    if (!ms->m || !ms->owned || !ms->calls)
        return INF_ENOMEM;
    ms->n = n;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(v, i);
        if (!json_is_object(o))
            return msg_fail(&e, "messages[%zu]", i, "messages[%zu] must be an object", i);
        json_t *r = json_object_get(o, "role");
        if (!json_is_string(r))
            return msg_fail(&e, "messages[%zu].role", i, "messages[%zu].role must be a string",
                            i);
        const char *rs = json_string_value(r);
        if (!strcmp(rs, "function"))
            return msg_fail(&e, "messages[%zu].role", i,
                            "messages[%zu]: the 'function' role (OpenAI's deprecated functions) "
                            "is not supported; use tools and the 'tool' role",
                            i);
        int role = msg_role(rs);
        if (!role)
            return msg_fail(&e, "messages[%zu].role", i,
                            "messages[%zu].role must be one of 'system', 'developer', 'user', "
                            "'assistant', 'tool', got '%.32s'",
                            i, rs);
        ms->m[i].role = role;
        json_t *tc = json_object_get(o, "tool_calls");
        if (tc && !json_is_null(tc) && !(json_is_array(tc) && json_array_size(tc) == 0)) {
            if (role != CHAT_ROLE_ASSISTANT)
                return msg_fail(&e, "messages[%zu].tool_calls", i,
                                "messages[%zu].tool_calls: only assistant messages make tool "
                                "calls",
                                i);
            int rc = msg_calls(tc, i, ms, &e);
            if (rc)
                return rc;
        }
        /* an assistant's reasoning (vLLM's reasoning_content, as a reasoning
         * model's answer carries it): a template with reasoning turns writes
         * it in the turn's <think> block; the others leave it out, as theirs do */
        json_t *rc_ = json_object_get(o, "reasoning_content");
        if (role == CHAT_ROLE_ASSISTANT && json_is_string(rc_)) {
            ms->m[i].reasoning = json_string_value(rc_);
            ms->m[i].reasoning_len = json_string_length(rc_);
        } else if (role == CHAT_ROLE_ASSISTANT && rc_ && !json_is_null(rc_)) {
            return msg_fail(&e, "messages[%zu].reasoning_content", i,
                            "messages[%zu].reasoning_content must be a string or null", i);
        }
        json_t *c = json_object_get(o, "content");
        if (json_is_string(c)) {
            ms->m[i].content = json_string_value(c);
            ms->m[i].len = json_string_length(c);
        } else if (json_is_array(c)) {
            int rc = msg_parts(c, i, ms, &e);
            if (rc)
                return rc;
        } else if (!((ms->m[i].n_calls || ms->m[i].reasoning) && (!c || json_is_null(c)))) {
            return msg_fail(&e, "messages[%zu].content", i,
                            "messages[%zu].content must be a string or an array of text parts%s",
                            i,
                            role == CHAT_ROLE_ASSISTANT
                                ? " (or null with tool_calls or reasoning_content)"
                                : "");
        }
    }
    return 0;
}

void messages_free(struct messages *ms)
{
    for (size_t i = 0; i < ms->n; i++) {
        if (ms->owned)
            free(ms->owned[i]);
        for (size_t k = 0; ms->m && k < ms->m[i].n_calls; k++)
            json_decref(ms->m[i].calls[k].args);
        if (ms->calls)
            free(ms->calls[i]);
    }
    free(ms->owned);
    free(ms->calls);
    free(ms->m);
    memset(ms, 0, sizeof(*ms));
}
