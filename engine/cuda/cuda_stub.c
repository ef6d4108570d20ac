/* cuda_stub — what a CPU-only build answers: no CUDA backend in this binary. */
#include "engine/cuda/cuda.h"
#include "engine/err.h"

#include <stdio.h>

int cuda_compiled(void)
{
    return 0;
}

int cuda_devices(struct cuda_device_info *out, int cap)
{
    (void)out;
    (void)cap;
    return 0;
}

int cuda_selftest(char *msg, size_t cap)
{
    snprintf(msg, cap, "built without CUDA");
    return INF_EUNSUPPORTED;
}

struct backend *cuda_backend_new(int device, struct inf_error *err)
{
    (void)device;
    inf_error_set(err, INF_EUNSUPPORTED, "cuda: this binary was built without the CUDA backend");
    return NULL;
}

int cuda_mm_variant_count(void)
{
    return 0;
}

int cuda_mm_variant_type(int i)
{
    (void)i;
    return -1;
}

void cuda_mm_variant_name(int i, char *buf, size_t n)
{
    (void)i;
    if (n)
        buf[0] = 0;
}

int cuda_backend_mm_variant(struct backend *be, int i, const struct backend_weight *w, const float *x,
                            float *y, int32_t n_rows, int32_t *rows_done)
{
    (void)be, (void)i, (void)w, (void)x, (void)y, (void)n_rows;
    *rows_done = 0;
    return INF_EUNSUPPORTED;
}

size_t cuda_backend_aux_bytes(const struct backend *be)
{
    (void)be;
    return 0;
}

size_t cuda_backend_q6p_bytes(const struct backend *be)
{
    (void)be;
    return 0;
}

int cuda_backend_mem(const struct backend *be, size_t *weights, size_t *free_b, size_t *total)
{
    (void)be;
    *weights = *free_b = *total = 0;
    return INF_EUNSUPPORTED;
}

int cuda_backend_set_batch_invariant(struct backend *be, int on)
{
    (void)be, (void)on;
    return 0;
}

void cuda_backend_set_attention_tc(struct backend *be, int on)
{
    (void)be, (void)on;
}

int cuda_backend_attention_tc(const struct backend *be)
{
    (void)be;
    return 0;
}

int cuda_backend_mm_cublas(struct backend *be, const struct backend_weight *w)
{
    (void)be, (void)w;
    return 0;
}

int cuda_backend_mm_deq_min(struct backend *be, const struct backend_weight *w)
{
    (void)be, (void)w;
    return 0;
}

int cuda_backend_mmq6w_min(struct backend *be)
{
    (void)be;
    return 0;
}

int cuda_backend_mmqh_min(struct backend *be)
{
    (void)be;
    return 0;
}

int cuda_backend_mm_deq_resident(struct backend *be, const struct backend_weight *w)
{
    (void)be, (void)w;
    return 0;
}

int cuda_backend_set_f16_weights(struct backend *be, size_t bytes)
{
    (void)be, (void)bytes;
    return 0;
}

int cuda_backend_set_q6_planes(struct backend *be, int percent)
{
    (void)be, (void)percent;
    return 0;
}

size_t cuda_backend_f16_bytes(const struct backend *be)
{
    (void)be;
    return 0;
}

/* the host checks without CUDA code to check: an empty message, -1 */
static int64_t stub_no_check(char *msg, size_t cap)
{
    if (msg && cap)
        msg[0] = 0;
    return -1;
}

int64_t cuda_mmd_host_check(int type, const void *w, int64_t ne0, int64_t n_rows, char *msg, size_t cap)
{
    (void)type, (void)w, (void)ne0, (void)n_rows;
    return stub_no_check(msg, cap);
}

int64_t cuda_mmqr_host_check(int n_blocks, char *msg, size_t cap)
{
    (void)n_blocks;
    return stub_no_check(msg, cap);
}

int64_t cuda_mmq6w_host_check(int n_blocks, char *msg, size_t cap)
{
    (void)n_blocks;
    return stub_no_check(msg, cap);
}

int64_t cuda_mmq4p_host_check(int n_blocks, char *msg, size_t cap)
{
    (void)n_blocks;
    return stub_no_check(msg, cap);
}

int64_t cuda_wcopies_host_check(char *msg, size_t cap)
{
    return stub_no_check(msg, cap);
}

int cuda_mmqh_rule(int n_sm, int q6, int64_t ne0, int64_t n_w, int32_t n_rows)
{
    (void)n_sm, (void)q6, (void)ne0, (void)n_w, (void)n_rows;
    return 0;
}
