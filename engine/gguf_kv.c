/* gguf_kv — typed reads of a parsed GGUF's metadata (engine/gguf.c parses
 * and checks the file; these only convert what it indexed): integers of any
 * width and signedness into int64, F32/F64 into float, bools, strings and
 * arrays, each returning INF_EFORMAT for a key of the wrong type or a value
 * out of range instead of converting silently. */
#include "gguf.h"

#include <inttypes.h>
#include <string.h>

/* ---- typed getters ----------------------------------------------------- */

/* One integer scalar of type t at p: 0, INF_ETYPE (not an integer type) or
 * INF_ERANGE (u64 above INT64_MAX). */
static int load_int(uint32_t t, const uint8_t *p, int64_t *out)
{
    switch (t) {
    case GGUF_T_UINT8: *out = p[0]; return 0;
    case GGUF_T_INT8: *out = (int8_t)p[0]; return 0;
    case GGUF_T_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return 0; }
    case GGUF_T_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return 0; }
    case GGUF_T_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_T_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return 0; }
    case GGUF_T_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return 0; }
    case GGUF_T_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX)
            return INF_ERANGE;
        *out = (int64_t)v;
        return 0;
    }
    default: return INF_ETYPE;
    }
}

static int load_f32(uint32_t t, const uint8_t *p, float *out)
{
    int64_t i;
    if (t == GGUF_T_FLOAT32) {
        memcpy(out, p, 4);
        return 0;
    }
    if (t == GGUF_T_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        *out = (float)d;
        return 0;
    }
    int rc = load_int(t, p, &i);
    if (rc)
        return rc;
    *out = (float)i;
    return 0;
}

int gguf_kv_int(const struct gguf_kv *kv, int64_t *out)
{
    return load_int(kv->type, kv->data, out);
}

int gguf_kv_f32(const struct gguf_kv *kv, float *out)
{
    if (kv->type != GGUF_T_FLOAT32 && kv->type != GGUF_T_FLOAT64)
        return INF_ETYPE;
    return load_f32(kv->type, kv->data, out);
}

int gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return INF_ENOTFOUND;
    return gguf_kv_int(kv, out);
}

/* Any integer type whose value fits u32 (files disagree on u32 vs i32 for
 * counts and token ids); INF_ERANGE otherwise. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out)
{
    int64_t v;
    int rc = gguf_get_int(f, key, &v);
    if (rc)
        return rc;
    if (v < 0 || v > (int64_t)UINT32_MAX)
        return INF_ERANGE;
    *out = (uint32_t)v;
    return 0;
}

/* f32 or f64 (converted); integers are a type error for floats. */
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return INF_ENOTFOUND;
    return gguf_kv_f32(kv, out);
}

int gguf_get_bool(const struct gguf_file *f, const char *key, int *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return INF_ENOTFOUND;
    if (kv->type != GGUF_T_BOOL)
        return INF_ETYPE;
    *out = kv->data[0] != 0;
    return 0;
}

int gguf_kv_str(const struct gguf_kv *kv, struct gguf_str *out)
{
    if (kv->type != GGUF_T_STRING)
        return INF_ETYPE;
    memcpy(&out->len, kv->data, 8);
    out->ptr = (const char *)kv->data + 8;
    return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return INF_ENOTFOUND;
    return gguf_kv_str(kv, out);
}

int gguf_get_arr(const struct gguf_file *f, const char *key, uint32_t *elem_type, uint64_t *n)
{
    const struct gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return INF_ENOTFOUND;
    if (kv->type != GGUF_T_ARRAY)
        return INF_ETYPE;
    *elem_type = kv->arr_type;
    *n = kv->n;
    return 0;
}

/* Integers only: a float array is INF_ETYPE (no silent truncation). */
int gguf_arr_int(const struct gguf_kv *kv, uint64_t i, int64_t *out)
{
    if (kv->type != GGUF_T_ARRAY || kv->arr_type == GGUF_T_STRING || kv->arr_type == GGUF_T_FLOAT32 ||
        kv->arr_type == GGUF_T_FLOAT64)
        return INF_ETYPE;
    if (i >= kv->n)
        return INF_ERANGE;
    return load_int(kv->arr_type, kv->data + i * gguf_vtype_size(kv->arr_type), out);
}

int gguf_arr_f32(const struct gguf_kv *kv, uint64_t i, float *out)
{
    if (kv->type != GGUF_T_ARRAY || kv->arr_type == GGUF_T_STRING)
        return INF_ETYPE;
    if (i >= kv->n)
        return INF_ERANGE;
    return load_f32(kv->arr_type, kv->data + i * gguf_vtype_size(kv->arr_type), out);
}

/* The strings were bounds-checked at open: a plain walk is safe. */
int gguf_arr_strs(const struct gguf_kv *kv, struct gguf_str *out)
{
    const uint8_t *p = kv->data;
    if (kv->type != GGUF_T_ARRAY || kv->arr_type != GGUF_T_STRING)
        return INF_ETYPE;
    for (uint64_t i = 0; i < kv->n; i++) {
        memcpy(&out[i].len, p, 8);
        out[i].ptr = (const char *)p + 8;
        p += 8 + out[i].len;
    }
    return 0;
}
