/* jsonc_regex — a JSON Schema "pattern" (an ECMA-262 regular expression,
 * the subset below) compiled to a DFA over the bytes a constrained string
 * may hold, for jsonc's PATTERN nodes.
 *
 * Alphabet: printable ASCII, 0x20..0x7E, but '"' and '\\' (a pattern
 * string is written with no escapes, so the text the model writes is the
 * string's value byte for byte). A pattern that needs anything else (a
 * tab, a quote, a non-ASCII letter) is refused rather than enforced in
 * part.
 *
 * Syntax: literals, '.', classes ([a-z0-9_], [^...], with \d \w \s and
 * escaped punctuation inside), \d \D \w \W \s \S (\s is the space: the
 * other whitespace is not in the alphabet), escaped punctuation, groups
 * ( ) and (?: ), alternation, the quantifiers * + ? {n} {n,} {n,m} (a
 * trailing '?' for laziness is accepted: a set of strings has no order),
 * '^' as the pattern's first character and '$' as its last. As JSON
 * Schema says, a pattern is not anchored: without '^' any text may come
 * before a match, without '$' any text after it. Refused: backreferences,
 * lookaround, \b, anchors elsewhere, counts over RX_MAX_REPEAT.
 *
 * The DFA holds only states from which an accepting one is reachable, so
 * a recognizer that takes a byte only into a state of the table never
 * leads a model into a string it cannot finish. Thread: any (pure).
 */
#ifndef INFERD_JSONC_REGEX_H
#define INFERD_JSONC_REGEX_H

#include <stddef.h>
#include <stdint.h>

#define JSONC_RX_SYMS 95         /* bytes 0x20..0x7E, in that order */
#define JSONC_RX_DEAD 0xFFFF     /* no transition */
#define JSONC_RX_MAX_STATES 1024 /* DFA states */
#define JSONC_RX_MAX_NFA 8192    /* NFA states while compiling */
#define JSONC_RX_MAX_REPEAT 256  /* n and m of {n,m} */

struct jsonc_dfa {
    int32_t n;       /* states; 0 is the start */
    uint16_t *next;  /* n * JSONC_RX_SYMS: the state after byte 0x20 + k, or JSONC_RX_DEAD */
    uint8_t *accept; /* n: the text so far matches */
};

/* Compile re[0..len): 0; -1 with msg set (the pattern is refused); -2
 * out of memory. out is filled on success; free it with jsonc_dfa_free. */
int jsonc_regex_compile(const char *re, size_t len, struct jsonc_dfa *out, char *msg, size_t cap);
void jsonc_dfa_free(struct jsonc_dfa *d);
/* Whether the DFA takes s[0..n) whole (tests; a byte outside the alphabet
 * is a refusal). */
int jsonc_dfa_match(const struct jsonc_dfa *d, const char *s, size_t n);

#endif
