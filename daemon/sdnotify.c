/* sdnotify — sd_notify over $NOTIFY_SOCKET, written from the protocol description.
 *
 * One SOCK_DGRAM socket is opened at init and kept: sendto on a datagram
 * socket is atomic and thread-safe, so the engine thread (WATCHDOG=1) and the
 * loop thread (STATUS=, READY=1, STOPPING=1) share it without a lock. The
 * watchdog rate limit is one atomic timestamp (CAS so that two threads do not
 * both send).
 */
#include "daemon/sdnotify.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "engine/err.h"
#include "engine/log.h"

static int sdn_fd = -1;
static struct sockaddr_un sdn_addr;
static socklen_t sdn_addr_len;
static uint64_t sdn_wd_usec;
static _Atomic uint64_t sdn_wd_last; /* CLOCK_MONOTONIC µs of the last WATCHDOG=1 */

static uint64_t sdn_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int sdn_init(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    const char *wd = getenv("WATCHDOG_USEC");
    const char *wd_pid = getenv("WATCHDOG_PID");

    sdn_wd_usec = 0;
    if (wd && *wd) {
        char *end;
        unsigned long long v = strtoull(wd, &end, 10);
        /* WATCHDOG_PID, when set, says which process the watchdog is for. */
        int for_us = !wd_pid || !*wd_pid || strtol(wd_pid, NULL, 10) == (long)getpid();
        if (*end == '\0' && v > 0 && for_us)
            sdn_wd_usec = v;
    }
    if (!path || !*path)
        return 0;
    size_t len = strlen(path);
    if (len >= sizeof(sdn_addr.sun_path) || (path[0] != '/' && path[0] != '@')) {
        log_warn("sdnotify: NOTIFY_SOCKET \"%s\" is not a usable AF_UNIX address", path);
        return INF_EINVAL;
    }
    memset(&sdn_addr, 0, sizeof(sdn_addr));
    sdn_addr.sun_family = AF_UNIX;
    memcpy(sdn_addr.sun_path, path, len);
    if (path[0] == '@')
        sdn_addr.sun_path[0] = '\0'; /* abstract namespace: no trailing NUL counted */
    sdn_addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                               (path[0] == '@' ? 0 : 1));
    sdn_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sdn_fd < 0) {
        log_warn("sdnotify: socket() failed (%d: %s)", errno, strerror(errno));
        return INF_EIO;
    }
    return 0;
}

void sdn_close(void)
{
    if (sdn_fd >= 0)
        close(sdn_fd);
    sdn_fd = -1;
}

int sdn_enabled(void)
{
    return sdn_fd >= 0;
}

int sdn_send(const char *fmt, ...)
{
    if (sdn_fd < 0)
        return 0;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(msg))
        return INF_ETOOBIG;
    ssize_t w;
    do
        w = sendto(sdn_fd, msg, (size_t)n, MSG_NOSIGNAL, (const struct sockaddr *)&sdn_addr,
                   sdn_addr_len);
    while (w < 0 && errno == EINTR);
    if (w < 0) {
        log_debug("sdnotify: sendto() failed (%d: %s)", errno, strerror(errno));
        return INF_EIO;
    }
    return 0;
}

uint64_t sdn_watchdog_usec(void)
{
    return sdn_wd_usec;
}

void sdn_watchdog(void)
{
    if (sdn_fd < 0 || sdn_wd_usec == 0)
        return;
    uint64_t now = sdn_now_us();
    uint64_t last = atomic_load(&sdn_wd_last);
    if (last && now - last < sdn_wd_usec / 2)
        return;
    if (!atomic_compare_exchange_strong(&sdn_wd_last, &last, now))
        return; /* another thread just sent it */
    sdn_send("WATCHDOG=1");
}
