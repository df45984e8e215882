/* Errors as values: a status code plus a message, and a list of positioned diagnostics
 * for user input (configs, scripts, data files). */
#ifndef BIVOUAC_ERROR_H
#define BIVOUAC_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible function returns one of these; 0 is success. */
typedef enum bv_status {
    BV_OK = 0,
    BV_ERR_INVALID = 1,   /* bad user input: config, data, script */
    BV_ERR_IO = 2,        /* a file could not be read or written */
    BV_ERR_NOMEM = 3,
    BV_ERR_PLUGIN = 4,    /* a plugin could not be loaded or refused to start */
    BV_ERR_CORRUPT = 5,   /* a checksum or a format check failed */
    BV_ERR_INTERNAL = 6,
    BV_ERR_STOPPED = 7    /* a run was asked to stop */
} bv_status;

#define BV_ERROR_MSG_MAX 1024

/* One error message. Functions that fail fill it in; the caller decides what to do. */
typedef struct bv_error {
    bv_status status;
    char msg[BV_ERROR_MSG_MAX];
} bv_error;

/* Sets err (if not NULL) and returns status, so a failure is one line:
 *   return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno)); */
bv_status bv_error_set(bv_error *err, bv_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void bv_error_clear(bv_error *err);

/* Where something came from in a user file: 1-based line and column.
 * file may be "<command line>" for -s overrides. */
typedef struct bv_pos {
    const char *file;
    int line;
    int col;
} bv_pos;

/* A growing list of positioned messages; `bivouac check` prints them all. */
typedef struct bv_diag_entry {
    char *file; /* owned copy */
    int line;
    int col;
    char *msg; /* owned */
} bv_diag_entry;

typedef struct bv_diag {
    bv_diag_entry *entries;
    size_t count;
    size_t cap;
} bv_diag;

void bv_diag_init(bv_diag *d);
void bv_diag_free(bv_diag *d);
/* Appends "file:line:col: error: <msg>". pos may be NULL for unpositioned errors. */
void bv_diag_add(bv_diag *d, const bv_pos *pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void bv_diag_vadd(bv_diag *d, const bv_pos *pos, const char *fmt, va_list ap);
/* Formats entry i as "file:line:col: error: msg" into buf. */
void bv_diag_format(const bv_diag *d, size_t i, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
