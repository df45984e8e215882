/* Tests of the finite-difference gradient checker (gradcheck.h) that the kernel and model
 * gradient tests rely on: it passes true gradients, flags wrong ones at the right element,
 * restores its input, and turns NaN into failure. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gradcheck.c" /* a test helper compiled in, not part of libbivouac */

/* f(x) = sum_i c_i x_i^3 + sin(x_i), computed in double: no float noise. */
static double cubic_sin(const float *x, void *ctx)
{
    const int64_t *n = ctx;
    double s = 0.0;
    for (int64_t i = 0; i < *n; i++) {
        double c = 0.5 + 0.1 * (double)i, v = x[i];
        s += c * v * v * v + sin(v);
    }
    return s;
}

static void cubic_sin_grad(int64_t n, const float *x, float *g)
{
    for (int64_t i = 0; i < n; i++) {
        double c = 0.5 + 0.1 * (double)i, v = x[i];
        g[i] = (float)(3.0 * c * v * v + cos(v));
    }
}

static void fill(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(0.3 + 0.7 * sin(1.7 * (double)i + 0.2));
}

static void test_true_gradient_of_smooth_function_passes_tightly(void **state)
{
    (void)state;
    int64_t n = 40;
    float x[40], g[40];
    fill(x, n);
    cubic_sin_grad(n, x, g);
    bv_gradcheck_report r;
    double err = bv_gradcheck(n, x, g, cubic_sin, &n, 1e-3, 1e-3, &r);
    char msg[256];
    if (!(err < 1e-5))
        fail_msg("%s", bv_gradcheck_describe(&r, msg, sizeof msg));
    assert_int_equal(r.checked, n);
    assert_true(err == r.max_rel_err);
}

static void test_one_wrong_element_is_reported_large_and_where(void **state)
{
    (void)state;
    int64_t n = 40;
    float x[40], g[40];
    fill(x, n);
    cubic_sin_grad(n, x, g);
    g[17] *= 1.1f; /* 10% off: |a - n| / (|a| + |n|) = 0.1 / 2.1 */
    bv_gradcheck_report r;
    double err = bv_gradcheck(n, x, g, cubic_sin, &n, 1e-3, 1e-3, &r);
    assert_true(err > 0.04 && err < 0.06);
    assert_int_equal(r.worst_index, 17);
    assert_true(r.worst_analytic == g[17]);

    g[17] /= 1.1f;
    g[3] = -g[3]; /* a sign error scores 1, the maximum */
    err = bv_gradcheck(n, x, g, cubic_sin, &n, 1e-3, 1e-3, &r);
    assert_true(err > 0.99);
    assert_int_equal(r.worst_index, 3);
}

static void test_input_is_restored_bit_for_bit(void **state)
{
    (void)state;
    int64_t n = 6;
    float x[6] = {0.1f, -0.0f, 3.0e4f, -7.25f, 1e-30f, 0.3333333f};
    float before[6], g[6];
    memcpy(before, x, sizeof x);
    cubic_sin_grad(n, x, g);
    bv_gradcheck(n, x, g, cubic_sin, &n, 1e-3, 1e-3, NULL);
    assert_memory_equal(x, before, sizeof x);
}

/* The step scales with |x|, so large inputs are not differenced below float resolution. */
static double square_sum(const float *x, void *ctx)
{
    (void)ctx;
    return (double)x[0] * x[0] + (double)x[1] * x[1];
}

static void test_step_scales_with_large_inputs(void **state)
{
    (void)state;
    float x[2] = {12345.0f, -3.0e6f};
    float g[2] = {2 * 12345.0f, 2 * -3.0e6f};
    double err = bv_gradcheck(2, x, g, square_sum, NULL, 1e-3, 1e-3, NULL);
    assert_true(err < 1e-9); /* a quadratic's central difference is exact */
}

/* f as the kernel checks build it: float outputs (each rounded, as a kernel's are), summed
 * in double. That rounding noise must not fail a true gradient. (Summing in float instead
 * adds noise of ~ulp(|f|), which swamps the difference: accumulate losses in double.) */
static double float_products(const float *x, void *ctx)
{
    const int64_t *n = ctx;
    double s = 0.0;
    for (int64_t i = 0; i < *n; i++) {
        float out = x[i] * (float)(1.0 + 0.01 * (double)i) + 0.25f * x[(i + 1) % *n];
        s += (double)out * (double)(0.5f - (float)(i % 7) * 0.1f);
    }
    return s;
}

static void test_float_noise_stays_below_pass_threshold(void **state)
{
    (void)state;
    int64_t n = 500;
    float *x = malloc((size_t)n * sizeof *x), *g = malloc((size_t)n * sizeof *g);
    fill(x, n);
    for (int64_t i = 0; i < n; i++) /* d/dx_i: its own output and the previous one's */
        g[i] = (float)((1.0 + 0.01 * (double)i) * (double)(0.5f - (float)(i % 7) * 0.1f) +
                       0.25 * (double)(0.5f - (float)((i + n - 1) % n % 7) * 0.1f));
    bv_gradcheck_report r;
    double err = bv_gradcheck(n, x, g, float_products, &n, 1e-3, 1e-3, &r);
    char msg[256];
    if (!(err < 1e-2))
        fail_msg("%s", bv_gradcheck_describe(&r, msg, sizeof msg));
    free(x);
    free(g);
}

/* Where both gradients are ~0, the floor keeps noise from reading as a 100% error. */
static double constant_fn(const float *x, void *ctx)
{
    (void)x;
    (void)ctx;
    return 42.0;
}

static void test_zero_gradient_is_judged_against_the_floor_and_nan_fails(void **state)
{
    (void)state;
    float x[3] = {0.5f, -0.5f, 2.0f};
    float g[3] = {0.0f, 1e-7f, 0.0f};
    bv_gradcheck_report r;
    double err = bv_gradcheck(3, x, g, constant_fn, NULL, 1e-3, 1e-3, &r);
    assert_true(err <= 1.01e-4); /* 1e-7 / 1e-3 */
    assert_true(r.max_abs_err == 1e-7f);
    g[2] = NAN;
    err = bv_gradcheck(3, x, g, constant_fn, NULL, 1e-3, 1e-3, &r);
    assert_true(isinf(err));
    assert_int_equal(r.worst_index, 2);
    assert_true(bv_gradcheck(0, x, g, constant_fn, NULL, 1e-3, 1e-3, NULL) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_true_gradient_of_smooth_function_passes_tightly),
        cmocka_unit_test(test_one_wrong_element_is_reported_large_and_where),
        cmocka_unit_test(test_input_is_restored_bit_for_bit),
        cmocka_unit_test(test_step_scales_with_large_inputs),
        cmocka_unit_test(test_float_noise_stays_below_pass_threshold),
        cmocka_unit_test(test_zero_gradient_is_judged_against_the_floor_and_nan_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
