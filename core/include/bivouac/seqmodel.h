/* The model plugin kind, for the layer-by-layer (pipeline) engine: a sequence model is a
 * list of layers (embedding, blocks, head), each with its own parameters and a forward and
 * backward in terms of the compute backend's kernels. A pipeline stage (Bamboo §3) runs any
 * contiguous range of layers; a layer never reads another layer's parameters or
 * activations, so its state can move between processes and a layer can be run a second
 * time on another node (Bamboo's redundant computation) from its input alone.
 *
 * The engine owns every buffer: parameters, gradients and optimizer moments, laid out per
 * layer from the layer's param specs (so a layer's state is serialisable on its own), the
 * activations between layers, the per-layer `saved` buffers a forward leaves for its
 * backward, and one `scratch` buffer shared by all layers. The model keeps only its
 * configuration: its functions are pure in (params, input, batch) -> output.
 *
 * Data flow for a batch of `batch` sequences of `seq` tokens (T = batch * seq rows):
 *   layer 0 (EMBED) reads ctx->tokens, writes T x out_width
 *   layer i         reads T x in_width (layer i-1's output), writes T x out_width
 *   last (HEAD)     writes T x vocab logits; loss() turns them into the loss and dlogits
 * and backward runs the same list in reverse, each layer ADDING its weight gradients. */
#ifndef BIVOUAC_SEQMODEL_H
#define BIVOUAC_SEQMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/compute.h"
#include "bivouac/error.h"
#include "bivouac/model.h" /* bv_engine_kind */
#include "bivouac/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bv_seq_model bv_seq_model;

/* What the model is built for. */
typedef struct bv_seq_shape {
    int64_t vocab;     /* token ids are in [0, vocab) */
    int64_t max_seq;   /* longest sequence (the block size) */
    int64_t max_batch; /* most sequences per batch, for the engine's buffer sizes */
} bv_seq_shape;

typedef enum bv_seq_layer_kind {
    BV_SEQ_EMBED = 1, /* reads ctx->tokens; in_width is 0 */
    BV_SEQ_BLOCK = 2,
    BV_SEQ_HEAD = 3 /* writes logits (out_width == vocab) */
} bv_seq_layer_kind;

typedef enum bv_seq_init {
    BV_SEQ_INIT_ZEROS = 0,
    BV_SEQ_INIT_ONES = 1,
    BV_SEQ_INIT_NORMAL = 2 /* N(0, init_std^2) */
} bv_seq_init;

/* One parameter tensor of a layer. */
typedef struct bv_seq_param {
    const char *name; /* unique within the layer: "wqkv" */
    int64_t rows, cols;
    bool weight_decay; /* AdamW's decay applies (matrices, not gains) */
    bv_seq_init init;
    float init_std;
    /* Weight tying: >= 0 means this tensor IS parameter tied_param of layer tied_layer
     * (an earlier layer), e.g. the head's output projection tied to the token embedding.
     * The engine keeps one copy with the owning layer and passes the same pointers (and
     * the same gradient buffer) to both; a pipeline splitting the two onto different
     * stages must sum their gradients (Megatron-LM's embedding all-reduce). */
    int tied_layer;
    int tied_param;
} bv_seq_param;

typedef struct bv_seq_layer {
    const char *name; /* "embed", "block0", ..., "head": names its state in checkpoints */
    bv_seq_layer_kind kind;
    int64_t in_width;  /* floats per token in (0 for EMBED) */
    int64_t out_width; /* floats per token out */
    size_t nparams;
    const bv_seq_param *params; /* nparams elements, each ops->param_size bytes apart */
} bv_seq_layer;

/* Everything a layer call needs besides its buffers. */
typedef struct bv_seq_ctx {
    const bv_compute_ops *k;
    bv_compute *compute;
    int64_t batch; /* sequences in this batch (<= shape.max_batch) */
    int64_t seq;   /* tokens per sequence (<= shape.max_seq) */
    const int32_t *tokens; /* batch x seq inputs (EMBED) */
    bool training;         /* dropout on */
    uint64_t seed;         /* with step, selects the dropout masks */
    int64_t step;
    /* ABI 1.8: the first of these sequences within the step's whole batch (a pipeline's
     * microbatch, or a data-parallel replica's share, starts past 0): a model draws the
     * dropout mask of element i of a batch x seq x width tensor at offset
     * row0 * seq * width + i, so any cut of a batch into microbatches draws the masks the
     * whole batch would. The core passes microbatches only to plugins of ABI 1.8 or
     * later; older ones see whole batches (row0 == 0) alone. */
    int64_t row0;
} bv_seq_ctx;

typedef struct bv_seq_model_ops {
    /* Deprecated (model.h): BV_ENGINE_SEQUENCE, always first. From ABI 1.4 on the
     * descriptor's .engine = "sequence" is what counts; keep both until ABI 2. */
    bv_engine_kind engine;

    /* Optional: checks the options against the data before anything is allocated, adding
     * positioned diagnostics (each option's pos says where it was set). */
    bv_status (*validate)(const bv_opts *opts, const bv_seq_shape *shape, bv_diag *diag);
    bv_seq_model *(*create)(const bv_opts *opts, const bv_seq_shape *shape, bv_error *err);
    void (*destroy)(bv_seq_model *m);

    size_t (*layer_count)(const bv_seq_model *m);
    const bv_seq_layer *(*layer)(const bv_seq_model *m, size_t i);

    /* Floats the engine must provide per call for (batch, seq): `saved` lives from a
     * layer's forward to its backward (one per layer and batch in flight); `scratch` is
     * only used during one call (the engine may share it between layers). */
    size_t (*saved_floats)(const bv_seq_model *m, size_t layer, int64_t batch, int64_t seq);
    size_t (*scratch_floats)(const bv_seq_model *m, size_t layer, int64_t batch, int64_t seq);

    /* out = layer(in). params are the layer's tensors in spec order (tied ones included). */
    bv_status (*forward)(bv_seq_model *m, size_t layer, const bv_seq_ctx *ctx,
                         float *const *params, const float *in, float *out, float *saved,
                         float *scratch, bv_error *err);
    /* Given the forward's in and saved and dout, writes din (NULL: not wanted, e.g. for
     * EMBED) and ADDS the weight gradients into dparams (spec order). */
    bv_status (*backward)(bv_seq_model *m, size_t layer, const bv_seq_ctx *ctx,
                          float *const *params, const float *in, const float *saved,
                          const float *dout, float *din, float *const *dparams,
                          float *scratch, bv_error *err);
    /* Mean next-token cross-entropy over the batch x seq logits of the HEAD layer.
     * dlogits (may be NULL) gets grad_scale * dLoss_sum/dlogits. */
    bv_status (*loss)(bv_seq_model *m, const bv_seq_ctx *ctx, const float *logits,
                      const int32_t *targets, float grad_scale, float *dlogits,
                      bv_xent_result *res, bv_error *err);

    /* ABI 1.4: sizeof(bv_seq_layer) and sizeof(bv_seq_param) as the plugin was compiled
     * (the element size of layer()'s result and of its params array), so both structs can
     * grow at their end; the core reads them through normalised copies. 0 means the ABI
     * 1.3 size. */
    size_t layer_size;
    size_t param_size;
} bv_seq_model_ops;

#ifdef __cplusplus
}
#endif
#endif
