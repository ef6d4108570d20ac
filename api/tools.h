/* tools — a chat request's tools, tool_choice and parallel_tool_calls
 * (OpenAI's function calling), and the reading of tool calls back out of the
 * generated text.
 *
 * Request side (api_tools_parse): the tool list is validated (type
 * "function", a name of 1..64 of [A-Za-z0-9_-], unique, parameters a JSON
 * Schema object) and, unless tool_choice is "none", handed to the chat
 * template (api/chat_template.h renders it in the family's format). A
 * forced call (tool_choice "required" or {"type": "function", "function":
 * {"name": ...}}) is decoded under a JSON constraint (engine/jsonc.h): one
 * call object {"name": ..., "arguments" (llama3.1: "parameters"): ...}
 * whose arguments follow the parameters schema of the function it names
 * (strict: exactly or a 400; else keywords outside the subset are not
 * enforced, and a schema the constraint cannot take at all leaves the
 * arguments any JSON object); "required" among several tools lets the name
 * be any of theirs, and the name written picks the schema (JSONC_TAGGED).
 *
 * Output side (toolcall_next): the choice's text is read as content and
 * calls in the family's output format:
 *   TOOLS_FMT_TAGS  (chatml) <tool_call>{JSON}</tool_call> blocks anywhere in
 *                   the text; whitespace beside a block is dropped
 *   TOOLS_FMT_JSON  (llama3.1) the whole answer one {"name", "parameters"}
 *                   object
 * A block that is not a call of a listed tool (bad JSON, unknown name,
 * arguments not an object) stays content, as written. The same reader
 * serves the finished body and the stream (one piece at a time, only from
 * text that is final), so both carry the same content and calls.
 * Thread: any.
 */
#ifndef INFERD_API_TOOLS_H
#define INFERD_API_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct jsonc;
struct chat_template;

#define TOOLS_MAX 128
#define TOOLS_NAME_MAX 64

enum tools_format { TOOLS_FMT_TAGS = 1, TOOLS_FMT_JSON = 2 };

/* What the output side needs (plain data: it outlives the request's JSON). */
struct api_tools {
    int format;   /* enum tools_format */
    int forced;   /* the choice is one call (tool_choice required / named) */
    int parallel; /* parallel_tool_calls: more than one call a choice */
    int32_t n;
    char (*names)[TOOLS_NAME_MAX + 1]; /* [n] */
};

/* body's tools / tool_choice / parallel_tool_calls for template ct.
 * 0: *out is the tool set (NULL when none or tool_choice "none"), *defs
 * the "tools" array to render (borrowed from body; NULL likewise) and
 * *forced a constraint (NULL unless a call is forced). -1: param / msg
 * say what to answer (400); -2: out of memory. */
int api_tools_parse(json_t *body, const struct chat_template *ct, struct api_tools **out,
                    json_t **defs, struct jsonc **forced, char *param, size_t param_cap,
                    char *msg, size_t cap);
void api_tools_free(struct api_tools *t); /* accepts NULL */

/* The reader's place in a choice's text. */
struct toolcall_scan {
    size_t pos;   /* text[0..pos) is read */
    size_t open;  /* in_call: where the block starts (the whitespace before its tag) */
    int in_call;  /* inside a block (TAGS), or a would-be call object (JSON) */
    int started;  /* JSON: past the leading whitespace */
    int n_calls;  /* calls given so far (the ones parallel_tool_calls false drops not counted) */
    int plain;    /* JSON: the answer is content, nothing more to find */
};

enum toolcall_kind { TOOLCALL_NONE = 0, TOOLCALL_CONTENT, TOOLCALL_CALL };

struct toolcall_piece {
    int kind;                       /* enum toolcall_kind */
    size_t off, len;                /* CONTENT: the text; CALL: its arguments' JSON text */
    char name[TOOLS_NAME_MAX + 1];  /* CALL */
    int index;                      /* CALL: 0, 1, ... in the choice */
};

void toolcall_start(const struct api_tools *t, struct toolcall_scan *s);
/* The next piece of text[0..len): only text[0..safe) may be read unless
 * done (the choice ended: all of it). TOOLCALL_NONE when nothing more can
 * be said yet. A CALL's arguments are text[off..off+len) (len 0: none
 * given, "{}"). */
int toolcall_next(const struct api_tools *t, struct toolcall_scan *s, const char *text,
                  size_t safe, size_t len, int done, struct toolcall_piece *out);

/* The call id a response gives call index of choice (derived from the
 * response id, so the body and every stream event agree): "call_" + 24
 * characters. out: at least 30 bytes. */
void toolcall_id(const char *response_id, int choice, int index, char *out);

#endif
