/* tools — tools / tool_choice / parallel_tool_calls of a chat request
 * (api/tools.h). Thread: any (a parse-pool worker: every json_t made here
 * is freed before the job ends). */
#include "api/tools.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_template.h"
#include "api/schema.h"
#include "engine/jsonc.h"

struct tl_err {
    char *param, *msg;
    size_t param_cap, cap;
};

static int tl_fail(const struct tl_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tl_fail(const struct tl_err *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    snprintf(e->param, e->param_cap, "%s", param);
    va_start(ap, fmt);
    vsnprintf(e->msg, e->cap, fmt, ap);
    va_end(ap);
    return -1;
}

static int tl_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > TOOLS_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* tools[i] is {"type": "function", "function": {"name", "description"?,
 * "parameters"?, "strict"?}}: its function object, or NULL (refused). */
static json_t *tl_function(json_t *tool, size_t i, const struct tl_err *e)
{
    char param[48];
    snprintf(param, sizeof(param), "tools[%zu]", i);
    json_t *ty = json_is_object(tool) ? json_object_get(tool, "type") : NULL;
    json_t *f = json_is_object(tool) ? json_object_get(tool, "function") : NULL;
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "function") || !json_is_object(f)) {
        tl_fail(e, param, "tools[%zu] must be {\"type\": \"function\", \"function\": {...}}", i);
        return NULL;
    }
    json_t *name = json_object_get(f, "name"), *d = json_object_get(f, "description");
    json_t *p = json_object_get(f, "parameters"), *st = json_object_get(f, "strict");
    if (!json_is_string(name) || !tl_name_ok(json_string_value(name), json_string_length(name))) {
        tl_fail(e, param,
                "tools[%zu].function.name must be 1..64 characters of a-z, A-Z, 0-9, _ and -", i);
        return NULL;
    }
    if ((d && !json_is_string(d) && !json_is_null(d)) ||
        (p && !json_is_object(p) && !json_is_null(p)) ||
        (st && !json_is_boolean(st) && !json_is_null(st))) {
        tl_fail(e, param,
                "tools[%zu].function: description must be a string, parameters a JSON Schema "
                "object, strict a boolean",
                i);
        return NULL;
    }
    return f;
}

/* tool_choice's kinds; from TL_REQUIRED on, a call is forced */
enum { TL_NONE, TL_AUTO, TL_REQUIRED, TL_NAMED };

/* tool_choice: a TL_ kind (TL_NAMED: *named the function), or -1. */
static int tl_choice(json_t *v, const char **named, const struct tl_err *e)
{
    *named = NULL;
    if (!v || json_is_null(v))
        return TL_AUTO;
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!strcmp(s, "none"))
            return TL_NONE;
        if (!strcmp(s, "auto"))
            return TL_AUTO;
        if (!strcmp(s, "required"))
            return TL_REQUIRED;
    } else if (json_is_object(v)) {
        json_t *ty = json_object_get(v, "type"), *f = json_object_get(v, "function");
        json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
        if (json_is_string(ty) && !strcmp(json_string_value(ty), "function") &&
            json_is_string(name)) {
            *named = json_string_value(name);
            return TL_NAMED;
        }
    }
    return tl_fail(e, "tool_choice",
                   "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": "
                   "\"function\", \"function\": {\"name\": ...}}");
}

/* The forced call's constraint: a call of one of fns[0..n) (the named
 * function, or every tool for "required"; names: their names), its
 * arguments under that function's parameters. No parameters: the function
 * takes none (OpenAI's reading). Parameters the constraint cannot take
 * (anyOf members that start alike, ...): a strict function's are a 400, a
 * non-strict one's arguments are any JSON object. */
static int tl_forced(json_t *const *fns, size_t n, json_t *names, int family, struct jsonc **out,
                     const struct tl_err *e)
{
    const char *key = family == CHAT_TEMPLATE_LLAMA31 ? "parameters" : "arguments";
    json_t *params[TOOLS_MAX], *owned[TOOLS_MAX] = {0};
    int lenient[TOOLS_MAX];
    json_t *any = json_pack("{s:s}", "type", "object");
    char msg[320];
    size_t bad = 0;
    int rc = any ? 0 : -2;
    for (size_t i = 0; i < n && !rc; i++) {
        json_t *p = json_object_get(fns[i], "parameters");
        lenient[i] = !json_is_true(json_object_get(fns[i], "strict"));
        if (!p || json_is_null(p))
            p = owned[i] = json_pack("{s:s, s:{}, s:b}", "type", "object", "properties",
                                     "additionalProperties", 0);
        params[i] = p;
        rc = p ? 0 : -2;
    }
    for (int again = !rc; again;) {
        rc = api_schema_compile_call(names, key, params, lenient, out, msg, sizeof(msg), &bad);
        again = rc == -1 && bad < n && lenient[bad] && params[bad] != any;
        if (again)
            params[bad] = any; /* that one's arguments: any object; compile again */
    }
    if (rc == -1 && bad < n && !lenient[bad])
        rc = tl_fail(e, "tools", "the strict function '%s': its parameters: %s",
                     json_string_value(json_array_get(names, bad)), msg);
    else if (rc == -1)
        rc = tl_fail(e, "tools", "%s", msg);
    for (size_t i = 0; i < n; i++)
        json_decref(owned[i]);
    json_decref(any);
    return rc;
}

int api_tools_parse(json_t *body, const struct chat_template *ct, struct api_tools **out,
                    json_t **defs, struct jsonc **forced, char *param, size_t param_cap,
                    char *msg, size_t cap)
{
    struct tl_err e = {param, msg, param_cap, cap};
    json_t *tools = json_object_get(body, "tools");
    json_t *ptc = json_object_get(body, "parallel_tool_calls");
    const char *named;
    *out = NULL;
    *defs = NULL;
    *forced = NULL;
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return tl_fail(&e, "tools", "tools must be an array of {\"type\": \"function\", ...}");
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc))
        return tl_fail(&e, "parallel_tool_calls", "parallel_tool_calls must be a boolean");
    int choice = tl_choice(json_object_get(body, "tool_choice"), &named, &e);
    size_t n = json_array_size(tools);
    if (choice < 0)
        return -1;
    if (n == 0)
        return choice >= TL_REQUIRED ? tl_fail(&e, "tool_choice", "tool_choice '%s' needs tools",
                                               choice == TL_REQUIRED ? "required" : named)
                                     : 0;
    if (n > TOOLS_MAX)
        return tl_fail(&e, "tools", "at most %d tools", TOOLS_MAX);
    struct api_tools *t = calloc(1, sizeof(*t));
    json_t *names = json_array(), *pick = NULL, *fns[TOOLS_MAX];
    int rc = 0;
    if (!t || !names || !(t->names = calloc(n, sizeof(*t->names))))
        rc = -2;
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *f = tl_function(json_array_get(tools, i), i, &e);
        if (!f) {
            rc = -1;
            break;
        }
        const char *name = json_string_value(json_object_get(f, "name"));
        fns[i] = f;
        for (size_t k = 0; k < i && !rc; k++)
            if (!strcmp(t->names[k], name))
                rc = tl_fail(&e, "tools", "two tools are named '%s'", name);
        snprintf(t->names[i], sizeof(t->names[i]), "%s", name);
        if (named && !strcmp(name, named))
            pick = f;
    }
    if (!rc && choice == TL_NAMED && !pick)
        rc = tl_fail(&e, "tool_choice", "tool_choice names '%.64s', which is not in tools", named);
    /* the template's question: does the family have a tool format (with
     * no template at all, the prompt's own error says so) */
    char why[320];
    if (!rc && choice != TL_NONE && ct->family != CHAT_TEMPLATE_NONE &&
        chat_template_no_tools(ct, why, sizeof(why)))
        rc = tl_fail(&e, "tools", "%s", why);
    if (!rc && choice == TL_REQUIRED && n > JSONC_MAX_ALT)
        rc = tl_fail(&e, "tool_choice",
                     "tool_choice \"required\" forces a call of one of at most %d tools; this "
                     "request lists %zu",
                     JSONC_MAX_ALT, n);
    if (!rc && choice >= TL_REQUIRED) {
        json_t **list = pick ? &pick : fns;
        const size_t nf = pick ? 1 : n;
        for (size_t i = 0; i < nf && !rc; i++)
            rc = json_array_append(names, json_object_get(list[i], "name")) ? -2 : 0;
        rc = rc ? rc : tl_forced(list, nf, names, ct->family, forced, &e);
    }
    json_decref(names);
    if (rc || choice == TL_NONE) {
        api_tools_free(t);
        return rc;
    }
    t->n = (int32_t)n;
    t->format = ct->family == CHAT_TEMPLATE_LLAMA31 ? TOOLS_FMT_JSON : TOOLS_FMT_TAGS;
    t->forced = choice >= TL_REQUIRED;
    t->parallel = !json_is_false(ptc) && !t->forced;
    *out = t;
    *defs = tools;
    return 0;
}

void api_tools_free(struct api_tools *t)
{
    if (!t)
        return;
    free(t->names);
    free(t);
}
