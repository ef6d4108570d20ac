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
    if (!ms->m || !ms->owned)
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
        if (!strcmp(rs, "tool") || !strcmp(rs, "function"))
            return msg_fail(&e, "messages[%zu].role", i,
                            "messages[%zu]: the '%s' role is not supported (this server does "
                            "not support tools)",
                            i, rs);
        int role = msg_role(rs);
        if (!role)
            return msg_fail(&e, "messages[%zu].role", i,
                            "messages[%zu].role must be one of 'system', 'developer', 'user', "
                            "'assistant', got '%.32s'",
                            i, rs);
        json_t *tc = json_object_get(o, "tool_calls");
        if (tc && !json_is_null(tc) && !(json_is_array(tc) && json_array_size(tc) == 0))
            return msg_fail(&e, "messages[%zu].tool_calls", i,
                            "messages[%zu].tool_calls: tools are not supported", i);
        ms->m[i].role = role;
        json_t *c = json_object_get(o, "content");
        if (json_is_string(c)) {
            ms->m[i].content = json_string_value(c);
            ms->m[i].len = json_string_length(c);
        } else if (json_is_array(c)) {
            int rc = msg_parts(c, i, ms, &e);
            if (rc)
                return rc;
        } else {
            return msg_fail(&e, "messages[%zu].content", i,
                            "messages[%zu].content must be a string or an array of text parts",
                            i);
        }
    }
    return 0;
}

void messages_free(struct messages *ms)
{
    if (ms->owned)
        for (size_t i = 0; i < ms->n; i++)
            free(ms->owned[i]);
    free(ms->owned);
    free(ms->m);
    memset(ms, 0, sizeof(*ms));
}
