/* request_chat — the /v1/chat/completions side of request validation
 * (api/request.h): the fields only chat has, the messages (api/messages.c)
 * rendered by the model's template family (api/chat_template.c) and
 * tokenized with only the template's markers parsed as special tokens
 * (tok_encode_masked); the template family of a context.
 * Thread: any (the context is only read).
 */
#include "api/request.h"
#include "api/request_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_template.h"
#include "api/messages.h"
#include "api/tools.h"
#include "engine/jsonc.h"
#include "engine/tok.h"

/* Fields that would change what the answer means if ignored: refused
 * (OpenAI's deprecated functions API; tools replace it). */
static int req_chat_unsupported(json_t *b, struct api_req_error *e)
{
    json_t *v = json_object_get(b, "functions");
    if (v && !json_is_null(v) && !(json_is_array(v) && json_array_size(v) == 0))
        return req_fail(e, 400, "functions", NULL,
                        "functions (deprecated) is not supported by this server; use tools");
    v = json_object_get(b, "function_call");
    if (v && !json_is_null(v) && !(json_is_string(v) && !strcmp(json_string_value(v), "none")))
        return req_fail(e, 400, "function_call", NULL,
                        "function_call (deprecated) is not supported by this server; use "
                        "tool_choice");
    return 0;
}

/* tools / tool_choice / parallel_tool_calls (api/tools.c): q->tools, and
 * the constraint of a forced call in q->json (response_format's place:
 * the two are one or the other). *ct_tools: what the prompt renders. */
static int req_chat_tools(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                          struct chat_tools *ct_tools, struct api_req_error *e)
{
    char param[64], msg[320];
    struct jsonc *forced = NULL;
    memset(ct_tools, 0, sizeof(*ct_tools));
    int rc = api_tools_parse(b, &x->chat, &q->tools, &ct_tools->defs, &forced, param,
                             sizeof(param), msg, sizeof(msg));
    if (rc == -2)
        return REQ_OOM(e);
    if (rc)
        return req_fail(e, 400, param, NULL, "%s", msg);
    if (q->tools && q->json) {
        jsonc_free(forced);
        return req_fail(e, 400, "response_format", NULL,
                        "response_format other than text cannot be combined with tools (unless "
                        "tool_choice is \"none\")");
    }
    if (forced) {
        q->json = forced;
        ct_tools->forced = 1;
    }
    return 0;
}

/* chat_template_kwargs (vLLM's and llama.cpp's extension: variables for
 * the template): enable_thinking, a bool, read on a template with
 * reasoning turns (Qwen3's); the other keys are ignored, as a template
 * that does not read them ignores them. With a constraint (response_format,
 * a forced call) the turn opens with an empty think block too: the
 * constraint allows no reasoning, so the model is told there is none.
 * q->think: the answer's <think> block is split off (api/think.h). */
static int req_chat_think(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                          struct chat_tools *tools, struct api_req_error *e)
{
    json_t *kw = json_object_get(b, "chat_template_kwargs");
    int think = 1;
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return req_fail(e, 400, "chat_template_kwargs", NULL,
                        "chat_template_kwargs must be an object");
    json_t *et = kw ? json_object_get(kw, "enable_thinking") : NULL;
    if (et && !json_is_null(et)) {
        if (!json_is_boolean(et))
            return req_fail(e, 400, "chat_template_kwargs", NULL,
                            "chat_template_kwargs.enable_thinking must be a boolean");
        think = json_is_true(et);
    }
    tools->no_think = x->chat.think && (!think || q->json);
    q->think = !x->chat.think ? 0 : x->chat.think_open && !tools->no_think ? 2 : 1;
    return 0;
}

/* logprobs (bool) and top_logprobs (0..max_logprobs, needs logprobs). */
static int req_chat_lp(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                       struct api_req_error *e)
{
    int lp = 0;
    int32_t top = -1;
    if (req_bool(b, "logprobs", &lp, e) ||
        req_int(b, "top_logprobs", 0, x->cfg.max_logprobs, &top, e))
        return -1;
    if (top >= 0 && !lp)
        return req_fail(e, 400, "top_logprobs", NULL,
                        "top_logprobs is only allowed when logprobs is true");
    q->logprobs = lp ? (top >= 0 ? top : 0) : -1;
    return 0;
}

/* The rendered prompt of body's messages: text, mask and token ids. BOS is
 * the template's when it writes one; else the tokenizer's rule adds it. */
static int req_chat_prompt(const struct api_request_ctx *x, json_t *b,
                           const struct chat_tools *tools, int add_gen, struct buf *text,
                           struct api_req_prompt *p, struct api_req_error *e)
{
    struct messages ms;
    struct buf mask = {0};
    char param[64], msg[256];
    int rc = messages_parse(json_object_get(b, "messages"), &ms, param, sizeof(param), msg,
                            sizeof(msg));
    if (rc == INF_ENOMEM)
        rc = REQ_OOM(e);
    else if (rc)
        rc = req_fail(e, 400, param, NULL, "%s", msg);
    if (!rc && x->chat.family == CHAT_TEMPLATE_NONE)
        rc = req_fail(e, 400, NULL, "chat_template_unavailable", "%s", x->chat_why);
    if (!rc) {
        int r = chat_template_render_tools(&x->chat, ms.m, ms.n, tools, add_gen, text, &mask,
                                           msg, sizeof(msg));
        if (r == INF_ENOMEM)
            rc = REQ_OOM(e);
        else if (r)
            rc = req_fail(e, 400, "messages", NULL, "%s", msg);
    }
    messages_free(&ms);
    if (!rc && req_too_long(x, text->len, "messages", e))
        rc = -1;
    size_t cap = (size_t)x->n_ctx + 8, n = 0;
    if (!rc && !(p->ids = malloc(cap * sizeof(int32_t))))
        rc = REQ_OOM(e);
    int32_t bos = tok_bos(x->tok);
    int add_bos = tok_add_bos(x->tok) && bos >= 0;
    if (!rc) {
        /* one slot kept for a BOS the text may lack */
        int t = tok_encode_masked(x->tok, text->p ? text->p : "", text->len, 0,
                                  (const uint8_t *)mask.p, p->ids + 1, cap - 1, &n);
        if (t == INF_ETOOBIG)
            rc = req_fail(e, 400, "messages", "context_length_exceeded",
                          "This model's maximum context length is %d tokens. However, your "
                          "messages have %zu tokens.",
                          (int)x->n_ctx, n + (size_t)add_bos);
        else if (t)
            rc = req_fail(e, 400, "messages", NULL, "the messages could not be tokenized: %s",
                          inf_strerror(t));
    }
    buf_free(&mask);
    if (rc)
        return rc;
    if (add_bos && !(n > 0 && p->ids[1] == bos)) {
        p->ids[0] = bos;
        n++;
    } else {
        memmove(p->ids, p->ids + 1, n * sizeof(int32_t));
    }
    if (n == 0)
        return req_fail(e, 400, "messages", NULL, "the messages render to no tokens");
    if (n > (size_t)x->n_ctx)
        return req_fail(e, 400, "messages", "context_length_exceeded",
                        "This model's maximum context length is %d tokens. However, your "
                        "messages have %zu tokens.",
                        (int)x->n_ctx, n);
    p->n = (int32_t)n;
    return 0;
}

int api_req_parse_chat(const struct api_request_ctx *x, json_t *b, struct api_req *q,
                       struct api_req_error *e)
{
    int add_gen = 1;
    struct chat_tools tools;
    req_defaults(x, q, API_REQ_CHAT);
    memset(e, 0, sizeof(*e));
    int rc = req_model(x, b, e);
    if (!rc)
        rc = req_chat_unsupported(b, e);
    /* max_completion_tokens is OpenAI's current name; it wins over max_tokens */
    if (!rc)
        rc = req_int(b, "max_tokens", 1, x->cfg.max_tokens, &q->max_tokens, e) ||
             req_int(b, "max_completion_tokens", 1, x->cfg.max_tokens, &q->max_tokens, e);
    if (!rc)
        rc = req_common(x, b, q, req_chat_lp, x->eot >= 0 ? 1 : 0, e);
    if (!rc)
        rc = req_chat_tools(x, b, q, &tools, e) || req_chat_think(x, b, q, &tools, e);
    if (!rc)
        rc = req_bool(b, "add_generation_prompt", &add_gen, e);
    if (!rc) {
        /* generation also ends on the template's end-of-turn token (not
         * with ignore_eos: benchmarks ask for exactly max_tokens, and the
         * end of turn is the chat's EOS) */
        if (x->eot >= 0 && !q->ignore_eos)
            q->stop_ids[q->n_stop_ids++] = x->eot;
        q->prompts = calloc(1, sizeof(*q->prompts));
        if (!q->prompts)
            rc = REQ_OOM(e);
    }
    if (!rc) {
        struct buf text = {0};
        q->n_prompts = 1;
        rc = req_chat_prompt(x, b, &tools, add_gen, &text, &q->prompts[0], e);
        buf_free(&text);
    }
    if (!rc)
        rc = req_fits(x, q, &q->prompts[0], e);
    if (!rc)
        q->prompt_tokens = q->prompts[0].n;
    if (rc)
        api_req_release(q);
    return rc;
}

int api_req_apply_template(const struct api_request_ctx *x, json_t *b, char **text,
                           size_t *text_len, int32_t **ids, int32_t *n_ids,
                           struct api_req_error *e)
{
    int add_gen = 1;
    struct buf t = {0};
    struct api_req_prompt p = {0};
    struct api_req q = {0};
    struct chat_tools tools;
    memset(e, 0, sizeof(*e));
    *text = NULL;
    *ids = NULL;
    /* the tools render as a chat request's would (a forced call's opening
     * included); q only holds what req_chat_tools makes */
    int rc = req_bool(b, "add_generation_prompt", &add_gen, e) ||
             req_chat_tools(x, b, &q, &tools, e) || req_chat_think(x, b, &q, &tools, e) ||
             req_chat_prompt(x, b, &tools, add_gen, &t, &p, e);
    api_req_release(&q);
    if (rc) {
        buf_free(&t);
        free(p.ids);
        return -1;
    }
    if (!t.p && buf_reserve(&t, 1)) {
        free(p.ids);
        return REQ_OOM(e);
    }
    *text = t.p;
    *text_len = t.len;
    *ids = p.ids;
    *n_ids = p.n;
    return 0;
}

/* ---- the context's template -------------------------------------------- */

/* A token's raw text as a C string ("" when none or too long). */
static void req_token_text(const struct tok *t, int32_t id, char *out, size_t cap)
{
    size_t n = 0;
    const char *s = id >= 0 ? tok_piece(t, id, &n) : NULL;
    if (!s || n >= cap)
        n = 0;
    if (n)
        memcpy(out, s, n);
    out[n] = '\0';
}

/* The chat template family: the config's, or the one the GGUF's template
 * is recognised as; none (and why) otherwise. */
int req_chat_setup(struct api_request_ctx *x, const char *tmpl, size_t len)
{
    const char *name = x->cfg.chat_template;
    int family;
    if (name[0] && strcmp(name, "auto")) {
        family = chat_template_family(name);
        if (family < 0)
            return INF_EINVAL;
        snprintf(x->chat_why, sizeof(x->chat_why), "chat template %s (config chat_template)",
                 name);
    } else if (!tmpl) {
        family = CHAT_TEMPLATE_NONE;
        snprintf(x->chat_why, sizeof(x->chat_why),
                 "the model has no chat template (tokenizer.chat_template); set chat_template "
                 "in the config to one of chatml, qwen3, llama3, llama3.1, llama2, mistral, gemma");
    } else {
        family = chat_template_detect(tmpl, len);
        if (family == CHAT_TEMPLATE_NONE)
            snprintf(x->chat_why, sizeof(x->chat_why),
                     "the model's chat template matches no known family; set chat_template in "
                     "the config to one of chatml, qwen3, llama3, llama3.1, llama2, mistral, gemma");
        else
            snprintf(x->chat_why, sizeof(x->chat_why),
                     "chat template %s (recognised in tokenizer.chat_template)",
                     chat_template_name(family));
    }
    char bos[64], eos[64];
    req_token_text(x->tok, tok_bos(x->tok), bos, sizeof(bos));
    req_token_text(x->tok, tok_eos(x->tok), eos, sizeof(eos));
    chat_template_init(&x->chat, family, tmpl, len, bos, eos);
    if (name[0] && chat_template_named_think(name)) { /* "qwen3": chatml with reasoning turns */
        x->chat.think = 1;
        x->chat.default_system[0] = '\0'; /* Qwen3's template inserts none */
    } else if (x->chat.think) {
        snprintf(x->chat_why, sizeof(x->chat_why),
                 "chat template qwen3 (chatml with reasoning turns, recognised in "
                 "tokenizer.chat_template)");
    }
    /* a family the config names is the operator's word that the model was
     * trained on its format, tools included (chatml: Qwen's <tool_call>) */
    if (name[0] && strcmp(name, "auto") && family == CHAT_TEMPLATE_CHATML)
        x->chat.tools = 1;
    const char *eot = chat_template_eot(&x->chat);
    x->eot = family != CHAT_TEMPLATE_NONE && eot[0] ? tok_lookup(x->tok, eot, strlen(eot)) : -1;
    return 0;
}
