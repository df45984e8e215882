/* Gradient checks of the GCN model's TENSOR stages through its plugin descriptor: for each
 * stage, tensor_backward's weight gradient and input gradient against central finite
 * differences (tests/unit/gradcheck.h) of L = sum(tensor_forward(in) * R), with dropout off
 * and on (the mask is a function of seed, epoch, stage and global index, so it is the same
 * in every evaluation), on an interval that does not start at vertex 0. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bivouac/compute.h"
#include "bivouac/model.h"
#include "bivouac/plugin.h"
#include "gradcheck.h"

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_support.h"

const bv_plugin *bv_compute_cpu_plugin(void);
const bv_plugin *bv_model_gcn_plugin(void);

/* Float outputs, losses summed in double, inputs >= 0.05 from ReLU's kink (> h): a correct
 * gradient scores ~1e-4, a wrong one > 0.1 (gradcheck.h). */
#define PASS 1e-2
#define EPS 1e-2
#define FLOOR 1e-2

#define NUM_NODES 20
#define FEATURES 6
#define HIDDEN 5
#define CLASSES 3
#define ROW_BEGIN 4 /* the interval under test: rows [4, 11) of 20 */
#define ROWS 7

static const bv_compute_ops *kops(void)
{
    return bv_compute_cpu_plugin()->ops;
}

static const bv_model_ops *mops(void)
{
    return bv_model_gcn_plugin()->ops;
}

/* Magnitudes in [0.05, 1], random signs. */
static float *away_from_zero(int64_t n)
{
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = rng_float(0.05f, 1.0f);
        if (rng_float(0, 1) < 0.5f)
            v[i] = -v[i];
    }
    return v;
}

typedef struct gcn_fixture {
    bv_compute *compute;
    bv_model *model;
    float *params[2];
    float *dparams[2];
} gcn_fixture;

static int setup_order(void **state, const char *order)
{
    gcn_fixture *fx = calloc(1, sizeof *fx);
    bv_error err = {0};
    bv_opts o;
    fx->compute = make_cpu_compute(3);

    assert_int_equal(bv_opts_defaults(&o, "model", bv_model_gcn_plugin()->options, &err), BV_OK);
    assert_int_equal(bv_opts_set(&o, "order", order, &err), BV_OK);
    set_opt(&o, "hidden", HIDDEN);
    set_opt(&o, "layers", 2);
    set_opt(&o, "dropout", 0.5);
    bv_graph_shape shape = {.num_nodes = NUM_NODES, .num_features = FEATURES,
                            .num_classes = CLASSES};
    fx->model = mops()->create(&o, &shape, &err);
    bv_opts_free(&o);
    assert_non_null(fx->model);
    assert_int_equal(mops()->param_count(fx->model), 2);
    for (size_t p = 0; p < 2; p++) {
        const bv_param_spec *spec = mops()->param(fx->model, p);
        fx->params[p] = away_from_zero(spec->rows * spec->cols);
        fx->dparams[p] = calloc((size_t)(spec->rows * spec->cols), sizeof(float));
    }
    *state = fx;
    return 0;
}

static int setup(void **state)
{
    return setup_order(state, "transform_first");
}

/* order: gather_first: GA0 AV0 GA1 AV1, AV_l = act(dropout(in) W_l), ReLU on the output
 * but for the last layer's */
static int setup_gather_first(void **state)
{
    return setup_order(state, "gather_first");
}

static int teardown(void **state)
{
    gcn_fixture *fx = *state;
    for (size_t p = 0; p < 2; p++) {
        free(fx->params[p]);
        free(fx->dparams[p]);
    }
    mops()->destroy(fx->model);
    kops()->destroy(fx->compute);
    free(fx);
    return 0;
}

typedef struct stage_check {
    gcn_fixture *fx;
    size_t stage;
    bv_task_ctx ctx;
    const bv_stage *s;
    float *in;
    float *out;
    const float *r;
} stage_check;

static double stage_loss(const float *unused, void *arg)
{
    (void)unused; /* the perturbed array is sc->in or one of the parameters */
    stage_check *sc = arg;
    bv_error err = {0};
    assert_int_equal(mops()->tensor_forward(sc->fx->model, sc->stage, &sc->ctx, sc->in, sc->out,
                                            &err),
                     BV_OK);
    double l = 0.0;
    for (int64_t i = 0; i < ROWS * sc->s->out_dim; i++)
        l += (double)sc->out[i] * (double)sc->r[i];
    return l;
}

static stage_check make_check(gcn_fixture *fx, size_t stage, bool training)
{
    stage_check sc = {.fx = fx, .stage = stage, .s = mops()->stage(fx->model, stage)};
    sc.ctx = (bv_task_ctx){.k = kops(), .compute = fx->compute, .seed = 1234, .epoch = 3,
                           .training = training, .row_begin = ROW_BEGIN, .rows = ROWS,
                           .num_nodes = NUM_NODES, .params = fx->params};
    assert_int_equal(sc.s->kind, BV_STAGE_TENSOR);
    sc.in = away_from_zero(ROWS * sc.s->in_dim);
    sc.out = calloc((size_t)(ROWS * sc.s->out_dim), sizeof(float));
    sc.r = away_from_zero(ROWS * sc.s->out_dim);
    return sc;
}

static void free_check(stage_check *sc)
{
    free(sc->in);
    free(sc->out);
    free((float *)sc->r);
}

/* Analytic gradients of L from tensor_backward with dout = R: din (when the stage has one)
 * and the stage's weight gradient; every other parameter's gradient must stay zero. */
static float *analytic(stage_check *sc, const bv_task_ctx *bctx)
{
    gcn_fixture *fx = sc->fx;
    bv_error err = {0};
    for (size_t p = 0; p < 2; p++) {
        const bv_param_spec *spec = mops()->param(fx->model, p);
        memset(fx->dparams[p], 0, (size_t)(spec->rows * spec->cols) * sizeof(float));
    }
    float *din = sc->s->needs_input_grad
                     ? calloc((size_t)(ROWS * sc->s->in_dim), sizeof(float))
                     : NULL;
    stage_loss(NULL, sc); /* sc->out = forward output, as the engine passes it */
    assert_int_equal(mops()->tensor_backward(fx->model, sc->stage, bctx, sc->in, sc->out, sc->r,
                                             din, fx->dparams, &err),
                     BV_OK);
    return din;
}

static void expect_pass(const char *what, int64_t n, float *x, const float *g, stage_check *sc)
{
    bv_gradcheck_report r;
    char msg[256];
    double err = bv_gradcheck(n, x, g, stage_loss, sc, EPS, FLOOR, &r);
    if (getenv("BV_GRADCHECK_VERBOSE"))
        print_message("%s %s: %s\n", sc->s->name, what, bv_gradcheck_describe(&r, msg, sizeof msg));
    if (!(err < PASS))
        fail_msg("%s %s (training=%d): %s", sc->s->name, what, sc->ctx.training,
                 bv_gradcheck_describe(&r, msg, sizeof msg));
}

static void check_stage(gcn_fixture *fx, size_t stage, bool training)
{
    stage_check sc = make_check(fx, stage, training);
    float *din = analytic(&sc, &sc.ctx);
    size_t p = stage / 2; /* W_l belongs to AV_l, stage 2l (2l + 1 gathering first) */
    const bv_param_spec *spec = mops()->param(fx->model, p);
    const bv_param_spec *other = mops()->param(fx->model, 1 - p);
    for (int64_t i = 0; i < other->rows * other->cols; i++)
        assert_true(fx->dparams[1 - p][i] == 0.0f);
    expect_pass("dW", spec->rows * spec->cols, fx->params[p], fx->dparams[p], &sc);
    if (din)
        expect_pass("din", ROWS * sc.s->in_dim, sc.in, din, &sc);
    else
        assert_false(sc.s->needs_input_grad);
    free(din);
    free_check(&sc);
}

static void test_tensor_stage_gradients_without_dropout(void **state)
{
    gcn_fixture *fx = *state;
    assert_int_equal(mops()->stage_count(fx->model), 4);
    check_stage(fx, 0, false); /* AV0: X W0, no input gradient */
    check_stage(fx, 2, false); /* AV1: relu(H) W1, with din */
}

static void test_tensor_stage_gradients_with_dropout(void **state)
{
    gcn_fixture *fx = *state;
    check_stage(fx, 0, true);
    check_stage(fx, 2, true);
}

static void test_gather_first_gradients(void **state)
{
    gcn_fixture *fx = *state;
    assert_int_equal(mops()->stage_count(fx->model), 4);
    assert_int_equal(mops()->stage(fx->model, 0)->kind, BV_STAGE_GATHER);
    assert_int_equal(mops()->stage(fx->model, 0)->in_dim, FEATURES);
    assert_int_equal(mops()->stage(fx->model, 2)->in_dim, HIDDEN);
    assert_false(mops()->stage(fx->model, 1)->sparse_input);
    for (int training = 0; training < 2; training++) {
        check_stage(fx, 1, training); /* AV0: relu(dropout(ÂX) W0), no input gradient */
        check_stage(fx, 3, training); /* AV1: dropout(ÂH) W1, with din */
    }
}

/* A backward that applies a different dropout mask than the forward (here: none) gives a
 * wrong gradient, and the check must say so. */
static void test_backward_with_the_wrong_mask_is_caught(void **state)
{
    gcn_fixture *fx = *state;
    stage_check sc = make_check(fx, 2, true);
    bv_task_ctx no_dropout = sc.ctx;
    no_dropout.training = false;
    float *din = analytic(&sc, &no_dropout);
    assert_non_null(din);
    double err = bv_gradcheck(ROWS * sc.s->in_dim, sc.in, din, stage_loss, &sc, EPS, FLOOR, NULL);
    assert_true(err > 0.3);
    const bv_param_spec *spec = mops()->param(fx->model, 1);
    err = bv_gradcheck(spec->rows * spec->cols, fx->params[1], fx->dparams[1], stage_loss, &sc,
                       EPS, FLOOR, NULL);
    assert_true(err > 0.3);
    free(din);
    free_check(&sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tensor_stage_gradients_without_dropout, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_tensor_stage_gradients_with_dropout, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_backward_with_the_wrong_mask_is_caught, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_gather_first_gradients, setup_gather_first,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
