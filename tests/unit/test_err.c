/* test_err — the error table and the overflow-checked helpers. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/err.h"
#include "engine/log.h"
#include "tests/check.h"


int main(void)
{
    struct inf_error e;
    uint64_t r;
    int lvl = 0;

    CHECK(strcmp(inf_strerror(INF_OK), "ok") == 0);
    CHECK(strcmp(inf_strerror(INF_EFORMAT), "malformed file") == 0);
    CHECK(strcmp(inf_strerror(-9999), "unknown error") == 0);
    CHECK(inf_error_set(&e, INF_ERANGE, "n=%d at offset %u", 5, 12u) == INF_ERANGE);
    CHECK(e.code == INF_ERANGE && strcmp(e.msg, "n=5 at offset 12") == 0);
    CHECK(inf_error_set(NULL, INF_EIO, "x") == INF_EIO);
    CHECK(inf_mul_u64(UINT64_MAX / 2 + 1, 2, &r) == INF_ERANGE);
    CHECK(inf_mul_u64(1ull << 31, 1ull << 31, &r) == INF_OK && r == 1ull << 62);
    CHECK(inf_add_u64(UINT64_MAX, 1, &r) == INF_ERANGE);
    CHECK(log_parse_level("debug", &lvl) == INF_OK && lvl == LOG_LVL_DEBUG);
    CHECK(log_parse_level("loud", &lvl) == INF_EINVAL);
    log_info("test_err: a log line with an embedded\nnewline stays one line");
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
