/* Parameter server role: owns the weights and the Adam moments; serves weights to tensor
 * workers (PULL), collects their gradients (GRADS), and on STEP sums them in a fixed
 * (stage, graph server, interval) order and applies Adam (WeightUpdate), so the result does not depend
 * on the order in which gradients arrived.
 *
 * With several parameter servers, each holds all the weights: a tensor worker sends an
 * interval's gradients to one of them (tensor_worker.c), which forwards a copy to every
 * other; so each server sums the same gradients in the same order and applies the same
 * update, and all end every step with the same bits (the coordinator checks their
 * replies agree), as a single server would. */
#include <stdlib.h>
#include <string.h>

#include "engine_graph_internal.h"
#include "sorted.h"
#include "grow.h"
#include "role_loop.h"

typedef struct pending_grad {
    int64_t epoch;
    int32_t stage;
    int32_t part; /* the graph server whose interval it is */
    int32_t interval;
    bv_role_msg msg;
} pending_grad;

typedef struct param_server {
    bv_graph_engine *e;
    int index;
    bv_endpoint *to_peer[BV_MAX_PARAM_SERVERS]; /* the other servers (NULL for this one) */
    const bv_transport_ops *t;
    bv_endpoint *inbox, *to_coord;
    bv_endpoint *to_tw[BV_MAX_TENSOR_WORKERS];
    bv_compute *compute;
    float *w, *m, *v, *g;
    int64_t step;
    int64_t stepped_epoch; /* the epoch of the last STEP (-1: none) */
    int64_t version;
    /* Under a task gate (weight stashing, Dorylus §5.1): the weights as they were before
     * the last step, which an interval that ran ahead into the next epoch read in its
     * forward pass and its backward pass needs; -1: none. Intervals are at most one step
     * apart in weights (graph_pipeline.c), so one version is all there is to keep. */
    float *stash;
    int64_t stash_version;
    pending_grad *pending;
    size_t npending, cap;
    /* this epoch's load, for STEPPED (bv_engine_pick_servers): gradient messages from
     * the workers, and the seconds spent on each (keeping and forwarding it), of which
     * the median goes out (a process on a shared machine is now and then descheduled in
     * the middle of one: the mean would follow those) */
    int64_t taken;
    double seconds[64];
} param_server;

/* The median of this epoch's seconds per message (of the last 64), 0 with none. */
static double median_seconds(param_server *ps)
{
    size_t n = ps->taken < 64 ? (size_t)ps->taken : 64;
    return n ? bv_median(ps->seconds, n) : 0;
}

static int compare_pending(const void *a, const void *b)
{
    const pending_grad *x = a, *y = b;
    if (x->stage != y->stage)
        return x->stage < y->stage ? -1 : 1;
    if (x->part != y->part)
        return x->part < y->part ? -1 : 1;
    return (x->interval > y->interval) - (x->interval < y->interval);
}

static double decayed_sumsq(const param_server *ps)
{
    const bv_graph_engine *e = ps->e;
    double s = 0;
    for (size_t i = 0; i < e->nparams; i++)
        if (e->params[i]->weight_decay)
            s += e->cfg.compute_ops->sum_squares(ps->compute,
                                                 e->params[i]->rows * e->params[i]->cols,
                                                 ps->w + e->param_off[i]);
    return s;
}

static bv_status ps_keep_grad(param_server *ps, bv_role_msg *m, bv_error *err)
{
    if (m->hdr.na != ps->e->param_floats * sizeof(float))
        return bv_error_set(err, BV_ERR_CORRUPT, "gradient message has %llu bytes, expected %zu",
                            (unsigned long long)m->hdr.na, ps->e->param_floats * sizeof(float));
    /* A task on function workers has its gradients sent on by its graph server with its
     * first result only (lambda_pool.h); kept once all the same, should one come twice. */
    if (ps->e->cfg.functions && m->hdr.epoch <= ps->stepped_epoch)
        return BV_OK; /* after its epoch's step: the step had the first */
    for (size_t i = 0; ps->e->cfg.functions && i < ps->npending; i++) {
        const pending_grad *p = &ps->pending[i];
        if (p->epoch == m->hdr.epoch && p->stage == m->hdr.stage &&
            p->part == m->hdr.reply_to && p->interval == m->hdr.interval)
            return BV_OK; /* the loop releases m */
    }
    if (!(m->hdr.flags & BV_TASK_FORWARDED)) { /* from a tensor worker: the others need it */
        double t0 = bv_engine_now();
        bv_task_hdr h = m->hdr;
        h.flags |= BV_TASK_FORWARDED;
        for (int i = 0; i < ps->e->nps; i++) {
            bv_status st = ps->to_peer[i]
                               ? bv_role_send(ps->t, ps->to_peer[i], BV_MSG_GRADS, BV_ROLE_PS,
                                              &h, m->a, m->hdr.na, NULL, 0, NULL, 0, err)
                               : BV_OK;
            if (st != BV_OK)
                return st;
        }
        ps->seconds[ps->taken++ % 64] = bv_engine_now() - t0;
    }
    if (!bv_grow((void **)&ps->pending, &ps->cap, ps->npending, sizeof *ps->pending, 16))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for gradients");
    pending_grad *p = &ps->pending[ps->npending++];
    p->epoch = m->hdr.epoch;
    p->stage = m->hdr.stage;
    p->part = m->hdr.reply_to;
    p->interval = m->hdr.interval;
    p->msg = *m; /* ownership moves here */
    memset(m, 0, sizeof *m);
    return BV_OK;
}

/* The weights of the version asked for: the latest, or the stashed one. */
static bv_status ps_serve_pull(param_server *ps, const bv_role_msg *m, bv_error *err)
{
    int32_t tw = m->hdr.reply_to;
    if (tw < 0 || tw >= ps->e->cfg.tensor_workers)
        return bv_error_set(err, BV_ERR_CORRUPT, "pull from unknown tensor worker %d", tw);
    int64_t want = m->hdr.version;
    const float *w = want == ps->version                          ? ps->w
                     : ps->stash && want == ps->stash_version ? ps->stash
                                                                  : NULL;
    if (!w)
        return bv_error_set(err, BV_ERR_INTERNAL, "tensor worker %d asked for weights version "
                            "%lld, which parameter server %d does not keep (it has %lld%s)",
                            tw, (long long)want, ps->index, (long long)ps->version,
                            ps->stash_version >= 0 ? " and a stashed one before it" : "");
    bv_task_hdr h = {.version = want};
    bv_status st = bv_role_send(ps->t, ps->to_tw[tw], BV_MSG_WEIGHTS, BV_ROLE_PS, &h, w,
                                  ps->e->param_floats * sizeof(float), NULL, 0, NULL, 0, err);
    /* a function worker may be gone (lost, or retired) before the answer: not an error
     * of this server's, and its graph server invokes the task again */
    return ps->e->cfg.functions ? BV_OK : st;
}

/* WeightUpdate: waits for `expected` gradient messages, reduces, applies Adam. */
static bv_status ps_step(param_server *ps, const bv_task_hdr *cmd, bv_error *err)
{
    bv_graph_engine *e = ps->e;
    while ((int64_t)ps->npending < cmd->step) {
        bv_role_msg m;
        bv_status st = bv_role_recv_valid(ps->t, ps->inbox, &m, BV_TIMEOUT_FOREVER,
                                          &e->frames_dropped, err);
        if (st != BV_OK)
            return st;
        if (m.wire.type == BV_MSG_GRADS)
            st = ps_keep_grad(ps, &m, err);
        else if (m.wire.type == BV_MSG_PULL)
            st = ps_serve_pull(ps, &m, err);
        else
            st = bv_error_set(err, BV_ERR_INTERNAL, "parameter server: message %u during a step",
                              m.wire.type);
        bv_role_release(ps->t, &m);
        if (st != BV_OK)
            return st;
    }
    ps->stepped_epoch = cmd->epoch;
    qsort(ps->pending, ps->npending, sizeof *ps->pending, compare_pending);
    memset(ps->g, 0, e->param_floats * sizeof(float));
    for (size_t i = 0; i < ps->npending; i++) {
        e->cfg.compute_ops->axpy(ps->compute, (int64_t)e->param_floats, 1.0f,
                                 (const float *)ps->pending[i].msg.a, ps->g);
        bv_role_release(ps->t, &ps->pending[i].msg);
    }
    ps->npending = 0;
    double before = decayed_sumsq(ps);
    if (ps->stash) {
        memcpy(ps->stash, ps->w, e->param_floats * sizeof(float));
        ps->stash_version = ps->version;
    }
    ps->step++;
    for (size_t i = 0; i < e->nparams; i++) {
        bv_adam_params p = {
            .lr = cmd->lr,
            .beta1 = e->cfg.beta1,
            .beta2 = e->cfg.beta2,
            .eps = e->cfg.eps,
            .weight_decay = e->params[i]->weight_decay ? e->cfg.weight_decay : 0.0f,
            .decoupled = false,
            .step = ps->step,
        };
        size_t off = e->param_off[i];
        e->cfg.compute_ops->adam_step(ps->compute, e->params[i]->rows * e->params[i]->cols,
                                      ps->w + off, ps->g + off, ps->m + off, ps->v + off, &p);
    }
    ps->version++;
    bv_task_hdr reply = {.version = ps->version, .step = ps->step, .reply_to = ps->index};
    reply.stats[0] = before;
    reply.stats[1] = decayed_sumsq(ps);
    reply.stats[2] = median_seconds(ps); /* its load this epoch: not the same on every */
    reply.stats[3] = (double)ps->taken; /* server, so not compared */
    reply.stats[4] = ps->stash ? (double)(e->param_floats * sizeof(float)) : 0.0;
    ps->taken = 0;
    return bv_role_send(ps->t, ps->to_coord, BV_MSG_STEPPED, BV_ROLE_PS, &reply, NULL, 0, NULL,
                        0, NULL, 0, err);
}

static bv_status ps_send_state(param_server *ps, bv_error *err)
{
    size_t bytes = ps->e->param_floats * sizeof(float);
    bv_task_hdr h = {.version = ps->version, .step = ps->step};
    h.stats[0] = decayed_sumsq(ps);
    return bv_role_send(ps->t, ps->to_coord, BV_MSG_STATE, BV_ROLE_PS, &h, ps->w, bytes, ps->m,
                        bytes, ps->v, bytes, err);
}

static bv_status ps_set_state(param_server *ps, const bv_role_msg *m, bv_error *err)
{
    size_t bytes = ps->e->param_floats * sizeof(float);
    if (m->hdr.na != bytes || m->hdr.nb != bytes || m->hdr.nc != bytes)
        return bv_error_set(err, BV_ERR_CORRUPT, "state message has wrong sizes");
    memcpy(ps->w, m->a, bytes);
    memcpy(ps->m, m->b, bytes);
    memcpy(ps->v, m->c, bytes);
    ps->step = m->hdr.step;
    ps->version++;
    bv_task_hdr h = {.version = ps->version, .step = ps->step};
    h.stats[0] = decayed_sumsq(ps);
    return bv_role_send(ps->t, ps->to_coord, BV_MSG_STEPPED, BV_ROLE_PS, &h, NULL, 0, NULL, 0,
                        NULL, 0, err);
}

static bv_status ps_setup(void *self, bv_error *err)
{
    param_server *ps = self;
    bv_graph_engine *e = ps->e;
    ps->t = e->cfg.transport_ops;
    size_t n = e->param_floats + 1;
    ps->w = calloc(n, sizeof(float));
    ps->m = calloc(n, sizeof(float));
    ps->v = calloc(n, sizeof(float));
    ps->g = calloc(n, sizeof(float));
    ps->stash_version = -1;
    ps->stepped_epoch = -1;
    if (e->cfg.gate_ops && !(ps->stash = calloc(n, sizeof(float))))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the weight stash");
    if (!ps->w || !ps->m || !ps->v || !ps->g)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in the parameter server");
    for (int i = 0; i < e->nps; i++)
        if (i != ps->index && !(ps->to_peer[i] = bv_engine_connect(e, e->addr_ps[i], err)))
            return err->status;
    return BV_OK;
}

static void ps_teardown(void *self)
{
    param_server *ps = self;
    bv_engine_close_all(ps->e, ps->to_peer, BV_MAX_PARAM_SERVERS);
    for (size_t i = 0; i < ps->npending; i++)
        bv_role_release(ps->t, &ps->pending[i].msg);
    free(ps->pending);
    free(ps->w);
    free(ps->m);
    free(ps->v);
    free(ps->g);
    free(ps->stash);
}

static bv_status ps_handle(void *self, bv_role_msg *m, bv_error *err)
{
    param_server *ps = self;
    switch (m->wire.type) {
    case BV_MSG_GRADS: return ps_keep_grad(ps, m, err);
    case BV_MSG_PULL: return ps_serve_pull(ps, m, err);
    case BV_MSG_STEP: return ps_step(ps, &m->hdr, err);
    case BV_MSG_GET_STATE: return ps_send_state(ps, err);
    case BV_MSG_SET_STATE: return ps_set_state(ps, m, err);
    default: return BV_OK;
    }
}

void *bv_param_server_main(void *arg)
{
    const bv_tw_arg *a = arg;
    param_server ps = {.e = a->engine, .index = a->index};
    char name[48];
    bv_role_slot_name(ps.e, bv_slot_ps(ps.e, ps.index), name, sizeof name);
    bv_role role = {
        .name = name, .id = BV_ROLE_PS, .e = ps.e, .self = &ps,
        .setup = ps_setup, .handle = ps_handle, .teardown = ps_teardown,
        .life = &ps.e->ps_life[ps.index], .inbox_addr = ps.e->addr_ps[ps.index],
        .inbox = &ps.inbox, .compute = &ps.compute,
        .worker_addrs = ps.e->addr_tw_weights, .to_workers = ps.to_tw, /* WEIGHTS go there */
        .to_coord = &ps.to_coord, .report_to = &ps.to_coord,
        .book_key = "ps", .index = ps.index,
    };
    bv_role_run(&role);
    return NULL;
}
