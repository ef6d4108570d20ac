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
 *       allocation would (ROBUSTNESS item 34: a 503, the daemon lives).
 *   INFERD_FAULT_DEVICE_LOST=N  the N-th step and every later one report
 *       INF_EDEVICE, as a backend whose device or context is lost does
 *       (cudaErrorIllegalAddress and the other sticky errors; ROBUSTNESS
 *       item 35: stop accepting, drain, exit non-zero).
 *   INFERD_FAULT_DEVICE_LOST=/PATH  the same from the first step that ends
 *       after the file PATH exists (a test picks the moment: requests in
 *       flight).
 *   INFERD_FAULT_CRASH=N  the N-th step writes through a null pointer
 *       (address 0x10) on the engine thread: a real SIGSEGV, for the crash
 *       report (daemon/crash.h: the signal, the thread, the address, the
 *       stack in the log, then the default action).
 *   INFERD_FAULT_DEVICE_FREE=BYTES  the device has BYTES free when the
 *       backend starts: the CUDA backend's allocations fail past it and its
 *       free-memory query says no more (allocations count against it, frees
 *       give nothing back); the daemon's fit check believes it on every
 *       backend, so its "does not fit" path runs on the CPU too (item 33).
 *
 * Thread: the step hooks on the engine thread; fault_device_free on any.
 */
#ifndef INFERD_ENGINE_FAULT_H
#define INFERD_ENGINE_FAULT_H

#ifdef INFERD_FAULT_HOOKS
/* Block while $INFERD_FAULT_ENGINE_STALL names an existing file. */
void fault_engine_stall(void);
/* 0, INF_ENOMEM when this is step $INFERD_FAULT_STEP, INF_EDEVICE from step
 * $INFERD_FAULT_DEVICE_LOST on (graph_wait counts the steps). */
int fault_step_failure(void);
/* 1 and *bytes = $INFERD_FAULT_DEVICE_FREE when it is set, else 0. */
int fault_device_free(unsigned long long *bytes);
#else
static inline void fault_engine_stall(void)
{
}
static inline int fault_step_failure(void)
{
    return 0;
}
static inline int fault_device_free(unsigned long long *bytes)
{
    (void)bytes;
    return 0;
}
#endif

#endif
