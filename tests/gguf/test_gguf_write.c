/* test_gguf_write — the writer round trip.
 *
 * 1. Every kv type (scalars, strings with NUL bytes, arrays of every element
 *    type including strings, empty arrays), tensors from memory, from a fill
 *    callback and zero-filled, alignment 64, version 2: write, read back with
 *    gguf.c, compare every value and every data byte.
 * 2. The same writer to a file with 1 and 4 threads: the same bytes as in memory.
 * 3. Copying all kvs and tensors of the shared models gives back the
 *    original file byte for byte (our layout is ggml's).
 * 4. Replace/remove semantics, argument validation, a failing fill callback
 *    (error returned, no file left behind), and the documented way to craft
 *    a bad file: patch a valid one at the offset the reader reports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/quant.h"
#include "tests/check.h"
#include "tests/read_file.h"


/* fill: byte i of row r = (r * 31 + i * 7 + tensor index) & 0xff */
static int fill_pattern(void *ctx, const struct gguf_writer_tensor *t, uint64_t row0, uint64_t n_rows, void *dst)
{
    int *calls = ctx;
    __atomic_add_fetch(calls, 1, __ATOMIC_RELAXED);
    for (uint64_t r = 0; r < n_rows; r++)
        for (uint64_t i = 0; i < t->row_bytes; i++)
            ((uint8_t *)dst)[r * t->row_bytes + i] = (uint8_t)((row0 + r) * 31 + i * 7 + (uint64_t)t->index);
    return 0;
}

static int fill_fail(void *ctx, const struct gguf_writer_tensor *t, uint64_t row0, uint64_t n_rows, void *dst)
{
    (void)ctx; (void)t; (void)n_rows; (void)dst;
    return row0 + n_rows > 1000 ? INF_EIO : 0;
}

static void test_all_types(const char *tmpdir)
{
    struct gguf_writer *w;
    struct inf_error e = {0};
    int calls = 0;
    CHECK(gguf_writer_new(&w) == 0);
    gguf_writer_set_version(w, 2);
    CHECK(gguf_writer_set_alignment(w, 64) == 0);
    CHECK(gguf_writer_set_u8(w, "t.u8", 200) == 0);
    CHECK(gguf_writer_set_i8(w, "t.i8", -100) == 0);
    CHECK(gguf_writer_set_u16(w, "t.u16", 60000) == 0);
    CHECK(gguf_writer_set_i16(w, "t.i16", -30000) == 0);
    CHECK(gguf_writer_set_u32(w, "t.u32", 4000000000u) == 0);
    CHECK(gguf_writer_set_i32(w, "t.i32", -2000000000) == 0);
    CHECK(gguf_writer_set_u64(w, "t.u64", 18000000000000000000ull) == 0);
    CHECK(gguf_writer_set_i64(w, "t.i64", -9000000000000000000ll) == 0);
    CHECK(gguf_writer_set_f32(w, "t.f32", 1.5e-6f) == 0);
    CHECK(gguf_writer_set_f64(w, "t.f64", 3.141592653589793) == 0);
    CHECK(gguf_writer_set_bool(w, "t.bool", 7) == 0);
    CHECK(gguf_writer_set_str(w, "t.str", "héllo") == 0);
    CHECK(gguf_writer_set_strn(w, "t.bin", "a\0b", 3) == 0);
    CHECK(gguf_writer_set_str(w, "t.empty", "") == 0);
    int32_t ai[5] = {-1, 0, 1, 2147483647, -2147483647 - 1};
    float af[3] = {0.5f, -2.0f, 1e30f};
    uint8_t ab[2] = {1, 0};
    uint64_t au[2] = {1, UINT64_MAX};
    CHECK(gguf_writer_set_arr(w, "a.i32", GGUF_T_INT32, ai, 5) == 0);
    CHECK(gguf_writer_set_arr(w, "a.f32", GGUF_T_FLOAT32, af, 3) == 0);
    CHECK(gguf_writer_set_arr(w, "a.bool", GGUF_T_BOOL, ab, 2) == 0);
    CHECK(gguf_writer_set_arr(w, "a.u64", GGUF_T_UINT64, au, 2) == 0);
    CHECK(gguf_writer_set_arr(w, "a.empty", GGUF_T_UINT8, NULL, 0) == 0);
    const char *strs[4] = {"<s>", "", "a b", "\xe2\x96\x81the"};
    CHECK(gguf_writer_set_arr_str(w, "a.str", strs, 4) == 0);
    struct gguf_str gs[2] = {{"x\0y", 3}, {"", 0}};
    CHECK(gguf_writer_set_arr_gstr(w, "a.gstr", gs, 2) == 0);
    CHECK(gguf_writer_set_arr_str(w, "a.str_empty", NULL, 0) == 0);

    /* tensors */
    float f32d[3 * 5];
    for (int i = 0; i < 15; i++)
        f32d[i] = (float)i * 0.25f - 1.0f;
    uint8_t q8d[2 * 34 * 2];
    for (size_t i = 0; i < sizeof(q8d); i++)
        q8d[i] = (uint8_t)(i * 13);
    for (int b = 0; b < 4; b++) { /* finite f16 scales */
        q8d[b * 34] = 0;
        q8d[b * 34 + 1] = 0x3c;
    }
    int64_t ne_f32[2] = {5, 3}, ne_q8[2] = {64, 2}, ne_q4k[3] = {512, 3, 2}, ne_z[4] = {2, 2, 2, 2};
    int64_t ne_big[2] = {256, 20000}; /* 2.88 MB of q4_K: several chunks */
    CHECK(gguf_writer_add_tensor(w, "w.f32", 2, ne_f32, QT_F32, f32d) == 0);
    CHECK(gguf_writer_add_tensor(w, "w.q8", 2, ne_q8, QT_Q8_0, q8d) == 0);
    CHECK(gguf_writer_add_tensor_fill(w, "w.q4k", 3, ne_q4k, QT_Q4_K, fill_pattern, &calls) == 0);
    CHECK(gguf_writer_add_tensor(w, "w.zero", 4, ne_z, QT_F16, NULL) == 0);
    CHECK(gguf_writer_add_tensor_fill(w, "w.big", 2, ne_big, QT_Q4_K, fill_pattern, &calls) == 0);
    CHECK(gguf_writer_n_tensors(w) == 5);

    void *buf = NULL;
    size_t len = 0;
    CHECK(gguf_writer_write_mem(w, &buf, &len, &e) == 0);
    CHECK(len == gguf_writer_size(w));
    CHECK(calls >= 2);

    struct gguf_file *f = NULL;
    CHECK(gguf_open_mem(buf, len, &f, &e) == 0);
    if (!f) {
        fprintf(stderr, "%s\n", e.msg);
        goto out;
    }
    CHECK(gguf_version(f) == 2 && gguf_alignment(f) == 64 && gguf_data_offset(f) % 64 == 0);
    int64_t iv;
    uint32_t u32;
    float fv;
    int bv;
    struct gguf_str s;
    CHECK(gguf_get_int(f, "t.u8", &iv) == 0 && iv == 200);
    CHECK(gguf_get_int(f, "t.i8", &iv) == 0 && iv == -100);
    CHECK(gguf_get_int(f, "t.u16", &iv) == 0 && iv == 60000);
    CHECK(gguf_get_int(f, "t.i16", &iv) == 0 && iv == -30000);
    CHECK(gguf_get_u32(f, "t.u32", &u32) == 0 && u32 == 4000000000u);
    CHECK(gguf_get_int(f, "t.i32", &iv) == 0 && iv == -2000000000);
    CHECK(gguf_get_u32(f, "t.i32", &u32) == INF_ERANGE);
    CHECK(gguf_get_int(f, "t.u64", &iv) == INF_ERANGE); /* > INT64_MAX */
    CHECK(gguf_get_int(f, "t.i64", &iv) == 0 && iv == -9000000000000000000ll);
    CHECK(gguf_get_f32(f, "t.f32", &fv) == 0 && fv == 1.5e-6f);
    CHECK(gguf_get_f32(f, "t.f64", &fv) == 0 && fv == (float)3.141592653589793);
    CHECK(gguf_get_bool(f, "t.bool", &bv) == 0 && bv == 1);
    CHECK(gguf_get_str(f, "t.str", &s) == 0 && gguf_str_eq(s, "héllo"));
    CHECK(gguf_get_str(f, "t.bin", &s) == 0 && s.len == 3 && memcmp(s.ptr, "a\0b", 3) == 0);
    CHECK(gguf_get_str(f, "t.empty", &s) == 0 && s.len == 0);
    CHECK(gguf_get_int(f, "t.f32", &iv) == INF_ETYPE);
    CHECK(gguf_get_bool(f, "t.u8", &bv) == INF_ETYPE);
    CHECK(gguf_get_f32(f, "t.i32", &fv) == INF_ETYPE);
    uint32_t et;
    uint64_t n;
    CHECK(gguf_get_arr(f, "a.i32", &et, &n) == 0 && et == GGUF_T_INT32 && n == 5);
    const struct gguf_kv *kv = gguf_find_kv(f, "a.i32");
    for (int i = 0; kv && i < 5; i++)
        CHECK(gguf_arr_int(kv, (uint64_t)i, &iv) == 0 && iv == ai[i]);
    CHECK(kv && gguf_arr_int(kv, 5, &iv) == INF_ERANGE);
    CHECK(kv && gguf_arr_f32(kv, 4, &fv) == 0 && fv == (float)ai[4]);
    kv = gguf_find_kv(f, "a.f32");
    for (int i = 0; kv && i < 3; i++)
        CHECK(gguf_arr_f32(kv, (uint64_t)i, &fv) == 0 && fv == af[i]);
    CHECK(kv && gguf_arr_int(kv, 0, &iv) == INF_ETYPE);
    kv = gguf_find_kv(f, "a.bool");
    CHECK(kv && kv->arr_type == GGUF_T_BOOL && gguf_arr_int(kv, 0, &iv) == INF_ETYPE);
    kv = gguf_find_kv(f, "a.u64");
    CHECK(kv && gguf_arr_int(kv, 0, &iv) == 0 && iv == 1 && gguf_arr_int(kv, 1, &iv) == INF_ERANGE);
    CHECK(gguf_get_arr(f, "a.empty", &et, &n) == 0 && et == GGUF_T_UINT8 && n == 0);
    kv = gguf_find_kv(f, "a.str");
    struct gguf_str out[4];
    CHECK(kv && kv->n == 4 && gguf_arr_strs(kv, out) == 0);
    for (int i = 0; kv && i < 4; i++)
        CHECK(gguf_str_eq(out[i], strs[i]));
    CHECK(kv && gguf_arr_int(kv, 0, &iv) == INF_ETYPE && gguf_arr_f32(kv, 0, &fv) == INF_ETYPE);
    kv = gguf_find_kv(f, "a.gstr");
    CHECK(kv && kv->n == 2 && gguf_arr_strs(kv, out) == 0 && out[0].len == 3 && !memcmp(out[0].ptr, "x\0y", 3) &&
          out[1].len == 0);
    CHECK(gguf_get_arr(f, "a.str_empty", &et, &n) == 0 && et == GGUF_T_STRING && n == 0);
    /* insertion order kept; general.alignment was added by set_alignment */
    CHECK(gguf_n_kv(f) == gguf_writer_n_kv(w));
    CHECK(gguf_str_eq(gguf_kv_at(f, 0)->key, "general.alignment"));
    CHECK(gguf_str_eq(gguf_kv_at(f, 1)->key, "t.u8"));

    const struct gguf_tensor *t = gguf_find_tensor(f, "w.f32");
    CHECK(t && t->type == QT_F32 && t->n_dims == 2 && t->ne[0] == 5 && t->ne[1] == 3 &&
          memcmp(t->data, f32d, sizeof(f32d)) == 0);
    t = gguf_find_tensor(f, "w.q8");
    CHECK(t && t->type == QT_Q8_0 && memcmp(t->data, q8d, sizeof(q8d)) == 0);
    int64_t idx = 0;
    static const char *const fills[] = {"w.q4k", "w.big"};
    for (int k = 0; k < 2; k++) {
        t = gguf_find_tensor(f, fills[k]);
        idx = k == 0 ? 2 : 4;
        CHECK(t && t->type == QT_Q4_K);
        if (!t)
            continue;
        size_t rb = quant_row_bytes(QT_Q4_K, t->ne[0]);
        int bad = 0;
        for (uint64_t r = 0; r < t->n_bytes / rb; r++)
            for (size_t i = 0; i < rb; i++)
                bad += ((const uint8_t *)t->data)[r * rb + i] != (uint8_t)(r * 31 + i * 7 + (uint64_t)idx);
        CHECK(bad == 0);
    }
    t = gguf_find_tensor(f, "w.zero");
    CHECK(t && t->n_dims == 4 && t->n_elems == 16 && t->n_bytes == 32);
    for (uint64_t i = 0; t && i < t->n_bytes; i++)
        CHECK(((const uint8_t *)t->data)[i] == 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        CHECK(gguf_tensor_at(f, i)->offset % 64 == 0);
    gguf_close(f);

    /* to a file, 1 and 4 threads: identical to the memory image */
    for (int th = 1; th <= 4; th += 3) {
        char path[512];
        size_t fl = 0;
        snprintf(path, sizeof(path), "%s/all_types_%d.gguf", tmpdir, th);
        gguf_writer_set_threads(w, th);
        CHECK(gguf_writer_write_file(w, path, &e) == 0);
        char *fb = test_read_file(path, &fl);
        CHECK(fb && fl == len && memcmp(fb, buf, len) == 0);
        free(fb);
        unlink(path);
    }
out:
    free(buf);
    gguf_writer_free(w);
}

/* Copy every kv and tensor of a real file: the same bytes come out. */
static void test_copy(const char *path)
{
    struct gguf_file *f = NULL;
    struct gguf_writer *w = NULL;
    struct inf_error e = {0};
    void *buf = NULL;
    size_t len = 0, ol = 0;
    if (gguf_open(path, &f, &e)) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        CHECK(!"open");
        return;
    }
    CHECK(gguf_writer_new(&w) == 0);
    CHECK(gguf_writer_copy_kvs(w, f, "") == 0);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        CHECK(gguf_writer_copy_tensor(w, gguf_tensor_at(f, i)) == 0);
    gguf_writer_set_threads(w, 2);
    CHECK(gguf_writer_write_mem(w, &buf, &len, &e) == 0);
    char *orig = test_read_file(path, &ol);
    int same = orig && len == ol && memcmp(orig, buf, len) == 0;
    printf("copy %s: %zu bytes, %s\n", path, len, same ? "identical" : "DIFFERENT");
    CHECK(same);
    /* and a subset: only tokenizer keys, no tensors */
    gguf_writer_free(w);
    CHECK(gguf_writer_new(&w) == 0);
    CHECK(gguf_writer_copy_kvs(w, f, "tokenizer.") == 0);
    int64_t want = 0;
    for (int64_t i = 0; i < gguf_n_kv(f); i++)
        want += gguf_kv_at(f, i)->key.len >= 10 && !memcmp(gguf_kv_at(f, i)->key.ptr, "tokenizer.", 10);
    CHECK(gguf_writer_n_kv(w) == want && want > 0);
    free(orig);
    free(buf);
    gguf_writer_free(w);
    gguf_close(f);
}

static void test_semantics(const char *tmpdir)
{
    struct gguf_writer *w;
    struct inf_error e = {0};
    int64_t ne[2] = {32, 2};
    CHECK(gguf_writer_new(&w) == 0);
    CHECK(gguf_writer_set_u32(w, "a", 1) == 0);
    CHECK(gguf_writer_set_u32(w, "b", 2) == 0);
    CHECK(gguf_writer_set_str(w, "a", "now a string") == 0); /* replaced in place */
    CHECK(gguf_writer_n_kv(w) == 2);
    CHECK(gguf_writer_set_u32(w, "", 1) == INF_EINVAL);
    CHECK(gguf_writer_set_u32(w, NULL, 1) == INF_EINVAL);
    CHECK(gguf_writer_set_arr(w, "x", GGUF_T_STRING, "", 1) == INF_EINVAL);
    CHECK(gguf_writer_set_arr(w, "x", GGUF_T_ARRAY, "", 1) == INF_EINVAL);
    CHECK(gguf_writer_set_alignment(w, 0) == INF_EINVAL);
    CHECK(gguf_writer_set_alignment(w, 48) == INF_EINVAL);
    CHECK(gguf_writer_remove_kv(w, "zzz") == INF_ENOTFOUND);
    CHECK(gguf_writer_set_u32(w, "c", 3) == 0);
    CHECK(gguf_writer_remove_kv(w, "b") == 0);
    /* tensor validation */
    char n64[65];
    memset(n64, 'n', 64);
    n64[64] = '\0';
    CHECK(gguf_writer_add_tensor(w, n64, 2, ne, QT_F32, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor(w, "", 2, ne, QT_F32, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor(w, "t", 0, ne, QT_F32, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor(w, "t", 5, ne, QT_F32, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor(w, "t", 2, ne, 4, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor(w, "t", 2, (int64_t[]){33, 1}, QT_Q8_0, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor(w, "t", 2, (int64_t[]){32, 0}, QT_F32, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor(w, "t", 2, (int64_t[]){1ll << 40, 1ll << 40}, QT_F32, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor_fill(w, "t", 2, ne, QT_F32, NULL, NULL) == INF_EINVAL);
    CHECK(gguf_writer_add_tensor(w, "t", 2, ne, QT_F32, NULL) == 0);
    CHECK(gguf_writer_add_tensor(w, "t", 2, ne, QT_F32, NULL) == INF_EINVAL); /* duplicate */
    CHECK(gguf_writer_add_tensor(w, "u", 1, ne, QT_F32, NULL) == 0);
    CHECK(gguf_writer_remove_tensor(w, "t") == 0 && gguf_writer_remove_tensor(w, "t") == INF_ENOTFOUND);
    void *buf;
    size_t len;
    struct gguf_file *f;
    CHECK(gguf_writer_write_mem(w, &buf, &len, &e) == 0);
    CHECK(gguf_open_mem(buf, len, &f, &e) == 0);
    if (f) {
        struct gguf_str s;
        CHECK(gguf_n_kv(f) == 2 && gguf_str_eq(gguf_kv_at(f, 0)->key, "a") && gguf_str_eq(gguf_kv_at(f, 1)->key, "c"));
        CHECK(gguf_get_str(f, "a", &s) == 0 && gguf_str_eq(s, "now a string"));
        CHECK(gguf_n_tensors(f) == 1 && gguf_find_tensor(f, "u") && gguf_find_tensor(f, "u")->ne[0] == 32);
        gguf_close(f);
    }

    /* crafting a bad file: a valid one patched at the offset the reader reports */
    CHECK(gguf_writer_set_alignment(w, 64) == 0);
    free(buf);
    CHECK(gguf_writer_write_mem(w, &buf, &len, &e) == 0);
    CHECK(gguf_open_mem(buf, len, &f, &e) == 0);
    if (f) {
        uint64_t at = gguf_find_kv(f, "general.alignment")->offset;
        gguf_close(f);
        ((uint8_t *)buf)[at] = 3;
        char want[64];
        snprintf(want, sizeof(want), "at offset %llu", (unsigned long long)at);
        CHECK(gguf_open_mem(buf, len, &f, &e) == INF_EFORMAT && f == NULL && strstr(e.msg, "alignment 3") &&
              strstr(e.msg, want));
    }
    free(buf);

    /* a failing fill: the error comes back, nothing is left on disk */
    CHECK(gguf_writer_add_tensor_fill(w, "fails", 2, (int64_t[]){256, 4096}, QT_F32, fill_fail, NULL) == 0);
    gguf_writer_set_threads(w, 3);
    CHECK(gguf_writer_write_mem(w, &buf, &len, &e) == INF_EIO && buf == NULL);
    char path[512];
    snprintf(path, sizeof(path), "%s/fail.gguf", tmpdir);
    CHECK(gguf_writer_write_file(w, path, &e) == INF_EIO);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof(path), "%s/fail.gguf.tmp.%ld", tmpdir, (long)getpid());
    CHECK(access(path, F_OK) != 0);
    /* an unwritable destination */
    CHECK(gguf_writer_write_file(w, "/nonexistent-dir/x.gguf", &e) == INF_EIO && strstr(e.msg, "open()"));
    gguf_writer_free(w);
    gguf_writer_free(NULL);
}

int main(void)
{
    const char *shared = getenv("INFERD_SHARED");
    const char *td = getenv("TMPDIR");
    char tmpdir[256], path[1024];
    snprintf(tmpdir, sizeof(tmpdir), "%s/test_gguf_write.XXXXXX", td ? td : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_all_types(tmpdir);
    test_semantics(tmpdir);
    if (shared) {
        static const char *const models[] = {"stories260K.gguf", "tiny-llama-mixed.gguf", "tiny-qwen2-Q4_K_M.gguf"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/models/%s", shared, models[i]);
            if (access(path, R_OK) == 0)
                test_copy(path);
        }
    }
    rmdir(tmpdir);
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
