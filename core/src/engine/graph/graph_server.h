/* The graph server role's state and the pieces of a pass that both ways of running one
 * share: stage by stage (graph_server.c) and interval by interval under a task gate
 * (graph_pipeline.c). Internal to core/src/engine/graph. */
#ifndef BIVOUAC_GRAPH_SERVER_H
#define BIVOUAC_GRAPH_SERVER_H

#include "engine_graph_internal.h"

typedef struct graph_server {
    bv_graph_engine *e;
    const bv_transport_ops *t;
    bv_endpoint *inbox, *to_coord;
    bv_endpoint *to_tw[BV_MAX_TENSOR_WORKERS];
    bv_compute *compute;
    float **act;  /* per stage output: num_nodes x out_dim (EDGE: nnz(A + I) x out_dim) */
    float **dact; /* per stage d(output), accumulated over the stages that read it */
    float **spare_grad; /* per stage: its dropped gradient array, kept for the next pass
                           (bv_gs_drop_grad) */
    float *scratch; /* num_nodes x widest vertex array, for ∇GA */
    /* Edge passes (bv_gs_edge_pass): every vertex's attention inputs, packed, and with
     * shared arrays the slots of partial d(inputs) the backward tasks write; edge_width
     * floats per vertex, the widest edge stage's in_dim. */
    float *edge_input, *edge_partials;
    float *edge_acc; /* this server's own: a ∇AE pass's sum of partials (edge_window_alone) */
    int64_t edge_width;
    float grad_scale;
    bool *input_sent; /* per interval: its static input is at its tensor worker */
    bool *graph_sent; /* per interval: its edges are at its tensor worker */
    bool keep_features; /* tensor workers keep the features (sparse, or roles as processes) */
    /* The stage array that holds the unweighted gather over the features (a model that
     * gathers first: GCN's order: gather_first), once made: its input never changes, so
     * its rows are kept (NULL: none yet; an evaluation's own arrays under a task gate are
     * other arrays, bv_gs_pipeline_swap_arrays) */
    const float *features_gathered;
    /* Several graph servers (e->ngs > 1): outboxes to the others, the boundary rows that
     * came before this server asked for them, and what this pass sent. */
    bv_endpoint *to_peer[BV_MAX_GRAPH_SERVERS];
    bv_role_msg *early;
    size_t nearly, cap_early;
    int64_t ghost_bytes;
    size_t *seg_offset; /* e->shm: each shared array's place in e->segment */
    int32_t *ps_of;     /* per interval: its parameter server this epoch (task hdr.ps) */
    /* A task gate (cfg.gate_ops; graph_pipeline.c): this server's own instance of the
     * strategy, and the pass's state kept between epochs. */
    bv_resilience *gate;
    struct bv_gs_pipeline *pipeline;
    bool private_arrays; /* gs->act are an evaluation's own: tasks copy them, no references */
    /* Tensor tasks on serverless functions (cfg.functions): the controller that invokes
     * them (lambda_pool.h); NULL: the run's tensor workers take them. */
    struct bv_lambda_pool *pool;
    /* With functions: outboxes to the parameter servers, for the gradients that come with
     * the workers' results (graph_server.c, forward_grads). */
    bv_endpoint *to_ps[BV_MAX_PARAM_SERVERS];
} graph_server;

/* One kind of task over every interval of a stage: how to send interval i, and what to
 * do with a result (which the handler releases). */
typedef struct task_kind {
    uint16_t result_type;
    bv_status (*send)(graph_server *gs, size_t s, const bv_task_hdr *epoch, int i, void *ctx,
                      bv_error *err);
    bv_status (*take)(graph_server *gs, size_t s, bv_role_msg *m, void *ctx, bv_error *err);
    /* Whether interval i's task may go out now (NULL: always); false only while an
     * earlier task holds what it needs. */
    bool (*ready)(const graph_server *gs, int i, const void *ctx);
} task_kind;

/* Tasks of one stage in flight at once, per tensor worker. */
#define BV_GS_TASKS_PER_WORKER 2
/* Slots of partial d(inputs) an edge pass's backward tasks write with shared arrays: one
 * per task in flight. */
static inline int bv_gs_edge_slots(const bv_graph_engine *e)
{
    return BV_GS_TASKS_PER_WORKER * e->cfg.tensor_workers;
}

typedef struct loss_ctx {
    double *per; /* 9 stats per interval */
} loss_ctx;

/* Sends interval i's task of this kind; what gs_run_tasks and the pipeline send. */
extern const task_kind bv_gs_apply_vertex, bv_gs_apply_vertex_backward, bv_gs_loss_task,
    bv_gs_apply_edge, bv_gs_apply_edge_backward;

/* The outbox of interval i's tensor worker (interval i always goes to worker i mod T). */
bv_endpoint *bv_gs_worker_of(const graph_server *gs, int i);
/* AE or ∇AE over every interval (an edge pass packs every vertex's inputs once). */
bv_status bv_gs_edge_pass(graph_server *gs, size_t s, const bv_task_hdr *epoch,
                          const task_kind *kind, bv_error *err);
/* GA over rows [r0, r1); ∇GA of an unweighted gather over rows [r0, r1); ∇GA over every
 * row (the only form a weighted gather has). */
void bv_gs_gather_rows(graph_server *gs, size_t s, int64_t r0, int64_t r1);
void bv_gs_gather_backward_rows(graph_server *gs, size_t s, int64_t r0, int64_t r1);
void bv_gs_gather_backward(graph_server *gs, size_t s);
/* Several graph servers: the boundary rows of vertex array v (grads: of its gradient)
 * sent to the parts that keep them as ghosts, and theirs taken in (docs/cluster.md). */
bv_status bv_gs_exchange(graph_server *gs, const bv_task_hdr *cmd, int v, bool grads,
                         bv_error *err);
/* Whether GATHER or EDGE stage s is the first to read its input across edges (its ghost
 * rows are exchanged before it). */
bool bv_gs_first_reader(const bv_graph_engine *e, size_t s);
/* Keeps boundary rows that came before this server asked for them; takes m over. */
bv_status bv_gs_keep_early(graph_server *gs, bv_role_msg *m, bv_error *err);
/* Bytes of stage s's array (and of its gradient): a row per vertex, per edge of A + I for
 * an EDGE stage. */
size_t bv_gs_stage_bytes(const graph_server *gs, size_t s);
/* A pass's loss stats (9 per interval in lc) summed in interval order: the same sum
 * whatever order the results came in. */
void bv_gs_sum_losses(const graph_server *gs, const loss_ctx *lc, double stats[9]);
/* The weight-gradient messages a training pass sends its parameter servers: one per
 * interval of every stage with weights (tensor and edge stages). */
int64_t bv_gs_grad_messages(const graph_server *gs);
/* Gradient arrays: made zeroed when first needed, dropped when used. */
bv_status bv_gs_ensure_grad(graph_server *gs, int s, bv_error *err);
void bv_gs_drop_grad(graph_server *gs, size_t s);
/* Before stage s's backward: the arrays it adds into. */
bv_status bv_gs_grads_for(graph_server *gs, size_t s, bv_error *err);

/* ---- graph_pipeline.c ---- */
/* A training pass interval by interval, every task asked of gs->gate first; reply gets
 * what gs_epoch's gets. */
bv_status bv_gs_pipeline_epoch(graph_server *gs, const bv_task_hdr *cmd, bv_task_hdr *reply,
                               bv_error *err);
/* The last gated pass's figures (BV_PIPE_FIGURES of them), and per stage the most
 * intervals at it at once: what EPOCH_DONE carries. */
void bv_gs_pipeline_figures(const graph_server *gs, const double **figures,
                            const double **stage_counts);
/* After a pass that wrote every row (stage by stage): the rows' epoch. */
void bv_gs_pipeline_wrote_all(graph_server *gs, int64_t epoch);
void bv_gs_pipeline_free(graph_server *gs);
/* Between passes, tasks of intervals that ran ahead may still be in flight: whether m is
 * one's result, taking it in, and waiting for all of them. */
bool bv_gs_pipeline_is_result(const graph_server *gs, const bv_role_msg *m);
bv_status bv_gs_pipeline_absorb(graph_server *gs, bv_role_msg *m, bv_error *err);
bv_status bv_gs_pipeline_drain(graph_server *gs, bv_error *err);
/* Whether an interval is in the epoch after the last pass's: an evaluation now must not
 * touch its rows, and runs on arrays of its own, which this swaps with gs->act (and back:
 * it flips gs->private_arrays). */
bool bv_gs_pipeline_ahead(const graph_server *gs);
bv_status bv_gs_pipeline_swap_arrays(graph_server *gs, bv_error *err);

#endif
