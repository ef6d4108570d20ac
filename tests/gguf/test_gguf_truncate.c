/* test_gguf_truncate — ROBUSTNESS 10: stories260K.gguf cut at every byte.
 *
 * Every proper prefix (lengths 0 .. size-1) must fail with INF_EFORMAT and a
 * one-line message naming an offset; the full file must open. Prefixes are
 * tried from the longest down; under ASan the bytes past the prefix are
 * poisoned one more at a time, so any read beyond the prefix is reported
 * (cheaper than an exact-size copy of every prefix).
 *
 * usage: test_gguf_truncate [--shard I/N] [FILE]
 * --shard I/N opens only the prefixes whose length is I mod N, so meson runs
 * the loop as N parallel tests (each well under a minute under ASan on a
 * loaded 2-core machine). FILE defaults to stories260K.gguf.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/gguf.h"
#include "tests/read_file.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

int main(int argc, char **argv)
{
    const char *shared = getenv("INFERD_SHARED");
    char path[1024];
    long shard = 0, n_shards = 1;
    if (argc > 2 && !strcmp(argv[1], "--shard")) {
        if (sscanf(argv[2], "%ld/%ld", &shard, &n_shards) != 2 || n_shards < 1 || shard < 0 || shard >= n_shards) {
            fprintf(stderr, "bad --shard %s\n", argv[2]);
            return 2;
        }
        argc -= 2;
        argv += 2;
    }
    if (argc > 1)
        snprintf(path, sizeof(path), "%s", argv[1]);
    else if (shared)
        snprintf(path, sizeof(path), "%s/models/stories260K.gguf", shared);
    else
        return 77;
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "%s missing: skip\n", path);
        return 77;
    }
    size_t len;
    uint8_t *buf = (uint8_t *)test_read_file(path, &len);
    if (!buf) {
        fprintf(stderr, "read %s failed\n", path);
        return 1;
    }
    const long size = (long)len;
    /* the helper's trailing NUL is not part of the file: out of bounds too */
    POISON(buf + size, 1);

    struct gguf_file *f = NULL;
    struct inf_error e = {0};
    int fails = 0;
    if (gguf_open_mem(buf, (size_t)size, &f, &e) != 0) {
        fprintf(stderr, "full file does not open: %s\n", e.msg);
        return 1;
    }
    gguf_close(f);

    /* per-kind counts of the messages, to show what was exercised */
    long n_trunc = 0, n_data = 0, n_other = 0, n_tried = 0;
    for (long len = size - 1; len >= 0; len--) {
        POISON(buf + len, 1);
        if (len % n_shards != shard)
            continue;
        n_tried++;
        f = (struct gguf_file *)1;
        e.msg[0] = '\0';
        int rc = gguf_open_mem(buf, (size_t)len, &f, &e);
        if (rc != INF_EFORMAT || f != NULL || !strstr(e.msg, "at offset ") || strchr(e.msg, '\n')) {
            if (fails++ < 10)
                fprintf(stderr, "prefix %ld: rc %d, f %p, msg '%s'\n", len, rc, (void *)f, e.msg);
            if (rc == 0)
                gguf_close(f);
            continue;
        }
        if (strstr(e.msg, "data ["))
            n_data++;
        else if (strstr(e.msg, "truncated") || strstr(e.msg, "runs past the end"))
            n_trunc++;
        else
            n_other++;
    }
    UNPOISON(buf, (size_t)size + 1);
    free(buf);
    printf("%s: shard %ld/%ld: %ld of %ld prefixes: %ld truncated metadata, %ld tensor data past end, %ld other; "
           "%d failures\n",
           path, shard, n_shards, n_tried, size, n_trunc, n_data, n_other, fails);
    return fails ? 1 : 0;
}
