/* jsonc_regex — pattern to DFA (jsonc_regex.h has the subset). A
 * recursive-descent parser builds a Thompson NFA (each fragment an entry
 * state and an exit state of epsilon kind, so joining is setting one
 * edge); a counted repeat re-parses its atom once per copy. The subset
 * construction then makes the DFA, and states that cannot reach an
 * accepting one are dropped.
 */
#include "engine/jsonc_regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RX_EPS, RX_SET, RX_MATCH };

struct rx_state {
    uint8_t kind;
    uint64_t set[2]; /* RX_SET: ASCII bytes taken */
    int32_t out, out1;
};

struct rx {
    const char *p, *end;
    struct rx_state *s;
    int32_t n, cap;
    char *msg;
    size_t msg_cap;
    int err;
    int oom; /* the refusal is the allocator's (jsonc_regex_compile returns -2) */
};

struct frag {
    int32_t in, out; /* out: an RX_EPS state, out and out1 free */
};

static int rx_fail(struct rx *r, const char *what)
{
    if (!r->err)
        snprintf(r->msg, r->msg_cap, "pattern: %s", what);
    r->err = 1;
    return -1;
}

static int rx_oom(struct rx *r)
{
    if (!r->err)
        r->oom = 1;
    return rx_fail(r, "out of memory");
}

static int32_t rx_new(struct rx *r, int kind)
{
    if (r->err)
        return -1;
    if (r->n >= JSONC_RX_MAX_NFA)
        return rx_fail(r, "too large once its repeats are written out");
    if (r->n == r->cap) {
        int32_t cap = r->cap ? 2 * r->cap : 256;
        struct rx_state *q = realloc(r->s, (size_t)cap * sizeof(*q));
        if (!q)
            return rx_oom(r);
        r->s = q;
        r->cap = cap;
    }
    r->s[r->n] = (struct rx_state){(uint8_t)kind, {0, 0}, -1, -1};
    return r->n++;
}

/* The bytes a string may hold: 0x20..0x7E but '"' and '\\'. */
static void rx_alphabet(uint64_t set[2])
{
    set[0] = ~(uint64_t)0 << 32 & ~((uint64_t)1 << '"');
    set[1] = (~(uint64_t)0 >> 1) & ~((uint64_t)1 << ('\\' - 64));
}

/* Bit i of a set of uint64 words: the byte sets (two words) and the NFA
 * state sets alike. */
static int bit_test(const uint64_t *set, int64_t i)
{
    return set[i >> 6] >> (i & 63) & 1;
}

static void bit_set(uint64_t *set, int64_t i)
{
    set[i >> 6] |= (uint64_t)1 << (i & 63);
}

static void set_add(uint64_t set[2], unsigned c)
{
    bit_set(set, c);
}

static void set_range(uint64_t set[2], unsigned a, unsigned b)
{
    for (unsigned c = a; c <= b; c++)
        set_add(set, c);
}

static struct frag frag_set(struct rx *r, const uint64_t set[2])
{
    int32_t a = rx_new(r, RX_SET), b = rx_new(r, RX_EPS);
    if (a < 0 || b < 0)
        return (struct frag){-1, -1};
    uint64_t al[2];
    rx_alphabet(al);
    r->s[a].set[0] = set[0] & al[0];
    r->s[a].set[1] = set[1] & al[1];
    r->s[a].out = b;
    return (struct frag){a, b};
}

static struct frag frag_empty(struct rx *r)
{
    int32_t a = rx_new(r, RX_EPS);
    return (struct frag){a, a};
}

static struct frag frag_cat(struct rx *r, struct frag a, struct frag b)
{
    if (r->err)
        return (struct frag){-1, -1};
    r->s[a.out].out = b.in;
    return (struct frag){a.in, b.out};
}

static struct frag frag_alt(struct rx *r, struct frag a, struct frag b)
{
    int32_t s = rx_new(r, RX_EPS), e = rx_new(r, RX_EPS);
    if (s < 0 || e < 0)
        return (struct frag){-1, -1};
    r->s[s].out = a.in;
    r->s[s].out1 = b.in;
    r->s[a.out].out = e;
    r->s[b.out].out = e;
    return (struct frag){s, e};
}

/* a* (min 0) or a+ (min 1) */
static struct frag frag_loop(struct rx *r, struct frag a, int min)
{
    int32_t s = rx_new(r, RX_EPS), e = rx_new(r, RX_EPS);
    if (s < 0 || e < 0)
        return (struct frag){-1, -1};
    r->s[s].out = a.in;
    if (!min)
        r->s[s].out1 = e;
    r->s[a.out].out = a.in;
    r->s[a.out].out1 = e;
    return (struct frag){s, e};
}

static struct frag frag_opt(struct rx *r, struct frag a)
{
    int32_t s = rx_new(r, RX_EPS);
    if (s < 0)
        return (struct frag){-1, -1};
    r->s[s].out = a.in;
    r->s[s].out1 = a.out;
    return (struct frag){s, a.out};
}

/* \d \w \s (lower) as a set; 0, or -1 for another letter. */
static int rx_perl_class(unsigned lower, uint64_t set[2])
{
    switch (lower) {
    case 'd':
        set_range(set, '0', '9');
        return 0;
    case 'w':
        set_range(set, '0', '9');
        set_range(set, 'A', 'Z');
        set_range(set, 'a', 'z');
        set_add(set, '_');
        return 0;
    case 's':
        set_add(set, ' '); /* the other whitespace is not in the alphabet */
        return 0;
    }
    return -1;
}

/* An escape's set (after the '\\'), in a class or out of one. */
static int rx_escape(struct rx *r, uint64_t set[2])
{
    if (r->p >= r->end)
        return rx_fail(r, "ends with a lone backslash");
    unsigned c = (unsigned char)*r->p++;
    if (rx_perl_class(c, set) == 0)
        return 0;
    uint64_t t[2] = {0, 0}, al[2];
    if (c >= 'A' && c <= 'Z' && rx_perl_class(c + ('a' - 'A'), t) == 0) {
        rx_alphabet(al);
        set[0] |= al[0] & ~t[0];
        set[1] |= al[1] & ~t[1];
        return 0;
    }
    if (c && c < 0x80 && strchr(".\\/-[](){}*+?|^$,:=!<>#&~'\"@%`;_ ", (int)c)) {
        set_add(set, c);
        return 0;
    }
    return rx_fail(r, "an escape other than \\d \\D \\w \\W \\s \\S or escaped punctuation "
                      "(\\b, backreferences, \\t \\n \\uXXXX ... are not supported)");
}

static int rx_class(struct rx *r, uint64_t set[2])
{
    int neg = 0;
    uint64_t t[2] = {0, 0};
    if (r->p < r->end && *r->p == '^') {
        neg = 1;
        r->p++;
    }
    if (r->p < r->end && *r->p == ']')
        return rx_fail(r, "an empty class []");
    while (r->p < r->end && *r->p != ']') {
        unsigned a = (unsigned char)*r->p++;
        if (a == '\\') {
            uint64_t e[2] = {0, 0};
            if (rx_escape(r, e))
                return -1;
            t[0] |= e[0];
            t[1] |= e[1];
            continue;
        }
        if (a >= 0x80)
            return rx_fail(r, "only ASCII is supported");
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            unsigned b = (unsigned char)r->p[1];
            r->p += 2;
            if (b == '\\' || b >= 0x80 || b < a)
                return rx_fail(r, "a class range must go up between two ASCII characters");
            set_range(t, a, b);
            continue;
        }
        set_add(t, a);
    }
    if (r->p >= r->end)
        return rx_fail(r, "a class is not closed with ']'");
    r->p++;
    if (neg) {
        uint64_t al[2];
        rx_alphabet(al);
        t[0] = al[0] & ~t[0];
        t[1] = al[1] & ~t[1];
    }
    set[0] |= t[0];
    set[1] |= t[1];
    return 0;
}

static struct frag rx_alt(struct rx *r, int depth);

static struct frag rx_atom(struct rx *r, int depth)
{
    uint64_t set[2] = {0, 0};
    unsigned c = (unsigned char)*r->p++;
    if (c == '(') {
        if (depth > 64) {
            rx_fail(r, "groups nest too deep");
            return (struct frag){-1, -1};
        }
        if (r->end - r->p >= 2 && r->p[0] == '?') {
            if (r->p[1] != ':') {
                rx_fail(r, "lookaround and named groups are not supported");
                return (struct frag){-1, -1};
            }
            r->p += 2;
        }
        struct frag f = rx_alt(r, depth + 1);
        if (r->err)
            return f;
        if (r->p >= r->end || *r->p != ')') {
            rx_fail(r, "a group is not closed with ')'");
            return (struct frag){-1, -1};
        }
        r->p++;
        return f;
    }
    if (c == '[') {
        if (rx_class(r, set))
            return (struct frag){-1, -1};
        return frag_set(r, set);
    }
    if (c == '.') {
        rx_alphabet(set);
        return frag_set(r, set);
    }
    if (c == '\\') {
        if (rx_escape(r, set))
            return (struct frag){-1, -1};
        return frag_set(r, set);
    }
    if (c == '^' || c == '$') {
        rx_fail(r, "'^' and '$' are supported only as the first and the last character");
        return (struct frag){-1, -1};
    }
    if (c == '*' || c == '+' || c == '?') {
        rx_fail(r, "a quantifier with nothing before it");
        return (struct frag){-1, -1};
    }
    /* '{' that is not a count, '}' and ']': literals (ECMA-262 Annex B) */
    if (c >= 0x80 || c < 0x20) {
        rx_fail(r, "only printable ASCII is supported");
        return (struct frag){-1, -1};
    }
    set_add(set, c);
    return frag_set(r, set);
}

/* {n}, {n,} or {n,m} after an atom: 0 with *lo and *hi (hi -1: none), 1 when
 * the '{' is not a count, -1 on error. */
static int rx_count(struct rx *r, int *lo, int *hi)
{
    const char *p = r->p + 1;
    long a = 0, b = -1;
    if (p >= r->end || *p < '0' || *p > '9')
        return 1;
    while (p < r->end && *p >= '0' && *p <= '9' && a <= JSONC_RX_MAX_REPEAT)
        a = a * 10 + (*p++ - '0');
    if (p < r->end && *p == ',') {
        p++;
        if (p < r->end && *p >= '0' && *p <= '9') {
            b = 0;
            while (p < r->end && *p >= '0' && *p <= '9' && b <= JSONC_RX_MAX_REPEAT)
                b = b * 10 + (*p++ - '0');
        }
    } else
        b = a;
    if (p >= r->end || *p != '}')
        return 1;
    if (a > JSONC_RX_MAX_REPEAT || b > JSONC_RX_MAX_REPEAT || (b >= 0 && b < a))
        return rx_fail(r, "a count {n,m} must have n <= m <= 256");
    r->p = p + 1;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

/* An atom and its quantifiers. */
static struct frag rx_repeat(struct rx *r, int depth)
{
    const char *at = r->p;
    struct frag f = rx_atom(r, depth);
    if (!r->err && r->p < r->end) { /* one quantifier: ECMA-262 does not stack them */
        char q = *r->p;
        int lo, hi;
        if (q == '*' || q == '+' || q == '?') {
            r->p++;
            f = q == '?' ? frag_opt(r, f) : frag_loop(r, f, q == '+');
        } else if (q == '{') {
            int k = rx_count(r, &lo, &hi);
            if (k != 0) /* -1: an error; 1: a literal '{' (Annex B), the next atom */
                return f;
            /* lo copies, then hi - lo optional ones or (no hi) a loop: the
             * atom parsed again for each copy after the first (f) */
            const char *after = r->p;
            int total = lo + (hi < 0 ? 1 : hi - lo);
            struct frag out = frag_empty(r);
            for (int i = 0; i < total && !r->err; i++) {
                struct frag g = f;
                if (i > 0) {
                    r->p = at;
                    g = rx_atom(r, depth);
                    if (r->err)
                        break;
                }
                out = frag_cat(r, out, i < lo ? g : hi < 0 ? frag_loop(r, g, 0) : frag_opt(r, g));
            }
            r->p = after;
            f = out;
        } else
            return f;
        if (r->p < r->end && *r->p == '?') /* lazy: the same set of strings */
            r->p++;
        int lo2, hi2;
        const char *p = r->p;
        if (r->p < r->end && *r->p == '{' && rx_count(r, &lo2, &hi2) == 0) {
            r->p = p;
            rx_fail(r, "a quantifier after a quantifier");
        }
    }
    return f;
}

static struct frag rx_cat(struct rx *r, int depth)
{
    struct frag f = frag_empty(r);
    while (!r->err && r->p < r->end && *r->p != '|' && *r->p != ')')
        f = frag_cat(r, f, rx_repeat(r, depth));
    return f;
}

static struct frag rx_alt(struct rx *r, int depth)
{
    struct frag f = rx_cat(r, depth);
    while (!r->err && r->p < r->end && *r->p == '|') {
        r->p++;
        f = frag_alt(r, f, rx_cat(r, depth));
    }
    return f;
}

/* ---- NFA to DFA ---- */

#define DFA_TABLE (4 * JSONC_RX_MAX_STATES) /* open addressing, at most a quarter full */

struct dfa_build {
    int32_t words;     /* uint64 words of an NFA state set */
    uint64_t *sets;    /* the DFA states' NFA sets, words each */
    uint32_t *hash;
    int32_t *table;    /* DFA_TABLE slots: state + 1 by hash, 0 empty */
    int32_t n, cap;
    uint16_t *next;
    int32_t *stack;
};

/* The members of set (words words) into out, by word: an NFA set is
 * mostly zero words. Returns how many. */
static int32_t set_members(const uint64_t *set, int32_t words, int32_t *out)
{
    int32_t n = 0;
    for (int32_t w = 0; w < words; w++)
        for (uint64_t m = set[w]; m; m &= m - 1)
            out[n++] = w * 64 + __builtin_ctzll(m);
    return n;
}

static void closure(const struct rx *r, uint64_t *set, int32_t words, int32_t *stack)
{
    int32_t sp = set_members(set, words, stack);
    while (sp) {
        const struct rx_state *s = &r->s[stack[--sp]];
        if (s->kind != RX_EPS)
            continue;
        int32_t o[2] = {s->out, s->out1};
        for (int k = 0; k < 2; k++)
            if (o[k] >= 0 && !bit_test(set, o[k])) {
                bit_set(set, o[k]);
                stack[sp++] = o[k];
            }
    }
}

static uint32_t set_hash(const uint64_t *set, int32_t words)
{
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < words; i++)
        h = (h ^ set[i]) * 1099511628211ull;
    return (uint32_t)(h ^ h >> 32);
}

/* The DFA state for set (added when new): its index, -1 out of memory,
 * -2 too many. */
static int32_t dfa_state(struct dfa_build *d, const uint64_t *set)
{
    uint32_t h = set_hash(set, d->words), at = h % DFA_TABLE;
    for (; d->table[at]; at = (at + 1) % DFA_TABLE) {
        int32_t i = d->table[at] - 1;
        if (d->hash[i] == h && !memcmp(d->sets + (size_t)i * d->words, set, (size_t)d->words * 8))
            return i;
    }
    if (d->n >= JSONC_RX_MAX_STATES)
        return -2;
    if (d->n == d->cap) {
        int32_t cap = d->cap ? 2 * d->cap : 64;
        uint64_t *s = realloc(d->sets, (size_t)cap * d->words * 8);
        if (!s)
            return -1;
        d->sets = s;
        uint32_t *hh = realloc(d->hash, (size_t)cap * sizeof(*hh));
        if (!hh)
            return -1;
        d->hash = hh;
        uint16_t *nx = realloc(d->next, (size_t)cap * JSONC_RX_SYMS * sizeof(*nx));
        if (!nx)
            return -1;
        d->next = nx;
        d->cap = cap;
    }
    memcpy(d->sets + (size_t)d->n * d->words, set, (size_t)d->words * 8);
    d->hash[d->n] = h;
    d->table[at] = d->n + 1;
    return d->n++;
}

static int dfa_make(struct rx *r, int32_t start, int32_t match, struct jsonc_dfa *out)
{
    struct dfa_build d = {(r->n + 63) / 64, NULL, NULL, NULL, 0, 0, NULL, NULL};
    d.table = calloc(DFA_TABLE, sizeof(*d.table));
    uint64_t *cur = calloc((size_t)d.words * (JSONC_RX_SYMS + 1), 8);
    d.stack = malloc((size_t)r->n * 2 * sizeof(int32_t) + 8);
    uint8_t *live = NULL;
    int32_t *map = NULL;
    int rc = -1;
    if (!cur || !d.stack || !d.table) {
        rx_oom(r);
        goto done;
    }
    bit_set(cur, start);
    closure(r, cur, d.words, d.stack);
    if (dfa_state(&d, cur) != 0) {
        rx_oom(r);
        goto done;
    }
    for (int32_t i = 0; i < d.n; i++) {
        /* per byte, the states the set's RX_SET members move to */
        uint64_t *to = cur + d.words;
        memset(to, 0, (size_t)d.words * JSONC_RX_SYMS * 8);
        int32_t nm = set_members(d.sets + (size_t)i * d.words, d.words, d.stack);
        for (int32_t m = 0; m < nm; m++) {
            const struct rx_state *k = &r->s[d.stack[m]];
            if (k->kind != RX_SET)
                continue;
            for (int w = 0; w < 2; w++) /* the byte set's members: 0x20..0x7E */
                for (uint64_t b = k->set[w]; b; b &= b - 1)
                    bit_set(to + (size_t)(w * 64 + __builtin_ctzll(b) - 0x20) * d.words, k->out);
        }
        for (int c = 0; c < JSONC_RX_SYMS; c++) {
            uint64_t *t = to + (size_t)c * d.words;
            int any = 0;
            for (int32_t w = 0; w < d.words && !any; w++)
                any = t[w] != 0;
            int32_t j = JSONC_RX_DEAD;
            if (any) {
                closure(r, t, d.words, d.stack);
                j = dfa_state(&d, t);
                if (j < 0) {
                    if (j == -2)
                        rx_fail(r, "needs more than 1024 states (too complex)");
                    else
                        rx_oom(r);
                    goto done;
                }
            }
            d.next[(size_t)i * JSONC_RX_SYMS + c] = (uint16_t)j;
        }
    }
    /* live: the states an accepting one is reachable from */
    const size_t nd = (size_t)(uint32_t)d.n; /* 1..JSONC_RX_MAX_STATES */
    live = calloc(nd, 1);
    map = malloc(nd * sizeof(*map));
    if (!live || !map) {
        rx_oom(r);
        goto done;
    }
    for (int32_t i = 0; i < d.n; i++)
        live[i] = (uint8_t)bit_test(d.sets + (size_t)i * d.words, match);
    /* states are numbered breadth first, a successor mostly after its
     * state: walking them backwards settles most of it in one pass */
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t i = d.n - 1; i >= 0; i--)
            for (int c = 0; c < JSONC_RX_SYMS && !live[i]; c++) {
                uint16_t j = d.next[(size_t)i * JSONC_RX_SYMS + c];
                if (j != JSONC_RX_DEAD && live[j])
                    live[i] = changed = 1;
            }
    }
    if (!live[0]) {
        rx_fail(r, "no string of printable ASCII without '\"' or '\\\\' matches it");
        goto done;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < d.n; i++)
        map[i] = live[i] ? n++ : -1;
    out->n = n;
    out->next = malloc((size_t)n * JSONC_RX_SYMS * sizeof(uint16_t));
    out->accept = malloc((size_t)n);
    if (!out->next || !out->accept) {
        jsonc_dfa_free(out);
        rx_oom(r);
        goto done;
    }
    for (int32_t i = 0; i < d.n; i++) {
        if (!live[i])
            continue;
        for (int c = 0; c < JSONC_RX_SYMS; c++) {
            uint16_t j = d.next[(size_t)i * JSONC_RX_SYMS + c];
            out->next[(size_t)map[i] * JSONC_RX_SYMS + c] =
                j != JSONC_RX_DEAD && live[j] ? (uint16_t)map[j] : JSONC_RX_DEAD;
        }
        out->accept[map[i]] = (uint8_t)bit_test(d.sets + (size_t)i * d.words, match);
    }
    rc = 0;
done:
    free(live);
    free(map);
    free(cur);
    free(d.stack);
    free(d.sets);
    free(d.hash);
    free(d.table);
    free(d.next);
    return rc;
}

int jsonc_regex_compile(const char *re, size_t len, struct jsonc_dfa *out, char *msg, size_t cap)
{
    memset(out, 0, sizeof(*out));
    struct rx r = {re, re + len, NULL, 0, 0, msg, cap, 0, 0};
    int anchor_start = len > 0 && re[0] == '^';
    /* a final '$' not itself escaped: count the backslashes before it */
    int anchor_end = 0;
    if (len > (size_t)anchor_start && re[len - 1] == '$') {
        size_t k = 0;
        while (len >= 2 + k && re[len - 2 - k] == '\\')
            k++;
        anchor_end = k % 2 == 0;
    }
    r.p += anchor_start;
    r.end -= anchor_end;
    uint64_t any[2];
    rx_alphabet(any);
    struct frag f = anchor_start ? frag_empty(&r) : frag_loop(&r, frag_set(&r, any), 0);
    f = frag_cat(&r, f, rx_alt(&r, 0));
    if (!r.err && r.p != r.end)
        rx_fail(&r, "an unmatched ')'");
    if (!anchor_end && !r.err)
        f = frag_cat(&r, f, frag_loop(&r, frag_set(&r, any), 0));
    int32_t m = rx_new(&r, RX_MATCH);
    int rc = -1;
    if (!r.err) {
        r.s[f.out].out = m;
        rc = dfa_make(&r, f.in, m, out);
    }
    free(r.s);
    return rc && r.oom ? -2 : rc;
}

void jsonc_dfa_free(struct jsonc_dfa *d)
{
    free(d->next);
    free(d->accept);
    d->next = NULL;
    d->accept = NULL;
    d->n = 0;
}

int jsonc_dfa_match(const struct jsonc_dfa *d, const char *s, size_t n)
{
    uint32_t st = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)s[i];
        if (c < 0x20 || c > 0x7E)
            return 0;
        uint16_t j = d->next[(size_t)st * JSONC_RX_SYMS + (c - 0x20)];
        if (j == JSONC_RX_DEAD)
            return 0;
        st = j;
    }
    return d->accept[st];
}
