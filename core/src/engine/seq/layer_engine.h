/* The layer engine: runs a sequence model's layers (seqmodel.h) in this process, in
 * order, for a whole batch: a depth-1 pipeline. It owns every buffer the layers need and
 * lays each layer's state out on its own ("layer/<name>/<param>" blobs), so a pipeline
 * stage can run any range of layers and move a layer's state between processes. The
 * sequence engine (seq_ops.c) trains with it and `bivouac sample` generates with it. */
#ifndef BIVOUAC_LAYER_ENGINE_H
#define BIVOUAC_LAYER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "bivouac/compute.h"
#include "bivouac/error.h"
#include "bivouac/resilience.h"
#include "bivouac/seqmodel.h"

typedef struct bv_layer_engine bv_layer_engine;

/* Allocates every layer's parameters, gradients and AdamW moments, and the activation,
 * saved and scratch buffers for batches up to max_batch x max_seq. mops is the core's
 * size-normalised copy of the model's table (bv_ops_copy): the layers are read through
 * it at the element sizes the plugin declares. */
bv_status bv_layer_engine_create(const bv_seq_model_ops *mops, bv_seq_model *model,
                                 const bv_compute_ops *k, bv_compute *c, int64_t max_batch,
                                 int64_t max_seq, bv_layer_engine **out, bv_error *err);
void bv_layer_engine_free(bv_layer_engine *e);
/* Initialises every parameter from its spec; layer l draws from stream (seed, l) only. */
void bv_layer_engine_init(bv_layer_engine *e, uint64_t seed);
/* One layer's parameters (and with optimizer, its AdamW moments) as blobs named
 * "layer/<layer name>/<param>[/adam_m|/adam_v]", appended to s; tied tensors belong to
 * the layer that owns them. _set reads them back (BV_ERR_CORRUPT if missing/mis-sized). */
bv_status bv_layer_engine_layer_get(const bv_layer_engine *e, size_t layer, bool optimizer,
                                    bv_state *s, bv_error *err);
bv_status bv_layer_engine_layer_set(bv_layer_engine *e, size_t layer, bool optimizer,
                                    const bv_state *s, bv_error *err);
/* Forward through every layer; *logits points at batch x seq x vocab floats. */
bv_status bv_layer_engine_forward(bv_layer_engine *e, const int32_t *tokens, int64_t batch,
                                  int64_t seq, bool training, uint64_t seed, int64_t step,
                                  const float **logits, bv_error *err);
/* Zeroes the gradients, then forward, loss (mean over the batch x seq tokens) and backward
 * with dropout on: every gradient buffer then holds dLoss/dparam. */
bv_status bv_layer_engine_gradient(bv_layer_engine *e, const int32_t *tokens,
                                   const int32_t *targets, int64_t batch, int64_t seq,
                                   uint64_t seed, int64_t step, double *loss, bv_error *err);
/* The mean loss of a batch without dropout and without gradients (evaluation). */
bv_status bv_layer_engine_loss(bv_layer_engine *e, const int32_t *tokens,
                               const int32_t *targets, int64_t batch, int64_t seq,
                               uint64_t seed, int64_t step, double *loss, bv_error *err);

size_t bv_layer_engine_layers(const bv_layer_engine *e);
const bv_seq_layer *bv_layer_engine_layer(const bv_layer_engine *e, size_t layer);

/* Parameter i of a layer with its gradient and AdamW moments (a tied one: its owner's). */
typedef struct bv_layer_tensor {
    float *param, *grad, *m, *v;
    int64_t n; /* floats */
    bool weight_decay;
} bv_layer_tensor;
/* Fills t; returns whether the layer owns the tensor (false: tied to an earlier layer's,
 * which the optimizer and the checksums count once, with its owner). */
bool bv_layer_engine_tensor(const bv_layer_engine *e, size_t layer, size_t i,
                            bv_layer_tensor *t);

#endif
