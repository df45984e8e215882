/* The bivouac command line: one function per subcommand, each returning the exit code
 * (0 success, 1 the run failed, 2 bad usage or bad input). */
#ifndef BIVOUAC_CLI_H
#define BIVOUAC_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "bivouac/error.h"

enum { BV_EXIT_OK = 0, BV_EXIT_FAILED = 1, BV_EXIT_USAGE = 2 };

int bv_cli_run(int argc, char **argv);
int bv_cli_check(int argc, char **argv);
int bv_cli_plugins(int argc, char **argv);
int bv_cli_sample(int argc, char **argv); /* cli_sample.c: text from a sequence model */
int bv_cli_role(int argc, char **argv);   /* cli_role.c: one role of a cluster run */
int bv_cli_partition(int argc, char **argv); /* cli_partition.c: a graph split into parts */
int bv_cli_schedule(int argc, char **argv); /* cli_schedule.c: a pipeline's instructions */
int bv_cli_plot(int argc, char **argv);    /* cli_plot.c: a run's curves */
int bv_cli_compare(int argc, char **argv); /* cli_plot.c: runs side by side */
int bv_cli_simulate(int argc, char **argv); /* cli_simulate.c: training on a simulated cloud */
int bv_cli_profile(int argc, char **argv);  /* cli_profile.c: a short real run to simulate */

/* plot_loader.c: the plot module, opened once; NULL (and *reason why) without it. */
struct bv_plot_module;
const struct bv_plot_module *bv_cli_plot_module(const char **reason);

/* Prints every diagnostic as "file:line:col: error: msg" on stderr. */
void bv_cli_print_diag(const bv_diag *d);
/* "bivouac: error: ..." on stderr; returns code. */
int bv_cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* cli_args.c: a flag's value as an integer or a number in [min, max]. Returns 0, or
 * prints "bivouac: error: FLAG needs an integer in [MIN, MAX], got 'TEXT'" (or "a number")
 * and returns BV_EXIT_USAGE. The whole text must be a decimal numeral: no white space, no
 * hex, no inf or nan, no trailing characters. */
int bv_cli_int_arg(const char *flag, const char *text, long long min, long long max,
                   long long *out);
int bv_cli_number_arg(const char *flag, const char *text, double min, double max,
                      double *out);
/* One `-s KEY.PATH=VALUE` appended to list (n of max used). Returns 0, or prints
 * "bivouac: error: too many -s overrides" and returns BV_EXIT_USAGE. */
int bv_cli_override_arg(char *text, char **list, size_t *n, size_t max);

#endif
