/* gguf — bounds-checked GGUF v2/v3 reader over mmap (see gguf.h).
 *
 * File layout (little-endian):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { str key, u32 type, value },
 *   n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   padding to general.alignment, then the data section (tensor offsets are
 *   relative to its start). str = u64 length + bytes; array = u32 element
 *   type + u64 count + elements.
 *
 * Invariant of the parser: every read goes through rd_need(), which checks the
 * length against the bytes left with no arithmetic that can overflow, and
 * every count read from the file is checked against the bytes left (each
 * item has a known minimum size) BEFORE it sizes an allocation or a loop.
 * Allocations are therefore bounded by a small multiple of the file size.
 * All errors go through one inf_error_set() naming the problem and the file
 * offset; the single cleanup path (gguf_close) frees whatever was built.
 *
 * Threads: open/close from any thread; a file is immutable once open.
 * The typed getters of its metadata are engine/gguf_kv.c.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian values with memcpy: port it for big-endian hosts"
#endif

/* Smallest encodings, used to bound counts before allocating:
 * a kv is a key (u64 length + at least 1 byte), a u32 type and at least a
 * 1-byte value; a tensor info is a name (u64 + at least 1 byte), u32 n_dims,
 * one u64 dimension, u32 type and u64 offset. */
#define GGUF_MIN_KV_BYTES (8 + 1 + 4 + 1)
#define GGUF_MIN_TINFO_BYTES (8 + 1 + 4 + 8 + 4 + 8)
#define GGUF_HEADER_BYTES (4 + 4 + 8 + 8)

struct gguf_file {
    const uint8_t *base;
    uint64_t size;
    int mapped; /* base came from mmap (gguf_open) */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    int64_t n_tensors;
    struct gguf_kv *kvs;
    struct gguf_tensor *tensors;
    /* open-addressing hash tables of index+1 (0 = empty), size = mask+1 */
    uint32_t *kv_hash;
    uint64_t kv_mask;
    uint32_t *t_hash;
    uint64_t t_mask;
};

/* ---- reading cursor ---------------------------------------------------- */

struct rd {
    const uint8_t *p;
    uint64_t size;
    uint64_t off;
    struct inf_error *err;
};

static uint64_t rd_left(const struct rd *r)
{
    return r->size - r->off;
}

static int rd_need(struct rd *r, uint64_t n, const char *what)
{
    if (n > rd_left(r))
        return inf_error_set(r->err, INF_EFORMAT,
                             "gguf: truncated file: %s needs %" PRIu64 " bytes but only %" PRIu64
                             " are left at offset %" PRIu64,
                             what, n, rd_left(r), r->off);
    return 0;
}

static int rd_u32(struct rd *r, uint32_t *v, const char *what)
{
    int rc = rd_need(r, 4, what);
    if (rc)
        return rc;
    memcpy(v, r->p + r->off, 4);
    r->off += 4;
    return 0;
}

static int rd_u64(struct rd *r, uint64_t *v, const char *what)
{
    int rc = rd_need(r, 8, what);
    if (rc)
        return rc;
    memcpy(v, r->p + r->off, 8);
    r->off += 8;
    return 0;
}

/* A string: u64 length then bytes, both inside the file. */
static int rd_str(struct rd *r, struct gguf_str *s, const char *what)
{
    uint64_t at = r->off, len;
    int rc = rd_u64(r, &len, what);
    if (rc)
        return rc;
    if (len > rd_left(r))
        return inf_error_set(r->err, INF_EFORMAT,
                             "gguf: %s length %" PRIu64 " runs past the end of the file (%" PRIu64
                             " bytes left) at offset %" PRIu64,
                             what, len, rd_left(r), at);
    s->ptr = (const char *)(r->p + r->off);
    s->len = len;
    r->off += len;
    return 0;
}

/* A printable, bounded copy of an untrusted name for messages. */
static const char *show(char *buf, size_t cap, const char *p, uint64_t len)
{
    size_t n = 0;
    for (uint64_t i = 0; i < len && n + 4 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        buf[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (len > 0 && n + 4 >= cap && n < len) {
        buf[n++] = '.';
        buf[n++] = '.';
        buf[n++] = '.';
    }
    buf[n] = '\0';
    return buf;
}

/* ---- value types ------------------------------------------------------- */

static const struct {
    const char *name;
    uint8_t size;
} gguf_vtypes[GGUF_T_COUNT] = {
    [GGUF_T_UINT8] = {"u8", 1},   [GGUF_T_INT8] = {"i8", 1},    [GGUF_T_UINT16] = {"u16", 2},
    [GGUF_T_INT16] = {"i16", 2},  [GGUF_T_UINT32] = {"u32", 4}, [GGUF_T_INT32] = {"i32", 4},
    [GGUF_T_FLOAT32] = {"f32", 4}, [GGUF_T_BOOL] = {"bool", 1}, [GGUF_T_STRING] = {"str", 0},
    [GGUF_T_ARRAY] = {"arr", 0},  [GGUF_T_UINT64] = {"u64", 8}, [GGUF_T_INT64] = {"i64", 8},
    [GGUF_T_FLOAT64] = {"f64", 8},
};

const char *gguf_vtype_name(uint32_t t)
{
    return t < GGUF_T_COUNT ? gguf_vtypes[t].name : "?";
}

size_t gguf_vtype_size(uint32_t t)
{
    return t < GGUF_T_COUNT ? gguf_vtypes[t].size : 0;
}

int gguf_str_eq(struct gguf_str a, const char *s)
{
    size_t n = strlen(s);
    return a.len == n && memcmp(a.ptr, s, n) == 0;
}

/* ---- hash index (keys and tensor names) -------------------------------- */

static uint64_t hash_bytes(const char *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int hash_alloc(uint64_t n, uint32_t **tab, uint64_t *mask)
{
    uint64_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    *tab = calloc(cap, sizeof(**tab));
    if (!*tab)
        return INF_ENOMEM;
    *mask = cap - 1;
    return 0;
}

/* ---- parsing ----------------------------------------------------------- */

static int parse_kv(struct rd *r, struct gguf_kv *kv, int64_t idx)
{
    char nb[64];
    int rc;

    kv->key_offset = r->off;
    if ((rc = rd_str(r, &kv->key, "key")))
        return rc;
    if (kv->key.len == 0)
        return inf_error_set(r->err, INF_EFORMAT, "gguf: key/value %" PRId64 " has an empty key at offset %" PRIu64,
                             idx, kv->key_offset);
    uint64_t toff = r->off;
    if ((rc = rd_u32(r, &kv->type, "value type")))
        return rc;
    if (kv->type >= GGUF_T_COUNT)
        return inf_error_set(r->err, INF_EFORMAT,
                             "gguf: unknown value type %" PRIu32 " for key '%s' at offset %" PRIu64, kv->type,
                             show(nb, sizeof(nb), kv->key.ptr, kv->key.len), toff);
    kv->arr_type = 0;
    kv->n = 1;

    if (kv->type == GGUF_T_ARRAY) {
        uint64_t aoff = r->off;
        if ((rc = rd_u32(r, &kv->arr_type, "array element type")))
            return rc;
        if (kv->arr_type == GGUF_T_ARRAY)
            return inf_error_set(r->err, INF_EFORMAT,
                                 "gguf: array of arrays (not supported) for key '%s' at offset %" PRIu64,
                                 show(nb, sizeof(nb), kv->key.ptr, kv->key.len), aoff);
        if (kv->arr_type >= GGUF_T_COUNT)
            return inf_error_set(r->err, INF_EFORMAT,
                                 "gguf: unknown array element type %" PRIu32 " for key '%s' at offset %" PRIu64,
                                 kv->arr_type, show(nb, sizeof(nb), kv->key.ptr, kv->key.len), aoff);
        uint64_t noff = r->off;
        if ((rc = rd_u64(r, &kv->n, "array count")))
            return rc;
        kv->data = r->p + r->off;
        kv->offset = r->off;
        /* Each element takes at least esize bytes (8 for a string's length):
         * compare by division so a count like 2^62 cannot overflow. */
        uint64_t esize = kv->arr_type == GGUF_T_STRING ? 8 : gguf_vtypes[kv->arr_type].size;
        if (kv->n > rd_left(r) / esize)
            return inf_error_set(r->err, INF_EFORMAT,
                                 "gguf: array count %" PRIu64 " of key '%s' needs more than the %" PRIu64
                                 " bytes left at offset %" PRIu64,
                                 kv->n, show(nb, sizeof(nb), kv->key.ptr, kv->key.len), rd_left(r), noff);
        if (kv->arr_type == GGUF_T_STRING) {
            for (uint64_t i = 0; i < kv->n; i++) {
                struct gguf_str s;
                if ((rc = rd_str(r, &s, "array string")))
                    return rc;
            }
        } else {
            r->off += kv->n * esize;
        }
        kv->size = r->off - kv->offset;
        return 0;
    }

    kv->data = r->p + r->off;
    kv->offset = r->off;
    if (kv->type == GGUF_T_STRING) {
        struct gguf_str s;
        if ((rc = rd_str(r, &s, "string value")))
            return rc;
    } else {
        if ((rc = rd_need(r, gguf_vtypes[kv->type].size, "value")))
            return rc;
        r->off += gguf_vtypes[kv->type].size;
    }
    kv->size = r->off - kv->offset;
    return 0;
}

static int index_kvs(struct gguf_file *f, struct inf_error *err)
{
    char nb[64];
    if (hash_alloc((uint64_t)f->n_kv, &f->kv_hash, &f->kv_mask))
        return inf_error_set(err, INF_ENOMEM, "gguf: out of memory indexing %" PRId64 " keys", f->n_kv);
    for (int64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kvs[i];
        uint64_t h = hash_bytes(kv->key.ptr, kv->key.len) & f->kv_mask;
        while (f->kv_hash[h]) {
            const struct gguf_kv *o = &f->kvs[f->kv_hash[h] - 1];
            if (o->key.len == kv->key.len && memcmp(o->key.ptr, kv->key.ptr, kv->key.len) == 0)
                return inf_error_set(err, INF_EFORMAT,
                                     "gguf: duplicate key '%s' at offset %" PRIu64 " (first at offset %" PRIu64 ")",
                                     show(nb, sizeof(nb), kv->key.ptr, kv->key.len), kv->key_offset,
                                     o->key_offset);
            h = (h + 1) & f->kv_mask;
        }
        f->kv_hash[h] = (uint32_t)(i + 1);
    }
    return 0;
}

static int parse_alignment(struct gguf_file *f, struct inf_error *err)
{
    const struct gguf_kv *kv = gguf_find_kv(f, "general.alignment");
    uint32_t a;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!kv)
        return 0;
    if (kv->type != GGUF_T_UINT32)
        return inf_error_set(err, INF_EFORMAT,
                             "gguf: general.alignment has type %s, expected u32 at offset %" PRIu64,
                             gguf_vtype_name(kv->type), kv->offset);
    memcpy(&a, kv->data, 4);
    if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
        return inf_error_set(err, INF_EFORMAT,
                             "gguf: general.alignment %" PRIu32 " is not a power of two in [1, %u] at offset %" PRIu64,
                             a, GGUF_MAX_ALIGNMENT, kv->offset);
    f->alignment = a;
    return 0;
}

static int parse_tensor_info(struct rd *r, struct gguf_tensor *t, int64_t idx)
{
    struct gguf_str name;
    char nb[80];
    uint64_t at, ne;
    int rc;

    t->info_offset = r->off;
    if ((rc = rd_str(r, &name, "tensor name")))
        return rc;
    if (name.len == 0)
        return inf_error_set(r->err, INF_EFORMAT, "gguf: tensor %" PRId64 " has an empty name at offset %" PRIu64, idx,
                             t->info_offset);
    if (name.len >= GGUF_MAX_NAME)
        return inf_error_set(r->err, INF_EFORMAT,
                             "gguf: tensor name '%s' is %" PRIu64 " bytes (max %d) at offset %" PRIu64,
                             show(nb, 48, name.ptr, name.len), name.len, GGUF_MAX_NAME - 1, t->info_offset);
    if (memchr(name.ptr, '\0', name.len))
        return inf_error_set(r->err, INF_EFORMAT, "gguf: tensor name '%s' contains a NUL byte at offset %" PRIu64,
                             show(nb, sizeof(nb), name.ptr, name.len), t->info_offset);
    memcpy(t->name, name.ptr, name.len);
    t->name[name.len] = '\0';

    at = r->off;
    if ((rc = rd_u32(r, &t->n_dims, "tensor n_dims")))
        return rc;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return inf_error_set(r->err, INF_EFORMAT,
                             "gguf: tensor '%s' has %" PRIu32 " dimensions (must be 1..%d) at offset %" PRIu64,
                             t->name, t->n_dims, GGUF_MAX_DIMS, at);
    for (uint32_t j = 0; j < GGUF_MAX_DIMS; j++)
        t->ne[j] = 1;
    for (uint32_t j = 0; j < t->n_dims; j++) {
        at = r->off;
        if ((rc = rd_u64(r, &ne, "tensor dimension")))
            return rc;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return inf_error_set(r->err, INF_EFORMAT,
                                 "gguf: tensor '%s' dimension %" PRIu32 " is %" PRId64 " (must be > 0) at offset %" PRIu64,
                                 t->name, j, (int64_t)ne, at);
        t->ne[j] = (int64_t)ne;
    }
    at = r->off;
    if ((rc = rd_u32(r, &t->type, "tensor type")))
        return rc;
    int blck = quant_block_elems((int)t->type);
    size_t bbytes = quant_block_bytes((int)t->type);
    if (t->type >= (uint32_t)QT_COUNT || blck <= 0 || bbytes == 0)
        return inf_error_set(r->err, INF_EFORMAT,
                             "gguf: tensor '%s' has unknown type %" PRIu32 " at offset %" PRIu64, t->name, t->type, at);
    if (t->ne[0] % blck != 0)
        return inf_error_set(r->err, INF_EFORMAT,
                             "gguf: tensor '%s' row length %" PRId64 " is not a multiple of the %s block size %d at offset %" PRIu64,
                             t->name, t->ne[0], quant_type_name((int)t->type), blck, at);
    /* Element count and byte size, overflow-checked: the product must fit
     * int64_t (ne is signed everywhere downstream). */
    uint64_t n = 1, bytes;
    if (inf_mul_u64((uint64_t)(t->ne[0] / blck), bbytes, &bytes))
        goto overflow;
    for (uint32_t j = 0; j < GGUF_MAX_DIMS; j++) {
        if (inf_mul_u64(n, (uint64_t)t->ne[j], &n) || n > (uint64_t)INT64_MAX)
            goto overflow;
        if (j > 0 && (inf_mul_u64(bytes, (uint64_t)t->ne[j], &bytes) || bytes > (uint64_t)INT64_MAX))
            goto overflow;
    }
    t->n_elems = n;
    t->n_bytes = bytes;
    if ((rc = rd_u64(r, &t->offset, "tensor offset")))
        return rc;
    return 0;
overflow:
    return inf_error_set(r->err, INF_EFORMAT,
                         "gguf: tensor '%s' shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                         "] overflows the element count or byte size at offset %" PRIu64,
                         t->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], t->info_offset);
}

static int index_tensors(struct gguf_file *f, struct inf_error *err)
{
    if (hash_alloc((uint64_t)f->n_tensors, &f->t_hash, &f->t_mask))
        return inf_error_set(err, INF_ENOMEM, "gguf: out of memory indexing %" PRId64 " tensors", f->n_tensors);
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        uint64_t h = hash_bytes(t->name, strlen(t->name)) & f->t_mask;
        while (f->t_hash[h]) {
            const struct gguf_tensor *o = &f->tensors[f->t_hash[h] - 1];
            if (!strcmp(o->name, t->name))
                return inf_error_set(err, INF_EFORMAT,
                                     "gguf: duplicate tensor name '%s' at offset %" PRIu64 " (first at offset %" PRIu64 ")",
                                     t->name, t->info_offset, o->info_offset);
            h = (h + 1) & f->t_mask;
        }
        f->t_hash[h] = (uint32_t)(i + 1);
    }
    return 0;
}

/* Data placement: aligned and inside the file. */
static int check_tensor_bounds(struct gguf_file *f, struct inf_error *err)
{
    uint64_t data_size = f->size - f->data_offset;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0)
            return inf_error_set(err, INF_EFORMAT,
                                 "gguf: tensor '%s' data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64
                                 " at offset %" PRIu64,
                                 t->name, t->offset, f->alignment, t->info_offset);
        if (t->offset > data_size || t->n_bytes > data_size - t->offset)
            return inf_error_set(err, INF_EFORMAT,
                                 "gguf: tensor '%s' data [%" PRIu64 ", +%" PRIu64 ") runs past the end of the file"
                                 " (data section holds %" PRIu64 " bytes) at offset %" PRIu64,
                                 t->name, t->offset, t->n_bytes, data_size, t->info_offset);
        t->data = f->base + f->data_offset + t->offset;
    }
    return 0;
}

/* No two tensors' data overlap. */
static int check_tensor_overlap(struct gguf_file *f, struct inf_error *err)
{
    if (f->n_tensors < 2)
        return 0;
    /* Sort an index by offset (merge sort: qsort has no context argument
     * and a static one would not be thread-safe); neighbours must not overlap. */
    uint32_t *ix = malloc((size_t)f->n_tensors * sizeof(*ix));
    if (!ix)
        return inf_error_set(err, INF_ENOMEM, "gguf: out of memory sorting %" PRId64 " tensors", f->n_tensors);
    for (int64_t i = 0; i < f->n_tensors; i++)
        ix[i] = (uint32_t)i;
    uint32_t *tmp = malloc((size_t)f->n_tensors * sizeof(*tmp));
    if (!tmp) {
        free(ix);
        return inf_error_set(err, INF_ENOMEM, "gguf: out of memory sorting %" PRId64 " tensors", f->n_tensors);
    }
    size_t n = (size_t)f->n_tensors;
    uint32_t *a = ix, *b = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                b[k++] = f->tensors[a[j]].offset < f->tensors[a[i]].offset ? a[j++] : a[i++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < hi)
                b[k++] = a[j++];
        }
        uint32_t *s = a;
        a = b;
        b = s;
    }
    int rc = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        const struct gguf_tensor *p = &f->tensors[a[i]], *q = &f->tensors[a[i + 1]];
        if (p->offset + p->n_bytes > q->offset) {
            rc = inf_error_set(err, INF_EFORMAT,
                               "gguf: tensor '%s' data [%" PRIu64 ", +%" PRIu64 ") overlaps tensor '%s' at %" PRIu64
                               " at offset %" PRIu64,
                               q->name, q->offset, q->n_bytes, p->name, p->offset, q->info_offset);
            break;
        }
    }
    free(ix);
    free(tmp);
    return rc;
}

static int gguf_parse(struct gguf_file *f, struct inf_error *err)
{
    struct rd r = {f->base, f->size, 0, err};
    uint64_t n_tensors, n_kv, need, t;
    uint32_t version;
    int rc;

    if (f->size < 4 || memcmp(f->base, "GGUF", 4) != 0) {
        if (f->size < 4)
            return inf_error_set(err, INF_EFORMAT, "gguf: file of %" PRIu64 " bytes is too short for the magic at offset 0",
                                 f->size);
        return inf_error_set(err, INF_EFORMAT,
                             "gguf: bad magic %02x %02x %02x %02x (expected \"GGUF\") at offset 0",
                             f->base[0], f->base[1], f->base[2], f->base[3]);
    }
    r.off = 4;
    if ((rc = rd_u32(&r, &version, "version")))
        return rc;
    if (version != 2 && version != 3) {
        uint32_t sw = __builtin_bswap32(version);
        if (version == 1)
            return inf_error_set(err, INF_EUNSUPPORTED, "gguf: version 1 is not supported (v2 and v3 are) at offset 4");
        if (sw >= 1 && sw <= 3)
            return inf_error_set(err, INF_EUNSUPPORTED,
                                 "gguf: version 0x%08" PRIx32 " looks byte-swapped: big-endian GGUF is not supported at offset 4",
                                 version);
        return inf_error_set(err, INF_EUNSUPPORTED, "gguf: unsupported version %" PRIu32 " (v2 and v3 are) at offset 4",
                             version);
    }
    f->version = version;
    if ((rc = rd_u64(&r, &n_tensors, "tensor count")) || (rc = rd_u64(&r, &n_kv, "key/value count")))
        return rc;
    /* Bound both counts by what the rest of the file could possibly hold. */
    if (n_kv > rd_left(&r) / GGUF_MIN_KV_BYTES)
        return inf_error_set(err, INF_EFORMAT,
                             "gguf: key/value count %" PRIu64 " is more than the %" PRIu64 " bytes left can hold at offset 16",
                             n_kv, rd_left(&r));
    if (n_tensors > rd_left(&r) / GGUF_MIN_TINFO_BYTES)
        return inf_error_set(err, INF_EFORMAT,
                             "gguf: tensor count %" PRIu64 " is more than the %" PRIu64 " bytes left can hold at offset 8",
                             n_tensors, rd_left(&r));
    need = n_kv * GGUF_MIN_KV_BYTES + n_tensors * GGUF_MIN_TINFO_BYTES; /* both < size: no overflow */
    if (need > rd_left(&r))
        return inf_error_set(err, INF_EFORMAT,
                             "gguf: %" PRIu64 " tensors and %" PRIu64 " key/values need at least %" PRIu64
                             " bytes but only %" PRIu64 " are left at offset 8",
                             n_tensors, n_kv, need, rd_left(&r));
    if (n_kv > GGUF_MAX_KV || n_tensors > GGUF_MAX_TENSORS)
        return inf_error_set(err, INF_ETOOBIG,
                             "gguf: %" PRIu64 " tensors / %" PRIu64 " key/values exceed the limits (%u / %u) at offset 8",
                             n_tensors, n_kv, GGUF_MAX_TENSORS, GGUF_MAX_KV);

    f->kvs = calloc(n_kv ? n_kv : 1, sizeof(*f->kvs));
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof(*f->tensors));
    if (!f->kvs || !f->tensors)
        return inf_error_set(err, INF_ENOMEM, "gguf: out of memory for %" PRIu64 " tensors / %" PRIu64 " key/values",
                             n_tensors, n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        if ((rc = parse_kv(&r, &f->kvs[i], (int64_t)i)))
            return rc;
        f->n_kv = (int64_t)i + 1;
    }
    if ((rc = index_kvs(f, err)) || (rc = parse_alignment(f, err)))
        return rc;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if ((rc = parse_tensor_info(&r, &f->tensors[i], (int64_t)i)))
            return rc;
        f->n_tensors = (int64_t)i + 1;
    }
    /* The data section starts at the next multiple of the alignment. A file
     * without tensors (vocab-only) may end before that padding. */
    t = r.off % f->alignment;
    f->data_offset = r.off + (t ? f->alignment - t : 0); /* r.off <= size < 2^63: no overflow */
    if (f->data_offset > f->size) {
        if (f->n_tensors > 0)
            return inf_error_set(err, INF_EFORMAT,
                                 "gguf: truncated file: the data section would start at %" PRIu64
                                 " past the end of the file (%" PRIu64 " bytes) at offset %" PRIu64,
                                 f->data_offset, f->size, r.off);
        f->data_offset = f->size;
    }
    /* Cheap per-tensor bounds first (a truncated file fails there), then the
     * name index and the overlap check, which allocate. */
    if ((rc = check_tensor_bounds(f, err)) || (rc = index_tensors(f, err)))
        return rc;
    return check_tensor_overlap(f, err);
}

/* ---- open / close ------------------------------------------------------ */

static int gguf_finish_open(struct gguf_file *f, struct gguf_file **out, struct inf_error *err)
{
    int rc = gguf_parse(f, err);
    if (rc) {
        gguf_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_open_mem(const void *buf, size_t len, struct gguf_file **out, struct inf_error *err)
{
    struct gguf_file *f;
    *out = NULL;
    if (!buf && len)
        return inf_error_set(err, INF_EINVAL, "gguf: NULL buffer");
    f = calloc(1, sizeof(*f));
    if (!f)
        return inf_error_set(err, INF_ENOMEM, "gguf: out of memory");
    f->base = buf ? buf : (const uint8_t *)"";
    f->size = len;
    return gguf_finish_open(f, out, err);
}

int gguf_open(const char *path, struct gguf_file **out, struct inf_error *err)
{
    struct gguf_file *f;
    struct stat st;
    void *p;
    int fd, e;

    *out = NULL;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        e = errno;
        return inf_error_set(err, INF_EIO, "gguf: open() \"%s\" failed (%d: %s)", path, e, strerror(e));
    }
    if (fstat(fd, &st) != 0) {
        e = errno;
        close(fd);
        return inf_error_set(err, INF_EIO, "gguf: fstat() \"%s\" failed (%d: %s)", path, e, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return inf_error_set(err, INF_EIO, "gguf: \"%s\" is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return inf_error_set(err, INF_EFORMAT, "gguf: \"%s\" is empty (0 bytes) at offset 0", path);
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    e = errno;
    close(fd); /* the mapping keeps the file referenced */
    if (p == MAP_FAILED)
        return inf_error_set(err, INF_EIO, "gguf: mmap() \"%s\" failed (%d: %s)", path, e, strerror(e));
    f = calloc(1, sizeof(*f));
    if (!f) {
        munmap(p, (size_t)st.st_size);
        return inf_error_set(err, INF_ENOMEM, "gguf: out of memory");
    }
    f->base = p;
    f->size = (uint64_t)st.st_size;
    f->mapped = 1;
    return gguf_finish_open(f, out, err);
}

void gguf_close(struct gguf_file *f)
{
    if (!f)
        return;
    if (f->mapped)
        munmap((void *)f->base, (size_t)f->size);
    free(f->kvs);
    free(f->tensors);
    free(f->kv_hash);
    free(f->t_hash);
    free(f);
}

/* ---- accessors --------------------------------------------------------- */

uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
uint64_t gguf_file_size(const struct gguf_file *f) { return f->size; }
uint64_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const struct gguf_file *f) { return f->data_offset; }
const void *gguf_base(const struct gguf_file *f) { return f->base; }
int64_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }
int64_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, int64_t i)
{
    return i >= 0 && i < f->n_kv ? &f->kvs[i] : NULL;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, int64_t i)
{
    return i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key)
{
    size_t n = strlen(key);
    if (!f->kv_hash)
        return NULL;
    for (uint64_t h = hash_bytes(key, n) & f->kv_mask; f->kv_hash[h]; h = (h + 1) & f->kv_mask) {
        const struct gguf_kv *kv = &f->kvs[f->kv_hash[h] - 1];
        if (kv->key.len == n && memcmp(kv->key.ptr, key, n) == 0)
            return kv;
    }
    return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
    if (!f->t_hash)
        return NULL;
    for (uint64_t h = hash_bytes(name, strlen(name)) & f->t_mask; f->t_hash[h]; h = (h + 1) & f->t_mask) {
        const struct gguf_tensor *t = &f->tensors[f->t_hash[h] - 1];
        if (!strcmp(t->name, name))
            return t;
    }
    return NULL;
}
