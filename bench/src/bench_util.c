/* Helpers shared by the microbenchmarks (bench_util.h). */
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *find_arg(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i] + 2, name) == 0)
            return argv[i + 1];
    return NULL;
}

int64_t bench_arg_int(int argc, char **argv, const char *name, int64_t def)
{
    const char *s = find_arg(argc, argv, name);
    if (!s)
        return def;
    char *end;
    double v = strtod(s, &end); /* accepts 1e6 */
    if (*end || end == s) {
        fprintf(stderr, "%s: --%s wants a number, got '%s'\n", argv[0], name, s);
        exit(2);
    }
    return (int64_t)v;
}

double bench_arg_float(int argc, char **argv, const char *name, double def)
{
    const char *s = find_arg(argc, argv, name);
    if (!s)
        return def;
    char *end;
    double v = strtod(s, &end);
    if (*end || end == s) {
        fprintf(stderr, "%s: --%s wants a number, got '%s'\n", argv[0], name, s);
        exit(2);
    }
    return v;
}

const char *bench_arg_str(int argc, char **argv, const char *name, const char *def)
{
    const char *s = find_arg(argc, argv, name);
    return s ? s : def;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}
