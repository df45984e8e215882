/* Wall-clock seconds for the training loops (monotonic: unaffected by clock changes). */
#ifndef BIVOUAC_CLOCK_H
#define BIVOUAC_CLOCK_H

#include <time.h>

static inline double bv_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
