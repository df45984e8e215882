/* Small helpers shared by the machine-limit microbenchmarks: a monotonic clock, option
 * parsing of the form --name VALUE, and order statistics of repeated timings. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdint.h>

double bench_now(void); /* seconds, CLOCK_MONOTONIC */

/* The value after "--name" in argv, or def when absent. Exits with a usage message on a
 * malformed number: these are command-line tools, not library code. */
int64_t bench_arg_int(int argc, char **argv, const char *name, int64_t def);
double bench_arg_float(int argc, char **argv, const char *name, double def);
const char *bench_arg_str(int argc, char **argv, const char *name, const char *def);

/* Sorts t[0..n) in place and returns its median; min is t[0] afterwards. */
double bench_median(double *t, int n);

#endif
