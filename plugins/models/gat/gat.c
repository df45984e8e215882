/* GAT (Veličković et al., ICLR 2018) as graph-engine stages. Layer l with K heads of F'
 * units each:
 *   AV_l  (vertex): x = dropout(act(in)), Z = x W_l, and per head the two attention terms
 *                   s_src = Z_h · a_src_h, s_dst = Z_h · a_dst_h; row = [Z | s_src | s_dst]
 *                   (act = identity for l = 0, ELU(in + b_{l-1}) after).
 *   AE_l  (edge):   α = dropout(softmax over v's in-edges (and self) of
 *                   LeakyReLU(s_src[u] + s_dst[v])), per head — Dorylus's AE task.
 *   GA_l  (gather): out[v, h] = Σ_u α[uv, h] Z[u, h]  (heads concatenated).
 *   OUT   (vertex): logits = mean over the output heads + b_out.
 * Weight decay applies to W and a, not to biases, as in the reference implementation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac.h"

#define GAT_MAX_LAYERS 4
#define GAT_STAGES_PER_LAYER 3

/* the tasks' temporaries (bv_task_temp): each its own scratch slot */
enum { T_ACT, T_X, T_Z, T_DX, T_DZ, T_PRE, T_ALPHA, T_D };

/* parameter slots of layer l: W, a_src, a_dst, b (bias added after aggregation) */
enum { P_W = 0, P_ASRC = 1, P_ADST = 2, P_B = 3, P_PER_LAYER = 4 };

struct bv_model {
    int layers;
    int heads[GAT_MAX_LAYERS];
    int64_t head_dim[GAT_MAX_LAYERS];
    int64_t in_width[GAT_MAX_LAYERS];
    float dropout, attn_dropout, slope;
    size_t nstages, nparams;
    bv_stage stages[GAT_MAX_LAYERS * GAT_STAGES_PER_LAYER + 1];
    bv_param_spec params[GAT_MAX_LAYERS * P_PER_LAYER];
    char names[GAT_MAX_LAYERS * (GAT_STAGES_PER_LAYER + P_PER_LAYER) + 1][24];
};

static const bv_option gat_options[] = {
    BV_OPT_INT_RANGE("layers", "2", 1, GAT_MAX_LAYERS, "attention layers"),
    BV_OPT_INT_RANGE("heads", "8", 1, 64, "attention heads of each hidden layer"),
    BV_OPT_INT_RANGE("hidden", "64", 1, 65536,
                     "hidden width of each hidden layer: heads x units per head, concatenated"),
    BV_OPT_INT_RANGE("out_heads", "1", 1, 64, "heads of the output layer (averaged)"),
    BV_OPT_FLOAT_RANGE("dropout", "0.6", 0, 0.99, "dropout on each layer's input"),
    BV_OPT_FLOAT_RANGE("attn_dropout", "0.6", 0, 0.99, "dropout on attention coefficients"),
    BV_OPT_FLOAT_RANGE("negative_slope", "0.2", 0, 1, "LeakyReLU slope of attention logits"),
    BV_OPT_END,
};

static bv_status gat_validate(const bv_opts *opts, bv_diag *diag)
{
    int64_t heads = bv_opts_int(opts, "heads"), hidden = bv_opts_int(opts, "hidden");
    if (hidden % heads == 0)
        return BV_OK;
    const bv_opt_value *v = bv_opts_find(opts, bv_opts_find(opts, "hidden")->from_user
                                                   ? "hidden"
                                                   : "heads");
    bv_diag_add(diag, v->pos.file ? &v->pos : NULL,
                "'hidden' (%lld) must be a multiple of 'heads' (%lld): each head gets "
                "hidden / heads units", (long long)hidden, (long long)heads);
    return BV_ERR_INVALID;
}

static char *name_slot(bv_model *m, size_t *next, const char *fmt, int l)
{
    char *n = m->names[(*next)++];
    snprintf(n, sizeof m->names[0], fmt, l);
    return n;
}

static bv_model *gat_create(const bv_opts *opts, const bv_graph_shape *shape, bv_error *err)
{
    bv_model *m = calloc(1, sizeof *m);
    if (!m) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->layers = (int)bv_opts_int(opts, "layers");
    m->dropout = (float)bv_opts_float(opts, "dropout");
    m->attn_dropout = (float)bv_opts_float(opts, "attn_dropout");
    m->slope = (float)bv_opts_float(opts, "negative_slope");
    int hidden_heads = (int)bv_opts_int(opts, "heads");
    int64_t hidden = bv_opts_int(opts, "hidden");
    size_t names = 0;
    int64_t width = shape->num_features;
    for (int l = 0; l < m->layers; l++) {
        bool last = l == m->layers - 1;
        int k = last ? (int)bv_opts_int(opts, "out_heads") : hidden_heads;
        int64_t hd = last ? shape->num_classes : hidden / hidden_heads;
        m->heads[l] = k;
        m->head_dim[l] = hd;
        m->in_width[l] = width;
        int64_t z = k * hd;
        size_t av = m->nstages;
        m->stages[m->nstages++] = (bv_stage){
            .kind = BV_STAGE_TENSOR, .name = name_slot(m, &names, "AV%d", l),
            .in_dim = width, .out_dim = z + 2 * k, .needs_input_grad = l > 0,
            .sparse_input = l == 0};
        size_t ae = m->nstages;
        m->stages[m->nstages++] = (bv_stage){
            .kind = BV_STAGE_EDGE, .name = name_slot(m, &names, "AE%d", l), .in_dim = 2 * k,
            .out_dim = k, .in_offset = z, .heads = k};
        m->stages[m->nstages++] = (bv_stage){
            .kind = BV_STAGE_GATHER, .name = name_slot(m, &names, "GA%d", l), .in_dim = z,
            .out_dim = z, .heads = k, .weighted = true, .weights_stage = ae};
        (void)av;
        bv_param_spec *p = &m->params[l * P_PER_LAYER];
        p[P_W] = (bv_param_spec){name_slot(m, &names, "W%d", l), width, z, true,
                                 BV_INIT_GLOROT_UNIFORM};
        p[P_ASRC] = (bv_param_spec){name_slot(m, &names, "a_src%d", l), k, hd, true,
                                    BV_INIT_GLOROT_UNIFORM};
        p[P_ADST] = (bv_param_spec){name_slot(m, &names, "a_dst%d", l), k, hd, true,
                                    BV_INIT_GLOROT_UNIFORM};
        p[P_B] = (bv_param_spec){name_slot(m, &names, "b%d", l), 1, last ? hd : z, false,
                                 BV_INIT_ZEROS};
        width = z;
    }
    m->stages[m->nstages++] = (bv_stage){
        .kind = BV_STAGE_TENSOR, .name = "OUT", .in_dim = width,
        .out_dim = shape->num_classes, .needs_input_grad = true};
    m->nparams = (size_t)m->layers * P_PER_LAYER;
    return m;
}

static void gat_destroy(bv_model *m)
{
    free(m);
}

static size_t gat_param_count(const bv_model *m)
{
    return m->nparams;
}

static const bv_param_spec *gat_param(const bv_model *m, size_t i)
{
    return &m->params[i];
}

static size_t gat_stage_count(const bv_model *m)
{
    return m->nstages;
}

static const bv_stage *gat_stage(const bv_model *m, size_t i)
{
    return &m->stages[i];
}

static void temps_free(const bv_task_ctx *ctx, float **p, int n)
{
    for (int i = 0; i < n; i++)
        bv_task_temp_free(ctx, p[i]);
}

static uint64_t stream_of(const bv_task_ctx *ctx, size_t stage)
{
    return (uint64_t)ctx->epoch * 64 + stage;
}

/* A back end with memory of its own (mem_alloc: a GPU's) is given every step as an op: a
 * host loop over its memory would move the pages to the host, and the next kernel would
 * move them back (docs/cuda.md). Where the kernels run on the host, the host loops stay:
 * they do in one pass what the ops do in several, and their sums keep the cpu's bits. */
static bool on_device(const bv_task_ctx *ctx)
{
    return ctx->k->mem_alloc != NULL;
}

/* a = in + b, rows of w */
static void add_input_bias(const bv_task_ctx *ctx, int64_t w, const float *in, const float *b,
                           float *a)
{
    if (on_device(ctx)) {
        bv_copy_rows(ctx->k, ctx->compute, 1, ctx->rows * w, in, 0, a, 0, false);
        ctx->k->add_bias(ctx->compute, ctx->rows, w, b, a);
        return;
    }
    for (int64_t r = 0; r < ctx->rows; r++)
        for (int64_t j = 0; j < w; j++)
            a[r * w + j] = in[r * w + j] + b[j];
}

/* act(in): the input itself for the first layer (no copy), ELU(in + b_{l-1}) into a
 * after. */
static const float *av_activation(const bv_model *m, int l, const bv_task_ctx *ctx,
                                  const float *in, float *a)
{
    int64_t w = m->in_width[l], n = ctx->rows * w;
    if (l == 0)
        return in;
    add_input_bias(ctx, w, in, ctx->params[(l - 1) * P_PER_LAYER + P_B], a);
    ctx->k->elu_forward(ctx->compute, n, a, a);
    return a;
}

/* Dropout streams of AV_l: each head drops its own input elements (the reference
 * attn_head applies tf.nn.dropout to the input once per head), and the projected features
 * are dropped again before aggregation, while the attention terms use them undropped. */
static uint64_t input_offset(const bv_task_ctx *ctx, int64_t w, int h)
{
    return ((uint64_t)h * (uint64_t)ctx->num_nodes + (uint64_t)ctx->row_begin) * (uint64_t)w;
}

/* How far apart two heads' draws for the same element are: input_offset's step in h. */
static uint64_t head_stride(const bv_task_ctx *ctx, int64_t w)
{
    return (uint64_t)ctx->num_nodes * (uint64_t)w;
}

static uint64_t features_stream(const bv_task_ctx *ctx, size_t stage)
{
    return stream_of(ctx, stage) + 32;
}

/* The first layer on sparse features (ctx->sparse_in, compute ABI 1.3): each head's
 * dropout(X) W_h over X's nonzeros only, with the dense path's masks. */
/* Whether this pass drops out the layers' inputs (training, with a dropout rate). */
static bool gat_dropping(const bv_model *m, const bv_task_ctx *ctx)
{
    return ctx->training && m->dropout > 0;
}

static bool gat_sparse(const bv_task_ctx *ctx, int l)
{
    return l == 0 && ctx->sparse_in && ctx->k->spmm_dropout && ctx->k->spmm_dropout_backward_x;
}

static float gat_rate(const bv_model *m, const bv_task_ctx *ctx)
{
    return ctx->training ? m->dropout : 0.0f;
}

/* That first layer with every head in one sweep over X's nonzeros (compute ABI 1.7): the
 * same bits as head by head, a fraction of the passes. */
static bool gat_sparse_fused(const bv_task_ctx *ctx, int l)
{
    return gat_sparse(ctx, l) && ctx->k->spmm_dropout_heads &&
           ctx->k->spmm_dropout_heads_backward_x;
}

/* Several heads on a dense input (compute ABI 1.18), training with dropout: every head's
 * dropout_h(a) W_h in one sweep over a, with the masks of the pass per head below. One
 * head keeps its dropout pass and gemm: there is nothing to share. */
static bool gat_dense_fused(const bv_model *m, const bv_task_ctx *ctx, int l)
{
    return !gat_sparse(ctx, l) && m->heads[l] > 1 && gat_dropping(m, ctx) &&
           ctx->k->dense_dropout_heads && ctx->k->dense_dropout_heads_backward_x;
}

/* The dropped input x_h of av_project_head, made per head (and so a temporary) */
static bool gat_needs_x(const bv_model *m, const bv_task_ctx *ctx, int l)
{
    return !gat_sparse(ctx, l) && !gat_dense_fused(m, ctx, l) && ctx->training &&
           m->dropout > 0;
}

/* x_h = dropout_h(a); Z_h = x_h W_h (head h's columns of Z) */
static void av_project_head(const bv_model *m, int l, size_t stage, const bv_task_ctx *ctx,
                            int h, const float *a, float *x, float *zb)
{
    int64_t hd = m->head_dim[l], z = m->heads[l] * hd, w = m->in_width[l];
    int64_t n = ctx->rows * w;
    const float *W = ctx->params[l * P_PER_LAYER + P_W];
    if (gat_sparse(ctx, l)) {
        ctx->k->spmm_dropout(ctx->compute, ctx->sparse_in, gat_rate(m, ctx), ctx->seed,
                             stream_of(ctx, stage), input_offset(ctx, w, h), w, W + h * hd, z,
                             hd, zb + h * hd, z);
        return;
    }
    const float *xh = a; /* without dropout, x_h is a itself */
    if (gat_dropping(m, ctx)) {
        ctx->k->dropout_forward(ctx->compute, n, m->dropout, ctx->seed, stream_of(ctx, stage),
                                input_offset(ctx, w, h), a, x);
        xh = x;
    }
    ctx->k->gemm(ctx->compute, false, false, ctx->rows, hd, w, 1.0f, xh, w, W + h * hd, z,
                 0.0f, zb + h * hd, z);
}

/* Every head's x_h and Z_h (zb): one call without dropout, or on sparse features or several
 * heads of a dense input when the back end has it. */
static void av_project(const bv_model *m, int l, size_t stage, const bv_task_ctx *ctx,
                       const float *a, float *x, float *zb)
{
    int64_t hd = m->head_dim[l], z = m->heads[l] * hd, w = m->in_width[l];
    if (gat_sparse_fused(ctx, l)) {
        ctx->k->spmm_dropout_heads(ctx->compute, ctx->sparse_in, gat_rate(m, ctx), ctx->seed,
                                   stream_of(ctx, stage), input_offset(ctx, w, 0),
                                   head_stride(ctx, w), w, m->heads[l],
                                   ctx->params[l * P_PER_LAYER + P_W], z, hd, zb, z);
        return;
    }
    const float *W = ctx->params[l * P_PER_LAYER + P_W];
    if (!gat_sparse(ctx, l) && !gat_dropping(m, ctx)) { /* no dropout: Z = a W */
        ctx->k->gemm(ctx->compute, false, false, ctx->rows, z, w, 1.0f, a, w, W, z, 0.0f, zb,
                     z);
        return;
    }
    if (gat_dense_fused(m, ctx, l)) {
        ctx->k->dense_dropout_heads(ctx->compute, ctx->rows, w, a, w, m->dropout, ctx->seed,
                                    stream_of(ctx, stage), input_offset(ctx, w, 0),
                                    head_stride(ctx, w), w, m->heads[l], W, z, hd, zb, z);
        return;
    }
    for (int h = 0; h < m->heads[l]; h++)
        av_project_head(m, l, stage, ctx, h, a, x, zb);
}

static bv_status av_forward(bv_model *m, int l, size_t stage, const bv_task_ctx *ctx,
                            const float *in, float *out, bv_error *err)
{
    int k = m->heads[l];
    int64_t hd = m->head_dim[l], z = k * hd, w = m->in_width[l], ow = z + 2 * k;
    bool sparse = gat_sparse(ctx, l); /* X's nonzeros: no rows x width input is made */
    bool need_x = gat_needs_x(m, ctx, l);
    float *a =
        l > 0 ? bv_task_temp(ctx, T_ACT, (size_t)(ctx->rows * w + 1) * sizeof *a) : NULL;
    float *x = need_x ? bv_task_temp(ctx, T_X, (size_t)(ctx->rows * w + 1) * sizeof *x) : NULL;
    float *zb = bv_task_temp(ctx, T_Z, (size_t)(ctx->rows * z + 1) * sizeof *zb);
    if ((l > 0 && !a) || (need_x && !x) || !zb) {
        bv_task_temp_free(ctx, a);
        bv_task_temp_free(ctx, x);
        bv_task_temp_free(ctx, zb);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in AV%d", l);
    }
    const float *act = sparse ? NULL : av_activation(m, l, ctx, in, a);
    av_project(m, l, stage, ctx, act, x, zb);
    float *const *p = ctx->params + l * P_PER_LAYER;
    if (on_device(ctx)) { /* per head h, the rows' Z_h a_src_h and Z_h a_dst_h */
        ctx->k->gemm_batched(ctx->compute, k, false, false, ctx->rows, 1, hd, 1.0f, zb, z, hd,
                             p[P_ASRC], 1, hd, 0.0f, out + z, ow, 1);
        ctx->k->gemm_batched(ctx->compute, k, false, false, ctx->rows, 1, hd, 1.0f, zb, z, hd,
                             p[P_ADST], 1, hd, 0.0f, out + z + k, ow, 1);
    } else {
        for (int64_t r = 0; r < ctx->rows; r++) {
            float *row = out + r * ow;
            for (int h = 0; h < k; h++) {
                const float *zh = zb + r * z + h * hd;
                float s = 0, d = 0;
                for (int64_t f = 0; f < hd; f++) {
                    s += zh[f] * p[P_ASRC][h * hd + f];
                    d += zh[f] * p[P_ADST][h * hd + f];
                }
                row[z + h] = s;
                row[z + k + h] = d;
            }
        }
    }
    /* Z is dropped for aggregation only, once the attention terms have read it: in zb,
     * where the rows and their mask indices ((row_begin + r) z + j) are contiguous, so one
     * call covers them all */
    if (gat_dropping(m, ctx))
        ctx->k->dropout_forward(ctx->compute, ctx->rows * z, m->dropout, ctx->seed,
                                features_stream(ctx, stage), (uint64_t)(ctx->row_begin * z),
                                zb, zb);
    bv_copy_rows(ctx->k, ctx->compute, ctx->rows, z, zb, z, out, ow, false);
    bv_task_temp_free(ctx, a);
    bv_task_temp_free(ctx, x);
    bv_task_temp_free(ctx, zb);
    return BV_OK;
}

/* Through head h's attention terms s_src = Z_h . a_src, s_dst = Z_h . a_dst, for `units`
 * of its units: dZ_h += ds a_src + dd a_dst row by row, and a_src's and a_dst's gradients
 * += ds Z_h and dd Z_h summed over the rows in order. ds and dd are read with stride ow,
 * Z_h and dZ_h rows with stride z. The gradients are summed in locals (a constant
 * ATTN_UNITS of them for a whole chunk), so the loops vectorise over the units and keep
 * the sums in registers: every element gets the same operations in the same order as a
 * unit at a time (a quarter of an AV backward went to that loop's scalar stores). */
#define ATTN_UNITS 8

static inline __attribute__((always_inline)) void
attention_terms_rows(int64_t rows, int64_t units, const float *ds, const float *dd, int64_t ow,
                     const float *restrict zb, float *restrict dz, int64_t z,
                     const float *restrict asrc, const float *restrict adst, float *dasrc,
                     float *dadst)
{
    float gs[ATTN_UNITS], gd[ATTN_UNITS];
    for (int64_t f = 0; f < units; f++) {
        gs[f] = dasrc[f];
        gd[f] = dadst[f];
    }
    for (int64_t r = 0; r < rows; r++) {
        float s = ds[r * ow], d = dd[r * ow];
        const float *restrict zr = zb + r * z;
        float *restrict dzr = dz + r * z;
        for (int64_t f = 0; f < units; f++) {
            dzr[f] += s * asrc[f] + d * adst[f];
            gs[f] += s * zr[f];
            gd[f] += d * zr[f];
        }
    }
    for (int64_t f = 0; f < units; f++) {
        dasrc[f] = gs[f];
        dadst[f] = gd[f];
    }
}

static void attention_terms_backward(int64_t rows, int64_t units, const float *ds,
                                     const float *dd, int64_t ow, const float *zb, float *dz,
                                     int64_t z, const float *asrc, const float *adst,
                                     float *dasrc, float *dadst)
{
    if (units == ATTN_UNITS) /* a constant: the unit loops unroll and vectorise */
        attention_terms_rows(rows, ATTN_UNITS, ds, dd, ow, zb, dz, z, asrc, adst, dasrc, dadst);
    else
        attention_terms_rows(rows, units, ds, dd, ow, zb, dz, z, asrc, adst, dasrc, dadst);
}

/* The same for all of head h's units, as ops: dZ_h += ds a_src_h + dd a_dst_h (two
 * products of rank 1), and a_src_h's and a_dst_h's gradients += ds^T Z_h and dd^T Z_h. */
static void attention_terms_backward_ops(const bv_task_ctx *ctx, int k, int64_t hd, int h,
                                         const float *dout, int64_t ow, const float *zb,
                                         float *dz, int64_t z, float *const *p,
                                         float *const *dp)
{
    int64_t z_h = h * hd;
    for (int t = 0; t < 2; t++) { /* t = 0: the source term, 1: the destination's */
        const float *dterm = dout + z + t * k + h; /* rows x 1, stride ow */
        const float *av = p[t ? P_ADST : P_ASRC] + z_h;
        float *dav = dp[t ? P_ADST : P_ASRC] + z_h;
        ctx->k->gemm(ctx->compute, false, false, ctx->rows, hd, 1, 1.0f, dterm, ow, av, hd,
                     1.0f, dz + z_h, z);
        ctx->k->gemm(ctx->compute, true, false, 1, hd, ctx->rows, 1.0f, dterm, ow, zb + z_h, z,
                     1.0f, dav, hd);
    }
}

static bv_status av_backward(bv_model *m, int l, size_t stage, const bv_task_ctx *ctx,
                             const float *in, const float *out, const float *dout, float *din,
                             float *const *dparams, bv_error *err)
{
    int k = m->heads[l];
    int64_t hd = m->head_dim[l], z = k * hd, w = m->in_width[l], ow = z + 2 * k;
    int64_t n = ctx->rows * w;
    float *const *p = ctx->params + l * P_PER_LAYER;
    float *const *dp = dparams + l * P_PER_LAYER;
    bool sparse = gat_sparse(ctx, l), need_x = gat_needs_x(m, ctx, l);
    float *a = l > 0 ? bv_task_temp(ctx, T_ACT, (size_t)(n + 1) * sizeof *a) : NULL;
    float *x = need_x ? bv_task_temp(ctx, T_X, (size_t)(n + 1) * sizeof *x) : NULL;
    float *dx = din ? bv_task_temp(ctx, T_DX, (size_t)(n + 1) * sizeof *dx) : NULL;
    float *zb = bv_task_temp(ctx, T_Z, (size_t)(ctx->rows * z + 1) * sizeof *zb);
    float *dz = bv_task_temp(ctx, T_DZ, (size_t)(ctx->rows * z + 1) * sizeof *dz);
    float *temps[] = {a, x, dx, zb, dz};
    if ((l > 0 && !a) || (need_x && !x) || (din && !dx) || !zb || !dz) {
        temps_free(ctx, temps, 5);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in backward of AV%d", l);
    }
    /* rematerialised, with the undropped Z */
    const float *act = sparse ? NULL : av_activation(m, l, ctx, in, a);
    if (din)
        bv_zero(ctx->k, ctx->compute, n, din);
    /* dZ = dropout'(dZ for aggregation): the rows are contiguous in dz, and so are their
     * mask indices ((row_begin + r) z + j), so one call covers them all */
    bv_copy_rows(ctx->k, ctx->compute, ctx->rows, z, dout, ow, dz, z, false);
    if (gat_dropping(m, ctx))
        ctx->k->dropout_backward(ctx->compute, ctx->rows * z, m->dropout, ctx->seed,
                                 features_stream(ctx, stage), (uint64_t)(ctx->row_begin * z),
                                 dz, dz);
    /* Head by head: x_h and Z_h again (x_h's mask made once and kept for dW_h), then
     * dZ_h += ds_src a_src + ds_dst a_dst and the a's gradients, dW_h += x_h^T dZ_h and
     * din += mask_h(dZ_h W_h^T). Every element is the same sum in the same order as when
     * each step ran over all heads at once. */
    bool fused = gat_sparse_fused(ctx, l), dense = gat_dense_fused(m, ctx, l);
    /* every head's Z_h at once, as the forward made it (without dropout on a dense input:
     * one gemm); fused or dense, their dW_h after the loop, at once too */
    bool at_once = fused || dense || (!sparse && !need_x);
    if (at_once)
        av_project(m, l, stage, ctx, act, x, zb);
    for (int h = 0; h < k; h++) {
        if (!at_once)
            av_project_head(m, l, stage, ctx, h, act, x, zb);
        if (on_device(ctx))
            attention_terms_backward_ops(ctx, k, hd, h, dout, ow, zb, dz, z, p, dp);
        else
            for (int64_t f = 0; f < hd; f += ATTN_UNITS)
                attention_terms_backward(ctx->rows, hd - f < ATTN_UNITS ? hd - f : ATTN_UNITS,
                                         dout + z + h, dout + z + k + h, ow, zb + h * hd + f,
                                         dz + h * hd + f, z, p[P_ASRC] + h * hd + f,
                                         p[P_ADST] + h * hd + f, dp[P_ASRC] + h * hd + f,
                                         dp[P_ADST] + h * hd + f);
        if (fused)
            continue;
        if (sparse) { /* the first layer: X needs no gradient */
            ctx->k->spmm_dropout_backward_x(ctx->compute, ctx->sparse_in, gat_rate(m, ctx),
                                            ctx->seed, stream_of(ctx, stage),
                                            input_offset(ctx, w, h), w, dz + h * hd, z, hd,
                                            dp[P_W] + h * hd, z);
            continue;
        }
        const float *xh = gat_dropping(m, ctx) ? x : act; /* av_project_head's */
        if (!dense)
            ctx->k->gemm(ctx->compute, true, false, w, hd, ctx->rows, 1.0f, xh, w, dz + h * hd,
                         z, 1.0f, dp[P_W] + h * hd, z);
        if (!din)
            continue;
        ctx->k->gemm(ctx->compute, false, true, ctx->rows, w, hd, 1.0f, dz + h * hd, z,
                     p[P_W] + h * hd, z, 0.0f, dx, w);
        if (gat_dropping(m, ctx))
            ctx->k->dropout_backward(ctx->compute, n, m->dropout, ctx->seed,
                                     stream_of(ctx, stage), input_offset(ctx, w, h), dx, dx);
        ctx->k->axpy(ctx->compute, n, 1.0f, dx, din);
    }
    if (fused) /* the first layer, X needing no gradient: every head's dW_h in one sweep */
        ctx->k->spmm_dropout_heads_backward_x(
            ctx->compute, ctx->sparse_in, gat_rate(m, ctx), ctx->seed, stream_of(ctx, stage),
            input_offset(ctx, w, 0), head_stride(ctx, w), w, k, dz, z, hd, dp[P_W], z);
    if (dense) /* every head's dW_h in one sweep over the input */
        ctx->k->dense_dropout_heads_backward_x(
            ctx->compute, ctx->rows, w, act, w, m->dropout, ctx->seed, stream_of(ctx, stage),
            input_offset(ctx, w, 0), head_stride(ctx, w), w, k, dz, z, hd, dp[P_W], z);
    if (din) { /* back through ELU(in + b) */
        float *db = dparams[(l - 1) * P_PER_LAYER + P_B];
        add_input_bias(ctx, w, in, ctx->params[(l - 1) * P_PER_LAYER + P_B], a);
        ctx->k->elu_backward(ctx->compute, n, a, din, din);
        ctx->k->bias_backward(ctx->compute, ctx->rows, w, din, db, true);
    }
    (void)out;
    temps_free(ctx, temps, 5);
    return BV_OK;
}

/* OUT: logits = mean over heads + b_out */
static bv_status out_forward(bv_model *m, const bv_task_ctx *ctx, const float *in, float *out)
{
    int l = m->layers - 1, k = m->heads[l];
    int64_t c = m->head_dim[l];
    const float *b = ctx->params[l * P_PER_LAYER + P_B];
    if (on_device(ctx)) { /* the heads' sum, times 1/k, plus b */
        for (int h = 0; h < k; h++)
            bv_copy_rows(ctx->k, ctx->compute, ctx->rows, c, in + h * c, k * c, out, c, h > 0);
        if (k > 1)
            ctx->k->scale(ctx->compute, ctx->rows * c, 1.0f / (float)k, out);
        ctx->k->add_bias(ctx->compute, ctx->rows, c, b, out);
        return BV_OK;
    }
    for (int64_t r = 0; r < ctx->rows; r++)
        for (int64_t j = 0; j < c; j++) {
            float s = 0;
            for (int h = 0; h < k; h++)
                s += in[r * k * c + h * c + j];
            out[r * c + j] = s / (float)k + b[j];
        }
    return BV_OK;
}

static bv_status out_backward(bv_model *m, const bv_task_ctx *ctx, const float *dout,
                              float *din, float *const *dparams)
{
    int l = m->layers - 1, k = m->heads[l];
    int64_t c = m->head_dim[l];
    ctx->k->bias_backward(ctx->compute, ctx->rows, c, dout, dparams[l * P_PER_LAYER + P_B],
                          true);
    if (on_device(ctx)) { /* each head's columns get dout, times 1/k */
        for (int h = 0; h < k; h++)
            bv_copy_rows(ctx->k, ctx->compute, ctx->rows, c, dout, c, din + h * c, k * c,
                         false);
        if (k > 1)
            ctx->k->scale(ctx->compute, ctx->rows * k * c, 1.0f / (float)k, din);
        return BV_OK;
    }
    for (int64_t r = 0; r < ctx->rows; r++)
        for (int h = 0; h < k; h++)
            for (int64_t j = 0; j < c; j++)
                din[r * k * c + h * c + j] = dout[r * c + j] / (float)k;
    return BV_OK;
}

static bv_status gat_tensor_forward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                    const float *in, float *out, bv_error *err)
{
    if (stage == m->nstages - 1)
        return out_forward(m, ctx, in, out);
    return av_forward(m, (int)(stage / GAT_STAGES_PER_LAYER), stage, ctx, in, out, err);
}

static bv_status gat_tensor_backward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                     const float *in, const float *out, const float *dout,
                                     float *din, float *const *dparams, bv_error *err)
{
    if (stage == m->nstages - 1)
        return out_backward(m, ctx, dout, din, dparams);
    return av_backward(m, (int)(stage / GAT_STAGES_PER_LAYER), stage, ctx, in, out, dout, din,
                       dparams, err);
}

/* The edge passes run over blocks of rows holding about GAT_EDGE_BLOCK edge-heads (or one
 * row of more), so that a block's logits, weights and gradients stay in the cache from one
 * kernel to the next instead of each kernel streaming arrays of the whole interval through
 * memory, and the scratch arrays are a block's, not an interval's (which, for a large
 * graph, were hundreds of MB of fresh pages per task). Every kernel computes each row, or
 * each element, alone, and edge_scores_backward adds into dsrc in edge order, block after
 * block: the same bits as one call over all rows. */
#define GAT_EDGE_BLOCK 32768

/* On a device (on_device) a block is the whole interval: each call is a launch and a wait
 * there, and 5,000 blocks per pass of the 1M-vertex graph took 90 % of its epoch. */
static int64_t edge_block_end(const bv_task_ctx *ctx, const bv_csr *a, int64_t rb, int k)
{
    if (on_device(ctx))
        return a->nrows;
    int64_t re = rb + 1;
    while (re < a->nrows && (a->rowptr[re + 1] - a->rowptr[rb]) * k <= GAT_EDGE_BLOCK)
        re++;
    return re;
}

/* the most edge-heads in one block */
static int64_t edge_block_max(const bv_task_ctx *ctx, const bv_csr *a, int k)
{
    int64_t most = 1;
    for (int64_t rb = 0, re; rb < a->nrows; rb = re) {
        re = edge_block_end(ctx, a, rb, k);
        int64_t n = (a->rowptr[re] - a->rowptr[rb]) * k;
        most = n > most ? n : most;
    }
    return most;
}

/* rows [rb, re): logits -> LeakyReLU -> softmax per destination; `pre` keeps the block's
 * logits for backward, alpha receives the block's weights */
static void attention(const bv_model *m, int k, const bv_task_ctx *ctx, const bv_csr *a,
                      int64_t rb, int64_t re, const float *src, const float *dst, float *pre,
                      float *alpha)
{
    int64_t n = (a->rowptr[re] - a->rowptr[rb]) * k;
    ctx->k->edge_scores(ctx->compute, a, rb, re, k, src, 2 * k, dst + rb * 2 * k + k, 2 * k,
                        pre);
    ctx->k->leaky_relu_forward(ctx->compute, n, m->slope, pre, alpha);
    ctx->k->edge_softmax(ctx->compute, a, rb, re, k, alpha, alpha);
}

/* the attention-dropout index of the block's first edge-head */
static uint64_t edge_offset(const bv_task_ctx *ctx, const bv_csr *a, int64_t rb, int k)
{
    return (uint64_t)((ctx->edge_begin + a->rowptr[rb] - a->rowptr[0]) * k);
}

static bv_status gat_edge_forward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                  const bv_csr *a, const float *src, const float *dst,
                                  float *out, bv_error *err)
{
    int k = m->heads[stage / GAT_STAGES_PER_LAYER];
    float *pre = bv_task_temp(ctx, T_PRE, (size_t)(edge_block_max(ctx, a, k) + 1) * sizeof *pre);
    if (!pre)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in AE");
    for (int64_t rb = 0, re; rb < a->nrows; rb = re) {
        re = edge_block_end(ctx, a, rb, k);
        float *alpha = out + (a->rowptr[rb] - a->rowptr[0]) * k;
        attention(m, k, ctx, a, rb, re, src, dst, pre, alpha);
        if (ctx->training && m->attn_dropout > 0)
            ctx->k->dropout_forward(ctx->compute, (a->rowptr[re] - a->rowptr[rb]) * k,
                                    m->attn_dropout, ctx->seed, stream_of(ctx, stage),
                                    edge_offset(ctx, a, rb, k), alpha, alpha);
    }
    bv_task_temp_free(ctx, pre);
    return BV_OK;
}

static bv_status gat_edge_backward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                   const bv_csr *a, const float *src, const float *dst,
                                   const float *out, const float *dout, float *dsrc,
                                   float *ddst, float *const *dparams, bv_error *err)
{
    int k = m->heads[stage / GAT_STAGES_PER_LAYER];
    int64_t most = edge_block_max(ctx, a, k);
    float *pre = bv_task_temp(ctx, T_PRE, (size_t)(most + 1) * sizeof *pre);
    float *alpha = bv_task_temp(ctx, T_ALPHA, (size_t)(most + 1) * sizeof *alpha);
    float *d = bv_task_temp(ctx, T_D, (size_t)(most + 1) * sizeof *d);
    float *temps[] = {pre, alpha, d};
    if (!pre || !alpha || !d) {
        temps_free(ctx, temps, 3);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory in ∇AE");
    }
    for (int64_t rb = 0, re; rb < a->nrows; rb = re) {
        re = edge_block_end(ctx, a, rb, k);
        int64_t n = (a->rowptr[re] - a->rowptr[rb]) * k;
        attention(m, k, ctx, a, rb, re, src, dst, pre, alpha); /* α before dropout, again */
        bv_copy_rows(ctx->k, ctx->compute, 1, n, dout + (a->rowptr[rb] - a->rowptr[0]) * k, 0,
                     d, 0, false);
        if (ctx->training && m->attn_dropout > 0)
            ctx->k->dropout_backward(ctx->compute, n, m->attn_dropout, ctx->seed,
                                     stream_of(ctx, stage), edge_offset(ctx, a, rb, k), d, d);
        ctx->k->edge_softmax_backward(ctx->compute, a, rb, re, k, alpha, d, d);
        ctx->k->leaky_relu_backward(ctx->compute, n, m->slope, pre, d, d);
        /* s_src is the window's first k floats, s_dst the next k */
        ctx->k->edge_scores_backward(ctx->compute, a, rb, re, k, d, dsrc, 2 * k,
                                     ddst + rb * 2 * k + k, 2 * k, true);
    }
    (void)out;
    (void)dparams;
    temps_free(ctx, temps, 3);
    return BV_OK;
}

static bv_status gat_loss(bv_model *m, const bv_task_ctx *ctx, const float *logits,
                          const int32_t *labels, const uint8_t *mask, float grad_scale,
                          float *dout, bv_xent_result *res, bv_error *err)
{
    ctx->k->softmax_xent(ctx->compute, ctx->rows, m->stages[m->nstages - 1].out_dim, logits,
                         labels, mask, grad_scale, dout, res);
    (void)err;
    return BV_OK;
}

static const bv_model_ops gat_ops = {
    .engine = BV_ENGINE_GRAPH,
    .create = gat_create,
    .destroy = gat_destroy,
    .param_count = gat_param_count,
    .param = gat_param,
    .stage_count = gat_stage_count,
    .stage = gat_stage,
    .tensor_forward = gat_tensor_forward,
    .tensor_backward = gat_tensor_backward,
    .loss = gat_loss,
    .edge_forward = gat_edge_forward,
    .edge_backward = gat_edge_backward,
    .validate = gat_validate,
    .stage_size = sizeof(bv_stage), /* ABI 1.4: lets bv_stage grow */
};

/* The edge kernels arrived with compute ABI 1.1. */
static const bv_plugin gat_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "gat", "0.1.0",
                     "graph attention network (Velickovic et al. 2018)"),
    .options = gat_options,
    .engine = "graph", /* ABI 1.4: which engine drives it */
    .ops = &gat_ops,
    .ops_size = sizeof gat_ops,
};

BV_PLUGIN_ENTRY(model, gat, gat_plugin)
