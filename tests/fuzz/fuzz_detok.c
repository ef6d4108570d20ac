/* fuzz_detok — libFuzzer target for the streamed detokenizer with stop
 * strings and their holdback, plus a corpus replay.
 *
 * It runs the daemon's own event path: api/gen.c is compiled into this file
 * (#include below) so its static gen_event — tok_stream_push, the
 * stop-string check with its holdback, the logprob entries — is called
 * exactly as gen_poll calls it, and then, as completions.c does, the SSE
 * chunk (format_chunk) or at the end the JSON body (format_body) is written;
 * the scheduler events are made from the input instead of a model. No
 * scheduler, no socket (the prompts have no handle, so the stop-string
 * cancel is a no-op).
 *
 * Input (see fz_parse): byte 0 picks the vocab (bits 0-1: llama-spm,
 * llama-bpe, qwen2), stream (bit 2), echo (bit 3), n = 1 or 2 (bit 4),
 * logprobs null or 0..2 (bits 5-6); byte 1 the number of stop strings (low
 * 3 bits, at most 4); each stop is either literal bytes (used only when
 * valid UTF-8, as the JSON parser guarantees in the daemon) or, with its
 * first byte's top bit set, a slice of the text of 1-4 tokens (so stops the
 * tokens can actually produce are common); then up to 7 prompt ids for the
 * echo; the rest is 3-byte events: a token id (16 bits; bit 7 of the third
 * byte maps it into the first 512 ids, where byte tokens and pieces of
 * characters live), the choice, a DONE flag and logprob bits.
 *
 * Checked, per choice, against an independent simulation (the engine's
 * tok_stream, which fuzz_tok checks on its own, plus a naive search of the
 * whole text for every stop after every token, no holdback):
 *  - every SSE chunk is valid JSON (jansson rejects invalid UTF-8), its
 *    text is valid UTF-8, and the chunks of a choice concatenate to
 *    echo + the expected text; the JSON body likewise;
 *  - the text never contains a stop string, and finish_reason is "stop"
 *    when one matched;
 *  - no text is sent before it is final (what was streamed is always a
 *    prefix of the expected text, checked at every event);
 *  - the logprob tokens / text_offset arrays have one entry per token kept.
 * A broken property calls abort() (libFuzzer reports it as a crash).
 *
 * Built with -fsanitize=fuzzer (clang, -DINFERD_LIBFUZZER) it is a fuzzer
 * (tools/fuzz.sh detok MINUTES); otherwise main() replays the files and
 * directories given (meson: suite `fuzz`, corpus tests/fuzz/corpus/detok).
 */
#include "api/gen.c"

#include <jansson.h>
#include <math.h>

#include "api/format.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

#include "engine/gguf.h"
#include "tests/read_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_MAX_EVENTS 512

#define FZ_NAME "fuzz_detok"
#include "tests/fuzz/vocabs.h"

static void fz_fail(const char *why, int choice)
{
    fprintf(stderr, "fuzz_detok: %s (choice %d)\n", why, choice);
    abort();
}

/* The input, read front to back; reads past the end give 0. */
struct fz_in {
    const uint8_t *p;
    size_t n, i;
};
static unsigned fz_byte(struct fz_in *in)
{
    return in->i < in->n ? in->p[in->i++] : 0;
}
static int32_t fz_id(struct fz_in *in, const struct tok *t, int small)
{
    uint32_t v = fz_byte(in);
    v |= fz_byte(in) << 8;
    uint32_t nv = (uint32_t)tok_n_vocab(t);
    uint32_t lim = small && nv > 512 ? 512 : nv;
    return (int32_t)((uint64_t)v * lim / 65536u);
}

/* What the choice should show: the independent simulation. */
struct fz_ref {
    struct tok_stream ts;
    struct buf text;
    int done, stopped;
    size_t kept_tokens; /* tokens whose logprob entry survives the cut */
};

static int fz_has_stop(const struct api_req *q, const char *s, size_t n, size_t *at)
{
    size_t best = SIZE_MAX;
    for (int i = 0; i < q->n_stop; i++) {
        const char *m = memmem(s, n, q->stop[i], q->stop_len[i]);
        if (m && (size_t)(m - s) < best)
            best = (size_t)(m - s);
    }
    if (at)
        *at = best;
    return best != SIZE_MAX;
}

static void fz_ref_add(const struct api_req *q, struct fz_ref *r, int32_t id, int flush)
{
    char piece[4096];
    if (r->done)
        return;
    int k = flush ? tok_stream_flush(&r->ts, piece, sizeof(piece))
                  : tok_stream_push(&r->ts, id, piece, sizeof(piece));
    if (k > 0 && buf_append(&r->text, piece, (size_t)k))
        abort();
    if (!flush)
        r->kept_tokens++;
    size_t at;
    if (fz_has_stop(q, r->text.p ? r->text.p : "", r->text.len, &at)) {
        r->text.len = at;
        r->done = r->stopped = 1;
    }
    if (flush)
        r->done = 1;
}

/* jansson cannot hold a NUL in an object key, but "\u0000" is valid JSON
 * and a token that is the byte 0 makes one in top_logprobs. Copy s with
 * every \u0000 escape (not an escaped backslash before "u0000") turned into
 * \u0001; texts are compared with NUL read as 0x01 too (fz_unnul). */
static char *fz_nul_escape(const char *s, size_t n)
{
    char *o = malloc(n + 1);
    if (!o)
        abort();
    memcpy(o, s, n);
    o[n] = '\0';
    for (size_t i = 0; i + 1 < n; i++) {
        if (o[i] != '\\')
            continue;
        if (i + 5 < n && !memcmp(o + i + 1, "u0000", 5))
            o[i + 5] = '1';
        i++; /* skip the escaped character */
    }
    return o;
}

static void fz_unnul(struct buf *b)
{
    for (size_t i = 0; i < b->len; i++)
        if (b->p[i] == '\0')
            b->p[i] = 1;
}

/* Parse SSE chunks out of out (consumed), append each choice's text to
 * sent[], check the JSON. */
static void fz_take_sse(const struct gen *g, struct buf *out, struct buf *sent, int *finished)
{
    char *s = out->p;
    size_t n = out->len, i = 0;
    while (i < n) {
        char *end = memmem(s + i, n - i, "\n\n", 2);
        if (!end)
            fz_fail("SSE chunk without its blank line", -1);
        if (n - i < 6 || memcmp(s + i, "data: ", 6))
            fz_fail("SSE chunk not starting with data:", -1);
        json_error_t je;
        char *ev = fz_nul_escape(s + i + 6, (size_t)(end - (s + i + 6)));
        json_t *j = json_loadb(ev, (size_t)(end - (s + i + 6)), 0, &je);
        free(ev);
        if (!j) {
            fprintf(stderr, "fuzz_detok: %s in %.*s\n", je.text, (int)(end - s - i), s + i);
            fz_fail("SSE chunk is not valid JSON", -1);
        }
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        json_t *idx = json_object_get(ch, "index"), *tx = json_object_get(ch, "text");
        if (!json_is_integer(idx) || !json_is_string(tx) || json_integer_value(idx) < 0 ||
            json_integer_value(idx) >= g->n_choices)
            fz_fail("SSE chunk without index/text", -1);
        int k = (int)json_integer_value(idx);
        if (buf_append(&sent[k], json_string_value(tx), json_string_length(tx)))
            abort();
        json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) {
            if (finished[k])
                fz_fail("finish_reason sent twice", k);
            finished[k] = strcmp(json_string_value(fr), "stop") == 0 ? 1 : 2;
        }
        json_t *lp = json_object_get(ch, "logprobs");
        if (g->req.logprobs >= 0) {
            json_t *toks = json_object_get(lp, "tokens"), *off = json_object_get(lp, "text_offset");
            if (!json_is_array(toks) || !json_is_array(off) ||
                json_array_size(toks) != json_array_size(off))
                fz_fail("logprobs arrays missing or of different lengths", k);
        } else if (!json_is_null(lp)) {
            fz_fail("logprobs present when not asked for", k);
        }
        json_decref(j);
        i = (size_t)(end - s) + 2;
    }
    buf_clear(out);
}

/* The request as api_req_parse_completion would hand it over. 0, or -1 on
 * ENOMEM (q is then released by the caller). */
static int fz_request(const struct tok *t, struct fz_in *in, struct api_req *q)
{
    unsigned f = in->p[0];
    in->i = 1;
    memset(q, 0, sizeof(*q));
    q->kind = API_REQ_COMPLETION;
    q->stream = (f >> 2) & 1;
    q->echo = (f >> 3) & 1;
    q->n = (f >> 4) & 1 ? 2 : 1;
    q->logprobs = (int32_t)((f >> 5) & 3) - 1;
    q->max_tokens = FZ_MAX_EVENTS;

    /* stop strings */
    int n_stop = (int)(fz_byte(in) & 7);
    if (n_stop > 4)
        n_stop = 4;
    for (int i = 0; i < n_stop; i++) {
        unsigned h = fz_byte(in);
        char tmp[1024];
        size_t len = 0;
        if (h & 0x80) { /* a slice of 1..4 tokens' text */
            int32_t ids[4];
            int k = (int)(h & 3) + 1;
            for (int j = 0; j < k; j++)
                ids[j] = fz_id(in, t, (h >> 2) & 1);
            size_t whole = tok_decode(t, ids, (size_t)k, 0, 0, tmp, sizeof(tmp));
            if (whole >= sizeof(tmp))
                whole = sizeof(tmp) - 1;
            size_t off = fz_byte(in) % (whole + 1), l = fz_byte(in) % 33;
            if (off + l > whole)
                l = whole - off;
            memmove(tmp, tmp + off, l);
            len = l;
        } else {
            len = h % 17;
            for (size_t j = 0; j < len; j++)
                tmp[j] = (char)fz_byte(in);
        }
        /* what request.c can let through: non-empty, valid UTF-8, no NUL
         * (bodies are parsed without JSON_ALLOW_NUL) */
        if (len == 0 || !buf_utf8_valid(tmp, len) || memchr(tmp, '\0', len))
            continue;
        q->stop[q->n_stop] = malloc(len + 1);
        if (!q->stop[q->n_stop])
            return -1;
        memcpy(q->stop[q->n_stop], tmp, len);
        q->stop[q->n_stop][len] = '\0';
        q->stop_len[q->n_stop++] = len;
        if (len > q->max_stop_len)
            q->max_stop_len = len;
    }

    /* one prompt (its echo text as request.c makes it for a token array) */
    q->prompts = calloc(1, sizeof(*q->prompts));
    if (!q->prompts)
        return -1;
    q->n_prompts = 1;
    struct api_req_prompt *p = &q->prompts[0];
    int np = (int)(fz_byte(in) & 7);
    p->ids = calloc((size_t)np + 1, sizeof(int32_t));
    if (!p->ids)
        return -1;
    for (int i = 0; i < np; i++)
        p->ids[p->n++] = fz_id(in, t, 0);
    q->prompt_tokens = p->n;
    if (q->echo) {
        size_t need = tok_decode(t, p->ids, (size_t)p->n, 0, 0, NULL, 0);
        p->echo = malloc(need + 1);
        if (!p->echo)
            return -1;
        tok_decode(t, p->ids, (size_t)p->n, 0, 0, p->echo, need + 1);
        p->echo_len = need;
    }
    return 0;
}

static void fz_run(const struct tok *t, struct fz_in *in)
{
    struct api_req q;
    struct gen g;
    struct format_head head = {"cmpl-fuzz", 0, "fuzz"};
    struct buf out = {0};
    struct fz_ref ref[2];
    struct buf sent[2], wantb[2];
    int finished[2] = {0, 0};
    memset(ref, 0, sizeof(ref));
    memset(sent, 0, sizeof(sent));
    memset(wantb, 0, sizeof(wantb));
    memset(&g, 0, sizeof(g));
    if (fz_request(t, in, &q)) {
        api_req_release(&q);
        return;
    }
    if (gen_init(&g, &q, t, NULL, 0.0))
        goto out;
    const struct api_req *rq = &g.req;
    const struct api_req_prompt *p = &rq->prompts[0];
    for (int i = 0; i < g.n_choices; i++)
        tok_stream_init(&ref[i].ts, t, 0);

    /* the events */
    int ended[2] = {0, 0};
    int32_t nv = tok_n_vocab(t);
    for (int e = 0; e < FZ_MAX_EVENTS && in->i + 3 <= in->n; e++) {
        unsigned b2 = in->p[in->i + 2];
        int32_t id = fz_id(in, t, (b2 >> 7) & 1);
        in->i++;
        int k = (int)(b2 & 1) % rq->n;
        if (ended[k])
            continue;
        struct sched_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.choice = k;
        if (b2 & 0x40) {
            ev.kind = SCHED_EV_DONE;
            ev.finish = b2 & 0x20 ? SCHED_FINISH_LENGTH : SCHED_FINISH_STOP;
            ended[k] = 1;
            fz_ref_add(rq, &ref[k], 0, 1);
        } else {
            ev.kind = SCHED_EV_TOKEN;
            ev.token = id;
            ev.logprob = (b2 & 0x3c) == 0x3c ? -INFINITY : -(float)((b2 >> 1) & 31) * 0.37f;
            ev.n_top = (int32_t)((b2 >> 2) & 3);
            for (int j = 0; j < ev.n_top; j++) {
                ev.top_ids[j] = (id + j * 7919) % nv;
                ev.top_lps[j] = -(float)j;
            }
            fz_ref_add(rq, &ref[k], id, 0);
        }
        int idx = gen_event(&g, 0, &ev, (double)e);
        if (idx >= 0 && rq->stream && !g.failed) { /* as completions.c's on_choice */
            if (format_chunk(&g, idx, &head, &out))
                goto out; /* ENOMEM */
            fz_take_sse(&g, &out, sent, finished);
        }
        /* after every event the text is the reference's (so a stop found
         * late, or one starting before `safe`, shows up at once), and
         * nothing is marked final (sendable) past it */
        for (int i = 0; i < g.n_choices; i++) {
            struct gen_choice *ch = &g.choices[i];
            if (ch->text.len != ref[i].text.len ||
                memcmp(ch->text.p ? ch->text.p : "", ref[i].text.p ? ref[i].text.p : "",
                       ch->text.len))
                fz_fail("text differs from the reference after an event", i);
            if (ch->safe > ch->text.len || ch->sent > ch->safe)
                fz_fail("safe/sent past the text", i);
        }
    }
    for (int k = 0; k < rq->n; k++) {
        if (ended[k])
            continue;
        struct sched_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.kind = SCHED_EV_DONE;
        ev.choice = k;
        ev.finish = SCHED_FINISH_LENGTH;
        fz_ref_add(rq, &ref[k], 0, 1);
        int idx = gen_event(&g, 0, &ev, 0.0);
        if (idx >= 0 && rq->stream && !g.failed) {
            if (format_chunk(&g, idx, &head, &out))
                goto out;
            fz_take_sse(&g, &out, sent, finished);
        }
    }

    /* the final texts */
    for (int k = 0; k < rq->n; k++) {
        struct gen_choice *ch = &g.choices[k];
        const char *rt = ref[k].text.p ? ref[k].text.p : "";
        size_t rn = ref[k].text.len;
        if (!ch->done)
            fz_fail("choice not done after DONE", k);
        if (ch->text.len != rn || memcmp(ch->text.p ? ch->text.p : "", rt, rn))
            fz_fail("choice text differs from the reference", k);
        if (!buf_utf8_valid(rt, rn))
            fz_fail("text is not valid UTF-8", k);
        if (fz_has_stop(rq, rt, rn, NULL))
            fz_fail("text contains a stop string", k);
        if (ref[k].stopped && strcmp(ch->finish ? ch->finish : "", "stop"))
            fz_fail("a stop string matched but finish is not stop", k);
        /* what the client sees: echo (as buf_json_str renders it) + text */
        struct buf tmp = {0}, *wp = &wantb[k];
        if (rq->echo && buf_append(&tmp, p->echo, p->echo_len))
            abort();
        if (buf_append(&tmp, rt, rn))
            abort();
        json_t *js = json_stringn(tmp.p ? tmp.p : "", tmp.len);
        if (js) { /* valid UTF-8: as is */
            if (buf_append(wp, tmp.p ? tmp.p : "", tmp.len))
                abort();
            json_decref(js);
        } else { /* invalid echo bytes: compare through buf_json_str */
            struct buf qs = {0};
            if (buf_json_str(&qs, tmp.p ? tmp.p : "", tmp.len))
                abort();
            json_t *d = json_loadb(qs.p, qs.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            if (!d)
                fz_fail("buf_json_str gave invalid JSON", k);
            if (buf_append(wp, json_string_value(d), json_string_length(d)))
                abort();
            json_decref(d);
            buf_free(&qs);
        }
        fz_unnul(wp);
        if (rq->stream) {
            if (sent[k].len != wp->len || memcmp(sent[k].p ? sent[k].p : "", wp->p ? wp->p : "", wp->len))
                fz_fail("streamed text differs from echo + reference", k);
            if (!finished[k])
                fz_fail("stream ended without finish_reason", k);
        }
        if (rq->logprobs >= 0 && ch->n_lps > ref[k].kept_tokens)
            fz_fail("more logprob entries than tokens", k);
        buf_free(&tmp);
    }
    if (!rq->stream) {
        if (format_body(&g, &head, &out))
            goto out; /* ENOMEM */
        json_error_t je;
        char *body = fz_nul_escape(out.p, out.len);
        json_t *j = json_loadb(body, out.len, 0, &je);
        free(body);
        if (!j)
            fz_fail("JSON body is not valid JSON", -1);
        for (int k = 0; k < rq->n; k++) {
            json_t *ch = json_array_get(json_object_get(j, "choices"), (size_t)k);
            json_t *tx = json_object_get(ch, "text");
            if (!json_is_string(tx))
                fz_fail("JSON body choice without text", k);
            if (json_string_length(tx) != wantb[k].len ||
                memcmp(json_string_value(tx), wantb[k].p ? wantb[k].p : "", wantb[k].len))
                fz_fail("JSON body text differs from echo + reference", k);
            if (rq->logprobs >= 0) {
                json_t *lp = json_object_get(ch, "logprobs");
                json_t *toks = json_object_get(lp, "tokens"), *off = json_object_get(lp, "text_offset");
                size_t want_n = g.choices[k].n_lps + (rq->echo ? (size_t)p->n : 0);
                if (json_array_size(toks) != want_n || json_array_size(off) != want_n)
                    fz_fail("JSON body logprob arrays of the wrong length", k);
            }
        }
        json_decref(j);
    }
out:
    for (int k = 0; k < 2; k++) {
        buf_free(&ref[k].text);
        buf_free(&sent[k]);
        buf_free(&wantb[k]);
    }
    buf_free(&out);
    gen_free(&g);
    api_req_release(&q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || fz_init() != 1)
        return 0;
    int v = data[0] & 3;
    if (v == 3)
        v = 1;
    struct fz_in in = {data, size, 0};
    fz_run(fz_t[v], &in);
    return 0;
}

#ifndef INFERD_LIBFUZZER
#include "tests/fuzz/replay.h"

int main(int argc, char **argv)
{
    return fuzz_vocab_main(argc, argv);
}
#endif
