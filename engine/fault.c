/* fault — the test-only fault hooks (fault.h says which and when). */
#include "engine/fault.h"

#ifdef INFERD_FAULT_HOOKS

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "engine/err.h"
#include "engine/log.h"

static const char *fault_stall_path;
static const char *fault_lost_path;
static int fault_lost;
static long long fault_step_n, fault_lost_n, fault_crash_n, fault_steps;
static unsigned long long fault_free_bytes;
static int fault_free_set;
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

static void fault_init(void)
{
    const char *p = getenv("INFERD_FAULT_ENGINE_STALL");
    fault_stall_path = p && *p ? p : NULL;
    if (fault_stall_path)
        log_warn("fault hook: the engine loop stalls while \"%s\" exists", fault_stall_path);
    const char *n = getenv("INFERD_FAULT_STEP");
    fault_step_n = n && *n ? strtoll(n, NULL, 10) : 0;
    if (fault_step_n > 0)
        log_warn("fault hook: step %lld reports an allocation failure", fault_step_n);
    n = getenv("INFERD_FAULT_DEVICE_LOST");
    if (n && *n == '/')
        fault_lost_path = n;
    else
        fault_lost_n = n && *n ? strtoll(n, NULL, 10) : 0;
    if (fault_lost_n > 0)
        log_warn("fault hook: the device is lost from step %lld on", fault_lost_n);
    if (fault_lost_path)
        log_warn("fault hook: the device is lost once \"%s\" exists", fault_lost_path);
    n = getenv("INFERD_FAULT_CRASH");
    fault_crash_n = n && *n ? strtoll(n, NULL, 10) : 0;
    if (fault_crash_n > 0)
        log_warn("fault hook: step %lld writes through a null pointer", fault_crash_n);
    n = getenv("INFERD_FAULT_DEVICE_FREE");
    if (n && *n) {
        fault_free_set = 1;
        fault_free_bytes = strtoull(n, NULL, 10);
        log_warn("fault hook: the device has %llu bytes free", fault_free_bytes);
    }
}

int fault_step_failure(void)
{
    pthread_once(&fault_once, fault_init);
    ++fault_steps;
    if (fault_crash_n > 0 && fault_steps == fault_crash_n) {
        /* a real fault on the engine thread, at a known address: what
         * daemon/crash.c reports (volatile: the compiler keeps the store) */
        volatile int *volatile p = (volatile int *)16;
        *p = 1;
    }
    if (!fault_lost && ((fault_lost_n > 0 && fault_steps >= fault_lost_n) ||
                        (fault_lost_path && access(fault_lost_path, F_OK) == 0))) {
        fault_lost = 1;
        log_warn("fault hook: step %lld fails with INF_EDEVICE (and every later one)",
                 fault_steps);
    }
    if (fault_lost)
        return INF_EDEVICE;
    if (fault_step_n <= 0 || fault_steps != fault_step_n)
        return 0;
    log_warn("fault hook: step %lld fails with INF_ENOMEM", fault_step_n);
    return INF_ENOMEM;
}

int fault_device_free(unsigned long long *bytes)
{
    pthread_once(&fault_once, fault_init);
    if (fault_free_set)
        *bytes = fault_free_bytes;
    return fault_free_set;
}

static double fault_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void fault_engine_stall(void)
{
    pthread_once(&fault_once, fault_init);
    if (!fault_stall_path || access(fault_stall_path, F_OK) != 0)
        return;
    const double t0 = fault_now();
    log_warn("fault hook: engine loop stalled (\"%s\" exists)", fault_stall_path);
    const struct timespec tick = {0, 10 * 1000 * 1000};
    while (access(fault_stall_path, F_OK) == 0)
        nanosleep(&tick, NULL);
    log_warn("fault hook: engine loop resumed after %.1f s", fault_now() - t0);
}

#endif
