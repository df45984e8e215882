/* The layer engine (layer_engine.h): every layer of a sequence model in this process, run
 * in order; parameters, gradients, AdamW moments, activations and the saved and scratch
 * buffers laid out per layer from the layers' parameter specs. */
#include "layer_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/tensor.h"
#include "plugin_arrays.h"
#include "rng.h"

typedef struct seq_layer_state {
    const bv_seq_layer *desc; /* &copy once read */
    bv_seq_layer copy;        /* the plugin's layer in this build's layout */
    float **param, **grad, **m, **v; /* per param; tied ones alias the owner's */
    bool *owned;
    float *block;            /* owned storage: params, grads, m, v */
    float *saved;
    size_t saved_floats;
} seq_layer_state;

struct bv_layer_engine {
    const bv_seq_model_ops *mops;
    bv_seq_model *model;
    const bv_compute_ops *k;
    bv_compute *c;
    int64_t max_batch, max_seq, vocab, width;
    size_t nlayers;
    seq_layer_state *layers;
    float **act;      /* act[l]: output of layer l */
    float *scratch;
    float *dact[2];   /* ping-pong activation gradients */
    float *dlogits;
};

static int64_t numel(const bv_seq_param *p)
{
    return p->rows * p->cols;
}

void bv_layer_engine_free(bv_layer_engine *e)
{
    if (!e)
        return;
    for (size_t l = 0; l < e->nlayers; l++) {
        seq_layer_state *L = &e->layers[l];
        free(L->param);
        free(L->grad);
        free(L->m);
        free(L->v);
        free(L->owned);
        bv_seq_layer_copy_free(&L->copy);
        bv_free_aligned(L->block);
        bv_free_aligned(L->saved);
        if (e->act)
            bv_free_aligned(e->act[l]);
    }
    free(e->layers);
    free(e->act);
    bv_free_aligned(e->scratch);
    bv_free_aligned(e->dact[0]);
    bv_free_aligned(e->dact[1]);
    bv_free_aligned(e->dlogits);
    free(e);
}

static float *falloc(size_t n)
{
    return bv_alloc_aligned((n ? n : 1) * sizeof(float));
}

bv_status bv_layer_engine_create(const bv_seq_model_ops *mops, bv_seq_model *model,
                               const bv_compute_ops *k, bv_compute *c, int64_t max_batch,
                               int64_t max_seq, bv_layer_engine **out, bv_error *err)
{
    *out = NULL;
    bv_layer_engine *e = calloc(1, sizeof *e);
    if (!e)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    e->mops = mops;
    e->model = model;
    e->k = k;
    e->c = c;
    e->max_batch = max_batch;
    e->max_seq = max_seq;
    e->nlayers = mops->layer_count(model);
    e->layers = calloc(e->nlayers, sizeof *e->layers);
    e->act = calloc(e->nlayers, sizeof *e->act);
    if (!e->layers || !e->act) {
        bv_layer_engine_free(e);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    int64_t T = max_batch * max_seq;
    size_t scratch = 0;
    int64_t maxw = 1;
    for (size_t l = 0; l < e->nlayers; l++) {
        seq_layer_state *L = &e->layers[l];
        if (bv_seq_layer_copy(mops, mops->layer(model, l), &L->copy, err) != BV_OK) {
            bv_layer_engine_free(e);
            return err->status;
        }
        L->desc = &L->copy;
        size_t np = L->desc->nparams;
        L->param = calloc(np + 1, sizeof *L->param);
        L->grad = calloc(np + 1, sizeof *L->grad);
        L->m = calloc(np + 1, sizeof *L->m);
        L->v = calloc(np + 1, sizeof *L->v);
        L->owned = calloc(np + 1, sizeof *L->owned);
        if (!L->param || !L->grad || !L->m || !L->v || !L->owned) {
            bv_layer_engine_free(e);
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        }
        size_t total = 0;
        for (size_t i = 0; i < np; i++)
            if (L->desc->params[i].tied_layer < 0)
                total += (size_t)numel(&L->desc->params[i]);
        L->block = falloc(4 * total);
        if (!L->block) {
            bv_layer_engine_free(e);
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for layer %s's parameters",
                                L->desc->name);
        }
        size_t off = 0;
        for (size_t i = 0; i < np; i++) {
            const bv_seq_param *p = &L->desc->params[i];
            if (p->tied_layer >= 0) {
                if ((size_t)p->tied_layer >= l ||
                    (size_t)p->tied_param >= e->layers[p->tied_layer].desc->nparams ||
                    numel(&e->layers[p->tied_layer].desc->params[p->tied_param]) != numel(p)) {
                    bv_layer_engine_free(e);
                    return bv_error_set(err, BV_ERR_PLUGIN, "layer %s: parameter %s is tied "
                                        "to a parameter that does not match", L->desc->name,
                                        p->name);
                }
                seq_layer_state *O = &e->layers[p->tied_layer];
                L->param[i] = O->param[p->tied_param];
                L->grad[i] = O->grad[p->tied_param];
                L->m[i] = O->m[p->tied_param];
                L->v[i] = O->v[p->tied_param];
                continue;
            }
            L->owned[i] = true;
            L->param[i] = L->block + off;
            L->grad[i] = L->block + total + off;
            L->m[i] = L->block + 2 * total + off;
            L->v[i] = L->block + 3 * total + off;
            off += (size_t)numel(p);
        }
        L->saved_floats = mops->saved_floats(model, l, max_batch, max_seq);
        L->saved = falloc(L->saved_floats);
        size_t s = mops->scratch_floats(model, l, max_batch, max_seq);
        scratch = s > scratch ? s : scratch;
        e->act[l] = falloc((size_t)(T * L->desc->out_width));
        if (!L->saved || !e->act[l]) {
            bv_layer_engine_free(e);
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for activations");
        }
        if (L->desc->out_width > maxw && L->desc->kind != BV_SEQ_HEAD)
            maxw = L->desc->out_width;
        if (L->desc->kind == BV_SEQ_HEAD)
            e->vocab = L->desc->out_width;
    }
    e->width = maxw;
    e->scratch = falloc(scratch);
    e->dact[0] = falloc((size_t)(T * maxw));
    e->dact[1] = falloc((size_t)(T * maxw));
    e->dlogits = falloc((size_t)(T * e->vocab));
    if (!e->scratch || !e->dact[0] || !e->dact[1] || !e->dlogits) {
        bv_layer_engine_free(e);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for activations");
    }
    *out = e;
    return BV_OK;
}

/* Box-Muller over the (seed, layer) stream, in parameter order. */
void bv_layer_engine_init(bv_layer_engine *e, uint64_t seed)
{
    for (size_t l = 0; l < e->nlayers; l++) {
        seq_layer_state *L = &e->layers[l];
        bv_rng rng;
        bv_rng_init(&rng, seed, 0x5E0000 + l);
        for (size_t i = 0; i < L->desc->nparams; i++) {
            if (!L->owned[i])
                continue;
            const bv_seq_param *p = &L->desc->params[i];
            int64_t n = numel(p);
            float *w = L->param[i];
            for (int64_t j = 0; j < n; j++) {
                if (p->init == BV_SEQ_INIT_ZEROS) {
                    w[j] = 0.0f;
                } else if (p->init == BV_SEQ_INIT_ONES) {
                    w[j] = 1.0f;
                } else {
                    double u1 = bv_rng_uniform(&rng), u2 = bv_rng_uniform(&rng);
                    double z = sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
                    w[j] = (float)(z * p->init_std);
                }
            }
            memset(L->m[i], 0, (size_t)n * sizeof(float));
            memset(L->v[i], 0, (size_t)n * sizeof(float));
        }
    }
}

static void blob_name(char *buf, size_t len, const seq_layer_state *L, size_t i,
                      const char *suffix)
{
    snprintf(buf, len, "layer/%s/%s%s", L->desc->name, L->desc->params[i].name, suffix);
}

bv_status bv_layer_engine_layer_get(const bv_layer_engine *e, size_t layer, bool optimizer,
                                  bv_state *s, bv_error *err)
{
    const seq_layer_state *L = &e->layers[layer];
    char name[256];
    for (size_t i = 0; i < L->desc->nparams; i++) {
        if (!L->owned[i])
            continue;
        size_t bytes = (size_t)numel(&L->desc->params[i]) * sizeof(float);
        const float *bufs[3] = {L->param[i], L->m[i], L->v[i]};
        const char *suffix[3] = {"", "/adam_m", "/adam_v"};
        for (int b = 0; b < (optimizer ? 3 : 1); b++) {
            blob_name(name, sizeof name, L, i, suffix[b]);
            if (bv_state_add(s, name, bufs[b], bytes) != BV_OK)
                return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the state");
        }
    }
    return BV_OK;
}

bv_status bv_layer_engine_layer_set(bv_layer_engine *e, size_t layer, bool optimizer,
                                  const bv_state *s, bv_error *err)
{
    seq_layer_state *L = &e->layers[layer];
    char name[256];
    for (size_t i = 0; i < L->desc->nparams; i++) {
        if (!L->owned[i])
            continue;
        size_t bytes = (size_t)numel(&L->desc->params[i]) * sizeof(float);
        float *bufs[3] = {L->param[i], L->m[i], L->v[i]};
        const char *suffix[3] = {"", "/adam_m", "/adam_v"};
        for (int b = 0; b < (optimizer ? 3 : 1); b++) {
            blob_name(name, sizeof name, L, i, suffix[b]);
            if (!bv_state_read(s, name, bufs[b], bytes))
                return bv_error_set(err, BV_ERR_CORRUPT, "the checkpoint has no %s of %zu "
                                    "bytes (a different model configuration?)", name, bytes);
        }
    }
    return BV_OK;
}

static void make_ctx(const bv_layer_engine *e, bv_seq_ctx *ctx, const int32_t *tokens,
                     int64_t batch, int64_t seq, bool training, uint64_t seed, int64_t step)
{
    *ctx = (bv_seq_ctx){.k = e->k, .compute = e->c, .batch = batch, .seq = seq,
                        .tokens = tokens, .training = training, .seed = seed, .step = step};
}

bv_status bv_layer_engine_forward(bv_layer_engine *e, const int32_t *tokens, int64_t batch,
                                int64_t seq, bool training, uint64_t seed, int64_t step,
                                const float **logits, bv_error *err)
{
    if (batch > e->max_batch || seq > e->max_seq)
        return bv_error_set(err, BV_ERR_INTERNAL, "batch %lld x %lld exceeds the engine's "
                            "buffers", (long long)batch, (long long)seq);
    bv_seq_ctx ctx;
    make_ctx(e, &ctx, tokens, batch, seq, training, seed, step);
    for (size_t l = 0; l < e->nlayers; l++) {
        seq_layer_state *L = &e->layers[l];
        bv_status st = e->mops->forward(e->model, l, &ctx, L->param, l ? e->act[l - 1] : NULL,
                                        e->act[l], L->saved, e->scratch, err);
        if (st != BV_OK)
            return st;
    }
    *logits = e->act[e->nlayers - 1];
    return BV_OK;
}

/* Backward over every layer from dlogits, adding into the gradient buffers. */
static bv_status engine_backward(bv_layer_engine *e, const bv_seq_ctx *ctx, bv_error *err)
{
    const float *dout = e->dlogits;
    int which = 0;
    for (size_t l = e->nlayers; l-- > 0;) {
        seq_layer_state *L = &e->layers[l];
        float *din = l ? e->dact[which] : NULL;
        bv_status st = e->mops->backward(e->model, l, ctx, L->param, l ? e->act[l - 1] : NULL,
                                         L->saved, dout, din, L->grad, e->scratch, err);
        if (st != BV_OK)
            return st;
        dout = din;
        which ^= 1;
    }
    return BV_OK;
}

bv_status bv_layer_engine_gradient(bv_layer_engine *e, const int32_t *tokens,
                                 const int32_t *targets, int64_t batch, int64_t seq,
                                 uint64_t seed, int64_t step, double *loss, bv_error *err)
{
    for (size_t l = 0; l < e->nlayers; l++)
        for (size_t i = 0; i < e->layers[l].desc->nparams; i++)
            if (e->layers[l].owned[i])
                memset(e->layers[l].grad[i], 0,
                       (size_t)numel(&e->layers[l].desc->params[i]) * sizeof(float));
    const float *logits;
    bv_status st = bv_layer_engine_forward(e, tokens, batch, seq, true, seed, step, &logits, err);
    if (st != BV_OK)
        return st;
    bv_seq_ctx ctx;
    make_ctx(e, &ctx, tokens, batch, seq, true, seed, step);
    bv_xent_result xr;
    st = e->mops->loss(e->model, &ctx, logits, targets, 1.0f / (float)(batch * seq),
                       e->dlogits, &xr, err);
    if (st != BV_OK)
        return st;
    *loss = xr.count ? xr.loss_sum / (double)xr.count : 0.0;
    return engine_backward(e, &ctx, err);
}

bv_status bv_layer_engine_loss(bv_layer_engine *e, const int32_t *tokens,
                               const int32_t *targets, int64_t batch, int64_t seq,
                               uint64_t seed, int64_t step, double *loss, bv_error *err)
{
    const float *logits;
    bv_status st = bv_layer_engine_forward(e, tokens, batch, seq, false, seed, step, &logits,
                                           err);
    if (st != BV_OK)
        return st;
    bv_seq_ctx ctx;
    make_ctx(e, &ctx, tokens, batch, seq, false, seed, step);
    bv_xent_result xr;
    st = e->mops->loss(e->model, &ctx, logits, targets, 0.0f, NULL, &xr, err);
    *loss = xr.count ? xr.loss_sum / (double)xr.count : 0.0;
    return st;
}

size_t bv_layer_engine_layers(const bv_layer_engine *e)
{
    return e->nlayers;
}

const bv_seq_layer *bv_layer_engine_layer(const bv_layer_engine *e, size_t layer)
{
    return e->layers[layer].desc;
}

bool bv_layer_engine_tensor(const bv_layer_engine *e, size_t layer, size_t i,
                            bv_layer_tensor *t)
{
    const seq_layer_state *L = &e->layers[layer];
    const bv_seq_param *p = &L->desc->params[i];
    *t = (bv_layer_tensor){L->param[i], L->grad[i], L->m[i], L->v[i], numel(p),
                           p->weight_decay};
    return L->owned[i];
}
