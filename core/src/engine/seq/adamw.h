/* The sequence engine's optimizer step (nanoGPT's recipe): the learning-rate schedule
 * (linear warmup, cosine decay to min_lr), clipping of the global gradient norm, and
 * AdamW with decoupled weight decay on the tensors a layer marks for it. */
#ifndef BIVOUAC_ADAMW_H
#define BIVOUAC_ADAMW_H

#include <stdint.h>

#include "bivouac/compute.h"
#include "bivouac/options.h"
#include "layer_engine.h"

typedef struct bv_adamw {
    float beta1, beta2, eps, weight_decay;
    double grad_clip; /* clip the global gradient norm to this (0: off) */
} bv_adamw;

/* The train section's AdamW settings. */
bv_adamw bv_adamw_from_opts(const bv_opts *train);
/* nanoGPT's get_lr for iteration it (0-based): linear warmup from lr/(warmup+1), cosine
 * to min_lr at decay_steps (0: steps), min_lr after. */
double bv_adamw_lr_at(const bv_opts *train, int64_t it);
/* One step (the step-th, 1-based) over every tensor the layers own, with the gradients
 * the layer engine holds: returns the global gradient norm before clipping. */
double bv_adamw_step(bv_layer_engine *e, const bv_compute_ops *k, bv_compute *c,
                     const bv_adamw *cfg, int64_t step, double lr);
/* The second half of a step, for a pipeline stage whose global norm was summed across
 * stages: clips with that norm and steps every tensor the engine updates (replicas too). */
void bv_adamw_apply(bv_layer_engine *e, const bv_compute_ops *k, bv_compute *c,
                    const bv_adamw *cfg, int64_t step, double lr, double norm);

#endif
