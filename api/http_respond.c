/* http_respond — the HTTP layer's answers (split from http.c, which drives
 * the connections): queueing an MHD response with the headers every answer
 * needs (Content-Type; Retry-After on 429 / 503; Allow on 405 from the
 * route table; Connection: close where the body was not read or the daemon
 * drains), the OpenAI error JSON for every error status, and a request's
 * suspend / resume around streaming. Runs on the loop thread only. */
#include "api/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/log.h"

static const char *http_reason_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 500: return "server_error";
    case 503: return "server_error";
    default: return "invalid_request_error";
    }
}

/* Queue resp (its headers added here) on r; resp is released either way. */
static enum MHD_Result http_queue(struct http_req *r, int status, const char *ctype,
                                  struct MHD_Response *resp)
{
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 429 || status == 503) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", r->api->cfg.retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    if (status == 405) {
        const char *allow = NULL;
        int route;
        r->api->route_find(r->path, "", &route, &allow);
        if (allow)
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    }
    /* A response sent before the body was read (413, 401, ...): the unread
     * bytes cannot be parsed as the next request, so the connection ends. */
    if (r->has_body && r->phase != HTTP_PHASE_DISPATCHED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (r->api->state == API_DRAINING)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(r->conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    if (ok == MHD_YES) {
        r->status = status;
        r->phase = HTTP_PHASE_RESPONDED;
    }
    return ok;
}

enum MHD_Result http_respond(struct http_req *r, int status, const char *ctype, const void *data,
                             size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    return resp ? http_queue(r, status, ctype, resp) : MHD_NO;
}

/* the error answer that needs no allocation (a failed one's fallback) */
static enum MHD_Result http_respond_oom(struct http_req *r)
{
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                              "\"server_error\",\"param\":null,\"code\":null}}";
    return http_respond(r, 500, "application/json", oom, sizeof(oom) - 1);
}

enum MHD_Result http_respond_buf(struct http_req *r, int status, const char *ctype, struct buf *b)
{
    /* MUST_FREE: MHD owns b->p from here and free()s it when the response
     * is gone. A copy (MUST_COPY) of a megabyte answer (/tokenize of a 1 MiB
     * text: ~1.7 MB) is a fresh allocation written on the loop thread, at
     * the first-touch cost body_cache.h measured (~8 ms for 1.7 MB here). */
    if (!b->p)
        return http_respond(r, status, ctype, "", 0);
    struct MHD_Response *resp = MHD_create_response_from_buffer(b->len, b->p, MHD_RESPMEM_MUST_FREE);
    if (!resp)
        return MHD_NO;
    *b = (struct buf){0};
    return http_queue(r, status, ctype, resp);
}

enum MHD_Result http_respond_json(struct http_req *r, int status, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s)
        return http_respond_oom(r);
    enum MHD_Result ok = http_respond(r, status, "application/json", s, strlen(s));
    free(s);
    return ok;
}

enum MHD_Result http_respond_error(struct http_req *r, int status, const char *type,
                                   const char *param, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    struct buf b = {0};
    int rc = buf_puts(&b, "{\"error\":{\"message\":");
    rc |= buf_json_str(&b, msg, strlen(msg));
    rc |= buf_puts(&b, ",\"type\":");
    const char *t = type ? type : http_reason_type(status);
    rc |= buf_json_str(&b, t, strlen(t));
    rc |= buf_puts(&b, ",\"param\":");
    if (param)
        rc |= buf_json_str(&b, param, strlen(param));
    else
        rc |= buf_puts(&b, "null");
    rc |= buf_puts(&b, ",\"code\":");
    if (code)
        rc |= buf_json_str(&b, code, strlen(code));
    else
        rc |= buf_puts(&b, "null");
    rc |= buf_puts(&b, "}}\n");
    enum MHD_Result ok = rc ? http_respond_oom(r) : http_respond(r, status, "application/json", b.p, b.len);
    log_debug("request id=%llu error status=%d param=%s msg=\"%s\"", (unsigned long long)r->id,
              status, param ? param : "-", msg);
    buf_free(&b);
    return ok;
}

enum MHD_Result http_respond_req_error(struct http_req *r, const struct api_req_error *e)
{
    return http_respond_error(r, e->status, NULL, e->param[0] ? e->param : NULL, e->code[0] ? e->code : NULL, "%s",
                              e->message);
}

void http_suspend(struct http_req *r)
{
    if (!r->suspended) {
        MHD_suspend_connection(r->conn);
        r->suspended = 1;
    }
}

void http_resume(struct http_req *r)
{
    if (r->suspended && r->conn) {
        MHD_resume_connection(r->conn);
        r->suspended = 0;
    }
}
