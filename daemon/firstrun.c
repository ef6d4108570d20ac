/* firstrun — see firstrun.h. */
#include "daemon/firstrun.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Messages carry a path and what to do: longer than struct inf_error holds. */
__attribute__((format(printf, 3, 4))) static int firstrun_msg(char *msg, size_t cap,
                                                              const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

int firstrun_check_model(const char *path, const char *config_path, char *msg, size_t cap)
{
    /* where the user fixes it */
    char where[1200];
    if (config_path)
        snprintf(where, sizeof(where), "set model = in %s, or pass --model FILE.gguf",
                 config_path);
    else
        snprintf(where, sizeof(where), "pass --model FILE.gguf");
    /* O_NONBLOCK: opening a FIFO for reading must not wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            return firstrun_msg(msg, cap,
                                "model file \"%s\" not found: %s naming an existing GGUF file",
                                path, where);
        if (e == EACCES || e == EPERM)
            return firstrun_msg(msg, cap,
                                "model file \"%s\" is not readable by this user (uid %u): "
                                "make it readable (chmod a+r, or chgrp inferd + chmod g+r; "
                                "the service reads models in /var/lib/inferd/models)",
                                path, (unsigned)getuid());
        return firstrun_msg(msg, cap, "model file \"%s\": %s (%s)", path, strerror(e),
                            where);
    }
    struct stat st;
    int isdir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    close(fd);
    if (isdir)
        return firstrun_msg(msg, cap, "model \"%s\" is a directory: %s naming a GGUF file",
                            path, where);
    return 0;
}

int firstrun_check_port(const char *host, int port, char *msg, size_t cap)
{
    if (port <= 0 || port > 65535)
        return 0;
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    socklen_t len;
    /* the addresses api_new accepts (http_sockaddr); others fail there */
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1 || !strcmp(host, "localhost")) {
        if (!strcmp(host, "localhost"))
            s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        len = sizeof(*s4);
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        len = sizeof(*s6);
    } else {
        return 0;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0; /* no socket now: api_new reports what goes wrong */
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ss.ss_family == AF_INET6) /* as MHD without MHD_USE_DUAL_STACK */
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    int e = bind(fd, (struct sockaddr *)&ss, len) ? errno : 0;
    close(fd); /* never listened: leaves nothing behind */
    char addr[300];
    if (ss.ss_family == AF_INET6)
        snprintf(addr, sizeof(addr), "[%s]:%d", host, port);
    else
        snprintf(addr, sizeof(addr), "%s:%d", host, port);
    if (e == EADDRINUSE)
        return firstrun_msg(msg, cap,
                            "port in use: %s is taken by another process (another inferd? "
                            "`ss -ltnp 'sport = :%d'` shows it); stop it or choose another "
                            "port (--port N or port = N)",
                            addr, port);
    if (e == EACCES)
        return firstrun_msg(msg, cap,
                            "cannot listen on %s: ports below 1024 need root or "
                            "CAP_NET_BIND_SERVICE; choose a port of 1024 or more (--port N)",
                            addr);
    if (e == EADDRNOTAVAIL)
        return firstrun_msg(msg, cap,
                            "cannot listen on %s: %s is not an address of this machine "
                            "(host = 127.0.0.1, 0.0.0.0, ::1 or a local interface's address)",
                            addr, host);
    return 0;
}
