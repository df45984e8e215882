/* An experiment: the YAML file checked section by section against the core's schemas and
 * each named plugin's schema, with the plugins loaded. Nothing runs and nothing is
 * written until every section is valid (`bivouac check` stops here). */
#ifndef BIVOUAC_EXPERIMENT_H
#define BIVOUAC_EXPERIMENT_H

#include <stdbool.h>

#include "bivouac/compute.h"
#include "bivouac/error.h"
#include "bivouac/model.h"
#include "bivouac/transport.h"
#include "bivouac/options.h"
#include "bivouac/plugin.h"
#include "config.h"
#include "policy.h"
#include "registry.h"

#define BV_MAX_RESILIENCE 8

typedef struct bv_section {
    const bv_plugin *plugin; /* NULL for core sections */
    bv_opts opts;
} bv_section;

typedef struct bv_experiment {
    char *path; /* as given */
    char *name; /* `name:` or the file's base name without .yaml */
    bv_node *root;
    bv_section model, compute, transport;
    /* the model's and compute backend's ops at this build's size (newer slots NULL) */
    bv_model_ops model_ops;
    bv_compute_ops compute_ops;
    bv_transport_ops transport_ops;
    bv_section resilience[BV_MAX_RESILIENCE];
    size_t nresilience;
    bv_opts dataset, train, engine, policy;
    bool has_policy;
    bool policy_broken; /* it failed to load with on_error: continue; runs go on without it */
    bv_policy_param *policy_params;
    size_t npolicy_params;
    char *dataset_dir; /* resolved directory; NULL for a synthetic dataset */
    char *dataset_label; /* what result.json calls the dataset */
} bv_experiment;

/* Loads, applies overrides ("a.b=c"), validates everything and loads the plugins. On
 * failure *out is NULL and diag holds every problem found, each with file:line:column. */
bv_status bv_experiment_load(const char *path, char *const *overrides, size_t noverrides,
                             bv_registry *reg, bv_experiment **out, bv_diag *diag);
void bv_experiment_free(bv_experiment *x);

/* The experiment's dataset, normalised as configured. seed_offset is added to a synthetic
 * generator's seed (0 keeps the dataset fixed across --repeat seeds). */
struct bv_graph_dataset;
bv_status bv_experiment_load_dataset(const bv_experiment *x, uint64_t seed_offset,
                                     struct bv_graph_dataset **out, bv_error *err);

#endif
