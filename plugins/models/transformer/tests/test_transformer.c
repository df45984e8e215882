/* The transformer model through the layer engine: the gradient of the whole model (every
 * layer's wiring, the tied embedding, dropout) against central finite differences of the
 * loss, and a layer's state moved to a second engine giving the same logits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bivouac/plugin.h"
#include "bivouac/seqmodel.h"
#include "layer_engine.h"

const bv_plugin *bv_compute_cpu_plugin(void);
const bv_plugin *bv_model_transformer_plugin(void);

typedef struct fixture {
    const bv_seq_model_ops *mops;
    const bv_compute_ops *k;
    bv_seq_model *model;
    bv_compute *c;
    bv_layer_engine *e;
} fixture;

static void set_opt(bv_opts *o, const char *name, double v)
{
    for (size_t i = 0; i < o->count; i++)
        if (strcmp(o->values[i].decl->name, name) == 0) {
            if (o->values[i].decl->type == BV_OPT_FLOAT)
                o->values[i].v.f = v;
            else if (o->values[i].decl->type == BV_OPT_BOOL)
                o->values[i].v.b = v != 0;
            else
                o->values[i].v.i = (int64_t)v;
            return;
        }
    fail_msg("no option %s", name);
}

static void make(fixture *f, int64_t vocab, int64_t batch, int64_t seq, double dropout,
                 bool tied, uint64_t seed)
{
    bv_error err = {0};
    const bv_plugin *mp = bv_model_transformer_plugin(), *cp = bv_compute_cpu_plugin();
    f->mops = mp->ops;
    f->k = cp->ops;
    bv_opts mo, co;
    assert_int_equal(bv_opts_defaults(&mo, "model", mp->options, &err), BV_OK);
    assert_int_equal(bv_opts_defaults(&co, "compute", cp->options, &err), BV_OK);
    set_opt(&mo, "layers", 2);
    set_opt(&mo, "heads", 2);
    set_opt(&mo, "width", 16);
    set_opt(&mo, "dropout", dropout);
    set_opt(&mo, "tied", tied);
    set_opt(&mo, "init_std", 0.3); /* big weights: big gradients, easy to difference */
    set_opt(&co, "threads", 2);
    bv_seq_shape shape = {vocab, seq, batch};
    f->model = f->mops->create(&mo, &shape, &err);
    f->c = f->k->create(&co, &err);
    assert_non_null(f->model);
    assert_non_null(f->c);
    assert_int_equal(bv_layer_engine_create(f->mops, f->model, f->k, f->c, batch, seq, &f->e,
                                          &err), BV_OK);
    bv_layer_engine_init(f->e, seed);
    bv_opts_free(&mo);
    bv_opts_free(&co);
}

static void destroy(fixture *f)
{
    bv_layer_engine_free(f->e);
    f->k->destroy(f->c);
    f->mops->destroy(f->model);
}

static void gradcheck_model(double dropout, bool tied)
{
    enum { V = 11, B = 2, S = 6 };
    fixture f;
    make(&f, V, B, S, dropout, tied, 5);
    int32_t tok[B * S], tgt[B * S];
    for (int i = 0; i < B * S; i++) {
        tok[i] = (i * 7 + 3) % V;
        tgt[i] = (i * 5 + 1) % V;
    }
    bv_error err = {0};
    double loss;
    size_t nl = f.mops->layer_count(f.model);
    double worst = 0;
    int checked = 0;
    for (size_t l = 0; l < nl; l++) {
        const bv_seq_layer *L = f.mops->layer(f.model, l);
        for (size_t i = 0; i < L->nparams; i++) {
            int64_t n = L->params[i].rows * L->params[i].cols;
            bv_layer_tensor t;
            bv_layer_engine_tensor(f.e, l, i, &t);
            float *p = t.param, *g = t.grad;
            assert_int_equal(bv_layer_engine_gradient(f.e, tok, tgt, B, S, 9, 3, &loss, &err),
                             BV_OK);
            float *ga = malloc((size_t)n * sizeof *ga);
            memcpy(ga, g, (size_t)n * sizeof *ga);
            for (int64_t j = 0; j < n; j += n / 7 + 1) { /* a spread of coordinates */
                const float h = 1e-2f;
                float keep = p[j];
                double lp, lm;
                p[j] = keep + h;
                bv_layer_engine_gradient(f.e, tok, tgt, B, S, 9, 3, &lp, &err);
                p[j] = keep - h;
                bv_layer_engine_gradient(f.e, tok, tgt, B, S, 9, 3, &lm, &err);
                p[j] = keep;
                double num = (lp - lm) / (2.0 * h);
                double e = fabs(num - ga[j]) / (1e-3 + fabs(num) + fabs(ga[j]));
                worst = e > worst ? e : worst;
                checked++;
                if (e > 3e-2)
                    fail_msg("layer %s param %s[%lld]: analytic %.6g numeric %.6g", L->name,
                             L->params[i].name, (long long)j, (double)ga[j], num);
            }
            free(ga);
        }
    }
    print_message("dropout %.1f tied %d: worst relative error %.2e over %d coordinates\n",
                  dropout, tied, worst, checked);
    destroy(&f);
}

static void test_model_gradient_matches_finite_differences(void **state)
{
    (void)state;
    gradcheck_model(0.0, true);
    gradcheck_model(0.0, false);
}

static void test_model_gradient_with_dropout(void **state)
{
    (void)state;
    gradcheck_model(0.2, true);
}

/* Every layer's state, moved one layer at a time into a second engine built with another
 * seed, reproduces the first engine's logits bit for bit. */
static void test_layer_state_moves_between_engines(void **state)
{
    (void)state;
    enum { V = 9, B = 2, S = 5 };
    fixture a, b;
    make(&a, V, B, S, 0.0, true, 1);
    make(&b, V, B, S, 0.0, true, 2);
    int32_t tok[B * S];
    for (int i = 0; i < B * S; i++)
        tok[i] = (i * 4 + 1) % V;
    bv_error err = {0};
    const float *la, *lb;
    assert_int_equal(bv_layer_engine_forward(a.e, tok, B, S, false, 0, 0, &la, &err), BV_OK);
    assert_int_equal(bv_layer_engine_forward(b.e, tok, B, S, false, 0, 0, &lb, &err), BV_OK);
    assert_true(memcmp(la, lb, sizeof(float) * B * S * V) != 0);
    for (size_t l = 0; l < a.mops->layer_count(a.model); l++) {
        bv_state s = {0};
        assert_int_equal(bv_layer_engine_layer_get(a.e, l, true, &s, &err), BV_OK);
        assert_int_equal(bv_layer_engine_layer_set(b.e, l, true, &s, &err), BV_OK);
        bv_state_free(&s);
    }
    assert_int_equal(bv_layer_engine_forward(a.e, tok, B, S, false, 0, 0, &la, &err), BV_OK);
    assert_int_equal(bv_layer_engine_forward(b.e, tok, B, S, false, 0, 0, &lb, &err), BV_OK);
    assert_memory_equal(la, lb, sizeof(float) * B * S * V);
    destroy(&a);
    destroy(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_gradient_matches_finite_differences),
        cmocka_unit_test(test_model_gradient_with_dropout),
        cmocka_unit_test(test_layer_state_moves_between_engines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
