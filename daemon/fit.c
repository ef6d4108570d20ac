/* fit — the daemon's "does the model fit in device memory" check (fit.h). */
#include "daemon/fit.h"

#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cuda/cuda.h"
#include "engine/err.h"
#include "engine/fault.h"
#include "engine/gguf.h"
#include "engine/log.h"

void fit_device(const struct backend *be, struct fit_mem *m)
{
    size_t w = 0;
    unsigned long long budget = 0;
    memset(m, 0, sizeof(*m));
    if (!strcmp(be->ops->name, "cuda") && cuda_backend_mem(be, &w, &m->free_b, &m->total) == 0) {
        /* the CUDA backend applies INFERD_FAULT_DEVICE_FREE itself */
        m->known = 1;
        m->what = "GPU memory";
    } else if (fault_device_free(&budget)) {
        m->known = 1;
        m->free_b = m->total = (size_t)budget;
        m->what = "the INFERD_FAULT_DEVICE_FREE test budget";
    }
}

size_t fit_gguf_weight_bytes(const struct gguf_file *f)
{
    size_t sum = 0;
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        sum += (size_t)gguf_tensor_at(f, i)->n_bytes;
    return sum;
}

static double fit_mib(size_t b)
{
    return (double)b / 1048576.0;
}

/* The one line: every size, then the memory. */
static void fit_line(char *out, size_t cap, const char *stage, const struct fit_need *n,
                     const struct fit_mem *m)
{
    char kv[64] = "not sized yet", act[64] = "not sized yet";
    if (n->kv)
        snprintf(kv, sizeof(kv), "%.2f MiB", fit_mib(n->kv));
    if (n->act)
        snprintf(act, sizeof(act), "%.2f MiB", fit_mib(n->act));
    snprintf(out, cap,
             "the model does not fit in %s (%s): weights %.2f MiB%s, KV cache %s, "
             "activations %s; %.2f MiB free of %.2f MiB; lower n_ctx, max_seqs, kv_tokens "
             "or step_tokens, or use a smaller model or quantization",
             m->what, stage, fit_mib(n->weights), n->resident ? " (resident)" : "", kv, act,
             fit_mib(m->free_b), fit_mib(m->total));
}

int fit_check(const char *stage, const struct fit_need *need, const struct fit_mem *m,
              struct inf_error *err)
{
    if (!m->known)
        return 0;
    const size_t want = (need->resident ? 0 : need->weights) + need->kv + need->act;
    if (want <= m->free_b)
        return 0;
    char line[512];
    fit_line(line, sizeof(line), stage, need, m);
    log_error("%s", line); /* longer than an inf_error holds */
    return inf_error_set(err, INF_ETOOBIG, "the model does not fit in %s (%s)", m->what,
                         stage);
}

int fit_explain(const char *stage, const struct fit_need *need, const struct fit_mem *m,
                struct inf_error *err)
{
    char line[512];
    fit_line(line, sizeof(line), stage, need, m);
    log_error("%s; the allocation that failed: %s", line, err->msg);
    return inf_error_set(err, INF_ETOOBIG, "the model does not fit in %s (%s)", m->what,
                         stage);
}
