/* OpenBLAS single-precision gemm rate on T threads: the compute roof the transformer and
 * the GCN roofline are compared with. C = A B with square n x n matrices, 2 n^3 flops per
 * call, best of R repetitions after one warm-up call.
 *   sgemm [--n 2048] [--threads 2] [--reps 5]   ->  one JSON line on stdout */
#include <stdio.h>
#include <stdlib.h>

#include <cblas.h>

#include "bench_util.h"

int main(int argc, char **argv)
{
    int64_t n = bench_arg_int(argc, argv, "n", 2048);
    int threads = (int)bench_arg_int(argc, argv, "threads", 2);
    int reps = (int)bench_arg_int(argc, argv, "reps", 5);
    if (n < 16 || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: sgemm [--n N] [--threads T] [--reps R]\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    size_t elems = (size_t)(n * n);
    float *a = aligned_alloc(64, elems * sizeof(float));
    float *b = aligned_alloc(64, elems * sizeof(float));
    float *c = aligned_alloc(64, elems * sizeof(float));
    double *times = calloc((size_t)reps, sizeof *times);
    if (!a || !b || !c || !times) {
        fprintf(stderr, "sgemm: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < elems; i++) {
        a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
        c[i] = 0.0f;
    }
    int ni = (int)n;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a, ni, b, ni,
                0.0f, c, ni);
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, ni, ni, 1.0f, a, ni, b, ni,
                    0.0f, c, ni);
        times[r] = bench_now() - t0;
    }
    double flops = 2.0 * (double)n * (double)n * (double)n;
    double med = bench_median(times, reps);
    char *config = openblas_get_config();
    printf("{\"sgemm_gflops\": %.3f, \"sgemm_median_gflops\": %.3f, \"n\": %lld, "
           "\"threads\": %d, \"reps\": %d, \"openblas\": \"%s\", \"openblas_core\": \"%s\"}\n",
           flops / times[0] / 1e9, flops / med / 1e9, (long long)n, threads, reps,
           config ? config : "", openblas_get_corename());
    free(a);
    free(b);
    free(c);
    free(times);
    return 0;
}
