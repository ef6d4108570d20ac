/* proxy — trusted reverse proxies and X-Forwarded-For (proxy.h). */
#include "api/proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/err.h"

static int proxy_is_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t';
}

/* Parse one address (no brackets, no port) into family + bytes. */
static int proxy_parse_addr(const char *s, size_t n, int *family, uint8_t addr[16])
{
    char tmp[64];
    if (n == 0 || n >= sizeof(tmp))
        return INF_EINVAL;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    if (inet_pton(AF_INET, tmp, addr) == 1) {
        *family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, tmp, addr) == 1) {
        *family = AF_INET6;
        return 0;
    }
    return INF_EINVAL;
}

int proxy_list_parse(const char *text, struct proxy_list *out, char *msg, size_t msg_cap)
{
    memset(out, 0, sizeof(*out));
    const char *p = text ? text : "";
    while (*p) {
        while (*p && proxy_is_sep(*p))
            p++;
        if (!*p)
            break;
        const char *e = p;
        while (*e && !proxy_is_sep(*e))
            e++;
        size_t n = (size_t)(e - p);
        const char *slash = memchr(p, '/', n);
        struct proxy_net net;
        memset(&net, 0, sizeof(net));
        int bad = proxy_parse_addr(p, slash ? (size_t)(slash - p) : n, &net.family, net.addr);
        int maxbits = net.family == AF_INET ? 32 : 128;
        net.bits = maxbits;
        if (!bad && slash) {
            char *end;
            const char *b = slash + 1;
            long v = (b < e && *b >= '0' && *b <= '9') ? strtol(b, &end, 10) : -1;
            if (v < 0 || v > maxbits || (v >= 0 && end != e))
                bad = 1;
            else
                net.bits = (int)v;
        }
        if (bad) {
            snprintf(msg, msg_cap, "trusted_proxies: \"%.*s\" is not an IPv4/IPv6 address or CIDR block",
                     (int)(n > 64 ? 64 : n), p);
            return INF_EINVAL;
        }
        if (out->n == PROXY_MAX) {
            snprintf(msg, msg_cap, "trusted_proxies: more than %d entries", PROXY_MAX);
            return INF_EINVAL;
        }
        out->net[out->n++] = net;
        p = e;
    }
    return 0;
}

/* family + bytes of sa, IPv4-mapped IPv6 seen as IPv4. */
static int proxy_sa_bytes(const struct sockaddr *sa, int *family, uint8_t addr[16])
{
    if (sa->sa_family == AF_INET) {
        memcpy(addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        *family = AF_INET;
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(b, mapped, 12)) {
            memcpy(addr, b + 12, 4);
            *family = AF_INET;
        } else {
            memcpy(addr, b, 16);
            *family = AF_INET6;
        }
        return 0;
    }
    return INF_EINVAL;
}

static int proxy_match(const struct proxy_list *l, int family, const uint8_t *addr)
{
    for (int i = 0; i < l->n; i++) {
        const struct proxy_net *n = &l->net[i];
        if (n->family != family)
            continue;
        int full = n->bits / 8, rest = n->bits % 8;
        if (memcmp(n->addr, addr, (size_t)full))
            continue;
        if (rest) {
            uint8_t m = (uint8_t)(0xff << (8 - rest));
            if ((n->addr[full] & m) != (addr[full] & m))
                continue;
        }
        return 1;
    }
    return 0;
}

int proxy_is_trusted(const struct proxy_list *l, const struct sockaddr *sa)
{
    int family;
    uint8_t addr[16];
    if (l->n == 0 || proxy_sa_bytes(sa, &family, addr))
        return 0;
    return proxy_match(l, family, addr);
}

static void proxy_set(struct sockaddr_storage *out, int family, const uint8_t *addr)
{
    memset(out, 0, sizeof(*out));
    if (family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)out;
        s4->sin_family = AF_INET;
        memcpy(&s4->sin_addr, addr, 4);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
        s6->sin6_family = AF_INET6;
        memcpy(&s6->sin6_addr, addr, 16);
    }
}

int proxy_client(const struct proxy_list *l, const struct sockaddr *peer, const char *xff,
                 struct sockaddr_storage *client)
{
    size_t plen = peer->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                : sizeof(struct sockaddr_in);
    memset(client, 0, sizeof(*client));
    memcpy(client, peer, plen);
    if (!xff || !proxy_is_trusted(l, peer))
        return 0;
    int got = 0;
    size_t end = strlen(xff);
    /* right to left over the comma-separated entries */
    while (end > 0) {
        size_t start = end;
        while (start > 0 && xff[start - 1] != ',')
            start--;
        size_t a = start, b = end;
        while (a < b && (xff[a] == ' ' || xff[a] == '\t'))
            a++;
        while (b > a && (xff[b - 1] == ' ' || xff[b - 1] == '\t'))
            b--;
        end = start ? start - 1 : 0;
        if (a == b) {
            if (start == 0)
                break;
            continue; /* an empty list element (",,") is allowed and skipped */
        }
        /* "[v6]" and "[v6]:port" / "v4:port" as some proxies write them */
        const char *s = xff + a;
        size_t n = b - a;
        if (s[0] == '[') {
            const char *rb = memchr(s, ']', n);
            if (!rb)
                break;
            n = (size_t)(rb - s) - 1;
            s++;
        } else {
            const char *colon = memchr(s, ':', n);
            if (colon && !memchr(colon + 1, ':', n - (size_t)(colon - s) - 1))
                n = (size_t)(colon - s); /* one colon: v4:port */
        }
        int family;
        uint8_t addr[16];
        if (proxy_parse_addr(s, n, &family, addr))
            break; /* not an address: stop at the last trusted hop */
        proxy_set(client, family, addr);
        got = 1;
        if (!proxy_match(l, family, addr))
            return 1;
        if (start == 0)
            break;
    }
    return got;
}

void proxy_xff_init(struct proxy_xff *x)
{
    x->len = 0;
    x->any = 0;
    x->buf[0] = '\0';
}

void proxy_xff_append(struct proxy_xff *x, const char *value)
{
    const char *v = value ? value : "";
    size_t n = strlen(v), cap = sizeof(x->buf) - 1;
    if (x->any) { /* the separator; when full, the oldest byte makes room */
        if (x->len == cap)
            memmove(x->buf, x->buf + 1, --x->len);
        x->buf[x->len++] = ',';
    }
    x->any = 1;
    if (n >= cap) { /* this value alone fills the buffer: its tail */
        memcpy(x->buf, v + n - cap, cap);
        x->len = cap;
    } else {
        if (x->len + n > cap) {
            size_t drop = x->len + n - cap;
            memmove(x->buf, x->buf + drop, x->len - drop);
            x->len -= drop;
        }
        memcpy(x->buf + x->len, v, n);
        x->len += n;
    }
    x->buf[x->len] = '\0';
}

void proxy_addr_str(const struct sockaddr *sa, char *out, size_t cap)
{
    int family;
    uint8_t addr[16];
    if (!cap)
        return;
    if (proxy_sa_bytes(sa, &family, addr) || !inet_ntop(family, addr, out, (socklen_t)cap))
        snprintf(out, cap, "-");
}
