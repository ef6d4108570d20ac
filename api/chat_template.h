/* chat_template — a conversation rendered as the prompt text a chat model
 * was trained on, for the template families inferd knows.
 *
 * inferd does not run Jinja. It recognises a GGUF's tokenizer.chat_template
 * by the family's markers (chat_template_detect) and renders that family's
 * published format itself:
 *   chatml    <|im_start|>role\ncontent<|im_end|>\n ... <|im_start|>assistant\n
 *             (Qwen2 / 2.5 / 3; the default system prompt a template inserts
 *             when the conversation has none is taken from the template)
 *   llama3    <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n
 *             content(trimmed)<|eot_id|> ... <|start_header_id|>assistant<|end_header_id|>\n\n
 *   llama3.1  llama3 with the system block the 3.1 template always writes
 *             ("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n")
 *   llama2    <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s><s>[INST] ...
 *   mistral   <s>[INST] user [/INST]answer</s>[INST] ... (system: "system\n\n" before
 *             the first user message)
 *   gemma     <bos><start_of_turn>user\ncontent(trimmed)<end_of_turn>\n ...
 *             <start_of_turn>model\n (assistant is "model"; system as in mistral)
 * A template that matches none is CHAT_TEMPLATE_NONE: the caller refuses
 * chat rather than guess.
 *
 * Tools (chat_template_no_tools says whether a family has a format for them):
 *   chatml    Qwen's: the tool signatures in the system turn between <tools>
 *             tags, the assistant's calls as <tool_call>\n{"name": ...,
 *             "arguments": ...}\n</tool_call>, tool results in a user turn as
 *             <tool_response> blocks (consecutive results share the turn)
 *   llama3.1  Meta's JSON tool calls: "Environment: ipython" in the system
 *             block, the signatures (indented JSON) in the first user turn, a
 *             call as {"name": ..., "parameters": ...}, a result as the ipython
 *             role's turn (its content as a JSON string, as the template's
 *             tojson writes it); one call an assistant turn
 * Reasoning (chatml with ct->think: a template that writes "<think>" and
 * reads enable_thinking, Qwen3's, or the config naming "qwen3"): an
 * assistant turn after the last user query is written as
 * "<think>\n" reasoning "\n</think>\n\n" content when it is the last
 * message or has reasoning (its reasoning_content, else the part of its
 * content before "</think>"); earlier turns keep only the content after
 * "</think>"; no_think opens the new turn with "<think>\n\n</think>\n\n".
 * A template whose generation prompt itself writes "<think>\n" (Qwen3's
 * thinking-only releases, no enable_thinking) is the same with think_open:
 * the new turn opens the block, unless no_think closes it empty.
 * The signatures and arguments are written as the templates' tojson writes
 * them (jansson: ", " and ": " separators, the keys in the order given,
 * UTF-8 unescaped). The other families have no tool format: tools, a tool
 * message or an assistant's tool_calls are refused (INF_EINVAL, why).
 *
 * Rendering also says which bytes are the template's own (mask 1) and which
 * are message content (mask 0): only the template's bytes may become special
 * tokens (tok_encode_masked), so "<|im_start|>" typed by a user stays text.
 * Pure: no tokenizer, no I/O. Thread: any.
 */
#ifndef INFERD_API_CHAT_TEMPLATE_H
#define INFERD_API_CHAT_TEMPLATE_H

#include <stddef.h>

#include <jansson.h>

#include "api/buf.h"

enum chat_template_family {
    CHAT_TEMPLATE_NONE = 0,
    CHAT_TEMPLATE_CHATML,
    CHAT_TEMPLATE_LLAMA3,
    CHAT_TEMPLATE_LLAMA31,
    CHAT_TEMPLATE_LLAMA2,
    CHAT_TEMPLATE_MISTRAL,
    CHAT_TEMPLATE_GEMMA,
};

enum chat_role { CHAT_ROLE_SYSTEM = 1, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT, CHAT_ROLE_TOOL };

/* One tool call of an assistant message. */
struct chat_call {
    const char *name; /* NUL-terminated */
    json_t *args;     /* the arguments parsed (an object), or the string given when
                         it is not JSON (tojson then quotes it, as the template does) */
};

struct chat_msg {
    int role;            /* enum chat_role */
    const char *content; /* not NUL-terminated; NULL (len 0) for an assistant message
                            that only calls tools */
    size_t len;
    const struct chat_call *calls; /* assistant: its tool calls, else NULL */
    size_t n_calls;
    const char *reasoning; /* assistant: its reasoning_content (not NUL-terminated), or NULL */
    size_t reasoning_len;
};

/* The request's tools, and its other choices that change the prompt. */
struct chat_tools {
    json_t *defs; /* the "tools" array as given: [{"type":"function","function":{...}}] */
    int forced;   /* a call is forced: the assistant turn opens with a call's first bytes
                     (chatml "<tool_call>\n"), the constraint does the rest */
    int no_think; /* ct->think: the assistant turn opens with an empty <think> block
                     (chat_template_kwargs.enable_thinking false) */
};

struct chat_template {
    int family;
    char bos[64];             /* the BOS token's text (bos_token), "" for none */
    char eos[64];             /* the EOS token's text (eos_token) */
    char default_system[512]; /* chatml: inserted when there is no system message */
    int tools;                /* the family's tool format may be used */
    int think;                /* chatml: Qwen3's reasoning turns (<think> ... </think>) */
    int think_open;           /* think: the generation prompt opens the block ("<think>\n",
                                 Qwen3's thinking-only templates) */
};

/* The family a name stands for ("chatml", "qwen3" (chatml with its
 * reasoning turns: chat_template_named_think), "llama3", "llama3.1",
 * "llama2", "mistral", "gemma"), or -1. */
int chat_template_family(const char *name);
/* Whether the name stands for a family with Qwen3's reasoning turns. */
int chat_template_named_think(const char *name);
/* The family's name; "none" for CHAT_TEMPLATE_NONE. */
const char *chat_template_name(int family);
/* The family whose markers tmpl[0..len) has, or CHAT_TEMPLATE_NONE. */
int chat_template_detect(const char *tmpl, size_t len);

/* Set up ct for family. tmpl (may be NULL) is the model's template, read
 * for the chatml default system prompt; bos / eos are the model's token
 * texts (NULL for none). */
void chat_template_init(struct chat_template *ct, int family, const char *tmpl, size_t len,
                        const char *bos, const char *eos);

/* 0 when the family's tool format may be used (see above: chatml when the
 * model's template writes <tool_call> or no template was read, the config
 * naming the family; llama3.1 always); else INF_EINVAL and msg says why. */
int chat_template_no_tools(const struct chat_template *ct, char *msg, size_t cap);

/* The text of the token that ends an assistant turn ("<|im_end|>", ...). */
const char *chat_template_eot(const struct chat_template *ct);

/* Render msgs[0..n) (and the assistant turn's opening when add_generation
 * is set) by appending to text, and one byte per text byte to mask (1: the
 * template's, 0: content). 0; INF_EINVAL when the family cannot render the
 * conversation (msg says why, e.g. roles that do not alternate);
 * INF_ENOMEM. */
int chat_template_render(const struct chat_template *ct, const struct chat_msg *msgs, size_t n,
                         int add_generation, struct buf *text, struct buf *mask, char *msg,
                         size_t msg_cap);
/* The same with tools (NULL: none; then as chat_template_render). */
int chat_template_render_tools(const struct chat_template *ct, const struct chat_msg *msgs,
                               size_t n, const struct chat_tools *tools, int add_generation,
                               struct buf *text, struct buf *mask, char *msg, size_t msg_cap);

#endif
