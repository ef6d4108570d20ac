/* messages — the "messages" array of a chat request, validated into the
 * chat_msg list a template renders (api/chat_template.h).
 *
 * Accepted: roles system, developer (OpenAI's newer name for system), user
 * and assistant; content a string or an array of {"type":"text","text":...}
 * parts, joined with "\n" (as vLLM does). Refused with the field named
 * (error.param "messages[i].role", "messages[i].content", ...): not an
 * array, empty, a message that is not an object, an unknown role, the tool /
 * function roles and tool_calls (tools are not supported), content of
 * another type, parts other than text (images, audio).
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
    size_t n;
};

/* v: the "messages" value (NULL when absent). 0; INF_EINVAL with param and
 * msg filled; INF_ENOMEM. out needs messages_free either way. */
int messages_parse(json_t *v, struct messages *out, char *param, size_t param_cap, char *msg,
                   size_t msg_cap);
void messages_free(struct messages *ms);

#endif
