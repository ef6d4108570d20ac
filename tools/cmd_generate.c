/* cmd_generate — `inferd generate` (complete a prompt) and `inferd score`
 * (teacher-forced top-N logprobs) on the CPU engine.
 *
 * generate: the prompt is tokenized as llama.cpp does by default (BOS/EOS per
 * the GGUF's add_bos/add_eos keys, special-token text such as <|im_start|>
 * parsed as those tokens); --no-special turns both off. The prompt is
 * prefilled in chunks, then one token per step is sampled and its text is
 * streamed to stdout as it comes (tok_stream: never half a UTF-8 character).
 * The default temperature is 0 (greedy), so the CLI's output is reproducible
 * and comparable with llama.cpp's greedy reference; --temperature > 0 samples
 * with the seeded per-request RNG (--seed, default 0). Generation stops at an
 * end-of-generation token (unless --ignore-eos), after --max-tokens, or when
 * the context is full.
 *
 * score: one forward pass over all the given token ids; for every position i,
 * the top-N next-token ids and the log-softmax of the raw logits, as JSON.
 *
 * Single-threaded CLI code (the backend runs its own worker threads).
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/backend_open.h"
#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/err.h"
#include "engine/graph.h"
#include "engine/model.h"
#include "engine/sample.h"
#include "engine/tok.h"
#include "tools/cmds.h"

#define GEN_BLOCK 16   /* KV block size of the CLI's single sequence */
#define GEN_CHUNK 512  /* most prompt tokens per forward pass */

static double gen_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int gen_parse_long(const char *cmd, const char *flag, const char *s, long lo, long hi,
                          long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "inferd %s: %s expects an integer in [%ld, %ld], got '%s'\n", cmd,
                flag, lo, hi, s);
        return CMD_USAGE;
    }
    *out = v;
    return 0;
}

static int gen_parse_float(const char *cmd, const char *flag, const char *s, float lo, float hi,
                           float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "inferd %s: %s expects a number in [%g, %g], got '%s'\n", cmd, flag,
                (double)lo, (double)hi, s);
        return CMD_USAGE;
    }
    *out = v;
    return 0;
}

/* The engine for one sequence that owns the whole cache: backend, model, graph. */
struct gen_engine {
    struct backend *be;
    struct model *m;
    struct graph *g;
    int32_t n_ctx;
    int32_t *bt; /* block table: block i holds positions [16i, 16i+16) */
    int late_out_rows;
};

static void gen_engine_close(struct gen_engine *e)
{
    graph_free(e->g);
    model_free(e->m);
    backend_free(e->be);
    free(e->bt);
    memset(e, 0, sizeof(*e));
}

/* --numerics: "invariant" (the default) or "llamacpp" (enum cpu_numerics):
 * 0, or CMD_USAGE with a message. */
static int gen_parse_numerics(const char *cmd, const char *v, int *out)
{
    if (!strcmp(v, "invariant"))
        *out = CPU_NUMERICS_INVARIANT;
    else if (!strcmp(v, "llamacpp"))
        *out = CPU_NUMERICS_LLAMACPP;
    else {
        fprintf(stderr, "inferd %s: --numerics must be invariant or llamacpp, not \"%s\"\n", cmd,
                v);
        return CMD_USAGE;
    }
    return 0;
}

/* --backend: auto | cuda | cpu (backend_open.h): 0, or CMD_USAGE. */
static int gen_parse_backend(const char *cmd, const char *v, int *out)
{
    if (backend_kind_parse(v, out) == 0)
        return 0;
    fprintf(stderr, "inferd %s: --backend must be auto, cuda or cpu, not \"%s\"\n", cmd, v);
    return CMD_USAGE;
}

static int gen_engine_open_model(struct gen_engine *e, const char *cmd, const char *path,
                                 int kind, int threads, int numerics)
{
    struct inf_error err = {0, ""};
    memset(e, 0, sizeof(*e));
    /* llama.cpp's numbers need its batch-dependent kernels and its graph
     * order together (cpu.h, graph.h) */
    const struct backend_open_params bp = {kind, 0, threads, numerics, 0, 0, 0, CUDA_Q6P_PERCENT};
    int rc = backend_open(&bp, &e->be, &err);
    if (rc) {
        fprintf(stderr, "inferd %s: %s\n", cmd, err.msg[0] ? err.msg : inf_strerror(rc));
        return CMD_FAIL;
    }
    e->late_out_rows = numerics == CPU_NUMERICS_LLAMACPP;
    rc = model_load(path, e->be, &e->m, &err);
    if (rc) {
        fprintf(stderr, "inferd %s: cannot load \"%s\": %s\n", cmd, path,
                err.msg[0] ? err.msg : inf_strerror(rc));
        gen_engine_close(e);
        return CMD_FAIL;
    }
    return 0;
}

/* Graph for n_ctx positions, forward passes of at most max_tokens rows. */
static int gen_engine_graph(struct gen_engine *e, const char *cmd, int32_t n_ctx,
                            int32_t max_tokens, int32_t max_logits)
{
    struct inf_error err = {0, ""};
    struct graph_params gp;
    memset(&gp, 0, sizeof(gp));
    gp.max_tokens = max_tokens;
    gp.max_logits = max_logits;
    gp.block_size = GEN_BLOCK;
    gp.n_blocks = (n_ctx + GEN_BLOCK - 1) / GEN_BLOCK;
    gp.late_out_rows = e->late_out_rows;
    e->n_ctx = n_ctx;
    e->bt = malloc((size_t)gp.n_blocks * sizeof(int32_t));
    if (!e->bt) {
        fprintf(stderr, "inferd %s: out of memory\n", cmd);
        return CMD_FAIL;
    }
    for (int32_t i = 0; i < gp.n_blocks; i++)
        e->bt[i] = i;
    int rc = graph_new(e->m, &gp, &e->g, &err);
    if (rc) {
        fprintf(stderr, "inferd %s: %s\n", cmd, err.msg[0] ? err.msg : inf_strerror(rc));
        return CMD_FAIL;
    }
    return 0;
}

/* Run tokens[0..n) at positions pos0.. of the one sequence; logits of the
 * last `n_logits` rows (0 or more) into logits. */
static int gen_engine_forward(struct gen_engine *e, const int32_t *tokens, int32_t n,
                              int32_t pos0, int32_t n_logits, int32_t *scratch, float *logits)
{
    int32_t *pos = scratch, *seq = scratch + n, *rows = scratch + 2 * n;
    for (int32_t i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        seq[i] = 0;
    }
    for (int32_t i = 0; i < n_logits; i++)
        rows[i] = n - n_logits + i;
    const int32_t *tables[1] = {e->bt};
    struct graph_batch b = {
        .n_tokens = n,
        .tokens = tokens,
        .pos = pos,
        .seq = seq,
        .n_seqs = 1,
        .block_tables = tables,
        .n_logits = n_logits,
        .logit_rows = rows,
        .logits = logits,
    };
    return graph_forward(e->g, &b);
}

static int gen_tokenize(const struct tok *t, const char *text, int special, int32_t **out,
                        size_t *n_out)
{
    size_t len = strlen(text), cap = len + 16, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids)
        return INF_ENOMEM;
    int rc = tok_encode(t, text, len, special, special, ids, cap, &n);
    if (rc == INF_ETOOBIG) {
        cap = n;
        int32_t *p = realloc(ids, cap * sizeof(int32_t));
        if (!p) {
            free(ids);
            return INF_ENOMEM;
        }
        ids = p;
        rc = tok_encode(t, text, len, special, special, ids, cap, &n);
    }
    if (rc) {
        free(ids);
        return rc;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

static void gen_usage(FILE *f)
{
    fprintf(f,
            "usage: inferd generate --model M --prompt P [options]\n"
            "  --max-tokens N     tokens to generate (default 64)\n"
            "  --temperature T    0 = greedy (default 0: reproducible output)\n"
            "  --top-k K          0 = off (default)\n"
            "  --top-p P          1 = off (default)\n"
            "  --min-p P          0 = off (default)\n"
            "  --repeat-penalty R 1 = off (default)\n"
            "  --seed S           sampling seed (default 0)\n"
            "  --backend B        auto (default: the GPU when one answers), cuda or cpu\n"
            "  --threads N        CPU threads (default 2)\n"
            "  --numerics K       invariant (default: a sequence's logits never depend on\n"
            "                     the batch) or llamacpp (llama.cpp's batch-dependent CPU\n"
            "                     kernels: its numbers bit for bit)\n"
            "  --no-special       no BOS/EOS, special-token text stays plain text\n"
            "  --ignore-eos       keep going after an end-of-generation token\n"
            "  --json             print one JSON object {prompt_tokens, completion_tokens,\n"
            "                     text, timings} instead of streaming the text\n");
}

int cmd_generate(int argc, char **argv)
{
    const char *model_path = NULL, *prompt = NULL;
    long max_tokens = 64, threads = 2, top_k = 0, seed = 0;
    float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f, repeat = 1.0f;
    int special = 1, json = 0, ignore_eos = 0, numerics = CPU_NUMERICS_INVARIANT, rc;
    int kind = backend_kind_default();

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            gen_usage(stdout);
            return CMD_OK;
        } else if (!strcmp(a, "--no-special")) {
            special = 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
        } else if (!v) {
            fprintf(stderr, "inferd generate: unknown flag or missing value: %s\n", a);
            gen_usage(stderr);
            return CMD_USAGE;
        } else {
            i++;
            if (!strcmp(a, "--model"))
                model_path = v;
            else if (!strcmp(a, "--prompt"))
                prompt = v;
            else if (!strcmp(a, "--max-tokens")) {
                if ((rc = gen_parse_long("generate", a, v, 0, 1 << 24, &max_tokens)))
                    return rc;
            } else if (!strcmp(a, "--threads")) {
                if ((rc = gen_parse_long("generate", a, v, 1, 256, &threads)))
                    return rc;
            } else if (!strcmp(a, "--numerics")) {
                if ((rc = gen_parse_numerics("generate", v, &numerics)))
                    return rc;
            } else if (!strcmp(a, "--backend")) {
                if ((rc = gen_parse_backend("generate", v, &kind)))
                    return rc;
            } else if (!strcmp(a, "--top-k")) {
                if ((rc = gen_parse_long("generate", a, v, 0, 1 << 30, &top_k)))
                    return rc;
            } else if (!strcmp(a, "--seed")) {
                if ((rc = gen_parse_long("generate", a, v, 0, 0x7fffffffL, &seed)))
                    return rc;
            } else if (!strcmp(a, "--temperature")) {
                if ((rc = gen_parse_float("generate", a, v, 0.0f, 100.0f, &temperature)))
                    return rc;
            } else if (!strcmp(a, "--top-p")) {
                if ((rc = gen_parse_float("generate", a, v, 0.0f, 1.0f, &top_p)))
                    return rc;
            } else if (!strcmp(a, "--min-p")) {
                if ((rc = gen_parse_float("generate", a, v, 0.0f, 1.0f, &min_p)))
                    return rc;
            } else if (!strcmp(a, "--repeat-penalty")) {
                if ((rc = gen_parse_float("generate", a, v, 0.0f, 10.0f, &repeat)))
                    return rc;
            } else {
                fprintf(stderr, "inferd generate: unknown flag %s\n", a);
                gen_usage(stderr);
                return CMD_USAGE;
            }
        }
    }
    if (!model_path || !prompt) {
        fprintf(stderr, "inferd generate: --model and --prompt are required\n");
        gen_usage(stderr);
        return CMD_USAGE;
    }

    struct gen_engine e;
    if ((rc = gen_engine_open_model(&e, "generate", model_path, kind, (int)threads, numerics)))
        return rc;
    const struct model_hparams *hp = model_hparams(e.m);
    const struct tok *t = model_tok(e.m);
    int32_t *ids = NULL, *scratch = NULL;
    float *logits = NULL;
    struct sampler *smp = NULL;
    char *text = NULL;
    size_t n_prompt = 0, text_len = 0, text_cap = 0;
    int status = CMD_FAIL;

    if ((rc = gen_tokenize(t, prompt, special, &ids, &n_prompt))) {
        fprintf(stderr, "inferd generate: cannot tokenize the prompt: %s\n", inf_strerror(rc));
        goto out;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "inferd generate: the prompt is empty (no tokens)\n");
        status = CMD_USAGE;
        goto out;
    }
    if (n_prompt >= (size_t)hp->n_ctx_train) {
        fprintf(stderr, "inferd generate: the prompt has %zu tokens; the context holds %d\n",
                n_prompt, hp->n_ctx_train);
        goto out;
    }
    int64_t n_ctx = (int64_t)n_prompt + max_tokens;
    if (n_ctx > hp->n_ctx_train)
        n_ctx = hp->n_ctx_train;
    const int32_t chunk = n_prompt < GEN_CHUNK ? (int32_t)n_prompt : GEN_CHUNK;
    if (gen_engine_graph(&e, "generate", (int32_t)n_ctx, chunk, 1))
        goto out;
    int32_t *grown = realloc(ids, (size_t)n_ctx * sizeof(int32_t));
    scratch = malloc((size_t)chunk * 3 * sizeof(int32_t));
    logits = malloc((size_t)hp->n_vocab * sizeof(float));
    if (grown)
        ids = grown;
    struct sample_params sp;
    sample_params_default(&sp);
    sp.temperature = temperature;
    sp.top_k = (int32_t)top_k;
    sp.top_p = top_p;
    sp.min_p = min_p;
    sp.repetition_penalty = repeat;
    sp.seed = (uint64_t)seed;
    smp = sampler_new(hp->n_vocab, &sp);
    if (!grown || !scratch || !logits || !smp) {
        fprintf(stderr, "inferd generate: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < n_prompt; i++)
        sampler_accept(smp, ids[i], 1);

    /* prefill */
    const double t0 = gen_now();
    for (size_t p = 0; p < n_prompt; p += (size_t)chunk) {
        int32_t n = (int32_t)(n_prompt - p < (size_t)chunk ? n_prompt - p : (size_t)chunk);
        int last = p + (size_t)n == n_prompt;
        if ((rc = gen_engine_forward(&e, ids + p, n, (int32_t)p, last ? 1 : 0, scratch,
                                     logits))) {
            fprintf(stderr, "inferd generate: forward pass failed: %s\n", inf_strerror(rc));
            goto out;
        }
    }
    const double t1 = gen_now();

    /* decode */
    struct tok_stream ts;
    tok_stream_init(&ts, t, 0);
    char piece[512];
    int64_t n_gen = 0;
    int32_t pos = (int32_t)n_prompt;
    while (n_gen < max_tokens && pos < n_ctx) {
        int32_t id = sampler_sample(smp, logits);
        sampler_accept(smp, id, 0);
        ids[pos] = id;
        n_gen++;
        if (!ignore_eos && tok_is_eog(t, id))
            break;
        int k = tok_stream_push(&ts, id, piece, sizeof(piece));
        if (k > 0) {
            if (json) {
                if (text_len + (size_t)k + 1 > text_cap) {
                    size_t nc = text_cap ? text_cap * 2 : 1024;
                    while (nc < text_len + (size_t)k + 1)
                        nc *= 2;
                    char *p = realloc(text, nc);
                    if (!p)
                        goto out;
                    text = p;
                    text_cap = nc;
                }
                memcpy(text + text_len, piece, (size_t)k);
                text_len += (size_t)k;
            } else {
                fwrite(piece, 1, (size_t)k, stdout);
                fflush(stdout);
            }
        }
        if (n_gen >= max_tokens || pos + 1 >= n_ctx)
            break;
        if ((rc = gen_engine_forward(&e, &ids[pos], 1, pos, 1, scratch, logits))) {
            fprintf(stderr, "inferd generate: forward pass failed: %s\n", inf_strerror(rc));
            goto out;
        }
        pos++;
    }
    int k = tok_stream_flush(&ts, piece, sizeof(piece));
    const double t2 = gen_now();
    if (!json) {
        if (k > 0)
            fwrite(piece, 1, (size_t)k, stdout);
        fputc('\n', stdout);
    } else {
        json_t *o = json_object(), *pt = json_array(), *ct = json_array(), *tm = json_object();
        for (size_t i = 0; i < n_prompt; i++)
            json_array_append_new(pt, json_integer(ids[i]));
        for (int64_t i = 0; i < n_gen; i++)
            json_array_append_new(ct, json_integer(ids[n_prompt + (size_t)i]));
        json_object_set_new(o, "prompt_tokens", pt);
        json_object_set_new(o, "completion_tokens", ct);
        json_t *js = json_stringn(text ? text : "", text_len);
        if (k > 0) {
            char *all = malloc(text_len + (size_t)k);
            if (all) {
                memcpy(all, text ? text : "", text_len);
                memcpy(all + text_len, piece, (size_t)k);
                json_decref(js);
                js = json_stringn(all, text_len + (size_t)k);
                free(all);
            }
        }
        /* Invalid UTF-8 cannot happen (tok_stream replaces it); be safe anyway. */
        json_object_set_new(o, "text", js ? js : json_string(""));
        json_object_set_new(tm, "prompt_ms", json_real((t1 - t0) * 1e3));
        json_object_set_new(tm, "prompt_per_second", json_real((double)n_prompt / (t1 - t0)));
        json_object_set_new(tm, "predicted_ms", json_real((t2 - t1) * 1e3));
        json_object_set_new(tm, "predicted_per_second",
                            json_real(n_gen > 1 ? (double)(n_gen - 1) / (t2 - t1) : 0.0));
        json_object_set_new(o, "timings", tm);
        char *s = json_dumps(o, JSON_COMPACT);
        if (s) {
            puts(s);
            free(s);
        }
        json_decref(o);
    }
    status = CMD_OK;
out:
    free(text);
    free(ids);
    free(scratch);
    free(logits);
    sampler_free(smp);
    gen_engine_close(&e);
    return status;
}

/* ------------------------------------------------------------------------ */
/* score                                                                    */
/* ------------------------------------------------------------------------ */

static void score_usage(FILE *f)
{
    fprintf(f, "usage: inferd score --model M --tokens \"id id ...\" [--top N] [--threads N]\n"
               "                    [--numerics invariant|llamacpp] [--backend auto|cuda|cpu]\n"
               "  one forward pass over the tokens; for each position i, the top N\n"
               "  (default 5) next-token ids with the log-softmax of the raw logits:\n"
               "  {\"steps\":[{\"pos\":i,\"top\":[{\"id\":..,\"logprob\":..},...]},...]}\n");
}

int cmd_score(int argc, char **argv)
{
    const char *model_path = NULL, *tokens = NULL;
    long top = 5, threads = 2;
    int numerics = CPU_NUMERICS_INVARIANT, rc, kind = backend_kind_default();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            score_usage(stdout);
            return CMD_OK;
        } else if (!v) {
            fprintf(stderr, "inferd score: unknown flag or missing value: %s\n", a);
            score_usage(stderr);
            return CMD_USAGE;
        }
        i++;
        if (!strcmp(a, "--model"))
            model_path = v;
        else if (!strcmp(a, "--tokens"))
            tokens = v;
        else if (!strcmp(a, "--top")) {
            if ((rc = gen_parse_long("score", a, v, 0, 100, &top)))
                return rc;
        } else if (!strcmp(a, "--threads")) {
            if ((rc = gen_parse_long("score", a, v, 1, 256, &threads)))
                return rc;
        } else if (!strcmp(a, "--numerics")) {
            if ((rc = gen_parse_numerics("score", v, &numerics)))
                return rc;
        } else if (!strcmp(a, "--backend")) {
            if ((rc = gen_parse_backend("score", v, &kind)))
                return rc;
        } else {
            fprintf(stderr, "inferd score: unknown flag %s\n", a);
            score_usage(stderr);
            return CMD_USAGE;
        }
    }
    if (!model_path || !tokens) {
        fprintf(stderr, "inferd score: --model and --tokens are required\n");
        score_usage(stderr);
        return CMD_USAGE;
    }

    /* Parse the ids before loading anything. */
    size_t n = 0, cap = strlen(tokens) / 2 + 1;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids)
        return CMD_FAIL;
    for (const char *p = tokens; *p;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || n >= cap) {
            fprintf(stderr, "inferd score: bad token id near '%.16s'\n", p);
            free(ids);
            return CMD_USAGE;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (n == 0) {
        fprintf(stderr, "inferd score: no token ids\n");
        free(ids);
        return CMD_USAGE;
    }

    struct gen_engine e;
    if ((rc = gen_engine_open_model(&e, "score", model_path, kind, (int)threads, numerics))) {
        free(ids);
        return rc;
    }
    const struct model_hparams *hp = model_hparams(e.m);
    int status = CMD_FAIL;
    int32_t *scratch = NULL, *top_ids = NULL;
    float *logits = NULL, *top_lps = NULL;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= hp->n_vocab) {
            fprintf(stderr, "inferd score: token id %d is not in the vocabulary (%d tokens)\n",
                    ids[i], hp->n_vocab);
            status = CMD_USAGE;
            goto out;
        }
    }
    if (n > (size_t)hp->n_ctx_train) {
        fprintf(stderr, "inferd score: %zu tokens do not fit the context (%d)\n", n,
                hp->n_ctx_train);
        goto out;
    }
    if (gen_engine_graph(&e, "score", (int32_t)n, (int32_t)n, (int32_t)n))
        goto out;
    scratch = malloc(n * 3 * sizeof(int32_t));
    logits = malloc(n * (size_t)hp->n_vocab * sizeof(float));
    top_ids = malloc((size_t)(top + 1) * sizeof(int32_t));
    top_lps = malloc((size_t)(top + 1) * sizeof(float));
    if (!scratch || !logits || !top_ids || !top_lps) {
        fprintf(stderr, "inferd score: out of memory\n");
        goto out;
    }
    if ((rc = gen_engine_forward(&e, ids, (int32_t)n, 0, (int32_t)n, scratch, logits))) {
        fprintf(stderr, "inferd score: forward pass failed: %s\n", inf_strerror(rc));
        goto out;
    }
    json_t *o = json_object(), *steps = json_array();
    for (size_t i = 0; i < n; i++) {
        const float *row = logits + i * (size_t)hp->n_vocab;
        sample_logprobs(row, hp->n_vocab, 0, (int)top, top_ids, top_lps);
        json_t *st = json_object(), *arr = json_array();
        json_object_set_new(st, "pos", json_integer((json_int_t)i));
        for (long k = 0; k < top; k++) {
            json_t *tk = json_object();
            json_object_set_new(tk, "id", json_integer(top_ids[k]));
            json_object_set_new(tk, "logprob", json_real(top_lps[k]));
            json_array_append_new(arr, tk);
        }
        json_object_set_new(st, "top", arr);
        json_array_append_new(steps, st);
    }
    json_object_set_new(o, "steps", steps);
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    if (s) {
        puts(s);
        free(s);
    }
    json_decref(o);
    status = CMD_OK;
out:
    free(ids);
    free(scratch);
    free(logits);
    free(top_ids);
    free(top_lps);
    gen_engine_close(&e);
    return status;
}
