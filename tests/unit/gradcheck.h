/* Finite-difference gradient checks for tests: compares an analytic gradient with central
 * differences of a scalar function, computed in double around float inputs. Not part of
 * libbivouac; a test compiles gradcheck.c in (tests/unit: #include "gradcheck.c"; a plugin
 * test: add tests/unit/gradcheck.c to its executable's sources). */
#ifndef BV_TEST_GRADCHECK_H
#define BV_TEST_GRADCHECK_H

#include <stdint.h>

/* The function under test: a scalar of the n_in floats at x (e.g. sum(out * R) for a
 * fixed random R). Accumulate it in double: a float sum of many terms carries noise of
 * ~ulp(|f|), which the difference divides by 2h. It must be deterministic. */
typedef double (*bv_gradcheck_fn)(const float *x, void *ctx);

/* Where the check was worst, for a failure message. */
typedef struct bv_gradcheck_report {
    double max_rel_err;   /* the return value */
    int64_t worst_index;  /* element of x with the largest error (-1: none checked) */
    double worst_analytic;
    double worst_numeric;
    double max_abs_err;   /* max |analytic - numeric| over all elements */
    int64_t checked;      /* elements compared */
} bv_gradcheck_report;

/* For each i in [0, n_in): x[i] is moved to the floats nearest x[i] +- h with
 *     h = eps * max(1, |x[i]|),
 * f is evaluated at both, and x[i] is put back bit for bit. The numeric derivative is
 *     n = (f(x+) - f(x-)) / (x+ - x-)
 * with the step taken between the two floats actually used (in double), so rounding of
 * x[i] +- h to float costs nothing. Each element's error is
 *     |a - n| / max(err_floor, |a| + |n|)      (a = analytic_dx[i])
 * -- relative where the gradient is large, |a - n| / err_floor where both are tiny, so
 * that float noise in f around a zero gradient does not count as an error. err_floor
 * must be > 0. Returns the largest error (0 when n_in <= 0; a NaN counts as infinite);
 * report (may be NULL) says where.
 *
 * Choosing eps and err_floor: outputs computed in float carry rounding noise (~6e-8 of
 * each output's size) that the difference divides by 2h, while the truncation error
 * grows as h^2 |f'''|. For float kernels on order-1 data, eps = 1e-2 keeps both near
 * 1e-5 (eps = 1e-3 suits an f computed in double); keep inputs more than h from kinks
 * (ReLU at 0). Set err_floor near the smallest gradient that matters (1e-2 for gradients
 * of order 0.1 to 1). A correct gradient then scores ~1e-4, 1e-2 is a safe pass
 * threshold, and a wrong one scores well above 0.1. */
double bv_gradcheck(int64_t n_in, float *x, const float *analytic_dx, bv_gradcheck_fn f,
                    void *ctx, double eps, double err_floor, bv_gradcheck_report *report);

/* Formats a report as "max error E at element I: analytic A, numeric N (K checked)" into
 * buf (for fail_msg). Returns buf. */
const char *bv_gradcheck_describe(const bv_gradcheck_report *r, char *buf, int size);

#endif
