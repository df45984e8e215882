/* The bivouac command line: one function per subcommand, each returning the exit code
 * (0 success, 1 the run failed, 2 bad usage or bad input). */
#ifndef BIVOUAC_CLI_H
#define BIVOUAC_CLI_H

#include <stddef.h>

#include "bivouac/error.h"

enum { BV_EXIT_OK = 0, BV_EXIT_FAILED = 1, BV_EXIT_USAGE = 2 };

int bv_cli_run(int argc, char **argv);
int bv_cli_check(int argc, char **argv);
int bv_cli_plugins(int argc, char **argv);
int bv_cli_sample(int argc, char **argv); /* cli_sample.c: text from a sequence model */

/* Prints every diagnostic as "file:line:col: error: msg" on stderr. */
void bv_cli_print_diag(const bv_diag *d);
/* "bivouac: error: ..." on stderr; returns code. */
int bv_cli_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
