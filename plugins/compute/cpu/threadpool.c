/* The CPU plugin's thread pool (threadpool.h): the caller runs task 0, workers the rest.
 * Between parallel-fors a worker spins on the generation counter for a short while (a
 * transformer step runs a few hundred small kernels back to back, and a futex wake-up per
 * kernel left a fifth of the cores idle), then sleeps on a condition variable; the caller
 * waits for the workers the same way. Sleeping and waking are a Dekker pair on seq_cst
 * atomics (generation/sleepers, pending/caller_sleeping), with the wake-up itself under the
 * mutex, so no wake-up is lost. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Spin iterations before sleeping: ~20-50 us of pause instructions. */
#define CPU_POOL_SPIN 2000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

typedef struct cpu_worker {
    cpu_pool *pool;
    int id; /* 1 .. nthreads-1; the caller is 0 */
    pthread_t thread;
} cpu_worker;

struct cpu_pool {
    int nthreads;
    int started; /* workers actually running (for cleanup after a failed create) */
    cpu_worker *workers;
    pthread_mutex_t mu;
    pthread_cond_t start_cv;
    pthread_cond_t done_cv;
    /* (run number << 16) | ntasks, bumped once per cpu_pool_run after fn and ctx are set:
     * one load tells a worker whether there is a new job and whether it has a part in it */
    _Atomic uint64_t generation;
    atomic_int pending;          /* workers of this generation still running */
    atomic_int sleepers;         /* workers asleep (or about to be) on start_cv */
    atomic_bool caller_sleeping; /* the caller is asleep (or about to be) on done_cv */
    atomic_bool stop;
    /* the current job, published by the generation bump; read only by the workers that
     * have a part in it, which the caller waits for before it sets the next one */
    cpu_task_fn fn;
    void *ctx;
};

/* Returns the generation after `seen` (or seen itself once the pool stops). */
static uint64_t wait_for_job(cpu_pool *p, uint64_t seen)
{
    for (int i = 0; i < CPU_POOL_SPIN; i++) {
        uint64_t g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
            return g;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);
    uint64_t g;
    while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
        pthread_cond_wait(&p->start_cv, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg)
{
    cpu_worker *w = arg;
    cpu_pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->stop))
            break;
        int ntasks = (int)(seen & 0xffff);
        if (w->id >= ntasks)
            continue; /* not needed this time */
        p->fn(p->ctx, w->id, ntasks);
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

cpu_pool *cpu_pool_create(int nthreads, bv_error *err)
{
    if (nthreads < 1)
        nthreads = 1;
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    p->nthreads = nthreads;
    p->workers = calloc((size_t)nthreads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    for (int i = 1; i < nthreads; i++) {
        cpu_worker *w = &p->workers[i];
        w->pool = p;
        w->id = i;
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            bv_error_set(err, BV_ERR_PLUGIN, "cannot start compute thread %d of %d: %s", i,
                         nthreads, strerror(rc));
            cpu_pool_destroy(p);
            return NULL;
        }
        p->started = i;
    }
    return p;
}

void cpu_pool_destroy(cpu_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i <= p->started; i++)
        pthread_join(p->workers[i].thread, NULL);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->start_cv);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int cpu_pool_size(const cpu_pool *p)
{
    return p->nthreads;
}

void cpu_pool_run(cpu_pool *p, int ntasks, cpu_task_fn fn, void *ctx)
{
    if (ntasks > p->nthreads)
        ntasks = p->nthreads;
    if (ntasks <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, ntasks - 1);
    uint64_t run = (atomic_load_explicit(&p->generation, memory_order_relaxed) >> 16) + 1;
    atomic_store(&p->generation, run << 16 | (uint64_t)ntasks); /* publishes the job */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->start_cv);
        pthread_mutex_unlock(&p->mu);
    }

    fn(ctx, 0, ntasks);

    for (int i = 0; i < CPU_POOL_SPIN; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0)
            return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_sleeping, true);
    while (atomic_load(&p->pending) > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->caller_sleeping, false);
    pthread_mutex_unlock(&p->mu);
}
