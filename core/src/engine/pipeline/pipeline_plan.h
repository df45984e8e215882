/* A pipeline's plan from an experiment (docs/pipeline.md): its `pipeline:` section and the
 * model's layers, checked, and the layers of each stage. */
#ifndef BIVOUAC_ENGINE_PIPELINE_PLAN_H
#define BIVOUAC_ENGINE_PIPELINE_PLAN_H

#include "config.h"
#include "experiment.h"
#include "schedule_gen.h"

#define BV_PIPELINE_MAX_STAGES 64

typedef struct bv_pipeline_plan {
    int stages, microbatches, layers;
    bv_schedule_kind kind;
    int first[BV_PIPELINE_MAX_STAGES + 1]; /* stage s runs layers [first[s], first[s+1]) */
} bv_pipeline_plan;

/* Splits `layers` layers into `stages` stages: "uniform" (the sizes differ by one at most,
 * the larger ones last) or each stage's count, comma-separated ("3,1"), which must add up
 * to `layers`. A stage without a layer is an error. "balanced" is uniform here: the run
 * replaces it with bv_pipeline_balance of the layers' measured costs. */
bv_status bv_pipeline_partition(int layers, int stages, const char *spec, int *first,
                                bv_error *err);

/* Cuts layers with these costs into `stages` (<= layers) contiguous runs of one or more,
 * so that the costliest run costs as little as it can (PipeDream's and Bamboo's balanced
 * partition); first as bv_pipeline_partition's. */
bv_status bv_pipeline_balance(const double *cost, int layers, int stages, int *first,
                              bv_error *err);

/* The plan of a loaded experiment; errors go to diag with the position of the value they
 * are about. BV_ERR_INVALID when there are any. */
bv_status bv_pipeline_plan_make(const bv_experiment *x, bv_pipeline_plan *plan, bv_diag *diag);

#endif
