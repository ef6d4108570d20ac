/* log — see log.h. */
#include "log.h"
#include "err.h"

#include <stdarg.h>
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
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w; /* ROBUSTNESS 37: a full log destination must not stop serving. */
}
