/* Graph server role: owns the graph, the features and every stage's vertex arrays. It
 * runs Gather (and ∇Gather over the reversed edges) itself, and hands ApplyVertex and the
 * loss to tensor workers as tasks over vertex intervals, scattering their results into
 * its arrays (Dorylus §3: GA and SC on graph servers, AV and AE on Lambdas). */
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "engine_graph_internal.h"

typedef struct graph_server {
    bv_graph_engine *e;
    const bv_transport_ops *t;
    bv_endpoint *inbox, *to_coord;
    bv_endpoint *to_tw[BV_MAX_TENSOR_WORKERS];
    bv_compute *compute;
    float **act;  /* per stage output, num_nodes x out_dim */
    float **dact; /* per stage d(output) */
    float grad_scale;
    bool *input_sent; /* per interval: its static input is at its tensor worker */
} graph_server;

/* Input rows of stage s for interval h, or none if the worker already keeps them. */
static const float *task_input(graph_server *gs, size_t s, bv_task_hdr *h, size_t *bytes)
{
    const bv_stage *st = gs->e->stages[s];
    const float *in = (s == 0 ? gs->e->cfg.data->features : gs->act[s - 1]) +
                      h->row_begin * st->in_dim;
    *bytes = (size_t)(h->rows * st->in_dim) * sizeof(float);
    if (s != 0)
        return in;
    if (gs->input_sent[h->interval]) {
        h->flags |= BV_TASK_CACHED_INPUT;
        *bytes = 0;
        return NULL;
    }
    h->flags |= BV_TASK_KEEP_INPUT;
    gs->input_sent[h->interval] = true;
    return in;
}

static const float *stage_input(const graph_server *gs, size_t s)
{
    return s == 0 ? gs->e->cfg.data->features : gs->act[s - 1];
}

static int64_t interval_rows(const bv_graph_engine *e, int i)
{
    return e->interval_begin[i + 1] - e->interval_begin[i];
}

/* Waits for one reply of the given type; an ERROR from a worker fails the epoch. */
static bv_status gs_wait(graph_server *gs, uint16_t type, bv_role_msg *m, bv_error *err)
{
    for (;;) {
        bv_status st = bv_role_recv(gs->t, gs->inbox, m, BV_TIMEOUT_FOREVER, err);
        if (st != BV_OK)
            return st;
        if (m->wire.type == type)
            return BV_OK;
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

static bool interval_matches(const bv_graph_engine *e, const bv_task_hdr *h, int32_t stage)
{
    return h->stage == stage && h->interval >= 0 && h->interval < e->cfg.intervals &&
           h->row_begin == e->interval_begin[h->interval] &&
           h->rows == interval_rows(e, h->interval);
}

static bv_status gs_apply_vertex(graph_server *gs, size_t s, const bv_task_hdr *epoch,
                                 bv_error *err)
{
    bv_graph_engine *e = gs->e;
    const bv_stage *st = e->stages[s];
    for (int i = 0; i < e->cfg.intervals; i++) {
        bv_task_hdr h = *epoch;
        h.stage = (int32_t)s;
        h.interval = i;
        h.row_begin = e->interval_begin[i];
        h.rows = interval_rows(e, i);
        size_t in_bytes;
        const float *in = task_input(gs, s, &h, &in_bytes);
        bv_status rc = bv_role_send(gs->t, gs->to_tw[i % e->cfg.tensor_workers],
                                    BV_MSG_FWD_TASK, BV_ROLE_GS, &h, in, in_bytes, NULL, 0,
                                    NULL, 0, err);
        if (rc != BV_OK)
            return rc;
    }
    for (int done = 0; done < e->cfg.intervals; done++) {
        bv_role_msg m;
        bv_status rc = gs_wait(gs, BV_MSG_FWD_RESULT, &m, err);
        if (rc != BV_OK)
            return rc;
        if (!interval_matches(e, &m.hdr, (int32_t)s) ||
            m.hdr.na != (uint64_t)(m.hdr.rows * st->out_dim) * sizeof(float))
            rc = bv_error_set(err, BV_ERR_CORRUPT, "bad result for %s", st->name);
        else /* Scatter: the rows land where the next stage reads them */
            memcpy(gs->act[s] + m.hdr.row_begin * st->out_dim, m.a, m.hdr.na);
        bv_role_release(gs->t, &m);
        if (rc != BV_OK)
            return rc;
    }
    return BV_OK;
}

static bv_status gs_loss(graph_server *gs, const bv_task_hdr *epoch, double stats[9],
                         bv_error *err)
{
    bv_graph_engine *e = gs->e;
    size_t last = e->nstages - 1;
    int64_t k = e->stages[last]->out_dim;
    const bv_graph_dataset *d = e->cfg.data;
    for (int i = 0; i < e->cfg.intervals; i++) {
        bv_task_hdr h = *epoch;
        h.stage = (int32_t)last;
        h.interval = i;
        h.row_begin = e->interval_begin[i];
        h.rows = interval_rows(e, i);
        h.grad_scale = gs->grad_scale;
        bv_status rc = bv_role_send(
            gs->t, gs->to_tw[i % e->cfg.tensor_workers], BV_MSG_LOSS_TASK, BV_ROLE_GS, &h,
            gs->act[last] + h.row_begin * k, (size_t)(h.rows * k) * sizeof(float),
            d->labels + h.row_begin, (size_t)h.rows * sizeof(int32_t), d->split + h.row_begin,
            (size_t)h.rows, err);
        if (rc != BV_OK)
            return rc;
    }
    double *per = calloc((size_t)e->cfg.intervals * 9, sizeof *per);
    if (!per)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_status rc = BV_OK;
    for (int done = 0; done < e->cfg.intervals && rc == BV_OK; done++) {
        bv_role_msg m;
        rc = gs_wait(gs, BV_MSG_LOSS_RESULT, &m, err);
        if (rc != BV_OK)
            break;
        size_t want = epoch->training ? (size_t)(m.hdr.rows * k) * sizeof(float) : 0;
        if (!interval_matches(e, &m.hdr, (int32_t)last) || m.hdr.na != want) {
            rc = bv_error_set(err, BV_ERR_CORRUPT, "bad loss result");
        } else {
            memcpy(per + 9 * m.hdr.interval, m.hdr.stats, sizeof m.hdr.stats);
            if (want)
                memcpy(gs->dact[last] + m.hdr.row_begin * k, m.a, want);
        }
        bv_role_release(gs->t, &m);
    }
    /* sums in interval order: the same result whatever order the replies came in */
    for (int j = 0; j < 9; j++)
        stats[j] = 0;
    for (int i = 0; i < e->cfg.intervals; i++)
        for (int j = 0; j < 9; j++)
            stats[j] += per[9 * i + j];
    free(per);
    return rc;
}

static bv_status gs_apply_vertex_backward(graph_server *gs, size_t s, const bv_task_hdr *epoch,
                                          bv_error *err)
{
    bv_graph_engine *e = gs->e;
    const bv_stage *st = e->stages[s];
    for (int i = 0; i < e->cfg.intervals; i++) {
        bv_task_hdr h = *epoch;
        h.stage = (int32_t)s;
        h.interval = i;
        h.row_begin = e->interval_begin[i];
        h.rows = interval_rows(e, i);
        size_t out_bytes = (size_t)(h.rows * st->out_dim) * sizeof(float);
        size_t in_bytes;
        const float *in = task_input(gs, s, &h, &in_bytes);
        bv_status rc = bv_role_send(
            gs->t, gs->to_tw[i % e->cfg.tensor_workers], BV_MSG_BWD_TASK, BV_ROLE_GS, &h, in,
            in_bytes, gs->act[s] + h.row_begin * st->out_dim, out_bytes,
            gs->dact[s] + h.row_begin * st->out_dim, out_bytes, err);
        if (rc != BV_OK)
            return rc;
    }
    bool want_din = st->needs_input_grad && s > 0;
    for (int done = 0; done < e->cfg.intervals; done++) {
        bv_role_msg m;
        bv_status rc = gs_wait(gs, BV_MSG_BWD_RESULT, &m, err);
        if (rc != BV_OK)
            return rc;
        size_t want = st->needs_input_grad ? (size_t)(m.hdr.rows * st->in_dim) * sizeof(float) : 0;
        if (!interval_matches(e, &m.hdr, (int32_t)s) || m.hdr.na != want)
            rc = bv_error_set(err, BV_ERR_CORRUPT, "bad backward result for %s", st->name);
        else if (want_din)
            memcpy(gs->dact[s - 1] + m.hdr.row_begin * st->in_dim, m.a, want);
        bv_role_release(gs->t, &m);
        if (rc != BV_OK)
            return rc;
    }
    return BV_OK;
}

static bv_status gs_epoch(graph_server *gs, const bv_task_hdr *cmd, bv_task_hdr *reply,
                          bv_error *err)
{
    bv_graph_engine *e = gs->e;
    int64_t n = e->cfg.data->num_nodes;
    bv_status rc = BV_OK;
    for (size_t s = 0; s < e->nstages && rc == BV_OK; s++) {
        const bv_stage *st = e->stages[s];
        if (st->kind == BV_STAGE_GATHER) /* GA */
            e->cfg.compute_ops->spmm(gs->compute, e->adj_norm, 0, n, stage_input(gs, s),
                                     st->in_dim, gs->act[s]);
        else
            rc = gs_apply_vertex(gs, s, cmd, err);
    }
    if (rc == BV_OK)
        rc = gs_loss(gs, cmd, reply->stats, err);
    int64_t grad_messages = 0;
    for (size_t s = e->nstages; cmd->training && rc == BV_OK && s-- > 0;) {
        const bv_stage *st = e->stages[s];
        if (st->kind == BV_STAGE_GATHER) {
            if (s > 0) /* ∇GA: gradients flow back along reversed edges */
                e->cfg.compute_ops->spmm(gs->compute, e->adj_norm_t, 0, n, gs->dact[s],
                                         st->in_dim, gs->dact[s - 1]);
        } else {
            rc = gs_apply_vertex_backward(gs, s, cmd, err);
            grad_messages += e->cfg.intervals;
        }
        if (s > 0 && st->kind == BV_STAGE_TENSOR && !st->needs_input_grad)
            break; /* nothing before this stage needs a gradient */
    }
    reply->step = grad_messages;
    return rc;
}

static bv_status gs_setup(graph_server *gs, bv_error *err)
{
    bv_graph_engine *e = gs->e;
    gs->t = e->cfg.transport_ops;
    if (!(gs->inbox = gs->t->bind(e->transport, e->addr_gs, err)))
        return err->status;
    for (int i = 0; i < e->cfg.tensor_workers; i++)
        if (!(gs->to_tw[i] = bv_engine_connect(e, e->addr_tw[i], err)))
            return err->status;
    gs->compute = e->cfg.compute_ops->create(e->cfg.compute_opts, err);
    if (!gs->compute)
        return err->status ? err->status : BV_ERR_PLUGIN;
    gs->input_sent = calloc((size_t)e->cfg.intervals, sizeof *gs->input_sent);
    gs->act = calloc(e->nstages, sizeof *gs->act);
    gs->dact = calloc(e->nstages, sizeof *gs->dact);
    if (!gs->act || !gs->dact || !gs->input_sent)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in the graph server");
    int64_t n = e->cfg.data->num_nodes;
    for (size_t s = 0; s < e->nstages; s++) {
        size_t bytes = (size_t)(n * e->stages[s]->out_dim) * sizeof(float);
        gs->act[s] = bv_alloc_aligned(bytes);
        gs->dact[s] = bv_alloc_aligned(bytes);
        if (!gs->act[s] || !gs->dact[s])
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %s's vertex arrays",
                                e->stages[s]->name);
    }
    int64_t train = 0;
    for (int64_t i = 0; i < n; i++)
        train += e->cfg.data->split[i] == BV_SPLIT_TRAIN && e->cfg.data->labels[i] >= 0;
    gs->grad_scale = train ? 1.0f / (float)train : 0.0f;
    return BV_OK;
}

static void gs_teardown(graph_server *gs)
{
    bv_graph_engine *e = gs->e;
    for (size_t s = 0; gs->act && s < e->nstages; s++) {
        bv_free_aligned(gs->act[s]);
        bv_free_aligned(gs->dact[s]);
    }
    free(gs->act);
    free(gs->dact);
    free(gs->input_sent);
    if (gs->compute)
        e->cfg.compute_ops->destroy(gs->compute);
    for (int i = 0; i < BV_MAX_TENSOR_WORKERS; i++)
        if (gs->to_tw[i])
            gs->t->close(gs->to_tw[i]);
    if (gs->inbox)
        gs->t->close(gs->inbox);
}

void *bv_graph_server_main(void *engine)
{
    graph_server gs = {.e = engine};
    bv_error err = {0};
    bv_status st = gs_setup(&gs, &err);
    gs.to_coord = bv_engine_connect(gs.e, gs.e->addr_coord, &err);
    if (!gs.to_coord) {
        bv_log(BV_LOG_ERROR, "graph server: %s", err.msg);
        gs_teardown(&gs);
        return NULL;
    }
    if (st != BV_OK) {
        bv_role_send_error(gs.t, gs.to_coord, BV_ROLE_GS, &err);
    } else {
        bv_role_send(gs.t, gs.to_coord, BV_MSG_READY, BV_ROLE_GS, NULL, NULL, 0, NULL, 0, NULL, 0,
                     &err);
        for (;;) {
            bv_role_msg m;
            if (bv_role_recv(gs.t, gs.inbox, &m, BV_TIMEOUT_FOREVER, &err) != BV_OK) {
                bv_role_send_error(gs.t, gs.to_coord, BV_ROLE_GS, &err);
                continue;
            }
            uint16_t type = m.wire.type;
            if (type == BV_MSG_EPOCH) {
                bv_task_hdr reply = m.hdr;
                bv_error ep_err = {0};
                if (gs_epoch(&gs, &m.hdr, &reply, &ep_err) == BV_OK)
                    bv_role_send(gs.t, gs.to_coord, BV_MSG_EPOCH_DONE, BV_ROLE_GS, &reply, NULL,
                                 0, NULL, 0, NULL, 0, &err);
                else
                    bv_role_send_error(gs.t, gs.to_coord, BV_ROLE_GS, &ep_err);
            }
            bv_role_release(gs.t, &m);
            if (type == BV_MSG_SHUTDOWN)
                break;
        }
    }
    gs.t->close(gs.to_coord);
    gs_teardown(&gs);
    return NULL;
}
