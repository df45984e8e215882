/* A decoder-only transformer language model (GPT-2 style, pre-LayerNorm; Radford et al.
 * 2019, as nanoGPT writes it with bias=False) as a list of layers for the sequence engine:
 *   embed:   x = wte[token] + wpe[position]                      (dropout)
 *   blockN:  x = x + dropout(attn(LN1(x)) Wo);  x = x + dropout(gelu(LN2(x) Wfc) Wproj)
 *   head:    logits = LN_f(x) Wout^T,  Wout tied to wte unless `tied: false`
 * Weights are stored input-major (y = x W), so every product is one gemm over all T tokens
 * of the batch; attention is the compute plugin's fused causal kernel. The layers keep no
 * state: the engine hands each call its parameters and buffers (seqmodel.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "bivouac/plugin.h"
#include "bivouac/seqmodel.h"

#define TF_MAX_LAYERS 64
#define TF_LN_EPS 1e-5f

enum { P_LN1, P_WQKV, P_WO, P_LN2, P_WFC, P_WPROJ, P_BLOCK_COUNT };

struct bv_seq_model {
    int nblocks, heads;
    int64_t width, vocab, max_seq;
    float dropout;
    bool tied;
    bv_seq_layer layers[TF_MAX_LAYERS + 2];
    bv_seq_param embed_params[2];
    bv_seq_param block_params[P_BLOCK_COUNT];
    bv_seq_param head_params[2];
    char names[TF_MAX_LAYERS][16];
};

static const bv_option tf_options[] = {
    BV_OPT_INT_RANGE("layers", "4", 1, TF_MAX_LAYERS, "transformer blocks"),
    BV_OPT_INT_RANGE("heads", "4", 1, 1024, "attention heads per block (must divide width)"),
    BV_OPT_INT_RANGE("width", "128", 1, 65536, "embedding width (n_embd)"),
    BV_OPT_FLOAT_RANGE("dropout", "0", 0, 0.99,
                       "dropout after the embeddings and each residual branch"),
    BV_OPT_BOOLEAN("tied", "true", "output projection shares the token embedding"),
    BV_OPT_FLOAT_RANGE("init_std", "0.02", 0, 10,
                       "std of the normal initialisation (residual projections: "
                       "init_std / sqrt(2 * layers), as GPT-2)"),
    BV_OPT_END,
};

static bv_status tf_validate(const bv_opts *opts, const bv_seq_shape *shape, bv_diag *diag)
{
    int64_t heads = bv_opts_int(opts, "heads"), width = bv_opts_int(opts, "width");
    if (width % heads != 0) {
        const bv_opt_value *v = bv_opts_find(opts, "heads");
        if (!v->from_user)
            v = bv_opts_find(opts, "width");
        bv_diag_add(diag, v->from_user ? &v->pos : NULL,
                    "'heads' (%lld) must divide 'width' (%lld): each head gets width/heads "
                    "channels", (long long)heads, (long long)width);
        return BV_ERR_INVALID;
    }
    return BV_OK;
}

static bv_seq_model *tf_create(const bv_opts *opts, const bv_seq_shape *shape, bv_error *err)
{
    bv_diag d;
    bv_diag_init(&d);
    if (tf_validate(opts, shape, &d) != BV_OK) {
        bv_error_set(err, BV_ERR_INVALID, "%s", d.entries[0].msg);
        bv_diag_free(&d);
        return NULL;
    }
    bv_diag_free(&d);
    bv_seq_model *m = calloc(1, sizeof *m);
    if (!m) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->nblocks = (int)bv_opts_int(opts, "layers");
    m->heads = (int)bv_opts_int(opts, "heads");
    m->width = bv_opts_int(opts, "width");
    m->dropout = (float)bv_opts_float(opts, "dropout");
    m->tied = bv_opts_bool(opts, "tied");
    m->vocab = shape->vocab;
    m->max_seq = shape->max_seq;
    float std = (float)bv_opts_float(opts, "init_std");
    float proj_std = std / sqrtf(2.0f * (float)m->nblocks);
    int64_t C = m->width, V = m->vocab;

    m->embed_params[0] = (bv_seq_param){"wte", V, C, true, BV_SEQ_INIT_NORMAL, std, -1, -1};
    m->embed_params[1] =
        (bv_seq_param){"wpe", shape->max_seq, C, true, BV_SEQ_INIT_NORMAL, std, -1, -1};
    m->block_params[P_LN1] = (bv_seq_param){"ln1", 1, C, false, BV_SEQ_INIT_ONES, 0, -1, -1};
    m->block_params[P_WQKV] =
        (bv_seq_param){"wqkv", C, 3 * C, true, BV_SEQ_INIT_NORMAL, std, -1, -1};
    m->block_params[P_WO] = (bv_seq_param){"wo", C, C, true, BV_SEQ_INIT_NORMAL, proj_std, -1, -1};
    m->block_params[P_LN2] = (bv_seq_param){"ln2", 1, C, false, BV_SEQ_INIT_ONES, 0, -1, -1};
    m->block_params[P_WFC] =
        (bv_seq_param){"wfc", C, 4 * C, true, BV_SEQ_INIT_NORMAL, std, -1, -1};
    m->block_params[P_WPROJ] =
        (bv_seq_param){"wproj", 4 * C, C, true, BV_SEQ_INIT_NORMAL, proj_std, -1, -1};
    m->head_params[0] = (bv_seq_param){"lnf", 1, C, false, BV_SEQ_INIT_ONES, 0, -1, -1};
    m->head_params[1] = m->tied ? (bv_seq_param){"wout", V, C, true, BV_SEQ_INIT_NORMAL, std, 0, 0}
                                : (bv_seq_param){"wout", V, C, true, BV_SEQ_INIT_NORMAL, std, -1, -1};

    m->layers[0] = (bv_seq_layer){"embed", BV_SEQ_EMBED, 0, C, 2, m->embed_params};
    for (int i = 0; i < m->nblocks; i++) {
        snprintf(m->names[i], sizeof m->names[i], "block%d", i);
        m->layers[1 + i] =
            (bv_seq_layer){m->names[i], BV_SEQ_BLOCK, C, C, P_BLOCK_COUNT, m->block_params};
    }
    m->layers[1 + m->nblocks] = (bv_seq_layer){"head", BV_SEQ_HEAD, C, V, 2, m->head_params};
    return m;
}

static void tf_destroy(bv_seq_model *m)
{
    free(m);
}

static size_t tf_layer_count(const bv_seq_model *m)
{
    return (size_t)m->nblocks + 2;
}

static const bv_seq_layer *tf_layer(const bv_seq_model *m, size_t i)
{
    return &m->layers[i];
}

/* ---- buffers ------------------------------------------------------------------------- */

/* A block's saved activations, carved from one buffer in this order. */
typedef struct block_saved {
    float *ln1, *mean1, *rstd1, *qkv, *att, *atty, *xmid, *ln2, *mean2, *rstd2, *h, *g;
} block_saved;

static size_t block_saved_layout(const bv_seq_model *m, int64_t B, int64_t S, float *base,
                                 block_saved *p)
{
    int64_t T = B * S, C = m->width;
    int64_t sizes[] = {T * C, T, T, 3 * T * C, B * m->heads * S * S, T * C,
                       T * C, T * C, T, T, 4 * T * C, 4 * T * C};
    float **slots[] = {&p->ln1, &p->mean1, &p->rstd1, &p->qkv, &p->att, &p->atty,
                       &p->xmid, &p->ln2, &p->mean2, &p->rstd2, &p->h, &p->g};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *slots[i] = base ? base + off : NULL;
        off += (size_t)sizes[i];
    }
    return off;
}

typedef struct block_scratch {
    float *tmp, *dg, *dln, *datty, *dqkv, *datt;
} block_scratch;

static size_t block_scratch_layout(const bv_seq_model *m, int64_t B, int64_t S, float *base,
                                   block_scratch *p)
{
    int64_t T = B * S, C = m->width;
    int64_t sizes[] = {T * C, 4 * T * C, T * C, T * C, 3 * T * C, B * m->heads * S * S};
    float **slots[] = {&p->tmp, &p->dg, &p->dln, &p->datty, &p->dqkv, &p->datt};
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *slots[i] = base ? base + off : NULL;
        off += (size_t)sizes[i];
    }
    return off;
}

static size_t tf_saved_floats(const bv_seq_model *m, size_t layer, int64_t B, int64_t S)
{
    int64_t T = B * S;
    switch (m->layers[layer].kind) {
    case BV_SEQ_EMBED: return 0;
    case BV_SEQ_BLOCK: {
        block_saved unused;
        return block_saved_layout(m, B, S, NULL, &unused);
    }
    case BV_SEQ_HEAD: return (size_t)(T * m->width + 2 * T);
    }
    return 0;
}

static size_t tf_scratch_floats(const bv_seq_model *m, size_t layer, int64_t B, int64_t S)
{
    int64_t T = B * S;
    switch (m->layers[layer].kind) {
    case BV_SEQ_EMBED: return (size_t)(T * m->width);
    case BV_SEQ_BLOCK: {
        block_scratch unused;
        return block_scratch_layout(m, B, S, NULL, &unused);
    }
    case BV_SEQ_HEAD: return (size_t)(T * m->width);
    }
    return 0;
}

/* Dropout masks are a function of (seed, step, layer, site) only (compute.h's counter-based
 * dropout), so a layer re-run on another node draws the same mask. */
static uint64_t dropout_stream(const bv_seq_ctx *ctx, size_t layer, int site)
{
    return ((uint64_t)ctx->step << 20) | ((uint64_t)layer << 4) | (uint64_t)site;
}

/* Where this batch's masks start: a microbatch draws its rows' part of the whole batch's
 * (seqmodel.h, row0). Every masked tensor is batch x seq x width. */
static uint64_t mask_offset(const bv_seq_model *m, const bv_seq_ctx *ctx)
{
    return (uint64_t)(ctx->row0 * ctx->seq * m->width);
}

/* ---- forward ------------------------------------------------------------------------- */

static void block_forward(bv_seq_model *m, size_t layer, const bv_seq_ctx *ctx,
                          float *const *p, const float *x, float *out, float *saved_buf,
                          float *scratch_buf)
{
    const bv_compute_ops *k = ctx->k;
    bv_compute *c = ctx->compute;
    int64_t B = ctx->batch, S = ctx->seq, T = B * S, C = m->width;
    block_saved s;
    block_scratch w;
    block_saved_layout(m, B, S, saved_buf, &s);
    block_scratch_layout(m, B, S, scratch_buf, &w);
    bool drop = ctx->training && m->dropout > 0.0f;

    k->layernorm_forward(c, T, C, TF_LN_EPS, x, p[P_LN1], NULL, s.ln1, s.mean1, s.rstd1);
    k->gemm(c, false, false, T, 3 * C, C, 1.0f, s.ln1, C, p[P_WQKV], 3 * C, 0.0f, s.qkv, 3 * C);
    k->attention_forward(c, B, S, m->heads, C / m->heads, s.qkv, s.att, s.atty);
    k->gemm(c, false, false, T, C, C, 1.0f, s.atty, C, p[P_WO], C, 0.0f, w.tmp, C);
    if (drop)
        k->dropout_forward(c, T * C, m->dropout, ctx->seed, dropout_stream(ctx, layer, 0),
                           mask_offset(m, ctx), w.tmp, w.tmp);
    bv_copy_rows(k, c, 1, T * C, x, 0, s.xmid, 0, false); /* on the device, if there */
    k->axpy(c, T * C, 1.0f, w.tmp, s.xmid);
    k->layernorm_forward(c, T, C, TF_LN_EPS, s.xmid, p[P_LN2], NULL, s.ln2, s.mean2, s.rstd2);
    k->gemm(c, false, false, T, 4 * C, C, 1.0f, s.ln2, C, p[P_WFC], 4 * C, 0.0f, s.h, 4 * C);
    k->gelu_forward(c, 4 * T * C, s.h, s.g);
    k->gemm(c, false, false, T, C, 4 * C, 1.0f, s.g, 4 * C, p[P_WPROJ], C, 0.0f, out, C);
    if (drop)
        k->dropout_forward(c, T * C, m->dropout, ctx->seed, dropout_stream(ctx, layer, 1),
                           mask_offset(m, ctx), out, out);
    k->axpy(c, T * C, 1.0f, s.xmid, out);
}

static bv_status tf_forward(bv_seq_model *m, size_t layer, const bv_seq_ctx *ctx,
                            float *const *params, const float *in, float *out, float *saved,
                            float *scratch, bv_error *err)
{
    const bv_compute_ops *k = ctx->k;
    bv_compute *c = ctx->compute;
    int64_t T = ctx->batch * ctx->seq, C = m->width;
    if (ctx->seq > m->max_seq)
        return bv_error_set(err, BV_ERR_INVALID, "sequence of %lld tokens is longer than the "
                            "model's block size %lld", (long long)ctx->seq,
                            (long long)m->max_seq);
    switch (m->layers[layer].kind) {
    case BV_SEQ_EMBED:
        k->embedding_forward(c, ctx->batch, ctx->seq, C, ctx->tokens, params[0], params[1], out);
        if (ctx->training && m->dropout > 0.0f)
            k->dropout_forward(c, T * C, m->dropout, ctx->seed, dropout_stream(ctx, layer, 0),
                               mask_offset(m, ctx), out, out);
        break;
    case BV_SEQ_BLOCK:
        block_forward(m, layer, ctx, params, in, out, saved, scratch);
        break;
    case BV_SEQ_HEAD: {
        float *ln = saved, *mean = saved + T * C, *rstd = mean + T;
        k->layernorm_forward(c, T, C, TF_LN_EPS, in, params[0], NULL, ln, mean, rstd);
        k->gemm(c, false, true, T, m->vocab, C, 1.0f, ln, C, params[1], C, 0.0f, out, m->vocab);
        break;
    }
    }
    return BV_OK;
}

/* ---- backward ------------------------------------------------------------------------ */

static void block_backward(bv_seq_model *m, size_t layer, const bv_seq_ctx *ctx,
                           float *const *p, const float *x, const float *saved_buf,
                           const float *dout, float *din, float *const *dp, float *scratch_buf)
{
    const bv_compute_ops *k = ctx->k;
    bv_compute *c = ctx->compute;
    int64_t B = ctx->batch, S = ctx->seq, T = B * S, C = m->width;
    block_saved s;
    block_scratch w;
    block_saved_layout(m, B, S, (float *)saved_buf, &s);
    block_scratch_layout(m, B, S, scratch_buf, &w);
    bool drop = ctx->training && m->dropout > 0.0f;

    /* din carries d(xmid) until the end, when it becomes d(x). */
    bv_copy_rows(k, c, 1, T * C, dout, 0, din, 0, false);
    const float *dmlp = dout;
    if (drop) {
        k->dropout_backward(c, T * C, m->dropout, ctx->seed, dropout_stream(ctx, layer, 1),
                            mask_offset(m, ctx), dout, w.tmp);
        dmlp = w.tmp;
    }
    k->gemm(c, true, false, 4 * C, C, T, 1.0f, s.g, 4 * C, dmlp, C, 1.0f, dp[P_WPROJ], C);
    k->gemm(c, false, true, T, 4 * C, C, 1.0f, dmlp, C, p[P_WPROJ], C, 0.0f, w.dg, 4 * C);
    k->gelu_backward(c, 4 * T * C, s.h, w.dg, w.dg);
    k->gemm(c, true, false, C, 4 * C, T, 1.0f, s.ln2, C, w.dg, 4 * C, 1.0f, dp[P_WFC], 4 * C);
    k->gemm(c, false, true, T, C, 4 * C, 1.0f, w.dg, 4 * C, p[P_WFC], 4 * C, 0.0f, w.dln, C);
    k->layernorm_backward(c, T, C, s.xmid, p[P_LN2], s.mean2, s.rstd2, w.dln, din, true,
                          dp[P_LN2], NULL);

    const float *dattn = din;
    if (drop) {
        k->dropout_backward(c, T * C, m->dropout, ctx->seed, dropout_stream(ctx, layer, 0),
                            mask_offset(m, ctx), din, w.tmp);
        dattn = w.tmp;
    }
    k->gemm(c, true, false, C, C, T, 1.0f, s.atty, C, dattn, C, 1.0f, dp[P_WO], C);
    k->gemm(c, false, true, T, C, C, 1.0f, dattn, C, p[P_WO], C, 0.0f, w.datty, C);
    k->attention_backward(c, B, S, m->heads, C / m->heads, s.qkv, s.att, w.datty, w.datt,
                          w.dqkv);
    k->gemm(c, true, false, C, 3 * C, T, 1.0f, s.ln1, C, w.dqkv, 3 * C, 1.0f, dp[P_WQKV], 3 * C);
    k->gemm(c, false, true, T, C, 3 * C, 1.0f, w.dqkv, 3 * C, p[P_WQKV], 3 * C, 0.0f, w.dln, C);
    k->layernorm_backward(c, T, C, x, p[P_LN1], s.mean1, s.rstd1, w.dln, din, true, dp[P_LN1],
                          NULL);
}

static bv_status tf_backward(bv_seq_model *m, size_t layer, const bv_seq_ctx *ctx,
                             float *const *params, const float *in, const float *saved,
                             const float *dout, float *din, float *const *dparams,
                             float *scratch, bv_error *err)
{
    const bv_compute_ops *k = ctx->k;
    bv_compute *c = ctx->compute;
    int64_t T = ctx->batch * ctx->seq, C = m->width, V = m->vocab;
    switch (m->layers[layer].kind) {
    case BV_SEQ_EMBED: {
        const float *d = dout;
        if (ctx->training && m->dropout > 0.0f) {
            k->dropout_backward(c, T * C, m->dropout, ctx->seed, dropout_stream(ctx, layer, 0),
                                mask_offset(m, ctx), dout, scratch);
            d = scratch;
        }
        k->embedding_backward(c, ctx->batch, ctx->seq, C, ctx->tokens, d, dparams[0],
                              dparams[1]);
        break;
    }
    case BV_SEQ_BLOCK:
        if (!din)
            return bv_error_set(err, BV_ERR_INTERNAL, "a block's backward needs din");
        block_backward(m, layer, ctx, params, in, saved, dout, din, dparams, scratch);
        break;
    case BV_SEQ_HEAD: {
        const float *ln = saved, *mean = saved + T * C, *rstd = mean + T;
        k->gemm(c, true, false, V, C, T, 1.0f, dout, V, ln, C, 1.0f, dparams[1], C);
        k->gemm(c, false, false, T, C, V, 1.0f, dout, V, params[1], C, 0.0f, scratch, C);
        k->layernorm_backward(c, T, C, in, params[0], mean, rstd, scratch, din, false,
                              dparams[0], NULL);
        break;
    }
    }
    return BV_OK;
}

static bv_status tf_loss(bv_seq_model *m, const bv_seq_ctx *ctx, const float *logits,
                         const int32_t *targets, float grad_scale, float *dlogits,
                         bv_xent_result *res, bv_error *err)
{
    ctx->k->softmax_xent(ctx->compute, ctx->batch * ctx->seq, m->vocab, logits, targets, NULL,
                         grad_scale, dlogits, res);
    return BV_OK;
}

static const bv_seq_model_ops tf_ops = {
    .engine = BV_ENGINE_SEQUENCE,
    .validate = tf_validate,
    .create = tf_create,
    .destroy = tf_destroy,
    .layer_count = tf_layer_count,
    .layer = tf_layer,
    .saved_floats = tf_saved_floats,
    .scratch_floats = tf_scratch_floats,
    .forward = tf_forward,
    .backward = tf_backward,
    .loss = tf_loss,
    .layer_size = sizeof(bv_seq_layer), /* ABI 1.4: element sizes, so both can grow */
    .param_size = sizeof(bv_seq_param),
};

static const bv_plugin tf_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "transformer", "0.1.0",
                     "decoder-only GPT language model (pre-LayerNorm, causal attention, GELU "
                     "MLP) as layers for the sequence/pipeline engine"),
    .options = tf_options,
    .engine = "sequence", /* ABI 1.4: which engine drives it */
    .ops = &tf_ops,
    .ops_size = sizeof tf_ops,
};

BV_PLUGIN_ENTRY(model, transformer, tf_plugin)
