/* Reading the user's input files with bounds (docs/limits.md): only regular files, never
 * more bytes than a limit the operator can raise with an environment variable, and one
 * clear error otherwise. */
#ifndef BIVOUAC_INPUT_FILE_H
#define BIVOUAC_INPUT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"

/* The limit in env_name (a positive whole number), or default_value when it is unset or
 * empty. BV_ERR_INVALID with "ENV must be a positive whole number, got 'x'" otherwise. */
bv_status bv_input_limit(const char *env_name, uint64_t default_value, uint64_t *out,
                         bv_error *err);

/* BV_ERR_INVALID with "PATH is not a regular file (a directory)" when path exists and is
 * something else (a directory, a FIFO, a device, a socket); BV_OK when it is a regular
 * file or does not exist (whoever opens it reports that). Follows symbolic links. */
bv_status bv_input_check_regular(const char *path, bv_error *err);

/* BV_ERR_INVALID with "PATH is not a directory (a character device)" when path exists and
 * is not a directory; BV_OK when it is one or does not exist. */
bv_status bv_input_check_directory(const char *path, bv_error *err);

/* Reads a regular file whole into *text (malloc'd, NUL-terminated; *len bytes before the
 * NUL). Never blocks on a FIFO and never reads more than max_bytes + 1 bytes. Errors:
 *   BV_ERR_IO       "cannot read PATH: <strerror>"
 *   BV_ERR_INVALID  "PATH is not a regular file (a FIFO)"
 *                   "PATH is larger than N bytes, the limit for WHAT (set ENV to raise it)"
 *   BV_ERR_NOMEM    "out of memory reading PATH" */
bv_status bv_input_read(const char *path, uint64_t max_bytes, const char *what,
                        const char *limit_env, char **text, size_t *len, bv_error *err);

#endif
