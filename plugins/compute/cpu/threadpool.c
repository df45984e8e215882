/* The CPU plugin's thread pool (threadpool.h): workers sleep on a condition variable and
 * wake for each parallel-for generation; the caller runs task 0 and waits for the rest. */
#include "threadpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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
    uint64_t generation; /* bumped once per cpu_pool_run */
    int pending;         /* workers of this generation still running */
    bool stop;
    /* the current job, valid while pending > 0 */
    cpu_task_fn fn;
    void *ctx;
    int ntasks;
};

static void *worker_main(void *arg)
{
    cpu_worker *w = arg;
    cpu_pool *p = w->pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->generation == seen && !p->stop)
            pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        if (w->id >= p->ntasks)
            continue; /* not needed this time */
        cpu_task_fn fn = p->fn;
        void *ctx = p->ctx;
        int ntasks = p->ntasks;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, w->id, ntasks);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0)
            pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
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
    p->stop = true;
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
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->ntasks = ntasks;
    p->pending = ntasks - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);

    fn(ctx, 0, ntasks);

    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
