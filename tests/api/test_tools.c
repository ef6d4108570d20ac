/* test_tools — tool calling in process (api/tools.h, api/chat_template.c):
 * the two tool formats rendered against fixed strings written from Qwen2.5's
 * and Llama 3.1's published templates (tool signatures, an assistant's
 * calls, tool results, the forced call's opening), what the other families
 * refuse; api_tools_parse's refusals and forced constraints (the constraint
 * accepts the call the schema allows and refuses what it does not); the
 * reader that turns text into content and calls, on fixed texts and on
 * random ones read whole and read as a stream grows (every prefix, the
 * pieces must be the same). Pure: no model, no daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_template.h"
#include "api/tools.h"
#include "engine/err.h"
#include "engine/jsonc.h"
#include "tests/check.h"
#include "tests/rng.h"

static json_t *js(const char *s)
{
    json_t *v = json_loads(s, JSON_DECODE_ANY, NULL);
    if (!v) {
        fprintf(stderr, "bad test JSON: %s\n", s);
        exit(2);
    }
    return v;
}

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
    "\"Weather now\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
    "{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";

/* render m[0..n) with tools; compare with want (NULL: must be refused) */
static int render_tools_is(const struct chat_template *ct, const struct chat_msg *m, size_t n,
                           const struct chat_tools *tools, const char *want)
{
    struct buf t = {0}, k = {0};
    char msg[320];
    int rc = chat_template_render_tools(ct, m, n, tools, 1, &t, &k, msg, sizeof(msg));
    int ok = want ? rc == 0 && t.len == k.len && t.len == strlen(want) && !memcmp(t.p, want, t.len)
                  : rc == INF_EINVAL && msg[0];
    if (!ok)
        fprintf(stderr, "%s: rc %d (%s)\n got: [%.*s]\nwant: [%s]\n",
                chat_template_name(ct->family), rc, msg, (int)t.len, t.p ? t.p : "",
                want ? want : "(refused)");
    /* a signature's bytes are content: never special tokens */
    const char *sig = t.p ? strstr(t.p, "Weather now") : NULL;
    if (ok && sig && k.p[sig - t.p] != 0) {
        fprintf(stderr, "the tool signature is marked as template bytes\n");
        ok = 0;
    }
    buf_free(&t);
    buf_free(&k);
    return ok;
}

static void test_render(void)
{
    json_t *defs = js(tools_json), *args = js("{\"city\": \"Paris\"}"), *raw = js("\"not json\"");
    struct chat_tools tools = {defs, 0, 0}, forced = {defs, 1, 0};
    struct chat_call call = {"get_weather", args}, two[2] = {{"get_weather", args},
                                                             {"get_weather", raw}};
    struct chat_msg conv[] = {
        {CHAT_ROLE_SYSTEM, "S", 1, NULL, 0, NULL, 0},
        {CHAT_ROLE_USER, "Weather?", 8, NULL, 0, NULL, 0},
        {CHAT_ROLE_ASSISTANT, NULL, 0, two, 2, NULL, 0},
        {CHAT_ROLE_TOOL, "22C", 3, NULL, 0, NULL, 0},
        {CHAT_ROLE_TOOL, "rain", 4, NULL, 0, NULL, 0},
        {CHAT_ROLE_ASSISTANT, "Warm.", 5, NULL, 0, NULL, 0},
    };
    const char *sig = "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
                      "\"description\": \"Weather now\", \"parameters\": {\"type\": \"object\", "
                      "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
                      "[\"city\"]}}}";
    char want[4096];
    struct chat_template ct;

    /* Qwen2.5: the system text, the tools block, calls, grouped results */
    chat_template_init(&ct, CHAT_TEMPLATE_CHATML, NULL, 0, "", "<|endoftext|>");
    snprintf(want, sizeof(want),
             "<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions to assist "
             "with the user query.\n\nYou are provided with function signatures within "
             "<tools></tools> XML tags:\n<tools>\n%s\n</tools>\n\nFor each function call, "
             "return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
             "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
             "<|im_start|>user\nWeather?<|im_end|>\n"
             "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
             "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
             "\"arguments\": \"not json\"}\n</tool_call><|im_end|>\n"
             "<|im_start|>user\n<tool_response>\n22C\n</tool_response>\n<tool_response>\nrain\n"
             "</tool_response><|im_end|>\n"
             "<|im_start|>assistant\nWarm.<|im_end|>\n<|im_start|>assistant\n",
             sig);
    CHECK(render_tools_is(&ct, conv, 6, &tools, want));
    /* no system message: the template's default one (Qwen2.5's), else none
     * (Qwen3's); a call with content; the forced call's opening */
    snprintf(ct.default_system, sizeof(ct.default_system), "You are Qwen.");
    struct chat_msg said[] = {{CHAT_ROLE_USER, "Hi", 2, NULL, 0, NULL, 0},
                              {CHAT_ROLE_ASSISTANT, "Let me look.", 12, &call, 1, NULL, 0}};
    snprintf(want, sizeof(want),
             "<|im_start|>system\nYou are Qwen.\n\n# Tools\n\nYou may call one or more functions "
             "to assist with the user query.\n\nYou are provided with function signatures within "
             "<tools></tools> XML tags:\n<tools>\n%s\n</tools>\n\nFor each function call, "
             "return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
             "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nLet me look.\n<tool_call>\n"
             "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
             "<|im_end|>\n<|im_start|>assistant\n<tool_call>\n",
             sig);
    CHECK(render_tools_is(&ct, said, 2, &forced, want));
    ct.default_system[0] = '\0';
    snprintf(want, sizeof(want),
             "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with "
             "the user query.\n\nYou are provided with function signatures within "
             "<tools></tools> XML tags:\n<tools>\n%s\n</tools>\n\nFor each function call, "
             "return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
             "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
             sig);
    CHECK(render_tools_is(&ct, said, 1, &tools, want));
    /* a tool result without tools in the request renders as Qwen's does */
    CHECK(render_tools_is(&ct, conv + 3, 1, NULL,
                          "<|im_start|>user\n<tool_response>\n22C\n</tool_response><|im_end|>\n"
                          "<|im_start|>assistant\n"));
    /* a ChatML template without <tool_call> has no tool format */
    const char qwen2[] = "{% for message in messages %}<|im_start|>...";
    chat_template_init(&ct, CHAT_TEMPLATE_CHATML, qwen2, sizeof(qwen2) - 1, "", "");
    CHECK(render_tools_is(&ct, conv + 1, 1, &tools, NULL));
    CHECK(render_tools_is(&ct, conv + 3, 1, NULL, NULL));

    /* Llama 3.1: ipython environment, signatures indented in the first
     * user turn, one call a turn, results quoted */
    chat_template_init(&ct, CHAT_TEMPLATE_LLAMA31, NULL, 0, "<|begin_of_text|>", "");
    struct chat_msg l31[] = {
        {CHAT_ROLE_SYSTEM, "S", 1, NULL, 0, NULL, 0},
        {CHAT_ROLE_USER, " Weather? ", 10, NULL, 0, NULL, 0},
        {CHAT_ROLE_ASSISTANT, NULL, 0, &call, 1, NULL, 0},
        {CHAT_ROLE_TOOL, "22 \"C\"", 6, NULL, 0, NULL, 0},
    };
    CHECK(render_tools_is(
        &ct, l31, 4, &tools,
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nS<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
        "respond with a JSON for a function call with its proper arguments that best answers "
        "the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
        "dictionary of argument name and its value}.Do not use variables.\n\n{\n    \"type\": "
        "\"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n        "
        "\"description\": \"Weather now\",\n        \"parameters\": {\n            \"type\": "
        "\"object\",\n            \"properties\": {\n                \"city\": {\n             "
        "       \"type\": \"string\"\n                }\n            },\n            "
        "\"required\": [\n                \"city\"\n            ]\n        }\n    }\n}\n\n"
        "Weather?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": "
        "\"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\n\"22 \\\"C\\\"\"<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"));
    CHECK(render_tools_is(&ct, conv, 3, &tools, NULL)); /* two calls in one turn */
    CHECK(render_tools_is(&ct, conv, 1, &tools, NULL)); /* no user turn for the tools */
    /* the families without a tool format */
    chat_template_init(&ct, CHAT_TEMPLATE_LLAMA3, NULL, 0, "", "");
    CHECK(render_tools_is(&ct, conv + 1, 1, &tools, NULL));
    chat_template_init(&ct, CHAT_TEMPLATE_GEMMA, NULL, 0, "", "");
    CHECK(render_tools_is(&ct, said, 2, NULL, NULL));
    json_decref(defs);
    json_decref(args);
    json_decref(raw);
}

/* ---- api_tools_parse -------------------------------------------------- */

static int parse_is(int family, const char *body, int want_rc, const char *want_param,
                    struct api_tools **t, struct jsonc **forced)
{
    struct chat_template ct;
    chat_template_init(&ct, family, NULL, 0, "", "");
    json_t *b = js(body), *defs;
    char param[64] = "", msg[320] = "";
    struct api_tools *tt = NULL;
    struct jsonc *f = NULL;
    int rc = api_tools_parse(b, &ct, &tt, &defs, &f, param, sizeof(param), msg, sizeof(msg));
    int ok = rc == want_rc && (!want_param || !strcmp(param, want_param)) &&
             (rc == 0 || (msg[0] && !tt && !f));
    if (!ok)
        fprintf(stderr, "api_tools_parse(%s): rc %d param %s msg %s\n", body, rc, param, msg);
    if (t)
        *t = tt;
    else
        api_tools_free(tt);
    if (forced)
        *forced = f;
    else
        jsonc_free(f);
    json_decref(b);
    return ok;
}

/* Does the constraint accept text whole (and close on its last byte)? */
static int accepts(const struct jsonc *c, const char *text)
{
    struct jsonc_state st;
    jsonc_state_init(c, &st);
    int ok = jsonc_feed(c, &st, text, strlen(text)) == 0;
    return ok && jsonc_closed(&st);
}

/* body's forced call: its constraint takes yes whole and refuses no */
static int forced_is(int family, const char *body, const char *yes, const char *no)
{
    struct api_tools *t = NULL;
    struct jsonc *f = NULL;
    int ok = parse_is(family, body, 0, NULL, &t, &f) && t && t->forced && !t->parallel && f &&
             accepts(f, yes) && !accepts(f, no);
    if (!ok)
        fprintf(stderr, "forced call of %s: takes [%s] %d, [%s] %d\n", body, yes,
                f ? accepts(f, yes) : -1, no, f ? accepts(f, no) : -1);
    api_tools_free(t);
    jsonc_free(f);
    return ok;
}

static void test_parse(void)
{
    char b[2048];
    struct api_tools *t;
    struct jsonc *f;
#define BODY(extra) (snprintf(b, sizeof(b), "{\"tools\":%s%s}", tools_json, extra), b)
    CHECK(parse_is(CHAT_TEMPLATE_CHATML, BODY(""), 0, NULL, &t, &f));
    CHECK(t && t->n == 1 && !strcmp(t->names[0], "get_weather") && !t->forced && t->parallel &&
          t->format == TOOLS_FMT_TAGS && !f);
    api_tools_free(t);
    CHECK(parse_is(CHAT_TEMPLATE_LLAMA31, BODY(",\"parallel_tool_calls\":false"), 0, NULL, &t,
                   &f));
    CHECK(t && t->format == TOOLS_FMT_JSON && !t->parallel);
    api_tools_free(t);
    CHECK(parse_is(CHAT_TEMPLATE_CHATML, BODY(",\"tool_choice\":\"none\""), 0, NULL, &t, &f));
    CHECK(!t && !f);
    /* forced: the named function's schema, exactly (keys in order) */
    const char *paris = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}";
    CHECK(forced_is(CHAT_TEMPLATE_CHATML, BODY(",\"tool_choice\":\"required\""), paris,
                    "{\"name\": \"get_weather\", \"arguments\": {}}"));
    CHECK(forced_is(CHAT_TEMPLATE_CHATML, BODY(",\"tool_choice\":\"required\""), paris,
                    "{\"name\": \"other\", \"arguments\": {\"city\": \"Paris\"}}"));
    CHECK(forced_is(CHAT_TEMPLATE_CHATML, BODY(",\"tool_choice\":\"required\""), paris,
                    "{\"arguments\": {\"city\": \"Paris\"}, \"name\": \"get_weather\"}"));
    CHECK(forced_is(CHAT_TEMPLATE_LLAMA31,
                    BODY(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":"
                         "\"get_weather\"}}"),
                    "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"x\"}}",
                    "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}"));
    /* several tools, required: one of the names, then that function's own
     * parameters (a function without parameters takes {} only); names that
     * are prefixes of each other; a non-strict schema the constraint cannot
     * take makes that function's arguments any object, the others stay */
    {
        static const char *const yes[] = {
            "{\"name\":\"get\",\"arguments\":{\"city\":\"x\"}}",
            "{\"name\": \"get_2\", \"arguments\": {\"n\": 3}}",
            "{\"name\":\"c\",\"arguments\":{}}",
            "{\"name\":\"d\",\"arguments\":{\"p\":[true]}}",
        };
        static const char *const no[] = {
            "{\"name\":\"get\",\"arguments\":{\"n\":3}}",
            "{\"name\":\"get_2\",\"arguments\":{\"city\":\"x\"}}",
            "{\"name\":\"get_2\",\"arguments\":{\"n\":\"3\"}}",
            "{\"name\":\"c\",\"arguments\":{\"x\":1}}",
            "{\"name\":\"e\",\"arguments\":{}}",
            "{\"name\":\"get_\",\"arguments\":{}}",
            "{\"arguments\":{},\"name\":\"c\"}",
        };
        const char *several =
            "{\"tool_choice\":\"required\",\"tools\":["
            "{\"type\":\"function\",\"function\":{\"name\":\"get\",\"parameters\":{\"type\":"
            "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
            "{\"type\":\"function\",\"function\":{\"name\":\"get_2\",\"parameters\":{\"type\":"
            "\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}}},"
            "{\"type\":\"function\",\"function\":{\"name\":\"c\"}},"
            "{\"type\":\"function\",\"function\":{\"name\":\"d\",\"parameters\":{\"anyOf\":["
            "{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{\"q\":{}}}]}}}]}";
        for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
            CHECK(forced_is(CHAT_TEMPLATE_CHATML, several, yes[i], no[i % 7]));
        for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
            CHECK(forced_is(CHAT_TEMPLATE_CHATML, several, yes[i % 4], no[i]));
        /* Llama 3.1's key, and a strict function among several refused */
        CHECK(forced_is(CHAT_TEMPLATE_LLAMA31, several,
                        "{\"name\":\"get_2\",\"parameters\":{\"n\":-1}}",
                        "{\"name\":\"get_2\",\"parameters\":{\"city\":\"x\"}}"));
        char strict[2048];
        snprintf(strict, sizeof(strict), "%.*s\"strict\":true,%s",
                 (int)(strstr(several, "{\"name\":\"d\"") - several + 1), several,
                 strstr(several, "{\"name\":\"d\"") + 1);
        CHECK(parse_is(CHAT_TEMPLATE_CHATML, strict, -1, "tools", NULL, NULL));
        /* past JSONC_MAX_ALT tools, "required" is a 400 that says so */
        char *many = malloc(70 * 64 + 64);
        CHECK(many != NULL);
        if (many) {
            size_t o = (size_t)sprintf(many, "{\"tool_choice\":\"required\",\"tools\":[");
            for (int i = 0; i < 65; i++)
                o += (size_t)sprintf(many + o, "%s{\"type\":\"function\",\"function\":{\"name\":"
                                               "\"f%d\"}}",
                                     i ? "," : "", i);
            sprintf(many + o, "]}");
            CHECK(parse_is(CHAT_TEMPLATE_CHATML, many, -1, "tool_choice", NULL, NULL));
            free(many);
        }
    }
    CHECK(forced_is(CHAT_TEMPLATE_CHATML,
                    "{\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
                    "\"function\":{\"name\":\"a\"}}]}",
                    "{\"name\":\"a\",\"arguments\":{}}", "{\"name\":\"a\",\"arguments\":{\"x\":1}}"));
    /* outside the subset: not enforced unless strict, which refuses */
    const char *fmt = "{\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
                      "\"function\":{\"name\":\"a\",%s\"parameters\":{\"type\":\"object\","
                      "\"properties\":{\"n\":{\"type\":\"integer\",\"multipleOf\":3}}}}}]}";
    snprintf(b, sizeof(b), fmt, "");
    CHECK(forced_is(CHAT_TEMPLATE_CHATML, b, "{\"name\":\"a\",\"arguments\":{\"n\":1}}",
                    "{\"name\":\"a\",\"arguments\":{\"n\":\"1\"}}"));
    snprintf(b, sizeof(b), fmt, "\"strict\":true,");
    CHECK(parse_is(CHAT_TEMPLATE_CHATML, b, -1, "tools", NULL, NULL));
    /* refusals */
    CHECK(parse_is(CHAT_TEMPLATE_CHATML, "{\"tools\":{}}", -1, "tools", NULL, NULL));
    CHECK(parse_is(CHAT_TEMPLATE_CHATML, "{\"tools\":[{\"type\":\"function\"}]}", -1, "tools[0]",
                   NULL, NULL));
    CHECK(parse_is(CHAT_TEMPLATE_CHATML,
                   "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", -1,
                   "tools[0]", NULL, NULL));
    CHECK(parse_is(CHAT_TEMPLATE_CHATML,
                   "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},"
                   "{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}",
                   -1, "tools", NULL, NULL));
    CHECK(parse_is(CHAT_TEMPLATE_CHATML, "{\"tool_choice\":\"required\"}", -1, "tool_choice", NULL,
                   NULL));
    CHECK(parse_is(CHAT_TEMPLATE_CHATML, BODY(",\"tool_choice\":\"sometimes\""), -1,
                   "tool_choice", NULL, NULL));
    CHECK(parse_is(CHAT_TEMPLATE_CHATML,
                   BODY(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"x\"}}"),
                   -1, "tool_choice", NULL, NULL));
    CHECK(parse_is(CHAT_TEMPLATE_CHATML, BODY(",\"parallel_tool_calls\":1"), -1,
                   "parallel_tool_calls", NULL, NULL));
    CHECK(parse_is(CHAT_TEMPLATE_GEMMA, BODY(""), -1, "tools", NULL, NULL));
    CHECK(parse_is(CHAT_TEMPLATE_GEMMA, BODY(",\"tool_choice\":\"none\""), 0, NULL, NULL, NULL));
#undef BODY
}

/* ---- the reader ------------------------------------------------------- */

struct piece {
    int kind, index;
    char name[TOOLS_NAME_MAX + 1];
    char text[512];
};

/* Read text whole (step 0) or as a stream whose final text grows by step
 * bytes at a time; the pieces, content pieces that follow each other
 * joined (a stream may cut them anywhere). */
static int read_all(const struct api_tools *t, const char *text, size_t step, struct piece *out,
                    int cap)
{
    struct toolcall_scan s;
    struct toolcall_piece pc;
    size_t len = strlen(text);
    int n = 0;
    toolcall_start(t, &s);
    for (size_t safe = step ? 0 : len;; safe += step ? step : 1) {
        int done = safe >= len;
        size_t sf = done ? len : safe;
        while (toolcall_next(t, &s, text, sf, len, done, &pc)) {
            if (pc.kind == TOOLCALL_CONTENT && n && out[n - 1].kind == TOOLCALL_CONTENT) {
                strncat(out[n - 1].text, text + pc.off, pc.len);
                continue;
            }
            if (n == cap)
                return -1;
            memset(&out[n], 0, sizeof(out[n]));
            out[n].kind = pc.kind;
            out[n].index = pc.index;
            snprintf(out[n].name, sizeof(out[n].name), "%s", pc.name);
            snprintf(out[n].text, sizeof(out[n].text), "%.*s", (int)pc.len, text + pc.off);
            n++;
        }
        if (done)
            return n;
    }
}

static int same_pieces(const struct piece *a, int na, const struct piece *b, int nb)
{
    if (na != nb)
        return 0;
    for (int i = 0; i < na; i++)
        if (a[i].kind != b[i].kind || a[i].index != b[i].index || strcmp(a[i].name, b[i].name) ||
            strcmp(a[i].text, b[i].text))
            return 0;
    return 1;
}

/* want: "C:text" content, "T:name:args" call, joined by '|' */
static int reads_as(const struct api_tools *t, const char *text, const char *want)
{
    struct piece p[16], q[16];
    int n = read_all(t, text, 0, p, 16);
    char got[2048] = "";
    for (int i = 0; i < n; i++) {
        size_t at = strlen(got);
        if (p[i].kind == TOOLCALL_CONTENT)
            snprintf(got + at, sizeof(got) - at, "%sC:%s", i ? "|" : "", p[i].text);
        else
            snprintf(got + at, sizeof(got) - at, "%sT:%s:%s", i ? "|" : "", p[i].name, p[i].text);
    }
    int ok = n >= 0 && !strcmp(got, want);
    for (size_t step = 1; ok && step <= 7; step++) {
        int m = read_all(t, text, step, q, 16);
        ok = same_pieces(p, n, q, m);
        if (!ok)
            fprintf(stderr, "stream (step %zu) reads [%s] otherwise\n", step, text);
    }
    if (!ok)
        fprintf(stderr, "read [%s]\n got [%s]\nwant [%s]\n", text, got, want);
    return ok;
}

static void test_reader(void)
{
    char names[2][TOOLS_NAME_MAX + 1] = {"get_weather", "f"};
    struct api_tools tags = {TOOLS_FMT_TAGS, 0, 1, 2, names};
    const char *call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}\n</tool_call>";
    char buf[1024];
    CHECK(reads_as(&tags, "Hello there", "C:Hello there"));
    CHECK(reads_as(&tags, "", ""));
    CHECK(reads_as(&tags, call, "T:f:{\"a\": [1, \"}\"]}"));
    snprintf(buf, sizeof(buf), "Let me see.\n%s\n%s\n", call, call);
    CHECK(reads_as(&tags, buf, "C:Let me see.|T:f:{\"a\": [1, \"}\"]}|T:f:{\"a\": [1, \"}\"]}"));
    snprintf(buf, sizeof(buf), "%s\n\nDone.  ", call);
    CHECK(reads_as(&tags, buf, "T:f:{\"a\": [1, \"}\"]}|C:Done.  "));
    /* no arguments: "{}" on output (len 0); other keys ignored */
    CHECK(reads_as(&tags, "<tool_call>{\"name\":\"get_weather\"}</tool_call>", "T:get_weather:"));
    CHECK(reads_as(&tags, "<tool_call>{\"id\":1,\"name\":\"f\",\"arguments\":{}}</tool_call>",
                   "T:f:{}"));
    /* not a call: stays content as written */
    CHECK(reads_as(&tags, "a <tool_call>{\"name\":\"nope\",\"arguments\":{}}</tool_call> b",
                   "C:a <tool_call>{\"name\":\"nope\",\"arguments\":{}}</tool_call> b"));
    CHECK(reads_as(&tags, "<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>",
                   "C:<tool_call>{\"name\":\"f\",\"arguments\":[1]}</tool_call>"));
    CHECK(reads_as(&tags, "<tool_call>{\"name\":\"f\",</tool_call>",
                   "C:<tool_call>{\"name\":\"f\",</tool_call>"));
    /* cut short: a whole call without its closing tag is a call; else content */
    CHECK(reads_as(&tags, "x<tool_call>\n{\"name\":\"f\",\"arguments\":{}}\n", "C:x|T:f:{}"));
    CHECK(reads_as(&tags, "x<tool_call>\n{\"name\":\"f\",\"argu",
                   "C:x<tool_call>\n{\"name\":\"f\",\"argu"));
    CHECK(reads_as(&tags, "ends with <tool_c", "C:ends with <tool_c"));
    CHECK(reads_as(&tags, "<tool_cal>x", "C:<tool_cal>x"));
    /* parallel_tool_calls false: the first call only */
    struct api_tools one = tags;
    one.parallel = 0;
    snprintf(buf, sizeof(buf), "%s%s", call, call);
    CHECK(reads_as(&one, buf, "T:f:{\"a\": [1, \"}\"]}"));
    /* forced: the text is the call (its opening was the prompt's) */
    struct api_tools forced = tags;
    forced.forced = 1;
    CHECK(reads_as(&forced, "{\"name\": \"f\", \"arguments\": {\"b\": 2}}", "T:f:{\"b\": 2}"));
    CHECK(reads_as(&forced, "{\"name\": \"f\", \"argu", "C:{\"name\": \"f\", \"argu"));
    /* Llama 3.1: the whole answer one object, "parameters" (or "arguments") */
    struct api_tools json = {TOOLS_FMT_JSON, 0, 1, 2, names};
    CHECK(reads_as(&json, "  {\"name\": \"f\", \"parameters\": {\"q\": \"x\"}} ", "T:f:{\"q\": \"x\"}"));
    CHECK(reads_as(&json, "{\"name\": \"f\", \"arguments\": {}}", "T:f:{}"));
    CHECK(reads_as(&json, " It is {\"name\": \"f\"}", "C:It is {\"name\": \"f\"}"));
    CHECK(reads_as(&json, "{\"name\": \"g\", \"parameters\": {}}",
                   "C:{\"name\": \"g\", \"parameters\": {}}"));
    CHECK(reads_as(&json, "{not json", "C:{not json"));

    /* random texts from pieces that come close to the tags: read whole
     * and as a stream, the same pieces */
    static const char *const bits[] = {
        "<tool_call>", "</tool_call>", "<tool_", "</tool", "\n", " ", "ab", "{\"name\": \"f\"",
        ", \"arguments\": {\"k\": \"</tool_call>\"}", "}", "<", "{\"name\":\"get_weather\"}",
        "\"", "\\"};
    int bad = 0;
    for (int it = 0; it < 3000 && !bad; it++) {
        buf[0] = '\0';
        int k = 1 + (int)rnd(12);
        for (int i = 0; i < k; i++)
            strcat(buf, bits[rnd(sizeof(bits) / sizeof(bits[0]))]);
        const struct api_tools *t = it % 3 == 0 ? &tags : it % 3 == 1 ? &one : &json;
        struct piece p[16], q[16];
        int n = read_all(t, buf, 0, p, 16);
        /* what the reader returns covers the text: content bytes are the
         * text's, in order */
        for (size_t step = 1; step <= 5 && !bad; step += 2) {
            int m = read_all(t, buf, step, q, 16);
            if (n < 0 || !same_pieces(p, n, q, m)) {
                fprintf(stderr, "random text read otherwise as a stream (step %zu): [%s]\n",
                        step, buf);
                bad = 1;
            }
        }
    }
    CHECK(!bad);
}

static void test_ids(void)
{
    char a[32], b[32], c[32];
    toolcall_id("chatcmpl-1", 0, 0, a);
    toolcall_id("chatcmpl-1", 0, 1, b);
    toolcall_id("chatcmpl-2", 0, 0, c);
    CHECK(strlen(a) == 29 && !strncmp(a, "call_", 5) && strcmp(a, b) && strcmp(a, c));
    toolcall_id("chatcmpl-1", 0, 0, b);
    CHECK(!strcmp(a, b));
}

int main(void)
{
    test_render();
    test_parse();
    test_reader();
    test_ids();
    if (fails)
        fprintf(stderr, "%d checks failed\n", fails);
    return fails ? 1 : 0;
}
