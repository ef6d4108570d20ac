/* bench_quant — ns per row and weight GB/s of every dot path (reference and
 * AVX2) and of activation quantization, for a tiny-llama-sized row (256) and
 * a 7B-sized row (4096). A matrix of rows x n weights is swept once per
 * repetition against one activation row, the way mul_mat does per token.
 * Run: meson test -C build --benchmark quant-dot (or the binary directly;
 * argument: seconds per case, default 0.2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/quant.h"
#include "tests/xorshift.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* CPU time: robust to a shared machine */
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t st = 88172645463325252ull;
static float frand(void)
{
    return (float)((double)(rng_step(&st) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static volatile float sink;

int main(int argc, char **argv)
{
    double budget = argc > 1 ? atof(argv[1]) : 0.2;
    static const int types[] = {QT_F32, QT_F16, QT_BF16, QT_Q4_0, QT_Q8_0, QT_Q4_K, QT_Q5_K, QT_Q6_K};
    static const struct { int64_t n, rows; } shapes[] = {{256, 2048}, {4096, 1024}};
    printf("avx2: %s\n", quant_have_avx2() ? "yes" : "no");
    printf("%-5s %5s %6s | %10s %8s | %10s %8s | %7s | %s\n", "type", "n", "rows", "ref ns/row", "GB/s",
           "avx2 ns/row", "GB/s", "speedup", "ns/dot, 4 rows/call");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t n = shapes[si].n, rows = shapes[si].rows;
        float *x = malloc((size_t)n * 4), *w = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            x[i] = frand();
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            int type = types[ti], vdt = quant_vec_dot_type(type);
            size_t rb = quant_row_bytes(type, n);
            uint8_t *m = malloc(rb * (size_t)rows);
            uint8_t *xq = malloc(quant_row_bytes(vdt, n));
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t i = 0; i < n; i++)
                    w[i] = frand() * 0.05f;
                quant_quantize_weights(type, w, m + (size_t)r * rb, n);
            }
            quant_quantize_row(vdt, x, xq, n);
            double ns[2] = {0, 0};
            for (int path = 0; path < 2; path++) {
                quant_force_ref(path == 0);
                if (path == 1 && !quant_have_avx2())
                    break;
                quant_vec_dot_fn f = quant_vec_dot_func(type);
                long reps = 0;
                double t0 = now(), t;
                float acc = 0;
                do {
                    for (int64_t r = 0; r < rows; r++)
                        acc += f(n, m + (size_t)r * rb, xq);
                    reps++;
                    t = now() - t0;
                } while (t < budget);
                sink = acc;
                ns[path] = t * 1e9 / ((double)reps * (double)rows);
            }
            quant_force_ref(0);
            /* the batched form: each weight row against 4 activation rows
             * (the same activation row 4 times: it stays in L1 either way) */
            size_t xb = quant_row_bytes(vdt, n);
            uint8_t *x4 = malloc(4 * xb);
            for (int k = 0; k < 4; k++)
                memcpy(x4 + (size_t)k * xb, xq, xb);
            long reps = 0;
            double t0 = now(), t;
            float o4[4], acc = 0;
            do {
                for (int64_t r = 0; r < rows; r++) {
                    quant_vec_dots(type, n, m + (size_t)r * rb, x4, xb, 4, o4);
                    acc += o4[0];
                }
                reps++;
                t = now() - t0;
            } while (t < budget);
            sink = acc;
            double ns4 = t * 1e9 / ((double)reps * (double)rows * 4);
            free(x4);
            printf("%-5s %5lld %6lld | %10.1f %8.2f | %10.1f %8.2f | %6.1fx | %9.1f\n", quant_type_name(type),
                   (long long)n, (long long)rows, ns[0], (double)rb / ns[0], ns[1],
                   ns[1] > 0 ? (double)rb / ns[1] : 0.0, ns[1] > 0 ? ns[0] / ns[1] : 0.0, ns4);
            free(m);
            free(xq);
        }
        /* activation quantization, per row */
        static const int vdts[] = {QT_Q8_0, QT_Q8_K, QT_F16};
        for (size_t vi = 0; vi < 3; vi++) {
            uint8_t *xq = malloc(quant_row_bytes(vdts[vi], n));
            double ns[2];
            for (int path = 0; path < 2; path++) {
                long reps = 0;
                double t0 = now(), t;
                do {
                    for (int k = 0; k < 100; k++) {
                        if (path == 0)
                            quant_quantize_row_ref(vdts[vi], x, xq, n);
                        else
                            quant_quantize_row(vdts[vi], x, xq, n);
                    }
                    reps += 100;
                    t = now() - t0;
                } while (t < budget / 4);
                ns[path] = t * 1e9 / (double)reps;
            }
            printf("quantize activations to %-5s n=%5lld: ref %8.1f ns, fast %8.1f ns (%.1fx)\n",
                   quant_type_name(vdts[vi]), (long long)n, ns[0], ns[1], ns[0] / ns[1]);
            free(xq);
        }
        free(x);
        free(w);
    }
    return 0;
}
