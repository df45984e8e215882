/* Gradient checks through the cuda compute plugin: every backward kernel against central
 * finite differences (tests/unit/gradcheck.h) of L = sum(out * R) for a fixed random R, the
 * forward evaluated by the cuda ops themselves; and deliberately wrong gradients must be
 * caught. The cases are those of the cpu plugin's test_gradcheck_cpu.c and
 * test_transformer_kernels.c, copied here (that file stays as it is), plus the backward
 * kernels they leave out: bias_backward, gemm_batched, spmm_dropout(_heads)_backward_x.
 * Without a usable GPU it prints "SKIP: <reason>" and exits 77 (ctest: skipped).
 *
 * One line per check, "name  max_error  threshold  PASS|FAIL", then "N checks, F failed";
 * exit 1 if any failed. A crash or a hang (BV_TEST_CASE_TIMEOUT seconds, default 60) fails
 * that group of checks and the run goes on. BV_GRADCHECK_VERBOSE=1 prints where each check
 * was worst. */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bivouac/compute.h"
#include "bivouac/options.h"
#include "bivouac/plugin.h"
#include "bivouac/tensor.h"
#include "gradcheck.h"

#define TEST_RNG_SEED 0x2545F4914F6CDD1Dull
#include "test_rng.h"

const bv_plugin *bv_compute_cuda_plugin(void);

/* As test_gradcheck_cpu.c: the kernels' outputs carry float rounding (~6e-8 relative), which
 * the difference divides by 2h: with h = 1e-2 that noise is ~1e-5, while the truncation
 * error of these smooth functions stays ~1e-5 relative; every input is kept further than h
 * from a kink. Gradients are of order 0.1 to 1, so a floor of 1e-2 judges near-zero ones on
 * an absolute scale. A correct gradient scores ~1e-4; a wrong one well above 0.1. The
 * transformer kernels pass at 2e-2, as in test_transformer_kernels.c. */
#define PASS 1e-2
#define PASS_TRANSFORMER 2e-2
#define EPS 1e-2
#define FLOOR 1e-2
#define DEFAULT_TIMEOUT 60

static const bv_compute_ops *ops;
static bv_compute *cc; /* the cuda instance every check runs on */

/* ---- random data ----------------------------------------------------------------------- */

static float *random_floats(int64_t n, float lo, float hi)
{
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v)
        abort();
    for (int64_t i = 0; i < n; i++)
        v[i] = rng_float(lo, hi);
    return v;
}

static float *zeros(int64_t n)
{
    float *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (!v)
        abort();
    return v;
}

/* Magnitudes in [0.05, 1] with random signs: at least 5 steps from a kink at 0. */
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

/* A random graph over n vertices: every row has its self loop plus up to max_extra other
 * in-neighbours (ascending columns), except row empty_row, which has no edges at all. */
static bv_csr *random_graph(int64_t n, int max_extra, int64_t empty_row, bool with_values)
{
    bv_csr *a = bv_csr_new(n, n, n * (max_extra + 1));
    bool *mark = calloc((size_t)n, sizeof *mark);
    if (!a || !mark)
        abort();
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
        bv_free_aligned(a->values); /* NULL: weight 1, as the edge kernels see every graph */
        a->values = NULL;
    }
    free(mark);
    return a;
}

/* A nrows x ncols bag of words: up to 4 nonzeros per row (values in [0.1, 1]), row 3 empty. */
static bv_csr *random_bag(int64_t nrows, int64_t ncols)
{
    bv_csr *a = bv_csr_new(nrows, ncols, nrows * 4);
    if (!a)
        abort();
    int64_t e = 0;
    a->rowptr[0] = 0;
    for (int64_t i = 0; i < nrows; i++) {
        int32_t col = -1;
        int deg = i == 3 ? 0 : 1 + (int)(rng_next() % 4);
        for (int d = 0; d < deg && col < ncols - 1; d++) {
            int64_t room = ncols - 1 - col;
            col += 1 + (int32_t)(rng_next() % (uint64_t)(room < 3 ? room : 3));
            a->colidx[e] = col;
            a->values[e++] = rng_float(0.1f, 1.0f);
        }
        a->rowptr[i + 1] = e;
    }
    a->nnz = e;
    return a;
}

/* ---- reporting ------------------------------------------------------------------------- */

static int n_checks, n_failed;
static char failed_list[4096];

static void report(const char *what, double err, const char *threshold, bool pass,
                   const char *detail)
{
    printf("%-52s %10.3g %10s %s\n", what, err, threshold, pass ? "PASS" : "FAIL");
    if (detail && (!pass || getenv("BV_GRADCHECK_VERBOSE")))
        printf("    %s\n", detail);
    n_checks++;
    if (!pass) {
        n_failed++;
        size_t used = strlen(failed_list);
        if (used + 100 < sizeof failed_list)
            snprintf(failed_list + used, sizeof failed_list - used, "  %s\n", what);
    }
    fflush(stdout);
}

/* The analytic gradient must pass the finite-difference check. */
static void expect_pass(const char *what, double threshold, int64_t n, float *x,
                        const float *analytic, bv_gradcheck_fn f, void *ctx)
{
    bv_gradcheck_report r;
    char msg[256], thr[16];
    double err = bv_gradcheck(n, x, analytic, f, ctx, EPS, FLOOR, &r);
    snprintf(thr, sizeof thr, "< %.0e", threshold);
    report(what, err, thr, err < threshold, bv_gradcheck_describe(&r, msg, sizeof msg));
}

/* A deliberately wrong gradient must fail the check (by more than `above`). */
static void expect_caught(const char *what, double above, int64_t n, float *x,
                          const float *analytic, bv_gradcheck_fn f, void *ctx,
                          int64_t want_worst)
{
    bv_gradcheck_report r;
    char msg[256], thr[16];
    double err = bv_gradcheck(n, x, analytic, f, ctx, EPS, FLOOR, &r);
    snprintf(thr, sizeof thr, "> %.2g", above);
    bool ok = err > above && (want_worst < 0 || r.worst_index == want_worst);
    report(what, err, thr, ok, bv_gradcheck_describe(&r, msg, sizeof msg));
}

/* ---- elementwise: relu, leaky relu, elu, dropout ------------------------------------- */

typedef enum { ACT_RELU, ACT_LEAKY, ACT_ELU, ACT_DROPOUT, ACT_GELU } act_kind;

typedef struct act_check {
    act_kind kind;
    int64_t n;
    const float *r;
    float *y;
} act_check;

#define SLOPE 0.2f
#define DROP_P 0.4f

static void act_forward(const act_check *a, const float *x, float *y)
{
    switch (a->kind) {
    case ACT_RELU: ops->relu_forward(cc, a->n, x, y); break;
    case ACT_LEAKY: ops->leaky_relu_forward(cc, a->n, SLOPE, x, y); break;
    case ACT_ELU: ops->elu_forward(cc, a->n, x, y); break;
    case ACT_DROPOUT: ops->dropout_forward(cc, a->n, DROP_P, 7, 3, 1000, x, y); break;
    case ACT_GELU: ops->gelu_forward(cc, a->n, x, y); break;
    }
}

static double act_loss(const float *x, void *ctx)
{
    act_check *a = ctx;
    act_forward(a, x, a->y);
    return dot_r(a->y, a->r, a->n);
}

static void check_activation(act_kind kind, const char *what)
{
    const int64_t n = kind == ACT_GELU ? 50 : 300;
    float *x = kind == ACT_ELU    ? random_floats(n, -3.0f, 2.0f)
               : kind == ACT_GELU ? random_floats(n, -4.0f, 4.0f)
                                  : away_from_zero(n);
    if (kind == ACT_ELU)
        for (int64_t i = 0; i < n; i++) /* keep 5 steps from ELU's kink in f'' at 0 */
            if (fabsf(x[i]) < 0.05f)
                x[i] = 0.5f;
    float *r = random_floats(n, -1, 1), *y = zeros(n), *dx = zeros(n);
    act_check a = {.kind = kind, .n = n, .r = r, .y = y};
    switch (kind) {
    case ACT_RELU:
        act_forward(&a, x, y);
        ops->relu_backward(cc, n, y, r, dx); /* takes the forward output */
        break;
    case ACT_LEAKY: ops->leaky_relu_backward(cc, n, SLOPE, x, r, dx); break;
    case ACT_ELU: ops->elu_backward(cc, n, x, r, dx); break;
    case ACT_DROPOUT: ops->dropout_backward(cc, n, DROP_P, 7, 3, 1000, r, dx); break;
    case ACT_GELU: ops->gelu_backward(cc, n, x, r, dx); break;
    }
    expect_pass(what, kind == ACT_GELU ? PASS_TRANSFORMER : PASS, n, x, dx, act_loss, &a);
    free(x);
    free(r);
    free(y);
    free(dx);
}

static void check_activations(void)
{
    check_activation(ACT_RELU, "relu_backward");
    check_activation(ACT_LEAKY, "leaky_relu_backward");
    check_activation(ACT_ELU, "elu_backward");
    check_activation(ACT_DROPOUT, "dropout_backward (p 0.4, the forward's mask)");
    check_activation(ACT_GELU, "gelu_backward");
}

/* ---- softmax cross-entropy w.r.t. the logits ----------------------------------------- */

typedef struct xent_check {
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
    ops->softmax_xent(cc, x->n, x->k, logits, x->labels, x->mask, x->grad_scale, NULL, &res);
    return (double)x->grad_scale * res.loss_sum;
}

static void check_softmax_xent(void)
{
    const int64_t n = 30, k = 5;
    float *logits = random_floats(n * k, -3, 3);
    int32_t labels[30];
    uint8_t mask[30];
    for (int64_t i = 0; i < n; i++) {
        labels[i] = i % 9 == 4 ? -1 : (int32_t)(rng_next() % (uint64_t)k);
        mask[i] = i % 5 != 2; /* masked and unlabelled rows get a zero gradient */
    }
    xent_check x = {.n = n, .k = k, .labels = labels, .mask = mask, .grad_scale = 0.5f};
    float *d = random_floats(n * k, 5, 6); /* every element written, zeros included */
    bv_xent_result res;
    ops->softmax_xent(cc, n, k, logits, labels, mask, x.grad_scale, d, &res);
    expect_pass("softmax_xent dlogits (mask, label -1)", PASS, n * k, logits, d, xent_loss, &x);
    free(logits);
    free(d);
}

/* ---- spmm ---------------------------------------------------------------------------- */

typedef struct spmm_check {
    const bv_csr *a;
    int64_t f;
    const float *r;
    float *y;
} spmm_check;

static double spmm_loss(const float *x, void *ctx)
{
    spmm_check *s = ctx;
    ops->spmm(cc, s->a, 0, s->a->nrows, x, s->f, s->y);
    return dot_r(s->y, s->r, s->a->nrows * s->f);
}

static void check_spmm(void)
{
    const int64_t n = 15, f = 4;
    bv_csr *a = random_graph(n, 4, 6, true); /* weighted, not symmetric */
    bv_csr *at = bv_csr_transpose(a);
    float *x = random_floats(n * f, -1, 1), *r = random_floats(n * f, -1, 1);
    float *y = zeros(n * f), *dx = zeros(n * f);
    spmm_check s = {.a = a, .f = f, .r = r, .y = y};
    ops->spmm(cc, at, 0, n, r, f, dx);
    expect_pass("spmm dx = spmm over A^T", PASS, n * f, x, dx, spmm_loss, &s);
    ops->spmm(cc, a, 0, n, r, f, dx); /* the wrong backward: A instead of A^T */
    expect_caught("spmm: A instead of A^T is caught", 0.3, n * f, x, dx, spmm_loss, &s, -1);
    free(x);
    free(r);
    free(y);
    free(dx);
    bv_csr_free(a);
    bv_csr_free(at);
}

/* ---- gemm ---------------------------------------------------------------------------- */

typedef struct gemm_check {
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
    ops->gemm(cc, g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b, g->ldb, 0.0f, g->cm,
              g->n);
    return dot_r(g->cm, g->r, g->m * g->n);
}

/* C = op(A) op(B): dop(A) = R op(B)^T and dop(B) = op(A)^T R, written for the stored
 * (possibly transposed) operands with gemm itself. */
static void check_gemm_gradients(bool ta, bool tb)
{
    const int64_t m = 6, n = 5, k = 7;
    gemm_check g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = ta ? m : k,
                    .ldb = tb ? k : n};
    g.a = random_floats(m * k, -1, 1);
    g.b = random_floats(k * n, -1, 1);
    float *r = random_floats(m * n, -1, 1);
    g.r = r;
    g.cm = zeros(m * n);
    float *da = zeros(m * k), *db = zeros(k * n);
    if (!ta)
        ops->gemm(cc, false, !tb, m, k, n, 1.0f, r, n, g.b, g.ldb, 0.0f, da, g.lda);
    else
        ops->gemm(cc, tb, true, k, m, n, 1.0f, g.b, g.ldb, r, n, 0.0f, da, g.lda);
    if (!tb)
        ops->gemm(cc, !ta, false, k, n, m, 1.0f, g.a, g.lda, r, n, 0.0f, db, g.ldb);
    else
        ops->gemm(cc, true, ta, n, k, m, 1.0f, r, n, g.a, g.lda, 0.0f, db, g.ldb);
    char what[64];
    snprintf(what, sizeof what, "gemm %c%c dA", ta ? 'T' : 'N', tb ? 'T' : 'N');
    expect_pass(what, PASS, m * k, g.a, da, gemm_loss, &g);
    snprintf(what, sizeof what, "gemm %c%c dB", ta ? 'T' : 'N', tb ? 'T' : 'N');
    expect_pass(what, PASS, k * n, g.b, db, gemm_loss, &g);
    free(g.a);
    free(g.b);
    free(r);
    free(g.cm);
    free(da);
    free(db);
}

static void check_gemm(void)
{
    check_gemm_gradients(false, false);
    check_gemm_gradients(true, false);
    check_gemm_gradients(false, true);
    check_gemm_gradients(true, true);
}

/* C_i = A_i B_i over 3 matrices: dA_i = R_i B_i^T, dB_i = A_i^T R_i, both by gemm_batched. */
typedef struct batched_check {
    int64_t count, m, n, k;
    float *a, *b, *cm;
    const float *r;
} batched_check;

static double batched_loss(const float *unused, void *ctx)
{
    (void)unused;
    batched_check *g = ctx;
    ops->gemm_batched(cc, g->count, false, false, g->m, g->n, g->k, 1.0f, g->a, g->k,
                      g->m * g->k, g->b, g->n, g->k * g->n, 0.0f, g->cm, g->n, g->m * g->n);
    return dot_r(g->cm, g->r, g->count * g->m * g->n);
}

static void check_gemm_batched(void)
{
    batched_check g = {.count = 3, .m = 4, .n = 3, .k = 5};
    int64_t na = g.count * g.m * g.k, nb = g.count * g.k * g.n, nc = g.count * g.m * g.n;
    g.a = random_floats(na, -1, 1);
    g.b = random_floats(nb, -1, 1);
    g.cm = zeros(nc);
    float *r = random_floats(nc, -1, 1), *da = zeros(na), *db = zeros(nb);
    g.r = r;
    ops->gemm_batched(cc, g.count, false, true, g.m, g.k, g.n, 1.0f, r, g.n, g.m * g.n, g.b, g.n,
                      g.k * g.n, 0.0f, da, g.k, g.m * g.k);
    ops->gemm_batched(cc, g.count, true, false, g.k, g.n, g.m, 1.0f, g.a, g.k, g.m * g.k, r, g.n,
                      g.m * g.n, 0.0f, db, g.n, g.k * g.n);
    expect_pass("gemm_batched dA = R B^T (gemm_batched NT)", PASS, na, g.a, da, batched_loss, &g);
    expect_pass("gemm_batched dB = A^T R (gemm_batched TN)", PASS, nb, g.b, db, batched_loss, &g);
    free(g.a);
    free(g.b);
    free(g.cm);
    free(r);
    free(da);
    free(db);
}

/* y = x + bias per row: dbias = bias_backward(R). */
typedef struct bias_check {
    int64_t rows, cols;
    const float *y0, *r;
    float *y;
} bias_check;

static double bias_loss(const float *bias, void *ctx)
{
    bias_check *b = ctx;
    memcpy(b->y, b->y0, (size_t)(b->rows * b->cols) * sizeof *b->y);
    ops->add_bias(cc, b->rows, b->cols, bias, b->y);
    return dot_r(b->y, b->r, b->rows * b->cols);
}

static void check_bias(void)
{
    bias_check b = {.rows = 9, .cols = 6};
    float *y0 = random_floats(b.rows * b.cols, -1, 1), *r = random_floats(b.rows * b.cols, -1, 1);
    float *bias = random_floats(b.cols, -1, 1), *db = random_floats(b.cols, 5, 6);
    b.y0 = y0;
    b.r = r;
    b.y = zeros(b.rows * b.cols);
    ops->bias_backward(cc, b.rows, b.cols, r, db, false);
    expect_pass("bias_backward (of add_bias)", PASS, b.cols, bias, db, bias_loss, &b);
    free(y0);
    free(r);
    free(bias);
    free(db);
    free(b.y);
}

/* ---- the sparse first layer: spmm_dropout and its heads form ------------------------- */

typedef struct bow_check {
    const bv_csr *a;
    int heads;
    int64_t f, ldx, ldy;
    const float *r;
    float *y;
} bow_check;

#define BOW_P 0.4f
#define BOW_OFFSET 321
#define BOW_HEAD_STRIDE 1000

static double bow_loss(const float *x, void *ctx)
{
    bow_check *b = ctx;
    if (b->heads == 0)
        ops->spmm_dropout(cc, b->a, BOW_P, 11, 5, BOW_OFFSET, b->a->ncols, x, b->ldx, b->f, b->y,
                          b->ldy);
    else
        ops->spmm_dropout_heads(cc, b->a, BOW_P, 11, 5, BOW_OFFSET, BOW_HEAD_STRIDE, b->a->ncols,
                                b->heads, x, b->ldx, b->f, b->y, b->ldy);
    return dot_r(b->y, b->r, b->a->nrows * b->ldy);
}

/* heads 0: spmm_dropout; otherwise spmm_dropout_heads. x and y have padding columns: R is 0
 * in y's, and dx must stay 0 in x's (their true gradient). */
static void check_bow(int heads)
{
    bv_csr *a = random_bag(12, 9);
    int width = heads ? heads : 1;
    bow_check b = {.a = a, .heads = heads, .f = 3};
    b.ldx = width * b.f + 1;
    b.ldy = width * b.f + 2;
    float *x = random_floats(a->ncols * b.ldx, -1, 1);
    float *r = random_floats(a->nrows * b.ldy, -1, 1);
    for (int64_t i = 0; i < a->nrows; i++)
        for (int64_t j = width * b.f; j < b.ldy; j++)
            r[i * b.ldy + j] = 0.0f;
    b.r = r;
    b.y = zeros(a->nrows * b.ldy);
    float *dx = zeros(a->ncols * b.ldx);
    if (heads == 0)
        ops->spmm_dropout_backward_x(cc, a, BOW_P, 11, 5, BOW_OFFSET, a->ncols, r, b.ldy, b.f, dx,
                                     b.ldx);
    else
        ops->spmm_dropout_heads_backward_x(cc, a, BOW_P, 11, 5, BOW_OFFSET, BOW_HEAD_STRIDE,
                                           a->ncols, heads, r, b.ldy, b.f, dx, b.ldx);
    expect_pass(heads ? "spmm_dropout_heads_backward_x (3 heads, p 0.4)"
                      : "spmm_dropout_backward_x (p 0.4)",
                PASS, a->ncols * b.ldx, x, dx, bow_loss, &b);
    free(x);
    free(r);
    free(b.y);
    free(dx);
    bv_csr_free(a);
}

static void check_sparse_first_layer(void)
{
    check_bow(0);
    check_bow(3);
}

/* ---- edge kernels -------------------------------------------------------------------- */

#define HEADS 3

typedef struct edge_check {
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
    ops->edge_scores(cc, e->a, e->rb, e->re, HEADS, e->src, e->ss, e->dst, e->ds, e->z);
    return dot_r(e->z, e->r, e->ne * HEADS);
}

static double edge_softmax_loss(const float *unused, void *ctx)
{
    (void)unused;
    edge_check *e = ctx;
    ops->edge_softmax(cc, e->a, e->rb, e->re, HEADS, e->z, e->alpha);
    return dot_r(e->alpha, e->r, e->ne * HEADS);
}

static double gather_loss(const float *unused, void *ctx)
{
    (void)unused;
    edge_check *e = ctx;
    ops->gather_heads(cc, e->a, e->rb, e->re, HEADS, e->d, e->w, e->x, e->xs, e->y);
    return dot_r(e->y, e->r, (e->re - e->rb) * HEADS * e->d);
}

static edge_check edge_setup(const bv_csr *a, int64_t rb, int64_t re)
{
    edge_check e = {.a = a, .rb = rb, .re = re, .base = a->rowptr[rb],
                    .ne = a->rowptr[re] - a->rowptr[rb], .ss = HEADS + 2, .ds = HEADS + 1,
                    .d = 4};
    e.xs = HEADS * e.d + 3; /* strides wider than the window read */
    return e;
}

static void check_edge_scores(void)
{
    bv_csr *a = random_graph(14, 4, 9, false);
    edge_check e = edge_setup(a, 2, 12); /* an interval, with the empty row inside */
    int64_t rows = e.re - e.rb;
    e.src = random_floats(a->ncols * e.ss, -1, 1);
    e.dst = random_floats(rows * e.ds, -1, 1);
    e.z = zeros(e.ne * HEADS);
    float *r = random_floats(e.ne * HEADS, -1, 1);
    e.r = r;
    float *dsrc = zeros(a->ncols * e.ss), *ddst = random_floats(rows * e.ds, 5, 6);
    ops->edge_scores_backward(cc, a, e.rb, e.re, HEADS, r, dsrc, e.ss, ddst, e.ds, false);
    /* ddst's padding columns are not written: zero them, as their true gradient is 0 (a
     * write there shows as a wrong gradient) */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t h = HEADS; h < e.ds; h++)
            ddst[i * e.ds + h] = ddst[i * e.ds + h] >= 5.0f ? 0.0f : 1e3f;
    expect_pass("edge_scores_backward dsrc", PASS, a->ncols * e.ss, e.src, dsrc,
                edge_scores_loss, &e);
    expect_pass("edge_scores_backward ddst", PASS, rows * e.ds, e.dst, ddst, edge_scores_loss,
                &e);
    free(e.src);
    free(e.dst);
    free(e.z);
    free(r);
    free(dsrc);
    free(ddst);
    bv_csr_free(a);
}

static void check_edge_softmax(void)
{
    bv_csr *a = random_graph(14, 5, 9, false);
    edge_check e = edge_setup(a, 3, 14);
    e.z = random_floats(e.ne * HEADS, -2, 2);
    e.alpha = zeros(e.ne * HEADS);
    float *r = random_floats(e.ne * HEADS, -1, 1), *dz = zeros(e.ne * HEADS);
    e.r = r;
    ops->edge_softmax(cc, a, e.rb, e.re, HEADS, e.z, e.alpha);
    ops->edge_softmax_backward(cc, a, e.rb, e.re, HEADS, e.alpha, r, dz);
    expect_pass("edge_softmax_backward", PASS, e.ne * HEADS, e.z, dz, edge_softmax_loss, &e);
    free(e.z);
    free(e.alpha);
    free(r);
    free(dz);
    bv_csr_free(a);
}

/* gather_heads over an interval; dx through the whole graph's transpose and perm (as the
 * engine runs it), with the interval's w and dy placed in whole-graph arrays. */
static void check_gather_heads(void)
{
    bv_csr *a = random_graph(14, 4, 5, false);
    int64_t *perm = NULL;
    bv_csr *at = bv_csr_transpose_perm(a, &perm);
    edge_check e = edge_setup(a, 4, 13);
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
    ops->gather_heads_backward_x(cc, at, perm, HEADS, e.d, w_all, dy_all, dx, e.xs);
    ops->gather_heads_backward_w(cc, a, e.rb, e.re, HEADS, e.d, r, e.x, e.xs, dw);
    expect_pass("gather_heads_backward_x (A^T and perm)", PASS, a->ncols * e.xs, e.x, dx,
                gather_loss, &e);
    expect_pass("gather_heads_backward_w", PASS, e.ne * HEADS, e.w, dw, gather_loss, &e);

    /* a wrong perm (at's own edge order) gives a wrong dx */
    int64_t *identity = malloc((size_t)a->nnz * sizeof *identity);
    if (!identity)
        abort();
    for (int64_t t = 0; t < a->nnz; t++)
        identity[t] = t;
    memset(dx, 0, (size_t)(a->ncols * e.xs) * sizeof *dx);
    ops->gather_heads_backward_x(cc, at, identity, HEADS, e.d, w_all, dy_all, dx, e.xs);
    expect_caught("gather_heads_backward_x: a wrong perm is caught", 0.3, a->ncols * e.xs, e.x,
                  dx, gather_loss, &e, -1);
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
    ops->edge_scores(cc, e->a, e->rb, e->re, HEADS, e->src, e->ss, e->dst, e->ds, e->z);
    ops->leaky_relu_forward(cc, e->ne * HEADS, SLOPE, e->z, g->zl);
    ops->edge_softmax(cc, e->a, e->rb, e->re, HEADS, g->zl, e->alpha);
    ops->gather_heads(cc, e->a, e->rb, e->re, HEADS, e->d, e->alpha, e->x, e->xs, e->y);
}

static double gat_loss(const float *unused, void *ctx)
{
    (void)unused;
    gat_check *g = ctx;
    gat_forward(g);
    return dot_r(g->e.y, g->e.r, (g->e.re - g->e.rb) * HEADS * g->e.d);
}

static void check_attention_head(void)
{
    bv_csr *a = random_graph(14, 4, 8, false);
    int64_t *perm = NULL;
    bv_csr *at = bv_csr_transpose_perm(a, &perm);
    gat_check g = {.e = edge_setup(a, 1, 13)};
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
        ops->edge_scores(cc, a, e->rb, e->re, HEADS, e->src, e->ss, e->dst, e->ds, e->z);
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
    ops->gather_heads_backward_w(cc, a, e->rb, e->re, HEADS, e->d, r, e->x, e->xs, dalpha);
    ops->edge_softmax_backward(cc, a, e->rb, e->re, HEADS, e->alpha, dalpha, dz);
    ops->leaky_relu_backward(cc, n_e, SLOPE, e->z, dz, dz);
    ops->edge_scores_backward(cc, a, e->rb, e->re, HEADS, dz, dsrc, e->ss, ddst, e->ds, false);
    memcpy(alpha_all + e->base * HEADS, e->alpha, (size_t)n_e * sizeof(float));
    memcpy(dy_all + e->rb * width, r, (size_t)(rows * width) * sizeof(float));
    ops->gather_heads_backward_x(cc, at, perm, HEADS, e->d, alpha_all, dy_all, dx, e->xs);

    expect_pass("GAT head (chained) dsrc", PASS, a->ncols * e->ss, e->src, dsrc, gat_loss, &g);
    expect_pass("GAT head (chained) ddst", PASS, rows * e->ds, e->dst, ddst, gat_loss, &g);
    expect_pass("GAT head (chained) dx", PASS, a->ncols * e->xs, e->x, dx, gat_loss, &g);

    /* a perturbed analytic gradient must fail, at the element perturbed */
    int64_t worst = 0;
    for (int64_t i = 0; i < a->ncols * e->ss; i++)
        if (fabsf(dsrc[i]) > fabsf(dsrc[worst]))
            worst = i;
    dsrc[worst] *= 1.5f;
    expect_caught("GAT head: a perturbed dsrc is caught where it is", 0.15, a->ncols * e->ss,
                  e->src, dsrc, gat_loss, &g, worst);

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
}

/* ---- transformer kernels ------------------------------------------------------------- */

typedef struct ln_check {
    int64_t rows, cols;
    float *x, *g, *b;
    const float *w;
    float *y, *mean, *rstd;
} ln_check;

static double ln_loss(const float *unused, void *ctx)
{
    (void)unused;
    ln_check *t = ctx;
    ops->layernorm_forward(cc, t->rows, t->cols, 1e-5f, t->x, t->g, t->b, t->y, t->mean,
                           t->rstd);
    return dot_r(t->y, t->w, t->rows * t->cols);
}

/* accumulate: dx starts at random values that are then subtracted; otherwise at garbage
 * the kernel must overwrite. dgamma and dbeta always accumulate, from zero here. */
static void check_layernorm_case(bool accumulate)
{
    ln_check t = {.rows = 7, .cols = 24};
    int64_t n = t.rows * t.cols;
    t.x = random_floats(n, -2, 2);
    t.g = random_floats(t.cols, 0.5f, 1.5f);
    t.b = random_floats(t.cols, -0.5f, 0.5f);
    float *w = random_floats(n, -1, 1);
    t.w = w;
    t.y = zeros(n);
    t.mean = zeros(t.rows);
    t.rstd = zeros(t.rows);
    ln_loss(NULL, &t);
    float *dx = random_floats(n, accumulate ? -1.0f : 50.0f, accumulate ? 1.0f : 60.0f);
    float *dx0 = malloc((size_t)n * sizeof *dx0);
    if (!dx0)
        abort();
    memcpy(dx0, dx, (size_t)n * sizeof *dx);
    float *dg = zeros(t.cols), *db = zeros(t.cols);
    ops->layernorm_backward(cc, t.rows, t.cols, t.x, t.g, t.mean, t.rstd, w, dx, accumulate, dg,
                            db);
    if (accumulate)
        for (int64_t i = 0; i < n; i++)
            dx[i] -= dx0[i];
    expect_pass(accumulate ? "layernorm_backward dx (accumulate)" : "layernorm_backward dx",
                PASS_TRANSFORMER, n, t.x, dx, ln_loss, &t);
    if (!accumulate) {
        expect_pass("layernorm_backward dgamma", PASS_TRANSFORMER, t.cols, t.g, dg, ln_loss, &t);
        expect_pass("layernorm_backward dbeta", PASS_TRANSFORMER, t.cols, t.b, db, ln_loss, &t);
    }
    free(dx);
    free(dx0);
    free(dg);
    free(db);
    free(t.x);
    free(t.g);
    free(t.b);
    free(w);
    free(t.y);
    free(t.mean);
    free(t.rstd);
}

static void check_layernorm(void)
{
    check_layernorm_case(false);
    check_layernorm_case(true);
}

typedef struct attn_check {
    int64_t batch, seq, hd;
    int heads;
    float *qkv, *att, *out;
    const float *w;
} attn_check;

static double attn_loss(const float *unused, void *ctx)
{
    (void)unused;
    attn_check *t = ctx;
    ops->attention_forward(cc, t->batch, t->seq, t->heads, t->hd, t->qkv, t->att, t->out);
    return dot_r(t->out, t->w, t->batch * t->seq * t->heads * t->hd);
}

static void check_attention(void)
{
    attn_check t = {.batch = 2, .seq = 5, .hd = 4, .heads = 2};
    int64_t c = t.heads * t.hd, tokens = t.batch * t.seq, att = t.batch * t.heads * t.seq * t.seq;
    t.qkv = random_floats(tokens * 3 * c, -1, 1);
    t.att = zeros(att);
    t.out = zeros(tokens * c);
    float *w = random_floats(tokens * c, -1, 1);
    t.w = w;
    attn_loss(NULL, &t);
    float *scratch = zeros(att), *dqkv = random_floats(tokens * 3 * c, 5, 6);
    ops->attention_backward(cc, t.batch, t.seq, t.heads, t.hd, t.qkv, t.att, w, scratch, dqkv);
    expect_pass("attention_backward dqkv", PASS_TRANSFORMER, tokens * 3 * c, t.qkv, dqkv,
                attn_loss, &t);
    free(scratch);
    free(dqkv);
    free(t.qkv);
    free(t.att);
    free(t.out);
    free(w);
}

typedef struct emb_check {
    int64_t batch, seq, dim;
    const int32_t *tok;
    float *wte, *wpe, *out;
    const float *w;
} emb_check;

static double emb_loss(const float *unused, void *ctx)
{
    (void)unused;
    emb_check *t = ctx;
    ops->embedding_forward(cc, t->batch, t->seq, t->dim, t->tok, t->wte, t->wpe, t->out);
    return dot_r(t->out, t->w, t->batch * t->seq * t->dim);
}

static void check_embedding(void)
{
    emb_check t = {.batch = 3, .seq = 4, .dim = 40};
    int64_t vocab = 5, tokens = t.batch * t.seq;
    int32_t *tok = malloc((size_t)tokens * sizeof *tok);
    if (!tok)
        abort();
    for (int64_t i = 0; i < tokens; i++) /* every token repeats */
        tok[i] = (int32_t)(i * 7 % vocab);
    t.tok = tok;
    t.wte = random_floats(vocab * t.dim, -1, 1);
    t.wpe = random_floats(t.seq * t.dim, -1, 1);
    t.out = zeros(tokens * t.dim);
    float *w = random_floats(tokens * t.dim, -1, 1);
    t.w = w;
    float *dwte = zeros(vocab * t.dim), *dwpe = zeros(t.seq * t.dim);
    ops->embedding_backward(cc, t.batch, t.seq, t.dim, tok, w, dwte, dwpe);
    expect_pass("embedding_backward dwte (repeated tokens)", PASS_TRANSFORMER, vocab * t.dim,
                t.wte, dwte, emb_loss, &t);
    expect_pass("embedding_backward dwpe", PASS_TRANSFORMER, t.seq * t.dim, t.wpe, dwpe,
                emb_loss, &t);
    free(dwte);
    free(dwpe);
    free(tok);
    free(t.wte);
    free(t.wpe);
    free(t.out);
    free(w);
}

/* ---- guarded runs: a crash or a hang fails one group of checks, not the run ------------ */

static sigjmp_buf guard_jmp;
static volatile sig_atomic_t guard_active, guard_signal;

/* Outside the checks (the destroy at the end is skipped after a crash), a signal means the
 * test cannot go on: say so with write (async-signal-safe) and end. */
static void on_fatal_signal(int sig)
{
    if (guard_active) {
        guard_active = 0;
        guard_signal = sig;
        siglongjmp(guard_jmp, 1);
    }
    static const char msg[] = "\ntest_gradcheck_cuda: stopped: a signal outside the checks\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof msg - 1);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static bool run_guarded(void (*body)(void), unsigned timeout)
{
    if (sigsetjmp(guard_jmp, 1)) {
        alarm(0);
        return false;
    }
    guard_signal = 0;
    guard_active = 1;
    alarm(timeout);
    body();
    alarm(0);
    guard_active = 0;
    return true;
}

static const char *signal_words(int sig)
{
    switch (sig) {
    case SIGSEGV: return "crashed (SIGSEGV)";
    case SIGBUS: return "crashed (SIGBUS)";
    case SIGFPE: return "crashed (SIGFPE)";
    case SIGILL: return "crashed (SIGILL)";
    case SIGABRT: return "aborted (SIGABRT; the plugin's message is on stderr)";
    case SIGALRM: return "timed out";
    }
    return "stopped by a signal";
}

static const char *volatile current_group;

static void at_exit_report(void)
{
    if (current_group)
        printf("\nexit() was called during the %s checks: the run ended early\n",
               current_group);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const bv_plugin *pl = bv_compute_cuda_plugin();
    char why[BV_ERROR_MSG_MAX + 64] = "";
    if (pl->probe && !pl->probe(why, sizeof why)) {
        printf("SKIP: %s\n", why[0] ? why : "the cuda plugin's probe found no usable GPU");
        return 77;
    }
    unsigned timeout = DEFAULT_TIMEOUT;
    const char *t = getenv("BV_TEST_CASE_TIMEOUT");
    if (t && atoi(t) > 0)
        timeout = (unsigned)atoi(t);

    ops = pl->ops;
    bv_opts o;
    bv_error err = {0};
    if (bv_opts_defaults(&o, "compute", pl->options, &err) != BV_OK ||
        (pl->options && bv_schema_find(pl->options, "tf32") &&
         bv_opts_set(&o, "tf32", "false", &err) != BV_OK)) {
        printf("FAIL: the cuda plugin's options: %s\n", err.msg);
        return 1;
    }
    cc = ops->create(&o, &err);
    bv_opts_free(&o);
    if (!cc) {
        printf("FAIL: the cuda probe found a GPU, but create failed: %s\n", err.msg);
        return 1;
    }

    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    atexit(at_exit_report);

    static const struct {
        const char *name;
        void (*fn)(void);
    } groups[] = {
        {"activation", check_activations},
        {"softmax_xent", check_softmax_xent},
        {"spmm", check_spmm},
        {"gemm", check_gemm},
        {"gemm_batched", check_gemm_batched},
        {"bias", check_bias},
        {"spmm_dropout", check_sparse_first_layer},
        {"edge_scores", check_edge_scores},
        {"edge_softmax", check_edge_softmax},
        {"gather_heads", check_gather_heads},
        {"GAT head", check_attention_head},
        {"layernorm", check_layernorm},
        {"attention", check_attention},
        {"embedding", check_embedding},
    };
    printf("%-52s %10s %10s %s\n", "check (through the cuda ops)", "max_error", "threshold",
           "result");
    /* A crash that left a lock held (malloc's, after a heap overrun) makes every later group
     * hang: after two timeouts in a row the rest are reported as not run. */
    bool crashed = false;
    int timeouts_in_a_row = 0;
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        char what[96];
        if (timeouts_in_a_row >= 2) {
            snprintf(what, sizeof what, "%s checks: not run (the ones before hung)",
                     groups[i].name);
            report(what, NAN, "-", false, NULL);
            continue;
        }
        current_group = groups[i].name;
        if (run_guarded(groups[i].fn, timeout))
            timeouts_in_a_row = 0;
        else {
            crashed = true;
            snprintf(what, sizeof what, "%s checks: %s", groups[i].name,
                     signal_words(guard_signal));
            report(what, NAN, "-", false, NULL);
            if (guard_signal == SIGALRM) {
                timeout = timeout > 15 ? 15 : timeout;
                timeouts_in_a_row++;
            }
        }
        current_group = NULL;
    }
    if (!crashed) /* after a crash the device may be in an error state: just the report */
        ops->destroy(cc);

    if (n_failed)
        printf("\nfailed:\n%s", failed_list);
    printf("\n%d checks, %d failed\n", n_checks, n_failed);
    fflush(stdout);
    if (crashed)
        _exit(1);
    return n_failed ? 1 : 0;
}
