/* A fixed-size pthread pool for the CPU compute plugin: one blocking parallel-for whose
 * calling thread is task 0, with static partitioning so every run splits work the same way. */
#ifndef BV_CPU_THREADPOOL_H
#define BV_CPU_THREADPOOL_H

#include <stdint.h>

#include "bivouac/error.h"

typedef struct cpu_pool cpu_pool;

/* One task of a parallel-for: task `tid` of `ntasks` (0 <= tid < ntasks). */
typedef void (*cpu_task_fn)(void *ctx, int tid, int ntasks);

/* Starts nthreads - 1 worker threads (the caller of cpu_pool_run is the nth).
 * Returns NULL and fills err if a thread cannot be started. */
cpu_pool *cpu_pool_create(int nthreads, bv_error *err);
/* Wakes and joins every worker. */
void cpu_pool_destroy(cpu_pool *p);
int cpu_pool_size(const cpu_pool *p);

/* Runs fn(ctx, tid, ntasks) for tid in [0, ntasks) on ntasks threads and returns when all
 * have finished. ntasks is clamped to [1, cpu_pool_size(p)]. Task 0 runs on the caller.
 * Not reentrant: one caller at a time, never from inside a task. */
void cpu_pool_run(cpu_pool *p, int ntasks, cpu_task_fn fn, void *ctx);

/* Static partition of [0, n) into ntasks contiguous ranges; task tid gets [*begin, *end). */
static inline void cpu_split(int64_t n, int tid, int ntasks, int64_t *begin, int64_t *end)
{
    *begin = n * tid / ntasks;
    *end = n * (tid + 1) / ntasks;
}

#endif
