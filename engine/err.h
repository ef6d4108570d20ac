/* err — the one error-code table of inferd.
 *
 * Every fallible function returns 0 (INF_OK) or a negative INF_E* code; details
 * that a user must see travel in a struct inf_error filled by parsers of
 * untrusted input (GGUF files, requests, config). Any thread may call these.
 */
#ifndef INFERD_ERR_H
#define INFERD_ERR_H

#include <stddef.h>
#include <stdint.h>

/* X(name, value, text): one table generates the enum and the strings. */
#define INF_ERRNO_MAP(X)                                              \
    X(OK, 0, "ok")                                                    \
    X(ENOMEM, -1, "out of memory")                                    \
    X(EINVAL, -2, "invalid argument")                                 \
    X(EIO, -3, "input/output error")                                  \
    X(EFORMAT, -4, "malformed file")                                  \
    X(ERANGE, -5, "value out of range")                               \
    X(ENOTFOUND, -6, "not found")                                     \
    X(ETYPE, -7, "wrong type")                                        \
    X(EUNSUPPORTED, -8, "not supported")                              \
    X(EFULL, -9, "queue or cache full")                               \
    X(ECANCELED, -10, "canceled")                                     \
    X(ETOOBIG, -11, "too large")                                      \
    X(EBUSY, -12, "busy")                                             \
    X(ESHUTDOWN, -13, "shutting down")                                \
    X(EINTERNAL, -14, "internal error")                               \
    X(EDEVICE, -15, "device error")

enum inf_errno {
#define INF__ERR_ENUM(name, val, text) INF_##name = val,
    INF_ERRNO_MAP(INF__ERR_ENUM)
#undef INF__ERR_ENUM
};

/* Message of a code; never NULL ("unknown error" for codes not in the table). */
const char *inf_strerror(int code);

/* Detail for errors in untrusted input: what was wrong and where. */
struct inf_error {
    int code;
    char msg[256];
};

/* Fill e (may be NULL) with code and a printf-style message; returns code so
 * callers can write `return inf_error_set(e, INF_EFORMAT, "...")`. */
int inf_error_set(struct inf_error *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Overflow-checked size arithmetic for untrusted sizes: 0 on success,
 * INF_ERANGE when the result does not fit. */
int inf_mul_u64(uint64_t a, uint64_t b, uint64_t *out);
int inf_add_u64(uint64_t a, uint64_t b, uint64_t *out);

#endif
