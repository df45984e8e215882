/* The model plugin kind, for the graph engine (Dorylus §3, SAGA-NN).
 *
 * A graph model is a chain of stages over vertex arrays. A TENSOR stage is per-vertex
 * neural work (ApplyVertex: the weights, activations, dropout) that the engine runs as
 * tasks on vertex intervals on tensor workers, which are stateless: they get the input
 * rows and the weights and return the output rows. A GATHER stage is graph work (GA:
 * aggregation over in-edges with the normalised adjacency) that runs on the graph server;
 * its backward (∇GA) aggregates over the reversed edges. Scatter is the graph server
 * storing a task's output rows where the next stage reads them. The last stage's rows are
 * the logits; the model's loss task turns them into the loss and their gradient, and the
 * engine then runs the stages backwards (∇AV on tensor workers, ∇GA on the graph server)
 * and sends weight gradients to the parameter server for WeightUpdate.
 *
 * GCN (Kipf & Welling) as stages: AV0 = dropout(X) W0, GA0 = Â·, AV1 = dropout(relu(.)) W1,
 * GA1 = Â·. (AV before GA is the same maths as GA before AV for a linear map, and moves
 * far fewer bytes when the hidden width is smaller than the input width.)
 */
#ifndef BIVOUAC_MODEL_H
#define BIVOUAC_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "bivouac/compute.h"
#include "bivouac/error.h"
#include "bivouac/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bv_model bv_model;

/* Which engine drives a model plugin. Since ABI 1.4 the descriptor says it (bv_plugin
 * .engine = "graph" or "sequence"). The ops table of every model plugin still starts with
 * this field (removing it would be an ABI major change), but it is DEPRECATED: the core
 * reads it only for plugins built against ABI 1.3 or older. Keep setting it to the same
 * engine as the descriptor until the next major version. */
typedef enum bv_engine_kind {
    BV_ENGINE_GRAPH = 0,   /* Dorylus graph engine: bv_model_ops below */
    BV_ENGINE_SEQUENCE = 1 /* layer-by-layer / pipeline engine: see seqmodel.h */
} bv_engine_kind;

typedef enum bv_stage_kind {
    BV_STAGE_TENSOR = 1, /* ApplyVertex on a tensor worker */
    BV_STAGE_GATHER = 2, /* Gather on the graph server: with Â, or weighted by an EDGE stage */
    BV_STAGE_EDGE = 3    /* ApplyEdge on a tensor worker: values per edge of A + I */
} bv_stage_kind;

/* A stage reads the vertex array of the latest TENSOR or GATHER stage before it (the
 * features for the first), and EDGE stages leave that array for the stages after them:
 *   GAT layer: AV (Z and attention terms per vertex) -> AE (attention per edge, reads a
 *   window of AV's rows) -> GA (aggregates a window of AV's rows weighted by AE). */
typedef struct bv_stage {
    bv_stage_kind kind;
    const char *name; /* "AV0", "GA0", ... for logs and metrics */
    int64_t in_dim;   /* floats read per vertex (EDGE, GATHER: the window's width) */
    int64_t out_dim;  /* floats out per vertex (GATHER: == in_dim; EDGE: per edge == heads) */
    /* TENSOR only: does backward need the gradient of the input? false for the first
     * stage (the features), which saves the engine a whole ∇GA. */
    bool needs_input_grad;
    /* ABI 1.1; all zero for GCN-style stages. */
    int64_t in_offset;    /* EDGE, weighted GATHER: first float of the window in each row */
    int heads;            /* EDGE: values per edge; weighted GATHER: in_dim = heads*head_dim */
    bool weighted;        /* GATHER: weigh by an EDGE stage's values instead of Â */
    size_t weights_stage; /* weighted GATHER: index of that EDGE stage */
    /* ABI 1.15. A TENSOR stage that reads the features: it computes from ctx->sparse_in
     * alone (its `in` is then NULL) when the compute plugin has spmm_dropout and its
     * gradient. The engine keeps sparse features sparse only when every stage reading
     * them says so, and makes them dense otherwise (docs/datasets.md). */
    bool sparse_input;
} bv_stage;

typedef enum bv_init { BV_INIT_ZEROS = 0, BV_INIT_GLOROT_UNIFORM = 1 } bv_init;

typedef struct bv_param_spec {
    const char *name; /* "W0" */
    int64_t rows;
    int64_t cols;
    bool weight_decay; /* does train.weight_decay apply to it (GCN: first layer only) */
    bv_init init;
} bv_param_spec;

/* What the model is built for. */
typedef struct bv_graph_shape {
    int64_t num_nodes;
    int64_t num_features;
    int32_t num_classes;
} bv_graph_shape;

/* Everything a task needs besides its rows. */
typedef struct bv_task_ctx {
    const bv_compute_ops *k;
    bv_compute *compute;
    uint64_t seed;     /* run seed */
    int64_t epoch;     /* 0-based; with seed, selects the dropout masks */
    bool training;     /* dropout on */
    int64_t row_begin; /* first vertex of the interval */
    int64_t rows;      /* vertices in the interval */
    int64_t num_nodes; /* all vertices (for global dropout indices) */
    float *const *params; /* current weights, in param_spec order */
    int64_t edge_begin;   /* EDGE tasks: global index (in A + I) of the interval's first edge */
    /* ABI 1.3: for a TENSOR stage that reads the features, the same rows as a CSR when
     * they are sparse (NULL otherwise): rows = ctx->rows, cols = the input width, values
     * set. A model may use it (spmm_dropout) instead of the dense input. */
    const bv_csr *sparse_in;
    /* ABI 1.16: memory for the task's temporaries (NULL: the caller has none, and the
     * model allocates its own; bv_task_temp does either). scratch(scratch_owner, slot,
     * bytes) returns a buffer of at least `bytes` bytes, 64-byte aligned, its contents
     * undefined, valid until the model returns; NULL when out of memory. Each slot
     * (0 .. BV_TASK_SCRATCH_SLOTS - 1) is a buffer of its own that the caller keeps from
     * task to task, so temporaries of the same size every task are not mapped and zeroed
     * afresh each time (on the 1M-vertex GAT of bench/ that was 15 % of an epoch). */
    void *(*scratch)(void *scratch_owner, int slot, size_t bytes);
    void *scratch_owner;
} bv_task_ctx;

#define BV_TASK_SCRATCH_SLOTS 8

/* A temporary of the task: the caller's scratch slot, or malloc'd when it has none. */
static inline void *bv_task_temp(const bv_task_ctx *ctx, int slot, size_t bytes)
{
    if (ctx->scratch)
        return ctx->scratch(ctx->scratch_owner, slot, bytes);
    return malloc(bytes ? bytes : 1);
}

/* Gives back what bv_task_temp returned (a scratch slot stays the caller's). */
static inline void bv_task_temp_free(const bv_task_ctx *ctx, void *p)
{
    if (!ctx->scratch)
        free(p);
}

typedef struct bv_model_ops {
    /* Deprecated (see bv_engine_kind): BV_ENGINE_GRAPH, 0, so a table that omits it is a
     * graph model. The descriptor's .engine = "graph" is what counts from ABI 1.4 on. */
    bv_engine_kind engine;
    bv_model *(*create)(const bv_opts *opts, const bv_graph_shape *shape, bv_error *err);
    void (*destroy)(bv_model *m);

    size_t (*param_count)(const bv_model *m);
    const bv_param_spec *(*param)(const bv_model *m, size_t i);
    size_t (*stage_count)(const bv_model *m);
    const bv_stage *(*stage)(const bv_model *m, size_t i);

    /* TENSOR stage forward on ctx->rows rows: in is rows x in_dim, out rows x out_dim. */
    bv_status (*tensor_forward)(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                const float *in, float *out, bv_error *err);
    /* Backward of a TENSOR stage: given in, out (the forward output) and dout, writes din
     * (NULL when !needs_input_grad) and ADDS this interval's weight gradients into
     * dparams (param_spec order, same shapes). Tasks may recompute forward values
     * (rematerialisation) rather than keep them. */
    bv_status (*tensor_backward)(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                 const float *in, const float *out, const float *dout,
                                 float *din, float *const *dparams, bv_error *err);
    /* The loss task on the last stage's rows (logits): counted rows are those with
     * mask[i] set and label >= 0. If dout != NULL it receives grad_scale * dLoss/dlogits. */
    bv_status (*loss)(bv_model *m, const bv_task_ctx *ctx, const float *logits,
                      const int32_t *labels, const uint8_t *mask, float grad_scale,
                      float *dout, bv_xent_result *res, bv_error *err);

    /* ABI 1.1, EDGE stages (NULL for models without them). a holds the interval's
     * in-edges in A + I: ctx->rows rows (row i is vertex ctx->row_begin + i), columns
     * are global source vertices, a->rowptr[0] == 0. src is every vertex's window
     * (num_nodes x in_dim), dst the interval's rows' windows (rows x in_dim); out is
     * a->nnz x out_dim. */
    bv_status (*edge_forward)(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                              const bv_csr *a, const float *src, const float *dst, float *out,
                              bv_error *err);
    /* ADDS the gradients of src (num_nodes x in_dim) and dst (rows x in_dim), both zeroed
     * by the caller, and of the weights into dparams. */
    bv_status (*edge_backward)(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                               const bv_csr *a, const float *src, const float *dst,
                               const float *out, const float *dout, float *dsrc, float *ddst,
                               float *const *dparams, bv_error *err);

    /* ABI 1.1, optional: checks that the options fit together (e.g. hidden divisible by
     * heads) before anything runs; reports each problem at its option's position
     * (opts->values[i].pos) with bv_diag_add. Returns BV_ERR_INVALID if any. */
    bv_status (*validate)(const bv_opts *opts, bv_diag *diag);

    /* ABI 1.4: sizeof(bv_stage) as the plugin was compiled, so bv_stage can grow at its
     * end; the core copies each stage() result into its own layout, zero-filling the
     * fields the plugin predates. 0 means the ABI 1.3 size. */
    size_t stage_size;
} bv_model_ops;

#ifdef __cplusplus
}
#endif
#endif
