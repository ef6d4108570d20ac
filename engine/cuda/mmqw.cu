/* cuda/mmqw — mmqh's exact F16 Q4_K product with wgmma (sm_90a): the
 * consumers are two warpgroups of 64 weight rows x 128 activation rows, each
 * k16 step one wgmma.mma_async m64n128k16 with both operands read from the
 * slot by matrix descriptors (cuda/mmqh_impl.cuh: MMQH_CORE, the core-matrix
 * layout the producers write). The producers, the slots, the arithmetic and
 * so the bits are mmqh's: A = q x sc - 472 and the q8 activations as f16,
 * one exact f32 sum a super-block (|.| < 2^24: the order of the tensor
 * core's adds cannot change it), v1 = sum + 472 S by one add, then mmqk's
 * chain and min term in the CPU's order.
 *
 * Why (bench/RESULTS.md 2026-12-05 session 40): mmqh's mma.sync form is
 * shared-memory bound. Each of its 8 warps ldmatrix-loads a 64 x 16 A and
 * a 32 x 16 B fragment every k16 step (24 KB a step for the block's 128 x
 * 128 tile); with the producers' 128 KB of stores, 512 KB a super-block:
 * ~4,000 cycles at 128 B a cycle, against ~3,400 cycles of mma.sync F16
 * work (hmma_probe: 6.7 SMSP cycles an m16n8k16). A warpgroup's wgmma
 * reads its 64 x 16 A once for all 128 activation rows (2 + 4 KB a step):
 * 320 KB a super-block, ~2,500 cycles, and the tensor work at wgmma's F16
 * rate (989 TFLOPS dense on H100/H200) ~2,050.
 *
 * Built only where gpu_arch has 90 (compute_90a; meson -DINFERD_MMQW=1);
 * cuda_mmqw answers INF_EUNSUPPORTED elsewhere and on other devices, and
 * mmqh's mma.sync form serves (INFERD_MMQW=0 asks for that form on sm_90
 * too, for A/B runs). */
#include "engine/cuda/mmqk_impl.cuh"
#include "engine/cuda/mmqh_impl.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MMQW_DEVICE 1
#else
#define MMQW_DEVICE 0
#endif

#if MMQW_DEVICE
/* D(64 x 128 f32) += A(64 x 16 f16) B(16 x 128 f16), both K-major from
 * shared memory (descriptors); scale-a/b 1, no transposes */
static __device__ __forceinline__ void mmqw_mma(float d[64], uint64_t da, uint64_t db)
{
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db));
}
/* the same with D = A B (a super-block's first step) */
static __device__ __forceinline__ void mmqw_mma_z(float d[64], uint64_t da, uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3]), "=f"(d[4]), "=f"(d[5]), "=f"(d[6]), "=f"(d[7]), "=f"(d[8]), "=f"(d[9]), "=f"(d[10]), "=f"(d[11]), "=f"(d[12]), "=f"(d[13]), "=f"(d[14]), "=f"(d[15]), "=f"(d[16]), "=f"(d[17]), "=f"(d[18]), "=f"(d[19]), "=f"(d[20]), "=f"(d[21]), "=f"(d[22]), "=f"(d[23]), "=f"(d[24]), "=f"(d[25]), "=f"(d[26]), "=f"(d[27]), "=f"(d[28]), "=f"(d[29]), "=f"(d[30]), "=f"(d[31]), "=f"(d[32]), "=f"(d[33]), "=f"(d[34]), "=f"(d[35]), "=f"(d[36]), "=f"(d[37]), "=f"(d[38]), "=f"(d[39]), "=f"(d[40]), "=f"(d[41]), "=f"(d[42]), "=f"(d[43]), "=f"(d[44]), "=f"(d[45]), "=f"(d[46]), "=f"(d[47]), "=f"(d[48]), "=f"(d[49]), "=f"(d[50]), "=f"(d[51]), "=f"(d[52]), "=f"(d[53]), "=f"(d[54]), "=f"(d[55]), "=f"(d[56]), "=f"(d[57]), "=f"(d[58]), "=f"(d[59]), "=f"(d[60]), "=f"(d[61]), "=f"(d[62]), "=f"(d[63])
                 : "l"(da), "l"(db));
}

/* Pin d at this point of the program: the asm "reads and writes" it, so
 * the compiler cannot move its uses above the wait that makes the
 * hardware's writes (between the wgmma and its wait_group) complete. */
static __device__ __forceinline__ void mmqw_pin(float d[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

template <int N> static __device__ __forceinline__ void mmqw_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* the shared-memory matrix descriptor of a core-matrix tile at byte
 * address sa: 14-bit fields of the address, the leading (K) and the stride
 * (M/N) byte offsets, each in 16-byte units; bits 62-63 = 0: no swizzle */
static __device__ __forceinline__ uint64_t mmqw_desc(uint32_t sa, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((sa & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
#endif

template <int T>
/* 165 registers, no spills (ptxas sm_90a): no setmaxnreg needed for the
 * consumers' 2 x 64 accumulators under the launch bound's 168 */
static __global__ void __launch_bounds__(MMQH_THREADS, 1)
mmqw_kernel(const uint8_t *__restrict__ w, size_t row_bytes, int32_t n_w, cuda_q8k X,
            const __half *__restrict__ x16, int64_t nbr, float *__restrict__ y, int32_t n_rows, struct cuda_epi E)
{
#if MMQW_DEVICE
    extern __shared__ __align__(128) uint8_t mmqw_smem_raw[];
    mmqh_smem<MMQH_CORE> &S = *(mmqh_smem<MMQH_CORE> *)mmqw_smem_raw;
    const int tid = threadIdx.x, lane = tid % CUDA_WARP, warp = tid / CUDA_WARP;
    const int32_t m0 = blockIdx.x * MMQH_BM, n0 = blockIdx.y * MMQH_BN;
    if (tid == 0) {
        for (int i = 0; i < MMQH_SLOTS; i++) {
            cuda_mbar_init(&S.full[i], 2 * MMQH_PROD);
            cuda_mbar_init(&S.empty[i], MMQH_CONS);
        }
        cuda_mbar_init(&S.lag, MMQH_CONS / 2);
        cuda_mbar_init_fence();
    }
    __syncthreads();
    cuda_pdl_enter();
    if (tid >= MMQH_CONS) {
        mmqh_produce(S, tid - MMQH_CONS, w, row_bytes, n_w, X, x16, nbr, n_rows, m0, n0, E.glu);
        return;
    }
    /* warpgroup wg: weight rows 64 wg..; its warp w4 holds rows 16 w4 + g
     * (+8) of them and activation rows 8 j + 2 t4 (+1), j = 0..15 (the
     * wgmma accumulator layout: the m16n8 one, 16 n8 tiles) */
    const int wg = warp >> 2, w4 = warp & 3;
    const int g = lane >> 2, t4 = lane & 3;
    const uint32_t sa = cuda_saddr(S.slot[0].a16) + mmqh_aoff<MMQH_CORE>(64 * wg, 0);
    const uint32_t sb = cuda_saddr(S.slot[0].b16);
    constexpr uint32_t SL = (uint32_t)sizeof(mmqh_slot<MMQH_CORE>);

    float acc[1][16][4], dd[16][4];
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int k = 0; k < 4; k++)
            acc[0][j][k] = 0.0f;

    /* stage i: its four k16 steps as one commit group (FIRST: a
     * super-block's first quarter, its first step without an accumulator) */
    auto stage = [&](int64_t i, auto first) {
        cuda_mbar_wait(&S.full[i % MMQH_SLOTS], (uint32_t)(i / MMQH_SLOTS) & 1);
        /* the producers' stores and copies, seen through this thread's
         * acquire, ordered before its async-proxy reads */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
        const uint32_t so = (uint32_t)(i % MMQH_SLOTS) * SL;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const uint64_t da = mmqw_desc(sa + so + mmqh_aoff<MMQH_CORE>(0, 2 * kk), MMQH_BM * 16, 128);
            const uint64_t db = mmqw_desc(sb + so + mmqh_boff<MMQH_CORE>(0, 2 * kk), 128, 1024);
            if (decltype(first)::value && kk == 0)
                mmqw_mma_z(&dd[0][0], da, db);
            else
                mmqw_mma(&dd[0][0], da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    };

    /* warpgroup 1 starts half a super-block behind warpgroup 0, so that one
     * chain runs while the other's wgmma keep the tensor pipe busy */
    if (wg == 1)
        cuda_mbar_wait(&S.lag, 0);
    for (int64_t s = 0; s < nbr; s++) {
        stage(4 * s, std::true_type{});
        stage(4 * s + 1, std::false_type{});
        mmqw_wait<1>(); /* stage 4s read: its slot is free */
        cuda_mbar_arrive(&S.empty[0]);
        stage(4 * s + 2, std::false_type{});
        mmqw_wait<1>();
        cuda_mbar_arrive(&S.empty[1]);
        if (s == 0 && wg == 0)
            cuda_mbar_arrive(&S.lag);
        stage(4 * s + 3, std::false_type{});
        mmqw_wait<0>();
        mmqw_pin(&dd[0][0]);
        cuda_mbar_arrive(&S.empty[2]);
        /* the chain of the super-block (its d, 32-sums, heads and 472 S in
         * slot 3): v1 = dd + 472 S, then mmqk's chain and min term, as mmqh */
        const mmqh_slot<MMQH_CORE> &L = S.slot[3];
        mmqk_head hd[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            mmqk_k45_head(L.head[64 * wg + 16 * w4 + g + 8 * hh], hd[hh]);
        int mh[2], ml[2];
        mmqk_min_words(hd, t4, mh, ml);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int bhl = *(const int *)&L.xhl[8 * j + g][4 * t4];
            int ch[4], cl[4];
            cuda_mma_k16(ch, mh[0], mh[1], bhl);
            cuda_mma_k16(cl, ml[0], ml[1], bhl);
            const float2 xd = *(const float2 *)&L.xd[8 * j + 2 * t4];
            const float2 sf = *(const float2 *)&L.sf[8 * j + 2 * t4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const mmqk_head &H = hd[k >> 1];
                const float x = k & 1 ? xd.y : xd.x;
                const float p1 = __fmul_rn(H.d, x);
                const float v1 = __fadd_rn(dd[j][k], k & 1 ? sf.y : sf.x);
                const float a2 = __fmaf_rn(p1, v1, acc[0][j][k]);
                const float p2 = -__fmul_rn(H.dmin, x);
                acc[0][j][k] = __fmaf_rn(p2, (float)(ch[k] * 128 + cl[k]), a2);
            }
        }
        cuda_mbar_arrive(&S.empty[3]);
    }
    mmq_tiles_store<1, 16>(acc, m0, n0, 4 * wg + w4, 0, g, t4, n_w, n_rows, y, E);
#endif
}

int cuda_mmqw(struct cuda_ctx *c, const struct backend_weight *w, cuda_q8k X, const __half *x16, float *y,
              int32_t n_rows)
{
#if defined(INFERD_MMQW)
    if (c->sm != 90)
        return INF_EUNSUPPORTED;
    if (mmq_occupancy_once<mmqw_kernel<QT_Q4_K>>(sizeof(mmqh_smem<MMQH_CORE>), MMQH_THREADS) == 0)
        return -1;
    const dim3 grid(cuda_blocks(w->ne1, MMQH_BM), cuda_blocks(n_rows, MMQH_BN));
    cuda_launch(c, mmqw_kernel<QT_Q4_K>, grid, MMQH_THREADS, sizeof(mmqh_smem<MMQH_CORE>),
                (const uint8_t *)w->data, w->row_bytes, (int32_t)w->ne1, X, x16, w->ne0 / QK_K, y, n_rows, c->epi);
    return 0;
#else
    (void)c, (void)w, (void)X, (void)x16, (void)y, (void)n_rows;
    return INF_EUNSUPPORTED;
#endif
}
