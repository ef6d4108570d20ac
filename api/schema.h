/* schema — response_format and its JSON Schema, compiled to the JSON
 * constraint the scheduler decodes under (engine/jsonc.h); api/schema.c
 * has the subset. Thread: any. */
#ifndef INFERD_API_SCHEMA_H
#define INFERD_API_SCHEMA_H

#include <stddef.h>

#include <jansson.h>

struct jsonc;

/* Compile a JSON Schema: 0 and *out (jsonc_free it), -1 when the schema
 * is refused (msg says why, naming the keyword), -2 out of memory. */
int api_schema_compile(json_t *schema, struct jsonc **out, char *msg, size_t cap);

/* The constraint of a forced tool call: {"name": names[i] (an array of n
 * strings), args_key ("arguments" / "parameters"): params[i]} in that
 * order, both present, nothing else, for one of the n functions: the name
 * written decides which parameters follow. params[i]'s "#" and $defs are
 * its own; lenient[i]: keywords outside the subset are not enforced
 * instead of refused (a non-strict function's parameters). Returns as
 * api_schema_compile; on -1 for a schema, *bad is the function's index. */
int api_schema_compile_call(json_t *names, const char *args_key, json_t *const *params,
                            const int *lenient, struct jsonc **out, char *msg, size_t cap,
                            size_t *bad);

/* body's response_format: absent, null or {"type": "text"}: 0 and *out
 * NULL; {"type": "json_object"}: one JSON object; {"type": "json_schema",
 * "json_schema": {"schema": {...}, ...}}: that schema. -1 (msg: the 400
 * message) or -2 (out of memory) otherwise. */
int api_response_format(json_t *body, struct jsonc **out, char *msg, size_t cap);

#endif
