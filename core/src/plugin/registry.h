/* The plugin registry: finds <kind>_<name>.so files on the plugin path, dlopens them and
 * checks each descriptor before any other plugin code runs (STYLE.md, Open MPI/ggml). */
#ifndef BIVOUAC_REGISTRY_H
#define BIVOUAC_REGISTRY_H

#include <stddef.h>

#include "bivouac/error.h"
#include "bivouac/plugin.h"

typedef enum bv_load_outcome {
    BV_LOAD_OK = 0,
    BV_LOAD_NOT_FOUND,     /* no such file on the path */
    BV_LOAD_DLOPEN_FAILED, /* dlerror() text kept */
    BV_LOAD_NO_ENTRY,      /* entry symbol missing */
    BV_LOAD_BAD_ABI,       /* magic, ABI major, a newer ABI minor, struct size */
    BV_LOAD_MISMATCH,      /* descriptor kind/name differ from the file name */
    BV_LOAD_INCOMPLETE,    /* ops table missing or too small, model engine unknown */
    BV_LOAD_DUPLICATE      /* same kind and name earlier on the path */
} bv_load_outcome;

typedef struct bv_plugin_record {
    char *path;
    bv_plugin_kind kind;
    char *name;
    bv_load_outcome outcome;
    char *why; /* for failures: one sentence naming the file */
    const bv_plugin *desc; /* set when outcome == BV_LOAD_OK */
    void *handle;          /* never dlclosed while running (STYLE.md) */
    bv_option *options;    /* desc->options in this build's bv_option layout; owned */
} bv_plugin_record;

typedef struct bv_registry {
    char **dirs; /* the plugin path, searched in order */
    size_t ndirs;
    bv_plugin_record *records;
    size_t count;
    size_t cap;
} bv_registry;

/* Builds the search path: $BIVOUAC_PLUGIN_PATH (colon-separated) first, then the plugin
 * directory next to libbivouac (build tree: <build>/plugins; install:
 * <libdir>/bivouac/plugins). */
bv_registry *bv_registry_new(void);
void bv_registry_free(bv_registry *r);

/* Loads every <kind>_<name>.so on the path (for `bivouac plugins`). */
void bv_registry_scan(bv_registry *r);

/* Finds and loads one plugin. Errors name the file and the outcome, e.g.
 *   "plugin model 'x' not found (searched: /a:/b)"
 *   "/a/model_x.so: built for plugin ABI 9.0, this bivouac speaks 1.0" */
const bv_plugin *bv_registry_get(bv_registry *r, bv_plugin_kind kind, const char *name,
                                 bv_error *err);

/* Copies a plugin's ops table into a table of this build's size (dst_size: sizeof the
 * kind's table), with the slots the plugin predates set to NULL, then fills the NULL
 * optional slots that have a core default (plugin_defaults.h: resilience hooks, transport
 * send_owned/bound_address, cloud price_per_hour). Model and compute slots have none.
 * Read every plugin's table through this copy, never through p->ops. */
void bv_ops_copy(void *dst, size_t dst_size, const bv_plugin *p);

/* The option schema of a loaded plugin in this build's bv_option layout (the registry's
 * normalised copy of p->options, whatever p's option_size); NULL if it has none. Valid
 * until bv_registry_free. Use it instead of p->options. */
const bv_option *bv_registry_options(const bv_registry *r, const bv_plugin *p);

/* The engine a loaded model plugin needs: "graph" or "sequence". From the descriptor for
 * ABI 1.4 plugins, from the deprecated leading field of the ops table for older ones.
 * NULL for other kinds (the loader refuses a model with an unknown engine). */
const char *bv_plugin_model_engine(const bv_plugin *p);

/* Whether a loaded resilience plugin gates tasks: its own table has before_task (the
 * core's default for a NULL one lets every task run). */
bool bv_resilience_gates(const bv_plugin *p);

/* Names of the loadable plugins of a kind (for did-you-mean); returns count. */
size_t bv_registry_names(bv_registry *r, bv_plugin_kind kind, const char **names, size_t max);

/* Size of the ops table a model plugin for that engine must have (0: unknown engine): the
 * ABI 1.0 graph table, the ABI 1.3 sequence table. */
#include "bivouac/model.h"
size_t bv_model_ops_size_for_engine(bv_engine_kind engine);

#endif
