/* One training run of a graph model: builds the model and the engine, restores or
 * initialises the state, and runs epochs with the policy, the resilience strategies,
 * metrics.jsonl and the progress line. */
#ifndef BIVOUAC_TRAIN_GRAPH_H
#define BIVOUAC_TRAIN_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "bivouac/graph.h"
#include "experiment.h"

typedef struct bv_run_options {
    const char *out_dir; /* exists; metrics.jsonl and checkpoints go here */
    uint64_t seed;
    bool resume;   /* restore from the resilience plugins' newest good state */
    bool progress; /* live progress line on stderr */
    int64_t kill_after_epoch; /* fault injection: SIGKILL self after this epoch (0: off) */
} bv_run_options;

typedef struct bv_run_result {
    int64_t epochs; /* completed */
    int64_t best_epoch;
    double best_val_accuracy;
    double val_accuracy;  /* final */
    double test_accuracy; /* of the selected epoch's model (train.select) */
    int64_t selected_epoch;
    double train_loss;    /* final */
    double val_loss;      /* final */
    double wall_seconds;  /* including time before a resume */
    uint64_t params_hash; /* CRC-32C chain over the final weights: equal runs, equal hash */
    bool failed;          /* stopped by a policy error with on_error: stop */
    char stop_reason[320];
} bv_run_result;

bv_status bv_train_graph(const bv_experiment *x, const bv_graph_dataset *data,
                         const bv_run_options *o, bv_run_result *res, bv_error *err);

#endif
