/* STREAM-style triad, a[i] = b[i] + s * c[i] over doubles, on T threads: the memory
 * bandwidth the other numbers are compared with. Counting follows STREAM (McCalpin): 24
 * bytes per element (two reads and one write; write-allocate traffic is not counted), the
 * best of R repetitions, each array at least 4x the last-level cache.
 *   triad [--mb 256] [--threads 2] [--reps 10]   ->  one JSON line on stdout */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

typedef struct triad_shared {
    double *a, *b, *c;
    int64_t n;
    int threads, reps;
    pthread_barrier_t start, done;
} triad_shared;

typedef struct triad_worker {
    triad_shared *s;
    int tid;
} triad_worker;

static void chunk(const triad_shared *s, int tid, int64_t *begin, int64_t *end)
{
    *begin = s->n * tid / s->threads;
    *end = s->n * (tid + 1) / s->threads;
}

static void *triad_thread(void *arg)
{
    const triad_worker *w = arg;
    triad_shared *s = w->s;
    int64_t b, e;
    chunk(s, w->tid, &b, &e);
    /* First touch by the thread that will stream the chunk (matters on NUMA machines). */
    for (int64_t i = b; i < e; i++) {
        s->a[i] = 0.0;
        s->b[i] = 1.0;
        s->c[i] = 2.0;
    }
    const double scalar = 3.0;
    double *restrict a = s->a;
    const double *restrict bb = s->b;
    const double *restrict cc = s->c;
    for (int r = 0; r < s->reps; r++) {
        pthread_barrier_wait(&s->start);
        for (int64_t i = b; i < e; i++)
            a[i] = bb[i] + scalar * cc[i];
        pthread_barrier_wait(&s->done);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int64_t mb = bench_arg_int(argc, argv, "mb", 256); /* per array */
    int threads = (int)bench_arg_int(argc, argv, "threads", 2);
    int reps = (int)bench_arg_int(argc, argv, "reps", 10);
    if (mb < 1 || threads < 1 || threads > 256 || reps < 1) {
        fprintf(stderr, "usage: triad [--mb MB_PER_ARRAY] [--threads T] [--reps R]\n");
        return 2;
    }
    triad_shared s = {.n = mb * 1024 * 1024 / (int64_t)sizeof(double), .threads = threads,
                      .reps = reps};
    s.a = aligned_alloc(64, (size_t)s.n * sizeof(double));
    s.b = aligned_alloc(64, (size_t)s.n * sizeof(double));
    s.c = aligned_alloc(64, (size_t)s.n * sizeof(double));
    double *times = calloc((size_t)reps, sizeof *times);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    triad_worker *ws = calloc((size_t)threads, sizeof *ws);
    if (!s.a || !s.b || !s.c || !times || !tids || !ws) {
        fprintf(stderr, "triad: out of memory for 3 x %lld MB\n", (long long)mb);
        return 1;
    }
    /* The main thread only times: the workers alone stream. */
    pthread_barrier_init(&s.start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&s.done, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; t++) {
        ws[t] = (triad_worker){&s, t};
        pthread_create(&tids[t], NULL, triad_thread, &ws[t]);
    }
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        pthread_barrier_wait(&s.start);
        pthread_barrier_wait(&s.done);
        times[r] = bench_now() - t0;
    }
    for (int t = 0; t < threads; t++)
        pthread_join(tids[t], NULL);
    /* Check the result so the loop cannot be optimised away, and report a wrong one. */
    for (int64_t i = 0; i < s.n; i += 4096)
        if (s.a[i] != 7.0) {
            fprintf(stderr, "triad: wrong result a[%lld] = %g\n", (long long)i, s.a[i]);
            return 1;
        }
    double bytes = 3.0 * (double)s.n * sizeof(double);
    double med = bench_median(times, reps);
    printf("{\"triad_gbps\": %.3f, \"triad_median_gbps\": %.3f, \"array_mb\": %lld, "
           "\"threads\": %d, \"reps\": %d, \"best_s\": %.6f}\n",
           bytes / times[0] / 1e9, bytes / med / 1e9, (long long)mb, threads, reps, times[0]);
    free(s.a);
    free(s.b);
    free(s.c);
    free(times);
    free(tids);
    free(ws);
    return 0;
}
