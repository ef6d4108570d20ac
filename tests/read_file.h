/* read_file — the whole of a file in one malloc'd buffer, for tests. The
 * buffer has a NUL after the last byte (so text files are C strings); the
 * byte count goes to *len when len is not NULL. Returns NULL when the file
 * cannot be opened or read (errno from the failing call). Header-only. */
#ifndef INFERD_TESTS_READ_FILE_H
#define INFERD_TESTS_READ_FILE_H

#include <stdio.h>
#include <stdlib.h>

static inline char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        return NULL;
    }
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        if (len)
            *len = (size_t)n;
    }
    return buf;
}

#endif
