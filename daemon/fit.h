/* fit — does the model fit in the device's memory? `inferd serve` asks twice
 * (ROBUSTNESS 33): before the weights go up (the GGUF's tensor bytes against
 * the free memory, so the answer comes before a half-done upload), and with
 * the weights resident, before the KV cache and the activations are
 * allocated (graph_memory against what is left). A "no" is one log line
 * naming every size and the free/total memory, and the daemon exits with
 * CMD_CONFIG (78), which the systemd units do not restart: the same
 * configuration on the same device would fail the same way. An allocation
 * that fails during the load anyway (the backend's own scratch, another
 * process taking memory meanwhile) gets the same line through fit_explain.
 *
 * The device memory is known on the CUDA backend (cuda_backend_mem); in
 * test builds INFERD_FAULT_DEVICE_FREE (engine/fault.h) sets it on every
 * backend, so the CPU runs this path in CI. Thread: the load worker.
 */
#ifndef INFERD_DAEMON_FIT_H
#define INFERD_DAEMON_FIT_H

#include <stddef.h>

struct backend;
struct gguf_file;
struct inf_error;

struct fit_mem {
    int known;       /* 0: no device memory to check against (CPU) */
    size_t free_b, total;
    const char *what; /* "GPU memory", or the fault hook's budget */
};

struct fit_need {
    size_t weights;  /* from the GGUF (before the upload) or resident */
    size_t kv;       /* 0 until the KV cache is sized */
    size_t act;      /* the graph's activations; 0 until sized */
    int resident;    /* 1: the weights are in memory already (not in free_b) */
};

/* What be's device has free now (m->known 0 when nothing says). */
void fit_device(const struct backend *be, struct fit_mem *m);
/* Sum of the tensor bytes of f: what an upload of every weight takes. */
size_t fit_gguf_weight_bytes(const struct gguf_file *f);
/* 0 when need fits m (or m is not known), else INF_ETOOBIG: the line naming
 * every size is logged (it is longer than err holds), err says which
 * memory and stage, the point of the load ("before the upload"). */
int fit_check(const char *stage, const struct fit_need *need, const struct fit_mem *m,
              struct inf_error *err);
/* An allocation failed during the load (err says which): the same line,
 * with that cause, and INF_ETOOBIG; for m->known only. */
int fit_explain(const char *stage, const struct fit_need *need, const struct fit_mem *m,
                struct inf_error *err);

#endif
