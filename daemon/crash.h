/* crash — what a fatal signal leaves in the log: the signal, the thread,
 * the faulting address and the stack, written to stderr (the journal under
 * systemd) before the signal's default action runs (the exit status and
 * core dump systemd, a shell and a test harness expect).
 *
 * Why: the daemon must never die from a request, and when it does anyway
 * the log is the only witness a user has. Session 56 saw one SIGSEGV under
 * the 100k soak whose log held nothing but the harness's "status -11"; 26
 * reruns did not repeat it. With this, the next one says where it was.
 *
 * Covered: SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT (an assert, or glibc's
 * heap checks). The report is async-signal-safe but for backtrace(3),
 * which crash_install calls once so that its unwinder is loaded before any
 * crash (its first call may allocate). A stack overflow on the thread that
 * installed the handler runs it on an alternate stack; on other threads the
 * handler gets no stack to run on, and the default action alone remains.
 * ASan / TSan builds keep the sanitizer's own handler (its report says
 * more); there crash_install does nothing.
 * Thread: crash_install on the main thread, before other threads start. */
#ifndef INFERD_DAEMON_CRASH_H
#define INFERD_DAEMON_CRASH_H

/* Install the handlers (once; later calls do nothing). 0, or an INF_*
 * error when sigaction refused (the daemon then runs without them). */
int crash_install(void);

#endif
