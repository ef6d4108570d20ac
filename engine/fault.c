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
static long long fault_step_n, fault_steps;
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
}

int fault_step_failure(void)
{
    pthread_once(&fault_once, fault_init);
    if (fault_step_n <= 0 || ++fault_steps != fault_step_n)
        return 0;
    log_warn("fault hook: step %lld fails with INF_ENOMEM", fault_step_n);
    return INF_ENOMEM;
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
