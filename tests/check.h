/* check — the assertion every C test uses: CHECK(cond) reports file:line and
 * the failed expression on stderr and counts it in `fails`; a test's main()
 * ends with `return fails ? 1 : 0`. Header-only: each test stays one
 * self-contained executable (one process per test). */
#ifndef INFERD_TESTS_CHECK_H
#define INFERD_TESTS_CHECK_H

#include <stdio.h>

static int fails;

#define CHECK(c)                                                                  \
    do {                                                                          \
        if (!(c)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            fails++;                                                              \
        }                                                                         \
    } while (0)

#endif
