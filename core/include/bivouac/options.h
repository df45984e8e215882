/* Option schemas that plugins declare, and the validated values the core hands them.
 * Plugins never see YAML: the core parses and checks every key against the schema. */
#ifndef BIVOUAC_OPTIONS_H
#define BIVOUAC_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bv_opt_type {
    BV_OPT_INT = 1,    /* int64; range [min, max] */
    BV_OPT_FLOAT = 2,  /* double; range [min, max] */
    BV_OPT_BOOL = 3,   /* true/false */
    BV_OPT_STRING = 4, /* any string */
    BV_OPT_ENUM = 5,   /* one of `choices`, a '|'-separated list: "relu|elu" */
    BV_OPT_PATH = 6,   /* a file path, resolved relative to the YAML file; if it exists,
                          it must be a regular file (not a directory, FIFO or device) */
    BV_OPT_DIR = 7     /* a directory path, resolved like PATH; if it exists, it must be
                          a directory. bv_opts_str reads it. Newer than the others: a core
                          that predates it refuses the schema ("unknown type 7") */
} bv_opt_type;

/* One option a plugin accepts. Arrays of these end with an entry whose name is NULL. */
typedef struct bv_option {
    const char *name;
    bv_opt_type type;
    const char *default_value; /* as YAML text ("16", "0.5", "true", "relu"); NULL: required */
    double min;                /* INT/FLOAT only; used when has_range */
    double max;
    bool has_range;
    const char *choices; /* ENUM only */
    const char *doc;     /* one line, shown by `bivouac plugins` */
} bv_option;

/* Convenience initialisers for schema tables. */
#define BV_OPT_INT_RANGE(n, def, lo, hi, d) \
    { (n), BV_OPT_INT, (def), (lo), (hi), true, NULL, (d) }
#define BV_OPT_FLOAT_RANGE(n, def, lo, hi, d) \
    { (n), BV_OPT_FLOAT, (def), (lo), (hi), true, NULL, (d) }
#define BV_OPT_BOOLEAN(n, def, d) { (n), BV_OPT_BOOL, (def), 0, 0, false, NULL, (d) }
#define BV_OPT_STR(n, def, d) { (n), BV_OPT_STRING, (def), 0, 0, false, NULL, (d) }
#define BV_OPT_CHOICE(n, def, ch, d) { (n), BV_OPT_ENUM, (def), 0, 0, false, (ch), (d) }
#define BV_OPT_FILE(n, def, d) { (n), BV_OPT_PATH, (def), 0, 0, false, NULL, (d) }
#define BV_OPT_DIRECTORY(n, def, d) { (n), BV_OPT_DIR, (def), 0, 0, false, NULL, (d) }
#define BV_OPT_END { NULL, 0, NULL, 0, 0, false, NULL, NULL }

/* One validated value. */
typedef struct bv_opt_value {
    const bv_option *decl;
    bool from_user; /* false: the default was used */
    bv_pos pos;     /* where the user set it (file may be NULL for defaults) */
    union {
        int64_t i;
        double f;
        bool b;
        char *s; /* STRING, ENUM, PATH (PATH already resolved); owned */
    } v;
} bv_opt_value;

/* A validated section: one value for every option of the schema, in schema order. */
typedef struct bv_opts {
    const char *section; /* e.g. "model" */
    bv_opt_value *values;
    size_t count;
} bv_opts;

/* Typed getters. Asking for a name the schema does not declare, or with the wrong type,
 * is a programming error: it aborts with a message naming the option. */
int64_t bv_opts_int(const bv_opts *o, const char *name);
double bv_opts_float(const bv_opts *o, const char *name);
bool bv_opts_bool(const bv_opts *o, const char *name);
const char *bv_opts_str(const bv_opts *o, const char *name); /* STRING, ENUM, PATH, DIR */
const bv_opt_value *bv_opts_find(const bv_opts *o, const char *name);

/* Parses YAML scalar text as decl's type and checks its range / choices. On failure
 * err->msg is one sentence without position, e.g.
 *   "expected an integer for 'hidden', got 'abc'"
 *   "'dropout' must be in [0, 1], got 1.5"
 *   "'activation' must be one of relu|elu, got 'tanh'"
 * PATH values are copied as given (the config resolves them). */
bv_status bv_opt_parse(const bv_option *decl, const char *text, bv_opt_value *out,
                       bv_error *err);
/* Number of options in a BV_OPT_END-terminated schema. */
size_t bv_schema_count(const bv_option *schema);
const bv_option *bv_schema_find(const bv_option *schema, const char *name);

/* Fills o with the schema's defaults (used by tests and by plugins created from code). */
bv_status bv_opts_defaults(bv_opts *o, const char *section, const bv_option *schema,
                           bv_error *err);
void bv_opts_free(bv_opts *o);
/* A copy of src that owns its own strings (free it with bv_opts_free). */
bv_status bv_opts_copy(const bv_opts *src, bv_opts *dst, bv_error *err);
/* Sets one option from text, parsed and checked as its declaration says (position: none):
 * what the core sets for a plugin, such as a run's CURVE key for the transport. */
bv_status bv_opts_set(bv_opts *o, const char *name, const char *text, bv_error *err);

#ifdef __cplusplus
}
#endif
#endif
