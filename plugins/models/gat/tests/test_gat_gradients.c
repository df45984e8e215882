/* Gradient checks of the GAT model's stages through its plugin descriptor, against central
 * finite differences (tests/unit/gradcheck.h) of L = sum(stage output * R):
 *   - TENSOR stages (AV0 dense and on sparse features, AV1, OUT): every parameter's
 *     gradient and the input gradient, with dropout off and on (masks are functions of
 *     seed, epoch, stage and global index, so every evaluation sees the same one);
 *   - the EDGE stage (attention: scores, LeakyReLU, per-destination softmax, dropout):
 *     the gradients of the source and destination attention terms, on both sides of
 *     LeakyReLU's kink.
 * Gather stages run on the graph server with the CPU kernels, whose gradients are checked
 * in plugins/compute/cpu/tests/test_gradcheck_cpu.c. */
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

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_support.h"

const bv_plugin *bv_compute_cpu_plugin(void);
const bv_plugin *bv_model_gat_plugin(void);

#define PASS 1e-2
#define EPS 1e-2
#define FLOOR 1e-2

#define NUM_NODES 12
#define FEATURES 6
#define HEADS 2
#define HIDDEN 4 /* 2 units per head */
#define CLASSES 3
#define OUT_HEADS 2
#define ROW_BEGIN 3 /* the interval under test: rows [3, 8) of 12 */
#define ROWS 5
#define NPARAMS 8

enum { AV0 = 0, AE0 = 1, AV1 = 3, AE1 = 4, OUT = 6 };

static const bv_compute_ops *kops(void)
{
    return bv_compute_cpu_plugin()->ops;
}

static const bv_model_ops *mops(void)
{
    return bv_model_gat_plugin()->ops;
}

static float *random_array(int64_t n, float lo, float hi, bool random_sign)
{
    float *v = malloc((size_t)(n + 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = rng_float(lo, hi);
        if (random_sign && rng_float(0, 1) < 0.5f)
            v[i] = -v[i];
    }
    return v;
}

typedef struct fixture {
    bv_compute *compute;
    bv_model *model;
    float *params[NPARAMS];
    float *dparams[NPARAMS];
    int64_t sizes[NPARAMS];
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    bv_error err = {0};
    bv_opts o;
    fx->compute = make_cpu_compute(2);
    assert_int_equal(bv_opts_defaults(&o, "model", bv_model_gat_plugin()->options, &err), BV_OK);
    set_opt(&o, "heads", HEADS);
    set_opt(&o, "hidden", HIDDEN);
    set_opt(&o, "out_heads", OUT_HEADS);
    set_opt(&o, "dropout", 0.5);
    set_opt(&o, "attn_dropout", 0.5);
    bv_graph_shape shape = {NUM_NODES, FEATURES, CLASSES};
    fx->model = mops()->create(&o, &shape, &err);
    bv_opts_free(&o);
    assert_non_null(fx->model);
    assert_int_equal(mops()->param_count(fx->model), NPARAMS);
    assert_int_equal(mops()->stage_count(fx->model), 7);
    for (size_t p = 0; p < NPARAMS; p++) {
        const bv_param_spec *spec = mops()->param(fx->model, p);
        fx->sizes[p] = spec->rows * spec->cols;
        fx->params[p] = random_array(fx->sizes[p], 0.05f, 1.0f, true);
        fx->dparams[p] = calloc((size_t)fx->sizes[p] + 1, sizeof(float));
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    for (size_t p = 0; p < NPARAMS; p++) {
        free(fx->params[p]);
        free(fx->dparams[p]);
    }
    mops()->destroy(fx->model);
    kops()->destroy(fx->compute);
    free(fx);
    return 0;
}

static bv_task_ctx make_ctx(fixture *fx, bool training)
{
    return (bv_task_ctx){.k = kops(), .compute = fx->compute, .seed = 99, .epoch = 5,
                         .training = training, .row_begin = ROW_BEGIN, .rows = ROWS,
                         .num_nodes = NUM_NODES, .params = fx->params, .edge_begin = 17};
}

static void expect_pass(const char *stage, const char *what, int64_t n, float *x,
                        const float *g, bv_gradcheck_fn f, void *ctx, bool training)
{
    bv_gradcheck_report r;
    char msg[256];
    double err = bv_gradcheck(n, x, g, f, ctx, EPS, FLOOR, &r);
    if (!(err < PASS))
        fail_msg("%s %s (training=%d): %s", stage, what, training,
                 bv_gradcheck_describe(&r, msg, sizeof msg));
}

/* ---- TENSOR stages ---- */

typedef struct tensor_check {
    fixture *fx;
    size_t stage;
    const bv_stage *s;
    bv_task_ctx ctx;
    float *in, *out;
    const float *r;
} tensor_check;

static double tensor_loss(const float *unused, void *arg)
{
    (void)unused;
    tensor_check *tc = arg;
    bv_error err = {0};
    assert_int_equal(mops()->tensor_forward(tc->fx->model, tc->stage, &tc->ctx, tc->in, tc->out,
                                            &err),
                     BV_OK);
    double l = 0;
    for (int64_t i = 0; i < ROWS * tc->s->out_dim; i++)
        l += (double)tc->out[i] * (double)tc->r[i];
    return l;
}

static void check_tensor_stage(fixture *fx, size_t stage, bool training, const bv_csr *sparse)
{
    tensor_check tc = {.fx = fx, .stage = stage, .s = mops()->stage(fx->model, stage),
                       .ctx = make_ctx(fx, training)};
    assert_int_equal(tc.s->kind, BV_STAGE_TENSOR);
    tc.ctx.sparse_in = sparse;
    tc.in = random_array(ROWS * tc.s->in_dim, 0.05f, 1.0f, true);
    if (sparse) /* the dense input the CSR stands for */
        for (int64_t i = 0; i < ROWS; i++)
            for (int64_t j = 0; j < tc.s->in_dim; j++) {
                tc.in[i * tc.s->in_dim + j] = 0;
                for (int64_t e = sparse->rowptr[i]; e < sparse->rowptr[i + 1]; e++)
                    if (sparse->colidx[e] == j)
                        tc.in[i * tc.s->in_dim + j] = sparse->values[e];
            }
    tc.out = calloc((size_t)(ROWS * tc.s->out_dim) + 1, sizeof(float));
    tc.r = random_array(ROWS * tc.s->out_dim, 0.05f, 1.0f, true);
    for (size_t p = 0; p < NPARAMS; p++)
        memset(fx->dparams[p], 0, (size_t)fx->sizes[p] * sizeof(float));
    float *din = tc.s->needs_input_grad ? calloc((size_t)(ROWS * tc.s->in_dim), sizeof(float))
                                        : NULL;
    tensor_loss(NULL, &tc);
    bv_error err = {0};
    assert_int_equal(mops()->tensor_backward(fx->model, stage, &tc.ctx, tc.in, tc.out, tc.r, din,
                                             fx->dparams, &err),
                     BV_OK);
    for (size_t p = 0; p < NPARAMS; p++) /* untouched parameters must stay at zero too */
        expect_pass(tc.s->name, mops()->param(fx->model, p)->name, fx->sizes[p], fx->params[p],
                    fx->dparams[p], tensor_loss, &tc, training);
    if (din)
        expect_pass(tc.s->name, "din", ROWS * tc.s->in_dim, tc.in, din, tensor_loss, &tc,
                    training);
    free(din);
    free(tc.in);
    free(tc.out);
    free((float *)tc.r);
}

static void test_vertex_stages_without_dropout(void **state)
{
    fixture *fx = *state;
    check_tensor_stage(fx, AV0, false, NULL);
    check_tensor_stage(fx, AV1, false, NULL);
    check_tensor_stage(fx, OUT, false, NULL);
}

static void test_vertex_stages_with_dropout(void **state)
{
    fixture *fx = *state;
    check_tensor_stage(fx, AV0, true, NULL);
    check_tensor_stage(fx, AV1, true, NULL);
    check_tensor_stage(fx, OUT, true, NULL);
}

/* AV0 on sparse features (ctx.sparse_in): the same gradients through spmm_dropout. */
static void test_first_layer_on_sparse_features(void **state)
{
    fixture *fx = *state;
    bv_csr *x = bv_csr_new(ROWS, FEATURES, ROWS * 2);
    assert_non_null(x);
    for (int64_t i = 0; i < ROWS; i++) {
        x->rowptr[i] = 2 * i;
        x->colidx[2 * i] = (int32_t)(i % FEATURES);
        x->colidx[2 * i + 1] = (int32_t)((i + 3) % FEATURES);
        if (x->colidx[2 * i] > x->colidx[2 * i + 1]) {
            int32_t t = x->colidx[2 * i];
            x->colidx[2 * i] = x->colidx[2 * i + 1];
            x->colidx[2 * i + 1] = t;
        }
        x->values[2 * i] = rng_float(0.1f, 1.0f);
        x->values[2 * i + 1] = rng_float(0.1f, 1.0f);
    }
    x->rowptr[ROWS] = 2 * ROWS;
    check_tensor_stage(fx, AV0, false, x);
    check_tensor_stage(fx, AV0, true, x);
    bv_csr_free(x);
}

/* ---- the EDGE stage ---- */

typedef struct edge_check {
    fixture *fx;
    size_t stage;
    const bv_stage *s;
    bv_task_ctx ctx;
    bv_csr *a;
    float *src, *dst, *out;
    const float *r;
} edge_check;

static double edge_loss(const float *unused, void *arg)
{
    (void)unused;
    edge_check *ec = arg;
    bv_error err = {0};
    assert_int_equal(mops()->edge_forward(ec->fx->model, ec->stage, &ec->ctx, ec->a, ec->src,
                                          ec->dst, ec->out, &err),
                     BV_OK);
    double l = 0;
    for (int64_t i = 0; i < ec->a->nnz * ec->s->out_dim; i++)
        l += (double)ec->out[i] * (double)ec->r[i];
    return l;
}

/* The interval's in-edges: each row has its self loop and 1 to 3 others, ascending. */
static bv_csr *interval_edges(void)
{
    bv_csr *a = bv_csr_new(ROWS, NUM_NODES, ROWS * 4);
    assert_non_null(a);
    int64_t k = 0;
    for (int64_t i = 0; i < ROWS; i++) {
        a->rowptr[i] = k;
        int64_t v = ROW_BEGIN + i;
        for (int64_t u = 0; u < NUM_NODES; u++)
            if (u == v || (u * 7 + v * 3) % 5 == 0)
                if (k - a->rowptr[i] < 4)
                    a->colidx[k++] = (int32_t)u;
    }
    a->rowptr[ROWS] = k;
    a->nnz = k;
    return a;
}

static void check_edge_stage(fixture *fx, size_t stage, bool training, float lo, float hi)
{
    edge_check ec = {.fx = fx, .stage = stage, .s = mops()->stage(fx->model, stage),
                     .ctx = make_ctx(fx, training), .a = interval_edges()};
    assert_int_equal(ec.s->kind, BV_STAGE_EDGE);
    int64_t w = ec.s->in_dim, k = ec.s->out_dim;
    /* same-signed terms keep every logit on one side of LeakyReLU's kink */
    ec.src = random_array(NUM_NODES * w, lo, hi, false);
    ec.dst = random_array(ROWS * w, lo, hi, false);
    ec.out = calloc((size_t)(ec.a->nnz * k) + 1, sizeof(float));
    ec.r = random_array(ec.a->nnz * k, 0.05f, 1.0f, true);
    float *dsrc = calloc((size_t)(NUM_NODES * w), sizeof(float));
    float *ddst = calloc((size_t)(ROWS * w), sizeof(float));
    edge_loss(NULL, &ec);
    bv_error err = {0};
    assert_int_equal(mops()->edge_backward(fx->model, stage, &ec.ctx, ec.a, ec.src, ec.dst, ec.out,
                                           ec.r, dsrc, ddst, fx->dparams, &err),
                     BV_OK);
    expect_pass(ec.s->name, "dsrc", NUM_NODES * w, ec.src, dsrc, edge_loss, &ec, training);
    expect_pass(ec.s->name, "ddst", ROWS * w, ec.dst, ddst, edge_loss, &ec, training);
    free(dsrc);
    free(ddst);
    free(ec.src);
    free(ec.dst);
    free(ec.out);
    free((float *)ec.r);
    bv_csr_free(ec.a);
}

static void test_edge_stages(void **state)
{
    fixture *fx = *state;
    for (int training = 0; training < 2; training++) {
        check_edge_stage(fx, AE0, training, 0.2f, 1.0f);   /* logits > 0 */
        check_edge_stage(fx, AE0, training, -1.0f, -0.2f); /* logits < 0: the 0.2 slope */
        check_edge_stage(fx, AE1, training, 0.2f, 1.0f);
    }
}

/* A wrong gradient must fail: scale the analytic dsrc and the check reports it. */
static void test_a_wrong_edge_gradient_is_caught(void **state)
{
    fixture *fx = *state;
    edge_check ec = {.fx = fx, .stage = AE0, .s = mops()->stage(fx->model, AE0),
                     .ctx = make_ctx(fx, false), .a = interval_edges()};
    int64_t w = ec.s->in_dim, k = ec.s->out_dim;
    ec.src = random_array(NUM_NODES * w, 0.2f, 1.0f, false);
    ec.dst = random_array(ROWS * w, 0.2f, 1.0f, false);
    ec.out = calloc((size_t)(ec.a->nnz * k) + 1, sizeof(float));
    ec.r = random_array(ec.a->nnz * k, 0.05f, 1.0f, true);
    float *dsrc = calloc((size_t)(NUM_NODES * w), sizeof(float));
    float *ddst = calloc((size_t)(ROWS * w), sizeof(float));
    edge_loss(NULL, &ec);
    bv_error err = {0};
    assert_int_equal(mops()->edge_backward(fx->model, AE0, &ec.ctx, ec.a, ec.src, ec.dst, ec.out,
                                           ec.r, dsrc, ddst, fx->dparams, &err),
                     BV_OK);
    for (int64_t i = 0; i < NUM_NODES * w; i++)
        dsrc[i] *= 1.5f;
    assert_true(bv_gradcheck(NUM_NODES * w, ec.src, dsrc, edge_loss, &ec, EPS, FLOOR, NULL) >
                0.1);
    free(dsrc);
    free(ddst);
    free(ec.src);
    free(ec.dst);
    free(ec.out);
    free((float *)ec.r);
    bv_csr_free(ec.a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_vertex_stages_without_dropout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vertex_stages_with_dropout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_layer_on_sparse_features, setup, teardown),
        cmocka_unit_test_setup_teardown(test_edge_stages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_wrong_edge_gradient_is_caught, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
