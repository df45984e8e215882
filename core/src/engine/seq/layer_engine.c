/* The layer engine (layer_engine.h): every layer of a sequence model in this process, run
 * in order; parameters, gradients, AdamW moments, activations and the saved and scratch
 * buffers laid out per layer from the layers' parameter specs. */
#include "layer_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/tensor.h"
#include "clock.h"
#include "plugin_arrays.h"
#include "rng.h"

typedef struct seq_layer_state {
    const bv_seq_layer *desc; /* &copy once read */
    bv_seq_layer copy;        /* the plugin's layer in this build's layout */
    float **param, **grad, **m, **v; /* per param; tied ones alias the owner's */
    bool *owned;   /* the layer's own tensor (not tied) */
    bool *replica; /* span: tied to a layer outside the span, so a copy kept here */
    float *block;  /* owned storage: params, grads, m, v; then tied gradients (span) */
    float **saved; /* per slot */
    size_t saved_floats;
} seq_layer_state;

struct bv_layer_engine {
    const bv_seq_model_ops *mops;
    bv_seq_model *model;
    const bv_compute_ops *k;
    bv_compute *c;
    int64_t max_batch, max_seq, vocab, width;
    size_t nlayers;
    size_t first, end; /* the layers this engine runs: [first, end) */
    int slots;
    bool span;         /* created by _create_span: tied gradients kept apart */
    seq_layer_state *layers;
    float ***act;     /* act[l][slot]: output of layer l */
    float **input;    /* input[slot]: the span's input (first > 0) */
    float *scratch;
    float *dact[2];   /* ping-pong activation gradients */
    float *dlogits;
};

static int64_t numel(const bv_seq_param *p)
{
    return p->rows * p->cols;
}

static bool in_span(const bv_layer_engine *e, size_t l)
{
    return l >= e->first && l < e->end;
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
        free(L->replica);
        bv_seq_layer_copy_free(&L->copy);
        bv_free_aligned(L->block);
        for (int s = 0; L->saved && s < e->slots; s++)
            bv_free_aligned(L->saved[s]);
        free(L->saved);
        for (int s = 0; e->act && e->act[l] && s < e->slots; s++)
            bv_free_aligned(e->act[l][s]);
        if (e->act)
            free(e->act[l]);
    }
    for (int s = 0; e->input && s < e->slots; s++)
        bv_free_aligned(e->input[s]);
    free(e->input);
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

static bv_status nomem(bv_layer_engine *e, bv_error *err, const char *what)
{
    bv_layer_engine_free(e);
    return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %s", what);
}

/* Layer l's tensors: its own in one block (params, grads, m, v); a tied one aliases its
 * owner's, or in a span keeps its own gradient (summed into the owner's by the caller,
 * bv_layer_engine_tie) and, when the owner is outside the span, its own copy. */
static bv_status layer_tensors(bv_layer_engine *e, size_t l, bv_error *err)
{
    seq_layer_state *L = &e->layers[l];
    size_t np = L->desc->nparams;
    size_t total = 0, tgrads = 0;
    for (size_t i = 0; i < np; i++) {
        const bv_seq_param *p = &L->desc->params[i];
        if (p->tied_layer >= 0) {
            if ((size_t)p->tied_layer >= l ||
                (size_t)p->tied_param >= e->layers[p->tied_layer].desc->nparams ||
                numel(&e->layers[p->tied_layer].desc->params[p->tied_param]) != numel(p))
                return bv_error_set(err, BV_ERR_PLUGIN, "layer %s: parameter %s is tied to "
                                    "a parameter that does not match", L->desc->name,
                                    p->name);
            L->replica[i] = e->span && !in_span(e, (size_t)p->tied_layer);
        }
        if (p->tied_layer < 0 || L->replica[i])
            total += (size_t)numel(p);
        else if (e->span)
            tgrads += (size_t)numel(p);
    }
    if (!(L->block = falloc(4 * total + tgrads)))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for layer %s's parameters",
                            L->desc->name);
    size_t off = 0, toff = 4 * total;
    for (size_t i = 0; i < np; i++) {
        const bv_seq_param *p = &L->desc->params[i];
        if (p->tied_layer >= 0 && !L->replica[i]) {
            seq_layer_state *O = &e->layers[p->tied_layer];
            L->param[i] = O->param[p->tied_param];
            L->grad[i] = O->grad[p->tied_param];
            L->m[i] = O->m[p->tied_param];
            L->v[i] = O->v[p->tied_param];
            if (e->span) {
                L->grad[i] = L->block + toff;
                toff += (size_t)numel(p);
            }
            continue;
        }
        L->owned[i] = p->tied_layer < 0;
        L->param[i] = L->block + off;
        L->grad[i] = L->block + total + off;
        L->m[i] = L->block + 2 * total + off;
        L->v[i] = L->block + 3 * total + off;
        off += (size_t)numel(p);
    }
    return BV_OK;
}

bv_status bv_layer_engine_create_span(const bv_seq_model_ops *mops, bv_seq_model *model,
                                      const bv_compute_ops *k, bv_compute *c,
                                      int64_t max_batch, int64_t max_seq,
                                      const bv_layer_span *span, bv_layer_engine **out,
                                      bv_error *err)
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
    e->span = span != NULL;
    e->first = span ? span->first : 0;
    e->end = span ? span->end : e->nlayers;
    e->slots = span ? span->slots : 1;
    if (e->first >= e->end || e->end > e->nlayers || e->slots < 1) {
        size_t n = e->nlayers;
        free(e);
        return bv_error_set(err, BV_ERR_INTERNAL, "no layers [%zu, %zu) of %zu, %d slots",
                            span->first, span->end, n, span->slots);
    }
    e->layers = calloc(e->nlayers, sizeof *e->layers);
    e->act = calloc(e->nlayers, sizeof *e->act);
    e->input = calloc((size_t)e->slots, sizeof *e->input);
    if (!e->layers || !e->act || !e->input)
        return nomem(e, err, "the layers");
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
        if (!in_span(e, l))
            continue;
        size_t np = L->desc->nparams;
        L->param = calloc(np + 1, sizeof *L->param);
        L->grad = calloc(np + 1, sizeof *L->grad);
        L->m = calloc(np + 1, sizeof *L->m);
        L->v = calloc(np + 1, sizeof *L->v);
        L->owned = calloc(np + 1, sizeof *L->owned);
        L->replica = calloc(np + 1, sizeof *L->replica);
        L->saved = calloc((size_t)e->slots, sizeof *L->saved);
        e->act[l] = calloc((size_t)e->slots, sizeof *e->act[l]);
        if (!L->param || !L->grad || !L->m || !L->v || !L->owned || !L->replica ||
            !L->saved || !e->act[l])
            return nomem(e, err, "the layers");
        if (layer_tensors(e, l, err) != BV_OK) {
            bv_layer_engine_free(e);
            return err->status;
        }
        L->saved_floats = mops->saved_floats(model, l, max_batch, max_seq);
        for (int s = 0; s < e->slots; s++) {
            L->saved[s] = falloc(L->saved_floats);
            e->act[l][s] = falloc((size_t)(T * L->desc->out_width));
            if (!L->saved[s] || !e->act[l][s])
                return nomem(e, err, "activations");
        }
        size_t sc = mops->scratch_floats(model, l, max_batch, max_seq);
        scratch = sc > scratch ? sc : scratch;
        if (L->desc->out_width > maxw && L->desc->kind != BV_SEQ_HEAD)
            maxw = L->desc->out_width;
        if (L->desc->in_width > maxw)
            maxw = L->desc->in_width;
        if (L->desc->kind == BV_SEQ_HEAD)
            e->vocab = L->desc->out_width;
    }
    for (int s = 0; e->first > 0 && s < e->slots; s++)
        if (!(e->input[s] = falloc((size_t)(T * e->layers[e->first].desc->in_width))))
            return nomem(e, err, "activations");
    e->width = maxw;
    e->scratch = falloc(scratch);
    e->dact[0] = falloc((size_t)(T * maxw));
    e->dact[1] = falloc((size_t)(T * maxw));
    e->dlogits = falloc((size_t)(T * e->vocab));
    if (!e->scratch || !e->dact[0] || !e->dact[1] || !e->dlogits)
        return nomem(e, err, "activations");
    *out = e;
    return BV_OK;
}

bv_status bv_layer_engine_create(const bv_seq_model_ops *mops, bv_seq_model *model,
                                 const bv_compute_ops *k, bv_compute *c, int64_t max_batch,
                                 int64_t max_seq, bv_layer_engine **out, bv_error *err)
{
    return bv_layer_engine_create_span(mops, model, k, c, max_batch, max_seq, NULL, out, err);
}

/* Box-Muller over the (seed, layer) stream, in parameter order; w NULL only draws. */
static void init_tensor(bv_rng *rng, const bv_seq_param *p, float *w)
{
    if (p->init != BV_SEQ_INIT_NORMAL) {
        for (int64_t j = 0; w && j < numel(p); j++)
            w[j] = p->init == BV_SEQ_INIT_ONES ? 1.0f : 0.0f;
        return;
    }
    for (int64_t j = 0; j < numel(p); j++) {
        double u1 = bv_rng_uniform(rng), u2 = bv_rng_uniform(rng);
        if (w)
            w[j] = (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2) * p->init_std);
    }
}

void bv_layer_engine_init(bv_layer_engine *e, uint64_t seed)
{
    for (size_t l = e->first; l < e->end; l++) {
        seq_layer_state *L = &e->layers[l];
        bv_rng rng;
        bv_rng_init(&rng, seed, 0x5E0000 + l);
        for (size_t i = 0; i < L->desc->nparams; i++) {
            const bv_seq_param *p = &L->desc->params[i];
            if (!L->owned[i] && !L->replica[i])
                continue;
            if (L->replica[i]) { /* the owner's draws, replayed up to its tensor */
                const bv_seq_layer *O = e->layers[p->tied_layer].desc;
                bv_rng_init(&rng, seed, 0x5E0000 + (uint64_t)p->tied_layer);
                for (int j = 0; j < p->tied_param; j++)
                    if (O->params[j].tied_layer < 0)
                        init_tensor(&rng, &O->params[j], NULL);
                p = &O->params[p->tied_param];
            }
            init_tensor(&rng, p, L->param[i]);
            memset(L->m[i], 0, (size_t)numel(p) * sizeof(float));
            memset(L->v[i], 0, (size_t)numel(p) * sizeof(float));
        }
    }
}

/* The blob of tensor i of L (a replica's: its owner's, which the owner's stage writes). */
static void blob_name(const bv_layer_engine *e, char *buf, size_t len, const seq_layer_state *L,
                      size_t i, const char *suffix)
{
    const bv_seq_param *p = &L->desc->params[i];
    if (L->replica[i]) {
        const bv_seq_layer *O = e->layers[p->tied_layer].desc;
        snprintf(buf, len, "layer/%s/%s%s", O->name, O->params[p->tied_param].name, suffix);
        return;
    }
    snprintf(buf, len, "layer/%s/%s%s", L->desc->name, p->name, suffix);
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
            blob_name(e, name, sizeof name, L, i, suffix[b]);
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
        if (!L->owned[i] && !L->replica[i])
            continue;
        size_t bytes = (size_t)numel(&L->desc->params[i]) * sizeof(float);
        float *bufs[3] = {L->param[i], L->m[i], L->v[i]};
        const char *suffix[3] = {"", "/adam_m", "/adam_v"};
        for (int b = 0; b < (optimizer ? 3 : 1); b++) {
            blob_name(e, name, sizeof name, L, i, suffix[b]);
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

/* Layer l's input in slot s: the layer before's output, the span's input, or the tokens. */
static const float *layer_input(const bv_layer_engine *e, size_t l, int s)
{
    return l > e->first ? e->act[l - 1][s] : l ? e->input[s] : NULL;
}

bv_status bv_layer_engine_span_forward(bv_layer_engine *e, int slot, const bv_seq_ctx *ctx,
                                       const float **out, bv_error *err)
{
    if (ctx->batch > e->max_batch || ctx->seq > e->max_seq || slot < 0 || slot >= e->slots)
        return bv_error_set(err, BV_ERR_INTERNAL, "batch %lld x %lld (slot %d) exceeds the "
                            "engine's buffers", (long long)ctx->batch, (long long)ctx->seq,
                            slot);
    for (size_t l = e->first; l < e->end; l++) {
        seq_layer_state *L = &e->layers[l];
        bv_status st = e->mops->forward(e->model, l, ctx, L->param, layer_input(e, l, slot),
                                        e->act[l][slot], L->saved[slot], e->scratch, err);
        if (st != BV_OK)
            return st;
    }
    *out = e->act[e->end - 1][slot];
    return BV_OK;
}

bv_status bv_layer_engine_span_loss(bv_layer_engine *e, int slot, const bv_seq_ctx *ctx,
                                    const int32_t *targets, float grad_scale,
                                    bv_xent_result *xr, bv_error *err)
{
    if (e->end != e->nlayers)
        return bv_error_set(err, BV_ERR_INTERNAL, "the loss needs the head's logits");
    return e->mops->loss(e->model, ctx, e->act[e->end - 1][slot], targets, grad_scale,
                         grad_scale != 0.0f ? e->dlogits : NULL, xr, err);
}

bv_status bv_layer_engine_span_backward(bv_layer_engine *e, int slot, const bv_seq_ctx *ctx,
                                        const float *dout, const float **din, bv_error *err)
{
    if (!dout)
        dout = e->dlogits;
    int which = 0;
    for (size_t l = e->end; l-- > e->first;) {
        seq_layer_state *L = &e->layers[l];
        float *d = l ? e->dact[which] : NULL;
        bv_status st = e->mops->backward(e->model, l, ctx, L->param, layer_input(e, l, slot),
                                         L->saved[slot], dout, d, L->grad, e->scratch, err);
        if (st != BV_OK)
            return st;
        dout = d;
        which ^= 1;
    }
    if (din)
        *din = dout;
    return BV_OK;
}

float *bv_layer_engine_input(bv_layer_engine *e, int slot)
{
    return e->input[slot];
}

void bv_layer_engine_zero_grads(bv_layer_engine *e)
{
    for (size_t l = e->first; l < e->end; l++) {
        const seq_layer_state *L = &e->layers[l];
        for (size_t i = 0; i < L->desc->nparams; i++)
            if (L->owned[i] || L->replica[i] || e->span) /* on the device, if there */
                bv_zero(e->k, e->c, numel(&L->desc->params[i]), L->grad[i]);
    }
}

bv_status bv_layer_engine_forward(bv_layer_engine *e, const int32_t *tokens, int64_t batch,
                                int64_t seq, bool training, uint64_t seed, int64_t step,
                                const float **logits, bv_error *err)
{
    bv_seq_ctx ctx;
    make_ctx(e, &ctx, tokens, batch, seq, training, seed, step);
    return bv_layer_engine_span_forward(e, 0, &ctx, logits, err);
}

bv_status bv_layer_engine_gradient(bv_layer_engine *e, const int32_t *tokens,
                                 const int32_t *targets, int64_t batch, int64_t seq,
                                 uint64_t seed, int64_t step, double *loss, bv_error *err)
{
    bv_layer_engine_zero_grads(e);
    const float *logits;
    bv_status st = bv_layer_engine_forward(e, tokens, batch, seq, true, seed, step, &logits, err);
    if (st != BV_OK)
        return st;
    bv_seq_ctx ctx;
    make_ctx(e, &ctx, tokens, batch, seq, true, seed, step);
    bv_xent_result xr;
    st = bv_layer_engine_span_loss(e, 0, &ctx, targets, 1.0f / (float)(batch * seq), &xr, err);
    if (st != BV_OK)
        return st;
    *loss = xr.count ? xr.loss_sum / (double)xr.count : 0.0;
    return bv_layer_engine_span_backward(e, 0, &ctx, NULL, NULL, err);
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
    st = bv_layer_engine_span_loss(e, 0, &ctx, targets, 0.0f, &xr, err);
    *loss = xr.count ? xr.loss_sum / (double)xr.count : 0.0;
    return st;
}

bv_status bv_layer_engine_profile(bv_layer_engine *e, const bv_seq_ctx *ctx,
                                  const int32_t *targets, double *fwd, double *bwd,
                                  double *bytes, bv_error *err)
{
    if (e->first != 0 || e->end != e->nlayers)
        return bv_error_set(err, BV_ERR_INTERNAL, "a profile needs every layer");
    int64_t T = ctx->batch * ctx->seq;
    for (size_t l = 0; l < e->nlayers; l++) {
        seq_layer_state *L = &e->layers[l];
        double t0 = bv_now_seconds();
        bv_status st = e->mops->forward(e->model, l, ctx, L->param, layer_input(e, l, 0),
                                        e->act[l][0], L->saved[0], e->scratch, err);
        if (st != BV_OK)
            return st;
        fwd[l] = bv_now_seconds() - t0;
        size_t floats = L->saved_floats + (size_t)(T * L->desc->out_width);
        for (size_t i = 0; i < L->desc->nparams; i++)
            if (L->owned[i] || L->replica[i])
                floats += 4 * (size_t)numel(&L->desc->params[i]);
        bytes[l] = (double)floats * sizeof(float);
    }
    double t0 = bv_now_seconds();
    bv_xent_result xr;
    bv_status st = bv_layer_engine_span_loss(e, 0, ctx, targets, 1.0f / (float)T, &xr, err);
    if (st != BV_OK)
        return st;
    fwd[e->nlayers - 1] += bv_now_seconds() - t0; /* the loss is the head's */
    const float *dout = e->dlogits;
    int which = 0;
    for (size_t l = e->nlayers; l-- > 0;) {
        seq_layer_state *L = &e->layers[l];
        float *d = l ? e->dact[which] : NULL;
        t0 = bv_now_seconds();
        st = e->mops->backward(e->model, l, ctx, L->param, layer_input(e, l, 0), L->saved[0],
                               dout, d, L->grad, e->scratch, err);
        if (st != BV_OK)
            return st;
        bwd[l] = bv_now_seconds() - t0;
        dout = d;
        which ^= 1;
    }
    return BV_OK;
}

size_t bv_layer_engine_layers(const bv_layer_engine *e)
{
    return e->nlayers;
}

void bv_layer_engine_span_of(const bv_layer_engine *e, size_t *first, size_t *end)
{
    *first = e->first;
    *end = e->end;
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
    if (!in_span(e, layer)) {
        *t = (bv_layer_tensor){.n = numel(p), .weight_decay = p->weight_decay};
        return false;
    }
    *t = (bv_layer_tensor){L->param[i], L->grad[i], L->m[i], L->v[i], numel(p),
                           p->weight_decay, L->replica[i]};
    return L->owned[i] || L->replica[i];
}

bool bv_layer_engine_tie(const bv_layer_engine *e, size_t layer, size_t i, size_t *owner,
                         size_t *owner_param)
{
    const bv_seq_param *p = &e->layers[layer].desc->params[i];
    if (p->tied_layer < 0)
        return false;
    *owner = (size_t)p->tied_layer;
    *owner_param = (size_t)p->tied_param;
    return true;
}
