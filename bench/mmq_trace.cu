/* bench/mmq_trace — the pipeline of the streaming products (mmvt at one
 * activation row, mmqt at 2-8) as it runs on the GPU: per stage, when the
 * feed warp queued its copies, when the first and the last compute warp saw
 * it land and had read it, when the chain had read its park (cuda/trace.cuh's
 * marks). A development tool for the device machine, not part of the build:
 *
 *   nvcc -std=c++17 -O2 -arch=sm_90 -I. -Ibuild -DINFERD_CUDA_TRACE \
 *        bench/mmq_trace.cu -o /tmp/mmq_trace
 *   /tmp/mmq_trace mmqt q4_K 14336 4096 8
 *   /tmp/mmq_trace mmqw q4_K 14336 4096 512   (sm_90a: -arch=sm_90a -DINFERD_MMQW=1)
 *   /tmp/mmq_trace mmqr q4_K 14336 4096 512
 *   /tmp/mmq_trace mmq6w q6_K 14336 4096 512  (its expanded copy: random bytes here)
 *   /tmp/mmq_trace mmq6p q6_K 14336 4096 512  (mmq6w<true>: planes of random bytes)
 *   /tmp/mmq_trace mmq4p q4_K 14336 4096 512  (mmq4p: Q4_K from planes of random bytes)
 *
 * mmqw's and mmqr's marks are per super-block (their stages are quarters):
 * feed = mmqw's producers' last quarter expanded (mmqr: the feed warp's
 * slot stores done), x0 = mmqw's first weight slot free, x1 its raw
 * weights landed; land0 / park0 / done0 = warpgroup 0's first
 * quarter issued, its wgmma done, its chain done; landL / chain / doneL
 * the same of warpgroup 1. The planes kernels' (mmq6w<true>, mmq4p):
 * land0 / landL a warpgroup's side slot landed, x0 / x1 warpgroup 0's /
 * 1's 16 steps issued (its turn, activations and plane slots waited for),
 * park0 / chain their sums retired, done0 / doneL their chains done,
 * act0 / turn0 warpgroup 0 past its activations' wait / its turn's.
 *
 * It launches the backend's own dispatch (cuda_mmvt, mmqt_variant) on
 * random bytes (the time of these kernels does not depend on the values),
 * prints the time of a product back to back (programmatic dependent launch,
 * as the engine runs them; the marks' stores cost a few %), then the marks
 * of the last of 20 back-to-back launches: per stage the median over the
 * blocks of each mark, in us from the block's start. */
#include "engine/cuda/mmvt.cu"
#include "engine/cuda/mmqw.cu" /* with cuda/mmqk_impl.cuh and cuda/mmqh_impl.cuh */
#include "engine/cuda/mmqr.cu"
#include "engine/cuda/mmq6w.cu"
#include "engine/cuda/mmq4p.cu"
#include "engine/cuda/mmqs_impl.cuh"
#include "engine/cuda/mmqt_impl.cuh"

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#ifndef INFERD_CUDA_TRACE
#error "build with -DINFERD_CUDA_TRACE"
#endif

/* the backend's error recorder (cuda/device.cu), here: print and exit */
int cuda_fail(struct cuda_ctx *c, cudaError_t e, const char *stmt, const char *file, int line)
{
    (void)c;
    if (e == cudaSuccess)
        return 0;
    fprintf(stderr, "mmq_trace: %s: %s (%s:%d)\n", stmt, cudaGetErrorString(e), file, line);
    exit(1);
}

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "mmq_trace: %s: %s\n", #x, cudaGetErrorString(e_));            \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static int launch(struct cuda_ctx *c, const char *kern, int type, const struct backend_weight *w, const void *xq,
                  float *y, int n, int tl)
{
    if (!strcmp(kern, "mmvt")) {
        /* xq: the float row where mmvt quantizes it itself, else read as
         * the quantizer's planes (no quantizer kernel runs here) */
        auto vt = [&](const float *xf, const void *xp) {
            return type == QT_Q4_K   ? cuda_mmvt<QT_Q4_K>(c, w, xf, xp, y, 1, 0, 0, 0)
                   : type == QT_Q5_K ? cuda_mmvt<QT_Q5_K>(c, w, xf, xp, y, 1, 0, 0, 0)
                                     : cuda_mmvt<QT_Q6_K>(c, w, xf, xp, y, 1, 0, 0, 0);
        };
        const int rc = vt((const float *)xq, NULL);
        return rc == INF_EUNSUPPORTED ? vt(NULL, xq) : rc;
    }
    if (!strcmp(kern, "mmq6w") || !strcmp(kern, "mmq6p"))
        return type == QT_Q6_K ? cuda_mmq6w(c, w, xq, y, n, kern[4] == 'p') : INF_EUNSUPPORTED;
    if (!strcmp(kern, "mmq4p"))
        return type == QT_Q4_K ? cuda_mmq4p(c, w, xq, y, n, 1) : INF_EUNSUPPORTED;
    if (!strcmp(kern, "mmqw") || !strcmp(kern, "mmqr")) {
        /* xq: the quantizer's planes (the forms convert them to f16 into
         * c->x16 first, as the engine's products do) */
        const cuda_q8k X = cuda_q8k_planes(xq, (int64_t)n * (w->ne0 / QK_K));
        if (type != QT_Q4_K)
            return INF_EUNSUPPORTED;
        return kern[3] == 'w' ? cuda_mmqw(c, w, X, (__half *)c->x16, y, n)
                              : cuda_mmqr(c, w, X, (__half *)c->x16, y, n);
    }
    return type == QT_Q4_K   ? mmqt_variant<QT_Q4_K>(c, w, xq, y, n, tl, 0)
           : type == QT_Q5_K ? mmqt_variant<QT_Q5_K>(c, w, xq, y, n, tl, 0)
                             : mmqt_variant<QT_Q6_K>(c, w, xq, y, n, tl, 0);
}

/* n bytes of the tool's random stream st (the kernels' time does not
 * depend on the values) */
static std::vector<uint8_t> random_bytes(size_t n, uint64_t &st)
{
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(wgrs_lcg(st) >> 24); /* the state's top byte */
    return b;
}

static double median(std::vector<double> v)
{
    if (v.empty())
        return -1;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: mmq_trace mmvt|mmqt q4_K|q5_K|q6_K ne0 ne1 n [tl]\n");
        return 2;
    }
    const char *kern = argv[1];
    const int type = !strcmp(argv[2], "q4_K") ? QT_Q4_K : !strcmp(argv[2], "q5_K") ? QT_Q5_K : QT_Q6_K;
    const int64_t ne0 = atoll(argv[3]), ne1 = atoll(argv[4]);
    const int n = atoi(argv[5]), tl = argc > 6 ? atoi(argv[6]) : 0;
    const int bs = type == QT_Q4_K ? 144 : type == QT_Q5_K ? 176 : 210;
    const int64_t nbr = ne0 / QK_K;
    const size_t rb = (size_t)nbr * bs, wbytes = rb * (size_t)ne1;

    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    struct cuda_ctx c;
    memset(&c, 0, sizeof(c));
    c.sm = prop.major * 10 + prop.minor;
    c.n_sm = prop.multiProcessorCount;
    c.pdl = 1;
    c.mmvt = 1;
    c.mmqt = 1;
    c.mmqw = getenv("INFERD_MMQW") ? atoi(getenv("INFERD_MMQW")) : 3; /* mmqr's form: 3 turns (the engine's default) or 2 */
    c.tma_rows = getenv("INFERD_TMA") ? atoi(getenv("INFERD_TMA")) : 32;
    c.mmvt_rb = getenv("INFERD_MMVT_RB") ? atoi(getenv("INFERD_MMVT_RB")) : 0;
    c.mmvt_cw = getenv("INFERD_MMVT_CW") ? atoi(getenv("INFERD_MMVT_CW")) : 0;
    const char *mhv = getenv("INFERD_MMVT_HV"); /* as cuda/knobs.cu reads it: 0, 1, else by shape */
    c.mmvt_hv = mhv && (!strcmp(mhv, "0") || !strcmp(mhv, "1")) ? mhv[0] - '0' : -1;
    c.mmvt_fq = getenv("INFERD_MMVT_FQ") ? atoi(getenv("INFERD_MMVT_FQ")) : -1;
    c.q6p_turns = getenv("INFERD_Q6P_TURNS") ? atoi(getenv("INFERD_Q6P_TURNS")) != 0 : 1; /* the engine's default */
    CK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    const int probe = getenv("INFERD_TR_PROBE") ? atoi(getenv("INFERD_TR_PROBE")) : 0; /* cuda/trace.cuh */
    CK(cudaMemcpyToSymbol(cuda_tr_probe, &probe, sizeof(probe)));

    uint64_t st = 0x9e3779b97f4a7c15ull;
    const std::vector<uint8_t> h = random_bytes(wbytes, st);
    void *dw, *dx;
    float *dy;
    /* mmqt's quantized activations, or mmvt's float row */
    const size_t xb = std::max(cuda_q8k_act_bytes(n, nbr), sizeof(float) * (size_t)ne0 * (size_t)n);
    CK(cudaMalloc(&dw, wbytes + CUDA_W_SLACK));
    CK(cudaMalloc(&dx, xb));
    CK(cudaMalloc((void **)&dy, sizeof(float) * (size_t)n * (size_t)ne1));
    CK(cudaMemcpy(dw, h.data(), wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(dx, 1, xb));
    /* mmqw's and mmqr's f16 activations (they fill it from the planes, as
     * in the engine) */
    CK(cudaMalloc(&c.x16, 2 * (size_t)ne0 * (size_t)n));
    c.x16_bytes = 2 * (size_t)ne0 * (size_t)n;
    struct backend_weight w;
    memset(&w, 0, sizeof(w));
    w.type = (enum quant_type)type;
    w.ne0 = ne0;
    w.ne1 = ne1;
    w.row_bytes = rb;
    w.data = dw;
    if (!strncmp(kern, "mmq6", 4)) { /* the expanded copy mmq6w reads (cuda/mmq_q6_k.cu's size) */
        const size_t ab = (size_t)nbr * MMQ_Q6X_BYTES * (size_t)ne1;
        const std::vector<uint8_t> ha = random_bytes(ab, st);
        CK(cudaMalloc(&w.aux, ab));
        CK(cudaMemcpy(w.aux, ha.data(), ab, cudaMemcpyHostToDevice));
    }
    if (!strcmp(kern, "mmq6p") || !strcmp(kern, "mmq4p")) { /* the planes (cuda/q6planes.cu's layout), random too */
        const size_t pb = 2 * (size_t)ne0 * (size_t)ne1;
        const std::vector<uint8_t> hp = random_bytes(pb, st);
        void *dp;
        CK(cudaMalloc(&dp, pb));
        CK(cudaMemcpy(dp, hp.data(), pb, cudaMemcpyHostToDevice));
        cuda_wcopy_room(&c.q6p, pb, 1);
        cuda_wcopy_put(&c.q6p, w.data, ne0, ne1, dp, pb);
    }

    if (launch(&c, kern, type, &w, dx, dy, n, tl)) {
        fprintf(stderr, "mmq_trace: %s does not take this shape\n", kern);
        return 1;
    }
    CK(cudaStreamSynchronize(c.stream));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int reps = 200;
    for (int i = 0; i < 20; i++)
        launch(&c, kern, type, &w, dx, dy, n, tl);
    CK(cudaEventRecord(e0, c.stream));
    for (int i = 0; i < reps; i++)
        launch(&c, kern, type, &w, dx, dy, n, tl);
    CK(cudaEventRecord(e1, c.stream));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    printf("%s %s %lldx%lld n=%d: %.2f us a product (back to back, %d reps)\n", kern, argv[2], (long long)ne0,
           (long long)ne1, n, 1000.0 * ms / reps, reps);

    static long long buf[CUDA_TR_BLOCKS][CUDA_TR_STAGES][CUDA_TR_MARKS];
    memset(buf, 0, sizeof(buf));
    CK(cudaMemcpyToSymbol(cuda_tr_buf, buf, sizeof(buf)));
    for (int i = 0; i < 20; i++)
        launch(&c, kern, type, &w, dx, dy, n, tl);
    CK(cudaStreamSynchronize(c.stream));
    CK(cudaMemcpyFromSymbol(buf, cuda_tr_buf, sizeof(buf)));

    /* blocks that ran (start marked); cycles -> ns from each block's own
     * globaltimer span; times from the block's start */
    int nb = 0;
    long long g0 = 0, gmax = 0;
    std::vector<double> scale(CUDA_TR_BLOCKS, 0.0), start_ns, end_ns;
    for (int b = 0; b < CUDA_TR_BLOCKS; b++) {
        const long long c0 = buf[b][0][CUDA_TR_BLOCK], t0 = buf[b][1][CUDA_TR_BLOCK];
        const long long c1 = buf[b][2][CUDA_TR_BLOCK], t1 = buf[b][3][CUDA_TR_BLOCK];
        if (!c0 || !c1 || c1 <= c0)
            continue;
        scale[b] = (double)(t1 - t0) / (double)(c1 - c0);
        if (!nb || t0 < g0)
            g0 = t0;
        if (t1 > gmax)
            gmax = t1;
        nb++;
    }
    for (int b = 0; b < CUDA_TR_BLOCKS; b++) {
        if (scale[b] == 0.0)
            continue;
        start_ns.push_back((double)(buf[b][1][CUDA_TR_BLOCK] - g0));
        end_ns.push_back((double)(buf[b][3][CUDA_TR_BLOCK] - g0));
    }
    std::vector<double> sc(scale);
    sc.erase(std::remove(sc.begin(), sc.end(), 0.0), sc.end());
    printf("marks of the last of 20 launches: %d blocks; clock %.3f GHz (median); block start us from the first: "
           "median %.2f max %.2f; block end median %.2f max %.2f (kernel span %.2f us)\n",
           nb, 1.0 / median(sc), median(start_ns) / 1e3,
           start_ns.empty() ? 0.0 : *std::max_element(start_ns.begin(), start_ns.end()) / 1e3,
           median(end_ns) / 1e3, end_ns.empty() ? 0.0 : *std::max_element(end_ns.begin(), end_ns.end()) / 1e3,
           (double)(gmax - g0) / 1e3);
    static const char *names[] = {"feed",  "land0", "done0", "landL", "doneL", "park0",
                                  "chain", "x0",    "x1",    "act0",  "turn0"};
    static_assert(sizeof(names) / sizeof(names[0]) == CUDA_TR_BLOCK, "mmq_trace: a name for each mark");
    printf("| stage | blocks |");
    for (int m = 0; m < CUDA_TR_BLOCK; m++)
        printf(" %s |", names[m]);
    printf(" wait0 | task0 | land-feed |\n|---|---:|");
    for (int m = 0; m < CUDA_TR_BLOCK + 3; m++)
        printf("---:|");
    printf("\n");
    for (int s = 0; s < CUDA_TR_STAGES; s++) {
        std::vector<double> v[CUDA_TR_BLOCK], wait0, task0, lf;
        for (int b = 0; b < CUDA_TR_BLOCKS; b++) {
            if (scale[b] == 0.0 || !buf[b][s][CUDA_TR_LAND0])
                continue;
            const long long c0 = buf[b][0][CUDA_TR_BLOCK];
            auto us = [&](long long cl) { return cl ? (double)(cl - c0) * scale[b] / 1e3 : -1.0; };
            for (int m = 0; m < CUDA_TR_BLOCK; m++)
                if (buf[b][s][m])
                    v[m].push_back(us(buf[b][s][m]));
            task0.push_back(us(buf[b][s][CUDA_TR_DONE0]) - us(buf[b][s][CUDA_TR_LAND0]));
            if (s > 0)
                wait0.push_back(us(buf[b][s][CUDA_TR_LAND0]) - us(buf[b][s - 1][CUDA_TR_DONE0]));
            if (buf[b][s][CUDA_TR_FEED])
                lf.push_back(us(buf[b][s][CUDA_TR_LAND0]) - us(buf[b][s][CUDA_TR_FEED]));
        }
        if (v[CUDA_TR_LAND0].empty())
            break;
        printf("| %d | %zu |", s, v[CUDA_TR_LAND0].size());
        for (int m = 0; m < CUDA_TR_BLOCK; m++)
            printf(" %.2f |", median(v[m]));
        printf(" %.2f | %.2f | %.2f |\n", median(wait0), median(task0), median(lf));
    }
    return 0;
}
