/* test_api_unit — the pure parts of the daemon and the API layer, in process:
 * config parsing (file, flags, env, reload rules), path normalization, JSON
 * string escaping of arbitrary bytes, the sd_notify datagram format. */
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/buf.h"
#include "api/internal.h"
#include "daemon/config.h"
#include "daemon/sdnotify.h"
#include "engine/log.h"
#include "tests/check.h"


static int norm_is(const char *raw, const char *want)
{
    char out[256];
    int rc = http_normalize_path(raw, out, sizeof(out));
    if (!want)
        return rc != 0;
    if (rc || strcmp(out, want)) {
        fprintf(stderr, "normalize(%s) = %s (rc %d), want %s\n", raw, rc ? "-" : out, rc, want);
        return 0;
    }
    return 1;
}

static void test_normalize(void)
{
    CHECK(norm_is("/v1/completions", "/v1/completions"));
    CHECK(norm_is("//v1//completions/", "/v1/completions"));
    CHECK(norm_is("/v1/../metrics", "/metrics"));
    CHECK(norm_is("/v1/./models?x=1", "/v1/models"));
    CHECK(norm_is("/%2e%2e/%2E%2E/metrics", "/metrics"));
    CHECK(norm_is("/../../..", "/"));
    CHECK(norm_is("/a/b/../../health", "/health"));
    CHECK(norm_is("/v1%2fmodels", "/v1/models"));
    CHECK(norm_is("/health%00", NULL));
    CHECK(norm_is("/health%0a", NULL));
    CHECK(norm_is("/health%zz", NULL));
    CHECK(norm_is("/health%4", NULL));
    CHECK(norm_is("health", NULL));
    CHECK(norm_is("", NULL));
    char big[2048];
    memset(big, 'a', sizeof(big) - 1);
    big[0] = '/';
    big[sizeof(big) - 1] = '\0';
    CHECK(norm_is(big, NULL));
}

static void test_json_str(void)
{
    struct buf b = {0};
    CHECK(buf_json_str(&b, "a\"b\\c\n\x01", 7) == 0);
    CHECK(strcmp(b.p, "\"a\\\"b\\\\c\\n\\u0001\"") == 0);
    buf_clear(&b);
    /* invalid UTF-8: a lone lead byte, an overlong form, a surrogate, a
     * truncated sequence; each bad byte -> U+FFFD, valid ones kept */
    const char bad[] = "\xe2\x82\xac|\xe2|\xc0\xaf|\xed\xa0\x80|\xf0\x9f\x98";
    CHECK(buf_json_str(&b, bad, sizeof(bad) - 1) == 0);
    CHECK(buf_utf8_valid(b.p, b.len));
    CHECK(strncmp(b.p, "\"\xe2\x82\xac|\xef\xbf\xbd|", 9) == 0);
    buf_clear(&b);
    /* every single byte value makes valid UTF-8 JSON */
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        buf_clear(&b);
        CHECK(buf_json_str(&b, &ch, 1) == 0 && buf_utf8_valid(b.p, b.len));
    }
    CHECK(buf_utf8_valid("\xf4\x8f\xbf\xbf", 4));
    CHECK(!buf_utf8_valid("\xf4\x90\x80\x80", 4));
    buf_free(&b);
}

static void test_config(const char *src)
{
    struct cfg c;
    struct inf_error e;
    const char *cp;
    int help;

    cfg_defaults(&c);
    CHECK(c.port == 8080 && c.max_body_bytes == 4194304 && c.max_stop == 4);
    CHECK(cfg_set(&c, "port", "70000", &e) == INF_EINVAL && strstr(e.msg, "port"));
    CHECK(cfg_set(&c, "n_ctx", "12x", &e) == INF_EINVAL);
    CHECK(cfg_set(&c, "nope", "1", &e) == INF_ENOTFOUND);
    CHECK(cfg_set(&c, "log_level", "loud", &e) == INF_EINVAL);
    CHECK(cfg_set(&c, "prefix_cache", "maybe", &e) == INF_EINVAL);
    CHECK(cfg_set(&c, "prefix_cache", "off", &e) == 0 && c.prefix_cache == 0);

    char path[] = "/tmp/inferd-cfg-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *text = "# comment\n\n  model = /m.gguf  \nport=9000\napi_key = \"a b#c\"\n"
                       "log_level = debug\n";
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    unsetenv("INFERD_API_KEY");
    char *argv1[] = {(char *)"serve", (char *)"--config", path, (char *)"--port", (char *)"9001", (char *)"--n-ctx=128", NULL};
    CHECK(cfg_build(&c, 6, argv1, &cp, &help, &e) == 0);
    CHECK(strcmp(c.model, "/m.gguf") == 0 && c.port == 9001 && c.n_ctx == 128);
    CHECK(strcmp(c.api_key, "a b#c") == 0 && c.log_level == LOG_LVL_DEBUG);
    CHECK(cp && strcmp(cp, path) == 0);
    setenv("INFERD_API_KEY", "envkey", 1);
    CHECK(cfg_build(&c, 6, argv1, &cp, &help, &e) == 0 && strcmp(c.api_key, "envkey") == 0);
    unsetenv("INFERD_API_KEY");
    char *argv2[] = {(char *)"serve", (char *)"--model", (char *)"x", (char *)"--bogus", (char *)"1", NULL};
    CHECK(cfg_build(&c, 5, argv2, &cp, &help, &e) == INF_ENOTFOUND && strstr(e.msg, "--bogus"));
    char *argv3[] = {(char *)"serve", (char *)"--port", NULL};
    CHECK(cfg_build(&c, 2, argv3, &cp, &help, &e) == INF_ENOTFOUND);
    char *argv4[] = {(char *)"serve", (char *)"--port", (char *)"1", NULL};
    CHECK(cfg_build(&c, 3, argv4, &cp, &help, &e) == INF_EINVAL && strstr(e.msg, "model"));
    /* attention_scores: exact (default) or tensor, nothing else */
    char *argv6[] = {(char *)"serve", (char *)"--model", (char *)"/m.gguf", (char *)"--attention-scores",
                     (char *)"tensor", NULL};
    CHECK(cfg_build(&c, 5, argv6, &cp, &help, &e) == 0 && strcmp(c.attention_scores, "tensor") == 0);
    argv6[4] = (char *)"fast";
    CHECK(cfg_build(&c, 5, argv6, &cp, &help, &e) == INF_EINVAL && strstr(e.msg, "attention_scores"));
    /* f16_weights_mb: only with batch_invariant = false (the copies serve
     * that mode's prefill path alone), a MiB count */
    char *argv7[] = {(char *)"serve", (char *)"--model", (char *)"/m.gguf", (char *)"--f16-weights-mb",
                     (char *)"16384", (char *)"--batch-invariant", (char *)"false", NULL};
    CHECK(cfg_build(&c, 7, argv7, &cp, &help, &e) == 0 && c.f16_weights_mb == 16384 && !c.batch_invariant);
    CHECK(cfg_build(&c, 5, argv7, &cp, &help, &e) == INF_EINVAL && strstr(e.msg, "f16_weights_mb") &&
          strstr(e.msg, "batch_invariant"));
    argv7[4] = (char *)"-1";
    CHECK(cfg_build(&c, 7, argv7, &cp, &help, &e) == INF_EINVAL && strstr(e.msg, "f16_weights_mb"));
    /* q6_planes_percent: 5 by default (the Q6_K planes on H100/H200),
     * 0..50 */
    char *argv8[] = {(char *)"serve", (char *)"--model", (char *)"/m.gguf", (char *)"--q6-planes-percent",
                     (char *)"0", NULL};
    CHECK(cfg_build(&c, 3, argv8, &cp, &help, &e) == 0 && c.q6_planes_percent == 5);
    CHECK(cfg_build(&c, 5, argv8, &cp, &help, &e) == 0 && c.q6_planes_percent == 0);
    argv8[4] = (char *)"51";
    CHECK(cfg_build(&c, 5, argv8, &cp, &help, &e) == INF_EINVAL && strstr(e.msg, "q6_planes_percent"));

    /* a bad line names the file and the line */
    fd = open(path, O_WRONLY | O_TRUNC);
    const char *badtext = "model = /m.gguf\nmax_tokens = lots\n";
    CHECK(write(fd, badtext, strlen(badtext)) == (ssize_t)strlen(badtext));
    close(fd);
    CHECK(cfg_build(&c, 3, argv1, &cp, &help, &e) == INF_EINVAL && strstr(e.msg, ":2:") &&
          strstr(e.msg, "max_tokens"));
    unlink(path);
    char *argv5[] = {(char *)"serve", (char *)"--config", (char *)"/nonexistent/inferd.conf", NULL};
    CHECK(cfg_build(&c, 3, argv5, &cp, &help, &e) != 0 && strstr(e.msg, "/nonexistent"));

    /* reload: reloadable keys move, the others stay and are named */
    struct cfg cur, next;
    cfg_defaults(&cur);
    cfg_defaults(&next);
    snprintf(next.api_key, sizeof(next.api_key), "k");
    next.max_tokens = 5;
    next.port = 1234;
    next.n_ctx = 99;
    char ign[256];
    CHECK(cfg_reload(&cur, &next, ign, sizeof(ign)) == 2);
    CHECK(strcmp(cur.api_key, "k") == 0 && cur.max_tokens == 5 && cur.port == 8080 &&
          cur.n_ctx == 0);
    CHECK(strstr(ign, "port") && strstr(ign, "n_ctx"));

    /* the shipped etc/inferd.conf parses */
    if (src) {
        char shipped[1024];
        snprintf(shipped, sizeof(shipped), "%s/etc/inferd.conf", src);
        cfg_defaults(&c);
        CHECK(cfg_load_file(&c, shipped, &e) == 0);
        struct cfg d;
        cfg_defaults(&d);
        /* it documents the defaults: only model differs */
        memcpy(d.model, c.model, sizeof(d.model));
        CHECK(memcmp(&c, &d, sizeof(c)) == 0);
    }
}

static void test_sdnotify(void)
{
    char dir[] = "/tmp/inferd-sdn-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[100];
    snprintf(path, sizeof(path), "%.80s/n.sock", dir);
    int s = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    CHECK(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("WATCHDOG_USEC", "10000000", 1);
    unsetenv("WATCHDOG_PID");
    CHECK(sdn_init() == 0 && sdn_enabled() && sdn_watchdog_usec() == 10000000);
    CHECK(sdn_send("READY=1\nSTATUS=%s", "x y") == 0);
    char m[256] = {0};
    CHECK(recv(s, m, sizeof(m) - 1, 0) == 18 && strcmp(m, "READY=1\nSTATUS=x y") == 0);
    sdn_watchdog();
    sdn_watchdog(); /* rate-limited: only one datagram */
    memset(m, 0, sizeof(m));
    CHECK(recv(s, m, sizeof(m) - 1, 0) == 10 && strcmp(m, "WATCHDOG=1") == 0);
    CHECK(recv(s, m, sizeof(m) - 1, MSG_DONTWAIT) < 0);
    sdn_close();
    close(s);
    unlink(path);
    rmdir(dir);

    /* abstract namespace */
    s = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un b = {.sun_family = AF_UNIX};
    char name[64];
    int n = snprintf(name, sizeof(name), "@inferd-unit-%d", (int)getpid());
    memcpy(b.sun_path + 1, name + 1, (size_t)n - 1);
    CHECK(bind(s, (struct sockaddr *)&b,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n)) == 0);
    setenv("NOTIFY_SOCKET", name, 1);
    unsetenv("WATCHDOG_USEC");
    CHECK(sdn_init() == 0 && sdn_watchdog_usec() == 0);
    CHECK(sdn_send("STOPPING=1") == 0);
    memset(m, 0, sizeof(m));
    CHECK(recv(s, m, sizeof(m) - 1, 0) == 10 && strcmp(m, "STOPPING=1") == 0);
    sdn_close();
    close(s);
    unsetenv("NOTIFY_SOCKET");
    CHECK(sdn_init() == 0 && !sdn_enabled() && sdn_send("READY=1") == 0);
}

int main(void)
{
    test_normalize();
    test_json_str();
    test_config(getenv("INFERD_SRC"));
    test_sdnotify();
    printf("%s\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
