/* Sorting doubles and their median: the one comparison the core's qsort calls on doubles
 * use (the parameter server's message times, a profile's step times, the simulator's
 * distributions). */
#ifndef BIVOUAC_SORTED_H
#define BIVOUAC_SORTED_H

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

static inline int bv_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline void bv_sort_doubles(double *v, size_t n)
{
    qsort(v, n, sizeof *v, bv_compare_double);
}

/* The median of v[0..n), which it sorts; NAN when n is 0. */
static inline double bv_median(double *v, size_t n)
{
    if (!n)
        return NAN;
    bv_sort_doubles(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
