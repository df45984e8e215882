/* An example model plugin built out of tree against the installed SDK: a two-layer
 * perceptron that ignores the graph. A starting point to copy (docs/plugins.md).
 *
 * Stages (the same shape as GCN's in model.h, without the two GATHER stages):
 *   AV0 = dropout(X) W0             features -> hidden, no input gradient needed
 *   AV1 = dropout(relu(AV0)) W1     hidden -> classes (the logits)
 * All arithmetic goes through the compute backend's kernels (ctx->k), so the plugin runs
 * on whatever backend the experiment names. */
#include <bivouac.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STAGE_AV0 = 0, STAGE_AV1 = 1, NUM_STAGES = 2 };
enum { PARAM_W0 = 0, PARAM_W1 = 1, NUM_PARAMS = 2 };

/* The core parses and range-checks these before create() sees them. The schema's range
 * is closed, so dropout's open upper end (p = 1 would drop everything and divide by 0)
 * is checked in create(). */
static const bv_option mlp_options[] = {
    BV_OPT_INT_RANGE("hidden", "32", 1, 4096, "width of the hidden layer"),
    BV_OPT_FLOAT_RANGE("dropout", "0.5", 0, 1, "dropout rate on each layer's input, in [0, 1)"),
    BV_OPT_END,
};

struct bv_model {
    int64_t features;
    int64_t hidden;
    int64_t classes;
    float dropout;
    bv_stage stages[NUM_STAGES];
    bv_param_spec params[NUM_PARAMS];
};

static bv_model *mlp_create(const bv_opts *opts, const bv_graph_shape *shape, bv_error *err)
{
    double p = bv_opts_float(opts, "dropout");
    if (p >= 1.0) {
        const bv_opt_value *v = bv_opts_find(opts, "dropout");
        if (v && v->pos.file)
            bv_error_set(err, BV_ERR_INVALID, "%s:%d:%d: 'dropout' must be below 1, got %g",
                         v->pos.file, v->pos.line, v->pos.col, p);
        else
            bv_error_set(err, BV_ERR_INVALID, "'dropout' must be below 1, got %g", p);
        return NULL;
    }
    if (shape->num_features < 1 || shape->num_classes < 2) {
        bv_error_set(err, BV_ERR_INVALID,
                     "mlp needs at least 1 feature and 2 classes, the dataset has %lld and %d",
                     (long long)shape->num_features, shape->num_classes);
        return NULL;
    }
    bv_model *m = calloc(1, sizeof *m);
    if (!m) {
        bv_error_set(err, BV_ERR_NOMEM, "mlp: out of memory");
        return NULL;
    }
    m->features = shape->num_features;
    m->hidden = bv_opts_int(opts, "hidden");
    m->classes = shape->num_classes;
    m->dropout = (float)p;
    /* Designated initialisers: the fields other stage kinds use (in_offset, heads, ...)
     * are zero, and the code keeps compiling when the SDK adds more. */
    m->stages[STAGE_AV0] = (bv_stage){.kind = BV_STAGE_TENSOR, .name = "AV0",
                                      .in_dim = m->features, .out_dim = m->hidden,
                                      .needs_input_grad = false};
    m->stages[STAGE_AV1] = (bv_stage){.kind = BV_STAGE_TENSOR, .name = "AV1",
                                      .in_dim = m->hidden, .out_dim = m->classes,
                                      .needs_input_grad = true};
    /* Weight decay on the first layer only, as in Kipf & Welling's GCN. */
    m->params[PARAM_W0] = (bv_param_spec){.name = "W0", .rows = m->features,
                                          .cols = m->hidden, .weight_decay = true,
                                          .init = BV_INIT_GLOROT_UNIFORM};
    m->params[PARAM_W1] = (bv_param_spec){.name = "W1", .rows = m->hidden,
                                          .cols = m->classes, .weight_decay = false,
                                          .init = BV_INIT_GLOROT_UNIFORM};
    return m;
}

static void mlp_destroy(bv_model *m)
{
    free(m);
}

static size_t mlp_param_count(const bv_model *m)
{
    return NUM_PARAMS;
}

static const bv_param_spec *mlp_param(const bv_model *m, size_t i)
{
    return i < NUM_PARAMS ? &m->params[i] : NULL;
}

static size_t mlp_stage_count(const bv_model *m)
{
    return NUM_STAGES;
}

static const bv_stage *mlp_stage(const bv_model *m, size_t i)
{
    return i < NUM_STAGES ? &m->stages[i] : NULL;
}

/* The dropout mask of element (row, j) of a stage's input depends only on the run seed,
 * the epoch, the stage and the global element index, never on how the rows were split
 * into intervals: stream = stage, offset = global row * in_dim. */
static uint64_t dropout_seed(const bv_task_ctx *ctx)
{
    return ctx->seed ^ ((uint64_t)(ctx->epoch + 1) * 0x9E3779B97F4A7C15ull);
}

static bool dropout_on(const bv_model *m, const bv_task_ctx *ctx)
{
    return ctx->training && m->dropout > 0.0f;
}

/* The input of stage's gemm, x = dropout(in) for AV0 and dropout(relu(in)) for AV1, in
 * *x. Points at in itself when there is nothing to do, else at a buffer the caller frees
 * (*scratch). Tasks of one model run concurrently, so scratch is per call. */
static bv_status stage_input(bv_model *m, size_t stage, const bv_task_ctx *ctx, const float *in,
                             const float **x, float **scratch, bv_error *err)
{
    int64_t dim = m->stages[stage].in_dim;
    int64_t n = ctx->rows * dim;
    bool relu = stage == STAGE_AV1;
    *scratch = NULL;
    *x = in;
    if (!relu && !dropout_on(m, ctx))
        return BV_OK;
    float *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof *buf);
    if (!buf)
        return bv_error_set(err, BV_ERR_NOMEM, "mlp %s: out of memory for %lld rows",
                            m->stages[stage].name, (long long)ctx->rows);
    const float *src = in;
    if (relu) {
        ctx->k->relu_forward(ctx->compute, n, in, buf);
        src = buf;
    }
    if (dropout_on(m, ctx))
        ctx->k->dropout_forward(ctx->compute, n, m->dropout, dropout_seed(ctx), stage,
                                (uint64_t)(ctx->row_begin * dim), src, buf);
    else if (src != buf)
        memcpy(buf, src, (size_t)n * sizeof *buf);
    *scratch = buf;
    *x = buf;
    return BV_OK;
}

static bv_status mlp_tensor_forward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                    const float *in, float *out, bv_error *err)
{
    if (stage >= NUM_STAGES)
        return bv_error_set(err, BV_ERR_INTERNAL, "mlp has no stage %zu", stage);
    const bv_stage *s = &m->stages[stage];
    const float *x;
    float *scratch;
    bv_status st = stage_input(m, stage, ctx, in, &x, &scratch, err);
    if (st != BV_OK)
        return st;
    /* out[rows x out] = x[rows x in] W[in x out] */
    ctx->k->gemm(ctx->compute, false, false, ctx->rows, s->out_dim, s->in_dim, 1.0f, x,
                 s->in_dim, ctx->params[stage], s->out_dim, 0.0f, out, s->out_dim);
    free(scratch);
    return BV_OK;
}

static bv_status mlp_tensor_backward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                     const float *in, const float *out, const float *dout,
                                     float *din, float *const *dparams, bv_error *err)
{
    if (stage >= NUM_STAGES)
        return bv_error_set(err, BV_ERR_INTERNAL, "mlp has no stage %zu", stage);
    const bv_stage *s = &m->stages[stage];
    const float *x;
    float *scratch;
    /* Rematerialise x rather than keep it from forward: the mask is recomputed from
     * (seed, stream, offset), so it is the same one. */
    bv_status st = stage_input(m, stage, ctx, in, &x, &scratch, err);
    if (st != BV_OK)
        return st;
    /* dW += x^T dout (ADD: the engine sums the intervals' contributions). */
    ctx->k->gemm(ctx->compute, true, false, s->in_dim, s->out_dim, ctx->rows, 1.0f, x,
                 s->in_dim, dout, s->out_dim, 1.0f, dparams[stage], s->out_dim);
    free(scratch);

    if (din && stage == STAGE_AV1) {
        int64_t n = ctx->rows * s->in_dim;
        /* dx = dout W^T, then back through dropout and relu into din. */
        ctx->k->gemm(ctx->compute, false, true, ctx->rows, s->in_dim, s->out_dim, 1.0f, dout,
                     s->out_dim, ctx->params[stage], s->out_dim, 0.0f, din, s->in_dim);
        if (dropout_on(m, ctx))
            ctx->k->dropout_backward(ctx->compute, n, m->dropout, dropout_seed(ctx), stage,
                                     (uint64_t)(ctx->row_begin * s->in_dim), din, din);
        /* relu(in) > 0 exactly where in > 0, so in serves as relu's forward output. */
        ctx->k->relu_backward(ctx->compute, n, in, din, din);
    }
    return BV_OK;
}

static bv_status mlp_loss(bv_model *m, const bv_task_ctx *ctx, const float *logits,
                          const int32_t *labels, const uint8_t *mask, float grad_scale,
                          float *dout, bv_xent_result *res, bv_error *err)
{
    ctx->k->softmax_xent(ctx->compute, ctx->rows, m->classes, logits, labels, mask, grad_scale,
                         dout, res);
    return BV_OK;
}

static const bv_model_ops mlp_ops = {
    .create = mlp_create,
    .destroy = mlp_destroy,
    .param_count = mlp_param_count,
    .param = mlp_param,
    .stage_count = mlp_stage_count,
    .stage = mlp_stage,
    .tensor_forward = mlp_tensor_forward,
    .tensor_backward = mlp_tensor_backward,
    .loss = mlp_loss,
    .stage_size = sizeof(bv_stage), /* ABI 1.4: lets bv_stage grow */
};

/* ---- Exports: functions a Lua policy may call (docs/plugins.md, "Exports") ----
 * A policy calls these as plugins.model.mlp.weights(1433, 7, 64) and
 * plugins.model.mlp.describe("cora"). They are pure (no '!'), so a policy may call them
 * in set-up too. */

/* weights(features, classes, hidden): how many weights this model has for those sizes. */
static int64_t mlp_export_weights(int64_t features, int64_t classes, int64_t hidden)
{
    if (features < 1 || classes < 1 || hidden < 1) {
        bv_export_error("sizes must be at least 1, got %lld, %lld, %lld", (long long)features,
                        (long long)classes, (long long)hidden);
        return 0;
    }
    return features * hidden + hidden * classes;
}

/* describe(name): a string back. The core copies it before the next call, so a
 * thread-local buffer is enough. */
static const char *mlp_export_describe(const char *name)
{
    static _Thread_local char text[128];
    snprintf(text, sizeof text, "two-layer perceptron on %s", name);
    return text;
}

static const bv_export mlp_exports[] = {
    {"weights", "i:iii", (void (*)(void))mlp_export_weights,
     "weights of the model for (features, classes, hidden)"},
    {"describe", "s:s", (void (*)(void))mlp_export_describe, "one line about the model"},
    {NULL, NULL, NULL, NULL},
};

static const bv_plugin mlp_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "mlp", "0.1.0",
                     "two-layer perceptron on the features alone (example plugin)"),
    .options = mlp_options,
    .engine = "graph", /* ABI 1.4: which engine drives it */
    .ops = &mlp_ops,
    .ops_size = sizeof mlp_ops,
    /* .probe left NULL: plain C on the compute backend runs anywhere. */
    .exports = mlp_exports, /* optional; ABI 1.5 for '!' and 'b' */
};

/* The one exported symbol: bv_model_mlp_plugin, found in model_mlp.so. */
BV_PLUGIN_ENTRY(model, mlp, mlp_plugin)
