/* Central finite differences against an analytic gradient (gradcheck.h). */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>

double bv_gradcheck(int64_t n_in, float *x, const float *analytic_dx, bv_gradcheck_fn f,
                    void *ctx, double eps, double err_floor, bv_gradcheck_report *report)
{
    bv_gradcheck_report r = {.worst_index = -1};
    for (int64_t i = 0; i < n_in; i++) {
        const float x0 = x[i];
        double h = eps * fmax(1.0, fabs((double)x0));
        float plus = (float)((double)x0 + h), minus = (float)((double)x0 - h);
        x[i] = plus;
        double f_plus = f(x, ctx);
        x[i] = minus;
        double f_minus = f(x, ctx);
        x[i] = x0;
        double numeric = (f_plus - f_minus) / ((double)plus - (double)minus);
        double analytic = analytic_dx[i];
        double abs_err = fabs(analytic - numeric);
        double err = abs_err / fmax(err_floor, fabs(analytic) + fabs(numeric));
        if (isnan(err))
            err = INFINITY; /* a NaN anywhere is a failure, not a silent pass */
        if (abs_err > r.max_abs_err || isnan(abs_err))
            r.max_abs_err = isnan(abs_err) ? INFINITY : abs_err;
        if (r.worst_index < 0 || err > r.max_rel_err) {
            r.max_rel_err = err;
            r.worst_index = i;
            r.worst_analytic = analytic;
            r.worst_numeric = numeric;
        }
        r.checked++;
    }
    if (report)
        *report = r;
    return r.max_rel_err;
}

const char *bv_gradcheck_describe(const bv_gradcheck_report *r, char *buf, int size)
{
    snprintf(buf, (size_t)size, "max error %.3g at element %lld: analytic %.9g, numeric %.9g "
             "(%lld checked, max abs error %.3g)", r->max_rel_err, (long long)r->worst_index,
             r->worst_analytic, r->worst_numeric, (long long)r->checked, r->max_abs_err);
    return buf;
}
