/* The resilience plugin kind: hooks at fixed points of the engines. This version has the
 * hooks checkpointing needs (end of epoch, restore); the staleness and redundancy
 * strategies add their hooks at the end of the table (ABI minor bump). Optional slots may
 * be NULL. */
#ifndef BIVOUAC_RESILIENCE_H
#define BIVOUAC_RESILIENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/options.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A named piece of training state (a weight matrix, Adam moments, the RNG, the epoch...). */
typedef struct bv_blob {
    char *name;
    void *data;
    size_t size;
} bv_blob;

/* The whole training state at the end of an epoch, as the engine lays it out. */
typedef struct bv_state {
    int64_t epoch; /* epochs completed */
    bv_blob *blobs;
    size_t count;
} bv_state;

/* Frees every blob's name and data, and the array (for states a plugin returned). */
void bv_state_free(bv_state *s);
/* Finds a blob by name; NULL if absent. */
const bv_blob *bv_state_find(const bv_state *s, const char *name);
/* Appends a copy of size bytes under name. BV_ERR_NOMEM leaves s as it was. */
bv_status bv_state_add(bv_state *s, const char *name, const void *data, size_t size);
/* Copies blob `name` into out if it exists and is exactly size bytes; else false. */
bool bv_state_read(const bv_state *s, const char *name, void *out, size_t size);

/* What a resilience plugin knows about the run. */
typedef struct bv_run_info {
    const char *out_dir;    /* the run's output directory (exists) */
    const char *config_dir; /* directory of the experiment YAML (for relative paths) */
    uint64_t seed;
} bv_run_info;

typedef struct bv_resilience bv_resilience;

typedef struct bv_resilience_ops {
    bv_resilience *(*create)(const bv_opts *opts, const bv_run_info *info, bv_error *err);
    /* Finishes pending work (e.g. a checkpoint being written) and joins its threads. */
    void (*destroy)(bv_resilience *r);

    /* Called after every epoch with the live state. A plugin that keeps it must copy it
     * before returning (the engine goes on changing it); it must not hold training up for
     * longer than that copy. */
    bv_status (*epoch_end)(bv_resilience *r, const bv_state *state, bv_error *err);

    /* Resume: fills out with the newest state that passes its checks. Damaged ones are
     * reported with bv_log(BV_LOG_WARN, ...) and skipped. BV_ERR_IO with a message if
     * there is none. May be NULL for plugins that keep no state. */
    bv_status (*restore)(bv_resilience *r, bv_state *out, bv_error *err);
} bv_resilience_ops;

#ifdef __cplusplus
}
#endif
#endif
