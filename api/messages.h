/* messages — the "messages" array of a chat request, validated into the
 * chat_msg list a template renders (api/chat_template.h).
 *
 * Accepted: roles system, developer (OpenAI's newer name for system), user,
 * assistant and tool; content a string or an array of {"type":"text",
 * "text":...} parts, joined with "\n" (as vLLM does); an assistant's
 * tool_calls (content may then be null), their arguments parsed as the
 * templates write them. Whether the chat template can write tools is the
 * renderer's question (api/chat_template.c). Refused with the field named
 * (error.param "messages[i].role", "messages[i].content", ...): not an
 * array, empty, a message that is not an object, an unknown role, the
 * deprecated function role, tool_calls that are not well formed or not an
 * assistant's, content of another type, parts other than text (images,
 * audio).
 * Pure; thread: any.
 */
#ifndef INFERD_API_MESSAGES_H
#define INFERD_API_MESSAGES_H

#include <stddef.h>

#include <jansson.h>

#include "api/chat_template.h"

struct messages {
    struct chat_msg *m; /* content points into the JSON or into owned[i] */
    char **owned;       /* [n]: joined text parts, or NULL */
    struct chat_call **calls; /* [n]: an assistant's tool calls, or NULL */
    size_t n;
};

/* v: the "messages" value (NULL when absent). 0; INF_EINVAL with param and
 * msg filled; INF_ENOMEM. out needs messages_free either way. */
int messages_parse(json_t *v, struct messages *out, char *param, size_t param_cap, char *msg,
                   size_t msg_cap);
void messages_free(struct messages *ms);

#endif
