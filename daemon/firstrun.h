/* firstrun — the checks `inferd serve` makes before it listens.
 *
 * A newcomer's first mistakes get one line naming the file or port and what
 * to do, and the exit status the README documents (1), before anything
 * starts: the model itself loads on a worker after the HTTP port is up, so
 * a missing file would otherwise show as a daemon that starts, answers
 * /health 503 and then dies; and a port held by another daemon must be
 * refused, not shared (see firstrun_check_port).
 * Thread: the loop thread, at startup.
 */
#ifndef INFERD_FIRSTRUN_H
#define INFERD_FIRSTRUN_H

#include <stddef.h>

/* The model file can be opened for reading and is not a directory (a FIFO
 * or device is fine: opened non-blocking, never read here). config_path is
 * the --config file the path came from, or NULL. 0, or -1 with a one-line
 * message in msg (cap bytes; 1 KiB + the path is enough). */
int firstrun_check_model(const char *path, const char *config_path, char *msg, size_t cap);

/* Nobody listens on host:port: a probe socket binds it with SO_REUSEADDR
 * (a just-stopped daemon's TIME_WAIT connections do not count, so a restart
 * binds at once) and without SO_REUSEPORT (so a running daemon's socket
 * makes the bind fail with EADDRINUSE: "port in use"). Port 0 and hosts the
 * HTTP layer will reject anyway pass. 0, or -1 with the message in msg. */
int firstrun_check_port(const char *host, int port, char *msg, size_t cap);

#endif
