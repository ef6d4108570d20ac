/* test_jsonc — the JSON constraint: the byte recognizer (engine/jsonc.c)
 * against jansson, response_format's schema compiler (api/schema.c), and
 * the allowed-token sets (engine/jsonc_vocab.c) against trying every token
 * one by one, on the real vocabularies in $INFERD_SHARED/vocab (the SPM
 * one is in data/ on a bare clone; the Qwen2 BPE one only in ../shared).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "api/request.h"
#include "api/schema.h"
#include "engine/jsonc.h"
#include "engine/jsonc_regex.h"
#include "tests/jsonc_check.h"
#include "tests/rng.h"
#include "tests/tok/tok_test.h"

static struct jsonc *schema_of(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    struct jsonc *g = NULL;
    char msg[300];
    CHECK(j != NULL);
    if (j && api_schema_compile(j, &g, msg, sizeof(msg))) {
        fprintf(stderr, "schema refused: %s\n  %s\n", msg, text);
        CHECK(0);
    }
    json_decref(j);
    return g;
}

/* The refusal message of a schema ("" when it compiles). */
static const char *refusal(const char *text)
{
    static char msg[300];
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    struct jsonc *g = NULL;
    msg[0] = 0;
    CHECK(j != NULL);
    if (j && !api_schema_compile(j, &g, msg, sizeof(msg)))
        msg[0] = 0;
    jsonc_free(g);
    json_decref(j);
    return msg;
}

/* 1: doc is a whole value under g (closed, or may end); 0: refused or
 * incomplete. Every byte is fed alone, as tokens split anywhere. */
static int accepts(const struct jsonc *g, const char *doc, size_t n)
{
    struct jsonc_state s;
    jsonc_state_init(g, &s);
    for (size_t i = 0; i < n; i++)
        if (jsonc_feed(g, &s, doc + i, 1))
            return 0;
    return jsonc_can_end(g, &s);
}

static int acc(const struct jsonc *g, const char *doc)
{
    return accepts(g, doc, strlen(doc));
}

static void test_recognizer(void)
{
    struct jsonc *obj = NULL, *any = schema_of("true");
    CHECK(jsonc_new_object(&obj) == 0);
    static const char *const good_obj[] = {
        "{}", "{\"a\":1}", " {\"a\": [1, 2.5e3, -0.5E-2, true, false, null, {}, []]}",
        "{\"k\":\"x\\u00e9\\n\\\"\\\\\\/\\b\\f\\r\\t\"}", "{\n  \"a\": {\n    \"b\": \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"\n  }\n}",
        "{\"\":\"\"}", "{\"a\":0,\"b\":-0,\"c\":10,\"d\":1e+5}",
    };
    for (size_t i = 0; i < sizeof(good_obj) / sizeof(good_obj[0]); i++) {
        if (!acc(obj, good_obj[i]))
            fprintf(stderr, "refused: %s\n", good_obj[i]);
        CHECK(acc(obj, good_obj[i]));
        CHECK(acc(any, good_obj[i]));
    }
    static const char *const bad_obj[] = {
        "", "[]", "1", "\"a\"", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{,}", "{'a':1}",
        "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":-}", "{\"a\":1e}", "{\"a\":+1}",
        "{\"a\":tru}", "{\"a\":True}", "{\"a\":\"\x01\"}", "{\"a\":\"\n\"}", "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12g4\"}", "{\"a\":\"\xc0\x80\"}", "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":\"\xf4\x90\x80\x80\"}", "{\"a\":\"\xe2\x82\"}", "{\"a\":\"\x80\"}", "{}}", "{} ",
        "{}\n", "{  \"a\":1}", "{\n\n\"a\":1}", "{\"a\":1\r\n}", "{\t\"a\":1}",
        "{\"a\":12345678901234567}", "{\"a\":1.12345678901234567}", "{\"a\":1e123}",
        "{\"a\":[1 2]}", "{\"a\":[1,]}", "{\"a\":[,1]}", "{\"a\" 1}", "{\"a\"::1}",
    };
    for (size_t i = 0; i < sizeof(bad_obj) / sizeof(bad_obj[0]); i++) {
        if (acc(obj, bad_obj[i]))
            fprintf(stderr, "accepted: %s\n", bad_obj[i]);
        CHECK(!acc(obj, bad_obj[i]));
    }
    /* the any-value root: scalars, and a number ends only at the end */
    CHECK(acc(any, "1") && acc(any, "-0.5") && acc(any, "\"s\"") && acc(any, "null"));
    CHECK(acc(any, "[]") && !acc(any, "-") && !acc(any, "nul"));
    /* closed: after the object's '}', before a number's end: not */
    struct jsonc_state s;
    jsonc_state_init(obj, &s);
    CHECK(jsonc_feed(obj, &s, "{\"a\":1", 6) == 0 && !jsonc_closed(&s));
    CHECK(jsonc_feed(obj, &s, "}", 1) == 0 && jsonc_closed(&s));
    jsonc_state_init(any, &s);
    CHECK(jsonc_feed(any, &s, "12", 2) == 0 && !jsonc_closed(&s) && jsonc_can_end(any, &s));
    /* nesting: JSONC_DEPTH containers, not one more */
    char deep[2 * JSONC_DEPTH + 8];
    size_t n = 0;
    for (int i = 0; i < JSONC_DEPTH; i++)
        deep[n++] = '[';
    for (int i = 0; i < JSONC_DEPTH; i++)
        deep[n++] = ']';
    CHECK(accepts(any, deep, n));
    memmove(deep + 1, deep, n);
    deep[0] = '[';
    deep[n + 1] = ']';
    CHECK(!accepts(any, deep, n + 2));
    jsonc_free(obj);
    jsonc_free(any);
}

/* ---- random documents against jansson ---- */

static json_t *random_value(int depth)
{
    static const char *const strs[] = {"", "a", "x y", "\xc3\xa9t\xc3\xa9", "q\"uote", "back\\slash",
                                       "new\nline", "\xf0\x9f\x98\x80", "tab\there", "\x7f"};
    switch (depth > 3 ? rnd(5) : rnd(7)) {
    case 0:
        return json_integer((json_int_t)rnd(2000000) - 1000000);
    case 1:
        return json_real((double)rnd(100000) / 64.0 - 500.0);
    case 2:
        return json_string(strs[rnd(10)]);
    case 3:
        return rnd(2) ? json_true() : json_false();
    case 4:
        return json_null();
    case 5: {
        json_t *a = json_array();
        for (uint32_t i = rnd(4); i > 0; i--)
            json_array_append_new(a, random_value(depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        char k[8];
        for (uint32_t i = rnd(4); i > 0; i--) {
            snprintf(k, sizeof(k), "k%u", rnd(6));
            json_object_set_new(o, k, random_value(depth + 1));
        }
        return o;
    }
    }
}

static void test_against_jansson(void)
{
    struct jsonc *obj = NULL;
    CHECK(jsonc_new_object(&obj) == 0);
    int n_mut = 0, n_mut_acc = 0;
    for (int it = 0; it < 400; it++) {
        json_t *o = json_object();
        json_object_set_new(o, "root", random_value(0));
        json_object_set_new(o, "n", random_value(2));
        size_t flags = JSON_REAL_PRECISION(10) | (it % 2 ? JSON_INDENT(2) : JSON_COMPACT);
        char *doc = json_dumps(o, flags);
        json_decref(o);
        size_t n = strlen(doc);
        if (!accepts(obj, doc, n))
            fprintf(stderr, "refused jansson's output: %s\n", doc);
        CHECK(accepts(obj, doc, n));
        /* one byte changed, dropped or doubled: whatever the recognizer
         * accepts whole, jansson must parse */
        for (int m = 0; m < 20; m++, n_mut++) {
            char mut[4096];
            size_t at = rnd((uint32_t)n), len = n;
            if (n + 1 >= sizeof(mut))
                break;
            memcpy(mut, doc, n);
            switch (rnd(3)) {
            case 0:
                mut[at] = (char)"{}[],:\" \n01-.eE\\tfnu\x80\xc3"[rnd(21)];
                break;
            case 1:
                memmove(mut + at, mut + at + 1, n - at - 1);
                len--;
                break;
            default:
                memmove(mut + at + 1, mut + at, n - at);
                len++;
            }
            if (accepts(obj, mut, len)) {
                json_error_t je;
                json_t *p = json_loadb(mut, len, 0, &je);
                n_mut_acc++;
                if (!p)
                    fprintf(stderr, "accepted, jansson refuses (%s): %.*s\n", je.text, (int)len,
                            mut);
                CHECK(p != NULL);
                json_decref(p);
            }
        }
        free(doc);
    }
    printf("jansson: 400 documents accepted; %d of %d one-byte mutations accepted, all valid JSON\n",
           n_mut_acc, n_mut);
    jsonc_free(obj);
}

/* ---- schemas ---- */

static void test_schemas(void)
{
    struct jsonc *g = schema_of(
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3},"
        "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\","
        "\"bc\",1,12]},\"minItems\":1,\"maxItems\":2},\"opt\":{\"type\":[\"number\",\"null\"]}},"
        "\"required\":[\"name\",\"tags\"]}");
    if (g) {
        CHECK(acc(g, "{\"name\":\"abc\",\"tags\":[\"a\"]}"));
        CHECK(acc(g, "{\"name\":\"\",\"age\":-3,\"tags\":[12,1],\"opt\":null}"));
        CHECK(acc(g, "{\"name\":\"\",\"tags\":[\"bc\"],\"opt\":2.5}"));
        CHECK(!acc(g, "{\"name\":\"abcd\",\"tags\":[\"a\"]}"));  /* maxLength */
        CHECK(!acc(g, "{\"tags\":[\"a\"],\"name\":\"a\"}"));     /* listed order */
        CHECK(!acc(g, "{\"name\":\"a\"}"));                      /* required tags */
        CHECK(!acc(g, "{\"name\":\"a\",\"age\":1.5,\"tags\":[1]}")); /* integer */
        CHECK(!acc(g, "{\"name\":\"a\",\"tags\":[]}"));          /* minItems */
        CHECK(!acc(g, "{\"name\":\"a\",\"tags\":[1,1,1]}"));     /* maxItems */
        CHECK(!acc(g, "{\"name\":\"a\",\"tags\":[\"b\"]}"));     /* enum */
        CHECK(!acc(g, "{\"name\":\"a\",\"tags\":[123]}"));       /* enum, longer */
        CHECK(!acc(g, "{\"name\":\"a\",\"tags\":[1],\"x\":1}")); /* no other keys */
        CHECK(!acc(g, "{\"name\":\"a\",\"name\":\"b\",\"tags\":[1]}"));
        CHECK(!acc(g, "{\"name\":\"a\",\"tags\":[1],\"opt\":\"s\"}"));
    }
    jsonc_free(g);
    /* recursion through $ref, and $defs as pydantic writes them */
    g = schema_of("{\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
                  "\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/Node\"}}},"
                  "\"required\":[\"v\"],\"title\":\"Node\"}},\"$ref\":\"#/$defs/Node\"}");
    if (g) {
        CHECK(acc(g, "{\"v\":1}"));
        CHECK(acc(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3}]}"));
        CHECK(!acc(g, "{\"v\":1,\"kids\":[{\"w\":2}]}"));
    }
    jsonc_free(g);
    g = schema_of("{\"anyOf\":[{\"type\":\"string\",\"minLength\":2},{\"type\":\"null\"},"
                  "{\"const\":{\"a\":[1]}}]}");
    if (g) {
        CHECK(acc(g, "\"ab\"") && acc(g, "null") && acc(g, "{\"a\":[1]}"));
        CHECK(!acc(g, "\"a\"") && !acc(g, "{\"a\": [1]}") && !acc(g, "1"));
    }
    jsonc_free(g);
    /* a tagged union (pydantic's discriminated unions when the tag is the
     * first field): the first property's value picks the object; $ref
     * members, an enum tag, an optional property after it, and null */
    g = schema_of(
        "{\"$defs\":{\"C\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":"
        "\"circle\"},\"r\":{\"type\":\"number\"}},\"required\":[\"kind\",\"r\"]}},"
        "\"anyOf\":[{\"$ref\":\"#/$defs/C\"},{\"type\":\"object\",\"properties\":{\"kind\":"
        "{\"enum\":[\"square\",\"box\"]},\"side\":{\"type\":\"integer\"},\"tag\":{\"type\":"
        "\"string\"}},\"required\":[\"kind\",\"side\"]},{\"type\":\"null\"},"
        "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"circles\"}},"
        "\"required\":[\"kind\"]}]}");
    if (g) {
        CHECK(acc(g, "{\"kind\":\"circle\",\"r\":1.5}") && acc(g, "{\"kind\": \"box\", \"side\": 2}"));
        CHECK(acc(g, "{\"kind\":\"square\",\"side\":2,\"tag\":\"t\"}") && acc(g, "null"));
        CHECK(acc(g, "{\"kind\":\"circles\"}"));
        CHECK(!acc(g, "{\"kind\":\"circle\",\"side\":2}")); /* the square's key */
        CHECK(!acc(g, "{\"kind\":\"square\",\"r\":1}"));
        CHECK(!acc(g, "{\"kind\":\"box\",\"side\":2.5}")); /* its own types */
        CHECK(!acc(g, "{\"kind\":\"circle\"}"));             /* its own required */
        CHECK(!acc(g, "{\"kind\":\"circles\",\"r\":1}"));
        CHECK(!acc(g, "{\"r\":1,\"kind\":\"circle\"}") && !acc(g, "{\"kind\":\"tri\"}"));
        CHECK(!acc(g, "{}") && !acc(g, "\"circle\""));
    }
    jsonc_free(g);
    CHECK(strstr(refusal("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1}},"
                         "\"required\":[\"a\"]},{\"type\":\"object\",\"properties\":{\"b\":{\"const\":"
                         "2}},\"required\":[\"b\"]}]}"),
                 "tagged union")); /* different first keys */
    CHECK(strstr(refusal("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1}}},"
                         "{\"type\":\"object\",\"properties\":{\"a\":{\"const\":2}},\"required\":"
                         "[\"a\"]}]}"),
                 "tagged union")); /* the tag optional in one */
    CHECK(strstr(refusal("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[1,2]}},"
                         "\"required\":[\"a\"]},{\"type\":\"object\",\"properties\":{\"a\":{\"const\":"
                         "2}},\"required\":[\"a\"]}]}"),
                 "tagged union")); /* a value in two */
    CHECK(strstr(refusal("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
                         "\"string\"}},\"required\":[\"a\"]},{\"type\":\"object\",\"properties\":"
                         "{\"a\":{\"const\":\"x\"}},\"required\":[\"a\"]}]}"),
                 "tagged union")); /* a tag that is not a const/enum */
    CHECK(strstr(refusal("{\"anyOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":"
                         "{\"a\":{\"const\":1}},\"required\":[\"a\"]}]}"),
                 "tagged union")); /* an object of any keys */
    /* integer ranges: a digit only where the integer can still end inside */
    g = schema_of("{\"type\":\"integer\",\"minimum\":3,\"maximum\":120}");
    if (g) {
        CHECK(acc(g, "3") && acc(g, "120") && acc(g, "57") && acc(g, "29"));
        CHECK(!acc(g, "2") && !acc(g, "121") && !acc(g, "130") && !acc(g, "-5") && !acc(g, "0"));
        CHECK(!acc(g, "1000") && !acc(g, "-0") && !acc(g, "1.5"));
        struct jsonc_state st;
        jsonc_state_init(g, &st); /* "1" may become 10..120; "13" then "130" may not */
        CHECK(jsonc_feed(g, &st, "1", 1) == 0 && !jsonc_can_end(g, &st));
        CHECK(jsonc_feed(g, &st, "3", 1) == 0 && jsonc_can_end(g, &st));
        CHECK(jsonc_feed(g, &st, "0", 1) != 0);
    }
    jsonc_free(g);
    g = schema_of("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                  "\"exclusiveMinimum\":0}},\"required\":[\"n\"]}");
    if (g)
        CHECK(acc(g, "{\"n\":1}") && acc(g, "{\"n\": 9999999999999999}") &&
              !acc(g, "{\"n\":0}") && !acc(g, "{\"n\":-1}") && !acc(g, "{\"n\":-0}"));
    jsonc_free(g);
    g = schema_of("{\"type\":[\"integer\",\"null\"],\"minimum\":-5,\"maximum\":-2}");
    if (g)
        CHECK(acc(g, "-3") && acc(g, "-5") && acc(g, "null") && !acc(g, "-1") && !acc(g, "-6") &&
              !acc(g, "-10") && !acc(g, "3"));
    jsonc_free(g);
    g = schema_of("{\"type\":\"integer\",\"minimum\":-1.5,\"exclusiveMaximum\":2.5,\"maximum\":1e30}");
    if (g) /* -1 .. 2 */
        CHECK(acc(g, "-1") && acc(g, "0") && acc(g, "-0") && acc(g, "2") && !acc(g, "-2") &&
              !acc(g, "3"));
    jsonc_free(g);
    CHECK(strstr(refusal("{\"type\":\"integer\",\"minimum\":1e17}"), "no integer"));
    CHECK(strstr(refusal("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}"), "no integer"));
    CHECK(strstr(refusal("{\"type\":\"integer\",\"exclusiveMinimum\":true}"), "must be a number"));
    CHECK(strstr(refusal("{\"minimum\":0}"), "integers only"));
    g = schema_of("{\"type\":\"object\",\"additionalProperties\":false}");
    if (g)
        CHECK(acc(g, "{}") && !acc(g, "{\"a\":1}"));
    jsonc_free(g);
    g = schema_of("{\"type\":\"object\"}"); /* any keys */
    if (g)
        CHECK(acc(g, "{\"a\":{\"b\":[null]}}"));
    jsonc_free(g);

    /* refusals name what is refused */
    CHECK(strstr(refusal("{\"type\":\"integer\",\"multipleOf\":2}"), "'multipleOf'"));
    CHECK(strstr(refusal("{\"type\":\"number\",\"minimum\":0}"), "'minimum'"));
    CHECK(strstr(refusal("{\"anyOf\":[{\"type\":\"string\"},{\"enum\":[\"a\"]}]}"),
                 "start differently"));
    CHECK(strstr(refusal("{\"$ref\":\"#/$defs/missing\"}"), "does not name"));
    CHECK(strstr(refusal("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}"),
                 "circular"));
    CHECK(strstr(refusal("{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}"),
                 "not in properties"));
    CHECK(strstr(refusal("{\"type\":\"date\"}"), "'date'"));
    /* a union that reaches itself through unions alone (U = V | null, V = U |
     * string): dispatching a string would go around it forever */
    CHECK(strstr(refusal("{\"anyOf\":[{\"$ref\":\"#/$defs/V\"},{\"type\":\"null\"}],\"$defs\":"
                         "{\"V\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"string\"}]}}}"),
                 "refers back to itself"));
    {   /* the recognizer's own fence, on a form built without the check */
        struct jsonc_builder *b = jsonc_builder_new();
        int32_t u = jsonc_b_node(b, JSONC_UNION), v = jsonc_b_node(b, JSONC_UNION);
        int32_t su = jsonc_b_slots(b, 2), sv = jsonc_b_slots(b, 2);
        jsonc_b_slot(b, su, NULL, 0, v);
        jsonc_b_slot(b, su + 1, NULL, 0, JSONC_N_WORDS);
        jsonc_b_slot(b, sv, NULL, 0, u);
        jsonc_b_slot(b, sv + 1, NULL, 0, JSONC_N_STRING);
        jsonc_b_shape(b, u, su, 2, 0, -1, 0);
        jsonc_b_shape(b, v, sv, 2, 0, -1, 0);
        CHECK(jsonc_b_union_cycle(b));
        struct jsonc *cyc = NULL;
        CHECK(jsonc_b_finish(b, u, &cyc) == 0);
        if (cyc)
            CHECK(!acc(cyc, "\"s\"")); /* refused after 16 hops, not a stack overflow */
        jsonc_free(cyc);
        jsonc_builder_free(b);
    }
    /* through an array it is fine: U = [U] | null */
    struct jsonc *rec = schema_of("{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},"
                                  "{\"type\":\"null\"}]}");
    if (rec)
        CHECK(acc(rec, "[[null,[]],null]") && !acc(rec, "[1]"));
    jsonc_free(rec);
    {
        char deep[2048] = "";
        for (int i = 0; i < 70; i++)
            strcat(deep, "{\"type\":\"array\",\"items\":");
        strcat(deep, "true");
        for (int i = 0; i < 70; i++)
            strcat(deep, "}");
        CHECK(strstr(refusal(deep), "deeper than 64"));
    }
    CHECK(strstr(refusal("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}"), "below"));
    CHECK(strstr(refusal("{\"enum\":[]}"), "enum"));
    CHECK(strstr(refusal("[1]"), "must be an object"));
    CHECK(refusal("{\"type\":\"string\",\"description\":\"d\",\"title\":\"t\"}")[0] == 0);

    /* response_format itself */
    char msg[300];
    struct jsonc *rf = NULL;
    json_t *b = json_loads("{\"response_format\":{\"type\":\"json_object\"}}", 0, NULL);
    CHECK(api_response_format(b, &rf, msg, sizeof(msg)) == 0 && rf);
    jsonc_free(rf);
    json_decref(b);
    b = json_loads("{\"response_format\":{\"type\":\"text\"}}", 0, NULL);
    CHECK(api_response_format(b, &rf, msg, sizeof(msg)) == 0 && !rf);
    json_decref(b);
    b = json_loads("{\"response_format\":{\"type\":\"json_schema\"}}", 0, NULL);
    CHECK(api_response_format(b, &rf, msg, sizeof(msg)) == -1 && strstr(msg, "json_schema.schema"));
    json_decref(b);
    /* the longest refusal arrives whole in the API's message */
    {
        char big[sizeof(((struct api_req_error *)0)->message)];
        b = json_loads("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
                       "{\"patternPropertiesXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX\":1}}}}",
                       0, NULL);
        CHECK(api_response_format(b, &rf, big, sizeof(big)) == -1);
        CHECK(strstr(big, "response_format.json_schema.schema: JSON Schema keyword") == big &&
              strstr(big, ", annotations)"));
        json_decref(b);
    }
    b = json_loads("{\"response_format\":{\"type\":\"yaml\"}}", 0, NULL);
    CHECK(api_response_format(b, &rf, msg, sizeof(msg)) == -1 && strstr(msg, "'yaml'"));
    json_decref(b);
}

/* ---- allowed tokens against every token tried alone ---- */

/* States along doc under g: before each of its first bytes (step apart). */
static int same_hits; /* states jsonc_allow_same let keep the set before */

static int check_allow_doc(const struct jsonc *g, const struct jsonc_vocab *v, int32_t nv,
                           const char *doc, int step, double *us, int *n_calls)
{
    struct jsonc_state s, prev;
    struct jsonc_state *work = malloc(jsonc_vocab_work_states(v) * sizeof(*work));
    size_t words = ((size_t)nv + 31) / 32;
    uint32_t *bits = calloc(words, sizeof(uint32_t)), *pbits = calloc(words, sizeof(uint32_t));
    int bad = 0, have = 0;
    size_t n = strlen(doc);
    jsonc_state_init(g, &s);
    for (size_t at = 0; work && bits && pbits && at <= n; at++) {
        if (at % (size_t)step == 0 || at == n) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            int32_t na = jsonc_allow(g, v, &s, work, bits);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            *us += (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
            ++*n_calls;
            int32_t count;
            char what[160];
            snprintf(what, sizeof(what), "byte %zu of %.120s", at, doc);
            bad += jsonc_check_allow(g, v, nv, &s, bits, na, &count, what);
            /* the next byte of the document is reachable: some token holds it */
            if (at < n && count == 0)
                bad++;
            /* where jsonc_allow_same says the set is the one before, it is */
            if (have && jsonc_allow_same(g, v, &prev, &s)) {
                same_hits++;
                if (memcmp(bits, pbits, words * sizeof(uint32_t)) && bad++ < 5)
                    fprintf(stderr, "jsonc_allow_same at byte %zu of %s, the sets differ\n", at, doc);
            }
            prev = s;
            memcpy(pbits, bits, words * sizeof(uint32_t));
            have = 1;
        }
        if (at < n && jsonc_feed(g, &s, doc + at, 1))
            bad++;
    }
    free(work);
    free(bits);
    free(pbits);
    return bad;
}

/* rel: a GGUF with a tokenizer, under $INFERD_SHARED. */
static void test_allow(const char *rel)
{
    struct gguf_file *f;
    struct tok *t;
    const char *vocab = rel;
    int rc = tt_open(rel, &f, &t);
    if (rc == 77)
        return; /* tt_open said which file is missing */
    CHECK(rc == 0);
    if (rc)
        return;
    struct jsonc_vocab *v = NULL;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(jsonc_vocab_new(t, &v) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct jsonc *obj = NULL;
    CHECK(jsonc_new_object(&obj) == 0);
    struct jsonc *sch = schema_of(
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"
        "\"n\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"},\"c\":{\"enum\":[\"red\","
        "\"green\"]}},\"required\":[\"city\",\"c\"]}");
    double us = 0;
    int calls = 0, bad = 0;
    if (v && obj && sch) {
        int32_t nv = tok_n_vocab(t);
        bad += check_allow_doc(obj, v, nv,
                               "{\"text\": \"caf\xc3\xa9 \\\"x\\\" \\u00e9\",\n  \"v\": [1.5e-3, "
                               "true, null, {}], \"w\": -0}", 3, &us, &calls);
        bad += check_allow_doc(sch, v, nv, "{\"city\":\"Paris\",\"n\":42,\"ok\":false,\"c\":\"red\"}",
                               4, &us, &calls);
        /* every budget of a short maxLength string (both ways the plain
         * tokens that fit are gathered: few of them, or most) */
        struct jsonc *short_s = schema_of("{\"type\":\"object\",\"properties\":{\"c\":{\"type\":"
                                          "\"string\",\"maxLength\":6}}}");
        if (short_s)
            bad += check_allow_doc(short_s, v, nv, "{\"c\":\"ab\\u00e9\xc3\xa9" "d\"}", 1, &us, &calls);
        jsonc_free(short_s);
        /* a long string crossing its minLength, byte by byte */
        struct jsonc *min_s = schema_of("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":"
                                        "\"string\",\"minLength\":4}}}");
        if (min_s)
            bad += check_allow_doc(min_s, v, nv, "{\"s\":\"abcdefgh ij\\n\"}", 1, &us, &calls);
        jsonc_free(min_s);
        /* far below a minLength: no token can close the string yet */
        struct jsonc *far_s = schema_of("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":"
                                        "\"string\",\"minLength\":300}}}");
        if (far_s)
            bad += check_allow_doc(far_s, v, nv, "{\"s\":\"The quick brown fox jumps over the", 2,
                                   &us, &calls);
        jsonc_free(far_s);
        struct jsonc *rng = schema_of("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":"
                                      "\"integer\",\"minimum\":-40,\"maximum\":1200}}}");
        if (rng) {
            bad += check_allow_doc(rng, v, nv, "{\"n\": 1190}", 1, &us, &calls);
            bad += check_allow_doc(rng, v, nv, "{\"n\":-39}", 1, &us, &calls);
        }
        jsonc_free(rng);
        struct jsonc *tu = schema_of(
            "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"t\":{\"const\":\"a\"},\"x\":"
            "{\"type\":\"integer\"}},\"required\":[\"t\",\"x\"]},{\"type\":\"object\",\"properties\":"
            "{\"t\":{\"const\":\"ab\"},\"y\":{\"type\":\"string\"}},\"required\":[\"t\"]},"
            "{\"type\":\"string\"}]}");
        if (tu)
            bad += check_allow_doc(tu, v, nv, "{\"t\": \"ab\", \"y\": \"yes\"}", 1, &us, &calls);
        jsonc_free(tu);
        /* patterns: a format and a pattern inside an object (the allowed
         * sets walk the vocabulary through the DFA, no plain-string path) */
        struct jsonc *pt = schema_of(
            "{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":"
            "\"date-time\"},\"id\":{\"type\":\"string\",\"format\":\"uuid\"},\"code\":{\"type\":"
            "\"string\",\"pattern\":\"^[A-Z]{2,3}-[0-9]{1,4}$\"}},\"required\":[\"when\",\"id\","
            "\"code\"]}");
        if (pt)
            bad += check_allow_doc(pt, v, nv,
                                   "{\"when\": \"2024-02-29T12:30:00.25Z\", \"id\": "
                                   "\"123e4567-e89b-12d3-a456-426614174000\", \"code\": \"AB-12\"}",
                                   1, &us, &calls);
        jsonc_free(pt);
        /* a call forced among tools whose names share a start (a tagged
         * object: the name picks the arguments' schema) */
        json_t *names = json_pack("[s, s, s]", "get", "get_2", "c");
        json_t *p[3] = {json_pack("{s:s, s:{s:{s:s}}, s:[s]}", "type", "object", "properties",
                                  "city", "type", "string", "required", "city"),
                        json_pack("{s:s, s:{s:{s:s}}, s:[s]}", "type", "object", "properties",
                                  "n", "type", "integer", "required", "n"),
                        json_pack("{s:s}", "type", "object")};
        const int lenient[3] = {0, 0, 0};
        struct jsonc *call = NULL;
        char msg[256];
        size_t which;
        CHECK(names && p[0] && p[1] && p[2] &&
              api_schema_compile_call(names, "arguments", p, lenient, &call, msg, sizeof(msg),
                                      &which) == 0);
        if (call) {
            bad += check_allow_doc(call, v, nv, "{\"name\": \"get_2\", \"arguments\": {\"n\": 12}}",
                                   1, &us, &calls);
            bad += check_allow_doc(call, v, nv, "{\"name\":\"get\",\"arguments\":{\"city\":\"Nice\"}}",
                                   1, &us, &calls);
        }
        jsonc_free(call);
        json_decref(names);
        for (int i = 0; i < 3; i++)
            json_decref(p[i]);
        CHECK(bad == 0);
        printf("%s: %d tokens, tables %.1f ms, jsonc_allow %.0f us a call (%d calls)\n", vocab, nv,
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
               calls ? us / calls : 0, calls);
    }
    jsonc_free(obj);
    jsonc_free(sch);
    jsonc_vocab_free(v);
    tok_free(t);
    gguf_close(f);
}

/* Patterns (engine/jsonc_regex.c): whole-string matches against what an
 * ECMA-262 search would say, written out by hand, and the refusals. */
static int rx_match(const char *re, const char *s)
{
    struct jsonc_dfa d;
    char msg[256];
    if (jsonc_regex_compile(re, strlen(re), &d, msg, sizeof(msg))) {
        fprintf(stderr, "pattern refused: %s: %s\n", re, msg);
        return -1;
    }
    int m = jsonc_dfa_match(&d, s, strlen(s));
    jsonc_dfa_free(&d);
    return m;
}

static int rx_refused(const char *re)
{
    struct jsonc_dfa d;
    char msg[256];
    if (jsonc_regex_compile(re, strlen(re), &d, msg, sizeof(msg)))
        return strncmp(msg, "pattern: ", 9) == 0;
    jsonc_dfa_free(&d);
    return 0;
}

static void test_patterns(void)
{
    static const struct {
        const char *re, *s;
        int want;
    } cases[] = {
        {"abc", "xxabcxx", 1}, {"abc", "xxabxx", 0}, {"^abc", "abcx", 1}, {"^abc", "xabc", 0},
        {"abc$", "xabc", 1}, {"abc$", "abcx", 0}, {"^a{2,4}$", "a", 0}, {"^a{2,4}$", "aa", 1},
        {"^a{2,4}$", "aaaa", 1}, {"^a{2,4}$", "aaaaa", 0}, {"^a{2,}$", "aaaaaaa", 1},
        {"^a{2,}$", "a", 0}, {"^a{0}b$", "b", 1}, {"^(ab){2}$", "abab", 1}, {"^(ab){2}$", "ab", 0},
        {"^\\d+\\.\\d*$", "12.", 1}, {"^\\w+$", "ab_9", 1}, {"^\\W$", "-", 1},
        {"^\\W$", "a", 0}, {"^[^a-z]+$", "ABC", 1}, {"^[^a-z]+$", "AbC", 0},
        {"^(a|bc)*$", "abcbca", 1}, {"^(a|bc)*$", "abcb", 0}, {"^x??y$", "y", 1},
        {"^(?:ab|c)+?$", "cab", 1}, {"^\\$[0-9]+$", "$12", 1}, {"a\\$", "a$", 1},
        {"^[a-c-]+$", "a-b", 1}, {"^.{3}$", "a b", 1}, {"^\\s$", " ", 1}, {"^\\S$", " ", 0},
        {"{", "{", 1}, {"^a{,3}$", "a{,3}", 1}, {"^[\\d.]+$", "1.2", 1},
        /* outside the alphabet: never (the quote, the backslash, a tab) */
        {"^.$", "\"", 0}, {"^.$", "\\", 0}, {"^.$", "\t", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int m = rx_match(cases[i].re, cases[i].s);
        if (m != cases[i].want)
            fprintf(stderr, "pattern %s on \"%s\": %d, want %d\n", cases[i].re, cases[i].s, m,
                    cases[i].want);
        CHECK(m == cases[i].want);
    }
    static const char *const refused[] = {
        "(?=a)", "(?!a)", "\\bfoo", "(a)\\1", "^a$b", "a^", "[z-a]", "\\t", "\\u0041",
        "(ab", "ab)", "*a", "a**", "a{1}{2}", "a{300}", "^(a{200}){200}$", "[]", "[abc",
        "^[\"]$", "\xc3\xa9", "\\",
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        int r = rx_refused(refused[i]);
        if (!r)
            fprintf(stderr, "pattern %s was not refused\n", refused[i]);
        CHECK(r);
    }
    /* random patterns of metacharacters (under ASan in CI): each compiles or
     * is refused with a message, and a compiled one takes a string only
     * when its recognizer path (jsonc_feed through a PATTERN node) does */
    static const char meta[] = "ab.()[]^$-|*+?{}0123,\\dws:";
    int compiled = 0;
    for (int i = 0; i < 4000; i++) {
        char re[24], msg[200];
        int n = 1 + (int)rnd(22);
        for (int k = 0; k < n; k++)
            re[k] = meta[rnd(sizeof(meta) - 1)];
        re[n] = 0;
        struct jsonc_dfa d;
        if (jsonc_regex_compile(re, (size_t)n, &d, msg, sizeof(msg))) {
            CHECK(!strncmp(msg, "pattern: ", 9));
            continue;
        }
        compiled++;
        CHECK(d.n >= 1 && d.n <= JSONC_RX_MAX_STATES);
        json_t *sch = json_pack("{s:s, s:s%}", "type", "string", "pattern", re, (size_t)n);
        struct jsonc *g = NULL;
        char m2[300];
        CHECK(sch && api_schema_compile(sch, &g, m2, sizeof(m2)) == 0);
        for (int t = 0; g && t < 20; t++) {
            char s[16], doc[20];
            int len = (int)rnd(9);
            for (int k = 0; k < len; k++)
                s[k] = "ab-0123 ,:"[rnd(10)];
            snprintf(doc, sizeof(doc), "\"%.*s\"", len, s);
            CHECK(jsonc_dfa_match(&d, s, (size_t)len) == acc(g, doc));
        }
        jsonc_free(g);
        json_decref(sch);
        jsonc_dfa_free(&d);
    }
    CHECK(compiled > 200);
    /* the formats, through the schema compiler and the recognizer */
    static const struct {
        const char *fmt, *doc;
        int want;
    } fmts[] = {
        {"date", "\"2024-02-29\"", 1}, {"date", "\"2024-2-29\"", 0},
        {"date", "\"2024-13-01\"", 0}, {"date", "\"2024-01-32\"", 0},
        {"date", "\"2023-02-29\"", 0}, {"date", "\"2000-02-29\"", 1}, {"date", "\"1900-02-29\"", 0},
        {"date", "\"0004-02-29\"", 1}, {"date", "\"0000-01-01\"", 0}, {"date", "\"2024-04-31\"", 0},
        {"date", "\"2024-12-31\"", 1}, {"date", "\"2024-11-30\"", 1},
        {"date-time", "\"2024-02-29T12:30:00.5+01:00\"", 1},
        {"date-time", "\"2024-02-29T12:30:00Z\"", 1}, {"date-time", "\"2024-02-29 12:30:00Z\"", 0},
        {"date-time", "\"2024-02-29T24:00:00Z\"", 0}, {"time", "\"23:59:60Z\"", 1},
        {"time", "\"23:59\"", 0}, {"uuid", "\"123e4567-e89b-12d3-a456-426614174000\"", 1},
        {"uuid", "\"123e4567e89b12d3a456426614174000\"", 0}, {"ipv4", "\"10.0.0.255\"", 1},
        {"ipv4", "\"10.0.0.256\"", 0}, {"ipv4", "\"01.0.0.1\"", 0},
        {"email", "\"a.b+c@mail.example.org\"", 1}, {"email", "\"a@localhost\"", 0},
        {"hostname", "\"api-2.example.com\"", 1}, {"hostname", "\"localhost\"", 1},
        {"hostname", "\"-a.example\"", 0}, {"hostname", "\"a-.example\"", 0},
        {"hostname", "\"a..b\"", 0}, {"hostname", "\"a_b.c\"", 0},
        {"hostname", "\"a23456789012345678901234567890123456789012345678901234567890123.x\"", 1},
        {"hostname", "\"a234567890123456789012345678901234567890123456789012345678901234.x\"", 0},
        {"ipv6", "\"::1\"", 1}, {"ipv6", "\"::\"", 1}, {"ipv6", "\"2001:db8::ff00:42:8329\"", 1},
        {"ipv6", "\"1:2:3:4:5:6:7:8\"", 1}, {"ipv6", "\"1:2:3:4:5:6:7::\"", 1},
        {"ipv6", "\"::ffff:192.0.2.128\"", 1}, {"ipv6", "\"1:2:3:4:5:6:10.0.0.1\"", 1},
        {"ipv6", "\"1:2:3:4:5:6:7:8:9\"", 0}, {"ipv6", "\"1::2::3\"", 0},
        {"ipv6", "\"12345::1\"", 0}, {"ipv6", "\"::ffff:1.2.3.256\"", 0}, {"ipv6", "\"g::1\"", 0},
        {"uri", "\"https://example.com/a?b=c#d\"", 1}, {"uri", "\"urn:isbn:0451450523\"", 1},
        {"uri", "\"mailto:a@b.org\"", 1}, {"uri", "\"http://x/%2F\"", 1},
        {"uri", "\"http://x/%2\"", 0}, {"uri", "\"no scheme\"", 0}, {"uri", "\"/relative/path\"", 0},
        {"uri", "\"1http://x\"", 0}, {"uri", "\"http://a b\"", 0},
        {"duration", "\"P1Y2M3DT4H5M6S\"", 1}, {"duration", "\"P3W\"", 1}, {"duration", "\"PT36H\"", 1},
        {"duration", "\"P1M\"", 1}, {"duration", "\"PT1M30S\"", 1}, {"duration", "\"P\"", 0},
        {"duration", "\"PT\"", 0}, {"duration", "\"P1DT\"", 0}, {"duration", "\"P1Y1D\"", 0},
        {"duration", "\"PT1H1S\"", 0}, {"duration", "\"P1W2D\"", 0}, {"duration", "\"1D\"", 0},
    };
    for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
        char schema[128];
        snprintf(schema, sizeof(schema), "{\"type\":\"string\",\"format\":\"%s\"}", fmts[i].fmt);
        struct jsonc *g = schema_of(schema);
        int m = g ? acc(g, fmts[i].doc) : -1;
        if (m != fmts[i].want)
            fprintf(stderr, "format %s on %s: %d, want %d\n", fmts[i].fmt, fmts[i].doc, m,
                    fmts[i].want);
        CHECK(m == fmts[i].want);
        jsonc_free(g);
    }
    struct jsonc *g = schema_of("{\"type\":[\"string\",\"null\"],\"pattern\":\"^[A-Z]{3}-[0-9]+$\"}");
    CHECK(g && acc(g, "\"ABC-12\"") && acc(g, "null") && !acc(g, "\"ABC-\"") &&
          !acc(g, "\"abc-1\"") && !acc(g, "\"ABC-1\\u0030\""));
    jsonc_free(g);
    CHECK(strstr(refusal("{\"type\":\"string\",\"format\":\"uri-template\"}"), "not enforced"));
    CHECK(strstr(refusal("{\"type\":\"integer\",\"format\":\"int32\"}"), "strings only"));
    CHECK(strstr(refusal("{\"pattern\":\"a\"}"), "strings only"));
    CHECK(strstr(refusal("{\"type\":\"string\",\"pattern\":\"a\",\"format\":\"date\"}"),
                 "together"));
    /* in a non-strict tool's parameters the pair is a plain string (as
     * every keyword it cannot enforce there), strict still refuses it */
    {
        json_t *names = json_pack("[s]", "f");
        json_t *p[1] = {json_pack("{s:s, s:{s:{s:s, s:s, s:s}}}", "type", "object", "properties", "d", "type",
                                  "string", "pattern", "^[0-9]+$", "format", "date")};
        for (int strict = 0; strict < 2; strict++) {
            const int lenient[1] = {!strict};
            struct jsonc *call = NULL;
            char msg[256] = "";
            size_t which = 0;
            const int rc = api_schema_compile_call(names, "arguments", p, lenient, &call, msg, sizeof(msg), &which);
            CHECK(strict ? rc != 0 && strstr(msg, "together") != NULL : rc == 0 && call != NULL);
            jsonc_free(call);
        }
        json_decref(names);
        json_decref(p[0]);
    }
    CHECK(strstr(refusal("{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}"), "maxLength"));
    CHECK(strstr(refusal("{\"type\":\"string\",\"pattern\":\"(?=a)\"}"), "lookaround"));
    CHECK(strstr(refusal("{\"type\":\"string\",\"pattern\":7}"), "must be a string"));
}

int main(void)
{
    test_patterns();
    test_recognizer();
    test_against_jansson();
    test_schemas();
    /* stories260K's last token is not plain string content (the by-character
     * tables were once built wrong for such a vocabulary) */
    test_allow("models/stories260K.gguf");
    test_allow("vocab/ggml-vocab-llama-spm.gguf");
    test_allow("vocab/ggml-vocab-qwen2.gguf");
    printf("jsonc_allow_same held at %d states, each checked\n", same_hits);
    CHECK(same_hits > 0);
    if (fails)
        fprintf(stderr, "%d checks failed\n", fails);
    return fails ? 1 : 0;
}
