/* gguf — a bounds-checked GGUF v2/v3 reader over mmap.
 *
 * gguf_open maps the file read-only and validates the whole header, every
 * key/value and every tensor info before anything is allocated from counts
 * read in the file: each count, length, shape and offset is checked against
 * the bytes that remain (ROBUSTNESS.md 1-10; 11-12 are checked by the model
 * loader and the tokenizer). A bad file yields one error in
 * struct inf_error naming the problem and the byte offset. After a successful
 * open every pointer handed out stays valid until gguf_close and points into
 * the mapping. Strings from the file are NOT NUL-terminated: use (ptr, len).
 *
 * Threads: a struct gguf_file is immutable after open; any thread may read it.
 */
#ifndef INFERD_GGUF_H
#define INFERD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* tensor names are < 64 bytes, as in ggml */
#define GGUF_DEFAULT_ALIGNMENT 32
/* general.alignment must be a u32 power of two no larger than this; bigger
 * values only serve to make a reader skip (or allocate) absurd paddings. */
#define GGUF_MAX_ALIGNMENT (1u << 20)
/* Caps on the header counts (after the "fits in the bytes left" check); real
 * models have a few thousand tensors and a few dozen keys. */
#define GGUF_MAX_KV (1u << 20)
#define GGUF_MAX_TENSORS (1u << 20)

enum gguf_vtype {
    GGUF_T_UINT8 = 0,
    GGUF_T_INT8 = 1,
    GGUF_T_UINT16 = 2,
    GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4,
    GGUF_T_INT32 = 5,
    GGUF_T_FLOAT32 = 6,
    GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8,
    GGUF_T_ARRAY = 9,
    GGUF_T_UINT64 = 10,
    GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12,
    GGUF_T_COUNT
};

struct gguf_str {
    const char *ptr; /* into the mapping, not NUL-terminated */
    uint64_t len;
};

/* data points at the raw little-endian value bytes (may be unaligned):
 *  - scalar: the value itself (size from gguf_vtype_size);
 *  - string: the u64 length followed by the bytes (use gguf_get_str / gguf_kv_str);
 *  - array: the first element, i.e. just after the u32 element type and u64
 *    count; string elements are each a u64 length followed by the bytes.
 * size is the byte count at data (so a kv can be copied verbatim: gguf_write.h).
 * offset is the file offset of data; key_offset the file offset of the key. */
struct gguf_kv {
    struct gguf_str key;
    uint32_t type;       /* enum gguf_vtype */
    uint32_t arr_type;   /* element type when type == GGUF_T_ARRAY */
    uint64_t n;          /* element count for arrays, 1 otherwise */
    const uint8_t *data; /* raw little-endian value bytes (may be unaligned) */
    uint64_t offset;     /* file offset of the value, for error messages */
    uint64_t size;       /* bytes at data */
    uint64_t key_offset; /* file offset of the key's length field */
};

struct gguf_tensor {
    char name[GGUF_MAX_NAME]; /* NUL-terminated copy */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
    uint32_t type;             /* enum quant_type (ggml type id) */
    uint64_t offset;           /* relative to the data section */
    uint64_t n_elems;
    uint64_t n_bytes;
    const void *data;     /* into the mapping */
    uint64_t info_offset; /* file offset of this tensor's info (for messages) */
};

struct gguf_file;

/* Open and validate. On error *out is NULL, err says what and where, nothing leaks. */
int gguf_open(const char *path, struct gguf_file **out, struct inf_error *err);
/* Same over a caller-owned buffer (fuzzing, tests); buf must outlive the file. */
int gguf_open_mem(const void *buf, size_t len, struct gguf_file **out, struct inf_error *err);
void gguf_close(struct gguf_file *f); /* accepts NULL */

uint32_t gguf_version(const struct gguf_file *f);
uint64_t gguf_file_size(const struct gguf_file *f);
uint64_t gguf_alignment(const struct gguf_file *f);
uint64_t gguf_data_offset(const struct gguf_file *f);
const void *gguf_base(const struct gguf_file *f); /* start of the mapping */

int64_t gguf_n_kv(const struct gguf_file *f);
const struct gguf_kv *gguf_kv_at(const struct gguf_file *f, int64_t i);
const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);

/* Typed getters: 0, INF_ENOTFOUND when the key is missing, INF_ETYPE when the
 * key holds another type. gguf_get_int accepts any integer type and reports
 * INF_ERANGE when the value does not fit int64_t. gguf_get_u32 likewise
 * accepts any integer type (files disagree on u32 vs i32 for ids and counts)
 * and reports INF_ERANGE when the value does not fit uint32_t. gguf_get_f32
 * accepts f32 and f64 (converted), not integers; gguf_get_bool only bool. */
int gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out);
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
int gguf_get_bool(const struct gguf_file *f, const char *key, int *out);
int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out);
/* Array: element type and count. */
int gguf_get_arr(const struct gguf_file *f, const char *key, uint32_t *elem_type, uint64_t *n);

/* Element access for an array kv (kv->type == GGUF_T_ARRAY). Numeric getters
 * convert from the stored element type; they return INF_ETYPE when the array
 * holds strings, INF_ERANGE for i >= n. gguf_arr_int takes integer elements
 * only (INF_ETYPE for float and bool arrays; INF_ERANGE for a u64 above
 * INT64_MAX); gguf_arr_f32 takes integers and floats. */
int gguf_arr_int(const struct gguf_kv *kv, uint64_t i, int64_t *out);
int gguf_arr_f32(const struct gguf_kv *kv, uint64_t i, float *out);
/* All strings of a string array, in order, into out[0..kv->n-1]. */
int gguf_arr_strs(const struct gguf_kv *kv, struct gguf_str *out);

int64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, int64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Value of one kv, whatever its key: gguf_kv_str for a string (0 or
 * INF_ETYPE); gguf_kv_int for any integer type (INF_ETYPE otherwise,
 * INF_ERANGE for a u64 above INT64_MAX); gguf_kv_f32 for f32/f64. */
int gguf_kv_str(const struct gguf_kv *kv, struct gguf_str *out);
int gguf_kv_int(const struct gguf_kv *kv, int64_t *out);
int gguf_kv_f32(const struct gguf_kv *kv, float *out);

/* Name of a value type ("u32", "str", "arr", ...) for messages; "?" if unknown. */
const char *gguf_vtype_name(uint32_t t);
/* Bytes of one scalar of type t; 0 for str/arr/unknown (variable size). */
size_t gguf_vtype_size(uint32_t t);
/* 1 when the str equals the NUL-terminated s. */
int gguf_str_eq(struct gguf_str a, const char *s);

#endif
