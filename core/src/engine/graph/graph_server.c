/* Graph server role: owns the graph, the features and every stage's vertex arrays. It
 * runs Gather (and ∇Gather over the reversed edges) itself, and hands ApplyVertex and the
 * loss to tensor workers as tasks over vertex intervals, scattering their results into
 * its arrays (Dorylus §3: GA and SC on graph servers, AV and AE on Lambdas). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "graph_server.h"
#include "grow.h"
#include "lambda_pool.h"
#include "role_loop.h"
#include "sparse_rows.h"

static int64_t stage_rows(const graph_server *gs, size_t s)
{
    const bv_graph_engine *e = gs->e;
    return e->stages[s]->kind == BV_STAGE_EDGE ? e->adj_loops->nnz : e->cfg.data->num_nodes;
}

/* Input rows of stage s for interval h (*in, *bytes), or none if the worker already keeps
 * them. A function worker keeps nothing between invocations: each of its tasks carries
 * them, and is marked kept so that it takes sparse features as the sparse rows they are,
 * as a tensor worker does. Features the dataset keeps sparse go as their rows packed
 * (sparse_rows.h; *to_free, the caller frees it once sent), or, to a worker thread of
 * this process, as nothing: it views the dataset's rows itself. */
static bv_status task_input(graph_server *gs, size_t s, bv_task_hdr *h, const void **in,
                            size_t *bytes, void **to_free, bv_error *err)
{
    const bv_stage *st = gs->e->stages[s];
    int v = gs->e->vin[s];
    bool sparse = v < 0 && bv_graph_features_sparse(gs->e->cfg.data);
    *in = v >= 0   ? gs->act[v] + h->row_begin * st->in_dim
          : sparse ? NULL
                   : gs->e->cfg.data->features + h->row_begin * st->in_dim;
    *bytes = (size_t)(h->rows * st->in_dim) * sizeof(float);
    *to_free = NULL;
    if (v >= 0 || !gs->keep_features)
        return BV_OK;
    if (gs->input_sent[h->interval] && !gs->pool) {
        h->flags |= BV_TASK_CACHED_INPUT;
        *bytes = 0;
        *in = NULL;
        return BV_OK;
    }
    h->flags |= BV_TASK_KEEP_INPUT;
    gs->input_sent[h->interval] = true;
    if (!sparse)
        return BV_OK;
    h->flags |= BV_TASK_SPARSE_INPUT;
    *bytes = 0;
    if (!gs->e->serving && !gs->pool)
        return BV_OK;
    *in = *to_free = bv_sparse_rows_pack(&gs->e->cfg.data->features_csr, h->row_begin, h->rows,
                                         bytes);
    if (!*in)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory packing %lld rows of sparse "
                            "features", (long long)h->rows);
    return BV_OK;
}

/* The shared array (bv_array_ref) holding stage s's input (-1: none, sparse features). */
static int64_t stage_input_array(const graph_server *gs, size_t s)
{
    int v = gs->e->vin[s];
    return v >= 0                                       ? bv_shared_act((size_t)v)
           : bv_graph_features_sparse(gs->e->cfg.data) ? -1
                                                       : BV_SHARED_FEATURES;
}

static const float *stage_input(const graph_server *gs, size_t s)
{
    int v = gs->e->vin[s];
    return v < 0 ? gs->e->cfg.data->features : gs->act[v];
}

/* Where the gradient of stage s's input accumulates (NULL: the features need none). */
static float *stage_input_grad(const graph_server *gs, size_t s)
{
    int v = gs->e->vin[s];
    return v < 0 ? NULL : gs->dact[v];
}

/* x[0 .. n) = 0 where the server's arrays lie (bv_engine_movers). */
static void gs_zero(graph_server *gs, float *x, int64_t n)
{
    bv_zero(bv_engine_movers(gs->e), gs->compute, n, x);
}

/* The window [in_offset, in_offset + in_dim) of rows [r0, r0 + rows) of stage s's input,
 * packed. */
static void pack_window(graph_server *gs, size_t s, int64_t r0, int64_t rows, float *out)
{
    const bv_stage *st = gs->e->stages[s];
    int64_t w = gs->e->vin_width[s];
    bv_copy_rows(bv_engine_movers(gs->e), gs->compute, rows, st->in_dim,
                 stage_input(gs, s) + r0 * w + st->in_offset, w, out, st->in_dim, false);
}

/* Adds packed window gradients back into rows [r0, r0 + rows) of the input's gradient. */
static void unpack_window_add(graph_server *gs, size_t s, int64_t r0, int64_t rows,
                              const float *d)
{
    const bv_stage *st = gs->e->stages[s];
    float *din = stage_input_grad(gs, s);
    int64_t w = gs->e->vin_width[s];
    if (din)
        bv_copy_rows(bv_engine_movers(gs->e), gs->compute, rows, st->in_dim, d, st->in_dim,
                     din + r0 * w + st->in_offset, w, true);
}

/* The interval's edges as a CSR slice: rowptr rebased to 0, then colidx. */
static size_t graph_slice_bytes(const graph_server *gs, int64_t r0, int64_t rows)
{
    const bv_csr *a = gs->e->adj_loops;
    int64_t nnz = a->rowptr[r0 + rows] - a->rowptr[r0];
    return (size_t)(rows + 1) * sizeof(int64_t) + (size_t)nnz * sizeof(int32_t);
}

static void pack_graph_slice(const graph_server *gs, int64_t r0, int64_t rows, uint8_t *out)
{
    const bv_csr *a = gs->e->adj_loops;
    int64_t base = a->rowptr[r0];
    int64_t *rp = (int64_t *)(void *)out;
    for (int64_t i = 0; i <= rows; i++)
        rp[i] = a->rowptr[r0 + i] - base;
    memcpy(out + (size_t)(rows + 1) * sizeof(int64_t), a->colidx + base,
           (size_t)(a->rowptr[r0 + rows] - base) * sizeof(int32_t));
}

static int64_t interval_rows(const bv_graph_engine *e, int i)
{
    return e->interval_begin[i + 1] - e->interval_begin[i];
}

static bool interval_matches(const bv_graph_engine *e, const bv_task_hdr *h, int32_t stage)
{
    return h->stage == stage && h->interval >= 0 && h->interval < e->cfg.intervals &&
           h->row_begin == e->interval_begin[h->interval] &&
           h->rows == interval_rows(e, h->interval);
}

static bv_task_hdr interval_hdr(const graph_server *gs, size_t s, const bv_task_hdr *epoch,
                                int i)
{
    const bv_graph_engine *e = gs->e;
    bv_task_hdr h = *epoch;
    h.stage = (int32_t)s;
    h.interval = i;
    h.reply_to = e->gs_index; /* the worker answers this graph server */
    h.ps = gs->ps_of[i];
    h.row_begin = e->interval_begin[i];
    h.rows = interval_rows(e, i);
    if (e->adj_loops)
        h.edge_begin = e->adj_loops->rowptr[h.row_begin];
    return h;
}

bv_status bv_gs_keep_early(graph_server *gs, bv_role_msg *m, bv_error *err)
{
    if (!bv_grow((void **)&gs->early, &gs->cap_early, gs->nearly, sizeof *gs->early, 8)) {
        bv_role_release(gs->t, m);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for boundary rows");
    }
    gs->early[gs->nearly++] = *m;
    memset(m, 0, sizeof *m);
    return BV_OK;
}

/* Receives until a message of `type`; boundary rows from another graph server that is
 * ahead are kept for when this one gets there (bv_gs_exchange). */
static bv_status gs_wait(graph_server *gs, uint16_t type, bv_role_msg *m, bv_error *err)
{
    for (;;) {
        bv_status st = gs->pool ? bv_lambda_pool_recv(gs->pool, m, err)
                                : bv_role_recv_valid(gs->t, gs->inbox, m, BV_TIMEOUT_FOREVER,
                                                     &gs->e->frames_dropped, err);
        if (st != BV_OK || m->wire.type == type)
            return st;
        if (m->wire.type == BV_MSG_GHOSTS && gs->e->ngs > 1) {
            if ((st = bv_gs_keep_early(gs, m, err)) != BV_OK)
                return st;
            continue;
        }
        if (m->wire.type == BV_MSG_ERROR) {
            bv_error_set(err, BV_ERR_INTERNAL, "%.*s", (int)m->hdr.na, (const char *)m->a);
            bv_role_release(gs->t, m);
            return BV_ERR_INTERNAL;
        }
        bv_log(BV_LOG_WARN, "graph server: ignoring message type %u while waiting for %u",
               m->wire.type, type);
        bv_role_release(gs->t, m);
    }
}

/* Sends the intervals' tasks with at most BV_GS_TASKS_PER_WORKER per tensor worker in
 * flight, so queued messages never hold more than a few intervals' data (a 1M-vertex
 * graph's ApplyEdge tasks each carry every vertex's attention inputs when they travel
 * in messages), and a task only once its kind is ready for it. On functions, every task
 * goes to the controller at once: it invokes as many as it has workers for and queues the
 * rest. */
static bv_status gs_run_tasks(graph_server *gs, size_t s, const bv_task_hdr *epoch,
                              const task_kind *kind, void *ctx, bv_error *err)
{
    int n = gs->e->cfg.intervals, sent = 0, taken = 0;
    int window = gs->pool ? n : BV_GS_TASKS_PER_WORKER * gs->e->cfg.tensor_workers;
    bv_status rc = BV_OK;
    while (rc == BV_OK && taken < n) {
        while (rc == BV_OK && sent < n && sent - taken < window &&
               (!kind->ready || kind->ready(gs, sent, ctx)))
            rc = kind->send(gs, s, epoch, sent++, ctx, err);
        if (rc == BV_OK && sent == taken) /* nothing in flight: no result can free a slot */
            rc = bv_error_set(err, BV_ERR_INTERNAL, "graph server: task %d of %s cannot go "
                              "out", sent, gs->e->stages[s]->name);
        bv_role_msg m;
        if (rc == BV_OK)
            rc = gs_wait(gs, kind->result_type, &m, err);
        if (rc == BV_OK)
            rc = kind->take(gs, s, &m, ctx, err);
        taken++;
    }
    return rc;
}

bv_endpoint *bv_gs_worker_of(const graph_server *gs, int i)
{
    return gs->to_tw[i % gs->e->cfg.tensor_workers];
}

/* One array of a task: bytes at p, inside shared array `array`. */
typedef struct task_array {
    const void *p;
    size_t bytes;
    int64_t array;
} task_array;

static const task_array no_array = {NULL, 0, -1};

/* The reference to bytes [p, p + bytes) of shared array `array`. */
static bv_array_ref shared_ref(const graph_server *gs, int64_t array, const void *p,
                               size_t bytes)
{
    const char *base = gs->e->shared[array].base;
    return (bv_array_ref){array, (uint64_t)((const char *)p - base), bytes};
}

/* Whether a task names array `array` by reference: with shared arrays, any of them in one
 * process; between processes only the stage and edge arrays of the segment (the dataset's
 * are the graph server's part of it, which its workers do not have: they are sent). Never
 * the stage arrays of an evaluation's own (bv_gs_pipeline_swap_arrays): they are not
 * shared. */
static bool by_reference(const graph_server *gs, int64_t array)
{
    const bv_graph_engine *e = gs->e;
    if (gs->private_arrays && array >= BV_SHARED_STAGES && array < bv_shared_edge_input(e))
        return false;
    return e->cfg.share_arrays && array >= (e->shm ? BV_SHARED_STAGES : 0);
}

/* Sends interval i's task. With shared arrays each array travels as a reference to its
 * window (BV_TASK_REF_*), otherwise as a copy of its bytes. */
static bv_status gs_send_task(graph_server *gs, int i, uint16_t type, bv_task_hdr *h,
                              task_array a, task_array b, task_array c, bv_error *err)
{
    static const int32_t flag[3] = {BV_TASK_REF_A, BV_TASK_REF_B, BV_TASK_REF_C};
    task_array arr[3] = {a, b, c};
    bv_array_ref ref[3];
    const void *p[3];
    size_t n[3];
    for (int k = 0; k < 3; k++) {
        p[k] = arr[k].p;
        n[k] = arr[k].bytes;
        if (arr[k].p && by_reference(gs, arr[k].array)) {
            ref[k] = shared_ref(gs, arr[k].array, arr[k].p, arr[k].bytes);
            p[k] = &ref[k];
            n[k] = sizeof ref[k];
            h->flags |= flag[k];
        }
    }
    if (gs->pool)
        return bv_lambda_pool_submit(gs->pool, type, h, p[0], n[0], p[1], n[1], p[2], n[2], err);
    return bv_role_send(gs->t, bv_gs_worker_of(gs, i), type, BV_ROLE_GS, h, p[0], n[0], p[1],
                        n[1], p[2], n[2], err);
}

/* With shared arrays, asks for the task's result to be written (forward, loss) or added
 * (backward) into rows of one of them instead of being sent back. */
static void reply_in_place(const graph_server *gs, bv_task_hdr *h, int64_t array,
                           const float *rows, size_t bytes)
{
    if (!gs->e->cfg.share_arrays || !rows)
        return;
    h->flags |= BV_TASK_REPLY_IN_PLACE;
    h->reply = shared_ref(gs, array, rows, bytes);
}

/* ---- AV: ApplyVertex ---- */

static bv_status av_send(graph_server *gs, size_t s, const bv_task_hdr *epoch, int i,
                         void *ctx, bv_error *err)
{
    const bv_stage *st = gs->e->stages[s];
    bv_task_hdr h = interval_hdr(gs, s, epoch, i);
    size_t in_bytes;
    const void *in;
    void *packed;
    bv_status rc = task_input(gs, s, &h, &in, &in_bytes, &packed, err);
    if (rc != BV_OK)
        return rc;
    (void)ctx;
    /* Under a task gate the rows come back in the reply and are scattered on this thread:
     * a gather that reads them before may then read the rows of an earlier pass, never
     * rows a worker is writing (graph_pipeline.c). */
    if (!gs->gate)
        reply_in_place(gs, &h, bv_shared_act(s), gs->act[s] + h.row_begin * st->out_dim,
                       (size_t)(h.rows * st->out_dim) * sizeof(float));
    if (gs->pool && gs->e->cfg.fn_stream) /* the worker starts on the first half */
        h.flags |= BV_TASK_STREAM;
    rc = gs_send_task(gs, i, BV_MSG_FWD_TASK, &h,
                      (task_array){in, in_bytes, stage_input_array(gs, s)}, no_array, no_array,
                      err);
    free(packed);
    return rc;
}

static bv_status av_take(graph_server *gs, size_t s, bv_role_msg *m, void *ctx, bv_error *err)
{
    const bv_stage *st = gs->e->stages[s];
    bv_status rc = BV_OK;
    bool in_place = gs->e->cfg.share_arrays && !gs->gate; /* as av_send asked */
    uint64_t want = in_place ? 0 : (uint64_t)(m->hdr.rows * st->out_dim) * sizeof(float);
    if (!interval_matches(gs->e, &m->hdr, (int32_t)s) || m->hdr.na != want)
        rc = bv_error_set(err, BV_ERR_CORRUPT, "bad result for %s", st->name);
    else if (want) /* Scatter: the rows land where the next stage reads them */
        memcpy(gs->act[s] + m->hdr.row_begin * st->out_dim, m->a, m->hdr.na);
    bv_role_release(gs->t, m);
    (void)ctx;
    return rc;
}

const task_kind bv_gs_apply_vertex = {BV_MSG_FWD_RESULT, av_send, av_take, NULL};

/* ---- the loss ---- */

static bv_status loss_send(graph_server *gs, size_t s, const bv_task_hdr *epoch, int i,
                           void *ctx, bv_error *err)
{
    const bv_graph_dataset *d = gs->e->cfg.data;
    int64_t k = gs->e->stages[s]->out_dim;
    bv_task_hdr h = interval_hdr(gs, s, epoch, i);
    h.grad_scale = gs->grad_scale;
    size_t bytes = (size_t)(h.rows * k) * sizeof(float);
    (void)ctx;
    if (h.training)
        reply_in_place(gs, &h, bv_shared_dact(s), gs->dact[s] + h.row_begin * k, bytes);
    return gs_send_task(gs, i, BV_MSG_LOSS_TASK, &h,
                        (task_array){gs->act[s] + h.row_begin * k, bytes, bv_shared_act(s)},
                        (task_array){d->labels + h.row_begin, (size_t)h.rows * sizeof(int32_t),
                                     BV_SHARED_LABELS},
                        (task_array){d->split + h.row_begin, (size_t)h.rows, BV_SHARED_SPLIT},
                        err);
}

static bv_status loss_take(graph_server *gs, size_t s, bv_role_msg *m, void *ctx, bv_error *err)
{
    loss_ctx *lc = ctx;
    int64_t k = gs->e->stages[s]->out_dim;
    size_t want = m->hdr.training && !gs->e->cfg.share_arrays
                      ? (size_t)(m->hdr.rows * k) * sizeof(float) : 0;
    bv_status rc = BV_OK;
    if (!interval_matches(gs->e, &m->hdr, (int32_t)s) || m->hdr.na != want) {
        rc = bv_error_set(err, BV_ERR_CORRUPT, "bad loss result");
    } else {
        memcpy(lc->per + 9 * m->hdr.interval, m->hdr.stats, sizeof m->hdr.stats);
        if (want)
            memcpy(gs->dact[s] + m->hdr.row_begin * k, m->a, want);
    }
    bv_role_release(gs->t, m);
    return rc;
}

const task_kind bv_gs_loss_task = {BV_MSG_LOSS_RESULT, loss_send, loss_take, NULL};

/* The loss's figures of the pass (stats), through the loss tasks or, fused, through the
 * tasks that also run the last stage forward and, in training, backward. */
static bv_status gs_loss(graph_server *gs, const bv_task_hdr *epoch, const task_kind *kind,
                         double stats[9], bv_error *err)
{
    bv_graph_engine *e = gs->e;
    loss_ctx lc = {calloc((size_t)e->cfg.intervals * 9, sizeof(double))};
    if (!lc.per)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_status rc = gs_run_tasks(gs, e->nstages - 1, epoch, kind, &lc, err);
    bv_gs_sum_losses(gs, &lc, stats);
    free(lc.per);
    return rc;
}

void bv_gs_sum_losses(const graph_server *gs, const loss_ctx *lc, double stats[9])
{
    for (int j = 0; j < 9; j++)
        stats[j] = 0;
    for (int i = 0; i < gs->e->cfg.intervals; i++)
        for (int j = 0; j < 9; j++)
            stats[j] += lc->per[9 * i + j];
}

int64_t bv_gs_grad_messages(const graph_server *gs)
{
    const bv_graph_engine *e = gs->e;
    int64_t stages = 0;
    for (size_t s = 0; s < e->nstages; s++)
        stages += e->stages[s]->kind != BV_STAGE_GATHER;
    return stages * e->cfg.intervals;
}

/* ---- ∇AV ---- */

/* A backward (or fused) task of tensor stage s gives d(input) rows: with shared arrays the
 * worker adds them into the input's gradient itself. */
static void din_in_place(const graph_server *gs, size_t s, bv_task_hdr *h)
{
    const bv_stage *st = gs->e->stages[s];
    float *din = stage_input_grad(gs, s);
    if (st->needs_input_grad && din)
        reply_in_place(gs, h, bv_shared_dact((size_t)gs->e->vin[s]),
                       din + h->row_begin * st->in_dim,
                       (size_t)(h->rows * st->in_dim) * sizeof(float));
}

/* The bytes of d(input) rows result m must carry: none where the worker added them in
 * place or the stage gives none. */
static size_t din_bytes(const graph_server *gs, size_t s, const bv_role_msg *m)
{
    const bv_stage *st = gs->e->stages[s];
    bool in_place = gs->e->cfg.share_arrays && stage_input_grad(gs, s);
    return st->needs_input_grad && !in_place
               ? (size_t)(m->hdr.rows * st->in_dim) * sizeof(float) : 0;
}

/* Adds the d(input) rows result m carries into the input's gradient: rows of one interval,
 * which no other task adds to. */
static void add_din(graph_server *gs, size_t s, const bv_role_msg *m)
{
    const bv_stage *st = gs->e->stages[s];
    float *din = stage_input_grad(gs, s);
    if (din && din_bytes(gs, s, m))
        gs->e->cfg.compute_ops->axpy(gs->compute, m->hdr.rows * st->in_dim, 1.0f,
                                     (const float *)m->a, din + m->hdr.row_begin * st->in_dim);
}

static bv_status avb_send(graph_server *gs, size_t s, const bv_task_hdr *epoch, int i,
                          void *ctx, bv_error *err)
{
    const bv_stage *st = gs->e->stages[s];
    bv_task_hdr h = interval_hdr(gs, s, epoch, i);
    size_t out_bytes = (size_t)(h.rows * st->out_dim) * sizeof(float), in_bytes;
    const void *in;
    void *packed;
    bv_status rc = task_input(gs, s, &h, &in, &in_bytes, &packed, err);
    if (rc != BV_OK)
        return rc;
    (void)ctx;
    din_in_place(gs, s, &h);
    bool remat = gs->pool && gs->e->cfg.fn_remat; /* the worker computes the output again */
    if (remat)
        h.flags |= BV_TASK_REMAT;
    rc = gs_send_task(gs, i, BV_MSG_BWD_TASK, &h,
                      (task_array){in, in_bytes, stage_input_array(gs, s)},
                      remat ? no_array
                            : (task_array){gs->act[s] + h.row_begin * st->out_dim, out_bytes,
                                           bv_shared_act(s)},
                      (task_array){gs->dact[s] + h.row_begin * st->out_dim, out_bytes,
                                   bv_shared_dact(s)},
                      err);
    free(packed);
    return rc;
}

/* A function worker's backward result carries its weight gradients (array c): sent on to
 * the task's parameter server with the task's first result, by this server, which the
 * platform does not kill (role_msg.h, BV_MSG_BWD_RESULT). Other results carry none. */
static bv_status forward_grads(graph_server *gs, const bv_role_msg *m, bv_error *err)
{
    const bv_graph_engine *e = gs->e;
    size_t want = gs->pool ? e->param_floats * sizeof(float) : 0;
    if (m->hdr.nc != want || m->hdr.ps < 0 || m->hdr.ps >= e->nps)
        return bv_error_set(err, BV_ERR_CORRUPT, "a backward result with %llu bytes of "
                            "gradients for parameter server %d, not %zu for one of %d",
                            (unsigned long long)m->hdr.nc, m->hdr.ps, want, e->nps);
    if (!want)
        return BV_OK;
    return bv_role_send(gs->t, gs->to_ps[m->hdr.ps], BV_MSG_GRADS, BV_ROLE_GS, &m->hdr, m->c,
                        want, NULL, 0, NULL, 0, err);
}

static bv_status avb_take(graph_server *gs, size_t s, bv_role_msg *m, void *ctx, bv_error *err)
{
    bv_status rc = BV_OK;
    if (!interval_matches(gs->e, &m->hdr, (int32_t)s) || m->hdr.na != din_bytes(gs, s, m))
        rc = bv_error_set(err, BV_ERR_CORRUPT, "bad backward result for %s",
                          gs->e->stages[s]->name);
    else
        rc = forward_grads(gs, m, err);
    if (rc == BV_OK)
        add_din(gs, s, m);
    bv_role_release(gs->t, m);
    (void)ctx;
    return rc;
}

const task_kind bv_gs_apply_vertex_backward = {BV_MSG_BWD_RESULT, avb_send, avb_take, NULL};

/* ---- task fusion: the last stage's AV, the loss and its ∇AV in one task ---- */

/* Whether this pass fuses them (compute: {plugin: lambda, fuse: true}; the engine checked
 * that the model ends with a tensor stage). */
static bool gs_fuses(const graph_server *gs)
{
    return gs->pool && gs->e->cfg.fn_fuse;
}

static bv_status fused_send(graph_server *gs, size_t s, const bv_task_hdr *epoch, int i,
                            void *ctx, bv_error *err)
{
    const bv_graph_dataset *d = gs->e->cfg.data;
    bv_task_hdr h = interval_hdr(gs, s, epoch, i);
    h.grad_scale = gs->grad_scale;
    size_t in_bytes;
    const void *in;
    void *packed;
    bv_status rc = task_input(gs, s, &h, &in, &in_bytes, &packed, err);
    if (rc != BV_OK)
        return rc;
    (void)ctx;
    if (h.training)
        din_in_place(gs, s, &h);
    rc = gs_send_task(gs, i, BV_MSG_FUSED_TASK, &h,
                      (task_array){in, in_bytes, stage_input_array(gs, s)},
                      (task_array){d->labels + h.row_begin, (size_t)h.rows * sizeof(int32_t),
                                   BV_SHARED_LABELS},
                      (task_array){d->split + h.row_begin, (size_t)h.rows, BV_SHARED_SPLIT}, err);
    free(packed);
    return rc;
}

static bv_status fused_take(graph_server *gs, size_t s, bv_role_msg *m, void *ctx,
                            bv_error *err)
{
    loss_ctx *lc = ctx;
    bool training = m->hdr.training;
    bv_status rc = BV_OK;
    if (!interval_matches(gs->e, &m->hdr, (int32_t)s) ||
        m->hdr.na != (training ? din_bytes(gs, s, m) : 0) || (!training && m->hdr.nc != 0))
        rc = bv_error_set(err, BV_ERR_CORRUPT, "bad fused result for %s",
                          gs->e->stages[s]->name);
    else if (training)
        rc = forward_grads(gs, m, err);
    if (rc == BV_OK) {
        memcpy(lc->per + 9 * m->hdr.interval, m->hdr.stats, sizeof m->hdr.stats);
        if (training)
            add_din(gs, s, m);
    }
    bv_role_release(gs->t, m);
    return rc;
}

static const task_kind gs_fused_task = {BV_MSG_FUSED_RESULT, fused_send, fused_take, NULL};

/* ---- AE: ApplyEdge ---- */

/* With shared arrays (edge_ctx.refs) an edge task reads every vertex's inputs in place in
 * gs->edge_input, a forward task writes its values into the stage's array, and a backward
 * task reads the values and their gradient there and writes its partial d(inputs) of
 * every vertex into a slot of gs->edge_partials, one per task that may be in flight
 * (bv_gs_edge_slots); without, all of it travels in the messages. */
typedef struct edge_ctx {
    bool refs;
    float *acc; /* ∇AE: the partials' sum, added into the window once (edge_window_alone);
                   NULL: each partial is added into it */
    bv_role_msg *held; /* ∇AE results that arrived before their turn */
    bool *have;
    bool *busy; /* per slot: a ∇AE task writes it, or its partial waits to be added */
    int next;
} edge_ctx;

static int64_t edge_rows(const graph_server *gs)
{
    return gs->e->cfg.data->num_nodes;
}

static float *edge_partial(const graph_server *gs, int slot)
{
    return gs->edge_partials + (size_t)slot * (size_t)(edge_rows(gs) * gs->edge_width);
}

/* Sends an edge task: every vertex's attention inputs (a), the interval's own rows of
 * them (b), and the bytes c. */
static bv_status edge_task_send(graph_server *gs, size_t s, int i, uint16_t type,
                                bv_task_hdr *h, const void *c, size_t nc, bv_error *err)
{
    int64_t in_dim = gs->e->stages[s]->in_dim, input = bv_shared_edge_input(gs->e);
    size_t na = (size_t)(edge_rows(gs) * in_dim) * sizeof(float);
    size_t nb = (size_t)(h->rows * in_dim) * sizeof(float);
    return gs_send_task(gs, i, type, h, (task_array){gs->edge_input, na, input},
                        (task_array){gs->edge_input + h->row_begin * in_dim, nb, input},
                        (task_array){c, nc, -1}, err);
}

/* The interval's edges for an edge task, at the front of its array c (extra bytes after
 * them), unless its worker keeps them: a tensor worker keeps them from its first forward
 * task on; a function worker keeps nothing between invocations. */
static bv_status graph_slice_for(graph_server *gs, bv_task_hdr *h, int i, size_t extra,
                                 uint8_t **c, size_t *nc, bv_error *err)
{
    *nc = 0;
    *c = NULL;
    if (gs->graph_sent[i] && !gs->pool) {
        h->flags |= BV_TASK_CACHED_GRAPH;
        if (!(*c = malloc(extra + 1)))
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for an edge task");
        *nc = extra;
        return BV_OK;
    }
    size_t gbytes = graph_slice_bytes(gs, h->row_begin, h->rows);
    if (!(*c = malloc(gbytes + extra + 1)))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for an edge slice");
    pack_graph_slice(gs, h->row_begin, h->rows, *c);
    h->flags |= BV_TASK_KEEP_GRAPH;
    gs->graph_sent[i] = true;
    *nc = gbytes + extra;
    return BV_OK;
}

/* The first edge of interval h's rows and how many there are; the window of them in an
 * edge stage's array. */
static int64_t interval_edges(const graph_server *gs, const bv_task_hdr *h, int64_t *e0)
{
    const bv_csr *a = gs->e->adj_loops;
    *e0 = a->rowptr[h->row_begin];
    return a->rowptr[h->row_begin + h->rows] - *e0;
}

static bv_status ae_send(graph_server *gs, size_t s, const bv_task_hdr *epoch, int i,
                         void *ctx, bv_error *err)
{
    const edge_ctx *ec = ctx;
    const bv_stage *st = gs->e->stages[s];
    bv_task_hdr h = interval_hdr(gs, s, epoch, i);
    int64_t e0, ne = interval_edges(gs, &h, &e0);
    if (ec->refs)
        reply_in_place(gs, &h, bv_shared_act(s), gs->act[s] + e0 * st->out_dim,
                       (size_t)(ne * st->out_dim) * sizeof(float));
    size_t gbytes;
    uint8_t *slice;
    bv_status rc = graph_slice_for(gs, &h, i, 0, &slice, &gbytes, err);
    if (rc == BV_OK)
        rc = edge_task_send(gs, s, i, BV_MSG_EDGE_FWD_TASK, &h, gbytes ? slice : NULL, gbytes,
                            err);
    free(slice);
    return rc;
}

static bv_status ae_take(graph_server *gs, size_t s, bv_role_msg *m, void *ctx, bv_error *err)
{
    const edge_ctx *ec = ctx;
    const bv_stage *st = gs->e->stages[s];
    bv_status rc = BV_OK;
    if (!interval_matches(gs->e, &m->hdr, (int32_t)s)) {
        rc = bv_error_set(err, BV_ERR_CORRUPT, "bad result for %s", st->name);
    } else {
        int64_t e0, ne = interval_edges(gs, &m->hdr, &e0);
        uint64_t want = ec->refs ? 0 : (uint64_t)(ne * st->out_dim) * sizeof(float);
        if (m->hdr.na != want)
            rc = bv_error_set(err, BV_ERR_CORRUPT, "bad result for %s", st->name);
        else if (want)
            memcpy(gs->act[s] + e0 * st->out_dim, m->a, m->hdr.na);
    }
    bv_role_release(gs->t, m);
    return rc;
}

const task_kind bv_gs_apply_edge = {BV_MSG_EDGE_FWD_RESULT, ae_send, ae_take, NULL};

static bool aeb_ready(const graph_server *gs, int i, const void *ctx)
{
    const edge_ctx *ec = ctx;
    return !ec->refs || !ec->busy[i % bv_gs_edge_slots(gs->e)];
}

static bv_status aeb_send(graph_server *gs, size_t s, const bv_task_hdr *epoch, int i,
                          void *ctx, bv_error *err)
{
    edge_ctx *ec = ctx;
    const bv_stage *st = gs->e->stages[s];
    bv_task_hdr h = interval_hdr(gs, s, epoch, i);
    int64_t e0, ne = interval_edges(gs, &h, &e0);
    size_t half = (size_t)(ne * st->out_dim) * sizeof(float), nc;
    const float *out = gs->act[s] + e0 * st->out_dim, *dout = gs->dact[s] + e0 * st->out_dim;
    bv_array_ref refs[2];
    size_t extra = ec->refs ? sizeof refs : 2 * half;
    uint8_t *c; /* the edges, unless kept (the forward task sent them); then the values and
                   their gradient, or the references to them */
    bv_status rc = graph_slice_for(gs, &h, i, extra, &c, &nc, err);
    if (rc != BV_OK)
        return rc;
    if (ec->refs) {
        int slot = i % bv_gs_edge_slots(gs->e);
        refs[0] = shared_ref(gs, bv_shared_act(s), out, half);
        refs[1] = shared_ref(gs, bv_shared_dact(s), dout, half);
        memcpy(c + nc - extra, refs, sizeof refs);
        h.flags |= BV_TASK_REF_C;
        reply_in_place(gs, &h, bv_shared_edge_partials(gs->e), edge_partial(gs, slot),
                       (size_t)(edge_rows(gs) * st->in_dim) * sizeof(float));
        ec->busy[slot] = true;
    } else {
        memcpy(c + nc - 2 * half, out, half);
        memcpy(c + nc - half, dout, half);
    }
    rc = edge_task_send(gs, s, i, BV_MSG_EDGE_BWD_TASK, &h, c, nc, err);
    free(c);
    return rc;
}

/* Every interval's d(src) covers all vertices, so they are added in interval order (held
 * back when they arrive early): the sum does not depend on which worker finished first. */
static bv_status aeb_take(graph_server *gs, size_t s, bv_role_msg *m, void *ctx, bv_error *err)
{
    edge_ctx *ec = ctx;
    const bv_stage *st = gs->e->stages[s];
    int64_t n = edge_rows(gs);
    int slots = bv_gs_edge_slots(gs->e);
    if (!interval_matches(gs->e, &m->hdr, (int32_t)s) ||
        m->hdr.na != (ec->refs ? 0 : (uint64_t)(n * st->in_dim) * sizeof(float)) ||
        m->hdr.nb != (uint64_t)(m->hdr.rows * st->in_dim) * sizeof(float) ||
        ec->have[m->hdr.interval]) {
        bv_role_release(gs->t, m);
        return bv_error_set(err, BV_ERR_CORRUPT, "bad result for ∇%s", st->name);
    }
    bv_status rc = forward_grads(gs, m, err);
    if (rc != BV_OK) {
        bv_role_release(gs->t, m);
        return rc;
    }
    ec->held[m->hdr.interval] = *m;
    ec->have[m->hdr.interval] = true;
    for (; ec->next < gs->e->cfg.intervals && ec->have[ec->next]; ec->next++) {
        bv_role_msg *r = &ec->held[ec->next];
        const float *partial =
            ec->refs ? edge_partial(gs, ec->next % slots) : (const float *)r->a;
        if (ec->acc)
            gs->e->cfg.compute_ops->axpy(gs->compute, n * st->in_dim, 1.0f, partial, ec->acc);
        else
            unpack_window_add(gs, s, 0, n, partial);
        unpack_window_add(gs, s, r->hdr.row_begin, r->hdr.rows, (const float *)r->b);
        bv_role_release(gs->t, r);
        ec->have[ec->next] = false;
        if (ec->refs)
            ec->busy[ec->next % slots] = false;
    }
    return BV_OK;
}

const task_kind bv_gs_apply_edge_backward = {BV_MSG_EDGE_BWD_RESULT, aeb_send, aeb_take,
                                             aeb_ready};

/* Whether edge stage s is the only stage that reads its window of its input array: then
 * the window's gradient is zero until its ∇AE pass adds to it, and (0 + Σ partials) added
 * into it at the end has the same bits as each partial added into it in turn. The sum
 * runs in a contiguous array with the back end's axpy, in parallel, instead of a strided
 * pass of this thread per interval. */
static bool edge_window_alone(const bv_graph_engine *e, size_t s)
{
    const bv_stage *st = e->stages[s];
    for (size_t r = 0; r < e->nstages; r++) {
        const bv_stage *o = e->stages[r];
        if (r != s && e->vin[r] == e->vin[s] && o->in_offset < st->in_offset + st->in_dim &&
            st->in_offset < o->in_offset + o->in_dim)
            return false;
    }
    return true;
}

/* AE and ∇AE: the attention inputs of every vertex are packed once per pass. */
bv_status bv_gs_edge_pass(graph_server *gs, size_t s, const bv_task_hdr *epoch,
                          const task_kind *kind, bv_error *err)
{
    bv_graph_engine *e = gs->e;
    int slots = bv_gs_edge_slots(e);
    bool sum = kind == &bv_gs_apply_edge_backward && stage_input_grad(gs, s) &&
               edge_window_alone(e, s);
    edge_ctx ec = {by_reference(gs, bv_shared_edge_input(e)) &&
                       by_reference(gs, bv_shared_act(s)),
                   sum ? gs->edge_acc : NULL,
                   calloc((size_t)e->cfg.intervals, sizeof(bv_role_msg)),
                   calloc((size_t)e->cfg.intervals, sizeof(bool)),
                   calloc((size_t)slots, sizeof(bool)), 0};
    bv_status rc = (ec.held && ec.have && ec.busy)
                       ? BV_OK
                       : bv_error_set(err, BV_ERR_NOMEM, "out of memory in %s",
                                      e->stages[s]->name);
    if (rc == BV_OK) {
        pack_window(gs, s, 0, edge_rows(gs), gs->edge_input);
        if (ec.acc)
            gs_zero(gs, ec.acc, edge_rows(gs) * e->stages[s]->in_dim);
        rc = gs_run_tasks(gs, s, epoch, kind, &ec, err);
    }
    if (rc == BV_OK && ec.acc)
        unpack_window_add(gs, s, 0, edge_rows(gs), ec.acc);
    for (int i = 0; ec.held && ec.have && i < e->cfg.intervals; i++)
        if (ec.have[i])
            bv_role_release(gs->t, &ec.held[i]);
    free(ec.held);
    free(ec.have);
    free(ec.busy);
    return rc;
}

/* GA over rows [r0, r1): aggregation over in-edges, with Â or with an edge stage's
 * per-head weights. Each row's sum is the same whatever the range (one interval's rows
 * or all of them). */
void bv_gs_gather_rows(graph_server *gs, size_t s, int64_t r0, int64_t r1)
{
    bv_graph_engine *e = gs->e;
    const bv_stage *st = e->stages[s];
    const bv_compute_ops *k = e->cfg.compute_ops;
    float *out = gs->act[s] + r0 * st->out_dim;
    if (!st->weighted) {
        k->spmm(gs->compute, e->adj_norm, r0, r1, stage_input(gs, s), st->in_dim, out);
        return;
    }
    /* the weights of the range's edges, from its first edge on */
    const float *w = gs->act[st->weights_stage] + e->adj_loops->rowptr[r0] * st->heads;
    k->gather_heads(gs->compute, e->adj_loops, r0, r1, st->heads, st->in_dim / st->heads, w,
                    stage_input(gs, s) + st->in_offset, e->vin_width[s], out);
}

/* ∇GA of an unweighted gather over rows [r0, r1) of its input's gradient: the rows of Âᵀ
 * gather the output's gradient from the out-neighbours. */
void bv_gs_gather_backward_rows(graph_server *gs, size_t s, int64_t r0, int64_t r1)
{
    bv_graph_engine *e = gs->e;
    const bv_stage *st = e->stages[s];
    const bv_compute_ops *k = e->cfg.compute_ops;
    float *din = stage_input_grad(gs, s);
    if (!din || !gs->dact[s]) /* nothing to pass back, or nothing came (bv_gs_grads_for) */
        return;
    k->spmm(gs->compute, e->adj_norm_t, r0, r1, gs->dact[s], st->in_dim,
            gs->scratch + r0 * st->in_dim);
    k->axpy(gs->compute, (r1 - r0) * st->in_dim, 1.0f, gs->scratch + r0 * st->in_dim,
            din + r0 * st->in_dim);
}

/* ∇GA over every row: the input's gradient flows back along reversed edges; a weighted
 * gather also gives the gradient of its weights (one dot product per edge and head). */
void bv_gs_gather_backward(graph_server *gs, size_t s)
{
    bv_graph_engine *e = gs->e;
    const bv_stage *st = e->stages[s];
    const bv_compute_ops *k = e->cfg.compute_ops;
    int64_t n = e->cfg.data->num_nodes;
    float *din = stage_input_grad(gs, s);
    if (!st->weighted) {
        bv_gs_gather_backward_rows(gs, s, 0, n);
        return;
    }
    int64_t hd = st->in_dim / st->heads;
    if (din)
        k->gather_heads_backward_x(gs->compute, e->adj_loops_t, e->loops_perm, st->heads, hd,
                                   gs->act[st->weights_stage], gs->dact[s], din + st->in_offset,
                                   e->vin_width[s]);
    k->gather_heads_backward_w(gs->compute, e->adj_loops, 0, n, st->heads, hd, gs->dact[s],
                               stage_input(gs, s) + st->in_offset, e->vin_width[s],
                               gs->dact[st->weights_stage]);
}

/* dact[x] is made (or taken from spare_grad) when the first stage that adds to it needs
 * it, and dropped when stage x has used it (kept for the next pass: bv_gs_drop_grad).
 * Zeroed when made: every producer adds. */
size_t bv_gs_stage_bytes(const graph_server *gs, size_t s)
{
    return (size_t)(stage_rows(gs, s) * gs->e->stages[s]->out_dim) * sizeof(float);
}

bv_status bv_gs_ensure_grad(graph_server *gs, int s, bv_error *err)
{
    if (s < 0 || gs->dact[s])
        return BV_OK;
    size_t bytes = bv_gs_stage_bytes(gs, (size_t)s);
    if (gs->e->shm) { /* its place in the segment (gs_segment) */
        gs->dact[s] = (float *)(void *)((char *)gs->e->segment.base +
                                        gs->seg_offset[bv_shared_dact((size_t)s)]);
        memset(gs->dact[s], 0, bytes);
    } else if (gs->spare_grad[s]) {
        gs->dact[s] = gs->spare_grad[s];
        gs->spare_grad[s] = NULL;
        gs_zero(gs, gs->dact[s], (int64_t)(bytes / sizeof(float)));
    } else if (!(gs->dact[s] = bv_alloc_aligned(bytes))) {
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the gradient of %s",
                            gs->e->stages[s]->name);
    }
    gs->e->shared[bv_shared_dact((size_t)s)] = (bv_shared_array){gs->dact[s], bytes};
    return BV_OK;
}

/* A gradient array is kept for the next pass once it has been used, not given back.
 * Mapping and zeroing it afresh every pass cost the PubMed-sized GCN a fifth of its epoch
 * (four arrays of 0.2-1.3 MB); on a VM whose balloon reports free pages to its host
 * (virtio-balloon free page reporting), memory given back and touched again ~2 s later
 * faults in at 0.7 GB/s instead of 6: the 1M-vertex GAT's 1.5 GB of gradient arrays an
 * epoch were a quarter of its time (9.3 -> 7.0 s). Kept, they raise its peak by 5 %
 * (3.80 -> 3.99 GB; the 1M-vertex GCN's by 64 MB): the backward pass, where the peak is,
 * holds most of them at once anyway. With a backend's memory every one is kept too:
 * giving device memory back waits for the whole device, and taking it again costs its
 * pages' first touch (docs/cuda.md). */
void bv_gs_drop_grad(graph_server *gs, size_t s)
{
    gs->e->shared[bv_shared_dact(s)] = (bv_shared_array){NULL, 0};
    if (!gs->e->shm && gs->dact[s] && !gs->spare_grad[s])
        gs->spare_grad[s] = gs->dact[s];
    else if (!gs->e->shm)
        bv_free_aligned(gs->dact[s]);
    gs->dact[s] = NULL;
}

/* Before stage s's backward: the arrays it adds into (none for the input of a tensor stage
 * that gives it no gradient: GCN's first layer, gathering first, reads Â X). */
bv_status bv_gs_grads_for(graph_server *gs, size_t s, bv_error *err)
{
    const bv_stage *st = gs->e->stages[s];
    bool no_din = st->kind == BV_STAGE_TENSOR && !st->needs_input_grad;
    bv_status rc = no_din ? BV_OK : bv_gs_ensure_grad(gs, gs->e->vin[s], err);
    if (rc == BV_OK && st->kind == BV_STAGE_GATHER && st->weighted)
        rc = bv_gs_ensure_grad(gs, (int)st->weights_stage, err);
    return rc;
}

/* ---- several graph servers: the boundary exchange (docs/cluster.md) ---- */

static bool ghosts_match(const bv_role_msg *m, const bv_task_hdr *cmd, int v, bool grads)
{
    return m->hdr.epoch == cmd->epoch && m->hdr.training == cmd->training &&
           m->hdr.stage == v && ((m->hdr.flags & BV_TASK_GRADS) != 0) == grads;
}

/* The rows of part q's list: forward, this server sends the owned rows q keeps as ghosts
 * and receives its ghost rows q owns; backward (grads) the other way round. */
static const int64_t *exchange_rows(const bv_graph_view *view, int q, bool sending,
                                    int64_t *count)
{
    bool own_rows = sending; /* forward: send own rows, receive into ghost rows */
    const int64_t *off = own_rows ? view->send_off : view->recv_off;
    *count = off[q + 1] - off[q];
    return (own_rows ? view->send_idx : view->recv_idx) + off[q];
}

/* Forward: the rows of vertex array v that other parts keep as ghosts go to them, and this
 * server's ghost rows come from their owners. Backward (grads): what this server added
 * to the gradient of its ghost rows goes to their owners, and what the others added to
 * this server's rows is added here, in part order (the same bits every run). */
bv_status bv_gs_exchange(graph_server *gs, const bv_task_hdr *cmd, int v, bool grads,
                         bv_error *err)
{
    bv_graph_engine *e = gs->e;
    const bv_graph_view *view = &e->view;
    int64_t w = e->stages[v]->out_dim;
    float *arr = grads ? gs->dact[v] : gs->act[v];
    int me = e->gs_index;
    bv_status st = BV_OK;
    for (int q = 0; q < e->ngs && st == BV_OK; q++) {
        if (q == me)
            continue;
        int64_t k;
        const int64_t *rows = exchange_rows(view, q, !grads, &k);
        size_t bytes = (size_t)(k * w) * sizeof(float);
        float *buf = malloc(bytes + 1);
        if (!buf)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for boundary rows");
        for (int64_t i = 0; i < k; i++)
            memcpy(buf + i * w, arr + rows[i] * w, (size_t)w * sizeof(float));
        bv_task_hdr h = {.epoch = cmd->epoch, .training = cmd->training, .stage = v,
                         .interval = me, .flags = grads ? BV_TASK_GRADS : 0};
        st = bv_role_send(gs->t, gs->to_peer[q], BV_MSG_GHOSTS, BV_ROLE_GS, &h, buf, bytes,
                          NULL, 0, NULL, 0, err);
        gs->ghost_bytes += (int64_t)bytes;
        free(buf);
    }
    bv_role_msg got[BV_MAX_GRAPH_SERVERS];
    memset(got, 0, sizeof got);
    for (int have = 0; st == BV_OK && have < e->ngs - 1;) {
        bv_role_msg m;
        size_t i = 0;
        while (i < gs->nearly && !ghosts_match(&gs->early[i], cmd, v, grads))
            i++;
        if (i < gs->nearly) { /* it came early */
            m = gs->early[i];
            gs->early[i] = gs->early[--gs->nearly];
        } else if ((st = gs_wait(gs, BV_MSG_GHOSTS, &m, err)) != BV_OK) {
            break;
        } else if (!ghosts_match(&m, cmd, v, grads)) { /* a later exchange's */
            if ((st = bv_gs_keep_early(gs, &m, err)) != BV_OK)
                break;
            continue;
        }
        int q = m.hdr.interval;
        int64_t k = 0;
        if (q >= 0 && q < e->ngs && q != me && !got[q].a)
            exchange_rows(view, q, grads, &k);
        if (q < 0 || q >= e->ngs || q == me || got[q].a ||
            m.hdr.na != (uint64_t)(k * w) * sizeof(float)) {
            bv_role_release(gs->t, &m);
            st = bv_error_set(err, BV_ERR_CORRUPT, "graph server %d: bad boundary rows of %s "
                              "from part %d", me, e->stages[v]->name, q);
            break;
        }
        got[q] = m;
        if (!got[q].a) /* no rows to exchange with q: mark it as come all the same */
            got[q].a = (const uint8_t *)"";
        have++;
    }
    for (int q = 0; q < e->ngs; q++) {
        if (q == me || !got[q].a)
            continue;
        int64_t k;
        const int64_t *rows = exchange_rows(view, q, grads, &k);
        const float *in = (const float *)(const void *)got[q].a;
        for (int64_t i = 0; st == BV_OK && i < k; i++) {
            float *row = arr + rows[i] * w;
            if (grads)
                for (int64_t j = 0; j < w; j++)
                    row[j] += in[i * w + j];
            else
                memcpy(row, in + i * w, (size_t)w * sizeof(float));
        }
        bv_role_release(gs->t, &got[q]);
    }
    return st;
}

/* Whether GATHER or EDGE stage s is the first to read its input across edges. */
bool bv_gs_first_reader(const bv_graph_engine *e, size_t s)
{
    for (size_t r = 0; r < s; r++)
        if (e->vin[r] == e->vin[s] && e->stages[r]->kind != BV_STAGE_TENSOR)
            return false;
    return true;
}

static bv_status gs_epoch(graph_server *gs, const bv_task_hdr *cmd, bv_task_hdr *reply,
                          bv_error *err)
{
    bv_graph_engine *e = gs->e;
    bv_status rc = BV_OK;
    gs->ghost_bytes = 0;
    size_t nfwd = e->nstages - (gs_fuses(gs) ? 1 : 0); /* fused: the last one with the loss */
    for (size_t s = 0; s < nfwd && rc == BV_OK; s++) {
        int v = e->vin[s]; /* its ghost rows, before the first stage that reads them */
        if (e->ngs > 1 && v >= 0 && e->stages[s]->kind != BV_STAGE_TENSOR &&
            bv_gs_first_reader(e, s) && (rc = bv_gs_exchange(gs, cmd, v, false, err)) != BV_OK)
            break;
        switch (e->stages[s]->kind) {
        case BV_STAGE_GATHER: {
            bool fixed = v < 0 && !e->stages[s]->weighted; /* Â X: kept from the first pass */
            if (!fixed || gs->features_gathered != gs->act[s])
                bv_gs_gather_rows(gs, s, 0, e->cfg.data->num_nodes);
            if (fixed)
                gs->features_gathered = gs->act[s];
            break;
        }
        case BV_STAGE_EDGE: rc = bv_gs_edge_pass(gs, s, cmd, &bv_gs_apply_edge, err); break;
        case BV_STAGE_TENSOR: rc = gs_run_tasks(gs, s, cmd, &bv_gs_apply_vertex, NULL, err); break;
        }
    }
    if (rc == BV_OK && cmd->training) /* the loss writes the last one's gradient; fused, the
                                         last stage's backward its input's */
        rc = nfwd < e->nstages ? bv_gs_grads_for(gs, nfwd, err)
                               : bv_gs_ensure_grad(gs, (int)e->nstages - 1, err);
    if (rc == BV_OK)
        rc = gs_loss(gs, cmd, nfwd < e->nstages ? &gs_fused_task : &bv_gs_loss_task,
                     reply->stats, err);
    for (size_t s = nfwd; cmd->training && rc == BV_OK && s-- > 0;) {
        if ((rc = bv_gs_grads_for(gs, s, err)) != BV_OK)
            break;
        if (e->ngs > 1 && bv_stage_read_across_edges(e, s) &&
            (rc = bv_gs_exchange(gs, cmd, (int)s, true, err)) != BV_OK)
            break;
        switch (e->stages[s]->kind) {
        case BV_STAGE_GATHER: bv_gs_gather_backward(gs, s); break;
        case BV_STAGE_EDGE: /* its task sends weight gradients too */
            rc = bv_gs_edge_pass(gs, s, cmd, &bv_gs_apply_edge_backward, err);
            break;
        case BV_STAGE_TENSOR:
            rc = gs_run_tasks(gs, s, cmd, &bv_gs_apply_vertex_backward, NULL, err);
            break;
        }
        bv_gs_drop_grad(gs, s);
    }
    for (size_t s = 0; s < e->nstages; s++) /* after a failure, too */
        bv_gs_drop_grad(gs, s);
    reply->step = cmd->training ? bv_gs_grad_messages(gs) : 0;
    reply->reply_to = e->gs_index;
    reply->row_begin = gs->ghost_bytes;
    return rc;
}

/* The edge arrays' bytes (graph_server.h): none without edge stages; the slots only when
 * tasks name them (shared arrays). */
static size_t edge_input_bytes(const graph_server *gs)
{
    return (size_t)(edge_rows(gs) * gs->edge_width) * sizeof(float);
}

static size_t edge_partials_bytes(const graph_server *gs)
{
    return gs->e->cfg.share_arrays ? (size_t)bv_gs_edge_slots(gs->e) * edge_input_bytes(gs) : 0;
}

/* The edge arrays, in the segment (e->shm) or of their own, and in the table of shared
 * arrays. */
static bv_status gs_edge_arrays(graph_server *gs, bv_error *err)
{
    bv_graph_engine *e = gs->e;
    size_t in = edge_input_bytes(gs), partials = edge_partials_bytes(gs);
    if (in == 0)
        return BV_OK;
    if (e->shm) {
        gs->edge_input = (float *)(void *)((char *)e->segment.base +
                                           gs->seg_offset[bv_shared_edge_input(e)]);
        gs->edge_partials = (float *)(void *)((char *)e->segment.base +
                                              gs->seg_offset[bv_shared_edge_partials(e)]);
    } else if (!(gs->edge_input = bv_alloc_aligned(in)) ||
               (partials && !(gs->edge_partials = bv_alloc_aligned(partials)))) {
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the edge stages' arrays");
    }
    if (!(gs->edge_acc = bv_alloc_aligned(in)))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the edge stages' arrays");
    e->shared[bv_shared_edge_input(e)] = (bv_shared_array){gs->edge_input, in};
    if (partials)
        e->shared[bv_shared_edge_partials(e)] = (bv_shared_array){gs->edge_partials, partials};
    return BV_OK;
}

/* Roles as processes on one host: every stage's array and its gradient, and the edge
 * arrays, get a place in one segment of shared memory, and each tensor worker is told
 * where (BV_MSG_SEGMENT) before any task names a window of it. */
static bv_status gs_segment(graph_server *gs, bv_error *err)
{
    bv_graph_engine *e = gs->e;
    size_t count = bv_shared_count(e);
    size_t *bytes = calloc(count, sizeof *bytes);
    bv_array_ref *refs = calloc(count - BV_SHARED_STAGES, sizeof *refs);
    gs->seg_offset = calloc(count, sizeof *gs->seg_offset);
    if (!bytes || !refs || !gs->seg_offset) {
        free(bytes);
        free(refs);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in the graph server");
    }
    for (size_t s = 0; s < e->nstages; s++)
        bytes[bv_shared_act(s)] = bytes[bv_shared_dact(s)] = bv_gs_stage_bytes(gs, s);
    bytes[bv_shared_edge_input(e)] = edge_input_bytes(gs);
    bytes[bv_shared_edge_partials(e)] = edge_partials_bytes(gs);
    char name[32];
    snprintf(name, sizeof name, "bivouac-gs%d", e->gs_index);
    bv_status st = bv_segment_create(&e->segment, name, bytes, count, gs->seg_offset, err);
    size_t n = 0;
    for (size_t k = BV_SHARED_STAGES; k < count; k++)
        refs[n++] = (bv_array_ref){(int64_t)k, gs->seg_offset[k], bytes[k]};
    bv_task_hdr h = {.version = (int64_t)getpid(), .row_begin = e->segment.fd,
                     .rows = (int64_t)e->segment.bytes, .reply_to = e->gs_index};
    for (int i = 0; st == BV_OK && i < e->cfg.tensor_workers; i++)
        st = bv_role_send(gs->t, gs->to_tw[i], BV_MSG_SEGMENT, BV_ROLE_GS, &h, refs,
                          n * sizeof *refs, NULL, 0, NULL, 0, err);
    free(bytes);
    free(refs);
    return st;
}

static bv_status gs_setup(void *self, bv_error *err)
{
    graph_server *gs = self;
    bv_graph_engine *e = gs->e;
    gs->t = e->cfg.transport_ops;
    gs->input_sent = calloc((size_t)e->cfg.intervals, sizeof *gs->input_sent);
    gs->ps_of = calloc((size_t)e->cfg.intervals, sizeof *gs->ps_of);
    gs->act = calloc(e->nstages, sizeof *gs->act);
    gs->dact = calloc(e->nstages, sizeof *gs->dact);
    gs->spare_grad = calloc(e->nstages, sizeof *gs->spare_grad);
    if (!gs->act || !gs->dact || !gs->spare_grad || !gs->input_sent || !gs->ps_of)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in the graph server");
    int64_t n = e->cfg.data->num_nodes;
    int64_t widest = 0; /* of the gathers' inputs that take a gradient (∇GA's scratch) */
    for (size_t s = 0; s < e->nstages; s++)
        if (e->stages[s]->kind == BV_STAGE_EDGE && e->stages[s]->in_dim > gs->edge_width)
            gs->edge_width = e->stages[s]->in_dim;
    bv_status st = e->shm ? gs_segment(gs, err) : BV_OK;
    if (st == BV_OK)
        st = gs_edge_arrays(gs, err);
    if (st != BV_OK)
        return st;
    for (size_t s = 0; s < e->nstages; s++) {
        if (e->stages[s]->kind == BV_STAGE_GATHER && e->vin[s] >= 0 &&
            e->stages[s]->in_dim > widest)
            widest = e->stages[s]->in_dim;
        gs->act[s] = e->shm ? (float *)(void *)((char *)e->segment.base +
                                                gs->seg_offset[bv_shared_act(s)])
                            : bv_alloc_aligned(bv_gs_stage_bytes(gs, s));
        if (!gs->act[s])
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %s's vertex arrays",
                                e->stages[s]->name);
        e->shared[bv_shared_act(s)] = (bv_shared_array){gs->act[s], bv_gs_stage_bytes(gs, s)};
    }
    bool need_scratch = e->has_norm_gathers && widest > 0; /* only ∇GA with Â needs it */
    if (need_scratch)
        gs->scratch = bv_alloc_aligned((size_t)(n * widest) * sizeof(float));
    gs->graph_sent = calloc((size_t)e->cfg.intervals, sizeof *gs->graph_sent);
    if ((need_scratch && !gs->scratch) || !gs->graph_sent)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in the graph server");
    int64_t nonzero = bv_graph_features_nnz(e->cfg.data);
    int64_t total = n * e->cfg.data->num_features;
    /* Sparse features: the workers keep them (sparse rows, or dense ones their sparse_rows
     * turns into a CSR). Dense ones too when the roles are processes: sending them costs
     * every epoch (threads read them in place instead). */
    gs->keep_features = bv_graph_features_sparse(e->cfg.data) ||
                        (double)nonzero <= BV_FEATURES_SPARSE_DENSITY * (double)total ||
                        e->serving;
    int64_t train = 0;
    for (int64_t i = 0; i < n; i++)
        train += e->cfg.data->split[i] == BV_SPLIT_TRAIN && e->cfg.data->labels[i] >= 0;
    if (e->view.local) /* the loss is the mean over the whole graph's training vertices */
        train = e->view.train_total;
    gs->grad_scale = train ? 1.0f / (float)train : 0.0f;
    for (int q = 0; q < e->ngs; q++)
        if (q != e->gs_index && !(gs->to_peer[q] = bv_engine_connect(e, e->addr_gs[q], err)))
            return err->status;
    if (e->cfg.gate_ops) { /* this server's own instance of the gating strategy */
        if (!(gs->gate = e->cfg.gate_ops->create(e->cfg.gate_opts, &e->cfg.run_info, err)))
            return err->status ? err->status : BV_ERR_PLUGIN;
    }
    if (e->cfg.functions && bv_engine_connect_servers(e, gs->to_ps, err) != BV_OK)
        return err->status;
    if (e->cfg.functions)
        return bv_lambda_pool_open(e, gs->inbox, gs->to_tw, &gs->pool, err);
    return BV_OK;
}

static void gs_teardown(void *self)
{
    graph_server *gs = self;
    bv_graph_engine *e = gs->e;
    bv_lambda_pool_close(gs->pool); /* its workers end before their outboxes close */
    bv_engine_close_all(e, gs->to_peer, BV_MAX_GRAPH_SERVERS);
    bv_engine_close_all(e, gs->to_ps, BV_MAX_PARAM_SERVERS);
    if (gs->gate)
        e->cfg.gate_ops->destroy(gs->gate);
    bv_gs_pipeline_free(gs);
    for (size_t i = 0; i < gs->nearly; i++)
        bv_role_release(gs->t, &gs->early[i]);
    free(gs->early);
    for (size_t s = 0; gs->act && !e->shm && s < e->nstages; s++) {
        bv_free_aligned(gs->act[s]);
        bv_free_aligned(gs->dact[s]);
        bv_free_aligned(gs->spare_grad ? gs->spare_grad[s] : NULL);
    }
    free(gs->spare_grad);
    if (!e->shm) {
        bv_free_aligned(gs->edge_input);
        bv_free_aligned(gs->edge_partials);
    }
    bv_free_aligned(gs->edge_acc);
    free(gs->seg_offset); /* the segment itself lives as long as the engine */
    free(gs->act);
    free(gs->dact);
    free(gs->input_sent);
    free(gs->ps_of);
    free(gs->graph_sent);
    bv_free_aligned(gs->scratch);
}

/* EPOCH: runs the pass and reports its stats. Boundary rows from another graph server
 * that started the pass first may come before this one's EPOCH: they are kept. */
static bv_status gs_handle(void *self, bv_role_msg *m, bv_error *err)
{
    graph_server *gs = self;
    if (m->wire.type == BV_MSG_GHOSTS && gs->e->ngs > 1)
        return bv_gs_keep_early(gs, m, err); /* the loop's message is ours now */
    if (bv_gs_pipeline_is_result(gs, m)) /* of an interval ahead, after its pass ended */
        return bv_gs_pipeline_absorb(gs, m, err);
    if (gs->pool && bv_lambda_pool_take(gs->pool, m)) /* a late READY or duplicate */
        return BV_OK;
    if (m->wire.type == BV_MSG_KNOB) { /* checked by the loop's own instance already */
        char name[64];
        if (m->hdr.na == 0 || m->hdr.na >= sizeof name)
            return bv_error_set(err, BV_ERR_CORRUPT, "a knob with a name of %llu bytes",
                                (unsigned long long)m->hdr.na);
        memcpy(name, m->a, m->hdr.na);
        name[m->hdr.na] = '\0';
        if (gs->pool && strcmp(name, "compute.lambdas") == 0)
            return bv_lambda_pool_set_lambdas(gs->pool, m->hdr.stats[0], err);
        if (!gs->gate)
            return bv_error_set(err, BV_ERR_CORRUPT, "a knob '%s' for a graph server without "
                                "a task gate", name);
        return gs->e->cfg.gate_ops->set_knob(gs->gate, name, m->hdr.stats[0], err);
    }
    if (m->wire.type != BV_MSG_EPOCH)
        return BV_OK;
    /* this epoch's parameter server of each interval, by the servers' loads so far (the
     * coordinator's measure); equal servers take turns across the graph servers and the
     * epochs */
    bv_graph_engine *e = gs->e;
    double cost[BV_MAX_PARAM_SERVERS];
    if (m->hdr.na != (e->nps > 1 ? (uint64_t)e->nps * sizeof(double) : 0))
        return bv_error_set(err, BV_ERR_CORRUPT, "EPOCH carries %llu bytes of server loads, "
                            "not %d servers'", (unsigned long long)m->hdr.na, e->nps);
    if (m->hdr.na)
        memcpy(cost, m->a, m->hdr.na);
    bv_engine_pick_servers(m->hdr.na ? cost : NULL, e->nps, e->cfg.intervals,
                           (m->hdr.epoch * e->ngs + e->gs_index) * e->cfg.intervals,
                           gs->ps_of);
    bv_task_hdr reply = m->hdr;
    bool gated = gs->gate && m->hdr.training;
    if (gs->pool)
        bv_lambda_pool_begin(gs->pool);
    bv_status rc = gated ? bv_gs_pipeline_epoch(gs, &m->hdr, &reply, err)
                         : bv_gs_pipeline_drain(gs, err);
    /* an evaluation while intervals are ahead: on arrays of its own */
    bool private = !gated && rc == BV_OK && bv_gs_pipeline_ahead(gs);
    if (private)
        rc = bv_gs_pipeline_swap_arrays(gs, err);
    if (!gated && rc == BV_OK)
        rc = gs_epoch(gs, &m->hdr, &reply, err);
    if (private && gs->private_arrays) {
        bv_error ignored;
        bv_gs_pipeline_swap_arrays(gs, &ignored); /* back: made already, cannot fail */
    }
    if (rc == BV_OK && !gated && !private)
        bv_gs_pipeline_wrote_all(gs, m->hdr.epoch);
    const double *figures = NULL, *counts = NULL; /* a gated pass's */
    if (rc == BV_OK && gated)
        bv_gs_pipeline_figures(gs, &figures, &counts);
    double fn[BV_FN_FIGURES]; /* what the pass did with functions */
    if (gs->pool)
        bv_lambda_pool_figures(gs->pool, fn);
    if (rc == BV_OK)
        rc = bv_role_send(gs->t, gs->to_coord, BV_MSG_EPOCH_DONE, BV_ROLE_GS, &reply, figures,
                          gated ? BV_PIPE_FIGURES * sizeof *figures : 0, counts,
                          gated ? e->nstages * sizeof *counts : 0, gs->pool ? fn : NULL,
                          gs->pool ? sizeof fn : 0, err);
    return rc;
}

void *bv_graph_server_main(void *engine)
{
    graph_server gs = {.e = engine};
    bv_role role = {
        .name = "graph server", .id = BV_ROLE_GS, .e = gs.e, .self = &gs,
        .setup = gs_setup, .handle = gs_handle, .teardown = gs_teardown,
        .life = &gs.e->gs_life, .inbox_addr = gs.e->addr_gs[gs.e->gs_index], .inbox = &gs.inbox,
        .compute = &gs.compute,
        .worker_addrs = gs.e->addr_tw, .to_workers = gs.to_tw,
        .to_coord = &gs.to_coord, .report_to = &gs.to_coord,
        .ready = gs.e->ngs > 1 ? &gs.e->part_info : NULL,
        .book_key = "gs", .index = gs.e->gs_index,
    };
    bv_role_run(&role);
    return NULL;
}
