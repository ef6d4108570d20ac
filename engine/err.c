/* err — error strings and overflow-checked arithmetic. Thread-safe (no state). */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>

const char *inf_strerror(int code)
{
    switch (code) {
#define INF__ERR_STR(name, val, text) \
    case val:                         \
        return text;
        INF_ERRNO_MAP(INF__ERR_STR)
#undef INF__ERR_STR
    }
    return "unknown error";
}

int inf_error_set(struct inf_error *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

int inf_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (__builtin_mul_overflow(a, b, out))
        return INF_ERANGE;
    return INF_OK;
}

int inf_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (__builtin_add_overflow(a, b, out))
        return INF_ERANGE;
    return INF_OK;
}
