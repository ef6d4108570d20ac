/* jsonc — constrained decoding to JSON: a byte-level recognizer of JSON
 * text, optionally shaped by a compiled schema (api/schema.c compiles the
 * JSON Schema subset the API accepts), and the set of vocabulary tokens
 * it lets come next.
 *
 * What the recognizer accepts is RFC 8259 JSON with three limits of its
 * own, so a model cannot run away inside the constraint:
 * - whitespace between tokens is "", one space, or one newline followed by
 *   up to 20 spaces/tabs (the shape of compact and pretty-printed JSON);
 * - a number has at most 16 integer and 16 fraction digits and 2 exponent
 *   digits (so it is a finite double: clients such as jansson refuse 1e400);
 * - containers nest at most JSONC_DEPTH deep.
 * Strings must be valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF),
 * with no raw control characters; escapes are JSON's.
 *
 * The schema form is a graph of nodes (kinds below). Objects with listed
 * properties take them in the listed order: any optional one may be left
 * out, a required one may not, and no other key appears. Unions dispatch on
 * the first byte of the value, so their members must start differently
 * (the compiler checks it): a string or null, an object or null, ...;
 * objects that start with the same key are told apart by that key's value
 * instead (JSONC_TAGGED).
 *
 * Allowed tokens: a token is allowed when all its bytes (tok_token_bytes,
 * specials not rendered: what the API's text holds) are accepted from the
 * current state; control tokens (no bytes) never are. jsonc_allow walks the
 * vocabulary sorted by bytes, so a rejected prefix skips every token that
 * shares it, and inside a plain string it starts from the precomputed set
 * of tokens that are plain string content.
 *
 * Threads: a struct jsonc and a struct jsonc_vocab are immutable once built
 * and may be read by any thread; a state belongs to one sequence.
 */
#ifndef INFERD_JSONC_H
#define INFERD_JSONC_H

#include <stddef.h>
#include <stdint.h>

struct tok;

#define JSONC_DEPTH 32   /* nested objects/arrays */
#define JSONC_MAX_ALT 64 /* properties of one object, values of one enum, members of one union */

enum jsonc_kind {
    JSONC_ANY = 0, /* any JSON value */
    JSONC_OBJECT,  /* properties (slots: key literal + value node), or free keys */
    JSONC_ARRAY,   /* items: slot 0's node; lo/hi: min/max items (hi < 0: none) */
    JSONC_STRING,  /* lo/hi: min/max characters (hi < 0: none) */
    JSONC_NUMBER,
    JSONC_INTEGER, /* jsonc_b_range: the values it may take */
    JSONC_LITS,    /* one of the slots' literals (serialized JSON values) */
    JSONC_UNION,   /* one of the slots' nodes, told apart by the first byte */
    JSONC_TAGGED,  /* objects told apart by their first property's value:
                    * jsonc_b_tag_objects */
    JSONC_PATTERN, /* a string whose value a DFA takes (jsonc_b_pattern) */
};

/* Nodes every compiled form has. */
enum {
    JSONC_N_ANY = 0,
    JSONC_N_FREE_OBJECT, /* any keys, any values: response_format json_object */
    JSONC_N_FREE_ARRAY,
    JSONC_N_STRING,
    JSONC_N_NUMBER,
    JSONC_N_WORDS,       /* true, false, null */
    JSONC_N_BUILTIN
};

struct jsonc; /* a compiled form: one allocation */

/* ---- building a compiled form ---- */
struct jsonc_builder;
struct jsonc_builder *jsonc_builder_new(void); /* NULL: out of memory */
void jsonc_builder_free(struct jsonc_builder *b); /* accepts NULL */
/* A new node of kind k (lo 0, hi -1, no slots); its id, or -1 (out of
 * memory, or past 65,536 nodes). */
int32_t jsonc_b_node(struct jsonc_builder *b, int kind);
/* n consecutive slots (ref -1, no literal); the first one's index, or -1. */
int32_t jsonc_b_slots(struct jsonc_builder *b, int32_t n);
/* Fill slot i: a literal (copied; NULL for none) and a node. 0 or -1. */
int jsonc_b_slot(struct jsonc_builder *b, int32_t i, const char *lit, size_t len, int32_t ref);
/* Give node id its slots [first, first + n), bounds and required set
 * (OBJECT: bit k = slot first + k is required). */
void jsonc_b_shape(struct jsonc_builder *b, int32_t id, int32_t first, int32_t n, int32_t lo,
                   int32_t hi, uint64_t req);
/* An INTEGER node's values: lo <= v <= hi (every integer by default; the
 * recognizer's 16 digits bound it anyway). A digit, or the '-', is taken
 * only if some integer that continues the text lies in the range, and the
 * integer ends only inside it, so every text it closes is in range. */
void jsonc_b_range(struct jsonc_builder *b, int32_t id, int64_t lo, int64_t hi);
/* Make node id (a PATTERN node) a string whose value d takes
 * (jsonc_regex.h): printable ASCII with no escapes, each byte only into a
 * state of d's table, the closing quote only in an accepting one. d is
 * copied. 0, or -1 (out of memory). */
struct jsonc_dfa;
int jsonc_b_pattern(struct jsonc_builder *b, int32_t id, const struct jsonc_dfa *d);
/* Nodes built so far (the builtin ones included). */
int32_t jsonc_b_n_nodes(const struct jsonc_builder *b);
/* The objects objs[0..n) as one object whose first property picks the
 * rest of it (JSONC_TAGGED: the name of a tool call, the "type" of a
 * tagged union), when they all start with the same required key whose
 * value is a LITS node (OBJECTs with fixed keys), and no literal appears
 * twice (at most JSONC_MAX_ALT in all): each literal leads to its object,
 * whose tag is taken as read and whose rest is then the object's. The
 * node's id, or -1 when they are not so (or out of memory: *oom set). */
int32_t jsonc_b_tag_objects(struct jsonc_builder *b, const int32_t *objs, int32_t n, int *oom);
/* Whether a value of node id may start with byte c (UNION: any member). */
int jsonc_b_first_ok(const struct jsonc_builder *b, int32_t id, unsigned c);
/* Whether a union reaches itself through union members alone (a $ref
 * loop with no object or array between): the recognizer would dispatch
 * around it forever, so such a form must be refused. */
int jsonc_b_union_cycle(const struct jsonc_builder *b);
/* The compiled form with this root; 0, or -1 (out of memory). */
int jsonc_b_finish(struct jsonc_builder *b, int32_t root, struct jsonc **out);

/* response_format {"type": "json_object"}: one object, any content. */
int jsonc_new_object(struct jsonc **out);
struct jsonc *jsonc_dup(const struct jsonc *g); /* NULL: out of memory */
void jsonc_free(struct jsonc *g);                /* accepts NULL */

/* ---- the recognizer ---- */
struct jsonc_frame {
    int32_t node;
    uint8_t phase;
    uint8_t pad;
    uint16_t idx; /* OBJECT: the first slot the next key may take; ARRAY: items so far */
    uint16_t cur; /* OBJECT: the slot whose value is read */
    uint16_t pad2;
};

struct jsonc_state {
    int32_t lnode;         /* the node of the lexical token being read */
    uint8_t lex, sub, ws, depth;
    uint8_t u_need, u_lo, u_hi, lit_done; /* UTF-8: continuation bytes due and the next one's range */
    uint16_t pos;          /* literal bytes matched; digits of the number part; \u hex digits */
    uint8_t neg, pad;      /* an integer being read: its sign ('-' read) */
    uint32_t chars;        /* characters of the string being read */
    uint64_t cand;         /* literal candidates (bit k: slot first + k); an integer
                            * being read: the magnitude of its digits so far; a
                            * PATTERN string: its DFA state */
    struct jsonc_frame f[JSONC_DEPTH];
};

void jsonc_state_init(const struct jsonc *g, struct jsonc_state *s);
/* Feed n bytes: 0, or -1 when they are not a continuation (s is then
 * undefined: feed a copy when unsure). */
int jsonc_feed(const struct jsonc *g, struct jsonc_state *s, const void *bytes, size_t n);
/* a and b are the same state (every later byte reads them alike). */
int jsonc_state_equal(const struct jsonc_state *a, const struct jsonc_state *b);
/* The text so far is one whole value and may end here. */
int jsonc_can_end(const struct jsonc *g, const struct jsonc_state *s);
/* The value is complete and nothing may follow it. */
int jsonc_closed(const struct jsonc_state *s);
/* Inside a string with no UTF-8 sequence open, the characters plain string
 * content (jsonc_vocab.c) may still add: every plain token of at most that
 * many characters is accepted here (INT64_MAX: no maxLength), and none
 * other; -1 elsewhere. */
int64_t jsonc_plain_budget(const struct jsonc *g, const struct jsonc_state *s);
/* Plain string content: complete, valid UTF-8 with no '"', '\\' or
 * control byte (what jsonc_plain_budget states accept unseen). */
int jsonc_plain_bytes(const uint8_t *p, size_t n);
/* Whether a string with no UTF-8 sequence open takes byte c at all (as
 * content, an escape or its end): not a control byte, a continuation or an
 * invalid lead. */
int jsonc_string_takes(unsigned c);

/* ---- the vocabulary side ---- */
struct jsonc_vocab;
/* From the tokenizer; 0, or INF_ENOMEM. */
int jsonc_vocab_new(const struct tok *t, struct jsonc_vocab **out);
void jsonc_vocab_free(struct jsonc_vocab *v); /* accepts NULL */
/* The bytes of token id (NULL / 0 when it has none or is out of range). */
const uint8_t *jsonc_vocab_bytes(const struct jsonc_vocab *v, int32_t id, uint32_t *len);
/* Scratch jsonc_allow needs: a state per byte of the longest token + 1. */
size_t jsonc_vocab_work_states(const struct jsonc_vocab *v);
/* Set bit id of bits[(n_vocab + 31) / 32] for every token allowed from s;
 * returns how many. work: jsonc_vocab_work_states(v) states. */
int32_t jsonc_allow(const struct jsonc *g, const struct jsonc_vocab *v,
                    const struct jsonc_state *s, struct jsonc_state *work, uint32_t *bits);
/* Whether the tokens allowed from state a are exactly those allowed from
 * b: both inside the same string of no maxLength with no UTF-8 sequence
 * open, equal but for the count of characters read, and on the same far
 * side of its minLength (both past it, or both further below it than the
 * longest token could close). A long string's steps, where a caller may
 * keep the set it worked out for a. */
int jsonc_allow_same(const struct jsonc *g, const struct jsonc_vocab *v,
                     const struct jsonc_state *a, const struct jsonc_state *b);
/* Feed token id's bytes into s: 0, or -1 (not allowed; s undefined). */
int jsonc_feed_token(const struct jsonc *g, const struct jsonc_vocab *v, struct jsonc_state *s,
                     int32_t id);

#endif
