/* bench/tma_probe — which tensor copies (cp.async.bulk.tensor) the TMA
 * unit of this GPU takes: one box of a 3-D map of 2-byte elements (rows of
 * `dim0` elements in groups, as cuda_tmap_q6k lays out a Q6_K weight),
 * started at element x of the innermost dimension, landed at byte `off` of
 * shared memory; the landed bytes are checked against the source (zeros
 * past dim0). One case a process: an illegal copy ends the context.
 * Why: mmvt's aligned Q6_K stages (session 45) start a box at 210-byte
 * phases and trapped "illegal instruction" on the copy.
 * Build: nvcc -O2 -arch=sm_90 -o tma_probe bench/tma_probe.cu -lcuda
 * Run:   tma_probe X BOX0 OFF [ESIZE]   (ESIZE 2: uint16, 1: uint8) */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <vector>

#define DIM0 840 /* elements (2 bytes) of a group */
#define DIM1 7
#define DIM2 64
#define BOX2 32

__global__ void probe(const __grid_constant__ CUtensorMap tm, int x, int off, int bytes, unsigned char *out)
{
    extern __shared__ __align__(1024) unsigned char sm[];
    __shared__ unsigned long long bar;
    const unsigned sb = (unsigned)__cvta_generic_to_shared(&bar);
    const unsigned dst = (unsigned)__cvta_generic_to_shared(sm + off);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared.b64 [%0], 1;\n fence.mbarrier_init.release.cluster;\n" ::"r"(sb));
        asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(sb),
                     "r"(bytes));
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                     "%3, %4}], [%5];\n" ::"r"(dst),
                     "l"(&tm), "r"(x), "r"(1), "r"(0), "r"(sb)
                     : "memory");
        asm volatile("{\n .reg .pred p;\n W:\n mbarrier.try_wait.parity.shared.b64 p, [%0], 0;\n @!p bra W;\n}\n" ::"r"(
                     sb)
                     : "memory");
    }
    __syncthreads();
    for (int i = threadIdx.x; i < bytes; i += blockDim.x)
        out[i] = sm[off + i];
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: tma_probe X BOX0 OFF [ESIZE]\n");
        return 2;
    }
    const int x = atoi(argv[1]), box0 = atoi(argv[2]), off = atoi(argv[3]), es = argc > 4 ? atoi(argv[4]) : 2;
    const int d0 = DIM0 * 2 / es; /* elements of a group in this element size */
    const size_t gbytes = (size_t)DIM0 * 2, total = gbytes * DIM1 * DIM2;
    std::vector<unsigned char> h(total);
    for (size_t i = 0; i < total; i++)
        h[i] = (unsigned char)(i * 131 + (i >> 8) * 7 + 1);
    void *dw;
    unsigned char *dout;
    cudaMalloc(&dw, total);
    cudaMemcpy(dw, h.data(), total, cudaMemcpyHostToDevice);
    const int bytes = box0 * es * BOX2;
    cudaMalloc(&dout, bytes);
    void *f = NULL;
    cudaDriverEntryPointQueryResult q;
    cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
    CUtensorMap tm;
    const cuuint64_t dim[3] = {(cuuint64_t)d0, DIM1, DIM2};
    const cuuint64_t stride[2] = {gbytes, gbytes * DIM1};
    const cuuint32_t box[3] = {(cuuint32_t)box0, 1, BOX2}, ess[3] = {1, 1, 1};
    const CUresult er = ((PFN_cuTensorMapEncodeTiled_v12000)f)(
        &tm, es == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, dw, dim, stride, box, ess,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (er != CUDA_SUCCESS) {
        printf("x=%d box0=%d off=%d es=%d: encode failed (%d)\n", x, box0, off, es, (int)er);
        return 1;
    }
    cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 100000);
    probe<<<1, 128, off + bytes + 1024>>>(tm, x, off, bytes, dout);
    const cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("x=%d box0=%d off=%d es=%d: %s\n", x, box0, off, es, cudaGetErrorString(e));
        return 1;
    }
    std::vector<unsigned char> o(bytes);
    cudaMemcpy(o.data(), dout, bytes, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int r = 0; r < BOX2; r++)
        for (int i = 0; i < box0 * es; i++) {
            const int e0 = x * es + i; /* byte within the group */
            const unsigned char want = e0 < d0 * es ? h[(size_t)r * gbytes * DIM1 + gbytes + e0] : 0;
            bad += o[(size_t)r * box0 * es + i] != want;
        }
    printf("x=%d box0=%d off=%d es=%d: ok, %d bytes differ\n", x, box0, off, es, bad);
    return bad != 0;
}
