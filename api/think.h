/* think — a reasoning model's answer split into its reasoning and its
 * content, for chat on a template with reasoning turns
 * (chat_template.think: Qwen3's). The model opens its answer with
 * "<think>", reasons, writes "</think>", then answers; the API gives the
 * part between the tags as message.reasoning_content (delta.reasoning_content
 * when streaming: vLLM's and llama.cpp's field) and the rest as content.
 *
 * What is split, as the template reads a turn back (chat_template.c): the
 * answer's leading whitespace, then "<think>"; the reasoning without the
 * newlines at its ends; the content after "</think>" without its leading
 * newlines. With the block opened by the prompt (Qwen3's thinking-only
 * templates) the answer starts as reasoning. An answer that does not open with "<think>" (thinking turned
 * off, a constraint from the first token) is all content, as written. An
 * answer cut before "</think>" (max_tokens) is all reasoning and no
 * content. The same reader serves the finished body and the stream, one
 * piece of final text at a time, holding back what may still be the start
 * of a tag or newlines that may end the reasoning, so both give the same
 * strings. Thread: any (a scan belongs to one choice).
 */
#ifndef INFERD_API_THINK_H
#define INFERD_API_THINK_H

#include <stddef.h>

enum think_phase {
    THINK_LEAD = 0, /* before the answer's first non-whitespace bytes */
    THINK_IN,       /* inside the <think> block */
    THINK_AFTER,    /* past "</think>", in the newlines before the content */
    THINK_CONTENT,  /* the content starts at scan.content */
};

struct think_scan {
    size_t pos;     /* text[0..pos) is read */
    size_t content; /* THINK_CONTENT: where the content starts */
    int phase;      /* enum think_phase */
    int opened;     /* the answer opened a <think> block */
    int lead;       /* THINK_IN: still at the reasoning's leading newlines */
};

/* opened: the prompt opened the block (a template whose generation prompt
 * ends "<think>\n": the answer starts inside it, its reasoning first). */
void think_start(struct think_scan *s, int opened);
/* The next piece of reasoning in text[0..safe) (final text; done: no
 * more will come): 1 and text[*off .. *off + *len), or 0 when there is
 * none to give now. Once s->phase is THINK_CONTENT, the content is
 * text[s->content ..]. */
int think_next(struct think_scan *s, const char *text, size_t safe, int done, size_t *off,
               size_t *len);

#endif
