/* proxy — trusted reverse proxies and X-Forwarded-For.
 *
 * Behind a reverse proxy every connection comes from the proxy's address, so
 * per-client limits and log lines must key on the client address the proxy
 * reports. The `trusted_proxies` config key lists the proxies (IPv4/IPv6
 * addresses or CIDR blocks, separated by commas or blanks); X-Forwarded-For
 * is believed only on connections from one of them and ignored otherwise
 * (anyone can send the header).
 *
 * The client is found as nginx's real_ip_recursive does: walk the header's
 * list from the right (the entry the nearest proxy appended) past every
 * trusted address; the first untrusted one is the client. When every entry
 * is trusted, the leftmost is. An entry that is not an address (garbage,
 * "unknown", an obfuscated name) ends the walk: the client is then the last
 * address walked, a trusted proxy, never a value the client made up.
 * IPv4-mapped IPv6 peers (::ffff:a.b.c.d) match IPv4 entries.
 * Pure functions, no allocation: any thread.
 */
#ifndef INFERD_API_PROXY_H
#define INFERD_API_PROXY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define PROXY_MAX 32

struct proxy_net {
    int family;        /* AF_INET or AF_INET6 */
    uint8_t addr[16];  /* network bytes (4 used for AF_INET) */
    int bits;          /* prefix length */
};

struct proxy_list {
    int n;
    struct proxy_net net[PROXY_MAX];
};

/* Parse the trusted_proxies value ("" gives an empty list). INF_EINVAL with
 * msg naming the bad entry (or too many of them). */
int proxy_list_parse(const char *text, struct proxy_list *out, char *msg, size_t msg_cap);

/* 1 when sa (AF_INET / AF_INET6) is inside one of the list's blocks. */
int proxy_is_trusted(const struct proxy_list *l, const struct sockaddr *sa);

/* The client address for a connection from peer carrying the
 * X-Forwarded-For value xff (NULL: no header; several headers joined by
 * commas, RFC 9110 5.3). Writes it to *client (sockaddr_in / sockaddr_in6,
 * port 0 for a forwarded one) and returns 1 when it came from the header, 0
 * when it is the peer itself (no header, or peer not trusted). */
int proxy_client(const struct proxy_list *l, const struct sockaddr *peer, const char *xff,
                 struct sockaddr_storage *client);

/* X-Forwarded-For headers joined with commas (RFC 9110 5.3: several
 * headers are one list). When they do not fit, the rightmost part is kept:
 * that is what the trusted proxies appended. buf stays NUL-terminated. */
struct proxy_xff {
    char buf[2048];
    size_t len;
    int any; /* a header was seen */
};
void proxy_xff_init(struct proxy_xff *x);
void proxy_xff_append(struct proxy_xff *x, const char *value); /* value may be NULL */

/* The address as text (no port): "1.2.3.4", "2001:db8::1", or "-". */
void proxy_addr_str(const struct sockaddr *sa, char *out, size_t cap);

#endif
