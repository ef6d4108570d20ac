/* test_gguf_corrupt — a generator of corrupted GGUF files, one or more per
 * ROBUSTNESS.md item 1-9 (item 10, truncation, is test_gguf_truncate.c).
 *
 * Files are assembled byte by byte here (independently of gguf_write.c) so
 * each field can be broken on purpose. Every case is opened from an
 * exact-size heap copy (ASan catches any read past the end) and must fail
 * with the expected code, a message naming the problem, and the byte offset
 * of the broken field. A control case built by the same generator with
 * nothing broken must open, so the failures are really due to the breakage.
 *
 * `test_gguf_corrupt --dump DIR` also writes every case to DIR (the fuzz
 * corpus in tests/fuzz/corpus/gguf was made that way).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/quant.h"
#include "tests/check.h"


/* ---- byte builder ------------------------------------------------------ */

struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *v, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, v, n);
    b->n += n;
}
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(struct bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_zero(struct bb *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bb_put(b, "", 1);
}
static void bb_pad(struct bb *b, size_t a)
{
    while (b->n % a)
        bb_put(b, "", 1);
}
static void bb_hdr(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void kv_u32(struct bb *b, const char *k, uint32_t v)
{
    bb_str(b, k);
    bb_u32(b, GGUF_T_UINT32);
    bb_u32(b, v);
}
static void kv_str(struct bb *b, const char *k, const char *v)
{
    bb_str(b, k);
    bb_u32(b, GGUF_T_STRING);
    bb_str(b, v);
}
static void tinfo(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        bb_u64(b, ne[i]);
    bb_u32(b, type);
    bb_u64(b, off);
}

/* ---- running a case ---------------------------------------------------- */

static const char *dump_dir;
static int n_cases;

/* Open b's bytes from an exact-size copy; expect rc (0 = must open) and, on
 * failure, msg containing `what` and "at offset <at>" (at < 0: any offset). */
static void expect(const char *name, struct bb *b, int rc, const char *what, int64_t at)
{
    uint8_t *copy = malloc(b->n ? b->n : 1);
    struct gguf_file *f = (struct gguf_file *)1;
    struct inf_error e = {0};
    int got;
    char want_at[64];

    if (b->n)
        memcpy(copy, b->p, b->n);
    got = gguf_open_mem(copy, b->n, &f, &e);
    n_cases++;
    if (dump_dir) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/%s.gguf", dump_dir, name);
        FILE *o = fopen(path, "wb");
        if (o) {
            fwrite(b->p, 1, b->n, o);
            fclose(o);
        }
    }
    snprintf(want_at, sizeof(want_at), "at offset %" PRId64, at);
    int ok = got == rc;
    if (rc == 0)
        ok = ok && f != NULL;
    else
        ok = ok && f == NULL && strstr(e.msg, what) && (at < 0 || strstr(e.msg, want_at)) &&
             strchr(e.msg, '\n') == NULL;
    printf("%-28s rc=%-3d %s\n", name, got, got ? e.msg : "(opened)");
    if (!ok) {
        fprintf(stderr, "case %s: expected rc %d, '%s', '%s'\n", name, rc, what, at >= 0 ? want_at : "");
        fails++;
    }
    gguf_close(got == 0 ? f : NULL);
    free(copy);
    free(b->p);
    *b = (struct bb){0};
}

/* A small valid model: 3 kvs (one a string array) then 2 tensors.
 * Knobs let cases break one field; offsets of fields are returned so the
 * expected error offset is computed, not hard-coded. */
struct model_knobs {
    uint32_t version;
    uint32_t align_type;    /* type of general.alignment, 0 = absent */
    uint64_t align_value;
    const char *name0, *name1;
    uint32_t ndims0;
    uint64_t ne0[4];
    uint32_t type0;
    uint64_t off0, off1;
};

struct model_offsets {
    size_t align_val, t0, t0_dims, t0_ne, t0_type, t1;
};

static struct model_knobs knobs_default(void)
{
    struct model_knobs k = {3, 0, 0, "a.weight", "b.weight", 2, {64, 2, 1, 1}, QT_Q8_0, 0, 0};
    k.off1 = 160; /* a: 2 rows of 64 q8_0 = 2 * 2 * 34 = 136 bytes -> next aligned 160 */
    return k;
}

static void build_model(struct bb *b, const struct model_knobs *k, struct model_offsets *o)
{
    uint64_t ne1[1] = {32};
    int n_kv = 2 + (k->align_type != 0);
    bb_hdr(b, k->version, 2, (uint64_t)n_kv);
    kv_str(b, "general.architecture", "llama");
    bb_str(b, "tokenizer.ggml.tokens");
    bb_u32(b, GGUF_T_ARRAY);
    bb_u32(b, GGUF_T_STRING);
    bb_u64(b, 3);
    bb_str(b, "<s>");
    bb_str(b, "");
    bb_str(b, "hello");
    if (k->align_type) {
        bb_str(b, "general.alignment");
        bb_u32(b, k->align_type);
        o->align_val = b->n;
        if (k->align_type == GGUF_T_STRING)
            bb_str(b, "32");
        else
            bb_put(b, &k->align_value, gguf_vtype_size(k->align_type));
    }
    o->t0 = b->n;
    bb_str(b, k->name0);
    o->t0_dims = b->n;
    bb_u32(b, k->ndims0);
    o->t0_ne = b->n;
    for (uint32_t i = 0; i < k->ndims0 && i < 4; i++)
        bb_u64(b, k->ne0[i]);
    o->t0_type = b->n;
    bb_u32(b, k->type0);
    bb_u64(b, k->off0);
    o->t1 = b->n;
    tinfo(b, k->name1, 1, ne1, QT_F32, k->off1);
    bb_pad(b, 32);
    bb_zero(b, 160 + 128);
}

static void run_model(const char *name, const struct model_knobs *k, int rc, const char *what, int which)
{
    struct bb b = {0};
    struct model_offsets o = {0};
    build_model(&b, k, &o);
    size_t at[] = {0, o.align_val, o.t0, o.t0_dims, o.t0_ne, o.t0_type, o.t1};
    expect(name, &b, rc, what, which < 0 ? -1 : (int64_t)at[which]);
}
enum { AT_ZERO, AT_ALIGN, AT_T0, AT_T0_DIMS, AT_T0_NE, AT_T0_TYPE, AT_T1 };

int main(int argc, char **argv)
{
    struct bb b = {0};
    struct model_knobs k;
    if (argc == 3 && !strcmp(argv[1], "--dump"))
        dump_dir = argv[2];

    /* control: the generator's unbroken file opens */
    k = knobs_default();
    run_model("valid", &k, 0, NULL, -1);
    k.version = 2;
    run_model("valid_v2", &k, 0, NULL, -1);
    k = knobs_default();
    k.align_type = GGUF_T_UINT32;
    k.align_value = 32;
    run_model("valid_align32", &k, 0, NULL, -1);

    /* 1. bad magic; version 0, 1, 4+, byte-swapped */
    bb_put(&b, "GGUX", 4);
    bb_u32(&b, 3);
    bb_zero(&b, 16);
    expect("1_bad_magic", &b, INF_EFORMAT, "bad magic", 0);
    bb_put(&b, "GG", 2);
    expect("1_short_magic", &b, INF_EFORMAT, "too short", 0);
    expect("1_empty", &b, INF_EFORMAT, "too short", 0);
    k = knobs_default();
    k.version = 0;
    run_model("1_version0", &k, INF_EUNSUPPORTED, "unsupported version 0", -1);
    k.version = 1;
    run_model("1_version1", &k, INF_EUNSUPPORTED, "version 1 is not supported", -1);
    k.version = 4;
    run_model("1_version4", &k, INF_EUNSUPPORTED, "unsupported version 4", -1);
    k.version = 0xFFFFFFFFu;
    run_model("1_version_max", &k, INF_EUNSUPPORTED, "unsupported version", -1);
    k.version = 0x03000000u;
    run_model("1_version_swapped", &k, INF_EUNSUPPORTED, "byte-swapped", -1);
    bb_put(&b, "GGUF", 4);
    bb_put(&b, "\3\0", 2);
    expect("1_truncated_version", &b, INF_EFORMAT, "truncated", 4);

    /* 2. n_tensors / n_kv of -1, 2^63, more than the bytes left could hold */
    static const uint64_t huge[] = {UINT64_MAX, 1ull << 63, 1000};
    static const char *const hn[] = {"m1", "2p63", "1000"};
    for (int i = 0; i < 3; i++) {
        char nm[64];
        bb_hdr(&b, 3, huge[i], 0);
        bb_zero(&b, 200);
        snprintf(nm, sizeof(nm), "2_n_tensors_%s", hn[i]);
        expect(nm, &b, INF_EFORMAT, "tensor count", 8);
        bb_hdr(&b, 3, 0, huge[i]);
        bb_zero(&b, 200);
        snprintf(nm, sizeof(nm), "2_n_kv_%s", hn[i]);
        expect(nm, &b, INF_EFORMAT, "key/value count", 16);
    }
    /* each count alone fits, together they do not */
    bb_hdr(&b, 3, 6, 10);
    bb_zero(&b, 200);
    expect("2_counts_together", &b, INF_EFORMAT, "need at least", 8);
    bb_hdr(&b, 3, 0, 0);
    bb_zero(&b, 4);
    b.n -= 12; /* header itself truncated */
    expect("2_truncated_header", &b, INF_EFORMAT, "key/value count needs 8 bytes", 16);

    /* 3. key length 0 or 2^64-1; duplicate keys */
    bb_hdr(&b, 3, 0, 1);
    bb_u64(&b, 0);
    bb_u32(&b, GGUF_T_UINT32);
    bb_u32(&b, 7);
    expect("3_key_len0", &b, INF_EFORMAT, "empty key", 24);
    bb_hdr(&b, 3, 0, 1);
    bb_u64(&b, UINT64_MAX);
    bb_put(&b, "abcdef", 6);
    bb_u32(&b, GGUF_T_UINT32);
    bb_u32(&b, 7);
    expect("3_key_len_max", &b, INF_EFORMAT, "key length", 24);
    bb_hdr(&b, 3, 0, 3);
    kv_u32(&b, "general.x", 1);
    kv_str(&b, "general.y", "z");
    size_t dup_at = b.n;
    kv_u32(&b, "general.x", 2);
    expect("3_duplicate_key", &b, INF_EFORMAT, "duplicate key 'general.x'", (int64_t)dup_at);

    /* 4. unknown kv type; array of arrays; array count 2^62; string past EOF */
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, 13);
    bb_u32(&b, 0);
    expect("4_unknown_type", &b, INF_EFORMAT, "unknown value type 13", 33);
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, UINT32_MAX);
    bb_u32(&b, 0);
    expect("4_unknown_type_max", &b, INF_EFORMAT, "unknown value type", 33);
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_T_ARRAY);
    bb_u32(&b, GGUF_T_ARRAY);
    bb_u64(&b, 1);
    bb_u32(&b, GGUF_T_UINT8);
    bb_u64(&b, 1);
    bb_zero(&b, 1);
    expect("4_array_of_arrays", &b, INF_EFORMAT, "array of arrays", 37);
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_T_ARRAY);
    bb_u32(&b, 99);
    bb_u64(&b, 1);
    expect("4_array_unknown_elem", &b, INF_EFORMAT, "unknown array element type 99", 37);
    static const uint32_t atypes[] = {GGUF_T_UINT8, GGUF_T_UINT64, GGUF_T_STRING};
    for (int i = 0; i < 3; i++) {
        char nm[64];
        bb_hdr(&b, 3, 0, 1);
        bb_str(&b, "k");
        bb_u32(&b, GGUF_T_ARRAY);
        bb_u32(&b, atypes[i]);
        bb_u64(&b, 1ull << 62);
        bb_zero(&b, 64);
        snprintf(nm, sizeof(nm), "4_array_count_2p62_%s", gguf_vtype_name(atypes[i]));
        expect(nm, &b, INF_EFORMAT, "array count 4611686018427387904", 41);
    }
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_T_STRING);
    bb_u64(&b, 100);
    bb_put(&b, "short", 5);
    expect("4_string_past_eof", &b, INF_EFORMAT, "string value length 100 runs past", 37);
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_T_ARRAY);
    bb_u32(&b, GGUF_T_STRING);
    bb_u64(&b, 2);
    bb_str(&b, "ok");
    bb_u64(&b, UINT64_MAX);
    bb_put(&b, "xy", 2);
    expect("4_array_string_past_eof", &b, INF_EFORMAT, "array string length", 59);
    bb_hdr(&b, 3, 0, 1);
    bb_str(&b, "k");
    bb_u32(&b, GGUF_T_UINT64);
    bb_u32(&b, 1);
    expect("4_scalar_past_eof", &b, INF_EFORMAT, "truncated", 37);

    /* 5. general.alignment 0, 3, 2^31, of the wrong type */
    static const uint64_t bad_align[] = {0, 3, 1ull << 31, 48};
    for (int i = 0; i < 4; i++) {
        char nm[64];
        k = knobs_default();
        k.align_type = GGUF_T_UINT32;
        k.align_value = bad_align[i];
        snprintf(nm, sizeof(nm), "5_alignment_%" PRIu64, bad_align[i]);
        run_model(nm, &k, INF_EFORMAT, "general.alignment", AT_ALIGN);
    }
    k = knobs_default();
    k.align_type = GGUF_T_UINT64;
    k.align_value = 32;
    run_model("5_alignment_u64", &k, INF_EFORMAT, "general.alignment has type u64", AT_ALIGN);
    k.align_type = GGUF_T_STRING;
    run_model("5_alignment_str", &k, INF_EFORMAT, "general.alignment has type str", AT_ALIGN);
    k.align_type = GGUF_T_INT32;
    run_model("5_alignment_i32", &k, INF_EFORMAT, "general.alignment has type i32", AT_ALIGN);

    /* 6. tensor name >= 64 bytes; duplicate tensor names; empty name */
    char long_name[80];
    memset(long_name, 'x', 64);
    long_name[64] = '\0';
    k = knobs_default();
    k.name0 = long_name;
    run_model("6_name_64", &k, INF_EFORMAT, "is 64 bytes", AT_T0);
    long_name[63] = '\0';
    run_model("6_name_63_ok", &k, 0, NULL, -1);
    k.name0 = "";
    run_model("6_name_empty", &k, INF_EFORMAT, "empty name", AT_T0);
    k = knobs_default();
    k.name1 = k.name0;
    run_model("6_duplicate_name", &k, INF_EFORMAT, "duplicate tensor name 'a.weight'", AT_T1);

    /* 7. n_dims 0, 5, 2^32-1; ne <= 0; element-count / byte-size overflow */
    static const uint32_t bad_dims[] = {0, 5, UINT32_MAX};
    for (int i = 0; i < 3; i++) {
        char nm[64];
        k = knobs_default();
        k.ndims0 = bad_dims[i];
        snprintf(nm, sizeof(nm), "7_n_dims_%" PRIu32, bad_dims[i]);
        run_model(nm, &k, INF_EFORMAT, "dimensions (must be 1..4)", AT_T0_DIMS);
    }
    k = knobs_default();
    k.ne0[1] = 0;
    {
        struct bb t = {0};
        struct model_offsets o;
        build_model(&t, &k, &o);
        expect("7_ne_zero", &t, INF_EFORMAT, "dimension 1 is 0", (int64_t)o.t0_ne + 8);
        k.ne0[0] = UINT64_MAX; /* -1 */
        build_model(&t, &k, &o);
        expect("7_ne_minus1", &t, INF_EFORMAT, "dimension 0 is -1", (int64_t)o.t0_ne);
    }
    k = knobs_default();
    k.ne0[0] = 1ull << 22; /* 2^22 * (2^42 + 1) elements overflows int64 */
    k.ne0[1] = (1ull << 42) + 1;
    run_model("7_elems_overflow", &k, INF_EFORMAT, "overflows", AT_T0);
    k = knobs_default();
    k.ndims0 = 4;
    k.ne0[0] = 1ull << 20;
    k.ne0[1] = 1ull << 20;
    k.ne0[2] = 1ull << 20;
    k.ne0[3] = 1ull << 10; /* 2^70 elements */
    run_model("7_elems_overflow_4d", &k, INF_EFORMAT, "overflows", AT_T0);
    k = knobs_default();
    k.type0 = QT_F64; /* 2^60 elements fit int64, 2^63 bytes do not */
    k.ne0[0] = 1ull << 30;
    k.ne0[1] = 1ull << 30;
    run_model("7_bytes_overflow", &k, INF_EFORMAT, "overflows", AT_T0);

    /* 8. unknown ggml type; ne[0] not a multiple of the block size */
    static const uint32_t bad_types[] = {4, 5, 31, QT_COUNT, UINT32_MAX};
    for (int i = 0; i < 5; i++) {
        char nm[64];
        k = knobs_default();
        k.type0 = bad_types[i];
        snprintf(nm, sizeof(nm), "8_type_%" PRIu32, bad_types[i]);
        run_model(nm, &k, INF_EFORMAT, "unknown type", AT_T0_TYPE);
    }
    k = knobs_default();
    k.ne0[0] = 33;
    run_model("8_row_not_block_multiple", &k, INF_EFORMAT, "not a multiple of the q8_0 block size 32",
              AT_T0_TYPE);
    k.type0 = QT_Q4_K;
    k.ne0[0] = 128;
    run_model("8_row_not_kblock_multiple", &k, INF_EFORMAT, "block size 256", AT_T0_TYPE);

    /* 9. offsets misaligned, overlapping, offset+size past EOF */
    k = knobs_default();
    k.off1 = 140;
    run_model("9_misaligned", &k, INF_EFORMAT, "not a multiple of the alignment 32", AT_T1);
    k = knobs_default();
    k.off1 = 128; /* a: [0, 136) */
    run_model("9_overlap", &k, INF_EFORMAT, "overlaps tensor 'a.weight'", AT_T1);
    k = knobs_default();
    k.off0 = 128; /* a [128, 264) and b [160, 288): both inside, overlapping */
    k.off1 = 160;
    run_model("9_overlap_inside", &k, INF_EFORMAT, "tensor 'b.weight' data [160, +128) overlaps tensor 'a.weight' at 128",
              AT_T1);
    k.off0 = 0; /* same offset */
    k.off1 = 0;
    run_model("9_overlap_same", &k, INF_EFORMAT, "overlaps", -1);
    k = knobs_default();
    k.off1 = 192; /* 192 + 128 > 288 */
    run_model("9_past_eof", &k, INF_EFORMAT, "runs past the end", AT_T1);
    k = knobs_default();
    k.off1 = UINT64_MAX - 31; /* aligned; offset + size wraps around */
    run_model("9_offset_wraps", &k, INF_EFORMAT, "runs past the end", AT_T1);
    k = knobs_default();
    k.off0 = 1ull << 40;
    run_model("9_offset_huge", &k, INF_EFORMAT, "runs past the end", AT_T0);
    /* the metadata itself ends before the data section's padding */
    k = knobs_default();
    {
        struct bb t = {0};
        struct model_offsets o;
        build_model(&t, &k, &o);
        size_t meta_end = o.t1 + 8 + 8 + 4 + 8 + 4 + 8;
        t.n = meta_end + 1; /* cut inside the padding */
        expect("9_data_section_missing", &t, INF_EFORMAT, "data section would start", (int64_t)meta_end);
    }

    printf("%d cases, %s\n", n_cases, fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
