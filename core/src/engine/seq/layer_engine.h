/* The layer engine: runs a sequence model's layers (seqmodel.h) in this process, in
 * order, for a whole batch, or (a span) a pipeline stage's range of them on microbatches.
 * It owns every buffer the layers need and lays each layer's state out on its own
 * ("layer/<name>/<param>" blobs), so a stage can run any range of layers and a layer's
 * state can move between processes. The sequence engine (seq_ops.c) trains with it, its
 * pipeline stages (pipeline_stage.c) run spans of it, and `bivouac sample` generates
 * with it. */
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
    bool replica; /* a span's copy of a tensor another span owns (the tied head's) */
} bv_layer_tensor;

/* Fills t; returns whether this engine updates the tensor: the layer owns it, or it is a
 * replica (a span's copy of another span's tensor, which norms and checksums count with
 * its owner only). False for a tensor tied to an earlier layer of the same engine (its
 * owner updates it) and for layers outside the span. */
bool bv_layer_engine_tensor(const bv_layer_engine *e, size_t layer, size_t i,
                            bv_layer_tensor *t);

/* ---- spans: a pipeline stage's layers, several microbatches in flight ----------------
 * An engine made by _create_span runs layers [first, end) only, and keeps `slots` sets of
 * activations and saved buffers, one per microbatch in flight. A tied tensor keeps its own
 * gradient (bv_layer_engine_tensor's grad): the caller adds it to its owner's before the
 * update (locally, or through the stage that owns it), so the sum is the same whichever
 * stages the two layers are on. A tied tensor whose owner is outside the span is a
 * replica: initialised from the owner's draws and read from the owner's checkpoint blobs,
 * it must be updated with the owner's final gradient to stay equal to it. */
typedef struct bv_layer_span {
    size_t first, end;
    int slots;
} bv_layer_span;

bv_status bv_layer_engine_create_span(const bv_seq_model_ops *mops, bv_seq_model *model,
                                      const bv_compute_ops *k, bv_compute *c,
                                      int64_t max_batch, int64_t max_seq,
                                      const bv_layer_span *span, bv_layer_engine **out,
                                      bv_error *err);
void bv_layer_engine_span_of(const bv_layer_engine *e, size_t *first, size_t *end);
/* Where slot's input activations go when the span does not start at the embeddings
 * (max_batch x max_seq x the first layer's in_width floats). */
float *bv_layer_engine_input(bv_layer_engine *e, int slot);
/* Forward of the span on the batch ctx describes (ctx->tokens for the embeddings); *out
 * is the last layer's output in this slot (the logits when the span ends with the head). */
bv_status bv_layer_engine_span_forward(bv_layer_engine *e, int slot, const bv_seq_ctx *ctx,
                                       const float **out, bv_error *err);
/* The loss of slot's logits (span ends with the head); grad_scale != 0 also leaves
 * dLoss/dlogits for the backward that follows. */
bv_status bv_layer_engine_span_loss(bv_layer_engine *e, int slot, const bv_seq_ctx *ctx,
                                    const int32_t *targets, float grad_scale,
                                    bv_xent_result *xr, bv_error *err);
/* Backward of the span from dout (NULL: the loss's dlogits), adding into the gradients;
 * *din (if din) gets the gradient of the span's input (NULL at the embeddings), valid
 * until the next backward. */
bv_status bv_layer_engine_span_backward(bv_layer_engine *e, int slot, const bv_seq_ctx *ctx,
                                        const float *dout, const float **din, bv_error *err);
void bv_layer_engine_zero_grads(bv_layer_engine *e);
/* A profiling pass over every layer (an engine of the whole model): each layer's forward
 * (the head's with the loss) and backward on the batch ctx describes, in seconds, and the
 * bytes it holds (its tensors with their gradients and moments, its saved buffer and its
 * output, for one microbatch). */
bv_status bv_layer_engine_profile(bv_layer_engine *e, const bv_seq_ctx *ctx,
                                  const int32_t *targets, double *fwd, double *bwd,
                                  double *bytes, bv_error *err);
/* Whether tensor i of layer is tied, and to which (layer, param). */
bool bv_layer_engine_tie(const bv_layer_engine *e, size_t layer, size_t i, size_t *owner,
                         size_t *owner_param);

#endif
