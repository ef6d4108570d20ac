/* crash — see crash.h. Everything in the handler is async-signal-safe
 * (write, getpid, syscall, sigaction, raise) except backtrace(3) and
 * backtrace_symbols_fd(3), which glibc documents as writing straight to the
 * fd without malloc once backtrace has been called before (crash_install
 * does). Numbers are formatted by hand: no stdio in a handler. */
#include "daemon/crash.h"

#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/err.h"

#define CRASH_FRAMES 64

static const int crash_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
static int crash_installed;
/* the alternate stack: a handler that runs on an overflowed stack would
 * fault again at once (MINSIGSTKSZ is small; the unwinder wants more) */
static char crash_stack[64 * 1024];

static void crash_put(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0)
            return; /* nothing else can be done from here */
        s += w;
        n -= (size_t)w;
    }
}

static void crash_str(const char *s)
{
    crash_put(s, strlen(s));
}

/* v in base 10 or 16 (with 0x), into the log line */
static void crash_num(uintptr_t v, int hex)
{
    char b[24];
    int i = (int)sizeof(b);
    const unsigned base = hex ? 16 : 10;
    do {
        b[--i] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v && i > 2);
    if (hex) {
        b[--i] = 'x';
        b[--i] = '0';
    }
    crash_put(b + i, sizeof(b) - (size_t)i);
}

static void crash_snum(long v)
{
    if (v < 0) {
        crash_str("-");
        crash_num((uintptr_t)(-(v + 1)) + 1, 0);
    } else {
        crash_num((uintptr_t)v, 0);
    }
}

static const char *crash_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "SIGABRT";
    }
}

/* The log lines carry the journal's priority prefix as engine/log.c's
 * error lines do ("<3>error: "); each stack frame is one such line. */
static void crash_handler(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    crash_str("<3>error: fatal signal ");
    crash_snum(sig);
    crash_str(" (");
    crash_str(crash_name(sig));
    crash_str(") in thread ");
    crash_snum((long)syscall(SYS_gettid));
    crash_str(" of pid ");
    crash_snum((long)getpid());
    if (si && si->si_code <= 0) { /* kill(2), raise(3), tgkill: no fault */
        crash_str(", sent by pid ");
        crash_snum((long)si->si_pid);
    } else if (si && sig != SIGABRT) {
        crash_str(", address ");
        crash_num((uintptr_t)si->si_addr, 1);
        crash_str(", code ");
        crash_snum(si->si_code);
    }
    crash_str("; the stack (addr2line -f -e BINARY +OFFSET names a frame):\n");
    void *fr[CRASH_FRAMES];
    const int n = backtrace(fr, CRASH_FRAMES);
    for (int i = 0; i < n; i++) {
        crash_str("<3>error:   #");
        crash_snum(i);
        crash_str(" ");
        backtrace_symbols_fd(&fr[i], 1, STDERR_FILENO); /* one line, its own newline */
    }
    crash_str("<3>error: the daemon stops here; this is a bug: please report these lines\n");
    /* SA_RESETHAND made the action the default again: raised now, the
     * signal is blocked until this returns, then ends the process as it
     * would have without us (status, core dump). A real fault would also
     * repeat on return; a sent one would not. */
    raise(sig);
}

/* a sanitizer build keeps its own handler: its report says more */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CRASH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CRASH_SANITIZED 1
#endif
#endif
#ifndef CRASH_SANITIZED
#define CRASH_SANITIZED 0
#endif

int crash_install(void)
{
    if (crash_installed || CRASH_SANITIZED)
        return 0;
    void *warm[2];
    (void)backtrace(warm, 2); /* the unwinder loaded now, not in a handler */
    stack_t ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_sp = crash_stack;
    ss.ss_size = sizeof(crash_stack);
    const int alt = sigaltstack(&ss, NULL) == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = crash_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | (alt ? SA_ONSTACK : 0);
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(crash_sigs) / sizeof(crash_sigs[0]); i++)
        if (sigaction(crash_sigs[i], &sa, NULL) != 0)
            return INF_EINVAL;
    crash_installed = 1;
    return 0;
}
