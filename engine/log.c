/* log — see log.h. */
#include "log.h"
#include "err.h"

#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int log__level = LOG_LVL_INFO;
static int log_timestamps;

void log_set_level(int level)
{
    log__level = level;
}

void log_set_timestamps(int on)
{
    log_timestamps = on;
}

int log_parse_level(const char *s, int *level)
{
    static const struct {
        const char *name;
        int level;
    } names[] = {
        {"error", LOG_LVL_ERROR}, {"warn", LOG_LVL_WARN}, {"warning", LOG_LVL_WARN},
        {"info", LOG_LVL_INFO},   {"debug", LOG_LVL_DEBUG},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *level = names[i].level;
            return INF_OK;
        }
    }
    return INF_EINVAL;
}

static const char *log_name(int level)
{
    switch (level) {
    case LOG_LVL_ERROR: return "error";
    case LOG_LVL_WARN: return "warn";
    case LOG_LVL_INFO: return "info";
    default: return "debug";
    }
}

/* ROBUSTNESS 37: a full log destination must not stop serving. A failing
 * write (/dev/full, a closed pipe: SIGPIPE is ignored by the daemon) is
 * ignored; a full pipe or socket (a reader that stopped reading, a stuck
 * journald) would block the loop thread in write(2), so a line goes out only
 * when poll says the fd can take it now, and is dropped otherwise. A line is
 * at most 2048 bytes, less than PIPE_BUF: a pipe that polls writable takes
 * it whole. A spin lock (held for one poll and one write; <pthread.h> cannot
 * be included here: engine/sched.h shadows <sched.h>) keeps two threads from
 * both seeing the last free room.
 * The count of dropped lines is reported with the next line that gets out. */
static atomic_flag log_busy = ATOMIC_FLAG_INIT;
static unsigned long log_dropped;

static int log_ready(void)
{
    struct pollfd p = {STDERR_FILENO, POLLOUT, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLOUT | POLLERR | POLLHUP | POLLNVAL));
}

static void log_emit(const char *line, size_t len)
{
    while (atomic_flag_test_and_set_explicit(&log_busy, memory_order_acquire))
        ;
    if (!log_ready()) {
        log_dropped++;
        atomic_flag_clear_explicit(&log_busy, memory_order_release);
        return;
    }
    if (log_dropped) {
        char note[96];
        int k = snprintf(note, sizeof(note),
                         "<%d>warn: %lu log lines dropped (log destination full)\n",
                         LOG_LVL_WARN, log_dropped);
        log_dropped = 0;
        ssize_t w = write(STDERR_FILENO, note, (size_t)k);
        (void)w;
        if (!log_ready()) {
            log_dropped++;
            atomic_flag_clear_explicit(&log_busy, memory_order_release);
            return;
        }
    }
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w; /* an error (ENOSPC, EPIPE) just loses the line */
    atomic_flag_clear_explicit(&log_busy, memory_order_release);
}

void log_write(int level, const char *fmt, ...)
{
    char line[2048];
    int n;
    if (log_timestamps) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, log_name(level));
    } else {
        n = snprintf(line, sizeof(line), "<%d>%s: ", level, log_name(level));
    }
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    /* One line, one record: embedded newlines would split it in the journal. */
    for (size_t i = (size_t)n; i < len; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    line[len++] = '\n';
    log_emit(line, len);
}
