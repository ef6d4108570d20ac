/* tok_encode — text to token ids: the special-token partition, SPM's
 * score-ordered bigram merges, the BPE pre-tokenizer splits (gpt2, llama3,
 * qwen2) and rank-ordered merges (engine/tok.c's header says how each
 * behaves). Call-local scratch only: any thread may encode with one tok. */
#include <stdlib.h>
#include <string.h>

#include "engine/tok_impl.h"
#include "engine/unicode.h"

/* ---- encoding: scratch ---------------------------------------------------- */

struct tok_sym {
    int32_t prev, next;
    uint32_t off, n; /* n == 0: merged into its left neighbour */
    int32_t id;      /* BPE: current string id */
};

struct tok_cand {
    float score; /* higher first (BPE: minus the rank) */
    int32_t left, right;
    uint32_t size;
    int32_t result;
};

struct tok_work {
    const struct tok *t;
    int32_t *out;
    size_t cap, n;
    int err;
    char *buf;
    size_t buf_cap;
    struct tok_sym *sym;
    size_t sym_cap;
    struct tok_cand *heap;
    size_t heap_n, heap_cap;
};

/* Make *p hold at least need elements of elem bytes (keeps the contents). */
static int work_grow(struct tok_work *w, void **p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 64;
    void *q;
    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    q = realloc(*p, c * elem);
    if (!q) {
        w->err = INF_ENOMEM;
        return -1;
    }
    *p = q;
    *cap = c;
    return 0;
}

static int work_reserve(struct tok_work *w, size_t nbuf, size_t nsym)
{
    if (work_grow(w, (void **)&w->buf, &w->buf_cap, nbuf, 1) ||
        work_grow(w, (void **)&w->sym, &w->sym_cap, nsym, sizeof(*w->sym)))
        return -1;
    return 0;
}

static void work_emit(struct tok_work *w, int32_t id)
{
    if (w->n < w->cap)
        w->out[w->n] = id;
    w->n++;
}

static int cand_better(const struct tok_cand *a, const struct tok_cand *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct tok_work *w, struct tok_cand c)
{
    struct tok_cand *h;
    size_t i;
    if (work_grow(w, (void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof(*h)))
        return;
    h = w->heap;
    i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_better(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static struct tok_cand heap_pop(struct tok_work *w)
{
    struct tok_cand *h = w->heap, top = h[0], last = h[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && cand_better(&h[c + 1], &h[c]))
            c++;
        if (!cand_better(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (n)
        h[i] = last;
    return top;
}

static void sym_merge(struct tok_sym *s, int32_t l, int32_t r)
{
    s[l].n += s[r].n;
    s[r].n = 0;
    s[l].next = s[r].next;
    if (s[r].next >= 0)
        s[s[r].next].prev = l;
}

/* ---- SPM ------------------------------------------------------------------ */

static void spm_try(struct tok_work *w, int32_t l, int32_t r)
{
    const struct tok *t = w->t;
    struct tok_cand c;
    int32_t id;
    if (l < 0 || r < 0)
        return;
    c.size = w->sym[l].n + w->sym[r].n;
    id = tok_map_find(t, w->buf + w->sym[l].off, c.size);
    if (id < 0 || id >= t->n_vocab)
        return;
    c.score = t->score ? t->score[id] : 0.0f;
    c.left = l;
    c.right = r;
    c.result = id;
    heap_push(w, c);
}

/* Merge the symbols of buf[from, to) and emit their tokens. */
static void spm_chunk(struct tok_work *w, size_t from, size_t to)
{
    const struct tok *t = w->t;
    int32_t ns = 0;

    if (work_reserve(w, 0, to - from))
        return;
    for (size_t off = from; off < to; ns++) {
        /* one symbol per character; a byte of invalid UTF-8 is a symbol of
         * its own (llama.cpp trusts the lead byte and may swallow the next
         * characters into a byte-fallback run: lossy) */
        uint32_t cp;
        int d = unicode_utf8_decode((const unsigned char *)w->buf + off, to - off, &cp);
        size_t l = d > 0 ? (size_t)d : 1;
        w->sym[ns].prev = ns - 1;
        w->sym[ns].next = ns + 1;
        w->sym[ns].off = (uint32_t)off;
        w->sym[ns].n = (uint32_t)l;
        off += l;
    }
    w->sym[ns - 1].next = -1;
    w->heap_n = 0;
    for (int32_t i = 1; i < ns; i++)
        spm_try(w, i - 1, i);
    while (w->heap_n > 0 && !w->err) {
        struct tok_cand c = heap_pop(w);
        struct tok_sym *L = &w->sym[c.left], *R = &w->sym[c.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != c.size)
            continue; /* stale: one side has merged since */
        sym_merge(w->sym, c.left, c.right);
        spm_try(w, w->sym[c.left].prev, c.left);
        spm_try(w, c.left, w->sym[c.left].next);
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const struct tok_sym *y = &w->sym[i];
        int32_t id = tok_map_find(t, w->buf + y->off, y->n);
        if (id >= 0 && id < t->n_vocab) {
            work_emit(w, id);
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++) {
            int32_t b = t->byte_id[(unsigned char)w->buf[y->off + j]];
            if (b >= 0)
                work_emit(w, b);
        }
    }
}

static int spm_is_space(const char *p)
{
    return memcmp(p, "\xe2\x96\x81", 3) == 0;
}

static void spm_fragment(struct tok_work *w, const char *text, size_t len, int prefix)
{
    size_t m = 0, from = 0;

    if (work_reserve(w, 3 * len + 3, 0))
        return;
    if (prefix) {
        memcpy(w->buf, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(w->buf + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            w->buf[m++] = text[i];
        }
    }
    if (m == 0)
        return;
    if (w->t->spm_split) {
        /* No token holds U+2581 after anything but U+2581 (checked at load),
         * so no merge crosses the start of a run of spaces: merging word by
         * word gives exactly what merging the whole fragment gives, with
         * small heaps instead of one as large as the text. */
        for (size_t p = 3; p + 3 <= m; p++)
            if (spm_is_space(w->buf + p) && !spm_is_space(w->buf + p - 3) && !w->err) {
                spm_chunk(w, from, p);
                from = p;
                p += 2;
            }
    }
    if (!w->err)
        spm_chunk(w, from, m);
}

/* ---- BPE: pre-tokenizer ----------------------------------------------------- */

enum { U_L, U_N, U_W, U_O }; /* letter, number, whitespace, anything else */

struct tok_unit {
    uint32_t cp; /* UINT32_MAX for a byte of invalid UTF-8 */
    uint32_t len;
    int cls;
};

static struct tok_unit pre_unit(const unsigned char *s, size_t n, size_t p)
{
    struct tok_unit u;
    uint32_t cp;
    int d = unicode_utf8_decode(s + p, n - p, &cp);
    unsigned props, cat;
    if (d <= 0) { /* one invalid byte is one "other" character */
        u.cp = UINT32_MAX;
        u.len = 1;
        u.cls = U_O;
        return u;
    }
    u.cp = cp;
    u.len = (uint32_t)d;
    props = unicode_props(cp);
    cat = props & UNICODE_CAT_MASK;
    if (props & UNICODE_WS)
        u.cls = U_W;
    else if (cat == UNICODE_L)
        u.cls = U_L;
    else if (cat == UNICODE_N)
        u.cls = U_N;
    else
        u.cls = U_O;
    return u;
}

/* end of the run of units of class cls starting at p */
static size_t pre_run(const unsigned char *s, size_t n, size_t p, int cls)
{
    while (p < n) {
        struct tok_unit u = pre_unit(s, n, p);
        if (u.cls != cls)
            break;
        p += u.len;
    }
    return p;
}

static uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* The whitespace alternatives: \s*[\r\n]+ (llama3/qwen2 only), then
 * \s+(?!\S) (a run followed by non-space gives back its last character),
 * then \s+. s[p] is whitespace. */
static size_t pre_space(const unsigned char *s, size_t n, size_t p, int with_newline_rule)
{
    size_t q = p, last = p, nl_end = 0;
    while (q < n) {
        struct tok_unit u = pre_unit(s, n, q);
        if (u.cls != U_W)
            break;
        if (u.cp == '\r' || u.cp == '\n')
            nl_end = q + u.len;
        last = q;
        q += u.len;
    }
    if (with_newline_rule && nl_end)
        return nl_end;
    if (q < n && last > p)
        return last;
    return q;
}

/* Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2: the same with \p{N} (one digit). Returns the end of the match at p. */
static size_t pre_llama3(const unsigned char *s, size_t n, size_t p, int max_digits)
{
    struct tok_unit u0 = pre_unit(s, n, p), u1;
    size_t p1 = p + u0.len;
    int have1 = p1 < n;
    if (have1)
        u1 = pre_unit(s, n, p1);
    else
        u1.cls = -1, u1.cp = UINT32_MAX, u1.len = 0;

    if (u0.cp == '\'' && have1) {
        uint32_t c1 = ascii_lower(u1.cp);
        size_t p2 = p1 + u1.len;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return p2;
        if (p2 < n) {
            struct tok_unit u2 = pre_unit(s, n, p2);
            uint32_t c2 = ascii_lower(u2.cp);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return p2 + u2.len;
        }
    }
    if (u0.cls == U_L)
        return pre_run(s, n, p1, U_L);
    if (u0.cp != '\r' && u0.cp != '\n' && u0.cls != U_N && u1.cls == U_L)
        return pre_run(s, n, p1 + u1.len, U_L);
    if (u0.cls == U_N) {
        size_t q = p1;
        for (int k = 1; k < max_digits && q < n; k++) {
            struct tok_unit u = pre_unit(s, n, q);
            if (u.cls != U_N)
                break;
            q += u.len;
        }
        return q;
    }
    if (u0.cls == U_O || (u0.cp == ' ' && u1.cls == U_O)) {
        size_t q = pre_run(s, n, u0.cls == U_O ? p : p1, U_O);
        while (q < n && (s[q] == '\r' || s[q] == '\n'))
            q++;
        return q;
    }
    return pre_space(s, n, p, 1);
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t pre_gpt2(const unsigned char *s, size_t n, size_t p)
{
    struct tok_unit u0 = pre_unit(s, n, p), u1;
    size_t p1 = p + u0.len;
    if (u0.cp == '\'' && p1 < n) {
        unsigned char c1 = s[p1], c2 = p1 + 1 < n ? s[p1 + 1] : 0;
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return p1 + 1;
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
            return p1 + 2;
    }
    if (u0.cls != U_W)
        return pre_run(s, n, p1, u0.cls);
    if (u0.cp == ' ' && p1 < n) {
        u1 = pre_unit(s, n, p1);
        if (u1.cls != U_W)
            return pre_run(s, n, p1 + u1.len, u1.cls);
    }
    return pre_space(s, n, p, 0);
}

int tok_pre_split(const struct tok *t, const char *text, size_t len, size_t *ends, size_t cap, size_t *n_out)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t p = 0, n = 0;
    *n_out = 0;
    if (t->kind != TOK_KIND_BPE)
        return INF_EUNSUPPORTED;
    while (p < len) {
        size_t e = t->pre == TOK_PRE_LLAMA3  ? pre_llama3(s, len, p, 3)
                   : t->pre == TOK_PRE_QWEN2 ? pre_llama3(s, len, p, 1)
                                             : pre_gpt2(s, len, p);
        if (n < cap)
            ends[n] = e;
        n++;
        p = e;
    }
    *n_out = n;
    return n > cap ? INF_ETOOBIG : 0;
}

/* ---- BPE: merges ------------------------------------------------------------ */

static void bpe_try(struct tok_work *w, int32_t l, int32_t r)
{
    const struct tok_pair *pr;
    struct tok_cand c;
    if (l < 0 || r < 0 || w->sym[l].id < 0 || w->sym[r].id < 0)
        return;
    pr = tok_pair_find(w->t, w->sym[l].id, w->sym[r].id);
    if (!pr)
        return;
    c.score = -(float)pr->rank; /* exact: ranks < 2^24 */
    c.left = l;
    c.right = r;
    c.size = w->sym[l].n + w->sym[r].n;
    c.result = pr->result;
    heap_push(w, c);
}

static void bpe_word(struct tok_work *w, const unsigned char *s, size_t n)
{
    const struct tok *t = w->t;
    int32_t ns = (int32_t)n;

    if (t->ignore_merges || n == 1) {
        size_t m = 0;
        int32_t id;
        if (work_reserve(w, 2 * n, n))
            return;
        for (size_t i = 0; i < n; i++) {
            memcpy(w->buf + m, t->bchar[s[i]], t->bchar_len[s[i]]);
            m += t->bchar_len[s[i]];
        }
        id = tok_map_find(t, w->buf, m);
        if (id >= 0 && id < t->n_vocab) {
            work_emit(w, id);
            return;
        }
    }
    if (work_reserve(w, 0, n))
        return;
    for (int32_t i = 0; i < ns; i++) {
        w->sym[i].prev = i - 1;
        w->sym[i].next = i + 1;
        w->sym[i].off = (uint32_t)i;
        w->sym[i].n = 1;
        w->sym[i].id = t->byte_id[s[i]];
    }
    w->sym[ns - 1].next = -1;
    w->heap_n = 0;
    for (int32_t i = 1; i < ns; i++)
        bpe_try(w, i - 1, i);
    while (w->heap_n > 0 && !w->err) {
        struct tok_cand c = heap_pop(w);
        struct tok_sym *L = &w->sym[c.left], *R = &w->sym[c.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != c.size)
            continue;
        sym_merge(w->sym, c.left, c.right);
        w->sym[c.left].id = c.result;
        bpe_try(w, w->sym[c.left].prev, c.left);
        bpe_try(w, c.left, w->sym[c.left].next);
    }
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const struct tok_sym *y = &w->sym[i];
        if (y->id >= 0 && y->id < t->n_vocab) {
            work_emit(w, y->id);
            continue;
        }
        /* not a token (a broken vocab): one-byte tokens of its byte-level
         * text where they exist, as llama.cpp does */
        for (uint32_t j = 0; j < y->n; j++) {
            unsigned char b = s[y->off + j];
            for (int k = 0; k < t->bchar_len[b]; k++) {
                int32_t id = t->single_id[(unsigned char)t->bchar[b][k]];
                if (id >= 0)
                    work_emit(w, id);
            }
        }
    }
}

static void bpe_fragment(struct tok_work *w, const char *text, size_t len)
{
    const struct tok *t = w->t;
    const unsigned char *s = (const unsigned char *)text;
    size_t p = 0;
    while (p < len && !w->err) {
        size_t e = t->pre == TOK_PRE_LLAMA3  ? pre_llama3(s, len, p, 3)
                   : t->pre == TOK_PRE_QWEN2 ? pre_llama3(s, len, p, 1)
                                             : pre_gpt2(s, len, p);
        bpe_word(w, s + p, e - p);
        p = e;
    }
}

/* ---- special-token partition ------------------------------------------------ */

struct tok_match {
    uint32_t start, len;
    int32_t id, prio;
};

static int match_by_prio(const void *a, const void *b)
{
    const struct tok_match *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio < y->prio ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int match_by_start(const void *a, const void *b)
{
    const struct tok_match *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* 1 when every byte of [p, p + n) may be matched as a special token. */
static int tok_allowed(const uint8_t *allow, size_t p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!allow[p + i])
            return 0;
    return 1;
}

/* Occurrences of the special tokens that apply, then the ones that survive
 * llama.cpp's partition: tokens by priority, each taking its leftmost
 * occurrences that do not overlap text already taken. Sorted by start. */
static int tok_find_specials(const struct tok *t, const char *text, size_t len, int parse_special,
                             const uint8_t *allow, struct tok_match **out, size_t *n_out)
{
    const uint8_t *first = parse_special ? t->first_all : t->first_user;
    struct tok_match *m = NULL;
    size_t n = 0, cap = 0, k = 0;
    uint8_t *taken;

    *out = NULL;
    *n_out = 0;
    if (t->n_spec == 0 || (!parse_special && t->n_user == 0))
        return 0;
    for (size_t p = 0; p < len; p++) {
        unsigned char c = (unsigned char)text[p];
        if (!first[c])
            continue;
        for (int32_t i = t->spec_lo[c]; i < t->spec_lo[c + 1]; i++) {
            int32_t id = t->spec[i];
            const struct gguf_str *sp = &t->str[id];
            if (!parse_special && t->type[id] != TOK_T_USER)
                continue;
            if (sp->len > len - p || memcmp(sp->ptr, text + p, sp->len) != 0)
                continue;
            if (allow && t->type[id] != TOK_T_USER && !tok_allowed(allow, p, sp->len))
                continue;
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                struct tok_match *nm = realloc(m, nc * sizeof(*m));
                if (!nm) {
                    free(m);
                    return INF_ENOMEM;
                }
                m = nm;
                cap = nc;
            }
            m[n].start = (uint32_t)p;
            m[n].len = (uint32_t)sp->len;
            m[n].id = id;
            m[n].prio = t->spec_prio[i];
            n++;
        }
    }
    if (n == 0) {
        free(m);
        return 0;
    }
    taken = calloc(len, 1);
    if (!taken) {
        free(m);
        return INF_ENOMEM;
    }
    qsort(m, n, sizeof(*m), match_by_prio);
    for (size_t i = 0; i < n; i++) {
        int free_span = 1;
        for (uint32_t j = 0; j < m[i].len && free_span; j++)
            free_span = !taken[m[i].start + j];
        if (!free_span)
            continue;
        memset(taken + m[i].start, 1, m[i].len);
        m[k++] = m[i];
    }
    free(taken);
    qsort(m, k, sizeof(*m), match_by_start);
    *out = m;
    *n_out = k;
    return 0;
}

/* ---- encode ------------------------------------------------------------------ */

static int tok_encode_impl(const struct tok *t, const char *text, size_t len, int add_special, int parse_special,
                           const uint8_t *allow, int32_t *out, size_t cap, size_t *n_out)
{
    struct tok_work w;
    struct tok_match *sp = NULL;
    size_t n_sp = 0, pos = 0;
    int prev_special = 1, rc;

    *n_out = 0;
    if (!text && len)
        return INF_EINVAL;
    if (len > UINT32_MAX / 4)
        return INF_ETOOBIG;
    memset(&w, 0, sizeof(w));
    w.t = t;
    w.out = out;
    w.cap = out ? cap : 0;
    if ((rc = tok_find_specials(t, text, len, parse_special, allow, &sp, &n_sp)))
        return rc;
    if (add_special && t->add_bos)
        work_emit(&w, t->bos);
    for (size_t i = 0; i <= n_sp && !w.err; i++) {
        size_t end = i < n_sp ? sp[i].start : len;
        if (end > pos) {
            if (t->kind == TOK_KIND_SPM)
                spm_fragment(&w, text + pos, end - pos, t->add_space_prefix && prev_special);
            else
                bpe_fragment(&w, text + pos, end - pos);
            prev_special = 0;
        }
        if (i < n_sp) {
            work_emit(&w, sp[i].id);
            prev_special = 1;
            pos = sp[i].start + sp[i].len;
        }
    }
    if (add_special && t->add_eos)
        work_emit(&w, t->eos);
    free(sp);
    free(w.buf);
    free(w.sym);
    free(w.heap);
    if (w.err)
        return w.err;
    *n_out = w.n;
    return w.n > w.cap ? INF_ETOOBIG : 0;
}

int tok_encode(const struct tok *t, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
               size_t cap, size_t *n_out)
{
    return tok_encode_impl(t, text, len, add_special, parse_special, NULL, out, cap, n_out);
}

int tok_encode_masked(const struct tok *t, const char *text, size_t len, int add_special, const uint8_t *allow,
                      int32_t *out, size_t cap, size_t *n_out)
{
    if (!allow && len)
        return INF_EINVAL;
    return tok_encode_impl(t, text, len, add_special, 1, allow, out, cap, n_out);
}

