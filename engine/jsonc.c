/* jsonc — the byte-level recognizer (jsonc.h has the contract;
 * jsonc_build.c the compiled form, jsonc_vocab.c the token side).
 *
 * The recognizer is a pushdown automaton: a stack of container frames
 * (object or array, the phase inside it) plus one lexical token in flight
 * (a value about to start, a string, a number, a literal being matched
 * against a set). Every step is one byte, so a token's bytes feed one after
 * another and a state can be copied to try a token without committing.
 * A number or a literal that may be a prefix of a longer one ends only when
 * a byte cannot extend it; that byte is then read again by the container
 * (the "reread" returns below).
 */
#include "engine/jsonc.h"
#include "engine/jsonc_impl.h"
#include "engine/jsonc_regex.h"

#include <string.h>

/* ---- the recognizer ---- */

enum { LX_VALUE, LX_STRUCT, LX_STR, LX_ESC, LX_HEX, LX_NUM, LX_LIT, LX_DONE };
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum {
    P_OOPEN, /* after '{' */
    P_OCOMMA, /* after ',' in an object */
    P_KEY,    /* reading a key */
    P_COLON,  /* after a key */
    P_VAL,    /* reading a property's value */
    P_OAFTER, /* after a property's value */
    P_AOPEN,  /* after '[' */
    P_ACOMMA, /* after ',' in an array */
    P_AVAL,   /* reading an item */
    P_AAFTER, /* after an item */
};

#define MAX_INDENT 20
#define MAX_INT_DIGITS 16
#define MAX_FRAC_DIGITS 16
#define MAX_EXP_DIGITS 2 /* 16 digits and e99: every number is a finite double */

void jsonc_state_init(const struct jsonc *g, struct jsonc_state *s)
{
    memset(s, 0, offsetof(struct jsonc_state, f));
    s->lex = LX_VALUE;
    s->lnode = g->root;
}

static int is_digit(unsigned c)
{
    return c >= '0' && c <= '9';
}

/* ws: 0 none yet in this run, 1 after one space, 2 + k after a newline and
 * k spaces/tabs. */
static int ws_byte(struct jsonc_state *s, unsigned c)
{
    if (c == '\n') {
        if (s->ws)
            return -1;
        s->ws = 2;
        return 0;
    }
    if (s->ws == 0 && c == ' ') {
        s->ws = 1;
        return 0;
    }
    if (s->ws >= 2 && s->ws - 2 < MAX_INDENT) {
        s->ws++;
        return 0;
    }
    return -1;
}

static int is_ws(unsigned c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* The token in flight is a whole value: back to its container. */
static void value_done(const struct jsonc *g, struct jsonc_state *s)
{
    s->ws = 0;
    if (s->depth == 0) {
        s->lex = LX_DONE;
        return;
    }
    struct jsonc_frame *f = &s->f[s->depth - 1];
    s->lex = LX_STRUCT;
    switch (f->phase) {
    case P_KEY:
        if (!g->nodes[f->node].free_keys) {
            f->cur = s->lit_done;
            f->idx = (uint16_t)(s->lit_done + 1);
        }
        f->phase = P_COLON;
        break;
    case P_VAL:
        /* a tagged object's first value picks the object it is from here
         * on: the variant of the literal read (its slot 0 is this key, so
         * idx = 1 and cur = 0 read the same in it) */
        if (g->nodes[f->node].kind == JSONC_TAGGED)
            f->node = g->slots[g->nodes[f->node].lo + s->lit_done].ref;
        f->phase = P_OAFTER;
        break;
    case P_AVAL:
        f->idx++;
        f->phase = P_AAFTER;
        break;
    }
}

static int open_container(struct jsonc_state *s, int32_t node, int phase)
{
    if (s->depth >= JSONC_DEPTH)
        return -1;
    struct jsonc_frame *f = &s->f[s->depth++];
    memset(f, 0, sizeof(*f));
    f->node = node;
    f->phase = (uint8_t)phase;
    s->lex = LX_STRUCT;
    s->ws = 0;
    return 0;
}

/* Match c against the literal candidates; 0 consumed, 1 the literal ended
 * before c (reread it), -1 reject. */
static int lit_byte(const struct jsonc *g, struct jsonc_state *s, unsigned c)
{
    const struct jsonc_node *n = &g->nodes[s->lnode];
    uint64_t ext = 0, ended = 0;
    for (uint64_t m = s->cand; m; m &= m - 1) {
        int k = __builtin_ctzll(m);
        const struct jsonc_slot *sl = &g->slots[n->first + k];
        if (s->pos < sl->len && g->chars[sl->off + s->pos] == c)
            ext |= (uint64_t)1 << k;
        else if (s->pos == sl->len)
            ended |= (uint64_t)1 << k;
    }
    if (ext) {
        s->cand = ext;
        s->pos++;
        for (uint64_t m = ext; m; m &= m - 1) /* is every candidate complete? */
            if (g->slots[n->first + __builtin_ctzll(m)].len != s->pos)
                return 0;
        s->lit_done = (uint8_t)__builtin_ctzll(ext);
        value_done(g, s);
        return 0;
    }
    if (ended) {
        s->lit_done = (uint8_t)__builtin_ctzll(ended);
        value_done(g, s);
        return 1;
    }
    return -1;
}

static int lit_start(const struct jsonc *g, struct jsonc_state *s, int32_t node, uint64_t cand,
                     unsigned c)
{
    if (!cand)
        return -1;
    s->lex = LX_LIT;
    s->lnode = node;
    s->cand = cand;
    s->pos = 0;
    return lit_byte(g, s, c) == 0 ? 0 : -1;
}

static uint64_t all_slots(int32_t n)
{
    return n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1);
}

static int int_reachable(const struct jsonc_node *n, const struct jsonc_state *s);

/* hops: unions passed through to get here (a compiled form has no union
 * cycles, jsonc_b_union_cycle; the bound is a second fence). */
static int value_start(const struct jsonc *g, struct jsonc_state *s, int32_t id, unsigned c,
                       int hops)
{
    const struct jsonc_node *n = &g->nodes[id];
    switch (n->kind) {
    case JSONC_ANY:
        if (c == '{')
            return value_start(g, s, JSONC_N_FREE_OBJECT, c, hops);
        if (c == '[')
            return value_start(g, s, JSONC_N_FREE_ARRAY, c, hops);
        if (c == '"')
            return value_start(g, s, JSONC_N_STRING, c, hops);
        if (c == 't' || c == 'f' || c == 'n')
            return value_start(g, s, JSONC_N_WORDS, c, hops);
        return value_start(g, s, JSONC_N_NUMBER, c, hops);
    case JSONC_OBJECT:
    case JSONC_TAGGED:
        return c == '{' ? open_container(s, id, P_OOPEN) : -1;
    case JSONC_ARRAY:
        return c == '[' ? open_container(s, id, P_AOPEN) : -1;
    case JSONC_STRING:
    case JSONC_PATTERN:
        if (c != '"')
            return -1;
        if (n->kind == JSONC_PATTERN)
            s->cand = 0; /* the DFA's start */
        s->lex = LX_STR;
        s->lnode = id;
        s->chars = 0;
        s->u_need = 0;
        s->ws = 0;
        return 0;
    case JSONC_NUMBER:
    case JSONC_INTEGER:
        s->lex = LX_NUM;
        s->lnode = id;
        s->ws = 0;
        s->pos = 1;
        s->neg = c == '-';
        s->cand = is_digit(c) ? c - '0' : 0;
        if (c == '-')
            s->sub = N_MINUS;
        else if (c == '0')
            s->sub = N_ZERO;
        else if (is_digit(c))
            s->sub = N_INT;
        else
            return -1;
        return n->kind == JSONC_INTEGER && !int_reachable(n, s) ? -1 : 0;
    case JSONC_LITS:
        s->ws = 0;
        return lit_start(g, s, id, all_slots(n->n), c);
    case JSONC_UNION:
        for (int32_t i = 0; hops < 16 && i < n->n; i++) {
            int32_t m = g->slots[n->first + i].ref;
            if (m >= 0 && jsonc_first_ok(g->nodes, g->slots, g->chars, m, c, 0))
                return value_start(g, s, m, c, hops + 1);
        }
        return -1;
    }
    return -1;
}

/* A digit more in the number part being read, at most max of them. */
static int more_digits(struct jsonc_state *s, int max)
{
    if (s->pos >= max)
        return -1;
    s->pos++;
    return 0;
}

/* The first digit of the part sub (fraction, exponent) starts it. */
static int part_start(struct jsonc_state *s, int d, int sub)
{
    if (!d)
        return -1;
    s->sub = (uint8_t)sub;
    s->pos = 1;
    return 0;
}

/* A byte of a number: 0 consumed, 1 the number ended before c, -1. */
static int num_byte(struct jsonc_state *s, int integer, unsigned c)
{
    int d = is_digit(c);
    int frac_ok = !integer && c == '.';
    int exp_ok = !integer && (c == 'e' || c == 'E');
    switch (s->sub) {
    case N_MINUS:
        return part_start(s, d, c == '0' ? N_ZERO : N_INT);
    case N_ZERO:
        if (d)
            return -1;
        break;
    case N_INT:
        if (d)
            return more_digits(s, MAX_INT_DIGITS);
        break;
    case N_DOT:
        return part_start(s, d, N_FRAC);
    case N_FRAC:
        if (d)
            return more_digits(s, MAX_FRAC_DIGITS);
        frac_ok = 0;
        break;
    case N_E:
        if (c == '+' || c == '-') {
            s->sub = N_ESIGN;
            return 0;
        }
        return part_start(s, d, N_EXP);
    case N_ESIGN:
        return part_start(s, d, N_EXP);
    case N_EXP:
        return d ? more_digits(s, MAX_EXP_DIGITS) : 1;
    }
    if (frac_ok || exp_ok) {
        s->sub = frac_ok ? N_DOT : N_E;
        return 0;
    }
    return 1;
}

static int num_can_end(const struct jsonc_state *s)
{
    return s->sub == N_ZERO || s->sub == N_INT || s->sub == N_FRAC || s->sub == N_EXP;
}

/* ---- integer ranges (jsonc_b_range) ----
 * An integer being read keeps its sign (s->neg) and the magnitude of its
 * digits (s->cand). Magnitudes have at most MAX_INT_DIGITS digits, so
 * everything below fits in int64 once the bounds are clamped to +-10^16. */

#define INT_LIMIT 10000000000000000LL /* 10^MAX_INT_DIGITS */

/* The magnitudes an integer of sign neg may have to lie in [lo, hi]: *a ..
 * *b (empty when *a > *b). -0 is 0. */
static void int_mags(const struct jsonc_node *n, int neg, int64_t *a, int64_t *b)
{
    const int64_t lo = n->imin < -INT_LIMIT ? -INT_LIMIT : n->imin;
    const int64_t hi = n->imax > INT_LIMIT ? INT_LIMIT : n->imax;
    *a = neg ? -hi : lo;
    *b = neg ? -lo : hi;
    if (*a < 0)
        *a = 0;
}

/* Whether an integer that continues what s has read may lie in n's range:
 * after a lone '-' any magnitude; after a leading 0 only 0; else the
 * magnitude v itself or v followed by j more digits, [v 10^j, (v + 1) 10^j
 * - 1], within the digit limit. */
static int int_reachable(const struct jsonc_node *n, const struct jsonc_state *s)
{
    int64_t a, b;
    int_mags(n, s->neg, &a, &b);
    if (a > b)
        return 0;
    if (s->sub == N_MINUS)
        return a < INT_LIMIT;
    const int64_t v = (int64_t)s->cand;
    if (v >= a && v <= b)
        return 1;
    if (s->sub == N_ZERO)
        return 0;
    int64_t p = 10;
    for (int k = s->pos; k < MAX_INT_DIGITS; k++, p *= 10)
        if (v * p <= b && (v + 1) * p - 1 >= a)
            return 1;
    return 0;
}

/* Whether the integer read so far is itself in n's range. */
static int int_in_range(const struct jsonc_node *n, const struct jsonc_state *s)
{
    int64_t a, b;
    int_mags(n, s->neg, &a, &b);
    return s->sub != N_MINUS && (int64_t)s->cand >= a && (int64_t)s->cand <= b;
}

/* The first byte of a UTF-8 lead c: continuation count and the first
 * continuation byte's range (RFC 3629's table), or -1. */
static int utf8_lead(struct jsonc_state *s, unsigned c)
{
    s->u_lo = 0x80;
    s->u_hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        s->u_need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        s->u_need = 2;
        if (c == 0xE0)
            s->u_lo = 0xA0;
        if (c == 0xED)
            s->u_hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        s->u_need = 3;
        if (c == 0xF0)
            s->u_lo = 0x90;
        if (c == 0xF4)
            s->u_hi = 0x8F;
    } else
        return -1;
    return 0;
}

/* A continuation byte of the open UTF-8 sequence: 0, or -1 out of range. */
static int utf8_cont(struct jsonc_state *s, unsigned c)
{
    if (c < s->u_lo || c > s->u_hi)
        return -1;
    s->u_need--;
    s->u_lo = 0x80;
    s->u_hi = 0xBF;
    return 0;
}

/* A PATTERN string's byte: into a state of the DFA, or its end in an
 * accepting one (jsonc_regex.h: no escapes, no byte outside the table). */
static int pat_byte(const struct jsonc *g, const struct jsonc_node *n, struct jsonc_state *s,
                    unsigned c)
{
    const uint8_t *t = g->chars + n->req;
    if (c == '"') {
        if (!t[(size_t)n->imin * JSONC_RX_SYMS * 2 + s->cand])
            return -1;
        value_done(g, s);
        return 0;
    }
    if (c < 0x20 || c > 0x7E)
        return -1;
    const size_t k = (size_t)s->cand * JSONC_RX_SYMS + (c - 0x20);
    const unsigned next = t[2 * k] | (unsigned)t[2 * k + 1] << 8;
    if (next == JSONC_RX_DEAD)
        return -1;
    s->cand = next;
    s->chars++;
    return 0;
}

static int str_byte(const struct jsonc *g, struct jsonc_state *s, unsigned c)
{
    const struct jsonc_node *n = &g->nodes[s->lnode];
    if (n->kind == JSONC_PATTERN)
        return pat_byte(g, n, s, c);
    if (s->u_need)
        return utf8_cont(s, c);
    if (c == '"') {
        if (s->chars < (uint32_t)n->lo)
            return -1;
        value_done(g, s);
        return 0;
    }
    if (c < 0x20 || (n->hi >= 0 && s->chars >= (uint32_t)n->hi))
        return -1;
    if (c == '\\') {
        s->lex = LX_ESC;
        return 0;
    }
    if (c >= 0x80 && utf8_lead(s, c))
        return -1;
    s->chars++;
    return 0;
}

static int esc_byte(struct jsonc_state *s, unsigned c)
{
    if (c == 'u') {
        s->lex = LX_HEX;
        s->pos = 0;
        return 0;
    }
    if (!strchr("\"\\/bfnrt", (int)c) || c == 0)
        return -1;
    s->chars++;
    s->lex = LX_STR;
    return 0;
}

static int hex_byte(struct jsonc_state *s, unsigned c)
{
    if (!is_digit(c) && !((c | 0x20) >= 'a' && (c | 0x20) <= 'f'))
        return -1;
    if (++s->pos == 4) {
        s->chars++;
        s->lex = LX_STR;
    }
    return 0;
}

/* A key starts (c is its '"'). */
static int key_start(const struct jsonc *g, struct jsonc_state *s, struct jsonc_frame *f,
                     unsigned c)
{
    const struct jsonc_node *n = &g->nodes[f->node];
    f->phase = P_KEY;
    if (n->free_keys)
        return value_start(g, s, JSONC_N_STRING, c, 0);
    if (f->idx >= n->n)
        return -1;
    /* slots idx .. the first required one at or after it */
    uint64_t from = all_slots(n->n) & ~all_slots(f->idx);
    uint64_t req = n->req & from;
    uint64_t cand = req ? from & all_slots(__builtin_ctzll(req) + 1) : from;
    return lit_start(g, s, f->node, cand, c);
}

static int obj_may_close(const struct jsonc_node *n, const struct jsonc_frame *f)
{
    return n->free_keys || f->idx >= 64 || (n->req >> f->idx) == 0;
}

static int close_container(const struct jsonc *g, struct jsonc_state *s)
{
    s->depth--;
    value_done(g, s);
    return 0;
}

/* A byte between tokens of the container on top: 0, 1 (reread), -1. */
static int struct_byte(const struct jsonc *g, struct jsonc_state *s, unsigned c)
{
    struct jsonc_frame *f = &s->f[s->depth - 1];
    const struct jsonc_node *n = &g->nodes[f->node];
    s->ws = 0;
    switch (f->phase) {
    case P_OOPEN:
        if (c == '}')
            return obj_may_close(n, f) ? close_container(g, s) : -1;
        /* fall through */
    case P_OCOMMA:
        return c == '"' ? key_start(g, s, f, c) : -1;
    case P_COLON:
        if (c != ':')
            return -1;
        f->phase = P_VAL;
        s->lex = LX_VALUE;
        s->lnode = n->free_keys ? JSONC_N_ANY : g->slots[n->first + f->cur].ref;
        return 0;
    case P_OAFTER:
        if (c == '}')
            return obj_may_close(n, f) ? close_container(g, s) : -1;
        if (c != ',' || !(n->free_keys || f->idx < n->n))
            return -1;
        f->phase = P_OCOMMA;
        return 0;
    case P_AOPEN:
        if (c == ']')
            return n->lo == 0 ? close_container(g, s) : -1;
        if (n->hi == 0)
            return -1;
        /* fall through */
    case P_ACOMMA:
        f->phase = P_AVAL;
        s->lex = LX_VALUE;
        s->lnode = g->slots[n->first].ref;
        return 1;
    case P_AAFTER:
        if (c == ']')
            return f->idx >= n->lo ? close_container(g, s) : -1;
        if (c != ',' || (n->hi >= 0 && f->idx >= n->hi))
            return -1;
        f->phase = P_ACOMMA;
        return 0;
    }
    return -1;
}

static int feed_byte(const struct jsonc *g, struct jsonc_state *s, unsigned c)
{
    for (int guard = 0; guard < 4; guard++) {
        int r;
        switch (s->lex) {
        case LX_VALUE:
            if (is_ws(c))
                return c == '\r' ? -1 : ws_byte(s, c);
            return value_start(g, s, s->lnode, c, 0);
        case LX_STRUCT:
            if (is_ws(c))
                return c == '\r' ? -1 : ws_byte(s, c);
            r = struct_byte(g, s, c);
            break;
        case LX_STR:
            return str_byte(g, s, c);
        case LX_ESC:
            return esc_byte(s, c);
        case LX_HEX:
            return hex_byte(s, c);
        case LX_NUM: {
            const struct jsonc_node *n = &g->nodes[s->lnode];
            const int integer = n->kind == JSONC_INTEGER;
            r = num_byte(s, integer, c);
            if (r == 0 && integer) { /* a digit more: still a way into the range? */
                s->cand = s->cand * 10 + (c - '0');
                if (!int_reachable(n, s))
                    return -1;
            }
            if (r == 1) {
                if (integer && !int_in_range(n, s))
                    return -1;
                value_done(g, s);
            }
            break;
        }
        case LX_LIT:
            r = lit_byte(g, s, c);
            break;
        default:
            return -1;
        }
        if (r <= 0)
            return r;
    }
    return -1;
}

int jsonc_feed(const struct jsonc *g, struct jsonc_state *s, const void *bytes, size_t n)
{
    const uint8_t *p = bytes;
    for (size_t i = 0; i < n; i++)
        if (feed_byte(g, s, p[i]))
            return -1;
    return 0;
}

int jsonc_can_end(const struct jsonc *g, const struct jsonc_state *s)
{
    if (s->lex == LX_DONE)
        return 1;
    if (s->depth)
        return 0;
    if (s->lex == LX_NUM)
        return num_can_end(s) &&
               (g->nodes[s->lnode].kind != JSONC_INTEGER || int_in_range(&g->nodes[s->lnode], s));
    if (s->lex == LX_LIT) {
        const struct jsonc_node *n = &g->nodes[s->lnode];
        for (uint64_t m = s->cand; m; m &= m - 1)
            if (g->slots[n->first + __builtin_ctzll(m)].len == s->pos)
                return 1;
    }
    return 0;
}

int jsonc_closed(const struct jsonc_state *s)
{
    return s->lex == LX_DONE;
}

int64_t jsonc_plain_budget(const struct jsonc *g, const struct jsonc_state *s)
{
    if (s->lex != LX_STR || s->u_need)
        return -1;
    const struct jsonc_node *n = &g->nodes[s->lnode];
    if (n->kind == JSONC_PATTERN) /* its bytes are the DFA's to judge */
        return -1;
    if (n->hi < 0)
        return INT64_MAX;
    return n->hi > (int64_t)s->chars ? n->hi - (int64_t)s->chars : 0;
}

int jsonc_plain_bytes(const uint8_t *p, size_t n)
{
    struct jsonc_state s = {0};
    for (size_t i = 0; i < n; i++) {
        unsigned c = p[i];
        if (s.u_need) {
            if (utf8_cont(&s, c))
                return 0;
        } else if (c == '"' || c == '\\' || c < 0x20 || (c >= 0x80 && utf8_lead(&s, c)))
            return 0;
    }
    return s.u_need == 0;
}

int jsonc_string_takes(unsigned c)
{
    struct jsonc_state s;
    return c >= 0x20 && (c < 0x80 || utf8_lead(&s, c) == 0);
}
