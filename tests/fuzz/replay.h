/* replay — the corpus driver a fuzz target's normal build uses (one per
 * target, libFuzzer's own main in the fuzzing build): every argument is an
 * input file or a directory of them, and each input goes through
 * LLVMFuzzerTestOneInput once, so `meson test --suite fuzz` replays the
 * committed corpus under the normal compiler and the sanitizers.
 * Header-only: include it after defining LLVMFuzzerTestOneInput. */
#ifndef INFERD_TESTS_FUZZ_REPLAY_H
#define INFERD_TESTS_FUZZ_REPLAY_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/read_file.h"

/* Replays one input: 0, or 1 when it could not be read or failed a check.
 * base is the file's name without its directory. */
typedef int (*fuzz_replay_fn)(const char *name, const char *path, const char *base);

static inline int fuzz_replay_file(const char *name, const char *path, const char *base)
{
    (void)base;
    size_t n;
    char *buf = test_read_file(path, &n);
    if (!buf) {
        fprintf(stderr, "%s: cannot read %s\n", name, path);
        return 1;
    }
    LLVMFuzzerTestOneInput((const uint8_t *)buf, n);
    free(buf);
    return 0;
}

/* The exit status: 0 when inputs were replayed and every one passed `one`. */
static inline int fuzz_replay_each(const char *name, int argc, char **argv, fuzz_replay_fn one)
{
    int n = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *de;
            while (d && (de = readdir(d))) {
                char path[4096];
                if (de->d_name[0] == '.')
                    continue;
                snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
                bad += one(name, path, de->d_name);
                n++;
            }
            if (d)
                closedir(d);
        } else {
            const char *base = strrchr(argv[i], '/');
            bad += one(name, argv[i], base ? base + 1 : argv[i]);
            n++;
        }
    }
    printf("%s: replayed %d inputs, %d failed\n", name, n, bad);
    return bad || n == 0 ? 1 : 0;
}

static inline int fuzz_replay(const char *name, int argc, char **argv)
{
    return fuzz_replay_each(name, argc, argv, fuzz_replay_file);
}

#ifdef INFERD_TESTS_FUZZ_VOCABS_H
/* main of a target over the three vocabularies (tests/fuzz/vocabs.h):
 * skip (77) when one is missing */
static inline int fuzz_vocab_main(int argc, char **argv)
{
    if (fz_init() != 1)
        return 77;
    const int rc = fuzz_replay(FZ_NAME, argc, argv);
    fz_vocabs_free();
    return rc;
}
#endif

#endif
