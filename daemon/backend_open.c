/* backend_open — see backend_open.h. */
#include "daemon/backend_open.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/err.h"
#include "engine/log.h"

int backend_kind_parse(const char *s, int *kind)
{
    if (!strcmp(s, "auto"))
        *kind = BACKEND_AUTO;
    else if (!strcmp(s, "cuda"))
        *kind = BACKEND_CUDA;
    else if (!strcmp(s, "cpu"))
        *kind = BACKEND_CPU;
    else
        return INF_EINVAL;
    return 0;
}

int backend_kind_default(void)
{
    const char *e = getenv("INFERD_BACKEND");
    int kind = BACKEND_AUTO;
    if (e && *e)
        backend_kind_parse(e, &kind);
    return kind;
}

int attention_scores_parse(const char *s, int *tc)
{
    if (!strcmp(s, "exact"))
        *tc = 0;
    else if (!strcmp(s, "tensor"))
        *tc = 1;
    else
        return INF_EINVAL;
    return 0;
}

int bool_flag_parse(const char *s, int *on)
{
    if (!strcmp(s, "true"))
        *on = 1;
    else if (!strcmp(s, "false"))
        *on = 0;
    else
        return INF_EINVAL;
    return 0;
}

int batch_invariant_parse(const char *s, int *no_inv)
{
    int inv;
    if (bool_flag_parse(s, &inv))
        return INF_EINVAL;
    *no_inv = !inv;
    return 0;
}

int f16_weights_parse(const char *s, int *mb)
{
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > F16_WEIGHTS_MB_MAX)
        return INF_EINVAL;
    *mb = (int)v;
    return 0;
}

const char *backend_kind_name(int kind)
{
    return kind == BACKEND_CUDA ? "cuda" : kind == BACKEND_CPU ? "cpu" : "auto";
}

static int backend_open_cpu(const struct backend_open_params *p, struct backend **out,
                            struct inf_error *err)
{
    struct backend *be = cpu_backend_new(p->threads);
    if (!be)
        return inf_error_set(err, INF_ENOMEM, "cpu backend: cannot start %d threads", p->threads);
    cpu_backend_set_numerics(be, (enum cpu_numerics)p->numerics);
    *out = be;
    return 0;
}

int backend_open(const struct backend_open_params *p, struct backend **out, struct inf_error *err)
{
    *out = NULL;
    if (p->kind == BACKEND_CPU)
        return backend_open_cpu(p, out, err);
    if (p->numerics != CPU_NUMERICS_INVARIANT) {
        if (p->kind == BACKEND_CUDA)
            return inf_error_set(err, INF_EINVAL,
                                 "llama.cpp numerics are a CPU-backend mode; use --backend cpu");
        log_info("backend auto: llama.cpp numerics asked for: the CPU backend");
        return backend_open_cpu(p, out, err);
    }
    struct inf_error cerr = {0, ""};
    struct backend *be = cuda_backend_new(p->device, &cerr);
    if (be) {
        if (p->no_batch_invariance) {
            cuda_backend_set_batch_invariant(be, 0); /* before model_load: no weights yet */
            log_info("cuda: batch_invariant = false: cuBLAS picks its algorithm per batch size "
                     "(a row may differ by ulps between batch sizes)");
        }
        if (p->f16_weights_mb > 0) {
            if (!p->no_batch_invariance)
                log_warn("cuda: f16_weights_mb needs batch_invariant = false: no F16 copies kept");
            else
                cuda_backend_set_f16_weights(be, (size_t)p->f16_weights_mb << 20);
        }
        cuda_backend_set_q6_planes(be, p->q6_planes_percent);
        if (p->attention_tc) {
            cuda_backend_set_attention_tc(be, 1);
            log_info("cuda: attention_scores = tensor: attention scores by tensor cores "
                     "(logits differ from the CPU backend's by ulps)");
        }
        *out = be;
        return 0;
    }
    if (p->kind == BACKEND_CUDA)
        return inf_error_set(err, cerr.code ? cerr.code : INF_EDEVICE, "%s", cerr.msg);
    log_info("backend auto: %s; using the CPU backend", cerr.msg);
    return backend_open_cpu(p, out, err);
}

void backend_log_resident(const struct backend *be, double load_seconds)
{
    size_t w = 0, fr = 0, tot = 0;
    if (!strcmp(be->ops->name, "cuda") && cuda_backend_mem(be, &w, &fr, &tot) == 0)
        log_info("weights resident on the GPU: %.1f MiB uploaded in %.2f s (+%.1f MiB of "
                 "Q6_K expanded for MMQ, +%.1f MiB of Q6_K/Q4_K planes, +%.1f MiB of F16 copies); "
                 "%zu MiB of %zu MiB free",
                 (double)w / 1048576.0, load_seconds,
                 (double)cuda_backend_aux_bytes(be) / 1048576.0,
                 (double)cuda_backend_q6p_bytes(be) / 1048576.0,
                 (double)cuda_backend_f16_bytes(be) / 1048576.0, fr >> 20, tot >> 20);
    else
        log_info("model loaded for the %s backend in %.2f s", be->ops->name, load_seconds);
}
