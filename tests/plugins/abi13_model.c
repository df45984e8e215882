/* model_abi13.so: a model as a plugin built against the ABI 1.3 headers would be: the
 * 1.3 descriptor (reserved[4] where 1.4 has engine and option_size), the 1.3 model ops
 * table (no stage_size), the engine only in the table's leading field. Written out by
 * hand so it stays 1.3-shaped as the headers grow. A working model (softmax regression on
 * the features: one TENSOR stage), so the test can train it, not only load it. */
#include <stdbool.h>
#include <stdlib.h>

#include "bivouac/model.h"
#include "bivouac/plugin.h"

/* bv_plugin as of ABI 1.3. */
typedef struct plugin_1_3 {
    uint32_t magic;
    uint16_t abi_major;
    uint16_t abi_minor;
    uint32_t struct_size;
    uint32_t kind;
    const char *name;
    const char *version;
    const char *description;
    const bv_option *options;
    const void *ops;
    size_t ops_size;
    bool (*probe)(char *why, size_t why_len);
    const bv_export *exports;
    void *(*get_proc_address)(const char *name);
    void *reserved[4];
} plugin_1_3;

/* bv_model_ops as of ABI 1.3: everything before stage_size. */
typedef struct model_ops_1_3 {
    bv_engine_kind engine;
    bv_model *(*create)(const bv_opts *opts, const bv_graph_shape *shape, bv_error *err);
    void (*destroy)(bv_model *m);
    size_t (*param_count)(const bv_model *m);
    const bv_param_spec *(*param)(const bv_model *m, size_t i);
    size_t (*stage_count)(const bv_model *m);
    const bv_stage *(*stage)(const bv_model *m, size_t i);
    bv_status (*tensor_forward)(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                const float *in, float *out, bv_error *err);
    bv_status (*tensor_backward)(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                 const float *in, const float *out, const float *dout,
                                 float *din, float *const *dparams, bv_error *err);
    bv_status (*loss)(bv_model *m, const bv_task_ctx *ctx, const float *logits,
                      const int32_t *labels, const uint8_t *mask, float grad_scale,
                      float *dout, bv_xent_result *res, bv_error *err);
    void (*edge_forward)(void);
    void (*edge_backward)(void);
    bv_status (*validate)(const bv_opts *opts, bv_diag *diag);
} model_ops_1_3;

_Static_assert(sizeof(plugin_1_3) == sizeof(bv_plugin), "the descriptor kept its size");
_Static_assert(sizeof(model_ops_1_3) == offsetof(bv_model_ops, stage_size),
               "1.4 appended stage_size to the 1.3 model table");

struct bv_model {
    bv_stage stage;
    bv_param_spec w;
};

static bv_model *abi13_create(const bv_opts *opts, const bv_graph_shape *shape, bv_error *err)
{
    (void)opts, (void)err;
    bv_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->stage = (bv_stage){.kind = BV_STAGE_TENSOR, .name = "AV0",
                          .in_dim = shape->num_features, .out_dim = shape->num_classes};
    m->w = (bv_param_spec){.name = "W0", .rows = shape->num_features,
                           .cols = shape->num_classes, .init = BV_INIT_GLOROT_UNIFORM};
    return m;
}

static void abi13_destroy(bv_model *m)
{
    free(m);
}

static size_t abi13_one(const bv_model *m)
{
    (void)m;
    return 1;
}

static const bv_param_spec *abi13_param(const bv_model *m, size_t i)
{
    return i == 0 ? &m->w : NULL;
}

static const bv_stage *abi13_stage(const bv_model *m, size_t i)
{
    return i == 0 ? &m->stage : NULL;
}

static bv_status abi13_forward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                               const float *in, float *out, bv_error *err)
{
    (void)stage, (void)err;
    const bv_stage *s = &m->stage;
    ctx->k->gemm(ctx->compute, false, false, ctx->rows, s->out_dim, s->in_dim, 1.0f, in,
                 s->in_dim, ctx->params[0], s->out_dim, 0.0f, out, s->out_dim);
    return BV_OK;
}

static bv_status abi13_backward(bv_model *m, size_t stage, const bv_task_ctx *ctx,
                                const float *in, const float *out, const float *dout,
                                float *din, float *const *dparams, bv_error *err)
{
    (void)stage, (void)out, (void)din, (void)err; /* din: the features need no gradient */
    const bv_stage *s = &m->stage;
    ctx->k->gemm(ctx->compute, true, false, s->in_dim, s->out_dim, ctx->rows, 1.0f, in,
                 s->in_dim, dout, s->out_dim, 1.0f, dparams[0], s->out_dim);
    return BV_OK;
}

static bv_status abi13_loss(bv_model *m, const bv_task_ctx *ctx, const float *logits,
                            const int32_t *labels, const uint8_t *mask, float grad_scale,
                            float *dout, bv_xent_result *res, bv_error *err)
{
    (void)err;
    ctx->k->softmax_xent(ctx->compute, ctx->rows, m->stage.out_dim, logits, labels, mask,
                         grad_scale, dout, res);
    return BV_OK;
}

static const model_ops_1_3 abi13_ops = {
    .engine = BV_ENGINE_GRAPH,
    .create = abi13_create,
    .destroy = abi13_destroy,
    .param_count = abi13_one,
    .param = abi13_param,
    .stage_count = abi13_one,
    .stage = abi13_stage,
    .tensor_forward = abi13_forward,
    .tensor_backward = abi13_backward,
    .loss = abi13_loss,
};

/* bv_option is unchanged in 1.4; a 1.3 plugin's stride is its sizeof, option_size 0. */
static const bv_option abi13_options[] = {
    BV_OPT_STR("note", "", "unused: shows that a 1.3 option schema is read"),
    BV_OPT_END,
};

static const plugin_1_3 abi13_plugin = {
    .magic = BV_PLUGIN_MAGIC,
    .abi_major = 1,
    .abi_minor = 3,
    .struct_size = sizeof(plugin_1_3),
    .kind = BV_KIND_MODEL,
    .name = "abi13",
    .version = "0.0.1",
    .description = "test: built against the ABI 1.3 headers",
    .options = abi13_options,
    .ops = &abi13_ops,
    .ops_size = sizeof abi13_ops,
};

BV_PLUGIN_EXPORT const bv_plugin *bv_model_abi13_plugin(void);
BV_PLUGIN_EXPORT const bv_plugin *bv_model_abi13_plugin(void)
{
    return (const bv_plugin *)(const void *)&abi13_plugin;
}
