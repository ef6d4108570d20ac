/* test_proxy — api/proxy.c: the trusted_proxies list and X-Forwarded-For.
 *
 * Parsing (addresses, CIDR blocks of both families, separators, every kind
 * of bad entry), membership (prefix edges, IPv4-mapped IPv6 peers), and the
 * client walk: the header is ignored from an untrusted peer, the rightmost
 * untrusted entry wins, trusted hops are skipped, garbage ends the walk at
 * the last trusted hop, ports and brackets are dropped, spoofed entries on
 * the left never win over what a trusted proxy appended.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "api/proxy.h"
#include "engine/err.h"
#include "tests/check.h"

static struct sockaddr_storage sa(const char *ip)
{
    struct sockaddr_storage s;
    memset(&s, 0, sizeof(s));
    struct sockaddr_in *s4 = (struct sockaddr_in *)&s;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&s;
    if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons(4242);
    } else if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(4242);
    }
    return s;
}

static int trusted(const struct proxy_list *l, const char *ip)
{
    struct sockaddr_storage s = sa(ip);
    return proxy_is_trusted(l, (struct sockaddr *)&s);
}

/* The client for peer + xff as text, and whether it was forwarded. */
static int client(const struct proxy_list *l, const char *peer, const char *xff, char *out,
                  size_t cap)
{
    struct sockaddr_storage p = sa(peer), c;
    int f = proxy_client(l, (struct sockaddr *)&p, xff, &c);
    proxy_addr_str((struct sockaddr *)&c, out, cap);
    return f;
}

#define CLIENT_IS(l, peer, xff, want, want_fwd)                    \
    do {                                                           \
        char got_[64];                                             \
        int f_ = client(l, peer, xff, got_, sizeof(got_));         \
        if (strcmp(got_, want) || f_ != (want_fwd))                \
            fprintf(stderr, "peer %s xff %s: got %s (%d)\n", peer, \
                    xff ? xff : "(none)", got_, f_);               \
        CHECK(!strcmp(got_, want) && f_ == (want_fwd));            \
    } while (0)

int main(void)
{
    struct proxy_list l;
    char msg[160];

    /* parsing */
    CHECK(proxy_list_parse("", &l, msg, sizeof(msg)) == 0 && l.n == 0);
    CHECK(proxy_list_parse(NULL, &l, msg, sizeof(msg)) == 0 && l.n == 0);
    CHECK(proxy_list_parse(" , ,\t", &l, msg, sizeof(msg)) == 0 && l.n == 0);
    CHECK(proxy_list_parse("10.0.0.1, 192.168.0.0/16 2001:db8::/32,::1", &l, msg, sizeof(msg)) == 0);
    CHECK(l.n == 4 && l.net[0].bits == 32 && l.net[1].bits == 16 && l.net[2].bits == 32 &&
          l.net[3].bits == 128 && l.net[3].family == AF_INET6);
    const char *bad[] = {"10.0.0.256", "10.0.0.1/33", "10.0.0.1/", "10.0.0.1/-1", "10.0.0.1/8x",
                         "::1/129", "localhost", "10.0.0.1:80", "[::1]", "1.2.3.4/1/2", "10.0.0.1/ 8"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        msg[0] = '\0';
        int rc = proxy_list_parse(bad[i], &l, msg, sizeof(msg));
        if (rc != INF_EINVAL)
            fprintf(stderr, "accepted bad entry %s\n", bad[i]);
        CHECK(rc == INF_EINVAL && strstr(msg, "trusted_proxies"));
    }
    char many[1024] = "";
    for (int i = 0; i <= PROXY_MAX; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "10.0.0.%d,", i);
    CHECK(proxy_list_parse(many, &l, msg, sizeof(msg)) == INF_EINVAL && strstr(msg, "more than"));

    /* membership */
    CHECK(proxy_list_parse("10.1.2.0/23,2001:db8::/33,127.0.0.2,0.0.0.0/0", &l, msg, sizeof(msg)) == 0);
    CHECK(trusted(&l, "8.8.8.8")); /* 0.0.0.0/0 is everything IPv4 */
    CHECK(proxy_list_parse("10.1.2.0/23,2001:db8::/33,127.0.0.2", &l, msg, sizeof(msg)) == 0);
    CHECK(trusted(&l, "10.1.2.0") && trusted(&l, "10.1.3.255"));
    CHECK(!trusted(&l, "10.1.4.0") && !trusted(&l, "10.1.1.255"));
    CHECK(trusted(&l, "2001:db8:7fff::1") && !trusted(&l, "2001:db8:8000::1"));
    CHECK(trusted(&l, "127.0.0.2") && !trusted(&l, "127.0.0.3"));
    CHECK(trusted(&l, "::ffff:127.0.0.2") && !trusted(&l, "::ffff:127.0.0.3"));
    CHECK(!trusted(&l, "::1"));
    struct proxy_list empty;
    CHECK(proxy_list_parse("", &empty, msg, sizeof(msg)) == 0 && !trusted(&empty, "127.0.0.2"));

    /* the client walk */
    CHECK(proxy_list_parse("127.0.0.2, 10.0.0.0/8, fd00::/8", &l, msg, sizeof(msg)) == 0);
    CLIENT_IS(&l, "127.0.0.2", NULL, "127.0.0.2", 0);
    CLIENT_IS(&l, "127.0.0.3", "1.2.3.4", "127.0.0.3", 0);      /* untrusted peer: ignored */
    CLIENT_IS(&empty, "127.0.0.2", "1.2.3.4", "127.0.0.2", 0);  /* no proxies configured */
    CLIENT_IS(&l, "127.0.0.2", "1.2.3.4", "1.2.3.4", 1);
    CLIENT_IS(&l, "127.0.0.2", " 1.2.3.4 ", "1.2.3.4", 1);
    CLIENT_IS(&l, "127.0.0.2", "6.6.6.6, 1.2.3.4", "1.2.3.4", 1); /* spoofed left entry loses */
    CLIENT_IS(&l, "127.0.0.2", "1.2.3.4, 10.9.9.9", "1.2.3.4", 1); /* trusted hop skipped */
    CLIENT_IS(&l, "127.0.0.2", "10.0.0.5, 10.9.9.9", "10.0.0.5", 1); /* all trusted: leftmost */
    CLIENT_IS(&l, "127.0.0.2", "1.2.3.4, unknown", "127.0.0.2", 0);  /* garbage: stop at the peer */
    CLIENT_IS(&l, "127.0.0.2", "unknown, 10.1.1.1", "10.1.1.1", 1);  /* ... or at the last hop */
    CLIENT_IS(&l, "127.0.0.2", "", "127.0.0.2", 0);
    CLIENT_IS(&l, "127.0.0.2", " , ", "127.0.0.2", 0);
    CLIENT_IS(&l, "127.0.0.2", "1.2.3.4,,", "1.2.3.4", 1);
    CLIENT_IS(&l, "127.0.0.2", "1.2.3.4:5678", "1.2.3.4", 1);
    CLIENT_IS(&l, "127.0.0.2", "[2001:db8::7]:443", "2001:db8::7", 1);
    CLIENT_IS(&l, "127.0.0.2", "2001:db8::7", "2001:db8::7", 1);
    CLIENT_IS(&l, "127.0.0.2", "[2001:db8::7", "127.0.0.2", 0);
    CLIENT_IS(&l, "127.0.0.2", "2001:db8::7, fd00::1", "2001:db8::7", 1);
    CLIENT_IS(&l, "::ffff:127.0.0.2", "1.2.3.4", "1.2.3.4", 1);
    CLIENT_IS(&l, "127.0.0.2", "1.2.3.4\x01", "127.0.0.2", 0);
    CLIENT_IS(&l, "127.0.0.2", "999.1.1.1", "127.0.0.2", 0);
    /* a long header: only its right end matters */
    char longx[3000];
    memset(longx, 'x', sizeof(longx));
    memcpy(longx + sizeof(longx) - 12, ", 5.6.7.8", 9);
    longx[sizeof(longx) - 3] = '\0';
    const char *lx = longx;
    CLIENT_IS(&l, "127.0.0.2", lx, "5.6.7.8", 1);

    /* several headers are one list; past the buffer the right end stays */
    struct proxy_xff x;
    proxy_xff_init(&x);
    CHECK(!x.any && x.len == 0 && x.buf[0] == '\0');
    proxy_xff_append(&x, "1.1.1.1");
    proxy_xff_append(&x, NULL);
    proxy_xff_append(&x, "2.2.2.2, 3.3.3.3");
    CHECK(x.any && !strcmp(x.buf, "1.1.1.1,,2.2.2.2, 3.3.3.3"));
    CLIENT_IS(&l, "127.0.0.2", x.buf, "3.3.3.3", 1);
    proxy_xff_init(&x);
    for (int i = 0; i < 400; i++)
        proxy_xff_append(&x, "6.6.6.6");
    proxy_xff_append(&x, "4.4.4.4");
    CHECK(x.len == sizeof(x.buf) - 1 && strlen(x.buf) == x.len);
    CHECK(x.len >= 7 && !strcmp(x.buf + x.len - 7, "4.4.4.4"));
    CLIENT_IS(&l, "127.0.0.2", x.buf, "4.4.4.4", 1);
    proxy_xff_init(&x);
    proxy_xff_append(&x, longx); /* one value longer than the buffer */
    CHECK(x.len == sizeof(x.buf) - 1 && !strcmp(x.buf + x.len - 9, ", 5.6.7.8"));

    char out[8];
    struct sockaddr_storage v6 = sa("2001:db8::1");
    proxy_addr_str((struct sockaddr *)&v6, out, sizeof(out)); /* too small: "-" */
    CHECK(!strcmp(out, "-"));
    return fails ? 1 : 0;
}
