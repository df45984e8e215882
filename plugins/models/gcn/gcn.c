/* GCN (Kipf & Welling, ICLR 2017) as graph-engine stages: for each layer l,
 *   AV_l: out = dropout(act(in)) W_l   (act = identity for l = 0, ReLU after)
 *   GA_l: out = Â in                    (Â = D^-1/2 (A + I) D^-1/2, on the graph server)
 * so H_{l+1} = Â dropout(relu(H_l)) W_l, which is Kipf's layer with the dropout of his
 * code (order: transform_first, the default: the gather runs at the narrower width).
 * Weight decay applies to the first layer only, as in Kipf's gcn/models.py.
 *
 * order: gather_first is Dorylus's layer (its GA, then AV): for each layer l,
 *   GA_l: out = Â in
 *   AV_l: out = act(dropout(in) W_l)    (act = ReLU, identity for the last layer)
 * so H_{l+1} = relu(dropout(Â H_l) W_l): dropout after the aggregation instead of before,
 * and the model ends with a tensor stage, whose task a function worker can fuse with the
 * loss and the next backward task (compute: {plugin: lambda, fuse: true}). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac.h"

#define GCN_MAX_LAYERS 8

struct bv_model {
    int layers;
    float dropout;
    bool gather_first;
    bv_stage stages[2 * GCN_MAX_LAYERS];
    bv_param_spec params[GCN_MAX_LAYERS];
    char names[3 * GCN_MAX_LAYERS][16];
};

static const bv_option gcn_options[] = {
    BV_OPT_INT_RANGE("hidden", "16", 1, 65536, "hidden units per layer"),
    BV_OPT_INT_RANGE("layers", "2", 1, GCN_MAX_LAYERS, "graph convolution layers"),
    BV_OPT_FLOAT_RANGE("dropout", "0.5", 0, 0.99, "dropout rate on each layer's input"),
    BV_OPT_CHOICE("order", "transform_first", "transform_first|gather_first",
                  "transform_first: Â (dropout(H) W), gathering at the output width; "
                  "gather_first: relu(dropout(Â H) W), as Dorylus (the model then ends with "
                  "a tensor stage)"),
    BV_OPT_END,
};

static bv_model *gcn_create(const bv_opts *opts, const bv_graph_shape *shape, bv_error *err)
{
    bv_model *m = calloc(1, sizeof *m);
    if (!m) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->layers = (int)bv_opts_int(opts, "layers");
    m->dropout = (float)bv_opts_float(opts, "dropout");
    m->gather_first = strcmp(bv_opts_str(opts, "order"), "gather_first") == 0;
    int64_t hidden = bv_opts_int(opts, "hidden");
    for (int l = 0; l < m->layers; l++) {
        int64_t in = l == 0 ? shape->num_features : hidden;
        int64_t out = l == m->layers - 1 ? shape->num_classes : hidden;
        snprintf(m->names[3 * l], sizeof m->names[0], "AV%d", l);
        snprintf(m->names[3 * l + 1], sizeof m->names[0], "GA%d", l);
        snprintf(m->names[3 * l + 2], sizeof m->names[0], "W%d", l);
        /* gather_first: GA_l reads the input (the features for l = 0, dense then) */
        int64_t ga_width = m->gather_first ? in : out;
        int av = m->gather_first ? 2 * l + 1 : 2 * l;
        m->stages[av] = (bv_stage){.kind = BV_STAGE_TENSOR, .name = m->names[3 * l],
                                   .in_dim = in, .out_dim = out, .needs_input_grad = l > 0,
                                   .sparse_input = l == 0 && !m->gather_first};
        m->stages[m->gather_first ? 2 * l : 2 * l + 1] =
            (bv_stage){.kind = BV_STAGE_GATHER, .name = m->names[3 * l + 1],
                       .in_dim = ga_width, .out_dim = ga_width};
        m->params[l] = (bv_param_spec){m->names[3 * l + 2], in, out, l == 0,
                                       BV_INIT_GLOROT_UNIFORM};
    }
    return m;
}

static void gcn_destroy(bv_model *m)
{
    free(m);
}

static size_t gcn_param_count(const bv_model *m)
{
    return (size_t)m->layers;
}

static const bv_param_spec *gcn_param(const bv_model *m, size_t i)
{
    return &m->params[i];
}

static size_t gcn_stage_count(const bv_model *m)
{
    return 2 * (size_t)m->layers;
}

static const bv_stage *gcn_stage(const bv_model *m, size_t i)
{
    return &m->stages[i];
}

/* Whether tensor stage `stage` applies ReLU to its input (transform_first, after the first
 * layer) or to its output (gather_first, but for the last layer). */
static bool gcn_relu_in(const bv_model *m, size_t stage)
{
    return !m->gather_first && stage > 0;
}

static bool gcn_relu_out(const bv_model *m, size_t stage)
{
    return m->gather_first && stage + 1 < 2 * (size_t)m->layers;
}

/* dropout(act(in)), the input of the stage's matrix product: in buf, or `in` itself where
 * neither applies (evaluation of the first layer, or of any under gather_first), which
 * needs no copy. */
static const float *gcn_stage_input(const bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                    const float *in, float *buf)
{
    const bv_stage *s = &m->stages[stage];
    int64_t n = ctx->rows * s->in_dim;
    bool drop = ctx->training && m->dropout > 0;
    if (gcn_relu_in(m, stage)) {
        ctx->k->relu_forward(ctx->compute, n, in, buf);
        in = buf;
    } else if (!drop) {
        return in; /* the features (or the gathered rows) as they are */
    }
    if (drop)
        ctx->k->dropout_forward(ctx->compute, n, m->dropout, ctx->seed,
                                (uint64_t)ctx->epoch * 64 + stage,
                                (uint64_t)(ctx->row_begin * s->in_dim), in, buf);
    return buf;
}

/* The first layer on sparse features: dropout(X) W0 over X's nonzeros only, with the
 * dense path's dropout mask (ctx->sparse_in, compute ABI 1.3). */
static bool gcn_sparse(const bv_task_ctx *ctx, size_t stage)
{
    return stage == 0 && ctx->sparse_in && ctx->k->spmm_dropout && ctx->k->spmm_dropout_backward_x;
}

static float gcn_rate(const bv_model *m, const bv_task_ctx *ctx)
{
    return ctx->training ? m->dropout : 0.0f;
}

static bv_status gcn_tensor_forward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                    const float *in, float *out, bv_error *err)
{
    const bv_stage *s = &m->stages[stage];
    if (gcn_sparse(ctx, stage)) {
        ctx->k->spmm_dropout(ctx->compute, ctx->sparse_in, gcn_rate(m, ctx), ctx->seed,
                             (uint64_t)ctx->epoch * 64 + stage,
                             (uint64_t)(ctx->row_begin * s->in_dim), s->in_dim, ctx->params[0],
                             s->out_dim, s->out_dim, out, s->out_dim);
        return BV_OK;
    }
    float *buf = bv_task_temp(ctx, 0, (size_t)(ctx->rows * s->in_dim + 1) * sizeof *buf);
    if (!buf)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in %s", s->name);
    const float *x = gcn_stage_input(m, stage, ctx, in, buf);
    ctx->k->gemm(ctx->compute, false, false, ctx->rows, s->out_dim, s->in_dim, 1.0f, x,
                 s->in_dim, ctx->params[stage / 2], s->out_dim, 0.0f, out, s->out_dim);
    if (gcn_relu_out(m, stage))
        ctx->k->relu_forward(ctx->compute, ctx->rows * s->out_dim, out, out);
    bv_task_temp_free(ctx, buf);
    return BV_OK;
}

static bv_status gcn_tensor_backward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                     const float *in, const float *out, const float *dout,
                                     float *din, float *const *dparams, bv_error *err)
{
    const bv_stage *s = &m->stages[stage];
    int64_t n = ctx->rows * s->in_dim;
    if (gcn_sparse(ctx, stage)) { /* dW0 += dropout(X)^T dout; X needs no gradient */
        ctx->k->spmm_dropout_backward_x(ctx->compute, ctx->sparse_in, gcn_rate(m, ctx),
                                        ctx->seed, (uint64_t)ctx->epoch * 64 + stage,
                                        (uint64_t)(ctx->row_begin * s->in_dim), s->in_dim, dout,
                                        s->out_dim, s->out_dim, dparams[0], s->out_dim);
        return BV_OK;
    }
    bool relu_out = gcn_relu_out(m, stage);
    float *buf = bv_task_temp(ctx, 0, (size_t)(n + 1) * sizeof *buf);
    float *dz = relu_out ? bv_task_temp(ctx, 1, (size_t)(ctx->rows * s->out_dim + 1) *
                                                    sizeof *dz)
                         : NULL;
    if (!buf || (relu_out && !dz)) {
        bv_task_temp_free(ctx, buf);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in backward of %s", s->name);
    }
    if (relu_out) { /* dz = dout where out = relu(z) > 0 */
        ctx->k->relu_backward(ctx->compute, ctx->rows * s->out_dim, out, dout, dz);
        dout = dz;
    }
    const float *x = gcn_stage_input(m, stage, ctx, in, buf); /* rematerialised, not stored */
    /* dW += x^T dout */
    ctx->k->gemm(ctx->compute, true, false, s->in_dim, s->out_dim, ctx->rows, 1.0f, x,
                 s->in_dim, dout, s->out_dim, 1.0f, dparams[stage / 2], s->out_dim);
    if (din) {
        /* dbuf = dout W^T, then back through dropout and ReLU */
        ctx->k->gemm(ctx->compute, false, true, ctx->rows, s->in_dim, s->out_dim, 1.0f, dout,
                     s->out_dim, ctx->params[stage / 2], s->out_dim, 0.0f, din, s->in_dim);
        if (ctx->training && m->dropout > 0)
            ctx->k->dropout_backward(ctx->compute, n, m->dropout, ctx->seed,
                                     (uint64_t)ctx->epoch * 64 + stage,
                                     (uint64_t)(ctx->row_begin * s->in_dim), din, din);
        if (gcn_relu_in(m, stage))
            ctx->k->relu_backward(ctx->compute, n, in, din, din); /* in > 0 iff relu(in) > 0 */
    }
    bv_task_temp_free(ctx, dz);
    bv_task_temp_free(ctx, buf);
    return BV_OK;
}

static bv_status gcn_loss(bv_model *m, const bv_task_ctx *ctx, const float *logits,
                          const int32_t *labels, const uint8_t *mask, float grad_scale,
                          float *dout, bv_xent_result *res, bv_error *err)
{
    const bv_stage *last = &m->stages[2 * m->layers - 1];
    ctx->k->softmax_xent(ctx->compute, ctx->rows, last->out_dim, logits, labels, mask,
                         grad_scale, dout, res);
    (void)err;
    return BV_OK;
}

static const bv_model_ops gcn_ops = {
    .engine = BV_ENGINE_GRAPH,
    .create = gcn_create,
    .destroy = gcn_destroy,
    .param_count = gcn_param_count,
    .param = gcn_param,
    .stage_count = gcn_stage_count,
    .stage = gcn_stage,
    .tensor_forward = gcn_tensor_forward,
    .tensor_backward = gcn_tensor_backward,
    .loss = gcn_loss,
    .stage_size = sizeof(bv_stage), /* ABI 1.4: lets bv_stage grow */
};

static const bv_plugin gcn_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "gcn", "0.1.0",
                     "graph convolutional network (Kipf & Welling 2017)"),
    .options = gcn_options,
    .engine = "graph", /* ABI 1.4: which engine drives it */
    .ops = &gcn_ops,
    .ops_size = sizeof gcn_ops,
};

BV_PLUGIN_ENTRY(model, gcn, gcn_plugin)
