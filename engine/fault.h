/* fault — test-only fault hooks: make the daemon fail on purpose so a test
 * can prove what happens then (ROBUSTNESS item 36: a stuck engine).
 *
 * Compiled in only with meson's fault_hooks option (auto: on in debug and
 * debugoptimized builds, off in release and plain ones, which is what the
 * Debian package builds); without it every hook is an empty inline
 * function and no environment variable is read. With it, a hook acts only
 * when its variable is set:
 *
 *   INFERD_FAULT_ENGINE_STALL=PATH  while the file PATH exists, the engine
 *       loop blocks where it would start its next iteration (as if a step
 *       hung in a kernel or a driver call): no step, no WATCHDOG=1.
 *   INFERD_FAULT_STEP=N  the N-th step of the graph (from 1) reports
 *       INF_ENOMEM after its work completed, as a backend's failed
 *       allocation would (ROBUSTNESS item 33: a 503, the daemon lives).
 *
 * Thread: both on the engine thread.
 */
#ifndef INFERD_ENGINE_FAULT_H
#define INFERD_ENGINE_FAULT_H

#ifdef INFERD_FAULT_HOOKS
/* Block while $INFERD_FAULT_ENGINE_STALL names an existing file. */
void fault_engine_stall(void);
/* 0, or INF_ENOMEM when this is step $INFERD_FAULT_STEP (graph_wait). */
int fault_step_failure(void);
#else
static inline void fault_engine_stall(void)
{
}
static inline int fault_step_failure(void)
{
    return 0;
}
#endif

#endif
