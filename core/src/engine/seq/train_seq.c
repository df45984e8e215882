/* Training a sequence model layer by layer (train_seq.h). The run is a depth-1 pipeline:
 * one stage holding every layer, running forward then backward over the list for each
 * batch. Everything random is a pure function of (seed, step): the batch a step trains
 * on, the evaluation batches, the dropout masks. With the parameters, AdamW moments and
 * step count in the checkpoint, a resumed run continues bit for bit (same thread count). */
#include "train_seq.h"

#include "clock.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "bivouac/wire.h"
#include "experiment.h"
#include "json_out.h"
#include "rng.h"

/* ---- schemas ------------------------------------------------------------------------- */

const bv_option bv_seq_dataset_schema[] = {
    BV_OPT_FILE("text", "", "UTF-8 text file, relative to the experiment file"),
    BV_OPT_STR("name", "",
               "text under $BIVOUAC_DATA_DIR: a file, or a directory holding input.txt"),
    BV_OPT_FLOAT_RANGE("val_fraction", "0.1", 0.0001, 0.9,
                       "the last fraction of the text is the validation split (nanoGPT: 0.1)"),
    BV_OPT_END,
};

const bv_option bv_seq_train_schema[] = {
    BV_OPT_INT_RANGE("steps", "2000", 1, 1e12, "optimizer steps (iterations)"),
    BV_OPT_INT_RANGE("batch", "12", 1, 1e6, "sequences per step"),
    BV_OPT_INT_RANGE("block", "64", 1, 1e6, "tokens per sequence (context length)"),
    BV_OPT_FLOAT_RANGE("lr", "1e-3", 0, 10, "peak learning rate"),
    BV_OPT_FLOAT_RANGE("min_lr", "1e-4", 0, 10, "learning rate at the end of the cosine"),
    BV_OPT_INT_RANGE("warmup", "100", 0, 1e12, "linear warmup steps"),
    BV_OPT_INT_RANGE("decay_steps", "0", 0, 1e12,
                     "step where the cosine reaches min_lr (0: steps)"),
    BV_OPT_FLOAT_RANGE("weight_decay", "0.1", 0, 10, "AdamW decay on matrices only"),
    BV_OPT_FLOAT_RANGE("beta1", "0.9", 0, 0.999999, "AdamW beta1"),
    BV_OPT_FLOAT_RANGE("beta2", "0.99", 0, 0.999999, "AdamW beta2"),
    BV_OPT_FLOAT_RANGE("eps", "1e-8", 0, 1, "AdamW epsilon"),
    BV_OPT_FLOAT_RANGE("grad_clip", "1.0", 0, 1e9, "clip the global gradient norm (0: off)"),
    BV_OPT_INT_RANGE("eval_interval", "250", 1, 1e12,
                     "evaluate (and offer a checkpoint) every this many steps"),
    BV_OPT_INT_RANGE("eval_iters", "20", 1, 1e9, "batches per split at each evaluation"),
    BV_OPT_INT_RANGE("final_eval_iters", "200", 1, 1e9,
                     "batches per split for the final val_loss in result.json"),
    BV_OPT_INT_RANGE("seed", "1337", 0, 9007199254740992.0,
                     "seed for weights, batches and dropout"),
    BV_OPT_END,
};

/* ---- helpers ------------------------------------------------------------------------- */

/* ---- corpus -------------------------------------------------------------------------- */

/* Decodes one UTF-8 sequence at p (n bytes left); 0 if invalid (overlong, surrogate, out of
 * range, truncated), else its length. */
static int utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
    unsigned char c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > n)
        return 0;
    uint32_t v = c & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    static const uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_for_len[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

bv_status bv_text_corpus_load(const char *path, double val_fraction, bv_text_corpus *out,
                              bv_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return bv_error_set(err, BV_ERR_NOMEM, "out of memory reading %s", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    bool read_error = ferror(f);
    fclose(f);
    if (read_error) {
        free(buf);
        return bv_error_set(err, BV_ERR_IO, "error reading %s", path);
    }
    if (len == 0) {
        free(buf);
        return bv_error_set(err, BV_ERR_INVALID, "the text %s is empty", path);
    }
    uint32_t *cps = malloc(len * sizeof *cps);
    if (!cps) {
        free(buf);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory reading %s", path);
    }
    size_t n = 0, line = 1;
    for (size_t i = 0; i < len;) {
        int l = utf8_decode(buf + i, len - i, &cps[n]);
        if (!l) {
            bv_status st = bv_error_set(err, BV_ERR_INVALID,
                                        "the text %s is not UTF-8: invalid byte 0x%02x at "
                                        "offset %zu (line %zu)", path, buf[i], i, line);
            free(buf);
            free(cps);
            return st;
        }
        line += cps[n] == '\n';
        i += (size_t)l;
        n++;
    }
    free(buf);
    /* the vocabulary: every distinct code point of the text, sorted (nanoGPT's
     * prepare.py builds it from the whole file, so validation has no unknown chars) */
    uint32_t *sorted = malloc(n * sizeof *sorted);
    out->ids = malloc(n * sizeof *out->ids);
    if (!sorted || !out->ids) {
        free(sorted);
        free(cps);
        free(out->ids);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory tokenising %s", path);
    }
    memcpy(sorted, cps, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_u32);
    size_t v = 0;
    for (size_t i = 0; i < n; i++)
        if (v == 0 || sorted[i] != sorted[v - 1])
            sorted[v++] = sorted[i];
    out->vocab = sorted; /* n entries allocated, the first v used */
    out->vocab_size = (int64_t)v;
    for (size_t i = 0; i < n; i++) {
        const uint32_t *hit = bsearch(&cps[i], out->vocab, v, sizeof *cps, cmp_u32);
        out->ids[i] = (int32_t)(hit - out->vocab);
    }
    free(cps);
    out->n = (int64_t)n;
    out->n_train = (int64_t)((double)n * (1.0 - val_fraction));
    return BV_OK;
}

void bv_text_corpus_free(bv_text_corpus *c)
{
    free(c->vocab);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

/* Where the experiment's text is. */
static void corpus_path(const bv_experiment *x, char *buf, size_t len)
{
    const char *text = bv_opts_str(&x->dataset, "text");
    const char *name = bv_opts_str(&x->dataset, "name");
    if (text[0]) {
        snprintf(buf, len, "%s", text);
        return;
    }
    const char *root = getenv("BIVOUAC_DATA_DIR");
    snprintf(buf, len, "%s/%s", root && *root ? root : "data", name);
    struct stat st;
    if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "/input.txt");
    }
}

/* ---- experiment checks --------------------------------------------------------------- */

static const bv_pos *value_pos(const bv_opts *o, const char *name, const bv_node *fallback)
{
    const bv_opt_value *v = bv_opts_find(o, name);
    if (v && v->from_user)
        return &v->pos;
    return fallback ? &fallback->pos : NULL;
}

void bv_seq_experiment_check(bv_experiment *x, const bv_node *dataset, bv_diag *diag)
{
    const char *text = bv_opts_str(&x->dataset, "text");
    const char *name = bv_opts_str(&x->dataset, "name");
    const bv_pos *dpos = value_pos(&x->dataset, text[0] ? "text" : "name", dataset);
    if ((text[0] != '\0') == (name[0] != '\0')) {
        bv_diag_add(diag, dataset ? &dataset->pos : NULL,
                    text[0] ? "dataset takes only one of 'text' or 'name'"
                            : "dataset needs 'text' (a UTF-8 file) or 'name' for a "
                              "sequence model");
        return;
    }
    char path[4096];
    corpus_path(x, path, sizeof path);
    /* the label: the name, or the file's name ("input.txt": its directory's name) */
    char label[4096];
    snprintf(label, sizeof label, "%s", name[0] ? name : path);
    char *base = strrchr(label, '/');
    if (base && strcmp(base, "/input.txt") == 0) {
        *base = '\0';
        base = strrchr(label, '/');
    }
    free(x->dataset_label);
    x->dataset_label = strdup(base ? base + 1 : label);

    const bv_compute_ops *k = x->compute.plugin ? x->compute.plugin->ops : NULL;
    if (k && (x->compute.plugin->ops_size < offsetof(bv_compute_ops, scale) + sizeof k->scale ||
              !k->attention_forward || !k->layernorm_forward))
        bv_diag_add(diag, NULL, "compute plugin '%s' has no transformer kernels (plugin ABI "
                    "1.2)", x->compute.plugin->name);

    /* the model's own checks need no data: report them even if the text is bad */
    const bv_seq_model_ops *mops = x->model.plugin ? x->model.plugin->ops : NULL;
    if (mops && mops->validate) {
        bv_seq_shape shape = {1, bv_opts_int(&x->train, "block"),
                              bv_opts_int(&x->train, "batch")};
        mops->validate(&x->model.opts, &shape, diag);
    }
    bv_text_corpus c;
    bv_error err = {0};
    if (bv_text_corpus_load(path, bv_opts_float(&x->dataset, "val_fraction"), &c, &err) !=
        BV_OK) {
        bv_diag_add(diag, dpos, "%s", err.msg);
        return;
    }
    int64_t block = bv_opts_int(&x->train, "block");
    int64_t val = c.n - c.n_train;
    if (block >= c.n_train || block >= val)
        bv_diag_add(diag, value_pos(&x->train, "block", NULL),
                    "'block' (%lld) must be smaller than both splits of %s: %lld training "
                    "and %lld validation characters", (long long)block, path,
                    (long long)c.n_train, (long long)val);
    bv_text_corpus_free(&c);
}

/* ---- the layer engine ---------------------------------------------------------------- */

typedef struct seq_layer_state {
    const bv_seq_layer *desc;
    float **param, **grad, **m, **v; /* per param; tied ones alias the owner's */
    bool *owned;
    float *block;            /* owned storage: params, grads, m, v */
    float *saved;
    size_t saved_floats;
} seq_layer_state;

struct bv_seq_engine {
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

void bv_seq_engine_free(bv_seq_engine *e)
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

bv_status bv_seq_engine_create(const bv_seq_model_ops *mops, bv_seq_model *model,
                               const bv_compute_ops *k, bv_compute *c, int64_t max_batch,
                               int64_t max_seq, bv_seq_engine **out, bv_error *err)
{
    *out = NULL;
    bv_seq_engine *e = calloc(1, sizeof *e);
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
        bv_seq_engine_free(e);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    int64_t T = max_batch * max_seq;
    size_t scratch = 0;
    int64_t maxw = 1;
    for (size_t l = 0; l < e->nlayers; l++) {
        seq_layer_state *L = &e->layers[l];
        L->desc = mops->layer(model, l);
        size_t np = L->desc->nparams;
        L->param = calloc(np + 1, sizeof *L->param);
        L->grad = calloc(np + 1, sizeof *L->grad);
        L->m = calloc(np + 1, sizeof *L->m);
        L->v = calloc(np + 1, sizeof *L->v);
        L->owned = calloc(np + 1, sizeof *L->owned);
        if (!L->param || !L->grad || !L->m || !L->v || !L->owned) {
            bv_seq_engine_free(e);
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        }
        size_t total = 0;
        for (size_t i = 0; i < np; i++)
            if (L->desc->params[i].tied_layer < 0)
                total += (size_t)numel(&L->desc->params[i]);
        L->block = falloc(4 * total);
        if (!L->block) {
            bv_seq_engine_free(e);
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
                    bv_seq_engine_free(e);
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
            bv_seq_engine_free(e);
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
        bv_seq_engine_free(e);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for activations");
    }
    *out = e;
    return BV_OK;
}

/* Box-Muller over the (seed, layer) stream, in parameter order. */
void bv_seq_engine_init(bv_seq_engine *e, uint64_t seed)
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

bv_status bv_seq_engine_layer_get(const bv_seq_engine *e, size_t layer, bool optimizer,
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

bv_status bv_seq_engine_layer_set(bv_seq_engine *e, size_t layer, bool optimizer,
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

static void make_ctx(const bv_seq_engine *e, bv_seq_ctx *ctx, const int32_t *tokens,
                     int64_t batch, int64_t seq, bool training, uint64_t seed, int64_t step)
{
    *ctx = (bv_seq_ctx){.k = e->k, .compute = e->c, .batch = batch, .seq = seq,
                        .tokens = tokens, .training = training, .seed = seed, .step = step};
}

bv_status bv_seq_engine_forward(bv_seq_engine *e, const int32_t *tokens, int64_t batch,
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
static bv_status engine_backward(bv_seq_engine *e, const bv_seq_ctx *ctx, bv_error *err)
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

bv_status bv_seq_engine_gradient(bv_seq_engine *e, const int32_t *tokens,
                                 const int32_t *targets, int64_t batch, int64_t seq,
                                 uint64_t seed, int64_t step, double *loss, bv_error *err)
{
    for (size_t l = 0; l < e->nlayers; l++)
        for (size_t i = 0; i < e->layers[l].desc->nparams; i++)
            if (e->layers[l].owned[i])
                memset(e->layers[l].grad[i], 0,
                       (size_t)numel(&e->layers[l].desc->params[i]) * sizeof(float));
    const float *logits;
    bv_status st = bv_seq_engine_forward(e, tokens, batch, seq, true, seed, step, &logits, err);
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

void bv_seq_engine_param(bv_seq_engine *e, size_t layer, size_t i, float **param,
                         float **grad)
{
    *param = e->layers[layer].param[i];
    *grad = e->layers[layer].grad[i];
}

/* ---- the training run ---------------------------------------------------------------- */

typedef struct step_record {
    int64_t step; /* 1-based: optimizer steps done */
    double loss, lr, grad_norm, seconds;
} step_record;

typedef struct eval_record {
    int64_t step;
    double train_loss, val_loss, seconds;
} eval_record;

typedef struct seq_run {
    const bv_experiment *x;
    uint64_t seed;
    const char *out_dir;
    bv_text_corpus corpus;
    const bv_seq_model_ops *mops;
    bv_seq_model *model;
    const bv_compute_ops *k;
    bv_compute *c;
    bv_seq_engine *e;
    bv_resilience *res[BV_MAX_RESILIENCE];
    int64_t batch, block, steps;
    int32_t *tokens, *targets;
    step_record *hist;
    size_t nhist;
    eval_record *evals;
    size_t nevals;
    double wall_before, train_seconds, eval_seconds;
    int64_t tokens_trained;
    FILE *metrics;
} seq_run;

/* nanoGPT's get_lr: linear warmup from lr/(warmup+1), cosine to min_lr at decay_steps. */
static double lr_at(const bv_opts *t, int64_t it)
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

/* batch sequences of block tokens at random offsets of a split, as nanoGPT's get_batch;
 * the offsets depend only on (seed, stream). */
static void draw_batch(seq_run *r, bool val, uint64_t stream)
{
    int64_t begin = val ? r->corpus.n_train : 0;
    int64_t len = val ? r->corpus.n - r->corpus.n_train : r->corpus.n_train;
    bv_rng rng;
    bv_rng_init(&rng, r->seed, stream);
    for (int64_t b = 0; b < r->batch; b++) {
        int64_t off = begin + (int64_t)(bv_rng_next(&rng) % (uint64_t)(len - r->block));
        memcpy(r->tokens + b * r->block, r->corpus.ids + off, (size_t)r->block * 4);
        memcpy(r->targets + b * r->block, r->corpus.ids + off + 1, (size_t)r->block * 4);
    }
}

#define STREAM_TRAIN(step) ((uint64_t)(step) * 2)
#define STREAM_EVAL(step, split, i) \
    ((uint64_t)1 << 62 | (uint64_t)(step) << 24 | (uint64_t)(split) << 23 | (uint64_t)(i))

static bv_status forward_loss(seq_run *r, bool training, int64_t step, float grad_scale,
                              double *loss, bv_error *err)
{
    const float *logits;
    bv_status st = bv_seq_engine_forward(r->e, r->tokens, r->batch, r->block, training,
                                         r->seed, step, &logits, err);
    if (st != BV_OK)
        return st;
    bv_seq_ctx ctx;
    make_ctx(r->e, &ctx, r->tokens, r->batch, r->block, training, r->seed, step);
    bv_xent_result xr;
    st = r->mops->loss(r->model, &ctx, logits, r->targets, grad_scale,
                       training ? r->e->dlogits : NULL, &xr, err);
    *loss = xr.count ? xr.loss_sum / (double)xr.count : 0.0;
    return st;
}

/* Mean loss over iters batches of each split (nanoGPT's estimate_loss). */
static bv_status evaluate(seq_run *r, int64_t step, int64_t iters, double *train, double *val,
                          bv_error *err)
{
    double sum[2] = {0, 0};
    for (int split = 0; split < 2; split++)
        for (int64_t i = 0; i < iters; i++) {
            draw_batch(r, split == 1, STREAM_EVAL(step, split, i));
            double l;
            bv_status st = forward_loss(r, false, step, 0.0f, &l, err);
            if (st != BV_OK)
                return st;
            sum[split] += l;
        }
    *train = sum[0] / (double)iters;
    *val = sum[1] / (double)iters;
    return BV_OK;
}

static bv_status train_step(seq_run *r, int64_t it, step_record *rec, bv_error *err)
{
    const bv_opts *t = &r->x->train;
    bv_seq_engine *e = r->e;
    draw_batch(r, false, STREAM_TRAIN(it));
    double loss;
    bv_status st = bv_seq_engine_gradient(e, r->tokens, r->targets, r->batch, r->block,
                                          r->seed, it, &loss, err);
    if (st != BV_OK)
        return st;
    if (!isfinite(loss))
        return bv_error_set(err, BV_ERR_STOPPED, "the loss is %g at step %lld", loss,
                            (long long)it + 1);
    /* global norm over every owned gradient, in layer and parameter order */
    double sq = 0;
    for (size_t l = 0; l < e->nlayers; l++)
        for (size_t i = 0; i < e->layers[l].desc->nparams; i++)
            if (e->layers[l].owned[i])
                sq += r->k->sum_squares(r->c, numel(&e->layers[l].desc->params[i]),
                                        e->layers[l].grad[i]);
    double norm = sqrt(sq), clip = bv_opts_float(t, "grad_clip");
    double lr = lr_at(t, it);
    float coef = clip > 0 && norm > 0 ? (float)(clip / (norm + 1e-6)) : 1.0f;
    bv_adam_params ap = {
        .lr = (float)lr,
        .beta1 = (float)bv_opts_float(t, "beta1"),
        .beta2 = (float)bv_opts_float(t, "beta2"),
        .eps = (float)bv_opts_float(t, "eps"),
        .decoupled = true,
        .step = it + 1,
    };
    float wd = (float)bv_opts_float(t, "weight_decay");
    for (size_t l = 0; l < e->nlayers; l++) {
        seq_layer_state *L = &e->layers[l];
        for (size_t i = 0; i < L->desc->nparams; i++) {
            if (!L->owned[i])
                continue;
            int64_t n = numel(&L->desc->params[i]);
            if (coef < 1.0f)
                r->k->scale(r->c, n, coef, L->grad[i]);
            ap.weight_decay = L->desc->params[i].weight_decay ? wd : 0.0f;
            r->k->adam_step(r->c, n, L->param[i], L->grad[i], L->m[i], L->v[i], &ap);
        }
    }
    *rec = (step_record){.step = it + 1, .loss = loss, .lr = lr, .grad_norm = norm};
    return BV_OK;
}

static void write_step(FILE *f, const step_record *s)
{
    fprintf(f, "{\"step\": %lld, \"train_loss\": ", (long long)s->step);
    bv_json_number(f, s->loss);
    bv_json_field(f, "lr", s->lr);
    bv_json_field(f, "grad_norm", s->grad_norm);
    bv_json_field(f, "seconds", s->seconds);
    fputs("}\n", f);
}

static void write_eval(FILE *f, const eval_record *ev)
{
    fprintf(f, "{\"step\": %lld, \"eval_train_loss\": ", (long long)ev->step);
    bv_json_number(f, ev->train_loss);
    bv_json_field(f, "val_loss", ev->val_loss);
    bv_json_field(f, "seconds", ev->seconds);
    fputs("}\n", f);
    fflush(f);
}

static bv_status push(void **arr, size_t *n, size_t elem, const void *item)
{
    /* grows by powers of two: reallocate when n is 0 or a power of two */
    if (*n == 0 || (*n & (*n - 1)) == 0) {
        void *p = realloc(*arr, (*n ? *n * 2 : 64) * elem);
        if (!p)
            return BV_ERR_NOMEM;
        *arr = p;
    }
    memcpy((char *)*arr + *n * elem, item, elem);
    (*n)++;
    return BV_OK;
}

/* The model section as YAML text, so `bivouac sample` can rebuild the model. */
static char *model_section_yaml(const bv_experiment *x)
{
    const bv_node *model = bv_node_get(x->root, "model");
    return model ? bv_node_to_yaml(model) : NULL;
}

static bv_status snapshot(seq_run *r, int64_t steps_done, double wall, bv_state *s,
                          bv_error *err)
{
    s->epoch = steps_done;
    for (size_t l = 0; l < r->e->nlayers; l++) {
        bv_status st = bv_seq_engine_layer_get(r->e, l, true, s, err);
        if (st != BV_OK)
            return st;
    }
    char *yaml = model_section_yaml(r->x);
    int64_t block = r->block;
    bool ok = yaml &&
              bv_state_add(s, "run/step", &steps_done, sizeof steps_done) == BV_OK &&
              bv_state_add(s, "run/seed", &r->seed, sizeof r->seed) == BV_OK &&
              bv_state_add(s, "run/wall", &wall, sizeof wall) == BV_OK &&
              bv_state_add(s, "run/train_seconds", &r->train_seconds,
                               sizeof r->train_seconds) == BV_OK &&
              bv_state_add(s, "run/history", r->hist, r->nhist * sizeof *r->hist) ==
                  BV_OK &&
              bv_state_add(s, "run/evals", r->evals, r->nevals * sizeof *r->evals) ==
                  BV_OK &&
              bv_state_add(s, "model/plugin", r->x->model.plugin->name,
                               strlen(r->x->model.plugin->name)) == BV_OK &&
              bv_state_add(s, "model/section", yaml, strlen(yaml)) == BV_OK &&
              bv_state_add(s, "model/block", &block, sizeof block) == BV_OK &&
              bv_state_add(s, "tokenizer/vocab", r->corpus.vocab,
                               (size_t)r->corpus.vocab_size * sizeof *r->corpus.vocab) == BV_OK;
    free(yaml);
    if (!ok)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the training state");
    return BV_OK;
}

static bv_status restore(seq_run *r, int64_t *steps_done, bv_error *err)
{
    bv_state s = {0};
    bv_status st = BV_ERR_IO;
    bool any = false;
    for (size_t i = 0; i < r->x->nresilience; i++) {
        const bv_resilience_ops *ops = r->x->resilience[i].plugin->ops;
        if (!ops->restore)
            continue;
        any = true;
        if ((st = ops->restore(r->res[i], &s, err)) == BV_OK)
            break;
    }
    if (!any)
        return bv_error_set(err, BV_ERR_INVALID, "--resume needs a resilience strategy that "
                            "keeps state, e.g. resilience: [{plugin: checkpoint}]");
    if (st != BV_OK)
        return st;
    uint64_t seed = 0;
    const bv_blob *h = bv_state_find(&s, "run/history"), *ev = bv_state_find(&s, "run/evals");
    const bv_blob *vocab = bv_state_find(&s, "tokenizer/vocab");
    if (!bv_state_read(&s, "run/step", steps_done, sizeof *steps_done) ||
        !bv_state_read(&s, "run/seed", &seed, sizeof seed) ||
        !bv_state_read(&s, "run/wall", &r->wall_before, sizeof r->wall_before) ||
        !bv_state_read(&s, "run/train_seconds", &r->train_seconds, sizeof r->train_seconds) ||
        !h || h->size != (size_t)*steps_done * sizeof(step_record) || !ev ||
        ev->size % sizeof(eval_record) || !vocab) {
        bv_state_free(&s);
        return bv_error_set(err, BV_ERR_CORRUPT, "the checkpoint lacks the run's own state");
    }
    if (seed != r->seed) {
        bv_state_free(&s);
        return bv_error_set(err, BV_ERR_INVALID, "the checkpoint was made with seed %llu, "
                            "not %llu", (unsigned long long)seed, (unsigned long long)r->seed);
    }
    if (vocab->size != (size_t)r->corpus.vocab_size * sizeof(uint32_t) ||
        memcmp(vocab->data, r->corpus.vocab, vocab->size) != 0) {
        bv_state_free(&s);
        return bv_error_set(err, BV_ERR_INVALID, "the checkpoint's vocabulary differs from "
                            "the text's: was the corpus changed?");
    }
    st = BV_OK;
    for (size_t l = 0; st == BV_OK && l < r->e->nlayers; l++)
        st = bv_seq_engine_layer_set(r->e, l, true, &s, err);
    for (int64_t i = 0; st == BV_OK && i < *steps_done; i++) {
        step_record rec;
        memcpy(&rec, (const char *)h->data + (size_t)i * sizeof rec, sizeof rec);
        if (push((void **)&r->hist, &r->nhist, sizeof rec, &rec) != BV_OK)
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; st == BV_OK && i < ev->size / sizeof(eval_record); i++) {
        eval_record rec;
        memcpy(&rec, (const char *)ev->data + i * sizeof rec, sizeof rec);
        if (push((void **)&r->evals, &r->nevals, sizeof rec, &rec) != BV_OK)
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    bv_state_free(&s);
    if (st == BV_OK)
        bv_log(BV_LOG_INFO, "resumed after step %lld", (long long)*steps_done);
    return st;
}

static bv_status offer_state(seq_run *r, int64_t steps_done, double t0, bv_error *err)
{
    if (!r->x->nresilience)
        return BV_OK;
    bv_state s = {0};
    bv_status st = snapshot(r, steps_done, r->wall_before + (bv_now_seconds() - t0), &s, err);
    for (size_t i = 0; st == BV_OK && i < r->x->nresilience; i++)
        st = ((const bv_resilience_ops *)r->x->resilience[i].plugin->ops)
                 ->epoch_end(r->res[i], &s, err);
    bv_state_free(&s);
    return st;
}

static bv_status setup(seq_run *r, bool resume, int64_t *steps_done, bv_error *err)
{
    const bv_experiment *x = r->x;
    char path[4096];
    corpus_path(x, path, sizeof path);
    bv_status st = bv_text_corpus_load(path, bv_opts_float(&x->dataset, "val_fraction"),
                                       &r->corpus, err);
    if (st != BV_OK)
        return st;
    r->batch = bv_opts_int(&x->train, "batch");
    r->block = bv_opts_int(&x->train, "block");
    r->steps = bv_opts_int(&x->train, "steps");
    r->mops = x->model.plugin->ops;
    r->k = x->compute.plugin->ops;
    bv_seq_shape shape = {r->corpus.vocab_size, r->block, r->batch};
    if (!(r->model = r->mops->create(&x->model.opts, &shape, err)))
        return err->status ? err->status : BV_ERR_PLUGIN;
    if (!(r->c = r->k->create(&x->compute.opts, err)))
        return err->status ? err->status : BV_ERR_PLUGIN;
    if ((st = bv_seq_engine_create(r->mops, r->model, r->k, r->c, r->batch, r->block, &r->e,
                                   err)) != BV_OK)
        return st;
    r->tokens = malloc((size_t)(r->batch * r->block) * sizeof *r->tokens);
    r->targets = malloc((size_t)(r->batch * r->block) * sizeof *r->targets);
    if (!r->tokens || !r->targets)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    char config_dir[4096];
    snprintf(config_dir, sizeof config_dir, "%s", x->path);
    char *slash = strrchr(config_dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(config_dir, sizeof config_dir, ".");
    bv_run_info info = {r->out_dir, config_dir, r->seed};
    for (size_t i = 0; i < x->nresilience; i++) {
        const bv_resilience_ops *ops = x->resilience[i].plugin->ops;
        if (!(r->res[i] = ops->create(&x->resilience[i].opts, &info, err)))
            return err->status ? err->status : BV_ERR_PLUGIN;
    }
    *steps_done = 0;
    if (resume)
        return restore(r, steps_done, err);
    bv_seq_engine_init(r->e, r->seed);
    return BV_OK;
}

static void teardown(seq_run *r)
{
    for (size_t i = 0; i < r->x->nresilience; i++)
        if (r->res[i])
            ((const bv_resilience_ops *)r->x->resilience[i].plugin->ops)->destroy(r->res[i]);
    bv_seq_engine_free(r->e);
    if (r->c)
        r->k->destroy(r->c);
    if (r->model)
        r->mops->destroy(r->model);
    bv_text_corpus_free(&r->corpus);
    free(r->tokens);
    free(r->targets);
    free(r->hist);
    free(r->evals);
    if (r->metrics)
        fclose(r->metrics);
}

/* FLOPs of one training token: 3x the forward (forward, and backward's two products per
 * weight), counting the gemms as the kernels run them (full seq x seq attention blocks). */
static double flops_per_token(const seq_run *r, int64_t *nparams)
{
    double f = 0;
    int64_t np = 0;
    for (size_t l = 0; l < r->e->nlayers; l++) {
        const seq_layer_state *L = &r->e->layers[l];
        for (size_t i = 0; i < L->desc->nparams; i++) {
            const bv_seq_param *p = &L->desc->params[i];
            if (L->owned[i])
                np += numel(p);
            if (L->desc->kind != BV_SEQ_EMBED && p->rows > 1)
                f += 2.0 * (double)numel(p);
        }
        if (L->desc->kind == BV_SEQ_BLOCK)
            f += 4.0 * (double)r->block * (double)L->desc->in_width; /* QK^T and PV */
    }
    *nparams = np;
    return 3.0 * f;
}

static uint32_t params_crc(const seq_run *r)
{
    uint32_t crc = 0;
    for (size_t l = 0; l < r->e->nlayers; l++) {
        const seq_layer_state *L = &r->e->layers[l];
        for (size_t i = 0; i < L->desc->nparams; i++)
            if (L->owned[i])
                crc = bv_crc32c(crc, L->param[i],
                                (size_t)numel(&L->desc->params[i]) * sizeof(float));
    }
    return crc;
}

static int write_result(const seq_run *r, double val_loss, double train_loss, double wall,
                        const char *stop_reason)
{
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/result.json", r->out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    int64_t np;
    double fpt = flops_per_token(r, &np);
    double tps = r->train_seconds > 0 ? (double)(r->nhist ? r->hist[r->nhist - 1].step : 0) *
                                            (double)(r->batch * r->block) / r->train_seconds
                                      : 0;
    fputs("{\"model\": ", f);
    bv_json_string(f, r->x->model.plugin->name);
    fputs(", \"dataset\": ", f);
    bv_json_string(f, r->x->dataset_label);
    fputs(", \"experiment\": ", f);
    bv_json_string(f, r->x->name);
    fprintf(f, ", \"seed\": %llu, \"steps\": %lld, \"batch\": %lld, \"block\": %lld, "
               "\"vocab\": %lld, \"params\": %lld, \"threads\": %d, \"val_loss\": ",
            (unsigned long long)r->seed, (long long)(r->nhist ? r->hist[r->nhist - 1].step : 0),
            (long long)r->batch, (long long)r->block, (long long)r->corpus.vocab_size,
            (long long)np, r->k->num_threads(r->c));
    bv_json_number(f, val_loss);
    bv_json_field(f, "train_loss", train_loss);
    fprintf(f, ", \"final_eval_batches\": %lld, \"last_step_loss\": ",
            (long long)bv_opts_int(&r->x->train, "final_eval_iters"));
    bv_json_number(f, r->nhist ? r->hist[r->nhist - 1].loss : NAN);
    bv_json_field(f, "tokens_per_second", tps);
    bv_json_field(f, "flops_per_token", fpt);
    bv_json_field(f, "model_flops_per_second", fpt * tps);
    bv_json_field(f, "train_seconds", r->train_seconds);
    bv_json_field(f, "wall_seconds", wall);
    fprintf(f, ", \"params_crc32c\": \"%08x\", \"stop_reason\": ", params_crc(r));
    bv_json_string(f, stop_reason);
    fputs("}\n", f);
    if (fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

static bv_status run(seq_run *r, bool resume, bool progress, double *val_loss,
                     double *train_loss, bv_error *err)
{
    double t0 = bv_now_seconds();
    int64_t done = 0;
    bv_status st = setup(r, resume, &done, err);
    if (st != BV_OK)
        return st;
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->out_dir);
    if (!(r->metrics = fopen(path, "w")))
        return bv_error_set(err, BV_ERR_IO, "cannot write %s", path);
    /* a resumed run rewrites what it had, interleaved as it was written */
    size_t ev = 0;
    for (size_t i = 0; i < r->nhist; i++) {
        write_step(r->metrics, &r->hist[i]);
        while (ev < r->nevals && r->evals[ev].step == r->hist[i].step)
            write_eval(r->metrics, &r->evals[ev++]);
    }
    fflush(r->metrics);
    const char *kill_env = getenv("BIVOUAC_FAULT_KILL_AFTER_EPOCH");
    int64_t kill_after = kill_env ? strtoll(kill_env, NULL, 10) : 0;
    int64_t interval = bv_opts_int(&r->x->train, "eval_interval");
    int64_t iters = bv_opts_int(&r->x->train, "eval_iters");
    double session_t0 = bv_now_seconds();
    for (int64_t it = done; it < r->steps; it++) {
        double ts = bv_now_seconds();
        step_record rec;
        if ((st = train_step(r, it, &rec, err)) != BV_OK)
            return st;
        double te = bv_now_seconds();
        r->train_seconds += te - ts;
        rec.seconds = r->wall_before + (te - t0);
        if (push((void **)&r->hist, &r->nhist, sizeof rec, &rec) != BV_OK)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        write_step(r->metrics, &rec);
        if (progress)
            fprintf(stderr, "\r\033[Kstep %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s",
                    (long long)rec.step, (long long)r->steps, rec.loss, rec.lr,
                    (double)(rec.step - done) * (double)(r->batch * r->block) /
                        (te - session_t0));
        if (rec.step % interval == 0 && rec.step < r->steps) {
            eval_record e = {.step = rec.step};
            double es = bv_now_seconds();
            if ((st = evaluate(r, rec.step, iters, &e.train_loss, &e.val_loss, err)) != BV_OK)
                return st;
            r->eval_seconds += bv_now_seconds() - es;
            e.seconds = r->wall_before + (bv_now_seconds() - t0);
            if (push((void **)&r->evals, &r->nevals, sizeof e, &e) != BV_OK)
                return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
            write_eval(r->metrics, &e);
            if (progress)
                fprintf(stderr, "\r\033[Kstep %lld: train loss %.4f, val loss %.4f\n",
                        (long long)e.step, e.train_loss, e.val_loss);
            if ((st = offer_state(r, rec.step, t0, err)) != BV_OK)
                return st;
        }
        if (kill_after && rec.step == kill_after)
            raise(SIGKILL); /* fault injection for the kill-and-resume test */
    }
    if (progress)
        fputc('\n', stderr);
    /* the final estimate, over final_eval_iters batches of each split */
    eval_record e = {.step = r->steps};
    if ((st = evaluate(r, r->steps, bv_opts_int(&r->x->train, "final_eval_iters"),
                       &e.train_loss, &e.val_loss, err)) != BV_OK)
        return st;
    e.seconds = r->wall_before + (bv_now_seconds() - t0);
    write_eval(r->metrics, &e);
    *val_loss = e.val_loss;
    *train_loss = e.train_loss;
    return offer_state(r, r->steps, t0, err);
}

int bv_train_seq_main(const bv_experiment *x, const char *out_dir, uint64_t seed, bool resume,
                      bool quiet)
{
    seq_run r = {.x = x, .seed = seed, .out_dir = out_dir};
    double t0 = bv_now_seconds();
    double val = NAN, train = NAN;
    bv_error err = {0};
    bv_status st = run(&r, resume, !quiet && isatty(STDERR_FILENO), &val, &train, &err);
    int code = 0;
    if (st != BV_OK) {
        fprintf(stderr, "bivouac: error: %s\n", err.msg);
        code = st == BV_ERR_INVALID ? 2 : 1;
    } else {
        double wall = r.wall_before + (bv_now_seconds() - t0);
        char reason[64];
        snprintf(reason, sizeof reason, "reached %lld steps", (long long)r.steps);
        if (write_result(&r, val, train, wall, reason) != 0) {
            fprintf(stderr, "bivouac: error: cannot write %s/result.json\n", out_dir);
            code = 1;
        } else if (!quiet) {
            int64_t np;
            double fpt = flops_per_token(&r, &np);
            double tps = (double)r.steps * (double)(r.batch * r.block) / r.train_seconds;
            (void)fpt;
            printf("%s on %s: val loss %.4f (train %.4f) after %lld steps, %.0f tokens/s, "
                   "%.1f s -> %s/result.json\n",
                   x->model.plugin->name, x->dataset_label, val, train, (long long)r.steps,
                   tps, wall, out_dir);
        }
    }
    teardown(&r);
    return code;
}
