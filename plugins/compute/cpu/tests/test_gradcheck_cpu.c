/* Gradient checks of the CPU plugin's kernels: every backward kernel against central finite
 * differences (tests/unit/gradcheck.h) of the scalar L = sum(out * R) for a fixed random R,
 * on small random graphs with self loops; and a wrong gradient must be caught. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bivouac/compute.h"
#include "bivouac/plugin.h"
#include "bivouac/tensor.h"
#include "gradcheck.h"

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_support.h"

const bv_plugin *bv_compute_cpu_plugin(void);

/* The kernels' outputs carry float rounding (~6e-8 relative), which the difference divides
 * by 2h: with h = 1e-2 that noise is ~1e-5 absolute, while the truncation error of these
 * smooth functions stays ~1e-5 relative; every input is kept further than h from a kink.
 * Gradients here are of order 0.1 to 1, so a floor of 1e-2 judges near-zero ones on an
 * absolute scale. A correct gradient scores ~1e-4; a wrong one well above 0.1. */
#define PASS 1e-2
#define EPS 1e-2
#define FLOOR 1e-2

static const bv_compute_ops *ops(void)
{
    return bv_compute_cpu_plugin()->ops;
}

/* Magnitudes in [0.05, 1] with random signs: at least 50 steps from a kink at 0. */
static float *away_from_zero(int64_t n)
{
    float *v = random_floats(n, 0.05f, 1.0f);
    for (int64_t i = 0; i < n; i++)
        if (rng_next() & 1)
            v[i] = -v[i];
    return v;
}

/* sum(out * r) in double: the scalar every check differentiates. */
static double dot_r(const float *out, const float *r, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)out[i] * (double)r[i];
    return s;
}

static void expect_pass(const char *what, int64_t n, float *x, const float *analytic,
                        bv_gradcheck_fn f, void *ctx)
{
    bv_gradcheck_report r;
    char msg[256];
    double err = bv_gradcheck(n, x, analytic, f, ctx, EPS, FLOOR, &r);
    if (getenv("BV_GRADCHECK_VERBOSE")) /* to see the margins */
        print_message("%s: %s\n", what, bv_gradcheck_describe(&r, msg, sizeof msg));
    if (!(err < PASS))
        fail_msg("%s: %s", what, bv_gradcheck_describe(&r, msg, sizeof msg));
}

/* A random graph over n vertices: every row has its self loop plus up to max_extra other
 * in-neighbours (ascending columns), except row empty_row, which has no edges at all. */
static bv_csr *random_graph(int64_t n, int max_extra, int64_t empty_row, bool with_values)
{
    bv_csr *a = bv_csr_new(n, n, n * (max_extra + 1));
    assert_non_null(a);
    bool *mark = calloc((size_t)n, sizeof *mark);
    int64_t e = 0;
    a->rowptr[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i != empty_row) {
            memset(mark, 0, (size_t)n * sizeof *mark);
            mark[i] = true;
            int extra = (int)(rng_next() % (uint64_t)(max_extra + 1));
            for (int k = 0; k < extra; k++)
                mark[rng_next() % (uint64_t)n] = true;
            for (int64_t j = 0; j < n; j++)
                if (mark[j])
                    a->colidx[e++] = (int32_t)j;
        }
        a->rowptr[i + 1] = e;
    }
    a->nnz = e;
    if (with_values)
        for (int64_t k = 0; k < e; k++)
            a->values[k] = rng_float(0.1f, 1.0f);
    else {
        free(a->values); /* NULL: weight 1, as the edge kernels see every graph */
        a->values = NULL;
    }
    free(mark);
    return a;
}

/* ---- elementwise: relu, leaky relu, elu, dropout ------------------------------------- */

typedef enum { ACT_RELU, ACT_LEAKY, ACT_ELU, ACT_DROPOUT } act_kind;

typedef struct act_check {
    bv_compute *c;
    act_kind kind;
    int64_t n;
    const float *x, *r;
    float *y;
} act_check;

#define SLOPE 0.2f
#define DROP_P 0.4f

static void act_forward(const act_check *a, const float *x, float *y)
{
    switch (a->kind) {
    case ACT_RELU: ops()->relu_forward(a->c, a->n, x, y); break;
    case ACT_LEAKY: ops()->leaky_relu_forward(a->c, a->n, SLOPE, x, y); break;
    case ACT_ELU: ops()->elu_forward(a->c, a->n, x, y); break;
    case ACT_DROPOUT: ops()->dropout_forward(a->c, a->n, DROP_P, 7, 3, 1000, x, y); break;
    }
}

static double act_loss(const float *x, void *ctx)
{
    act_check *a = ctx;
    act_forward(a, x, a->y);
    return dot_r(a->y, a->r, a->n);
}

static void check_activation(bv_compute *c, act_kind kind, const char *what)
{
    const int64_t n = 300;
    float *x = kind == ACT_ELU ? random_floats(n, -3.0f, 2.0f) : away_from_zero(n);
    if (kind == ACT_ELU)
        for (int64_t i = 0; i < n; i++) /* keep 50 steps from ELU's kink in f'' at 0 */
            if (fabsf(x[i]) < 0.05f)
                x[i] = 0.5f;
    float *r = random_floats(n, -1, 1), *y = zeros(n), *dx = zeros(n);
    act_check a = {.c = c, .kind = kind, .n = n, .x = x, .r = r, .y = y};
    switch (kind) {
    case ACT_RELU:
        act_forward(&a, x, y);
        ops()->relu_backward(c, n, y, r, dx); /* takes the forward output */
        break;
    case ACT_LEAKY: ops()->leaky_relu_backward(c, n, SLOPE, x, r, dx); break;
    case ACT_ELU: ops()->elu_backward(c, n, x, r, dx); break;
    case ACT_DROPOUT: ops()->dropout_backward(c, n, DROP_P, 7, 3, 1000, r, dx); break;
    }
    expect_pass(what, n, x, dx, act_loss, &a);
    free(x);
    free(r);
    free(y);
    free(dx);
}

static void test_activation_backwards_match_finite_differences(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    check_activation(c, ACT_RELU, "relu");
    check_activation(c, ACT_LEAKY, "leaky_relu");
    check_activation(c, ACT_ELU, "elu");
    check_activation(c, ACT_DROPOUT, "dropout (fixed mask)");
    ops()->destroy(c);
}

/* ---- softmax cross-entropy w.r.t. the logits ----------------------------------------- */

typedef struct xent_check {
    bv_compute *c;
    int64_t n, k;
    const int32_t *labels;
    const uint8_t *mask;
    float grad_scale;
} xent_check;

/* dlogits is grad_scale * d(loss_sum)/dlogits, so differentiate grad_scale * loss_sum. */
static double xent_loss(const float *logits, void *ctx)
{
    xent_check *x = ctx;
    bv_xent_result res;
    ops()->softmax_xent(x->c, x->n, x->k, logits, x->labels, x->mask, x->grad_scale, NULL, &res);
    return (double)x->grad_scale * res.loss_sum;
}

static void test_softmax_xent_gradient_matches_finite_differences(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t n = 30, k = 5;
    float *logits = random_floats(n * k, -3, 3);
    int32_t labels[30];
    uint8_t mask[30];
    for (int64_t i = 0; i < n; i++) {
        labels[i] = i % 9 == 4 ? -1 : (int32_t)(rng_next() % (uint64_t)k);
        mask[i] = i % 5 != 2; /* masked and unlabelled rows get a zero gradient */
    }
    xent_check x = {.c = c, .n = n, .k = k, .labels = labels, .mask = mask, .grad_scale = 0.5f};
    float *d = zeros(n * k);
    bv_xent_result res;
    ops()->softmax_xent(c, n, k, logits, labels, mask, x.grad_scale, d, &res);
    expect_pass("softmax_xent", n * k, logits, d, xent_loss, &x);
    free(logits);
    free(d);
    ops()->destroy(c);
}

/* ---- spmm ---------------------------------------------------------------------------- */

typedef struct spmm_check {
    bv_compute *c;
    const bv_csr *a;
    int64_t f;
    const float *x, *r;
    float *y;
} spmm_check;

static double spmm_loss(const float *x, void *ctx)
{
    spmm_check *s = ctx;
    ops()->spmm(s->c, s->a, 0, s->a->nrows, x, s->f, s->y);
    return dot_r(s->y, s->r, s->a->nrows * s->f);
}

static void test_spmm_backward_is_spmm_with_the_transpose_and_not_with_a(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t n = 15, f = 4;
    bv_csr *a = random_graph(n, 4, 6, true); /* weighted, not symmetric */
    bv_csr *at = bv_csr_transpose(a);
    float *x = random_floats(n * f, -1, 1), *r = random_floats(n * f, -1, 1);
    float *y = zeros(n * f), *dx = zeros(n * f);
    spmm_check s = {.c = c, .a = a, .f = f, .x = x, .r = r, .y = y};
    ops()->spmm(c, at, 0, n, r, f, dx);
    expect_pass("spmm via transpose", n * f, x, dx, spmm_loss, &s);

    /* a deliberately wrong backward (A instead of A^T) must be flagged */
    ops()->spmm(c, a, 0, n, r, f, dx);
    double err = bv_gradcheck(n * f, x, dx, spmm_loss, &s, EPS, FLOOR, NULL);
    assert_true(err > 0.3);
    free(x);
    free(r);
    free(y);
    free(dx);
    bv_csr_free(a);
    bv_csr_free(at);
    ops()->destroy(c);
}

/* ---- gemm ---------------------------------------------------------------------------- */

typedef struct gemm_check {
    bv_compute *c;
    bool ta, tb;
    int64_t m, n, k, lda, ldb;
    float *a, *b;
    const float *r;
    float *cm;
} gemm_check;

static double gemm_loss(const float *unused, void *ctx)
{
    (void)unused; /* the perturbed operand is g->a or g->b itself */
    gemm_check *g = ctx;
    ops()->gemm(g->c, g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b, g->ldb, 0.0f,
                g->cm, g->n);
    return dot_r(g->cm, g->r, g->m * g->n);
}

/* C = op(A) op(B): dop(A) = R op(B)^T and dop(B) = op(A)^T R, written for the stored
 * (possibly transposed) operands with gemm itself. */
static void check_gemm_gradients(bv_compute *c, bool ta, bool tb)
{
    const int64_t m = 6, n = 5, k = 7;
    gemm_check g = {.c = c, .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
                    .lda = ta ? m : k, .ldb = tb ? k : n};
    g.a = random_floats(m * k, -1, 1);
    g.b = random_floats(k * n, -1, 1);
    g.r = random_floats(m * n, -1, 1);
    g.cm = zeros(m * n);
    float *da = zeros(m * k), *db = zeros(k * n);
    if (!ta)
        ops()->gemm(c, false, !tb, m, k, n, 1.0f, g.r, n, g.b, g.ldb, 0.0f, da, g.lda);
    else
        ops()->gemm(c, tb, true, k, m, n, 1.0f, g.b, g.ldb, g.r, n, 0.0f, da, g.lda);
    if (!tb)
        ops()->gemm(c, !ta, false, k, n, m, 1.0f, g.a, g.lda, g.r, n, 0.0f, db, g.ldb);
    else
        ops()->gemm(c, true, ta, n, k, m, 1.0f, g.r, n, g.a, g.lda, 0.0f, db, g.ldb);
    expect_pass(ta ? "gemm dA (A transposed)" : "gemm dA", m * k, g.a, da, gemm_loss, &g);
    expect_pass(tb ? "gemm dB (B transposed)" : "gemm dB", k * n, g.b, db, gemm_loss, &g);
    free(g.a);
    free(g.b);
    free((float *)g.r);
    free(g.cm);
    free(da);
    free(db);
}

static void test_gemm_gradients_for_both_operands_and_all_transposes(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    check_gemm_gradients(c, false, false);
    check_gemm_gradients(c, true, false);
    check_gemm_gradients(c, false, true);
    check_gemm_gradients(c, true, true);
    ops()->destroy(c);
}

/* ---- edge kernels -------------------------------------------------------------------- */

#define HEADS 3

typedef struct edge_check {
    bv_compute *c;
    const bv_csr *a;
    int64_t rb, re;       /* the row range (interval) under test */
    int64_t ne, base;     /* its edges, and a->rowptr[rb] */
    int64_t ss, ds, d, xs;
    float *src, *dst;     /* edge_scores inputs */
    float *z, *alpha;     /* edge arrays of the range */
    float *w, *x, *y;     /* gather_heads */
    const float *r;       /* the loss weights of whichever output is under test */
} edge_check;

static double edge_scores_loss(const float *unused, void *ctx)
{
    (void)unused;
    edge_check *e = ctx;
    ops()->edge_scores(e->c, e->a, e->rb, e->re, HEADS, e->src, e->ss, e->dst, e->ds, e->z);
    return dot_r(e->z, e->r, e->ne * HEADS);
}

static double edge_softmax_loss(const float *unused, void *ctx)
{
    (void)unused;
    edge_check *e = ctx;
    ops()->edge_softmax(e->c, e->a, e->rb, e->re, HEADS, e->z, e->alpha);
    return dot_r(e->alpha, e->r, e->ne * HEADS);
}

static double gather_loss(const float *unused, void *ctx)
{
    (void)unused;
    edge_check *e = ctx;
    ops()->gather_heads(e->c, e->a, e->rb, e->re, HEADS, e->d, e->w, e->x, e->xs, e->y);
    return dot_r(e->y, e->r, (e->re - e->rb) * HEADS * e->d);
}

static edge_check edge_setup(bv_compute *c, const bv_csr *a, int64_t rb, int64_t re)
{
    edge_check e = {.c = c, .a = a, .rb = rb, .re = re, .base = a->rowptr[rb],
                    .ne = a->rowptr[re] - a->rowptr[rb], .ss = HEADS + 2, .ds = HEADS + 1,
                    .d = 4};
    e.xs = HEADS * e.d + 3; /* strides wider than the window read */
    return e;
}

static void test_edge_scores_backward_matches_finite_differences(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr *a = random_graph(14, 4, 9, false);
    edge_check e = edge_setup(c, a, 2, 12); /* an interval, with the empty row inside */
    int64_t rows = e.re - e.rb;
    e.src = random_floats(a->ncols * e.ss, -1, 1);
    e.dst = random_floats(rows * e.ds, -1, 1);
    e.z = zeros(e.ne * HEADS);
    float *r = random_floats(e.ne * HEADS, -1, 1);
    e.r = r;
    float *dsrc = zeros(a->ncols * e.ss), *ddst = random_floats(rows * e.ds, 5, 6);
    ops()->edge_scores_backward(c, a, e.rb, e.re, HEADS, r, dsrc, e.ss, ddst, e.ds, false);
    /* ddst's padding columns were not written: zero them, as their true gradient is 0 */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t h = HEADS; h < e.ds; h++) {
            assert_true(ddst[i * e.ds + h] >= 5.0f);
            ddst[i * e.ds + h] = 0.0f;
        }
    expect_pass("edge_scores dsrc", a->ncols * e.ss, e.src, dsrc, edge_scores_loss, &e);
    expect_pass("edge_scores ddst", rows * e.ds, e.dst, ddst, edge_scores_loss, &e);
    free(e.src);
    free(e.dst);
    free(e.z);
    free(r);
    free(dsrc);
    free(ddst);
    bv_csr_free(a);
    ops()->destroy(c);
}

static void test_edge_softmax_backward_matches_finite_differences(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr *a = random_graph(14, 5, 9, false);
    edge_check e = edge_setup(c, a, 3, 14);
    e.z = random_floats(e.ne * HEADS, -2, 2);
    e.alpha = zeros(e.ne * HEADS);
    float *r = random_floats(e.ne * HEADS, -1, 1), *dz = zeros(e.ne * HEADS);
    e.r = r;
    ops()->edge_softmax(c, a, e.rb, e.re, HEADS, e.z, e.alpha);
    ops()->edge_softmax_backward(c, a, e.rb, e.re, HEADS, e.alpha, r, dz);
    expect_pass("edge_softmax", e.ne * HEADS, e.z, dz, edge_softmax_loss, &e);
    free(e.z);
    free(e.alpha);
    free(r);
    free(dz);
    bv_csr_free(a);
    ops()->destroy(c);
}

/* gather_heads over an interval; dx through the whole graph's transpose and perm (as the
 * engine runs it), with the interval's w and dy placed in whole-graph arrays. */
static void test_gather_heads_backwards_match_finite_differences(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr *a = random_graph(14, 4, 5, false);
    int64_t *perm = NULL;
    bv_csr *at = bv_csr_transpose_perm(a, &perm);
    edge_check e = edge_setup(c, a, 4, 13);
    int64_t rows = e.re - e.rb, width = HEADS * e.d;
    e.w = random_floats(e.ne * HEADS, -1, 1);
    e.x = random_floats(a->ncols * e.xs, -1, 1);
    e.y = zeros(rows * width);
    float *r = random_floats(rows * width, -1, 1);
    e.r = r;

    float *w_all = zeros(a->nnz * HEADS), *dy_all = zeros(a->nrows * width);
    memcpy(w_all + e.base * HEADS, e.w, (size_t)(e.ne * HEADS) * sizeof(float));
    memcpy(dy_all + e.rb * width, r, (size_t)(rows * width) * sizeof(float));
    float *dx = zeros(a->ncols * e.xs), *dw = zeros(e.ne * HEADS);
    ops()->gather_heads_backward_x(c, at, perm, HEADS, e.d, w_all, dy_all, dx, e.xs);
    ops()->gather_heads_backward_w(c, a, e.rb, e.re, HEADS, e.d, r, e.x, e.xs, dw);
    expect_pass("gather_heads dx", a->ncols * e.xs, e.x, dx, gather_loss, &e);
    expect_pass("gather_heads dw", e.ne * HEADS, e.w, dw, gather_loss, &e);

    /* a wrong perm (at's own edge order) gives a wrong dx */
    int64_t *identity = malloc((size_t)a->nnz * sizeof *identity);
    for (int64_t t = 0; t < a->nnz; t++)
        identity[t] = t;
    memset(dx, 0, (size_t)(a->ncols * e.xs) * sizeof *dx);
    ops()->gather_heads_backward_x(c, at, identity, HEADS, e.d, w_all, dy_all, dx, e.xs);
    assert_true(bv_gradcheck(a->ncols * e.xs, e.x, dx, gather_loss, &e, EPS, FLOOR, NULL) > 0.3);
    free(identity);
    free(e.w);
    free(e.x);
    free(e.y);
    free(r);
    free(w_all);
    free(dy_all);
    free(dx);
    free(dw);
    bv_free_aligned(perm);
    bv_csr_free(at);
    bv_csr_free(a);
    ops()->destroy(c);
}

/* ---- a GAT attention head chained from the kernels ----------------------------------- *
 * y = gather_heads(softmax(leaky_relu(edge_scores(src, dst))), x) over an interval, with
 * its backward assembled from the backward kernels as an engine would. */

typedef struct gat_check {
    edge_check e;
    float *zl; /* leaky_relu(z) */
} gat_check;

static void gat_forward(gat_check *g)
{
    edge_check *e = &g->e;
    ops()->edge_scores(e->c, e->a, e->rb, e->re, HEADS, e->src, e->ss, e->dst, e->ds, e->z);
    ops()->leaky_relu_forward(e->c, e->ne * HEADS, SLOPE, e->z, g->zl);
    ops()->edge_softmax(e->c, e->a, e->rb, e->re, HEADS, g->zl, e->alpha);
    ops()->gather_heads(e->c, e->a, e->rb, e->re, HEADS, e->d, e->alpha, e->x, e->xs, e->y);
}

static double gat_loss(const float *unused, void *ctx)
{
    (void)unused;
    gat_check *g = ctx;
    gat_forward(g);
    return dot_r(g->e.y, g->e.r, (g->e.re - g->e.rb) * HEADS * g->e.d);
}

static void test_chained_attention_head_gradients_match_finite_differences(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr *a = random_graph(14, 4, 8, false);
    int64_t *perm = NULL;
    bv_csr *at = bv_csr_transpose_perm(a, &perm);
    gat_check g = {.e = edge_setup(c, a, 1, 13)};
    edge_check *e = &g.e;
    int64_t rows = e->re - e->rb, width = HEADS * e->d, n_e = e->ne * HEADS;
    e->z = zeros(n_e);
    e->alpha = zeros(n_e);
    g.zl = zeros(n_e);
    e->y = zeros(rows * width);
    e->x = random_floats(a->ncols * e->xs, -1, 1);
    /* scores at least 0.02 from leaky ReLU's kink, so no step crosses it */
    e->src = NULL;
    e->dst = NULL;
    for (int attempt = 0; attempt < 1000; attempt++) {
        free(e->src);
        free(e->dst);
        e->src = random_floats(a->ncols * e->ss, -2, 2);
        e->dst = random_floats(rows * e->ds, -2, 2);
        ops()->edge_scores(c, a, e->rb, e->re, HEADS, e->src, e->ss, e->dst, e->ds, e->z);
        bool clear = true;
        for (int64_t i = 0; i < n_e; i++)
            clear = clear && fabsf(e->z[i]) > 0.02f;
        if (clear)
            break;
    }
    float *r = random_floats(rows * width, -1, 1);
    e->r = r;
    gat_forward(&g);

    /* backward: dalpha = SDDMM, dz' = softmax', dz = leaky', dsrc/ddst = scores' */
    float *dalpha = zeros(n_e), *dz = zeros(n_e);
    float *dsrc = zeros(a->ncols * e->ss), *ddst = zeros(rows * e->ds);
    float *dx = zeros(a->ncols * e->xs);
    float *alpha_all = zeros(a->nnz * HEADS), *dy_all = zeros(a->nrows * width);
    ops()->gather_heads_backward_w(c, a, e->rb, e->re, HEADS, e->d, r, e->x, e->xs, dalpha);
    ops()->edge_softmax_backward(c, a, e->rb, e->re, HEADS, e->alpha, dalpha, dz);
    ops()->leaky_relu_backward(c, n_e, SLOPE, e->z, dz, dz);
    ops()->edge_scores_backward(c, a, e->rb, e->re, HEADS, dz, dsrc, e->ss, ddst, e->ds, false);
    memcpy(alpha_all + e->base * HEADS, e->alpha, (size_t)n_e * sizeof(float));
    memcpy(dy_all + e->rb * width, r, (size_t)(rows * width) * sizeof(float));
    ops()->gather_heads_backward_x(c, at, perm, HEADS, e->d, alpha_all, dy_all, dx, e->xs);

    expect_pass("attention head dsrc", a->ncols * e->ss, e->src, dsrc, gat_loss, &g);
    expect_pass("attention head ddst", rows * e->ds, e->dst, ddst, gat_loss, &g);
    expect_pass("attention head dx", a->ncols * e->xs, e->x, dx, gat_loss, &g);

    /* a perturbed analytic gradient must fail */
    int64_t worst = 0;
    for (int64_t i = 0; i < a->ncols * e->ss; i++)
        if (fabsf(dsrc[i]) > fabsf(dsrc[worst]))
            worst = i;
    dsrc[worst] *= 1.5f;
    bv_gradcheck_report rep;
    double err = bv_gradcheck(a->ncols * e->ss, e->src, dsrc, gat_loss, &g, EPS, FLOOR, &rep);
    assert_true(err > 0.15);
    assert_int_equal(rep.worst_index, worst);

    free(e->z);
    free(e->alpha);
    free(g.zl);
    free(e->y);
    free(e->x);
    free(e->src);
    free(e->dst);
    free(r);
    free(dalpha);
    free(dz);
    free(dsrc);
    free(ddst);
    free(dx);
    free(alpha_all);
    free(dy_all);
    bv_free_aligned(perm);
    bv_csr_free(at);
    bv_csr_free(a);
    ops()->destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activation_backwards_match_finite_differences),
        cmocka_unit_test(test_softmax_xent_gradient_matches_finite_differences),
        cmocka_unit_test(test_spmm_backward_is_spmm_with_the_transpose_and_not_with_a),
        cmocka_unit_test(test_gemm_gradients_for_both_operands_and_all_transposes),
        cmocka_unit_test(test_edge_scores_backward_matches_finite_differences),
        cmocka_unit_test(test_edge_softmax_backward_matches_finite_differences),
        cmocka_unit_test(test_gather_heads_backwards_match_finite_differences),
        cmocka_unit_test(test_chained_attention_head_gradients_match_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
