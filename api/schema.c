/* schema — response_format (json_object, json_schema) compiled to a JSON
 * constraint (engine/jsonc.h) that the scheduler decodes under.
 *
 * The JSON Schema subset: type (a name or a list of names), properties,
 * required, additionalProperties (false, true or absent: only listed keys
 * are generated either way; an object with no properties and
 * additionalProperties not false takes any keys), items, minItems,
 * maxItems, minLength, maxLength, pattern and format on strings (a DFA:
 * engine/jsonc_regex.h; the formats below), minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum on integers (numbers refuse them),
 * enum, const, anyOf /
 * oneOf (whose
 * members start differently: a string or null, an object or an array, ...;
 * objects may all be members when each begins with the same required
 * property and their const/enum values there differ: a tagged union),
 * $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion included),
 * and the annotations (title, description, default, examples, $schema,
 * $id, $comment, deprecated, readOnly, writeOnly). Any other keyword is
 * refused by name rather than silently not enforced: a client that asked
 * for a multipleOf or a minimum must not get output that ignores it.
 * Properties are generated in the order the schema lists them (jansson
 * keeps an object's key order when it parses).
 * Thread: any.
 */
#include "api/schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jsonc.h"
#include "engine/jsonc_regex.h"

#define SCHEMA_MAX_NODES 4096
#define SCHEMA_MAX_LIT 1024 /* bytes of one enum/const value */
#define SCHEMA_MAX_REFS 32  /* $ref hops to a schema */
#define SCHEMA_MAX_DEPTH 64 /* schemas inside schemas */

struct memo {
    json_t *j;
    int32_t id;
};

struct ctx {
    json_t *root;
    struct jsonc_builder *b;
    struct memo *memo;
    int32_t n_memo, cap_memo;
    char *msg;
    size_t cap;
    int depth;   /* compile() calls in progress */
    int oom;     /* the refusal is the allocator's, not the schema's */
    int lenient; /* unknown keywords are not enforced (non-strict tool parameters) */
};

static int32_t fail(struct ctx *c, const char *fmt, const char *arg)
{
    snprintf(c->msg, c->cap, fmt, arg ? arg : "");
    return -1;
}

static int32_t oom(struct ctx *c)
{
    c->oom = 1;
    return fail(c, "out of memory compiling the schema%s", NULL);
}

static int32_t compile(struct ctx *c, json_t *j, int hops);

static int memo_add(struct ctx *c, json_t *j, int32_t id)
{
    if (c->n_memo == c->cap_memo) {
        int32_t cap = c->cap_memo ? 2 * c->cap_memo : 32;
        struct memo *m = realloc(c->memo, (size_t)cap * sizeof(*m));
        if (!m)
            return -1;
        c->memo = m;
        c->cap_memo = cap;
    }
    c->memo[c->n_memo++] = (struct memo){j, id};
    return 0;
}

static int32_t new_node(struct ctx *c, json_t *j, int kind)
{
    if (jsonc_b_n_nodes(c->b) > SCHEMA_MAX_NODES + JSONC_N_BUILTIN)
        return fail(c, "the schema is too large (more than %s nodes)", "4096");
    int32_t id = jsonc_b_node(c->b, kind);
    if (id < 0 || (j && memo_add(c, j, id)))
        return oom(c);
    return id;
}

/* A node of kind with n slots of its own (*first the first); its id or -1
 * (the message set). */
static int32_t node_slots(struct ctx *c, json_t *key, int kind, int32_t n, int32_t *first)
{
    int32_t id = new_node(c, key, kind);
    if (id < 0)
        return -1;
    *first = jsonc_b_slots(c->b, n);
    return *first < 0 ? oom(c) : id;
}

static int known_keyword(const char *k)
{
    static const char *const kw[] = {
        "type", "properties", "required", "additionalProperties", "items", "minItems",
        "maxItems", "minLength", "maxLength", "enum", "const", "anyOf", "oneOf", "$ref",
        "$defs", "definitions", "title", "description", "default", "examples", "$schema",
        "$id", "$comment", "deprecated", "readOnly", "writeOnly", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "pattern", "format"};
    for (size_t i = 0; i < sizeof(kw) / sizeof(kw[0]); i++)
        if (!strcmp(k, kw[i]))
            return 1;
    return 0;
}

/* A non-negative integer keyword, or dflt when absent; -2 on error. */
static int64_t count_kw(struct ctx *c, json_t *j, const char *k, int64_t dflt)
{
    json_t *v = json_object_get(j, k);
    if (!v)
        return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000) {
        fail(c, "schema keyword '%s' must be an integer in 0..1000000", k);
        return -2;
    }
    return json_integer_value(v);
}

/* Slot i's literal: v in compact serialization. json_dumpb into our own
 * buffer, not json_dumps: jansson may allocate from the parse pool's
 * arena on this thread (api/parse_pool.c), which free() must not see.
 * 0, or -2 when the text is longer than SCHEMA_MAX_LIT, -1 out of memory. */
static int lit_slot(struct ctx *c, int32_t i, json_t *v)
{
    char buf[SCHEMA_MAX_LIT];
    size_t len = json_dumpb(v, buf, sizeof(buf), JSON_COMPACT | JSON_ENCODE_ANY);
    if (len == 0 || len > sizeof(buf))
        return len ? -2 : -1;
    return jsonc_b_slot(c->b, i, buf, len, -1);
}

/* Literal slots of the JSON values vals[0..n) (compact serialization). */
static int32_t lits(struct ctx *c, json_t *key, json_t *const *vals, size_t n)
{
    if (n == 0 || n > JSONC_MAX_ALT)
        return fail(c, "enum must have 1..%s values", "64");
    int32_t first, id = node_slots(c, key, JSONC_LITS, (int32_t)n, &first);
    if (id < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int rc = lit_slot(c, first + (int32_t)i, vals[i]);
        if (rc == -2)
            return fail(c, "an enum/const value is longer than %s bytes", "1024");
        if (rc)
            return oom(c);
    }
    jsonc_b_shape(c->b, id, first, (int32_t)n, 0, -1, 0);
    return id;
}

static int32_t object(struct ctx *c, json_t *j, json_t *mkey)
{
    json_t *props = json_object_get(j, "properties");
    json_t *req = json_object_get(j, "required");
    json_t *add = json_object_get(j, "additionalProperties");
    if (props && !json_is_object(props))
        return fail(c, "schema 'properties' must be an object%s", NULL);
    if (add && !json_is_boolean(add))
        return fail(c, "additionalProperties other than true/false is not supported%s", NULL);
    if (req && !json_is_array(req))
        return fail(c, "schema 'required' must be an array of property names%s", NULL);
    size_t n = props ? json_object_size(props) : 0;
    if (n == 0 && !json_is_false(add) && (!req || json_array_size(req) == 0)) {
        if (mkey && memo_add(c, mkey, JSONC_N_FREE_OBJECT))
            return oom(c);
        return JSONC_N_FREE_OBJECT;
    }
    if (n > JSONC_MAX_ALT)
        return fail(c, "an object may list at most %s properties", "64");
    int32_t first, id = node_slots(c, mkey, JSONC_OBJECT, (int32_t)n, &first);
    if (id < 0)
        return -1;
    uint64_t required = 0;
    for (size_t r = 0; req && r < json_array_size(req); r++) {
        json_t *name = json_array_get(req, r);
        size_t k = 0;
        const char *key;
        json_t *sub;
        int found = 0;
        if (!json_is_string(name))
            return fail(c, "schema 'required' must be an array of property names%s", NULL);
        json_object_foreach(props, key, sub) {
            (void)sub;
            if (!strcmp(key, json_string_value(name))) {
                required |= (uint64_t)1 << k;
                found = 1;
            }
            k++;
        }
        if (!found)
            return fail(c, "required property '%.64s' is not in properties",
                        json_string_value(name));
    }
    size_t k = 0;
    const char *key;
    json_t *sub;
    json_object_foreach(props, key, sub) {
        json_t *ks = json_string(key);
        int rc = ks ? lit_slot(c, first + (int32_t)k, ks) : -1;
        json_decref(ks);
        if (rc == -2)
            return fail(c, "a property name is longer than %s bytes", "1024");
        if (rc)
            return oom(c);
        int32_t v = compile(c, sub, 0);
        if (v < 0)
            return -1;
        jsonc_b_slot(c->b, first + (int32_t)k, NULL, 0, v);
        k++;
    }
    jsonc_b_shape(c->b, id, first, (int32_t)n, 0, -1, required);
    return id;
}

static int32_t array(struct ctx *c, json_t *j, json_t *key)
{
    json_t *items = json_object_get(j, "items");
    int64_t lo = count_kw(c, j, "minItems", 0), hi = count_kw(c, j, "maxItems", -1);
    if (lo == -2 || hi == -2)
        return -1;
    if (hi >= 0 && hi < lo)
        return fail(c, "maxItems is below minItems%s", NULL);
    int32_t first, id = node_slots(c, key, JSONC_ARRAY, 1, &first);
    if (id < 0)
        return -1;
    int32_t it = items ? compile(c, items, 0) : JSONC_N_ANY;
    if (it < 0)
        return -1;
    jsonc_b_slot(c->b, first, NULL, 0, it);
    jsonc_b_shape(c->b, id, first, 1, (int32_t)lo, (int32_t)hi, 0);
    return id;
}

static const char *const range_kw[] = {"minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum"};

/* The first of j's range keywords, or NULL. */
static const char *range_keyword(json_t *j)
{
    for (size_t i = 0; i < 4; i++)
        if (json_object_get(j, range_kw[i]))
            return range_kw[i];
    return NULL;
}

/* An integer node with j's minimum / maximum / exclusiveMinimum /
 * exclusiveMaximum (JSON numbers, 2020-12's form): the integers they
 * allow, inclusive. Bounds past the recognizer's 16 digits are clamped to
 * them; a range no such integer meets is refused. */
static int32_t integer_node(struct ctx *c, json_t *j, json_t *key)
{
    const double lim = 1e16; /* beyond +-(10^16 - 1): no integer the recognizer writes */
    double lo = -lim, hi = lim;
    for (size_t i = 0; i < 4; i++) {
        json_t *v = json_object_get(j, range_kw[i]);
        if (!v)
            continue;
        if (!json_is_number(v))
            return fail(c, "schema keyword '%s' must be a number (JSON Schema 2020-12)",
                        range_kw[i]);
        const double x = json_number_value(v);
        const double b = i == 0 ? ceil(x) : i == 1 ? floor(x) : i == 2 ? floor(x) + 1 : ceil(x) - 1;
        if (i % 2 == 0 && b > lo)
            lo = b;
        if (i % 2 == 1 && b < hi)
            hi = b;
    }
    if (lo > hi || lo >= lim || hi <= -lim)
        return fail(c, "no integer of at most 16 digits lies in this minimum/maximum range%s",
                    NULL);
    int32_t id = new_node(c, key, JSONC_INTEGER);
    if (id >= 0)
        jsonc_b_range(c->b, id, (int64_t)lo, (int64_t)hi);
    return id;
}

/* The formats enforced, as patterns over what jsonc_regex takes. Dates:
 * RFC 3339's full-date, years 0001-9999 (what common parsers take), the
 * days each month has, February 29 in leap years only (the Gregorian rule
 * written out: years divisible by 4 but not 100, or by 400). Times: RFC
 * 3339's full-time ('Z' and 'T' upper case; second 60 is its leap
 * second). uuid: RFC 4122's text; ipv4: dotted quads without leading
 * zeros; email, simplified: a local part of letters, digits and ._%+- , an
 * '@', a domain with at least one dot. hostname: RFC 1123 labels (1-63
 * letters, digits and hyphens, no hyphen first or last) joined by dots;
 * the 253-byte total is not enforced (a DFA counting it across labels
 * would need ~64 x 253 states). ipv6: RFC 4291's text forms, '::' at most
 * once, and the IPv4 tail after six groups or after '::' / '::ffff:' (not
 * after other compressed forms). uri: RFC 3986's scheme, ':', then its
 * unreserved and reserved characters and %XX escapes, in any order (the
 * characters a URI may hold, not its authority/path/query structure).
 * duration: RFC 3339 appendix A's ISO 8601 duration grammar as written
 * (P1Y2M3DT4H5M6S, P3W, PT0.5S is not in it: whole numbers only). The
 * openai clients' zod schemas use these (uri, ipv6, duration among them). */
#define FMT_DUR_T "T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)"
#define FMT_DUR_D "([0-9]+D|[0-9]+M([0-9]+D)?|[0-9]+Y([0-9]+M([0-9]+D)?)?)"

#define FMT_H16 "[0-9a-fA-F]{1,4}"
#define FMT_V4O "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#define FMT_V4 "(" FMT_V4O "\\.){3}" FMT_V4O
#define FMT_LABEL "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"

#define FMT_YEAR "([0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
#define FMT_LEAP "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)"
#define FMT_MD                                                                                \
    "((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"          \
    "02-(0[1-9]|1[0-9]|2[0-8]))"
#define FMT_DATE "(" FMT_YEAR "-" FMT_MD "|" FMT_LEAP "-02-29)"
#define FMT_TIME                                                                              \
    "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]{1,9})?"                            \
    "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
static const char *const formats[][2] = {
    {"date", "^" FMT_DATE "$"},
    {"time", "^" FMT_TIME "$"},
    {"date-time", "^" FMT_DATE "T" FMT_TIME "$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"ipv4", "^" FMT_V4 "$"},
    {"ipv6", "^((" FMT_H16 ":){7}" FMT_H16 "|(" FMT_H16 ":){1,7}:|(" FMT_H16 ":){1,6}:" FMT_H16
             "|(" FMT_H16 ":){1,5}(:" FMT_H16 "){1,2}|(" FMT_H16 ":){1,4}(:" FMT_H16 "){1,3}|(" FMT_H16
             ":){1,3}(:" FMT_H16 "){1,4}|(" FMT_H16 ":){1,2}(:" FMT_H16 "){1,5}|" FMT_H16 ":(:" FMT_H16
             "){1,6}|:((:" FMT_H16 "){1,7}|:)|(" FMT_H16 ":){6}" FMT_V4 "|::([fF]{4}:)?" FMT_V4 ")$"},
    {"duration", "^P(" FMT_DUR_D "(" FMT_DUR_T ")?|" FMT_DUR_T "|[0-9]+W)$"},
    {"hostname", "^" FMT_LABEL "(\\." FMT_LABEL ")*$"},
    {"uri", "^[A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9._~:/?#\\[\\]@!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*$"},
    {"email", "^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)+$"},
};

static int32_t plain_string(struct ctx *c, json_t *j, json_t *key)
{
    int64_t lo = count_kw(c, j, "minLength", 0), hi = count_kw(c, j, "maxLength", -1);
    if (lo == -2 || hi == -2)
        return -1;
    if (hi >= 0 && hi < lo)
        return fail(c, "maxLength is below minLength%s", NULL);
    int32_t id = new_node(c, key, JSONC_STRING);
    if (id >= 0)
        jsonc_b_shape(c->b, id, 0, 0, (int32_t)lo, (int32_t)hi, 0);
    return id;
}

/* A format not in the table: the refusal names the ones that are, from the
 * table itself (no second list to keep in step) */
static int32_t format_refused(struct ctx *c, const char *name)
{
    char list[160] = "";
    size_t n = 0;
    for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]) && n < sizeof(list); i++)
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "", formats[i][0]);
    snprintf(c->msg, c->cap, "format '%.40s' is not enforced (supported: %s)", name, list);
    return -1;
}

/* A string with j's "pattern" or "format" (a PATTERN node: its DFA).
 * Lenient (non-strict tool parameters): one it cannot enforce is a plain
 * string. */
static int32_t pattern_string(struct ctx *c, json_t *j, json_t *key, json_t *pat, json_t *fmt)
{
    if (pat && fmt) /* lenient: neither is enforced, as other keywords there */
        return c->lenient ? plain_string(c, j, key)
                          : fail(c, "'pattern' and 'format' together on one string are not supported%s", NULL);
    if (json_object_get(j, "minLength") || json_object_get(j, "maxLength"))
        return c->lenient ? plain_string(c, j, key)
                          : fail(c, "minLength/maxLength with a pattern or format are not "
                                    "supported (write the length into the pattern)%s", NULL);
    json_t *v = pat ? pat : fmt;
    if (!json_is_string(v))
        return fail(c, "schema keyword '%s' must be a string", pat ? "pattern" : "format");
    const char *re = json_string_value(v);
    size_t len = json_string_length(v);
    if (fmt) {
        re = NULL;
        for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
            if (!strcmp(json_string_value(fmt), formats[i][0]))
                re = formats[i][1];
        if (!re)
            return c->lenient ? plain_string(c, j, key) : format_refused(c, json_string_value(fmt));
        len = strlen(re);
    }
    struct jsonc_dfa d;
    char why[200];
    int rc = jsonc_regex_compile(re, len, &d, why, sizeof(why));
    if (rc == -2)
        return oom(c);
    if (rc)
        return c->lenient ? plain_string(c, j, key) : fail(c, "%s", why);
    int32_t id = new_node(c, key, JSONC_PATTERN);
    if (id >= 0 && jsonc_b_pattern(c->b, id, &d))
        id = oom(c);
    jsonc_dfa_free(&d);
    return id;
}

/* One type name of j's "type"; key: what to remember the node under (j,
 * or NULL for one member of a list of types). */
static int32_t typed(struct ctx *c, json_t *j, const char *type, json_t *key)
{
    if (!strcmp(type, "object"))
        return object(c, j, key);
    if (!strcmp(type, "array"))
        return array(c, j, key);
    if (!strcmp(type, "string")) {
        json_t *pat = json_object_get(j, "pattern"), *fmt = json_object_get(j, "format");
        return pat || fmt ? pattern_string(c, j, key, pat, fmt) : plain_string(c, j, key);
    }
    if (!strcmp(type, "number")) {
        const char *r = range_keyword(j);
        if (r && !c->lenient)
            return fail(c, "'%s' is enforced on integers only (\"type\": \"integer\"), not on "
                           "numbers", r);
        return new_node(c, key, JSONC_NUMBER);
    }
    if (!strcmp(type, "integer"))
        return integer_node(c, j, key);
    if (!strcmp(type, "boolean")) {
        json_t *v[2] = {json_true(), json_false()};
        return lits(c, key, v, 2);
    }
    if (!strcmp(type, "null")) {
        json_t *v[1] = {json_null()};
        return lits(c, key, v, 1);
    }
    return fail(c, "schema type '%.32s' is not one of object, array, string, number, integer, "
                   "boolean, null", type);
}

/* A union of the n schemas in list (j NULL), or of the n type names in
 * list over schema j. The recognizer picks a member by the value's first
 * byte, so members must start differently; objects may share '{' when
 * they all begin with the same required property whose const/enum values
 * differ (a tagged union: that value picks the object, JSONC_TAGGED). */
static int32_t union_of(struct ctx *c, json_t *key, size_t n, json_t *list, json_t *j)
{
    if (n == 0 || n > JSONC_MAX_ALT)
        return fail(c, "anyOf/oneOf/type lists must have 1..%s entries", "64");
    int32_t mem[JSONC_MAX_ALT], objs[JSONC_MAX_ALT], n_obj = 0;
    int32_t first, id = node_slots(c, key, JSONC_UNION, (int32_t)n, &first);
    if (id < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(list, i);
        int32_t m;
        if (j) { /* a list of type names over one schema */
            if (!json_is_string(e))
                return fail(c, "schema 'type' must be a name or a list of names%s", NULL);
            m = typed(c, j, json_string_value(e), NULL);
        } else
            m = compile(c, e, 0);
        if (m < 0)
            return -1;
        mem[i] = m;
        if (jsonc_b_first_ok(c->b, m, '{'))
            objs[n_obj++] = m;
    }
    size_t nm = n;
    if (n_obj >= 2) { /* the objects as one tagged object, in the first one's place */
        int oom_ = 0;
        int32_t t = jsonc_b_tag_objects(c->b, objs, n_obj, &oom_);
        if (t < 0)
            return oom_ ? oom(c)
                        : fail(c, "anyOf/oneOf members that are objects must all begin with the "
                                  "same required property whose const/enum values differ (a "
                                  "tagged union)%s", NULL);
        nm = 0;
        for (size_t i = 0; i < n; i++)
            if (mem[i] == objs[0])
                mem[nm++] = t;
            else if (!jsonc_b_first_ok(c->b, mem[i], '{'))
                mem[nm++] = mem[i];
    }
    for (size_t i = 0; i < nm; i++) {
        for (size_t p = 0; p < i; p++) {
            for (unsigned b = 0; b < 256; b++) {
                if (jsonc_b_first_ok(c->b, mem[i], b) && jsonc_b_first_ok(c->b, mem[p], b))
                    return fail(c, "anyOf/oneOf/type alternatives must start differently (a "
                                   "string, a number, an object, an array, true/false, null: "
                                   "one each, or objects told apart by a first property's "
                                   "const); two of them can start with '%s'",
                                (char[2]){(char)b, 0});
            }
        }
        jsonc_b_slot(c->b, first + (int32_t)i, NULL, 0, mem[i]);
    }
    jsonc_b_shape(c->b, id, first, (int32_t)nm, 0, -1, 0);
    return id;
}

/* "#", "#/$defs/NAME", "#/definitions/NAME" (NAME with JSON Pointer's ~0
 * and ~1), or NULL. */
static json_t *resolve(struct ctx *c, const char *ref)
{
    if (!strcmp(ref, "#"))
        return c->root;
    const char *name = NULL;
    json_t *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) {
        name = ref + 8;
        defs = json_object_get(c->root, "$defs");
    } else if (!strncmp(ref, "#/definitions/", 14)) {
        name = ref + 14;
        defs = json_object_get(c->root, "definitions");
    }
    if (!name || !json_is_object(defs) || strchr(name, '/'))
        return NULL;
    char key[256];
    size_t n = 0;
    for (const char *p = name; *p; p++) {
        char ch = *p;
        if (ch == '~') {
            if (p[1] != '0' && p[1] != '1')
                return NULL;
            ch = *++p == '0' ? '~' : '/';
        }
        if (n + 1 >= sizeof(key))
            return NULL;
        key[n++] = ch;
    }
    key[n] = 0;
    return json_object_get(defs, key);
}

static int32_t compile_in(struct ctx *c, json_t *j, int hops);

/* compile_in, with the nesting of schemas bounded (the request's JSON
 * nesting bounds it too, but far deeper than any real schema). */
static int32_t compile(struct ctx *c, json_t *j, int hops)
{
    if (c->depth >= SCHEMA_MAX_DEPTH)
        return fail(c, "the schema nests deeper than %s levels", "64");
    c->depth++;
    int32_t id = compile_in(c, j, hops);
    c->depth--;
    return id;
}

/* Whether "type" (a name or a list of names) names t. */
static int type_has(json_t *type, const char *t)
{
    if (json_is_string(type))
        return !strcmp(json_string_value(type), t);
    for (size_t i = 0; json_is_array(type) && i < json_array_size(type); i++)
        if (json_is_string(json_array_get(type, i)) &&
            !strcmp(json_string_value(json_array_get(type, i)), t))
            return 1;
    return 0;
}

static int32_t compile_in(struct ctx *c, json_t *j, int hops)
{
    const char *k;
    json_t *v;
    if (json_is_true(j))
        return JSONC_N_ANY;
    if (!json_is_object(j))
        return fail(c, "a schema must be an object (or true)%s", NULL);
    for (int32_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].j == j)
            return c->memo[i].id;
    json_object_foreach(j, k, v) {
        (void)v;
        if (!known_keyword(k) && !c->lenient)
            return fail(c, "JSON Schema keyword '%.48s' is not supported (supported: type, "
                           "properties, required, additionalProperties, items, min/maxItems, "
                           "min/maxLength, pattern, format, integer min/max, enum, const, "
                           "anyOf, oneOf, $ref, $defs, annotations)", k);
    }
    json_t *ref = json_object_get(j, "$ref");
    if (ref) {
        json_t *t = json_is_string(ref) ? resolve(c, json_string_value(ref)) : NULL;
        if (!t)
            return fail(c, "$ref '%.64s' does not name \"#\", #/$defs/NAME or "
                           "#/definitions/NAME of this schema",
                        json_is_string(ref) ? json_string_value(ref) : "?");
        if (hops >= SCHEMA_MAX_REFS)
            return fail(c, "$ref chain too long or circular at '%.64s'", json_string_value(ref));
        int32_t id = compile(c, t, hops + 1);
        if (id >= 0 && memo_add(c, j, id))
            return oom(c);
        return id;
    }
    if ((v = json_object_get(j, "const")))
        return lits(c, j, &v, 1);
    if ((v = json_object_get(j, "enum"))) {
        if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > JSONC_MAX_ALT)
            return fail(c, "enum must be an array of 1..%s values", "64");
        json_t *vals[JSONC_MAX_ALT];
        for (size_t i = 0; i < json_array_size(v); i++)
            vals[i] = json_array_get(v, i);
        return lits(c, j, vals, json_array_size(v));
    }
    json_t *any = json_object_get(j, "anyOf");
    if (!any)
        any = json_object_get(j, "oneOf");
    if (any) {
        if (!json_is_array(any))
            return fail(c, "anyOf/oneOf must be an array of schemas%s", NULL);
        return union_of(c, j, json_array_size(any), any, NULL);
    }
    json_t *type = json_object_get(j, "type");
    const char *skw = json_object_get(j, "pattern") ? "pattern"
                      : json_object_get(j, "format") ? "format" : NULL;
    if (skw && !c->lenient && !type_has(type, "string"))
        return fail(c, "'%s' is enforced on strings only: give the schema \"type\": \"string\"",
                    skw);
    if (json_is_string(type))
        return typed(c, j, json_string_value(type), j);
    if (json_is_array(type)) {
        if (json_array_size(type) == 1 && json_is_string(json_array_get(type, 0)))
            return typed(c, j, json_string_value(json_array_get(type, 0)), j);
        return union_of(c, j, json_array_size(type), type, j);
    }
    if (type)
        return fail(c, "schema 'type' must be a name or a list of names%s", NULL);
    if (json_object_get(j, "properties"))
        return object(c, j, j);
    if (json_object_get(j, "items"))
        return array(c, j, j);
    const char *r = range_keyword(j);
    if (r && !c->lenient) /* a bound with no type: numbers of any kind, which it cannot bound */
        return fail(c, "'%s' is enforced on integers only: give the schema \"type\": "
                       "\"integer\"", r);
    if (memo_add(c, j, JSONC_N_ANY))
        return oom(c);
    return JSONC_N_ANY;
}

/* The end of a compilation: the root's form into *out (a union cycle
 * refused), the builder and the memo freed. Returns as api_schema_compile. */
static int schema_finish(struct ctx *c, int32_t root_id, struct jsonc **out)
{
    if (root_id >= 0 && jsonc_b_union_cycle(c->b))
        root_id = fail(c, "anyOf/oneOf refers back to itself through $ref with no object or "
                          "array in between%s", NULL);
    int rc = root_id < 0 ? (c->oom ? -2 : -1) : jsonc_b_finish(c->b, root_id, out) ? -2 : 0;
    jsonc_builder_free(c->b);
    free(c->memo);
    return rc;
}

/* Compile schema; root: what "#" and the $defs of a $ref are looked up in. */
static int schema_compile(json_t *schema, json_t *root, int lenient, struct jsonc **out,
                          char *msg, size_t cap)
{
    struct ctx c = {.root = root, .msg = msg, .cap = cap, .lenient = lenient};
    *out = NULL;
    msg[0] = 0;
    c.b = jsonc_builder_new();
    if (!c.b)
        return -2;
    return schema_finish(&c, compile(&c, schema, 0), out);
}

int api_schema_compile(json_t *schema, struct jsonc **out, char *msg, size_t cap)
{
    return schema_compile(schema, schema, 0, out, msg, cap);
}

int api_schema_compile_call(json_t *names, const char *args_key, json_t *const *params,
                            const int *lenient, struct jsonc **out, char *msg, size_t cap,
                            size_t *bad)
{
    const size_t n = json_array_size(names);
    struct ctx c = {.msg = msg, .cap = cap};
    int32_t var[JSONC_MAX_ALT];
    *out = NULL;
    *bad = 0;
    msg[0] = 0;
    if (n == 0 || n > JSONC_MAX_ALT) {
        snprintf(msg, cap, "a call forced among several tools can be one of at most %d",
                 JSONC_MAX_ALT);
        return -1;
    }
    c.b = jsonc_builder_new();
    if (!c.b)
        return -2;
    int32_t root = -1;
    for (size_t i = 0; i < n; i++) {
        /* function i's call: {"type": "object", "properties": {"name":
         * {"const": its name}, args_key: its parameters}, "required": both,
         * "additionalProperties": false}, $refs resolved in its parameters
         * (the schema they were written in; a memo per function, keyed by
         * its own nodes) */
        json_t *w = json_pack("{s:s, s:{s:{s:O}, s:O}, s:[s, s], s:b}", "type", "object",
                              "properties", "name", "const", json_array_get(names, i), args_key,
                              params[i],
                              "required", "name", args_key, "additionalProperties", 0);
        if (!w) {
            root = oom(&c);
            break;
        }
        c.root = params[i];
        c.lenient = lenient[i];
        c.n_memo = 0;
        root = var[i] = compile(&c, w, 0);
        json_decref(w);
        if (root < 0) {
            *bad = i;
            break;
        }
    }
    if (root >= 0 && n > 1) { /* one of them, told apart by the name */
        int oom_ = 0;
        root = jsonc_b_tag_objects(c.b, var, (int32_t)n, &oom_);
        if (root < 0) /* the variants are built as it wants them: only memory fails */
            root = oom(&c);
    }
    return schema_finish(&c, root, out);
}

int api_response_format(json_t *body, struct jsonc **out, char *msg, size_t cap)
{
    json_t *rf = json_object_get(body, "response_format");
    *out = NULL;
    msg[0] = 0;
    if (!rf || json_is_null(rf))
        return 0;
    json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
    if (!json_is_string(t)) {
        snprintf(msg, cap, "response_format must be an object with a string type");
        return -1;
    }
    const char *type = json_string_value(t);
    if (!strcmp(type, "text"))
        return 0;
    if (!strcmp(type, "json_object"))
        return jsonc_new_object(out) ? -2 : 0;
    if (!strcmp(type, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
        if (!schema) {
            snprintf(msg, cap, "response_format json_schema needs json_schema.schema");
            return -1;
        }
        /* the compiler's message straight after the prefix (an intermediate
         * buffer cut the longest one, the unsupported keyword's) */
        int n = snprintf(msg, cap, "response_format.json_schema.schema: ");
        size_t at = n > 0 && (size_t)n < cap ? (size_t)n : 0;
        int rc = api_schema_compile(schema, out, msg + at, cap - at);
        if (rc != -1)
            msg[0] = 0;
        return rc;
    }
    snprintf(msg, cap, "response_format type '%.32s' is not one of text, json_object, json_schema",
             type);
    return -1;
}
