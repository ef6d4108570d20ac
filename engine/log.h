/* log — leveled logging to stderr in a journald-friendly form.
 *
 * Each line starts with the syslog priority prefix "<N>" that journald parses
 * (sd-daemon(3)) when stderr goes to the journal, then the level name and the
 * message. Lines are written with one write(2) so threads do not interleave
 * inside a line. The level check happens in the macro, before the arguments
 * are evaluated. Any thread may call these. A failing write (full disk, closed
 * pipe) is ignored: serving continues (ROBUSTNESS 37).
 */
#ifndef INFERD_LOG_H
#define INFERD_LOG_H

enum log_level {
    LOG_LVL_ERROR = 3,
    LOG_LVL_WARN = 4,
    LOG_LVL_INFO = 6,
    LOG_LVL_DEBUG = 7,
};

extern int log__level;

void log_set_level(int level);
/* Parse "error|warn|info|debug"; returns 0 or INF_EINVAL. */
int log_parse_level(const char *s, int *level);
/* Drop the "<N>" prefix and add timestamps: for a terminal rather than journald. */
void log_set_timestamps(int on);

void log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...)                                 \
    do {                                               \
        if (log__level >= LOG_LVL_ERROR)               \
            log_write(LOG_LVL_ERROR, __VA_ARGS__);     \
    } while (0)
#define log_warn(...)                                  \
    do {                                               \
        if (log__level >= LOG_LVL_WARN)                \
            log_write(LOG_LVL_WARN, __VA_ARGS__);      \
    } while (0)
#define log_info(...)                                  \
    do {                                               \
        if (log__level >= LOG_LVL_INFO)                \
            log_write(LOG_LVL_INFO, __VA_ARGS__);      \
    } while (0)
#define log_debug(...)                                 \
    do {                                               \
        if (log__level >= LOG_LVL_DEBUG)               \
            log_write(LOG_LVL_DEBUG, __VA_ARGS__);     \
    } while (0)

#endif
