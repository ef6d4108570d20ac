/* bench/pipe_probe — the issue rate of the chain's instructions on this GPU
 * (results per clock per SM): int32 -> f32 conversion (I2FP / I2F), FADD,
 * FFMA, IMAD, and a mixed chain (FFMA + I2F 1:1, the mmq6w / mmqk chain's
 * ratio). Why: the wgmma kernels' super-block chains convert one int32 an
 * output (bench/RESULTS.md session 44); whether that conversion is a
 * quarter-rate pipe decides whether removing it pays.
 * Build: nvcc -O3 -arch=sm_90 -o pipe_probe bench/pipe_probe.cu */
#include <cstdio>
#include <cuda_runtime.h>

#define NCH 8    /* independent chains a thread */
#define ITER 4096

template <int OP> __global__ void probe(float *out, int seed, long long *cyc)
{
    int iv[NCH];
    float fv[NCH];
    for (int i = 0; i < NCH; i++) {
        iv[i] = seed + threadIdx.x + i;
        fv[i] = (float)(seed + i);
    }
    __syncthreads();
    const long long t0 = clock64();
    for (int it = 0; it < ITER; it++) {
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            if (OP == 0) { /* I2F alone: each result's bits the next input */
                float c;
                asm volatile("cvt.rn.f32.s32 %0, %1;" : "=f"(c) : "r"(iv[i]));
                iv[i] = __float_as_int(c);
            } else if (OP == 1) {
                asm volatile("add.rn.f32 %0, %0, %1;" : "+f"(fv[i]) : "f"(1.0f));
            } else if (OP == 2) {
                asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(fv[i]) : "f"(1.0001f), "f"(0.5f));
            } else if (OP == 3) {
                asm volatile("mad.lo.s32 %0, %0, %1, %2;" : "+r"(iv[i]) : "r"(3), "r"(7));
            } else { /* the chain: one conversion and one FFMA an output */
                float c;
                asm volatile("cvt.rn.f32.s32 %0, %1;" : "=f"(c) : "r"(iv[i]));
                asm volatile("fma.rn.f32 %0, %1, %2, %0;" : "+f"(fv[i]) : "f"(c), "f"(1e-9f));
                iv[i] += 1;
            }
        }
    }
    const long long t1 = clock64();
    float s = 0;
    for (int i = 0; i < NCH; i++)
        s += fv[i] + (float)iv[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    if (threadIdx.x == 0)
        cyc[blockIdx.x] = t1 - t0;
}

template <int OP> static void run(const char *name, int sms)
{
    const int threads = 1024, blocks = sms; /* one block an SM, 32 warps */
    float *out;
    long long *cyc;
    cudaMalloc(&out, sizeof(float) * threads * blocks);
    cudaMalloc(&cyc, sizeof(long long) * blocks);
    probe<OP><<<blocks, threads>>>(out, 1, cyc);
    cudaDeviceSynchronize();
    long long h[1024];
    cudaMemcpy(h, cyc, sizeof(long long) * blocks, cudaMemcpyDeviceToHost);
    long long mx = 0;
    for (int i = 0; i < blocks; i++)
        mx = h[i] > mx ? h[i] : mx;
    const double ops = (double)threads * ITER * NCH;
    printf("%-28s %8.1f results/clk/SM (%lld cycles)\n", name, ops / (double)mx, mx);
    cudaFree(out);
    cudaFree(cyc);
}

int main()
{
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    printf("%s, %d SMs\n", p.name, p.multiProcessorCount);
    run<0>("cvt.rn.f32.s32 (I2F)", p.multiProcessorCount);
    run<1>("add.rn.f32 (FADD)", p.multiProcessorCount);
    run<2>("fma.rn.f32 (FFMA)", p.multiProcessorCount);
    run<3>("mad.lo.s32 (IMAD)", p.multiProcessorCount);
    run<4>("I2F + FFMA + IADD an output", p.multiProcessorCount);
    return 0;
}
