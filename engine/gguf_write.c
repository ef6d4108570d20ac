/* gguf_write — GGUF writer (see gguf_write.h for the contract).
 *
 * Keys are kept as separately allocated entries holding the serialized value
 * exactly as it appears in the file after the u32 type (a scalar's bytes; a
 * string's u64 length + bytes; an array's u32 element type, u64 count and
 * elements), so writing is a concatenation and copying a kv from a reader is
 * one memcpy. The whole file is laid out first (exact size known), then
 * written into one destination: a malloc'd buffer, or the output file with
 * pwrite. Tensor data is produced in chunks of rows, by one or more threads
 * that take chunks from an atomic counter.
 *
 * Threads: a writer belongs to one thread; fill callbacks run on workers.
 */
#include "gguf_write.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <threads.h> /* C11 threads: <pthread.h> would pull <sched.h>, shadowed by engine/sched.h */
#include <unistd.h>

#include "quant.h"

#define GW_CHUNK_BYTES (4u << 20) /* rows per work item: about this many bytes */
#define GW_MAX_THREADS 64

struct gw_kv {
    char *key;
    uint32_t type;
    uint8_t *val; /* serialized value (see file comment) */
    uint64_t len;
};

struct gw_tensor {
    struct gguf_writer_tensor info;
    const void *data;
    gguf_writer_fill_fn fill;
    void *ctx;
};

struct gguf_writer {
    uint32_t version;
    uint32_t alignment;
    int threads;
    struct gw_kv *kvs;
    int64_t n_kv, cap_kv;
    struct gw_tensor *tensors;
    int64_t n_tensors, cap_tensors;
};

int gguf_writer_new(struct gguf_writer **out)
{
    struct gguf_writer *w = calloc(1, sizeof(*w));
    *out = w;
    if (!w)
        return INF_ENOMEM;
    w->version = 3;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    w->threads = 1;
    return 0;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    free(w->kvs);
    free(w->tensors);
    free(w);
}

void gguf_writer_set_version(struct gguf_writer *w, uint32_t version)
{
    w->version = version;
}

void gguf_writer_set_threads(struct gguf_writer *w, int n)
{
    w->threads = n < 1 ? 1 : n > GW_MAX_THREADS ? GW_MAX_THREADS : n;
}

/* ---- keys -------------------------------------------------------------- */

static int64_t gw_find_kv(const struct gguf_writer *w, const char *key)
{
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kvs[i].key, key))
            return i;
    return -1;
}

/* Store (key, type, value bytes); takes ownership of val. */
static int gw_put(struct gguf_writer *w, const char *key, uint32_t type, uint8_t *val, uint64_t len)
{
    int64_t i;
    if (!key || !*key) {
        free(val);
        return INF_EINVAL;
    }
    i = gw_find_kv(w, key);
    if (i >= 0) {
        free(w->kvs[i].val);
        w->kvs[i].type = type;
        w->kvs[i].val = val;
        w->kvs[i].len = len;
        return 0;
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        struct gw_kv *k = realloc(w->kvs, (size_t)cap * sizeof(*k));
        if (!k) {
            free(val);
            return INF_ENOMEM;
        }
        w->kvs = k;
        w->cap_kv = cap;
    }
    char *kc = strdup(key);
    if (!kc) {
        free(val);
        return INF_ENOMEM;
    }
    w->kvs[w->n_kv++] = (struct gw_kv){kc, type, val, len};
    return 0;
}

/* Copy len bytes into a fresh allocation (malloc(0) may return NULL: use 1). */
static uint8_t *gw_dup(const void *p, uint64_t len)
{
    uint8_t *v = malloc(len ? (size_t)len : 1);
    if (v && len)
        memcpy(v, p, (size_t)len);
    return v;
}

static int gw_scalar(struct gguf_writer *w, const char *key, uint32_t type, const void *v, size_t n)
{
    uint8_t *val = gw_dup(v, n);
    if (!val)
        return INF_ENOMEM;
    return gw_put(w, key, type, val, n);
}

int gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v) { return gw_scalar(w, key, GGUF_T_UINT8, &v, 1); }
int gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v) { return gw_scalar(w, key, GGUF_T_INT8, &v, 1); }
int gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v) { return gw_scalar(w, key, GGUF_T_UINT16, &v, 2); }
int gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v) { return gw_scalar(w, key, GGUF_T_INT16, &v, 2); }
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v) { return gw_scalar(w, key, GGUF_T_UINT32, &v, 4); }
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v) { return gw_scalar(w, key, GGUF_T_INT32, &v, 4); }
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v) { return gw_scalar(w, key, GGUF_T_UINT64, &v, 8); }
int gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v) { return gw_scalar(w, key, GGUF_T_INT64, &v, 8); }
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v) { return gw_scalar(w, key, GGUF_T_FLOAT32, &v, 4); }
int gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v) { return gw_scalar(w, key, GGUF_T_FLOAT64, &v, 8); }

int gguf_writer_set_bool(struct gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return gw_scalar(w, key, GGUF_T_BOOL, &b, 1);
}

int gguf_writer_set_strn(struct gguf_writer *w, const char *key, const char *s, uint64_t len)
{
    uint8_t *val;
    if (len > SIZE_MAX - 8 || (!s && len))
        return INF_EINVAL;
    val = malloc((size_t)(8 + len));
    if (!val)
        return INF_ENOMEM;
    memcpy(val, &len, 8);
    if (len)
        memcpy(val + 8, s, (size_t)len);
    return gw_put(w, key, GGUF_T_STRING, val, 8 + len);
}

int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s)
{
    if (!s)
        return INF_EINVAL;
    return gguf_writer_set_strn(w, key, s, strlen(s));
}

static void gw_arr_header(uint8_t *val, uint32_t elem_type, uint64_t n)
{
    memcpy(val, &elem_type, 4);
    memcpy(val + 4, &n, 8);
}

int gguf_writer_set_arr(struct gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n)
{
    size_t es = gguf_vtype_size(elem_type);
    uint64_t bytes;
    uint8_t *val;
    if (es == 0 || (!data && n) || inf_mul_u64(n, es, &bytes) || bytes > SIZE_MAX - 12)
        return INF_EINVAL;
    val = malloc((size_t)(12 + bytes));
    if (!val)
        return INF_ENOMEM;
    gw_arr_header(val, elem_type, n);
    if (bytes)
        memcpy(val + 12, data, (size_t)bytes);
    return gw_put(w, key, GGUF_T_ARRAY, val, 12 + bytes);
}

static int gw_arr_strs(struct gguf_writer *w, const char *key, const char *const *cs, const struct gguf_str *gs,
                       uint64_t n)
{
    uint64_t total = 12, len;
    uint8_t *val, *p;
    for (uint64_t i = 0; i < n; i++) {
        len = cs ? strlen(cs[i]) : gs[i].len;
        if (inf_add_u64(total, 8 + len, &total) || total > SIZE_MAX)
            return INF_EINVAL;
    }
    val = malloc((size_t)total);
    if (!val)
        return INF_ENOMEM;
    gw_arr_header(val, GGUF_T_STRING, n);
    p = val + 12;
    for (uint64_t i = 0; i < n; i++) {
        const char *s = cs ? cs[i] : gs[i].ptr;
        len = cs ? strlen(cs[i]) : gs[i].len;
        memcpy(p, &len, 8);
        if (len)
            memcpy(p + 8, s, (size_t)len);
        p += 8 + len;
    }
    return gw_put(w, key, GGUF_T_ARRAY, val, total);
}

int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *s, uint64_t n)
{
    if (!s && n)
        return INF_EINVAL;
    return gw_arr_strs(w, key, s, NULL, n);
}

int gguf_writer_set_arr_gstr(struct gguf_writer *w, const char *key, const struct gguf_str *s, uint64_t n)
{
    if (!s && n)
        return INF_EINVAL;
    return gw_arr_strs(w, key, NULL, s, n);
}

int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv)
{
    uint64_t hdr = kv->type == GGUF_T_ARRAY ? 12 : 0;
    uint8_t *val;
    char *key;
    int rc;
    if (kv->key.len == 0 || memchr(kv->key.ptr, '\0', kv->key.len) || kv->size > SIZE_MAX - 12)
        return INF_EINVAL; /* a key with a NUL cannot be named by a C string */
    val = malloc((size_t)(hdr + kv->size + (hdr + kv->size == 0)));
    key = malloc((size_t)kv->key.len + 1);
    if (!val || !key) {
        free(val);
        free(key);
        return INF_ENOMEM;
    }
    if (hdr)
        gw_arr_header(val, kv->arr_type, kv->n);
    memcpy(val + hdr, kv->data, (size_t)kv->size);
    memcpy(key, kv->key.ptr, (size_t)kv->key.len);
    key[kv->key.len] = '\0';
    rc = gw_put(w, key, kv->type, val, hdr + kv->size);
    free(key);
    return rc;
}

int gguf_writer_copy_kvs(struct gguf_writer *w, const struct gguf_file *f, const char *prefix)
{
    size_t pl = strlen(prefix);
    for (int64_t i = 0; i < gguf_n_kv(f); i++) {
        const struct gguf_kv *kv = gguf_kv_at(f, i);
        if (kv->key.len < pl || memcmp(kv->key.ptr, prefix, pl) != 0)
            continue;
        int rc = gguf_writer_copy_kv(w, kv);
        if (rc)
            return rc;
    }
    return 0;
}

int gguf_writer_remove_kv(struct gguf_writer *w, const char *key)
{
    int64_t i = gw_find_kv(w, key);
    if (i < 0)
        return INF_ENOTFOUND;
    free(w->kvs[i].key);
    free(w->kvs[i].val);
    memmove(&w->kvs[i], &w->kvs[i + 1], (size_t)(w->n_kv - i - 1) * sizeof(*w->kvs));
    w->n_kv--;
    return 0;
}

int64_t gguf_writer_n_kv(const struct gguf_writer *w)
{
    return w->n_kv;
}

int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t a)
{
    if (a == 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT)
        return INF_EINVAL;
    w->alignment = a;
    if (a == GGUF_DEFAULT_ALIGNMENT && gw_find_kv(w, "general.alignment") < 0)
        return 0;
    return gguf_writer_set_u32(w, "general.alignment", a);
}

/* ---- tensors ----------------------------------------------------------- */

static int gw_add(struct gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                  const void *data, gguf_writer_fill_fn fill, void *ctx)
{
    struct gw_tensor t = {0};
    size_t nl = name ? strlen(name) : 0;
    int blck = quant_block_elems((int)type);
    uint64_t rows = 1, rb;

    if (nl == 0 || nl >= GGUF_MAX_NAME || n_dims == 0 || n_dims > GGUF_MAX_DIMS || blck <= 0 || !ne)
        return INF_EINVAL;
    for (int64_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].info.name, name))
            return INF_EINVAL;
    memcpy(t.info.name, name, nl + 1);
    t.info.n_dims = n_dims;
    for (uint32_t j = 0; j < GGUF_MAX_DIMS; j++) {
        t.info.ne[j] = j < n_dims ? ne[j] : 1;
        if (t.info.ne[j] <= 0)
            return INF_EINVAL;
        if (j > 0 && (inf_mul_u64(rows, (uint64_t)t.info.ne[j], &rows) || rows > (uint64_t)INT64_MAX))
            return INF_EINVAL;
    }
    if (t.info.ne[0] % blck)
        return INF_EINVAL;
    rb = (uint64_t)(t.info.ne[0] / blck) * quant_block_bytes((int)type);
    if (inf_mul_u64(rb, rows, &t.info.n_bytes) || t.info.n_bytes > (uint64_t)INT64_MAX / 2)
        return INF_EINVAL;
    t.info.type = type;
    t.info.index = w->n_tensors;
    t.info.n_rows = rows;
    t.info.row_bytes = rb;
    t.data = data;
    t.fill = fill;
    t.ctx = ctx;
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        struct gw_tensor *p = realloc(w->tensors, (size_t)cap * sizeof(*p));
        if (!p)
            return INF_ENOMEM;
        w->tensors = p;
        w->cap_tensors = cap;
    }
    w->tensors[w->n_tensors++] = t;
    return 0;
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                           uint32_t type, const void *data)
{
    return gw_add(w, name, n_dims, ne, type, data, NULL, NULL);
}

int gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                                uint32_t type, gguf_writer_fill_fn fill, void *ctx)
{
    if (!fill)
        return INF_EINVAL;
    return gw_add(w, name, n_dims, ne, type, NULL, fill, ctx);
}

int gguf_writer_copy_tensor(struct gguf_writer *w, const struct gguf_tensor *t)
{
    return gw_add(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL, NULL);
}

int gguf_writer_remove_tensor(struct gguf_writer *w, const char *name)
{
    for (int64_t i = 0; i < w->n_tensors; i++) {
        if (strcmp(w->tensors[i].info.name, name))
            continue;
        memmove(&w->tensors[i], &w->tensors[i + 1], (size_t)(w->n_tensors - i - 1) * sizeof(*w->tensors));
        w->n_tensors--;
        for (int64_t j = i; j < w->n_tensors; j++)
            w->tensors[j].info.index = j;
        return 0;
    }
    return INF_ENOTFOUND;
}

int64_t gguf_writer_n_tensors(const struct gguf_writer *w)
{
    return w->n_tensors;
}

/* ---- layout ------------------------------------------------------------ */

static uint64_t gw_align(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* Assigns tensor offsets; returns the data section's offset and sets *total. */
static uint64_t gw_layout(const struct gguf_writer *w, uint64_t *total)
{
    uint64_t off = 4 + 4 + 8 + 8, data = 0;
    for (int64_t i = 0; i < w->n_kv; i++)
        off += 8 + strlen(w->kvs[i].key) + 4 + w->kvs[i].len;
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const struct gguf_writer_tensor *t = &w->tensors[i].info;
        off += 8 + strlen(t->name) + 4 + 8ull * t->n_dims + 4 + 8;
    }
    off = gw_align(off, w->alignment);
    for (int64_t i = 0; i < w->n_tensors; i++) {
        w->tensors[i].info.offset = data;
        data = gw_align(data + w->tensors[i].info.n_bytes, w->alignment);
    }
    *total = off + data;
    return off;
}

uint64_t gguf_writer_size(const struct gguf_writer *w)
{
    uint64_t total;
    gw_layout(w, &total);
    return total;
}

static uint8_t *put(uint8_t *p, const void *v, size_t n)
{
    memcpy(p, v, n);
    return p + n;
}

static void gw_write_meta(const struct gguf_writer *w, uint8_t *dst)
{
    uint64_t nt = (uint64_t)w->n_tensors, nk = (uint64_t)w->n_kv;
    uint8_t *p = put(dst, "GGUF", 4);
    p = put(p, &w->version, 4);
    p = put(p, &nt, 8);
    p = put(p, &nk, 8);
    for (int64_t i = 0; i < w->n_kv; i++) {
        const struct gw_kv *kv = &w->kvs[i];
        uint64_t kl = strlen(kv->key);
        p = put(p, &kl, 8);
        p = put(p, kv->key, (size_t)kl);
        p = put(p, &kv->type, 4);
        p = put(p, kv->val, (size_t)kv->len);
    }
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const struct gguf_writer_tensor *t = &w->tensors[i].info;
        uint64_t nl = strlen(t->name);
        p = put(p, &nl, 8);
        p = put(p, t->name, (size_t)nl);
        p = put(p, &t->n_dims, 4);
        for (uint32_t j = 0; j < t->n_dims; j++)
            p = put(p, &t->ne[j], 8);
        p = put(p, &t->type, 4);
        p = put(p, &t->offset, 8);
    }
}

/* ---- data production --------------------------------------------------- */

struct gw_item {
    int64_t tensor;
    uint64_t row0, n_rows;
};

struct gw_job {
    const struct gguf_writer *w;
    uint8_t *data;     /* memory destination: start of the data section, or NULL */
    int fd;            /* file destination (when data is NULL) */
    uint64_t data_off; /* file offset of the data section */
    size_t buf_bytes;  /* largest work item, for the per-worker buffer */
    struct gw_item *items;
    size_t n_items;
    atomic_size_t next;
    atomic_int rc;
    atomic_int sys_errno; /* errno of a failed pwrite/malloc */
};

static void gw_fail(struct gw_job *job, int rc, int e)
{
    int zero = 0;
    if (atomic_compare_exchange_strong(&job->rc, &zero, rc))
        atomic_store(&job->sys_errno, e);
}

static int gw_pwrite(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? errno : EIO;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* Workers take items from the shared counter. Into memory, a fill writes in
 * place; into a file, it fills a per-worker buffer that goes out with one
 * pwrite (cheaper than page-faulting a shared mapping page by page). */
static int gw_worker(void *arg)
{
    struct gw_job *job = arg;
    uint8_t *buf = NULL;
    if (!job->data && !(buf = malloc(job->buf_bytes ? job->buf_bytes : 1))) {
        gw_fail(job, INF_ENOMEM, ENOMEM);
        return 0;
    }
    for (;;) {
        size_t i = atomic_fetch_add(&job->next, 1);
        if (i >= job->n_items || atomic_load(&job->rc))
            break;
        const struct gw_item *it = &job->items[i];
        const struct gw_tensor *t = &job->w->tensors[it->tensor];
        uint64_t at = t->info.offset + it->row0 * t->info.row_bytes;
        size_t len = (size_t)(it->n_rows * t->info.row_bytes);
        const uint8_t *src = t->data ? (const uint8_t *)t->data + it->row0 * t->info.row_bytes : NULL;
        int rc = 0, e;
        if (job->data) {
            if (t->fill)
                rc = t->fill(t->ctx, &t->info, it->row0, it->n_rows, job->data + at);
            else
                memcpy(job->data + at, src, len);
        } else {
            if (t->fill) {
                memset(buf, 0, len);
                rc = t->fill(t->ctx, &t->info, it->row0, it->n_rows, buf);
                src = buf;
            }
            if (!rc && (e = gw_pwrite(job->fd, src, len, job->data_off + at))) {
                gw_fail(job, INF_EIO, e);
                break;
            }
        }
        if (rc) {
            gw_fail(job, rc, 0);
            break;
        }
    }
    free(buf);
    return 0;
}

/* Rows per work item for t (about GW_CHUNK_BYTES), 0 for a tensor left
 * zero (no data, no fill: the destination starts zeroed). */
static uint64_t gw_rows_per_item(const struct gw_tensor *t)
{
    uint64_t per = GW_CHUNK_BYTES / t->info.row_bytes;
    if (!t->fill && !t->data)
        return 0;
    return per ? per : 1;
}

/* Produce every tensor's bytes into data (memory) or fd (file). */
static int gw_produce(const struct gguf_writer *w, uint8_t *data, int fd, uint64_t data_off,
                      struct inf_error *err)
{
    struct gw_job job = {.w = w, .data = data, .fd = fd, .data_off = data_off};
    size_t cap = 0;
    thrd_t th[GW_MAX_THREADS];
    int n_th = 0, rc;

    /* Work items: chunks of rows of one tensor (count, then list). */
    for (int64_t i = 0; i < w->n_tensors; i++) {
        uint64_t per = gw_rows_per_item(&w->tensors[i]);
        if (per)
            cap += (size_t)((w->tensors[i].info.n_rows + per - 1) / per);
    }
    job.items = malloc((cap ? cap : 1) * sizeof(*job.items));
    if (!job.items)
        return inf_error_set(err, INF_ENOMEM, "gguf_write: out of memory for %zu work items", cap);
    for (int64_t i = 0; i < w->n_tensors; i++) {
        const struct gw_tensor *t = &w->tensors[i];
        uint64_t per = gw_rows_per_item(t);
        for (uint64_t r = 0; per && r < t->info.n_rows; r += per) {
            uint64_t n = t->info.n_rows - r < per ? t->info.n_rows - r : per;
            job.items[job.n_items++] = (struct gw_item){i, r, n};
            if (n * t->info.row_bytes > job.buf_bytes)
                job.buf_bytes = (size_t)(n * t->info.row_bytes);
        }
    }
    atomic_init(&job.next, 0);
    atomic_init(&job.rc, 0);
    atomic_init(&job.sys_errno, 0);
    for (int i = 1; i < w->threads && (size_t)i < job.n_items; i++) {
        if (thrd_create(&th[n_th], gw_worker, &job) != thrd_success)
            break; /* fewer threads is fine */
        n_th++;
    }
    gw_worker(&job);
    for (int i = 0; i < n_th; i++)
        thrd_join(th[i], NULL);
    free(job.items);
    rc = atomic_load(&job.rc);
    if (rc) {
        int e = atomic_load(&job.sys_errno);
        if (rc == INF_EIO && e)
            return inf_error_set(err, rc, "gguf_write: pwrite() failed (%d: %s)", e, strerror(e));
        if (rc == INF_ENOMEM && e)
            return inf_error_set(err, rc, "gguf_write: out of memory for a %zu-byte buffer", job.buf_bytes);
        return inf_error_set(err, rc, "gguf_write: a tensor fill callback failed (%s)", inf_strerror(rc));
    }
    return 0;
}

int gguf_writer_write_mem(struct gguf_writer *w, void **buf, size_t *len, struct inf_error *err)
{
    uint64_t total, data_off = gw_layout(w, &total);
    uint8_t *p;
    int rc;
    *buf = NULL;
    *len = 0;
    if (total > SIZE_MAX || !(p = calloc(1, (size_t)total)))
        return inf_error_set(err, INF_ENOMEM, "gguf_write: out of memory for a %" PRIu64 "-byte file", total);
    gw_write_meta(w, p);
    rc = gw_produce(w, p + data_off, -1, data_off, err);
    if (rc) {
        free(p);
        return rc;
    }
    *buf = p;
    *len = (size_t)total;
    return 0;
}

int gguf_writer_write_file(struct gguf_writer *w, const char *path, struct inf_error *err)
{
    uint64_t total, data_off = gw_layout(w, &total);
    char tmp[4096];
    uint8_t *meta;
    int fd, rc, e;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof(tmp))
        return inf_error_set(err, INF_EINVAL, "gguf_write: path too long");
    fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        e = errno;
        return inf_error_set(err, INF_EIO, "gguf_write: open() \"%s\" failed (%d: %s)", tmp, e, strerror(e));
    }
    /* Reserve the blocks up front: a full disk fails here, before the work,
     * and the file is laid out in one piece. */
    e = posix_fallocate(fd, 0, (off_t)total);
    if (e && e != EOPNOTSUPP && e != EINVAL) {
        rc = inf_error_set(err, INF_EIO, "gguf_write: posix_fallocate() \"%s\" of %" PRIu64 " bytes failed (%d: %s)",
                           tmp, total, e, strerror(e));
        goto fail;
    }
    /* the padding and zero tensors are the zeros ftruncate leaves */
    if (ftruncate(fd, (off_t)total) != 0) {
        e = errno;
        rc = inf_error_set(err, INF_EIO, "gguf_write: ftruncate() \"%s\" failed (%d: %s)", tmp, e, strerror(e));
        goto fail;
    }
    meta = calloc(1, (size_t)data_off);
    if (!meta) {
        rc = inf_error_set(err, INF_ENOMEM, "gguf_write: out of memory for %" PRIu64 " bytes of metadata", data_off);
        goto fail;
    }
    gw_write_meta(w, meta);
    e = gw_pwrite(fd, meta, (size_t)data_off, 0);
    free(meta);
    if (e) {
        rc = inf_error_set(err, INF_EIO, "gguf_write: pwrite() \"%s\" failed (%d: %s)", tmp, e, strerror(e));
        goto fail;
    }
    rc = gw_produce(w, NULL, fd, data_off, err);
    if (rc)
        goto fail;
    if (close(fd) != 0) {
        e = errno;
        fd = -1;
        rc = inf_error_set(err, INF_EIO, "gguf_write: close() \"%s\" failed (%d: %s)", tmp, e, strerror(e));
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        e = errno;
        rc = inf_error_set(err, INF_EIO, "gguf_write: rename() \"%s\" to \"%s\" failed (%d: %s)", tmp, path, e,
                           strerror(e));
        goto fail;
    }
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return rc;
}
