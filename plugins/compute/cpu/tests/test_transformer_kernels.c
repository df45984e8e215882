/* Unit tests of the CPU plugin's transformer kernels (ABI 1.2): forward against naive
 * loops, backward by central finite differences of L = sum(out * w) for a random w, and
 * the same bits for 1, 2 and 3 threads. */
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

#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#include "test_support.h"

const bv_plugin *bv_compute_cpu_plugin(void);

static const bv_compute_ops *ops(void)
{
    return bv_compute_cpu_plugin()->ops;
}

static double dot(const float *a, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* Checks analytic[i] against (L(x + h e_i) - L(x - h e_i)) / 2h for every i (n small). */
typedef double (*loss_fn)(void *ctx);

static void gradcheck(const char *what, float *x, int64_t n, const float *analytic,
                      loss_fn f, void *ctx)
{
    const float h = 1e-2f;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + h;
        double lp = f(ctx);
        x[i] = keep - h;
        double lm = f(ctx);
        x[i] = keep;
        double num = (lp - lm) / (2.0 * h);
        double err = fabs(num - analytic[i]) / (1e-2 + fabs(num) + fabs(analytic[i]));
        if (err > worst)
            worst = err;
        if (err > 2e-2)
            fail_msg("%s: d/dx[%lld]: analytic %.6g, numeric %.6g", what, (long long)i,
                     (double)analytic[i], num);
    }
    print_message("%s: worst relative error %.2e over %lld inputs\n", what, worst,
                  (long long)n);
}

/* ---- layernorm ------------------------------------------------------------------------ */

typedef struct ln_case {
    bv_compute *c;
    int64_t rows, cols;
    float *x, *g, *b, *w, *y, *mean, *rstd;
} ln_case;

static double ln_loss(void *arg)
{
    ln_case *t = arg;
    ops()->layernorm_forward(t->c, t->rows, t->cols, 1e-5f, t->x, t->g, t->b, t->y, t->mean,
                             t->rstd);
    return dot(t->y, t->w, t->rows * t->cols);
}

static void test_layernorm_matches_naive_and_gradcheck(void **state)
{
    (void)state;
    ln_case t = {.c = make_cpu_compute(2), .rows = 7, .cols = 24};
    int64_t n = t.rows * t.cols;
    t.x = random_floats(n, -2, 2);
    t.g = random_floats(t.cols, 0.5f, 1.5f);
    t.b = random_floats(t.cols, -0.5f, 0.5f);
    t.w = random_floats(n, -1, 1);
    t.y = zeros(n);
    t.mean = zeros(t.rows);
    t.rstd = zeros(t.rows);
    ln_loss(&t);
    for (int64_t r = 0; r < t.rows; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < t.cols; j++)
            m += t.x[r * t.cols + j];
        m /= (double)t.cols;
        for (int64_t j = 0; j < t.cols; j++)
            v += (t.x[r * t.cols + j] - m) * (t.x[r * t.cols + j] - m);
        v /= (double)t.cols;
        for (int64_t j = 0; j < t.cols; j++) {
            double want = (t.x[r * t.cols + j] - m) / sqrt(v + 1e-5) * t.g[j] + t.b[j];
            assert_true(fabs(t.y[r * t.cols + j] - want) < 1e-4);
        }
    }
    float *dx = random_floats(n, -1, 1), *dx0 = malloc((size_t)n * sizeof *dx0);
    memcpy(dx0, dx, (size_t)n * sizeof *dx);
    float *dg = zeros(t.cols), *db = zeros(t.cols);
    ops()->layernorm_backward(t.c, t.rows, t.cols, t.x, t.g, t.mean, t.rstd, t.w, dx, true,
                              dg, db);
    for (int64_t i = 0; i < n; i++)
        dx[i] -= dx0[i]; /* accumulate mode added to what was there */
    gradcheck("layernorm dx", t.x, n, dx, ln_loss, &t);
    gradcheck("layernorm dgamma", t.g, t.cols, dg, ln_loss, &t);
    gradcheck("layernorm dbeta", t.b, t.cols, db, ln_loss, &t);
    free(dx);
    free(dx0);
    free(dg);
    free(db);
    free(t.x);
    free(t.g);
    free(t.b);
    free(t.w);
    free(t.y);
    free(t.mean);
    free(t.rstd);
    ops()->destroy(t.c);
}

/* ---- gelu ----------------------------------------------------------------------------- */

/* The vectorised GELU against the exact one in double precision on a fine grid (every
 * lane position and the scalar tail included), from -12 to 12: forward within 2.5e-7
 * (relative above |x| = 1), backward within 4e-7, and exact where it must be. */
static void test_gelu_accuracy_on_a_grid(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(2);
    const int64_t n = 240003; /* not a multiple of 8: the tail path runs too */
    float *x = zeros(n), *y = zeros(n), *ones = zeros(n), *dx = zeros(n);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(-12.0 + 24.0 * (double)i / (double)(n - 1));
        ones[i] = 1.0f;
    }
    ops()->gelu_forward(c, n, x, y);
    ops()->gelu_backward(c, n, x, ones, dx);
    double worst_y = 0, worst_dx = 0;
    for (int64_t i = 0; i < n; i++) {
        double xi = x[i], cdf = 0.5 * (1 + erf(xi / sqrt(2.0)));
        double pdf = exp(-0.5 * xi * xi) / sqrt(2 * M_PI);
        worst_y = fmax(worst_y, fabs(y[i] - xi * cdf) / fmax(1.0, fabs(xi)));
        worst_dx = fmax(worst_dx, fabs(dx[i] - (cdf + xi * pdf)));
    }
    print_message("gelu: worst forward error %.3g (relative above |x| = 1), backward %.3g\n",
                  worst_y, worst_dx);
    assert_true(worst_y < 2.5e-7);
    assert_true(worst_dx < 4e-7);
    float edge[3] = {0.0f, 12.0f, -12.0f}, out[3], g[3];
    ops()->gelu_forward(c, 3, edge, out);
    ops()->gelu_backward(c, 3, edge, ones, g);
    assert_true(out[0] == 0.0f && out[1] == 12.0f);
    assert_true(fabsf(out[2]) < 1e-30f);
    assert_true(g[0] == 0.5f && g[1] == 1.0f && fabsf(g[2]) < 1e-30f);
    /* x^2 overflows to infinity: still x (or zero) and slope 1 (or zero), never NaN */
    float big[4] = {1e20f, -1e20f, 3e38f, INFINITY}, bout[4], bg[4];
    ops()->gelu_forward(c, 4, big, bout);
    ops()->gelu_backward(c, 3, big, ones, bg);
    assert_true(bout[0] == 1e20f && fabsf(bout[1]) < 1e-30f && bout[2] == 3e38f &&
                bout[3] == INFINITY);
    assert_true(bg[0] == 1.0f && fabsf(bg[1]) < 1e-30f && bg[2] == 1.0f);
    free(x);
    free(y);
    free(ones);
    free(dx);
    ops()->destroy(c);
}

typedef struct gelu_case {
    bv_compute *c;
    int64_t n;
    float *x, *w, *y;
} gelu_case;

static double gelu_loss(void *arg)
{
    gelu_case *t = arg;
    ops()->gelu_forward(t->c, t->n, t->x, t->y);
    return dot(t->y, t->w, t->n);
}

static void test_gelu_matches_erf_form_and_gradcheck(void **state)
{
    (void)state;
    gelu_case t = {.c = make_cpu_compute(2), .n = 50};
    t.x = random_floats(t.n, -4, 4);
    t.w = random_floats(t.n, -1, 1);
    t.y = zeros(t.n);
    gelu_loss(&t);
    for (int64_t i = 0; i < t.n; i++)
        assert_true(fabs(t.y[i] - 0.5 * t.x[i] * (1 + erf(t.x[i] / sqrt(2.0)))) < 1e-5);
    float *dx = zeros(t.n);
    ops()->gelu_backward(t.c, t.n, t.x, t.w, dx);
    gradcheck("gelu", t.x, t.n, dx, gelu_loss, &t);
    free(dx);
    free(t.x);
    free(t.w);
    free(t.y);
    ops()->destroy(t.c);
}

/* ---- attention ------------------------------------------------------------------------ */

typedef struct attn_case {
    bv_compute *c;
    int64_t batch, seq, hd;
    int heads;
    float *qkv, *att, *out, *w;
} attn_case;

static double attn_loss(void *arg)
{
    attn_case *t = arg;
    ops()->attention_forward(t->c, t->batch, t->seq, t->heads, t->hd, t->qkv, t->att, t->out);
    return dot(t->out, t->w, t->batch * t->seq * t->heads * t->hd);
}

static void naive_attention(const attn_case *t, float *out)
{
    int64_t C = t->heads * t->hd, S = t->seq;
    for (int64_t b = 0; b < t->batch; b++)
        for (int h = 0; h < t->heads; h++)
            for (int64_t i = 0; i < S; i++) {
                double sc[64], mx = -1e30, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < t->hd; d++)
                        s += (double)t->qkv[(b * S + i) * 3 * C + h * t->hd + d] *
                             t->qkv[(b * S + j) * 3 * C + C + h * t->hd + d];
                    sc[j] = s / sqrt((double)t->hd);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int64_t j = 0; j <= i; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int64_t d = 0; d < t->hd; d++) {
                    double o = 0;
                    for (int64_t j = 0; j <= i; j++)
                        o += sc[j] / sum * t->qkv[(b * S + j) * 3 * C + 2 * C + h * t->hd + d];
                    out[(b * S + i) * C + h * t->hd + d] = (float)o;
                }
            }
}

static void test_attention_is_causal_matches_naive_and_gradcheck(void **state)
{
    (void)state;
    attn_case t = {.c = make_cpu_compute(2), .batch = 2, .seq = 5, .hd = 4, .heads = 2};
    int64_t C = t.heads * t.hd, T = t.batch * t.seq;
    t.qkv = random_floats(T * 3 * C, -1, 1);
    t.att = zeros(t.batch * t.heads * t.seq * t.seq);
    t.out = zeros(T * C);
    t.w = random_floats(T * C, -1, 1);
    attn_loss(&t);
    float *want = zeros(T * C);
    naive_attention(&t, want);
    for (int64_t i = 0; i < T * C; i++)
        assert_true(fabs(t.out[i] - want[i]) < 1e-5);
    for (int64_t u = 0; u < t.batch * t.heads; u++)
        for (int64_t i = 0; i < t.seq; i++)
            for (int64_t j = i + 1; j < t.seq; j++)
                assert_true(t.att[(u * t.seq + i) * t.seq + j] == 0.0f);
    float *scratch = zeros(t.batch * t.heads * t.seq * t.seq), *dqkv = zeros(T * 3 * C);
    ops()->attention_backward(t.c, t.batch, t.seq, t.heads, t.hd, t.qkv, t.att, t.w, scratch,
                              dqkv);
    gradcheck("attention dqkv", t.qkv, T * 3 * C, dqkv, attn_loss, &t);
    free(scratch);
    free(dqkv);
    free(want);
    free(t.qkv);
    free(t.att);
    free(t.out);
    free(t.w);
    ops()->destroy(t.c);
}

/* ---- embeddings and batched gemm ------------------------------------------------------- */

typedef struct emb_case {
    bv_compute *c;
    int64_t batch, seq, dim;
    int32_t *tok;
    float *wte, *wpe, *out, *w;
} emb_case;

static double emb_loss(void *arg)
{
    emb_case *t = arg;
    ops()->embedding_forward(t->c, t->batch, t->seq, t->dim, t->tok, t->wte, t->wpe, t->out);
    return dot(t->out, t->w, t->batch * t->seq * t->dim);
}

static void test_embedding_gradcheck_with_repeated_tokens(void **state)
{
    (void)state;
    emb_case t = {.c = make_cpu_compute(3), .batch = 3, .seq = 4, .dim = 40};
    int64_t V = 5, T = t.batch * t.seq;
    t.tok = malloc((size_t)T * sizeof *t.tok);
    for (int64_t i = 0; i < T; i++)
        t.tok[i] = (int32_t)(i * 7 % V);
    t.wte = random_floats(V * t.dim, -1, 1);
    t.wpe = random_floats(t.seq * t.dim, -1, 1);
    t.out = zeros(T * t.dim);
    t.w = random_floats(T * t.dim, -1, 1);
    emb_loss(&t);
    float *dwte = zeros(V * t.dim), *dwpe = zeros(t.seq * t.dim);
    ops()->embedding_backward(t.c, t.batch, t.seq, t.dim, t.tok, t.w, dwte, dwpe);
    gradcheck("embedding dwte", t.wte, V * t.dim, dwte, emb_loss, &t);
    gradcheck("embedding dwpe", t.wpe, t.seq * t.dim, dwpe, emb_loss, &t);
    free(dwte);
    free(dwpe);
    free(t.tok);
    free(t.wte);
    free(t.wpe);
    free(t.out);
    free(t.w);
    ops()->destroy(t.c);
}

static void test_gemm_batched_matches_naive(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(2);
    int64_t cnt = 5, m = 3, n = 4, k = 6;
    float *a = random_floats(cnt * k * m, -1, 1), *b = random_floats(cnt * n * k, -1, 1);
    float *cm = random_floats(cnt * m * n, -1, 1), *c0 = malloc((size_t)(cnt * m * n) * sizeof *c0);
    memcpy(c0, cm, (size_t)(cnt * m * n) * sizeof *c0);
    /* C_i = 2 A_i^T B_i^T + 0.5 C_i with A_i stored k x m and B_i stored n x k */
    ops()->gemm_batched(c, cnt, true, true, m, n, k, 2.0f, a, m, k * m, b, k, n * k, 0.5f, cm,
                        n, m * n);
    for (int64_t i = 0; i < cnt; i++)
        for (int64_t r = 0; r < m; r++)
            for (int64_t q = 0; q < n; q++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++)
                    s += (double)a[i * k * m + p * m + r] * b[i * n * k + q * k + p];
                double want = 2 * s + 0.5 * c0[i * m * n + r * n + q];
                assert_true(fabs(cm[i * m * n + r * n + q] - want) < 1e-4);
            }
    free(a);
    free(b);
    free(cm);
    free(c0);
    ops()->destroy(c);
}

/* ---- determinism ---------------------------------------------------------------------- */

static void run_all(int threads, float *res, int64_t *len)
{
    rng_state = 12345;
    bv_compute *c = make_cpu_compute(threads);
    int64_t B = 3, S = 16, H = 4, D = 8, C = H * D, T = B * S;
    float *x = random_floats(T * C, -1, 1), *g = random_floats(C, 0.5f, 1.5f), *qkv = random_floats(T * 3 * C, -1, 1);
    float *dy = random_floats(T * C, -1, 1);
    int64_t o = 0;
    float *mean = zeros(T), *rstd = zeros(T);
    ops()->layernorm_forward(c, T, C, 1e-5f, x, g, NULL, res + o, mean, rstd);
    o += T * C;
    ops()->layernorm_backward(c, T, C, x, g, mean, rstd, dy, res + o, false, res + o + T * C,
                              NULL);
    o += T * C + C;
    float *att = zeros(B * H * S * S), *scr = zeros(B * H * S * S);
    ops()->attention_forward(c, B, S, (int)H, D, qkv, att, res + o);
    o += T * C;
    ops()->attention_backward(c, B, S, (int)H, D, qkv, att, dy, scr, res + o);
    o += T * 3 * C;
    ops()->gelu_forward(c, T * C, x, res + o);
    o += T * C;
    *len = o;
    free(x);
    free(g);
    free(qkv);
    free(dy);
    free(mean);
    free(rstd);
    free(att);
    free(scr);
    ops()->destroy(c);
}

static void test_same_bits_for_any_thread_count(void **state)
{
    (void)state;
    int64_t cap = 1 << 16, n1, n2, n3;
    float *r1 = zeros(cap), *r2 = zeros(cap), *r3 = zeros(cap);
    run_all(1, r1, &n1);
    run_all(2, r2, &n2);
    run_all(3, r3, &n3);
    assert_true(n1 <= cap);
    assert_memory_equal(r1, r2, (size_t)n1 * sizeof *r1);
    assert_memory_equal(r1, r3, (size_t)n1 * sizeof *r1);
    free(r1);
    free(r2);
    free(r3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_matches_naive_and_gradcheck),
        cmocka_unit_test(test_gelu_matches_erf_form_and_gradcheck),
        cmocka_unit_test(test_gelu_accuracy_on_a_grid),
        cmocka_unit_test(test_attention_is_causal_matches_naive_and_gradcheck),
        cmocka_unit_test(test_embedding_gradcheck_with_repeated_tokens),
        cmocka_unit_test(test_gemm_batched_matches_naive),
        cmocka_unit_test(test_same_bits_for_any_thread_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
