/* fuzz_request — libFuzzer target for the POST /v1/completions and
 * /v1/chat/completions request parsers, plus a corpus replay.
 *
 * Each input is a request body. It goes through api_parse_completion_request
 * and api_parse_chat_request (api/request.h: the very code the endpoints run
 * before they submit to the scheduler, JSON parse, chat messages, template
 * rendering and prompt tokenization included) with the
 * SPM tokenizer of stories260K.gguf and with the byte-level BPE tokenizer of
 * ggml-vocab-qwen2.gguf (whose tokenizer.chat_template is ChatML; the
 * stories260K one has none, so chat there is always refused), both from
 * $INFERD_SHARED (default ../shared). The
 * limits are the daemon's defaults except n_ctx = 512 and max_tokens = 256,
 * small enough that the context checks are reachable with short inputs.
 *
 * Besides ASan/UBSan, it aborts when a result breaks the contract: an error
 * without a message or with a status other than 400/404; an error body (as
 * http_respond.c writes it, through buf_json_str) that is not valid JSON; a valid
 * request whose counts are out of the limits; the same bytes giving a
 * different answer the second time (uninitialized state).
 *
 * A body whose response_format compiles also drives the JSON constraint
 * (engine/jsonc.h) with its own "prompt" string as the text: fed byte by
 * byte, and where the whole text is accepted, the allowed tokens of the
 * SPM vocabulary from there must be exactly the tokens that feed alone,
 * and a closed value must be one jansson parses.
 *
 * Built with -fsanitize=fuzzer (clang, -DINFERD_LIBFUZZER) it is a fuzzer
 * (tests/fuzz/meson.build has the setup). Otherwise main() replays the files
 * and directories given as arguments (meson: suite `fuzz`, the committed
 * corpus in tests/fuzz/corpus/request), each from an exact-size heap copy,
 * and checks the expectation a corpus file may carry in its name:
 * `ok-*` must be valid, `e400-<param>-*` must be a 400 naming <param> (with
 * '.' written as '+' and '[i]' as '_i_'; `e400--*` names no param), `e404-*`
 * a 404 (completions, SPM tokenizer); `chat-` before any of these checks the
 * chat parser with the ChatML (qwen2) tokenizer instead. Files
 * without such a prefix (fuzzer finds) only have to pass the checks above.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "api/buf.h"
#include "api/chat_template.h"
#include "api/request.h"
#include "api/schema.h"
#include "api/tools.h"
#include "engine/jsonc.h"
#include "engine/gguf.h"
#include "engine/tok.h"
#include "tests/jsonc_check.h"
#include "tests/read_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_N_CTX 512
#define FUZZ_MAX_TOKENS 256

struct fuzz_tok {
    const char *file;
    const char *chat_template; /* the config's chat_template */
    struct gguf_file *g;
    struct tok *t;
    struct api_request_ctx *ctx;
};

/* The third: the ChatML vocabulary with the family named in the config,
 * which allows Qwen's tool format (its own template is Qwen2's, without
 * <tool_call>): tool bodies get past the family check into the tool
 * parser and the forced call's schema compiler. */
static struct fuzz_tok fuzz_toks[3] = {
    {"models/stories260K.gguf", "", NULL, NULL, NULL},
    {"vocab/ggml-vocab-qwen2.gguf", "", NULL, NULL, NULL},
    {"vocab/ggml-vocab-qwen2.gguf", "chatml", NULL, NULL, NULL},
};
static int fuzz_ready; /* 0 not tried, 1 ok, -1 missing data */
static struct jsonc_vocab *fuzz_jv; /* stories260K's, for the JSON constraint */

static void fuzz_config(struct api_config *c)
{
    /* daemon/config.c's defaults (etc/inferd.conf), smaller context */
    memset(c, 0, sizeof(*c));
    snprintf(c->host, sizeof(c->host), "127.0.0.1");
    snprintf(c->model_id, sizeof(c->model_id), "stories260K");
    c->max_body_bytes = 4194304;
    c->max_header_bytes = 16384;
    c->max_connections = 512;
    c->max_connections_per_ip = 64;
    c->idle_timeout_s = 60;
    c->read_timeout_s = 30;
    c->ping_interval_s = 15;
    c->retry_after_s = 1;
    c->max_tokens = FUZZ_MAX_TOKENS;
    c->default_max_tokens = 16;
    c->max_n = 16;
    c->max_prompts = 16;
    c->max_stop = 4;
    c->max_stop_len = 256;
    c->max_logprobs = 20;
    c->max_logit_bias = 1024;
}

static int fuzz_init(void)
{
    if (fuzz_ready)
        return fuzz_ready;
    const char *root = getenv("INFERD_SHARED");
    if (!root || !*root)
        root = "../shared";
    struct api_config cfg;
    fuzz_config(&cfg);
    fuzz_ready = 1;
    for (size_t i = 0; i < sizeof(fuzz_toks) / sizeof(fuzz_toks[0]); i++) {
        struct fuzz_tok *f = &fuzz_toks[i];
        char path[4096];
        struct inf_error e;
        snprintf(path, sizeof(path), "%s/%s", root, f->file);
        struct gguf_str tmpl = {NULL, 0};
        snprintf(cfg.chat_template, sizeof(cfg.chat_template), "%s", f->chat_template);
        if (gguf_open(path, &f->g, &e) || tok_load(f->g, &f->t, &e) ||
            (gguf_get_str(f->g, "tokenizer.chat_template", &tmpl), 0) ||
            api_request_ctx_new(&cfg, f->t, FUZZ_N_CTX, tmpl.ptr, (size_t)tmpl.len, &f->ctx)) {
            fprintf(stderr, "fuzz_request: cannot load %s: %s\n", path, e.msg);
            fuzz_ready = -1;
            break;
        }
    }
    if (fuzz_ready == 1 && jsonc_vocab_new(fuzz_toks[0].t, &fuzz_jv))
        fuzz_ready = -1;
    return fuzz_ready;
}

static void fuzz_fail(const char *why, const struct api_request_result *r)
{
    fprintf(stderr, "fuzz_request: %s (status %d param '%s' message '%s')\n", why, r->status,
            r->param, r->message);
    abort();
}

/* The result must be what the endpoint may answer. */
static void fuzz_check(const struct api_request_result *r)
{
    if (r->status != 0) {
        if (r->status != 400 && r->status != 404)
            fuzz_fail("unexpected status", r);
        if (!r->message[0])
            fuzz_fail("error without a message", r);
        /* the error body as http_respond.c builds it must be valid JSON */
        struct buf b = {0};
        if (buf_puts(&b, "{\"message\":") || buf_json_str(&b, r->message, strlen(r->message)) ||
            buf_puts(&b, ",\"param\":") || buf_json_str(&b, r->param, strlen(r->param)) ||
            buf_puts(&b, "}"))
            abort();
        json_error_t je;
        json_t *j = json_loadb(b.p, b.len, 0, &je);
        if (!j)
            fuzz_fail("error body is not valid JSON", r);
        json_decref(j);
        buf_free(&b);
        return;
    }
    if (r->n_prompts < 1 || r->n_choices < r->n_prompts || r->n_choices > 1024)
        fuzz_fail("valid request with bad prompt/choice counts", r);
    if (r->max_tokens < 1 || r->max_tokens > FUZZ_MAX_TOKENS)
        fuzz_fail("valid request with max_tokens out of range", r);
    if (r->prompt_tokens < r->n_prompts ||
        (int64_t)r->prompt_tokens + (int64_t)r->n_prompts * r->max_tokens >
            (int64_t)r->n_prompts * FUZZ_N_CTX)
        fuzz_fail("valid request over the context", r);
    if (r->logprobs < -1 || r->logprobs > 20 || r->n_stop < 0 || r->n_stop > 4)
        fuzz_fail("valid request with logprobs/stop out of range", r);
}

/* The JSON constraint of the body's response_format, or else of its forced
 * tool call (Qwen's format), over its prompt text. */
static void fuzz_jsonc(const uint8_t *data, size_t size)
{
    json_t *b = json_loadb((const char *)data, size, 0, NULL);
    json_t *p = json_object_get(b, "prompt");
    struct jsonc *g = NULL;
    char msg[320], param[64];
    if (b && !json_object_get(b, "response_format")) {
        struct chat_template ct;
        struct api_tools *t = NULL;
        json_t *defs;
        chat_template_init(&ct, CHAT_TEMPLATE_CHATML, NULL, 0, "", "");
        if (api_tools_parse(b, &ct, &t, &defs, &g, param, sizeof(param), msg, sizeof(msg)) == 0 &&
            ((!t != !defs) || (!g != !(t && t->forced))))
            abort(); /* the tool set, its prompt list and its constraint go together */
        api_tools_free(t);
    }
    if (b && json_is_string(p) && (g || (api_response_format(b, &g, msg, sizeof(msg)) == 0 && g))) {
        const char *text = json_string_value(p);
        size_t n = json_string_length(p), i = 0;
        struct jsonc_state s;
        jsonc_state_init(g, &s);
        for (; i < n; i++)
            if (jsonc_feed(g, &s, text + i, 1))
                break;
        if (i == n) {
            struct jsonc_state *work = malloc(jsonc_vocab_work_states(fuzz_jv) * sizeof(*work));
            int32_t nv = tok_n_vocab(fuzz_toks[0].t);
            uint32_t *bits = calloc(((size_t)nv + 31) / 32, sizeof(uint32_t));
            if (!work || !bits)
                abort();
            int32_t na = jsonc_allow(g, fuzz_jv, &s, work, bits), alone;
            if (jsonc_check_allow(g, fuzz_jv, nv, &s, bits, na, &alone, "fuzz_request"))
                abort();
            free(work);
            free(bits);
            if (jsonc_closed(&s)) {
                json_t *v = json_loadb(text, n, JSON_DECODE_ANY, NULL);
                if (!v) {
                    fprintf(stderr, "fuzz_request: closed JSON jansson refuses: %.*s\n", (int)n,
                            text);
                    abort();
                }
                json_decref(v);
            }
        }
    }
    jsonc_free(g);
    json_decref(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_init() != 1)
        abort(); /* the fuzzer cannot run without its tokenizers */
    const char *body = (const char *)data;
    int (*parse[2])(struct api_request_ctx *, const char *, size_t,
                    struct api_request_result *) = {api_parse_completion_request,
                                                    api_parse_chat_request};
    /* chat on the third context: the checks of any result, no expectation */
    struct api_request_result r3;
    if (api_parse_chat_request(fuzz_toks[2].ctx, body, size, &r3))
        abort();
    fuzz_check(&r3);
    for (size_t i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            struct api_request_result r1, r2;
            if (parse[k](fuzz_toks[i].ctx, body, size, &r1))
                abort();
            fuzz_check(&r1);
            if (i == (size_t)k) { /* completions on SPM, chat on the ChatML vocab */
                if (parse[k](fuzz_toks[i].ctx, body, size, &r2))
                    abort();
                if (memcmp(&r1, &r2, sizeof(r1)))
                    fuzz_fail("the same body gave a different result", &r1);
            }
        }
    fuzz_jsonc(data, size);
    return 0;
}

#ifndef INFERD_LIBFUZZER
#include "tests/fuzz/replay.h"

static void fuzz_cleanup(void)
{
    jsonc_vocab_free(fuzz_jv);
    for (size_t i = 0; i < sizeof(fuzz_toks) / sizeof(fuzz_toks[0]); i++) {
        api_request_ctx_free(fuzz_toks[i].ctx);
        tok_free(fuzz_toks[i].t);
        gguf_close(fuzz_toks[i].g);
    }
}

/* The expectation encoded in a corpus file name; 0 when it holds. */
static int replay_expect(const char *name, const struct api_request_result *r)
{
    char want[64];
    if (!strncmp(name, "ok-", 3)) {
        if (r->status == 0)
            return 0;
        fprintf(stderr, "%s: want valid, got %d %s: %s\n", name, r->status, r->param,
                r->message);
        return 1;
    }
    if (!strncmp(name, "e404-", 5)) {
        if (r->status == 404)
            return 0;
        fprintf(stderr, "%s: want 404, got %d\n", name, r->status);
        return 1;
    }
    if (!strncmp(name, "e400-", 5)) {
        const char *p = name + 5, *u = strchr(p, '-');
        size_t n = u ? (size_t)(u - p) : 0;
        if (n >= sizeof(want))
            n = sizeof(want) - 1;
        memcpy(want, p, n);
        want[n] = '\0';
        size_t k = 0;
        for (char *c = want; *c; c++) /* '+' -> '.', "_i_" -> "[i]" */
            if (*c == '+')
                want[k++] = '.';
            else if (*c == '_' && c[1] >= '0' && c[1] <= '9' && strchr(c + 1, '_')) {
                want[k++] = '[';
                for (c++; *c != '_'; c++)
                    want[k++] = *c;
                want[k++] = ']';
            } else
                want[k++] = *c;
        want[k] = '\0';
        if (r->status == 400 && !strcmp(r->param, want))
            return 0;
        fprintf(stderr, "%s: want 400 param '%s', got %d param '%s': %s\n", name, want,
                r->status, r->param, r->message);
        return 1;
    }
    return 0; /* no expectation: libFuzzer finds, kept for the sanitizers */
}

/* one corpus file: replayed, then its name's expectation checked against
 * the SPM model (stories260K), or for chat- files the chat parser with the
 * ChatML vocab (qwen2) */
static int replay_file(const char *fname, const char *path, const char *name)
{
    size_t n;
    char *buf = test_read_file(path, &n);
    if (!buf) {
        fprintf(stderr, "%s: cannot read %s\n", fname, path);
        return 1;
    }
    LLVMFuzzerTestOneInput((const uint8_t *)buf, n);
    struct api_request_result r;
    int chat = !strncmp(name, "chat-", 5);
    int bad = (chat ? api_parse_chat_request(fuzz_toks[1].ctx, buf, n, &r)
                    : api_parse_completion_request(fuzz_toks[0].ctx, buf, n, &r))
                  ? 1
                  : replay_expect(chat ? name + 5 : name, &r);
    free(buf);
    return bad;
}

int main(int argc, char **argv)
{
    if (fuzz_init() != 1) {
        fuzz_cleanup();
        printf("skip: tokenizer models not found (INFERD_SHARED)\n");
        return 77;
    }
    const int rc = fuzz_replay_each("fuzz_request", argc, argv, replay_file);
    fuzz_cleanup();
    return rc;
}
#endif
