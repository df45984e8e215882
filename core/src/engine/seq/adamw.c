/* AdamW with warmup, cosine decay and global-norm clipping (adamw.h). */
#include "adamw.h"

#include <math.h>

bv_adamw bv_adamw_from_opts(const bv_opts *t)
{
    return (bv_adamw){
        .beta1 = (float)bv_opts_float(t, "beta1"),
        .beta2 = (float)bv_opts_float(t, "beta2"),
        .eps = (float)bv_opts_float(t, "eps"),
        .weight_decay = (float)bv_opts_float(t, "weight_decay"),
        .grad_clip = bv_opts_float(t, "grad_clip"),
    };
}

double bv_adamw_lr_at(const bv_opts *t, int64_t it)
{
    double lr = bv_opts_float(t, "lr"), min_lr = bv_opts_float(t, "min_lr");
    int64_t warmup = bv_opts_int(t, "warmup"), decay = bv_opts_int(t, "decay_steps");
    if (decay == 0)
        decay = bv_opts_int(t, "steps");
    if (it < warmup)
        return lr * (double)(it + 1) / (double)(warmup + 1);
    if (it > decay || decay <= warmup)
        return min_lr;
    double ratio = (double)(it - warmup) / (double)(decay - warmup);
    return min_lr + 0.5 * (1.0 + cos(M_PI * ratio)) * (lr - min_lr);
}

double bv_adamw_step(bv_layer_engine *e, const bv_compute_ops *k, bv_compute *c,
                     const bv_adamw *cfg, int64_t step, double lr)
{
    size_t nl = bv_layer_engine_layers(e);
    bv_layer_tensor t;
    /* global norm over every owned gradient, in layer and parameter order */
    double sq = 0;
    for (size_t l = 0; l < nl; l++)
        for (size_t i = 0; i < bv_layer_engine_layer(e, l)->nparams; i++)
            if (bv_layer_engine_tensor(e, l, i, &t) && !t.replica)
                sq += k->sum_squares(c, t.n, t.grad);
    double norm = sqrt(sq);
    bv_adamw_apply(e, k, c, cfg, step, lr, norm);
    return norm;
}

void bv_adamw_apply(bv_layer_engine *e, const bv_compute_ops *k, bv_compute *c,
                    const bv_adamw *cfg, int64_t step, double lr, double norm)
{
    float coef = cfg->grad_clip > 0 && norm > 0 ? (float)(cfg->grad_clip / (norm + 1e-6))
                                                : 1.0f;
    bv_adam_params ap = {
        .lr = (float)lr,
        .beta1 = cfg->beta1,
        .beta2 = cfg->beta2,
        .eps = cfg->eps,
        .decoupled = true,
        .step = step,
    };
    bv_layer_tensor t;
    for (size_t l = 0; l < bv_layer_engine_layers(e); l++)
        for (size_t i = 0; i < bv_layer_engine_layer(e, l)->nparams; i++) {
            if (!bv_layer_engine_tensor(e, l, i, &t))
                continue;
            ap.weight_decay = t.weight_decay ? cfg->weight_decay : 0.0f;
            if (coef < 1.0f && k->adam_step_scaled) { /* the same bits in one pass */
                k->adam_step_scaled(c, t.n, coef, t.param, t.grad, t.m, t.v, &ap);
                continue;
            }
            if (coef < 1.0f)
                k->scale(c, t.n, coef, t.grad);
            k->adam_step(c, t.n, t.param, t.grad, t.m, t.v, &ap);
        }
}
