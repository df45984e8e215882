/* A thread's periodic work, stopped at once: the thread waits between rounds with
 * bv_stopper_wait_ms, and another thread's bv_stopper_stop wakes it (a heartbeat, an etcd
 * lease's renewals). */
#ifndef BIVOUAC_STOPPER_H
#define BIVOUAC_STOPPER_H

#include <pthread.h>
#include <stdbool.h>

typedef struct bv_stopper {
    pthread_mutex_t lock; /* guards stop */
    pthread_cond_t wake;  /* on the monotonic clock */
    bool stop;
} bv_stopper;

void bv_stopper_init(bv_stopper *s);
void bv_stopper_destroy(bv_stopper *s);
/* Waits up to ms, or until stopped; true where it is time to stop. */
bool bv_stopper_wait_ms(bv_stopper *s, int ms);
bool bv_stopper_stopped(bv_stopper *s);
void bv_stopper_stop(bv_stopper *s);

#endif
