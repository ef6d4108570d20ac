/* sdnotify — the systemd notification protocol (sd_notify(3)) without libsystemd.
 *
 * Messages are newline-separated VAR=value lines sent as one datagram to the
 * AF_UNIX socket named by $NOTIFY_SOCKET (a leading '@' means the Linux
 * abstract namespace). Without $NOTIFY_SOCKET every call is a no-op.
 * Process-wide state, set up once by sdn_init on the loop thread before any
 * other thread starts; sdn_send and sdn_watchdog may then be called from any
 * thread (one sendto per message; the watchdog rate limit is atomic).
 */
#ifndef INFERD_SDNOTIFY_H
#define INFERD_SDNOTIFY_H

#include <stdint.h>

/* Read $NOTIFY_SOCKET and $WATCHDOG_USEC / $WATCHDOG_PID. Returns 0 (also
 * when there is no socket) or a negative INF_E* code for a bad address. */
int sdn_init(void);
void sdn_close(void);

/* 1 when a notify socket is configured. */
int sdn_enabled(void);

/* Send one message (printf-style); 0 or a negative INF_E* code. */
int sdn_send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Watchdog interval asked by systemd in microseconds (0: no watchdog). */
uint64_t sdn_watchdog_usec(void);

/* Send WATCHDOG=1 unless one was sent less than WATCHDOG_USEC/2 ago. */
void sdn_watchdog(void);

#endif
