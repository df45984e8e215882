/* A thread's periodic work, stopped at once (stopper.h). */
#include <errno.h>
#include <time.h>

#include "stopper.h"

void bv_stopper_init(bv_stopper *s)
{
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    s->stop = false;
}

void bv_stopper_destroy(bv_stopper *s)
{
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
}

bool bv_stopper_wait_ms(bv_stopper *s, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->lock);
    while (!s->stop && pthread_cond_timedwait(&s->wake, &s->lock, &until) != ETIMEDOUT) {
    }
    bool stop = s->stop;
    pthread_mutex_unlock(&s->lock);
    return stop;
}

bool bv_stopper_stopped(bv_stopper *s)
{
    pthread_mutex_lock(&s->lock);
    bool stop = s->stop;
    pthread_mutex_unlock(&s->lock);
    return stop;
}

void bv_stopper_stop(bv_stopper *s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
}
