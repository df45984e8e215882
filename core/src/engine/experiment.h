/* An experiment: the YAML file checked section by section against the core's schemas and
 * each named plugin's schema, with the plugins loaded. Nothing runs and nothing is
 * written until every section is valid (`bivouac check` stops here). */
#ifndef BIVOUAC_EXPERIMENT_H
#define BIVOUAC_EXPERIMENT_H

#include <stdbool.h>

#include "bivouac/cloud.h"
#include "bivouac/compute.h"
#include "bivouac/error.h"
#include "bivouac/options.h"
#include "bivouac/plugin.h"
#include "bivouac/resilience.h"
#include "bivouac/transport.h"
#include "config.h"
#include "engine.h"
#include "ledger.h"
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
    /* `cloud:` (optional): where the roles of a `cluster:` run as processes; its plugin is
     * NULL when the experiment has none (the one-process embedded run). */
    bv_section cloud;
    bv_cloud_ops cloud_ops;
    const bv_engine_ops *engine_ops; /* the engine the model plugin's descriptor names */
    /* the plugins' ops at this build's size (bv_ops_copy: newer slots NULL or defaulted);
     * the model's is the engine's business (its table depends on the engine) */
    bv_compute_ops compute_ops;
    bv_transport_ops transport_ops;
    bv_section resilience[BV_MAX_RESILIENCE];
    bv_resilience_ops resilience_ops[BV_MAX_RESILIENCE];
    size_t nresilience;
    bv_opts dataset, train, engine, policy;
    bv_opts cluster; /* `cluster:` how many roles of each kind (defaults without a cloud) */
    bv_opts pipeline; /* `pipeline:` stages, microbatches, schedule, partition (defaults) */
    bv_opts cost, budget; /* `cost:` the price table and instance type; `budget:` usd */
    bv_opts simulate; /* `simulate:` the workload model of `bivouac simulate` (sim.h) */
    bv_price_table prices; /* the table cost.prices names (ledger.h) */
    bool has_policy;
    bool policy_broken; /* it failed to load with on_error: continue; runs go on without it */
    bv_policy_param *policy_params;
    size_t npolicy_params;
    /* The exports of the experiment's plugins (model, compute, transport, resilience), as
     * the policy sees them: plain data, so that policy/ stays below plugin/. */
    bv_policy_export *policy_exports;
    size_t npolicy_exports;
    /* The policy as validation set it up (its top level has run): the first run takes it
     * (bv_experiment_take_policy), so that set-up runs once per run; NULL once taken. */
    bv_policy *policy_ready;
    /* The data the engine's check already read (the sequence engine's corpus), for the
     * run to take (bv_experiment_take_data) instead of reading it again; NULL if none. */
    void *data_ready;
    char *dataset_dir; /* resolved directory; NULL for a synthetic dataset */
    char *dataset_label; /* what result.json calls the dataset */
} bv_experiment;

/* Loads, applies overrides ("a.b=c"), validates everything and loads the plugins. On
 * failure *out is NULL and diag holds every problem found, each with file:line:column. */
bv_status bv_experiment_load(const char *path, char *const *overrides, size_t noverrides,
                             bv_registry *reg, bv_experiment **out, bv_diag *diag);
/* The same for a role process of a cluster run (`bivouac role`): the run's own copy of the
 * experiment, already checked by its coordinator; the policy script is not compiled or
 * run (its callbacks run only in the coordinator), so its top level runs once per run. */
bv_status bv_experiment_load_for_role(const char *path, bv_registry *reg, bv_experiment **out,
                                      bv_diag *diag);
void bv_experiment_free(bv_experiment *x);

/* The policy validation set up, for one run to own (bv_train_options.policy); NULL when
 * there is none, it is broken, or it was taken already. A further run (another seed of
 * --repeat) loads its own, fresh one. */
bv_policy *bv_experiment_take_policy(bv_experiment *x);

/* A fresh policy of the experiment's `policy:` (its script set up, with its params, the
 * plugins' exports and its limits), for a further run; the caller frees it. */
bv_status bv_experiment_load_policy(const bv_experiment *x, bv_policy **out, bv_error *err);

/* The data the engine's check read, for the run to own (the engine's free_data frees
 * it); NULL when the check read none or it was taken: then call the engine's load_data. */
void *bv_experiment_take_data(bv_experiment *x);

/* The value's position when the user set it, else fallback's (may be NULL). */
const bv_pos *bv_experiment_value_pos(const bv_opts *o, const char *name,
                                      const bv_node *fallback);

/* Where role `index` of a kind runs, from a cluster.*_hosts list ("ns-a@10.0.0.1,,
 * ns-b@10.0.0.2"): 1 and host / address filled when the list places it, 0 when it runs
 * on the coordinator's host, -1 when the list is malformed (err says why). */
int bv_cluster_place(const char *list, int index, char *host, size_t host_len, char *addr,
                     size_t addr_len, bv_error *err);

#endif
