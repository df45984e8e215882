/* The one training loop: drives any engine (engine.h) through its units with the policy,
 * the resilience strategies, metrics.jsonl, the progress line, checkpoint offers and
 * resume; and result.json for one seed or the seeds of --repeat. */
#ifndef BIVOUAC_TRAIN_H
#define BIVOUAC_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "experiment.h"

typedef struct bv_train_options {
    const char *out_dir; /* exists; metrics.jsonl and checkpoints go here */
    const char *run_dir; /* holds the run's experiment.yaml (out_dir's parent with --repeat);
                            NULL: out_dir */
    uint64_t seed;
    bool resume;         /* restore from the resilience plugins' newest good state */
    bool progress;       /* live progress line on stderr */
    int64_t kill_after;  /* fault injection: SIGKILL self after this unit (0: off) */
    bv_policy *policy;   /* x's policy, set up already (bv_experiment_take_policy), or NULL:
                          * the run loads its own. bv_train frees it, whatever it returns */
} bv_train_options;

/* Trains one seed of x on data (the engine's load_data). res is filled when the run
 * produced at least one unit; errors are BV_ERR_INVALID for bad input (a checkpoint of
 * another seed, --resume without a checkpointing strategy) and others for failures. */
bv_status bv_train(const bv_experiment *x, void *data, const bv_train_options *o,
                   bv_run_result *res, bv_error *err);

/* Writes DIR/result.json (atomically, through a .tmp file): the run's fields for n == 1;
 * for n > 1 the means of the fields flagged BV_RESULT_MEAN, the headline's standard
 * deviation, the summed wall time and every seed's fields under "runs". 0 on success. */
int bv_result_write(const char *dir, const bv_experiment *x, const bv_run_result *runs,
                    const uint64_t *seeds, size_t n);
/* Over n seeds' results: field k's mean and (population) standard deviation, as the
 * summary in result.json has them; and the summed wall time. */
void bv_result_mean_std(const bv_run_result *runs, size_t n, size_t k, double *mean,
                        double *std);
double bv_result_wall_total(const bv_run_result *runs, size_t n);

#endif
