/* An example resilience plugin built out of tree against the installed SDK: after every
 * epoch it writes one line saying what state the engine offered,
 *     epoch 3 blobs 12 bytes 58621
 * into a file in the run's output directory, and keeps no state itself (so it cannot
 * resume a run: restore is NULL). A starting point to copy (docs/plugins.md).
 *
 * It shows the whole resilience contract (resilience.h): options, create with the run's
 * bv_run_info, epoch_end on a state the plugin must not keep, destroy. A strategy that does
 * keep state (plugins/resilience/checkpoint) copies it in epoch_end and fills restore.
 *
 * Build: cmake or make in this directory (CMakeLists.txt, Makefile); then
 *   BIVOUAC_PLUGIN_PATH=<dir with resilience_statelog.so> bivouac run gcn-quickstart.yaml \
 *       -s 'resilience=[{plugin: statelog}]' --out runs/statelog
 *   cat runs/statelog/statelog.txt */
/* POSIX for PATH_MAX: the Makefile compiles with -std=c17. */
#define _POSIX_C_SOURCE 200809L

#include <bivouac.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const bv_option statelog_options[] = {
    BV_OPT_STR("file", "statelog.txt", "log file name, relative to the run's output directory"),
    BV_OPT_END,
};

struct bv_resilience {
    FILE *log;
    char path[PATH_MAX]; /* for error messages */
};

static bv_resilience *statelog_create(const bv_opts *opts, const bv_run_info *info,
                                      bv_error *err)
{
    const char *name = bv_opts_str(opts, "file");
    if (strchr(name, '/')) {
        /* bv_opts_find gives the option's position in the YAML for the message. */
        const bv_opt_value *v = bv_opts_find(opts, "file");
        if (v && v->pos.file)
            bv_error_set(err, BV_ERR_INVALID, "%s:%d:%d: 'file' must be a file name, got '%s'",
                         v->pos.file, v->pos.line, v->pos.col, name);
        else
            bv_error_set(err, BV_ERR_INVALID, "'file' must be a file name, got '%s'", name);
        return NULL;
    }
    bv_resilience *r = calloc(1, sizeof *r);
    if (!r) {
        bv_error_set(err, BV_ERR_NOMEM, "statelog: out of memory");
        return NULL;
    }
    if (snprintf(r->path, sizeof r->path, "%s/%s", info->out_dir, name) >= (int)sizeof r->path) {
        bv_error_set(err, BV_ERR_IO, "statelog: path too long: %s/%s", info->out_dir, name);
        free(r);
        return NULL;
    }
    /* Append: a run resumed (with another strategy that keeps state) into the same
     * directory goes on logging where the first session stopped. */
    r->log = fopen(r->path, "a");
    if (!r->log) {
        bv_error_set(err, BV_ERR_IO, "statelog: cannot open %s: %s", r->path, strerror(errno));
        free(r);
        return NULL;
    }
    return r;
}

/* destroy must finish pending work; here that is only closing the file. */
static void statelog_destroy(bv_resilience *r)
{
    if (!r)
        return;
    fclose(r->log);
    free(r);
}

/* The state is the engine's and changes as soon as this returns: read it, never keep a
 * pointer into it. It is also on training's critical path, so this does one short write. */
static bv_status statelog_epoch_end(bv_resilience *r, const bv_state *state, bv_error *err)
{
    size_t bytes = 0;
    for (size_t i = 0; i < state->count; i++)
        bytes += state->blobs[i].size;
    /* fflush: a run that is killed keeps every line it wrote. */
    if (fprintf(r->log, "epoch %lld blobs %zu bytes %zu\n", (long long)state->epoch,
                state->count, bytes) < 0 ||
        fflush(r->log) != 0)
        return bv_error_set(err, BV_ERR_IO, "statelog: cannot write %s: %s", r->path,
                            strerror(errno));
    return BV_OK;
}

static const bv_resilience_ops statelog_ops = {
    .create = statelog_create,
    .destroy = statelog_destroy,
    .epoch_end = statelog_epoch_end,
    .restore = NULL, /* keeps no state: `bivouac run --resume` needs another strategy */
};

static const bv_plugin statelog_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_RESILIENCE, "statelog", "0.1.0",
                     "logs each epoch's training state, blob count and bytes (example plugin)"),
    .options = statelog_options,
    .ops = &statelog_ops,
    .ops_size = sizeof statelog_ops,
};

/* The one exported symbol: bv_resilience_statelog_plugin, in resilience_statelog.so. */
BV_PLUGIN_ENTRY(resilience, statelog, statelog_plugin)
