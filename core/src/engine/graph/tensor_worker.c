/* Tensor worker role: stateless executor of a model's tensor tasks (ApplyVertex forward
 * and backward, the loss) on one vertex interval at a time, like a Dorylus Lambda. It
 * pulls the weights from the parameter server when a task names another version, and
 * pushes weight gradients to it.
 *
 * The same code serves as a serverless function worker (compute: lambda; lambda_pool.h):
 * started by its graph server's controller, it says READY to that server, keeps nothing
 * between tasks it is not sent again, acts out the faults the platform injects, holds
 * itself to its share of a core when the platform cannot, and ends when told to or when
 * its graph server has been silent for long. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_graph_internal.h"
#include "role_loop.h"
#include "sparse_rows.h"

/* The worker's own kept buffers, after the model's scratch slots. */
enum {
    TW_BUF_RESULT = BV_TASK_SCRATCH_SLOTS, /* a result sent back in a message */
    TW_BUF_DIN,                            /* a backward task's d(input) */
    TW_BUF_REDONE,                         /* a rematerialised forward output */
    TW_BUF_DSRC,                           /* an edge backward task's d(src), sent back */
    TW_BUF_DDST,                           /* and its d(dst) */
    TW_BUF_DLOGITS,                        /* a fused task's gradient of the logits */
    TW_BUFS
};

typedef struct tensor_worker {
    bv_graph_engine *e;
    int index;
    uint32_t id;
    const bv_transport_ops *t;
    bv_endpoint *inbox, *weights_in, *to_coord;
    bv_endpoint *to_gs[BV_MAX_GRAPH_SERVERS]; /* a result goes to the task's graph server */
    bv_endpoint *to_ps[BV_MAX_PARAM_SERVERS];
    bv_compute *compute;
    float *weights;      /* param_floats */
    float **param_ptrs;  /* into weights */
    int64_t version;     /* of weights; -1 none */
    /* Under a task gate: the version held before (an interval ahead of the others still
     * uses it, graph_pipeline.c), kept so that tasks of both versions in turn do not pull
     * every time; NULL without a gate. */
    float *weights_before;
    int64_t version_before;
    float *grads;        /* param_floats scratch */
    float **grad_ptrs;
    float **kept;       /* per interval: kept static input rows (BV_TASK_KEEP_INPUT) */
    size_t *kept_bytes;
    bv_csr **slices;    /* per interval: its in-edges (BV_TASK_KEEP_GRAPH) */
    bv_csr **kept_csr;  /* per interval: the kept input as CSR when it is sparse */
    bool function;      /* a serverless function worker */
    double cpu_share;   /* its share of a core, which a task marked BV_TASK_THROTTLE keeps to */
    /* Buffers kept from task to task (tw_buffer): the model's scratch slots
     * (bv_task_ctx.scratch), then the worker's own (TW_BUF_*). */
    void *buf[TW_BUFS];
    size_t buf_bytes[TW_BUFS];
} tensor_worker;

/* At least `bytes` bytes of kept buffer k, grown (never shrunk) as tasks need; NULL when
 * out of memory. A task's temporaries of megabytes, allocated and freed every task, were
 * mapped and zeroed afresh each time: glibc gives large blocks back to the kernel. */
static void *tw_buffer(tensor_worker *w, int k, size_t bytes)
{
    if (w->buf_bytes[k] < bytes) {
        bv_free_aligned(w->buf[k]);
        w->buf[k] = bv_alloc_aligned(bytes);
        w->buf_bytes[k] = w->buf[k] ? bytes : 0;
    }
    return w->buf[k];
}

static void *tw_scratch(void *owner, int slot, size_t bytes)
{
    return slot >= 0 && slot < BV_TASK_SCRATCH_SLOTS ? tw_buffer(owner, slot, bytes) : NULL;
}

/* The kept input rows as a CSR, if at most a quarter of them is nonzero (bag-of-words
 * features: ~1 %; dense features a dataset keeps dense, dataset.feature_storage): then the
 * model can skip the zeros (ctx.sparse_in). */
static bv_csr *sparse_rows(const float *x, int64_t rows, int64_t cols)
{
    int64_t nnz = 0;
    for (int64_t i = 0; i < rows * cols; i++)
        nnz += x[i] != 0.0f;
    if ((double)nnz > BV_FEATURES_SPARSE_DENSITY * (double)(rows * cols))
        return NULL;
    bv_csr *a = bv_csr_new(rows, cols, nnz);
    if (a)
        bv_csr_set_dense(a, x);
    return a;
}

/* Rows [row_begin, + rows) of the dataset's sparse features, which a worker thread shares
 * with its graph server: row pointers of their own (from 0), in one block with the struct
 * (bv_csr_free frees both: owned is 0), columns and values the dataset's. */
static bv_csr *sparse_rows_view(const tensor_worker *w, const bv_task_hdr *h, bv_error *err)
{
    const bv_graph_dataset *d = w->e->cfg.data;
    if (!bv_graph_features_sparse(d) || h->row_begin < 0 || h->rows < 0 ||
        h->row_begin > d->num_nodes - h->rows) {
        bv_error_set(err, BV_ERR_CORRUPT, "sparse rows [%lld, +%lld) of a dataset without them",
                     (long long)h->row_begin, (long long)h->rows);
        return NULL;
    }
    const bv_csr *x = &d->features_csr;
    bv_csr *v = calloc(1, sizeof *v + (size_t)(h->rows + 1) * sizeof(int64_t));
    if (!v) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld sparse rows", (long long)h->rows);
        return NULL;
    }
    int64_t base = x->rowptr[h->row_begin];
    v->nrows = h->rows;
    v->ncols = x->ncols;
    v->nnz = x->rowptr[h->row_begin + h->rows] - base;
    v->rowptr = (int64_t *)(void *)(v + 1);
    for (int64_t r = 0; r <= h->rows; r++)
        v->rowptr[r] = x->rowptr[h->row_begin + r] - base;
    v->colidx = x->colidx + base;
    v->values = x->values + base;
    v->owned = 0;
    return v;
}

/* A task's interval, named by its graph server (reply_to) and its index there: every
 * graph server has cfg.intervals of them. Kept inputs and graphs are per (server,
 * interval): slot tw_slot of tw_slots. */
static bool tw_interval_ok(const tensor_worker *w, const bv_task_hdr *h)
{
    return h->interval >= 0 && h->interval < w->e->cfg.intervals && h->reply_to >= 0 &&
           h->reply_to < w->e->ngs;
}

static size_t tw_slots(const tensor_worker *w)
{
    return (size_t)w->e->ngs * (size_t)w->e->cfg.intervals;
}

static size_t tw_slot(const tensor_worker *w, const bv_task_hdr *h)
{
    return (size_t)h->reply_to * (size_t)w->e->cfg.intervals + (size_t)h->interval;
}

/* ctx.sparse_in for a task of a stage that reads the features */
static const bv_csr *tw_sparse_input(const tensor_worker *w, const bv_task_hdr *h)
{
    if (w->e->vin[h->stage] >= 0 || !tw_interval_ok(w, h))
        return NULL;
    const bv_csr *a = w->kept_csr[tw_slot(w, h)];
    return a && a->nrows == h->rows ? a : NULL;
}

/* An edge task's inputs: every vertex's window (a: *n rows of in_dim; the whole graph's
 * vertices, or with several graph servers the sender's part with its ghosts) and the
 * interval's own rows' (b), in the message or, by reference, in the graph server's edge
 * inputs. */
static bool tw_edge_inputs(const tensor_worker *w, const bv_role_msg *m, const bv_stage *s,
                           int64_t *n, const float **src, const float **dst, bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    uint64_t row = (uint64_t)s->in_dim * sizeof(float), na = h->na;
    bv_array_ref ref = {0};
    if ((h->flags & BV_TASK_REF_A) && h->na == sizeof ref) {
        memcpy(&ref, m->a, sizeof ref);
        na = ref.bytes;
    }
    *src = *dst = NULL;
    if (row == 0 || na % row != 0 || na / row > (uint64_t)w->e->cfg.data->num_nodes ||
        ((h->flags & BV_TASK_REF_A) && h->na != sizeof ref) || h->rows < 1) {
        bv_error_set(err, BV_ERR_CORRUPT, "edge task for %s has wrong sizes", s->name);
        return false;
    }
    *n = (int64_t)(na / row);
    *src = (h->flags & BV_TASK_REF_A)
               ? bv_engine_shared_window(w->e, h->reply_to, &ref, (size_t)na, false, err)
               : (const float *)(const void *)m->a;
    if (*src)
        *dst = bv_engine_task_array(w->e, m, 1, (size_t)(h->rows * s->in_dim) * sizeof(float),
                                    err);
    return *dst != NULL;
}

/* The interval's edges over n source vertices: unpacked from the front of array c the
 * first time (*used: its bytes there), then kept. A backward task carries them only when
 * the worker cannot have kept them (a function worker's), before its other bytes. */
static const bv_csr *tw_graph(tensor_worker *w, const bv_role_msg *m, int64_t n, size_t *used,
                              bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    *used = 0;
    if (h->flags & BV_TASK_CACHED_GRAPH) {
        if (!w->slices[tw_slot(w, h)] || w->slices[tw_slot(w, h)]->nrows != h->rows ||
            w->slices[tw_slot(w, h)]->ncols != n) {
            bv_error_set(err, BV_ERR_CORRUPT, "tensor worker %d keeps no edges for interval %d",
                         w->index, h->interval);
            return NULL;
        }
        return w->slices[tw_slot(w, h)];
    }
    size_t head = (size_t)(h->rows + 1) * sizeof(int64_t);
    if (!(h->flags & BV_TASK_KEEP_GRAPH) || h->nc < head) {
        bv_error_set(err, BV_ERR_CORRUPT, "edge task without its edges");
        return NULL;
    }
    const int64_t *rp = (const int64_t *)(const void *)m->c;
    int64_t nnz = rp[h->rows];
    if (rp[0] != 0 || nnz < 0 || (uint64_t)nnz > (h->nc - head) / sizeof(int32_t)) {
        bv_error_set(err, BV_ERR_CORRUPT, "edge task with a malformed edge slice");
        return NULL;
    }
    bv_csr *g = bv_csr_new(h->rows, n, nnz);
    if (!g) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory for an edge slice");
        return NULL;
    }
    memcpy(g->rowptr, rp, head);
    memcpy(g->colidx, m->c + head, (size_t)nnz * sizeof(int32_t));
    bv_free_aligned(g->values);
    g->values = NULL;
    for (int64_t i = 0; i < h->rows; i++) /* validated before use, like every message */
        if (g->rowptr[i + 1] < g->rowptr[i])
            nnz = -1;
    for (int64_t e = 0; nnz >= 0 && e < g->nnz; e++)
        if (g->colidx[e] < 0 || g->colidx[e] >= n)
            nnz = -1;
    if (nnz < 0) {
        bv_csr_free(g);
        bv_error_set(err, BV_ERR_CORRUPT, "edge slice names a vertex out of range");
        return NULL;
    }
    bv_csr_free(w->slices[tw_slot(w, h)]);
    w->slices[tw_slot(w, h)] = g;
    *used = head + (size_t)nnz * sizeof(int32_t);
    return g;
}

/* The task's input rows (*in): from the message, or kept from an earlier task. Sparse
 * feature rows (BV_TASK_SPARSE_INPUT) are kept as the CSR they come as, and only so: *in
 * is then NULL and the model reads ctx.sparse_in. false with err set on a bad task. */
static bool tw_input(tensor_worker *w, const bv_role_msg *m, size_t want, const float **in,
                     bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    *in = NULL;
    if (!tw_interval_ok(w, h)) {
        bv_error_set(err, BV_ERR_CORRUPT, "task names interval %d of %d of graph server %d",
                     h->interval, w->e->cfg.intervals, h->reply_to);
        return false;
    }
    size_t slot = tw_slot(w, h);
    if (h->flags & BV_TASK_CACHED_INPUT) {
        if (!w->kept[slot] && w->kept_csr[slot] && w->kept_csr[slot]->nrows == h->rows)
            return true; /* sparse rows */
        if (!w->kept[slot] || w->kept_bytes[slot] != want) {
            bv_error_set(err, BV_ERR_CORRUPT, "tensor worker %d keeps no input for interval %d",
                         w->index, h->interval);
            return false;
        }
        *in = w->kept[slot];
        return true;
    }
    if (h->flags & BV_TASK_SPARSE_INPUT) {
        bv_csr *x = NULL;
        if (!(h->flags & BV_TASK_KEEP_INPUT) || (h->flags & BV_TASK_REF_A) ||
            w->e->vin[h->stage] >= 0)
            bv_error_set(err, BV_ERR_CORRUPT, "sparse rows for a stage that does not read "
                         "the features, or not to keep");
        else if (h->na == 0 && !w->e->serving) /* a thread beside the graph server */
            x = sparse_rows_view(w, h, err);
        else
            x = bv_sparse_rows_unpack(m->a, h->na, h->rows, w->e->stages[h->stage]->in_dim,
                                      err);
        if (!x)
            return false;
        free(w->kept[slot]);
        w->kept[slot] = NULL;
        w->kept_bytes[slot] = 0;
        bv_csr_free(w->kept_csr[slot]);
        w->kept_csr[slot] = x;
        return true;
    }
    if (!(*in = bv_engine_task_array(w->e, m, 0, want, err)))
        return false;
    if (h->flags & BV_TASK_KEEP_INPUT) {
        free(w->kept[slot]);
        w->kept[slot] = malloc(want + 1);
        if (!w->kept[slot]) {
            bv_error_set(err, BV_ERR_NOMEM, "out of memory keeping an input");
            return false;
        }
        memcpy(w->kept[slot], *in, want);
        w->kept_bytes[slot] = want;
        bv_csr_free(w->kept_csr[slot]);
        w->kept_csr[slot] =
            sparse_rows(w->kept[slot], h->rows, (int64_t)(want / sizeof(float)) /
                                                    (h->rows ? h->rows : 1));
    }
    return true;
}

/* Where a task's result of `bytes` bytes goes: the graph server's rows it named
 * (BV_TASK_REPLY_IN_PLACE), else the worker's buffer for results, which the reply
 * message then carries (*owned). */
static float *tw_result_buffer(tensor_worker *w, const bv_task_hdr *h, size_t bytes,
                               bool *owned, bv_error *err)
{
    *owned = !(h->flags & BV_TASK_REPLY_IN_PLACE);
    if (!*owned)
        return bv_engine_shared_window(w->e, h->reply_to, &h->reply, bytes, true, err);
    float *p = tw_buffer(w, TW_BUF_RESULT, bytes + sizeof(float));
    if (!p)
        bv_error_set(err, BV_ERR_NOMEM, "out of memory for a %zu-byte task result", bytes);
    return p;
}

/* A result's header: the task's, without its references, and with the version of the
 * weights this worker holds (those a task with weights computed with: its graph server
 * checks a backward used its forward's, graph_pipeline.c). */
static bv_task_hdr reply_hdr(const tensor_worker *w, const bv_task_hdr *h)
{
    bv_task_hdr r = *h;
    r.flags &= ~(BV_TASK_REF_A | BV_TASK_REF_B | BV_TASK_REF_C);
    r.version = w->version;
    return r;
}

/* The parameter server the task names (hdr.ps: its graph server picked it for the
 * interval's epoch, bv_engine_pick_servers), or NULL and err says why. */
static bv_endpoint *task_server(tensor_worker *w, const bv_task_hdr *h, bv_error *err)
{
    if (h->ps < 0 || h->ps >= w->e->nps) {
        bv_error_set(err, BV_ERR_CORRUPT, "task names parameter server %d of %d", h->ps,
                     w->e->nps);
        return NULL;
    }
    return w->to_ps[h->ps];
}

/* Each parameter's place in w->weights, as tasks see it. */
static void tw_point_params(tensor_worker *w)
{
    for (size_t i = 0; i < w->e->nparams; i++)
        w->param_ptrs[i] = w->weights + w->e->param_off[i];
}

/* Makes the version held before the one in use. */
static void tw_swap_weights(tensor_worker *w)
{
    float *p = w->weights;
    int64_t v = w->version;
    w->weights = w->weights_before;
    w->version = w->version_before;
    w->weights_before = p;
    w->version_before = v;
    tw_point_params(w);
}

/* The weights of the task's version, pulled from the task's parameter server when this
 * worker has another version (every server has the same weights). Under a gate the
 * version before is kept too, and a pull replaces the older of the two. */
static bv_status tw_ensure_weights(tensor_worker *w, const bv_task_hdr *task, bv_error *err)
{
    int64_t version = task->version;
    if (w->version == version)
        return BV_OK;
    if (w->weights_before) {
        tw_swap_weights(w); /* now w->weights is the older: used, or pulled into */
        if (w->version == version)
            return BV_OK;
    }
    bv_task_hdr h = {.version = version, .reply_to = (int32_t)w->index};
    bv_endpoint *ps = task_server(w, task, err);
    if (!ps)
        return err->status;
    bv_status st = bv_role_send(w->t, ps, BV_MSG_PULL, w->id, &h, NULL, 0, NULL, 0,
                                NULL, 0, err);
    if (st != BV_OK)
        return st;
    bv_role_msg m;
    for (;;) {
        st = bv_role_recv_valid(w->t, w->weights_in, &m, BV_TIMEOUT_FOREVER,
                                &w->e->frames_dropped, err);
        if (st != BV_OK)
            return st;
        /* a function worker's inbox may hold the answer to the pull of a worker killed
         * before it came, at this address (lambda_pool.h): not this pull's */
        if (!w->function || m.wire.type != BV_MSG_WEIGHTS || m.hdr.version == version)
            break;
        bv_role_release(w->t, &m);
    }
    if (m.wire.type != BV_MSG_WEIGHTS || m.hdr.na != w->e->param_floats * sizeof(float)) {
        st = bv_error_set(err, BV_ERR_CORRUPT, "tensor worker %d: bad weights message",
                          w->index);
    } else if (m.hdr.version != version) {
        st = bv_error_set(err, BV_ERR_INTERNAL, "tensor worker %d: asked for weights version "
                          "%lld, got %lld", w->index, (long long)version,
                          (long long)m.hdr.version);
    } else {
        memcpy(w->weights, m.a, m.hdr.na);
        w->version = m.hdr.version;
    }
    bv_role_release(w->t, &m);
    return st;
}

static bv_task_ctx tw_ctx(tensor_worker *w, const bv_task_hdr *h)
{
    const bv_graph_engine *e = w->e;
    return (bv_task_ctx){
        .k = e->cfg.compute_ops,
        .compute = w->compute,
        .seed = e->cfg.seed,
        .epoch = h->epoch,
        .training = h->training != 0,
        .row_begin = h->row_begin,
        .rows = h->rows,
        .num_nodes = e->cfg.data->num_nodes,
        .params = w->param_ptrs,
        .scratch = tw_scratch,
        .scratch_owner = w,
    };
}

/* The task names a stage of `kind`, rows inside the graph and one of the intervals. */
static bool task_ok(const tensor_worker *w, const bv_task_hdr *h, bv_stage_kind kind)
{
    return h->stage >= 0 && (size_t)h->stage < w->e->nstages &&
           w->e->stages[h->stage]->kind == kind && h->rows >= 0 && h->row_begin >= 0 &&
           h->row_begin + h->rows <= w->e->cfg.data->num_nodes && tw_interval_ok(w, h);
}

/* The task's weight gradients (w->grads) to the parameter server, which keeps them until
 * STEP. */
static bv_status tw_send_grads(tensor_worker *w, const bv_task_hdr *h, bv_error *err)
{
    bv_endpoint *ps = task_server(w, h, err);
    if (!ps)
        return err->status;
    return bv_role_send(w->t, ps, BV_MSG_GRADS, w->id, h, w->grads,
                        w->e->param_floats * sizeof(float), NULL, 0, NULL, 0, err);
}

/* A function worker's gradients go with its result, as array c, in one message: its graph
 * server sends them on to the parameter server with the task's first result. Sent apart,
 * a worker the platform killed just after both sends could have its small result reach
 * the graph server while its gradients died in its queue (a write to a server slow to
 * read): the task counted done, and the server's step waiting for them for ever. */
static size_t tw_result_grads(const tensor_worker *w, const void **grads)
{
    *grads = w->function ? w->grads : NULL;
    return w->function ? w->e->param_floats * sizeof(float) : 0;
}

/* Rows [r0, r1) of a as a CSR of their own, or NULL (out of memory). */
static bv_csr *csr_rows(const bv_csr *a, int64_t r0, int64_t r1)
{
    int64_t base = a->rowptr[r0], nnz = a->rowptr[r1] - base;
    bv_csr *c = bv_csr_new(r1 - r0, a->ncols, nnz);
    if (!c)
        return NULL;
    for (int64_t i = 0; i <= r1 - r0; i++)
        c->rowptr[i] = a->rowptr[r0 + i] - base;
    memcpy(c->colidx, a->colidx + base, (size_t)nnz * sizeof *c->colidx);
    if (a->values)
        memcpy(c->values, a->values + base, (size_t)nnz * sizeof *c->values);
    else {
        bv_free_aligned(c->values);
        c->values = NULL;
    }
    return c;
}

/* Worker-internal streaming (Dorylus §6): the forward of the first half of the rows while
 * the second half of the input still arrives (bv_role_link_rest), then of the second. Each
 * row's output is its own: the same bits as one call over all of them. */
static bv_status tw_forward_streamed(tensor_worker *w, const bv_task_hdr *h, const bv_task_ctx *ctx,
                                     const float *in, float *out, bv_error *err)
{
    const bv_stage *s = w->e->stages[h->stage];
    int64_t half = h->rows / 2;
    bv_csr *part[2] = {NULL, NULL};
    if (ctx->sparse_in && (!(part[0] = csr_rows(ctx->sparse_in, 0, half)) ||
                           !(part[1] = csr_rows(ctx->sparse_in, half, h->rows)))) {
        bv_csr_free(part[0]);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory streaming %s", s->name);
    }
    bv_status st = BV_OK;
    for (int k = 0; k < 2 && st == BV_OK; k++) {
        int64_t r0 = k ? half : 0;
        bv_task_ctx c = *ctx;
        c.row_begin += r0;
        c.rows = k ? h->rows - half : half;
        c.sparse_in = part[k];
        if (k == 1)
            bv_role_link_rest();
        st = w->e->cfg.model_ops->tensor_forward(w->e->cfg.model, (size_t)h->stage, &c,
                                                 in ? in + r0 * s->in_dim : NULL,
                                                 out + r0 * s->out_dim, err);
    }
    bv_csr_free(part[0]);
    bv_csr_free(part[1]);
    return st;
}

static bv_status tw_forward(tensor_worker *w, const bv_role_msg *m, bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    if (!task_ok(w, h, BV_STAGE_TENSOR))
        return bv_error_set(err, BV_ERR_CORRUPT, "forward task names a bad stage or rows");
    const bv_stage *s = w->e->stages[h->stage];
    const float *in;
    if (!tw_input(w, m, (size_t)(h->rows * s->in_dim) * sizeof(float), &in, err))
        return err->status;
    bv_status st = tw_ensure_weights(w, h, err);
    if (st != BV_OK)
        return st;
    size_t out_bytes = (size_t)(h->rows * s->out_dim) * sizeof(float);
    bool owned;
    float *out = tw_result_buffer(w, h, out_bytes, &owned, err);
    if (!out)
        return err->status;
    bv_task_ctx ctx = tw_ctx(w, h);
    ctx.sparse_in = tw_sparse_input(w, h);
    if ((h->flags & BV_TASK_STREAM) && h->rows >= 2)
        st = tw_forward_streamed(w, h, &ctx, in, out, err);
    else
        st = w->e->cfg.model_ops->tensor_forward(w->e->cfg.model, (size_t)h->stage, &ctx, in,
                                                 out, err);
    bv_task_hdr reply = reply_hdr(w, h);
    if (st == BV_OK)
        st = bv_role_send(w->t, w->to_gs[h->reply_to], BV_MSG_FWD_RESULT, w->id, &reply, out,
                          owned ? out_bytes : 0, NULL, 0, NULL, 0, err);
    return st;
}

/* Stage h->stage's backward from dout: its weight gradients in w->grads (sent to the
 * parameter server by a tensor worker; a function worker's go with its result,
 * tw_result_grads) and d(input) in din, added into the graph server's rows din_to when
 * the task names them (rows of one interval: no other task adds to them). */
static bv_status tw_apply_backward(tensor_worker *w, const bv_task_hdr *h,
                                   const bv_task_ctx *ctx, const float *in, const float *out,
                                   const float *dout, float *din, float *din_to,
                                   const bv_task_hdr *reply, bv_error *err)
{
    memset(w->grads, 0, w->e->param_floats * sizeof(float));
    bv_status st = w->e->cfg.model_ops->tensor_backward(w->e->cfg.model, (size_t)h->stage, ctx,
                                                        in, out, dout, din, w->grad_ptrs, err);
    if (st == BV_OK && !w->function)
        st = tw_send_grads(w, reply, err);
    if (st == BV_OK && din && din_to)
        w->e->cfg.compute_ops->axpy(w->compute, h->rows * w->e->stages[h->stage]->in_dim, 1.0f,
                                    din, din_to);
    return st;
}

static bv_status tw_backward(tensor_worker *w, const bv_role_msg *m, bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    if (!task_ok(w, h, BV_STAGE_TENSOR))
        return bv_error_set(err, BV_ERR_CORRUPT, "backward task names a bad stage or rows");
    const bv_stage *s = w->e->stages[h->stage];
    size_t in_bytes = (size_t)(h->rows * s->in_dim) * sizeof(float);
    size_t out_bytes = (size_t)(h->rows * s->out_dim) * sizeof(float);
    /* rematerialised (Dorylus §6): the forward's output is not sent, the worker computes it
     * again from the input, with the same weights and dropout draws: the same bits */
    bool remat = (h->flags & BV_TASK_REMAT) != 0;
    const float *in;
    bool have_in = tw_input(w, m, in_bytes, &in, err);
    const float *out =
        have_in && !remat ? bv_engine_task_array(w->e, m, 1, out_bytes, err) : NULL;
    const float *dout = have_in && (remat || out)
                            ? bv_engine_task_array(w->e, m, 2, out_bytes, err)
                            : NULL;
    if (!dout)
        return err->status;
    float *din_to = NULL; /* the graph server's rows to add d(input) into */
    if ((h->flags & BV_TASK_REPLY_IN_PLACE) &&
        !(din_to = bv_engine_shared_window(w->e, h->reply_to, &h->reply, in_bytes, true, err)))
        return err->status;
    bv_status st = tw_ensure_weights(w, h, err);
    if (st != BV_OK)
        return st;
    float *din =
        s->needs_input_grad ? tw_buffer(w, TW_BUF_DIN, in_bytes + sizeof(float)) : NULL;
    float *redone = remat ? tw_buffer(w, TW_BUF_REDONE, out_bytes + sizeof(float)) : NULL;
    if ((s->needs_input_grad && !din) || (remat && !redone))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in backward of %s", s->name);
    bv_task_ctx ctx = tw_ctx(w, h);
    ctx.sparse_in = tw_sparse_input(w, h);
    if (remat)
        st = w->e->cfg.model_ops->tensor_forward(w->e->cfg.model, (size_t)h->stage, &ctx, in,
                                                 redone, err);
    bv_task_hdr reply = reply_hdr(w, h);
    if (st == BV_OK)
        st = tw_apply_backward(w, h, &ctx, in, remat ? redone : out, dout, din, din_to, &reply,
                               err);
    const void *grads;
    size_t grad_bytes = tw_result_grads(w, &grads);
    if (st == BV_OK)
        st = bv_role_send(w->t, w->to_gs[h->reply_to], BV_MSG_BWD_RESULT, w->id, &reply, din,
                          din && !din_to ? in_bytes : 0, NULL, 0, grads, grad_bytes, err);
    return st;
}

/* The loss over an interval's logits, for the training, validation and test vertices in
 * turn: their sums, counts and correct predictions in stats[0 .. 9), and, with dlogits,
 * the training loss's gradient there. */
static bv_status tw_loss_stats(tensor_worker *w, const bv_task_hdr *h, const bv_task_ctx *ctx,
                               const float *logits, const int32_t *labels,
                               const uint8_t *split, float *dlogits, double stats[9],
                               bv_error *err)
{
    uint8_t *mask = malloc((size_t)h->rows + 1);
    if (!mask)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in the loss task");
    bv_status st = BV_OK;
    for (int s = 0; s < 3 && st == BV_OK; s++) {
        for (int64_t i = 0; i < h->rows; i++)
            mask[i] = split[i] == BV_SPLIT_TRAIN + s;
        bv_xent_result r = {0};
        float *d = (s == 0 && dlogits) ? dlogits : NULL;
        st = w->e->cfg.model_ops->loss(w->e->cfg.model, ctx, logits, labels, mask,
                                       h->grad_scale, d, &r, err);
        stats[3 * s] = r.loss_sum;
        stats[3 * s + 1] = (double)r.count;
        stats[3 * s + 2] = (double)r.correct;
    }
    free(mask);
    return st;
}

/* A loss or fused task's labels (array 1) and split (array 2) of its rows. */
static bool tw_labels(const tensor_worker *w, const bv_role_msg *m, const int32_t **labels,
                      const uint8_t **split, bv_error *err)
{
    *split = NULL;
    *labels = bv_engine_task_array(w->e, m, 1, (size_t)m->hdr.rows * sizeof(int32_t), err);
    if (*labels)
        *split = bv_engine_task_array(w->e, m, 2, (size_t)m->hdr.rows, err);
    return *split != NULL;
}

static bv_status tw_loss(tensor_worker *w, const bv_role_msg *m, bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    const bv_stage *last = w->e->stages[w->e->nstages - 1];
    if (h->rows < 0)
        return bv_error_set(err, BV_ERR_CORRUPT, "loss task has wrong sizes");
    size_t logit_bytes = (size_t)(h->rows * last->out_dim) * sizeof(float);
    const float *logits = bv_engine_task_array(w->e, m, 0, logit_bytes, err);
    const int32_t *labels;
    const uint8_t *split;
    if (!logits || !tw_labels(w, m, &labels, &split, err))
        return err->status;
    bool owned = false;
    float *dlogits = NULL;
    if (h->training && !(dlogits = tw_result_buffer(w, h, logit_bytes, &owned, err)))
        return err->status;
    bv_task_hdr reply = reply_hdr(w, h);
    bv_task_ctx ctx = tw_ctx(w, h);
    bv_status st = tw_loss_stats(w, h, &ctx, logits, labels, split, dlogits, reply.stats, err);
    if (st == BV_OK)
        st = bv_role_send(w->t, w->to_gs[h->reply_to], BV_MSG_LOSS_RESULT, w->id, &reply, dlogits,
                          owned ? logit_bytes : 0, NULL, 0, NULL, 0, err);
    return st;
}

/* Task fusion (Dorylus §6; compute: {plugin: lambda, fuse: true}): the last stage, a
 * tensor stage, its forward, the loss over its logits and, in training, its backward, in
 * one task. The logits and their gradient stay here; what goes back is the loss's figures,
 * d(input) and the weight gradients: the same operations in the same order as the three
 * tasks, so the same bits. */
static bv_status tw_fused(tensor_worker *w, const bv_role_msg *m, bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    if (!task_ok(w, h, BV_STAGE_TENSOR) || (size_t)h->stage != w->e->nstages - 1)
        return bv_error_set(err, BV_ERR_CORRUPT, "fused task names a bad stage or rows");
    const bv_stage *s = w->e->stages[h->stage];
    size_t in_bytes = (size_t)(h->rows * s->in_dim) * sizeof(float);
    size_t out_bytes = (size_t)(h->rows * s->out_dim) * sizeof(float);
    const float *in;
    const int32_t *labels;
    const uint8_t *split;
    if (!tw_input(w, m, in_bytes, &in, err) || !tw_labels(w, m, &labels, &split, err))
        return err->status;
    bool grad_in = h->training && s->needs_input_grad;
    float *din_to = NULL; /* the graph server's rows to add d(input) into */
    if (grad_in && (h->flags & BV_TASK_REPLY_IN_PLACE) &&
        !(din_to = bv_engine_shared_window(w->e, h->reply_to, &h->reply, in_bytes, true, err)))
        return err->status;
    bv_status st = tw_ensure_weights(w, h, err);
    if (st != BV_OK)
        return st;
    float *out = tw_buffer(w, TW_BUF_REDONE, out_bytes + sizeof(float));
    float *dout = h->training ? tw_buffer(w, TW_BUF_DLOGITS, out_bytes + sizeof(float)) : NULL;
    float *din = grad_in ? tw_buffer(w, TW_BUF_DIN, in_bytes + sizeof(float)) : NULL;
    if (!out || (h->training && !dout) || (grad_in && !din))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in the fused task of %s", s->name);
    bv_task_ctx ctx = tw_ctx(w, h);
    ctx.sparse_in = tw_sparse_input(w, h);
    st = w->e->cfg.model_ops->tensor_forward(w->e->cfg.model, (size_t)h->stage, &ctx, in, out,
                                             err);
    bv_task_hdr reply = reply_hdr(w, h);
    if (st == BV_OK)
        st = tw_loss_stats(w, h, &ctx, out, labels, split, dout, reply.stats, err);
    const void *grads = NULL;
    size_t grad_bytes = 0;
    if (st == BV_OK && h->training) {
        st = tw_apply_backward(w, h, &ctx, in, out, dout, din, din_to, &reply, err);
        grad_bytes = tw_result_grads(w, &grads);
    }
    if (st == BV_OK)
        st = bv_role_send(w->t, w->to_gs[h->reply_to], BV_MSG_FUSED_RESULT, w->id, &reply, din,
                          din && !din_to ? in_bytes : 0, NULL, 0, grads, grad_bytes, err);
    return st;
}

static bv_status tw_edge_forward(tensor_worker *w, const bv_role_msg *m, bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    if (!task_ok(w, h, BV_STAGE_EDGE))
        return bv_error_set(err, BV_ERR_CORRUPT, "edge task names a bad stage or rows");
    const bv_stage *s = w->e->stages[h->stage];
    int64_t n;
    const float *src, *dst;
    if (!tw_edge_inputs(w, m, s, &n, &src, &dst, err))
        return err->status;
    size_t used;
    const bv_csr *g = tw_graph(w, m, n, &used, err);
    if (!g)
        return err->status;
    if (used != h->nc)
        return bv_error_set(err, BV_ERR_CORRUPT, "edge task for %s has wrong sizes", s->name);
    bv_status st = tw_ensure_weights(w, h, err);
    if (st != BV_OK)
        return st;
    size_t out_bytes = (size_t)(g->nnz * s->out_dim) * sizeof(float);
    bool owned;
    float *out = tw_result_buffer(w, h, out_bytes, &owned, err);
    if (!out)
        return err->status;
    bv_task_ctx ctx = tw_ctx(w, h);
    ctx.edge_begin = h->edge_begin;
    st = w->e->cfg.model_ops->edge_forward(w->e->cfg.model, (size_t)h->stage, &ctx, g, src, dst,
                                           out, err);
    if (st == BV_OK)
        st = bv_role_send(w->t, w->to_gs[h->reply_to], BV_MSG_EDGE_FWD_RESULT, w->id, h, out,
                          owned ? out_bytes : 0, NULL, 0, NULL, 0, err);
    return st;
}

/* A backward edge task's forward values and their gradient, after the edges in array c:
 * their bytes, or (BV_TASK_REF_C) a reference to each in the graph server's arrays. */
static bool tw_edge_values(const tensor_worker *w, const bv_role_msg *m, size_t used,
                           size_t bytes, const float **out, const float **dout, bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    bv_array_ref refs[2];
    *out = *dout = NULL;
    if (h->nc != used + ((h->flags & BV_TASK_REF_C) ? sizeof refs : 2 * bytes)) {
        bv_error_set(err, BV_ERR_CORRUPT, "edge backward task for %s has wrong sizes",
                     w->e->stages[h->stage]->name);
        return false;
    }
    if (!(h->flags & BV_TASK_REF_C)) {
        *out = (const float *)(const void *)(m->c + used);
        *dout = (const float *)(const void *)(m->c + used + bytes);
        return true;
    }
    memcpy(refs, m->c + used, sizeof refs);
    if ((*out = bv_engine_shared_window(w->e, h->reply_to, &refs[0], bytes, false, err)))
        *dout = bv_engine_shared_window(w->e, h->reply_to, &refs[1], bytes, false, err);
    return *dout != NULL;
}

static bv_status tw_edge_backward(tensor_worker *w, const bv_role_msg *m, bv_error *err)
{
    const bv_task_hdr *h = &m->hdr;
    if (!task_ok(w, h, BV_STAGE_EDGE))
        return bv_error_set(err, BV_ERR_CORRUPT, "edge task names a bad stage or rows");
    const bv_stage *s = w->e->stages[h->stage];
    int64_t n;
    const float *src, *dst, *out, *dout;
    size_t used;
    const bv_csr *g = tw_edge_inputs(w, m, s, &n, &src, &dst, err)
                          ? tw_graph(w, m, n, &used, err)
                          : NULL;
    if (!g || !tw_edge_values(w, m, used, (size_t)(g->nnz * s->out_dim) * sizeof(float), &out,
                              &dout, err))
        return err->status;
    size_t src_bytes = (size_t)(n * s->in_dim) * sizeof(float);
    size_t dst_bytes = (size_t)(h->rows * s->in_dim) * sizeof(float);
    bv_status st = tw_ensure_weights(w, h, err);
    if (st != BV_OK)
        return st;
    /* d(src) of every vertex: into the slot the graph server named, or sent back */
    bool in_place = (h->flags & BV_TASK_REPLY_IN_PLACE) != 0;
    float *dsrc = in_place ? bv_engine_shared_window(w->e, h->reply_to, &h->reply, src_bytes,
                                                     true, err)
                           : tw_buffer(w, TW_BUF_DSRC, src_bytes + sizeof(float));
    if (in_place && !dsrc)
        return err->status;
    float *ddst = tw_buffer(w, TW_BUF_DDST, dst_bytes + sizeof(float));
    if (!dsrc || !ddst)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in ∇%s", s->name);
    bv_zero(bv_engine_movers(w->e), w->compute, n * s->in_dim, dsrc); /* where they lie */
    bv_zero(bv_engine_movers(w->e), w->compute, h->rows * s->in_dim, ddst);
    memset(w->grads, 0, w->e->param_floats * sizeof(float));
    bv_task_ctx ctx = tw_ctx(w, h);
    ctx.edge_begin = h->edge_begin;
    st = w->e->cfg.model_ops->edge_backward(w->e->cfg.model, (size_t)h->stage, &ctx, g, src,
                                            dst, out, dout, dsrc, ddst, w->grad_ptrs, err);
    if (st == BV_OK && !w->function)
        st = tw_send_grads(w, h, err);
    const void *grads;
    size_t grad_bytes = tw_result_grads(w, &grads);
    if (st == BV_OK)
        st = bv_role_send(w->t, w->to_gs[h->reply_to], BV_MSG_EDGE_BWD_RESULT, w->id, h, dsrc,
                          in_place ? 0 : src_bytes, ddst, dst_bytes, grads, grad_bytes, err);
    return st;
}

static bv_status tw_setup(void *self, bv_error *err)
{
    tensor_worker *w = self;
    bv_graph_engine *e = w->e;
    w->t = e->cfg.transport_ops;
    w->id = BV_ROLE_TW + (uint32_t)w->index;
    w->version = w->version_before = -1;
    if (bv_engine_connect_graph_servers(e, w->to_gs, err) != BV_OK)
        return err->status;
    bv_status st = bv_engine_connect_servers(e, w->to_ps, err);
    if (st != BV_OK)
        return st;
    w->weights = calloc(e->param_floats + 1, sizeof(float));
    w->grads = calloc(e->param_floats + 1, sizeof(float));
    w->param_ptrs = calloc(e->nparams + 1, sizeof(float *));
    w->grad_ptrs = calloc(e->nparams + 1, sizeof(float *));
    w->kept = calloc(tw_slots(w), sizeof *w->kept);
    w->kept_bytes = calloc(tw_slots(w), sizeof *w->kept_bytes);
    w->slices = calloc(tw_slots(w), sizeof *w->slices);
    w->kept_csr = calloc(tw_slots(w), sizeof *w->kept_csr);
    if (e->cfg.gate_ops)
        w->weights_before = calloc(e->param_floats + 1, sizeof(float));
    if (!w->weights || !w->grads || !w->param_ptrs || !w->grad_ptrs || !w->kept ||
        !w->kept_bytes || !w->slices || !w->kept_csr || (e->cfg.gate_ops && !w->weights_before))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in tensor worker %d", w->index);
    tw_point_params(w);
    for (size_t i = 0; i < e->nparams; i++)
        w->grad_ptrs[i] = w->grads + e->param_off[i];
    return BV_OK;
}

static void tw_teardown(void *self)
{
    tensor_worker *w = self;
    bv_engine_close_all(w->e, w->to_gs, BV_MAX_GRAPH_SERVERS); /* weights_in: the loop's */
    bv_engine_close_all(w->e, w->to_ps, BV_MAX_PARAM_SERVERS);
    free(w->weights);
    free(w->weights_before);
    free(w->grads);
    free(w->param_ptrs);
    free(w->grad_ptrs);
    for (int i = 0; w->kept && i < (int)tw_slots(w); i++)
        free(w->kept[i]);
    free(w->kept);
    free(w->kept_bytes);
    for (int i = 0; w->slices && i < (int)tw_slots(w); i++)
        bv_csr_free(w->slices[i]);
    free(w->slices);
    for (int i = 0; w->kept_csr && i < (int)tw_slots(w); i++)
        bv_csr_free(w->kept_csr[i]);
    for (int k = 0; k < TW_BUFS; k++)
        bv_free_aligned(w->buf[k]);
    free(w->kept_csr);
}

static bv_status tw_handle(void *self, bv_role_msg *m, bv_error *err)
{
    tensor_worker *w = self;
    switch (m->wire.type) {
    case BV_MSG_FWD_TASK: return tw_forward(w, m, err);
    case BV_MSG_BWD_TASK: return tw_backward(w, m, err);
    case BV_MSG_LOSS_TASK: return tw_loss(w, m, err);
    case BV_MSG_FUSED_TASK: return tw_fused(w, m, err);
    case BV_MSG_EDGE_FWD_TASK: return tw_edge_forward(w, m, err);
    case BV_MSG_EDGE_BWD_TASK: return tw_edge_backward(w, m, err);
    case BV_MSG_SEGMENT: return bv_engine_map_segment(w->e, m, err);
    default: return BV_OK;
    }
}

/* A function worker ends an invocation holding nothing of its data: what a task marked
 * kept (its input rows, their sparse form, its edges) is dropped. The buffers of its
 * temporaries stay for the next invocation, as a warm Lambda keeps its heap, while they
 * hold at most half the worker's memory cap; past that they go, since tasks of other
 * kinds add their own and a warm worker takes any kind of task next. Given back and
 * taken again every invocation, megabytes of them came as fresh pages each time: on the
 * 1M-vertex GCN, zeroing them was a third of the run's CPU time when the last stage's
 * three tasks ran fused (whose buffers are of other sizes), and fused epochs took
 * 1.2-1.5x the unfused ones instead of 0.85x (docs/benchmarks.md). */
static void tw_forget(tensor_worker *w)
{
    size_t held = 0;
    for (int k = 0; k < TW_BUFS; k++)
        held += w->buf_bytes[k];
    double cap = w->e->cfg.fn_limits.memory_mb;
    for (int k = 0; cap > 0 && (double)held > cap * (1 << 20) / 2 && k < TW_BUFS; k++) {
        bv_free_aligned(w->buf[k]);
        w->buf[k] = NULL;
        w->buf_bytes[k] = 0;
    }
    for (size_t i = 0; i < tw_slots(w); i++) {
        free(w->kept[i]);
        w->kept[i] = NULL;
        w->kept_bytes[i] = 0;
        bv_csr_free(w->kept_csr[i]);
        w->kept_csr[i] = NULL;
        bv_csr_free(w->slices[i]);
        w->slices[i] = NULL;
    }
}

/* A function worker's invocation: the platform's injected fault first (a failure ends the
 * worker without a result, a hang lasts until the platform kills it at the time limit),
 * then the task; with a share of a core the platform does not enforce (its graph server
 * marks the task), every message the task sends waits until the work before it has taken
 * cpu / share seconds (bv_role_throttle). */
static bv_status fn_handle(void *self, bv_role_msg *m, bv_error *err)
{
    tensor_worker *w = self;
    if (m->hdr.flags & BV_TASK_FAULT_FAIL)
        _exit(1);
    while (m->hdr.flags & BV_TASK_FAULT_HANG)
        pause();
    bv_role_throttle(m->hdr.flags & BV_TASK_THROTTLE ? w->cpu_share : 0);
    bv_status st = tw_handle(self, m, err);
    bv_role_throttle(0);
    if (w->kept)
        tw_forget(w);
    return st;
}

void *bv_tensor_worker_main(void *arg)
{
    bv_tw_arg *a = arg;
    tensor_worker w = {.e = a->engine, .index = a->index, .function = a->function};
    const bv_function_limits *fn = &w.e->cfg.fn_limits;
    w.cpu_share = w.function ? fn->cpu : 0;
    /* a function worker's graph server: the one whose share of the slots it is in */
    int gs = w.function ? w.index / bv_fn_slots(w.e) : 0;
    char name[32];
    snprintf(name, sizeof name, "%s %d", w.function ? "function worker" : "tensor worker",
             w.index);
    bv_role role = {
        .name = name, .id = BV_ROLE_TW + (uint32_t)w.index, .e = w.e, .self = &w,
        .setup = tw_setup, .handle = tw_handle, .teardown = tw_teardown,
        .life = &w.e->tw_life[w.index], .inbox_addr = w.e->addr_tw[w.index], .inbox = &w.inbox, .compute = &w.compute,
        .to_coord = &w.to_coord,
        .report_to = &w.to_gs[gs], /* the graph server waits on its tasks (the first, of
                                      several: any failure ends the run) */
        .inbox2_addr = w.e->addr_tw_weights[w.index], .inbox2 = &w.weights_in,
        .book_key = "tw", .index = w.index,
    };
    if (w.function) {
        role.handle = fn_handle;
        role.ready_to = &w.to_gs[gs];
        role.idle_exit_ms = (int)(1e3 * (fn->keep_warm + fn->time_limit) + 60000);
    }
    bv_role_run(&role);
    return NULL;
}
