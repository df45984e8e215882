/* Helpers shared by the kernel and model unit tests (header only; include it after
 * <cmocka.h>): deterministic random data (the generator of test_rng.h, seeded by the
 * including file's TEST_RNG_SEED) and option setting for a plugin instance. */
#ifndef BV_TEST_SUPPORT_H
#define BV_TEST_SUPPORT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/compute.h"
#include "bivouac/options.h"
#include "bivouac/plugin.h"

#include "test_rng.h"

static inline float *random_floats(int64_t n, float lo, float hi)
{
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = rng_float(lo, hi);
    return v;
}

static inline float *zeros(int64_t n)
{
    float *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    assert_non_null(v);
    return v;
}

/* Sets option `name` (an int or a float) of o; a missing option fails the test. */
static inline void set_opt(bv_opts *o, const char *name, double v)
{
    for (size_t i = 0; i < o->count; i++)
        if (strcmp(o->values[i].decl->name, name) == 0) {
            if (o->values[i].decl->type == BV_OPT_INT)
                o->values[i].v.i = (int64_t)v;
            else
                o->values[i].v.f = v;
            return;
        }
    fail_msg("no option %s", name);
}

const bv_plugin *bv_compute_cpu_plugin(void);

/* A CPU compute instance with the default options but `threads`. */
static inline bv_compute *make_cpu_compute(int threads)
{
    const bv_plugin *pl = bv_compute_cpu_plugin();
    const bv_compute_ops *ops = pl->ops;
    bv_opts o;
    bv_error err = {0};
    assert_int_equal(bv_opts_defaults(&o, "compute", pl->options, &err), BV_OK);
    set_opt(&o, "threads", threads);
    bv_compute *c = ops->create(&o, &err);
    bv_opts_free(&o);
    assert_non_null(c);
    return c;
}

#endif
