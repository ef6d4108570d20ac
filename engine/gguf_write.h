/* gguf_write — build a GGUF v3 file (or a v2 one, or any version number for
 * tests) in memory or on disk.
 *
 * Used by `inferd mkmodel` and by tests that need crafted models: a model
 * with hyperparameters out of range, a vocab with a wrong-typed array, a
 * missing tensor. Typical use:
 *
 *     struct gguf_writer *w;
 *     gguf_writer_new(&w);
 *     gguf_writer_copy_kvs(w, src, "");                 // every kv of a real file
 *     gguf_writer_set_u32(w, "llama.block_count", 0);   // ...then break one
 *     for (i = 0; i < gguf_n_tensors(src); i++)
 *         gguf_writer_copy_tensor(w, gguf_tensor_at(src, i)); // data stays in src's mapping
 *     gguf_writer_write_file(w, path, &err);
 *     gguf_writer_free(w);
 *
 * Keys: setting a key that exists replaces its value (and type) in place, so
 * the order of keys is the order of first insertion. Removing is possible.
 * The writer only refuses what it cannot encode (empty key, array of arrays);
 * any value of any type may be stored under any key, including the invalid
 * ones the reader rejects (general.alignment = 3 as u64, ...), so tests can
 * craft bad files. gguf_writer_set_alignment() is what lays the data out.
 *
 * Tensors are laid out in insertion order, each at the next multiple of the
 * alignment, padded with zeros (as ggml does, also after the last one). The
 * writer refuses what the format cannot describe (name empty or >= 64 bytes,
 * n_dims not 1..4, ne <= 0, unknown type, row length not a multiple of the
 * block size, duplicate name): to get such files, write a valid one and patch
 * bytes at the offsets the reader reports (gguf_kv.key_offset/offset,
 * gguf_tensor.info_offset). Data comes from a pointer (copied at write time:
 * it must stay valid until then; NULL means zeros) or from a fill callback.
 *
 * Output: gguf_writer_write_file writes PATH.tmp.<pid> (space reserved with
 * posix_fallocate first, data written with pwrite in chunks) and renames it
 * over PATH on success; on failure nothing is left behind. With
 * gguf_writer_set_threads(w, n) the tensor data is produced by n threads in
 * chunks of rows. Writers are not thread-safe: one thread builds and writes;
 * fill callbacks run on the worker threads.
 */
#ifndef INFERD_GGUF_WRITE_H
#define INFERD_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gguf.h"

struct gguf_writer;

/* What a fill callback is told about the tensor it fills. */
struct gguf_writer_tensor {
    char name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t type;             /* enum quant_type */
    int64_t index;             /* insertion order, 0-based */
    uint64_t n_rows;           /* ne[1] * ne[2] * ne[3] */
    uint64_t row_bytes;        /* bytes of one row of ne[0] elements */
    uint64_t n_bytes;          /* n_rows * row_bytes */
    uint64_t offset;           /* in the data section (valid during write) */
};

/* Fill rows [row0, row0 + n_rows) of t into dst (n_rows * t->row_bytes
 * bytes, zeroed). May run on several threads at once for disjoint row ranges;
 * make it a pure function of (t, row) if the output must be deterministic
 * whatever the thread count. Returns 0 or a negative INF_E* (aborts the write). */
typedef int (*gguf_writer_fill_fn)(void *ctx, const struct gguf_writer_tensor *t, uint64_t row0,
                                   uint64_t n_rows, void *dst);

/* 0 or INF_ENOMEM. */
int gguf_writer_new(struct gguf_writer **out);
void gguf_writer_free(struct gguf_writer *w); /* accepts NULL */

/* The version field written in the header (default 3). Any value is written
 * as is (tests use 1 or 4 to check the reader). */
void gguf_writer_set_version(struct gguf_writer *w, uint32_t version);
/* Data alignment (default 32, power of two <= GGUF_MAX_ALIGNMENT, else
 * INF_EINVAL). Also sets the u32 key general.alignment unless a is 32 and
 * the key is absent (the default needs no key). */
int gguf_writer_set_alignment(struct gguf_writer *w, uint32_t a);
/* Threads that produce tensor data during write (default 1, max 64). */
void gguf_writer_set_threads(struct gguf_writer *w, int n);

/* Scalars. All return 0, INF_EINVAL (empty/NULL key) or INF_ENOMEM. */
int gguf_writer_set_u8(struct gguf_writer *w, const char *key, uint8_t v);
int gguf_writer_set_i8(struct gguf_writer *w, const char *key, int8_t v);
int gguf_writer_set_u16(struct gguf_writer *w, const char *key, uint16_t v);
int gguf_writer_set_i16(struct gguf_writer *w, const char *key, int16_t v);
int gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
int gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
int gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
int gguf_writer_set_i64(struct gguf_writer *w, const char *key, int64_t v);
int gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
int gguf_writer_set_f64(struct gguf_writer *w, const char *key, double v);
int gguf_writer_set_bool(struct gguf_writer *w, const char *key, int v);
/* Strings: NUL-terminated, or (ptr, len) which may hold any bytes. */
int gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *s);
int gguf_writer_set_strn(struct gguf_writer *w, const char *key, const char *s, uint64_t len);
/* Array of n numeric/bool elements of elem_type, given as packed
 * little-endian values (e.g. an int32_t[] for GGUF_T_INT32). INF_EINVAL for
 * elem_type string/array/unknown. */
int gguf_writer_set_arr(struct gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                        uint64_t n);
/* Arrays of strings: NUL-terminated ones, or (ptr, len) pairs. */
int gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *s, uint64_t n);
int gguf_writer_set_arr_gstr(struct gguf_writer *w, const char *key, const struct gguf_str *s, uint64_t n);

/* Copy one kv of an open file verbatim (same key, type and value). */
int gguf_writer_copy_kv(struct gguf_writer *w, const struct gguf_kv *kv);
/* Copy every kv of f whose key starts with prefix ("" = all), in file order. */
int gguf_writer_copy_kvs(struct gguf_writer *w, const struct gguf_file *f, const char *prefix);
/* 0, or INF_ENOTFOUND when no such key. */
int gguf_writer_remove_kv(struct gguf_writer *w, const char *key);
int64_t gguf_writer_n_kv(const struct gguf_writer *w);

/* Add a tensor whose bytes are at data (NULL = zeros; else must stay valid
 * until the write). Returns 0, INF_EINVAL (bad name/shape/type, duplicate
 * name) or INF_ENOMEM. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                           uint32_t type, const void *data);
/* Same, with the bytes produced by fill(ctx, ...) at write time. */
int gguf_writer_add_tensor_fill(struct gguf_writer *w, const char *name, uint32_t n_dims, const int64_t *ne,
                                uint32_t type, gguf_writer_fill_fn fill, void *ctx);
/* Add a tensor of an open file (name, shape, type; data points into its
 * mapping, so keep the file open until the write). */
int gguf_writer_copy_tensor(struct gguf_writer *w, const struct gguf_tensor *t);
/* 0, or INF_ENOTFOUND. */
int gguf_writer_remove_tensor(struct gguf_writer *w, const char *name);
int64_t gguf_writer_n_tensors(const struct gguf_writer *w);

/* Total bytes the file will have. */
uint64_t gguf_writer_size(const struct gguf_writer *w);

/* Write PATH (atomically, via a temporary file and rename). 0 or INF_EIO /
 * INF_ENOMEM / the fill callback's code, with err saying what failed. */
int gguf_writer_write_file(struct gguf_writer *w, const char *path, struct inf_error *err);
/* Write into a new malloc'd buffer (*buf, *len); the caller frees it. */
int gguf_writer_write_mem(struct gguf_writer *w, void **buf, size_t *len, struct inf_error *err);

#endif
