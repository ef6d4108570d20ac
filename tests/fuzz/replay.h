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
#include <sys/stat.h>

#include "tests/read_file.h"

static int fuzz_replay_file(const char *name, const char *path)
{
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

/* The exit status: 0 when inputs were replayed and every one was readable. */
static int fuzz_replay(const char *name, int argc, char **argv)
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
                bad += fuzz_replay_file(name, path);
                n++;
            }
            if (d)
                closedir(d);
        } else {
            bad += fuzz_replay_file(name, argv[i]);
            n++;
        }
    }
    printf("%s: replayed %d inputs%s\n", name, n, bad ? " (some unreadable)" : "");
    return bad || n == 0 ? 1 : 0;
}

#endif
