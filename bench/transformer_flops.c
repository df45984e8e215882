/* The machine's sgemm rate, for bench/transformer_flops.sh: the best of several runs of
 * a square single-precision gemm through OpenBLAS on every core (or argv[2] threads).
 * Prints one JSON object. Usage: transformer_flops [N] [THREADS] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cblas.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1536;
    int threads = argc > 2 ? atoi(argv[2]) : 0;
    if (threads > 0)
        openblas_set_num_threads(threads);
    float *a = malloc(sizeof(float) * (size_t)n * n), *b = malloc(sizeof(float) * (size_t)n * n),
          *c = malloc(sizeof(float) * (size_t)n * n);
    if (!a || !b || !c)
        return 1;
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
        c[i] = 0;
    }
    double best = 0;
    for (int rep = 0; rep < 7; rep++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f,
                    c, n);
        double dt = now() - t;
        double rate = 2.0 * n * (double)n * n / dt;
        if (rep > 0 && rate > best) /* the first run warms the caches and the threads */
            best = rate;
    }
    printf("{\"sgemm_n\": %d, \"sgemm_threads\": %d, \"sgemm_flops_per_second\": %.6g}\n", n,
           openblas_get_num_threads(), best);
    free(a);
    free(b);
    free(c);
    return 0;
}
