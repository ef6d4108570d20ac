/* format — the bytes of a response: the JSON body of a finished request and
 * the SSE events of a streamed one, from a gen's choices (api/gen.h).
 *
 * Pure output: nothing here submits, polls or touches a connection. A
 * stream's cursor (what each choice has sent) lives in the choice
 * (gen_choice.sent / lp_sent / started / reported) and only this module
 * moves it.
 * Thread: the gen's thread (the loop thread).
 */
#ifndef INFERD_API_FORMAT_H
#define INFERD_API_FORMAT_H

#include <stdint.h>

#include "api/buf.h"
#include "api/gen.h"

/* What every body and chunk starts with. */
struct format_head {
    const char *id;    /* "cmpl-..." */
    int64_t created;   /* unix seconds */
    const char *model; /* the served model id */
};

/* The whole JSON body of a finished request (replaces o's content; with
 * tools it reads each choice's calls with the choice's reader). */
int format_body(struct gen *g, const struct format_head *h, struct buf *o);
/* Append one SSE event for choice i with what it has not sent yet (nothing
 * when there is nothing new); moves the choice's cursor. */
int format_chunk(struct gen *g, int i, const struct format_head *h, struct buf *o);
/* The end of a stream: the usage chunk (include_usage) and [DONE]. */
int format_stream_end(const struct gen *g, const struct format_head *h, struct buf *o);
/* How many tool calls the response carried (0 without tools): what the
 * body or the stream's chunks read, once format_body / the last
 * format_chunk ran. */
int format_tool_calls(const struct gen *g);
/* A failed stream: an error event, then [DONE]. */
int format_stream_error(const struct gen *g, struct buf *o);

#endif
