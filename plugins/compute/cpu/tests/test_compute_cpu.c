/* Unit tests of the CPU compute plugin: every kernel against a naive reference loop, and
 * the determinism promises (same bits for any thread count, any split of a dropout). */
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

#define TEST_RNG_SEED 88172645463325252ull
#include "test_support.h"

const bv_plugin *bv_compute_cpu_plugin(void);

static const bv_compute_ops *ops(void)
{
    return bv_compute_cpu_plugin()->ops;
}

static void assert_close(double got, double want, double rel, double abs_tol)
{
    double tol = abs_tol + rel * fabs(want);
    if (!(fabs(got - want) <= tol))
        fail_msg("got %.9g, want %.9g (tolerance %.3g)", got, want, tol);
}

/* ---- descriptor ---------------------------------------------------------------------- */

static void test_descriptor_names_the_plugin_and_its_options(void **state)
{
    (void)state;
    const bv_plugin *pl = bv_compute_cpu_plugin();
    assert_int_equal(pl->magic, BV_PLUGIN_MAGIC);
    assert_int_equal(pl->abi_major, BV_ABI_MAJOR);
    assert_int_equal(pl->struct_size, sizeof(bv_plugin));
    assert_int_equal(pl->kind, BV_KIND_COMPUTE);
    assert_string_equal(pl->name, "cpu");
    assert_int_equal(pl->ops_size, sizeof(bv_compute_ops));
    const bv_option *t = bv_schema_find(pl->options, "threads");
    assert_non_null(t);
    assert_int_equal(t->type, BV_OPT_INT);
    assert_string_equal(t->default_value, "0");
    assert_true(t->has_range);
    assert_true(t->min == 0 && t->max == 256);
    assert_non_null(t->doc);
    /* every kernel slot filled; ABI 1.0 has 15 slots and 1.1 adds 11 for GAT, ending with
     * gather_heads_backward_w (later minors append after it). The 1.10 memory slots are
     * optional, and NULL here: the cpu's memory is the host's. */
    const bv_compute_ops *o = pl->ops;
    void (*const *slot)(void) = (void (*const *)(void))o;
    assert_int_equal(offsetof(bv_compute_ops, gather_heads_backward_w) / sizeof *slot, 25);
    size_t kernels = offsetof(bv_compute_ops, mem_alloc) / sizeof *slot;
    assert_true(kernels >= 26);
    for (size_t i = 0; i < kernels; i++)
        assert_non_null(slot[i]);
    assert_null(o->mem_alloc);
    assert_null(o->mem_free);
}

static void test_threads_zero_means_every_core_and_n_means_n(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(0);
    assert_true(ops()->num_threads(c) >= 1);
    ops()->destroy(c);
    c = make_cpu_compute(3);
    assert_int_equal(ops()->num_threads(c), 3);
    ops()->destroy(c);
}

/* ---- gemm ---------------------------------------------------------------------------- */

/* op(A)[i][p] for A stored row-major with leading dimension lda. */
static double op_at(const float *a, int64_t lda, bool trans, int64_t i, int64_t p)
{
    return trans ? a[p * lda + i] : a[i * lda + p];
}

static void check_gemm(bv_compute *c, bool ta, bool tb)
{
    const int64_t m = 7, n = 5, k = 9;
    /* leading dims larger than the logical widths */
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 4;
    int64_t arows = ta ? k : m, brows = tb ? n : k;
    float *a = random_floats(arows * lda, -1, 1);
    float *b = random_floats(brows * ldb, -1, 1);
    float *cm = random_floats(m * ldc, -1, 1);
    float *c0 = malloc((size_t)(m * ldc) * sizeof *c0);
    memcpy(c0, cm, (size_t)(m * ldc) * sizeof *c0);
    const float alpha = 1.5f, beta = 0.5f;
    ops()->gemm(c, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cm, ldc);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t p = 0; p < k; p++)
                s += op_at(a, lda, ta, i, p) * op_at(b, ldb, tb, p, j);
            assert_close(cm[i * ldc + j], alpha * s + beta * c0[i * ldc + j], 1e-5, 1e-5);
        }
        for (int64_t j = n; j < ldc; j++) /* padding untouched */
            assert_true(cm[i * ldc + j] == c0[i * ldc + j]);
    }
    free(a);
    free(b);
    free(cm);
    free(c0);
}

static void test_gemm_all_transpose_combinations_with_alpha_beta_and_lds(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(2);
    check_gemm(c, false, false);
    check_gemm(c, true, false);
    check_gemm(c, false, true);
    check_gemm(c, true, true);
    ops()->destroy(c);
}

static void test_gemm_beta_zero_ignores_nan_and_k_zero_scales(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(1);
    float a[6] = {1, 2, 3, 4, 5, 6}; /* 2 x 3 */
    float b[6] = {1, 0, 0, 1, 1, 1}; /* 3 x 2 */
    float cm[4] = {NAN, NAN, NAN, NAN};
    ops()->gemm(c, false, false, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, cm, 2);
    float want[4] = {4, 5, 10, 11};
    for (int i = 0; i < 4; i++)
        assert_true(cm[i] == want[i]);
    ops()->gemm(c, false, false, 2, 2, 0, 1.0f, a, 1, b, 2, 0.5f, cm, 2);
    for (int i = 0; i < 4; i++)
        assert_true(cm[i] == want[i] * 0.5f);
    ops()->destroy(c);
}

/* ---- spmm ---------------------------------------------------------------------------- */

/* Random CSR with ascending columns; every 5th row is empty, as are the first and last. */
static bv_csr random_csr(int64_t nrows, int64_t ncols, int max_deg, bool with_values)
{
    bv_csr m = {.nrows = nrows, .ncols = ncols};
    m.rowptr = malloc((size_t)(nrows + 1) * sizeof *m.rowptr);
    m.colidx = malloc((size_t)(nrows * max_deg + 1) * sizeof *m.colidx);
    m.rowptr[0] = 0;
    for (int64_t i = 0; i < nrows; i++) {
        int64_t deg = (i % 5 == 0 || i == nrows - 1) ? 0 : (int64_t)(rng_next() % (uint64_t)(max_deg + 1));
        int64_t e = m.rowptr[i];
        int32_t col = -1;
        for (int64_t d = 0; d < deg; d++) {
            int64_t room = ncols - 1 - col - (deg - 1 - d);
            if (room <= 0)
                break;
            col += 1 + (int32_t)(rng_next() % (uint64_t)(room < 4 ? room : 4));
            m.colidx[e++] = col;
        }
        m.rowptr[i + 1] = e;
    }
    m.nnz = m.rowptr[nrows];
    m.values = with_values ? random_floats(m.nnz, -2, 2) : NULL;
    return m;
}

static void free_csr(bv_csr *m)
{
    free(m->rowptr);
    free(m->colidx);
    free(m->values);
}

/* The documented sum, in edge order, in float: the plugin must match it exactly. */
static void spmm_reference(const bv_csr *a, int64_t rb, int64_t re, const float *x, int64_t f,
                           float *y)
{
    for (int64_t i = rb; i < re; i++)
        for (int64_t j = 0; j < f; j++) {
            float s = 0.0f;
            for (int64_t e = a->rowptr[i]; e < a->rowptr[i + 1]; e++) {
                float w = a->values ? a->values[e] : 1.0f;
                s += w * x[(int64_t)a->colidx[e] * f + j];
            }
            y[(i - rb) * f + j] = s;
        }
}

static void check_spmm(bv_compute *c, const bv_csr *a, int64_t rb, int64_t re, int64_t f)
{
    float *x = random_floats(a->ncols * f, -1, 1);
    float *y = random_floats((re - rb) * f, 100, 200); /* garbage the kernel must overwrite */
    float *want = malloc((size_t)((re - rb) * f) * sizeof *want);
    ops()->spmm(c, a, rb, re, x, f, y);
    spmm_reference(a, rb, re, x, f, want);
    for (int64_t i = 0; i < (re - rb) * f; i++)
        if (y[i] != want[i])
            fail_msg("spmm rows [%lld, %lld) element %lld: got %.9g want %.9g", (long long)rb,
                     (long long)re, (long long)i, y[i], want[i]);
    free(x);
    free(y);
    free(want);
}

static void test_spmm_matches_reference_with_empty_rows_and_subranges(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    for (int with_values = 0; with_values <= 1; with_values++) {
        bv_csr a = random_csr(200, 150, 12, with_values);
        check_spmm(c, &a, 0, a.nrows, 37);
        check_spmm(c, &a, 13, 171, 37);
        check_spmm(c, &a, 5, 6, 8); /* a single empty row */
        check_spmm(c, &a, 0, a.nrows, 1);
        for (int64_t f = 8; f <= 64; f *= 2) { /* the widths kept in vector registers */
            check_spmm(c, &a, 0, a.nrows, f);
            check_spmm(c, &a, 13, 171, f);
        }
        free_csr(&a);
    }
    ops()->destroy(c);
}

static void test_spmm_is_bit_identical_for_1_2_3_threads(void **state)
{
    (void)state;
    const int64_t f = 37;
    bv_csr a = random_csr(3000, 2500, 16, true);
    float *x = random_floats(a.ncols * f, -1, 1);
    float *y[3];
    for (int t = 0; t < 3; t++) {
        bv_compute *c = make_cpu_compute(t + 1);
        y[t] = calloc((size_t)(a.nrows * f), sizeof(float));
        ops()->spmm(c, &a, 0, a.nrows, x, f, y[t]);
        ops()->destroy(c);
    }
    assert_memory_equal(y[0], y[1], (size_t)(a.nrows * f) * sizeof(float));
    assert_memory_equal(y[0], y[2], (size_t)(a.nrows * f) * sizeof(float));
    for (int t = 0; t < 3; t++)
        free(y[t]);
    free(x);
    free_csr(&a);
}

static float *copy_floats(const float *v, int64_t n); /* below, with the edge kernels */

/* spmm_dropout_heads (ABI 1.7) gives, to the bit, what one spmm_dropout call per head
 * gives (head h: mask offset + h * head_stride, columns [h f, (h + 1) f)), and so does its
 * gradient, for head widths on the vector path (8) and off it (3), more heads than one
 * sweep takes (10), any thread count, with and without dropout. */
static void test_spmm_dropout_heads_equals_head_by_head(void **state)
{
    (void)state;
    bv_csr a = random_csr(700, 500, 12, true);
    static const int shapes[][2] = {{8, 8}, {1, 8}, {3, 8}, {10, 8}, {8, 3}, {2, 16}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        int heads = shapes[sh][0];
        int64_t f = shapes[sh][1], z = heads * f;
        float *x = random_floats(a.ncols * z, -1, 1), *dy = random_floats(a.nrows * z, -1, 1);
        for (int drop = 0; drop < 2; drop++) {
            float p = drop ? 0.6f : 0.0f;
            uint64_t offset = 12345, stride = 1000003;
            size_t ybytes = (size_t)(a.nrows * z) * sizeof(float);
            size_t dxbytes = (size_t)(a.ncols * z) * sizeof(float);
            float *y1 = calloc(1, ybytes), *y2 = calloc(1, ybytes);
            float *dx1 = random_floats(a.ncols * z, -1, 1), *dx2 = copy_floats(dx1, a.ncols * z);
            bv_compute *c1 = make_cpu_compute(1);
            for (int h = 0; h < heads; h++) {
                ops()->spmm_dropout(c1, &a, p, 7, 3, offset + (uint64_t)h * stride, a.ncols,
                                    x + h * f, z, f, y1 + h * f, z);
                ops()->spmm_dropout_backward_x(c1, &a, p, 7, 3, offset + (uint64_t)h * stride,
                                               a.ncols, dy + h * f, z, f, dx1 + h * f, z);
            }
            ops()->destroy(c1);
            for (int t = 1; t <= 3; t += 2) {
                bv_compute *c = make_cpu_compute(t);
                memset(y2, 0xff, ybytes);
                float *dx = copy_floats(dx2, a.ncols * z);
                ops()->spmm_dropout_heads(c, &a, p, 7, 3, offset, stride, a.ncols, heads, x, z,
                                          f, y2, z);
                ops()->spmm_dropout_heads_backward_x(c, &a, p, 7, 3, offset, stride, a.ncols,
                                                     heads, dy, z, f, dx, z);
                ops()->destroy(c);
                assert_memory_equal(y1, y2, ybytes);
                assert_memory_equal(dx1, dx, dxbytes);
                free(dx);
            }
            free(y1);
            free(y2);
            free(dx1);
            free(dx2);
        }
        free(x);
        free(dy);
    }
    free_csr(&a);
}

/* dense_dropout_heads (ABI 1.18) gives, to the bit, what spmm_dropout_heads gives for a
 * CSR that stores every element of the dense input (zeros and -0 included), and so does
 * its gradient: GAT's 8 heads of 8 (its own path), 4 heads of 8, 3 (the loop without
 * vectors), 10 (more than one sweep takes), heads of 3 and of 16 units, a row stride
 * wider than the columns, 1 and 3 threads, with and without dropout. */
static void test_dense_dropout_heads_equals_sparse_with_every_element(void **state)
{
    (void)state;
    const int64_t rows = 701, cols = 67, lda = 70;
    float *dense = random_floats(rows * lda, -2, 2);
    for (int64_t i = 0; i < rows * lda; i += 7)
        dense[i] = i % 2 ? 0.0f : -0.0f;
    bv_csr a = {.nrows = rows, .ncols = cols, .nnz = rows * cols};
    a.rowptr = malloc((size_t)(rows + 1) * sizeof *a.rowptr);
    a.colidx = malloc((size_t)(rows * cols) * sizeof *a.colidx);
    a.values = malloc((size_t)(rows * cols) * sizeof *a.values);
    for (int64_t i = 0; i <= rows; i++)
        a.rowptr[i] = i * cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            a.colidx[i * cols + j] = (int32_t)j;
            a.values[i * cols + j] = dense[i * lda + j];
        }
    static const int shapes[][2] = {{8, 8}, {4, 8}, {3, 8}, {10, 8}, {8, 3}, {2, 16}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        int heads = shapes[sh][0];
        int64_t f = shapes[sh][1], z = heads * f;
        float *x = random_floats(cols * z, -1, 1), *dy = random_floats(rows * z, -1, 1);
        size_t ybytes = (size_t)(rows * z) * sizeof(float);
        size_t dxbytes = (size_t)(cols * z) * sizeof(float);
        float *dx0 = random_floats(cols * z, -1, 1);
        for (int drop = 0; drop < 2; drop++) {
            float p = drop ? 0.6f : 0.0f;
            uint64_t offset = 4321, stride = 1000003;
            float *y1 = calloc(1, ybytes), *dx1 = copy_floats(dx0, cols * z);
            bv_compute *c1 = make_cpu_compute(1);
            ops()->spmm_dropout_heads(c1, &a, p, 7, 3, offset, stride, cols, heads, x, z, f, y1,
                                      z);
            ops()->spmm_dropout_heads_backward_x(c1, &a, p, 7, 3, offset, stride, cols, heads,
                                                 dy, z, f, dx1, z);
            ops()->destroy(c1);
            for (int t = 1; t <= 3; t += 2) {
                bv_compute *c = make_cpu_compute(t);
                float *y2 = malloc(ybytes), *dx2 = copy_floats(dx0, cols * z);
                memset(y2, 0xff, ybytes);
                ops()->dense_dropout_heads(c, rows, cols, dense, lda, p, 7, 3, offset, stride,
                                           cols, heads, x, z, f, y2, z);
                ops()->dense_dropout_heads_backward_x(c, rows, cols, dense, lda, p, 7, 3, offset,
                                                      stride, cols, heads, dy, z, f, dx2, z);
                ops()->destroy(c);
                assert_memory_equal(y1, y2, ybytes);
                assert_memory_equal(dx1, dx2, dxbytes);
                free(y2);
                free(dx2);
            }
            free(y1);
            free(dx1);
        }
        free(x);
        free(dy);
        free(dx0);
    }
    free_csr(&a);
    free(dense);
}

/* ---- relu ---------------------------------------------------------------------------- *//* ---- relu ---------------------------------------------------------------------------- */

static void test_relu_forward_and_backward_match_reference_in_place(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t n = 100003;
    float *x = random_floats(n, -1, 1);
    x[0] = 0.0f;
    float *y = malloc((size_t)n * sizeof *y);
    ops()->relu_forward(c, n, x, y);
    for (int64_t i = 0; i < n; i++)
        assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    ops()->relu_forward(c, n, x, x); /* aliasing */
    assert_memory_equal(x, y, (size_t)n * sizeof *x);

    float *dy = random_floats(n, -1, 1);
    float *dx = malloc((size_t)n * sizeof *dx);
    ops()->relu_backward(c, n, y, dy, dx);
    for (int64_t i = 0; i < n; i++)
        assert_true(dx[i] == (y[i] > 0 ? dy[i] : 0.0f));
    ops()->relu_backward(c, n, y, dy, dy); /* aliasing */
    assert_memory_equal(dx, dy, (size_t)n * sizeof *dx);
    free(x);
    free(y);
    free(dy);
    free(dx);
    ops()->destroy(c);
}

/* ---- dropout ------------------------------------------------------------------------- */

/* The mask as documented (cpu_internal.h): splitmix64 over the global index. */
static uint64_t ref_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool ref_kept(uint64_t seed, uint64_t stream, uint64_t index, float p)
{
    const uint64_t gamma = 0x9E3779B97F4A7C15ull;
    uint64_t key = ref_mix64(seed ^ ref_mix64(stream + gamma));
    float u = (float)(ref_mix64(key + (index + 1) * gamma) >> 40) * 0x1.0p-24f;
    return u >= p;
}

static void test_dropout_mask_is_documented_hash_and_keeps_half(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(2);
    const int64_t n = 100000;
    const float p = 0.5f;
    float *x = random_floats(n, 1, 2); /* never zero, so zero means dropped */
    float *y = malloc((size_t)n * sizeof *y);
    ops()->dropout_forward(c, n, p, 42, 7, 1000, x, y);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        bool k = ref_kept(42, 7, 1000 + (uint64_t)i, p);
        assert_true(y[i] == (k ? x[i] * 2.0f : 0.0f));
        kept += k;
    }
    /* Binomial(1e5, 0.5): sd 158; 5 sd */
    assert_true(kept > 50000 - 800 && kept < 50000 + 800);

    /* another stream gives another mask */
    float *y2 = malloc((size_t)n * sizeof *y2);
    ops()->dropout_forward(c, n, p, 42, 8, 1000, x, y2);
    assert_true(memcmp(y, y2, (size_t)n * sizeof *y) != 0);
    free(x);
    free(y);
    free(y2);
    ops()->destroy(c);
}

/* Other rates (the integer threshold must round like the float test u >= p), and zeros
 * of either sign pass through bit for bit; lengths that are not multiples of the vector
 * width. */
static void test_dropout_mask_other_rates_and_signed_zeros(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(2);
    const float rates[] = {0.1f, 0.3f, 0.6f, 0.999f, 1e-7f};
    const int64_t n = 40003;
    float *x = random_floats(n, -1, 1);
    for (int64_t i = 0; i < n; i += 7)
        x[i] = (i % 2) ? -0.0f : 0.0f;
    float *y = malloc((size_t)n * sizeof *y);
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++) {
        float p = rates[r];
        ops()->dropout_forward(c, n, p, 11, 2, 77, x, y);
        for (int64_t i = 0; i < n; i++) {
            float want = x[i] == 0.0f ? x[i]
                         : ref_kept(11, 2, 77 + (uint64_t)i, p) ? x[i] * (1.0f / (1.0f - p))
                                                                 : 0.0f;
            assert_memory_equal(&y[i], &want, sizeof want);
        }
    }
    free(x);
    free(y);
    ops()->destroy(c);
}

static void test_dropout_same_mask_for_any_threads_and_any_split(void **state)
{
    (void)state;
    const int64_t n = 100000, cut = 37171;
    const float p = 0.3f;
    float *x = random_floats(n, -1, 1);
    float *one = malloc((size_t)n * sizeof *one);
    float *two = malloc((size_t)n * sizeof *two);
    float *split = malloc((size_t)n * sizeof *split);
    bv_compute *c1 = make_cpu_compute(1);
    bv_compute *c2 = make_cpu_compute(2);
    ops()->dropout_forward(c1, n, p, 9, 3, 0, x, one);
    ops()->dropout_forward(c2, n, p, 9, 3, 0, x, two);
    assert_memory_equal(one, two, (size_t)n * sizeof *one);
    ops()->dropout_forward(c2, cut, p, 9, 3, 0, x, split);
    ops()->dropout_forward(c2, n - cut, p, 9, 3, (uint64_t)cut, x + cut, split + cut);
    assert_memory_equal(one, split, (size_t)n * sizeof *one);
    memcpy(split, x, (size_t)n * sizeof *x);
    ops()->dropout_forward(c2, n, p, 9, 3, 0, split, split); /* in place */
    assert_memory_equal(one, split, (size_t)n * sizeof *one);
    ops()->destroy(c1);
    ops()->destroy(c2);
    free(x);
    free(one);
    free(two);
    free(split);
}

static void test_dropout_backward_uses_the_forward_mask_and_p0_copies(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t n = 50000;
    const float p = 0.25f, scale = 1.0f / (1.0f - p);
    float *x = random_floats(n, 1, 2);
    float *y = malloc((size_t)n * sizeof *y);
    float *dy = random_floats(n, 1, 2);
    float *dx = malloc((size_t)n * sizeof *dx);
    ops()->dropout_forward(c, n, p, 5, 1, 123, x, y);
    ops()->dropout_backward(c, n, p, 5, 1, 123, dy, dx);
    for (int64_t i = 0; i < n; i++) {
        assert_true((y[i] != 0.0f) == (dx[i] != 0.0f));
        if (y[i] != 0.0f) {
            assert_true(y[i] == x[i] * scale);
            assert_true(dx[i] == dy[i] * scale);
        }
    }
    ops()->dropout_forward(c, n, 0.0f, 5, 1, 123, x, y);
    assert_memory_equal(x, y, (size_t)n * sizeof *x);
    ops()->dropout_backward(c, n, 0.0f, 5, 1, 123, dy, dx);
    assert_memory_equal(dy, dx, (size_t)n * sizeof *dy);
    free(x);
    free(y);
    free(dy);
    free(dx);
    ops()->destroy(c);
}

/* ---- softmax cross-entropy ----------------------------------------------------------- */

static void xent_reference(int64_t n, int64_t k, const float *logits, const int32_t *labels,
                           const uint8_t *mask, float grad_scale, double *dlogits,
                           bv_xent_result *out)
{
    memset(out, 0, sizeof *out);
    for (int64_t i = 0; i < n; i++) {
        const float *l = logits + i * k;
        double *d = dlogits + i * k;
        if ((mask && !mask[i]) || labels[i] < 0) {
            for (int64_t j = 0; j < k; j++)
                d[j] = 0;
            continue;
        }
        int64_t arg = 0;
        for (int64_t j = 1; j < k; j++)
            if (l[j] > l[arg])
                arg = j;
        double sum = 0;
        for (int64_t j = 0; j < k; j++)
            sum += exp((double)l[j] - l[arg]);
        for (int64_t j = 0; j < k; j++)
            d[j] = grad_scale * (exp((double)l[j] - l[arg]) / sum - (j == labels[i]));
        out->loss_sum += log(sum) - ((double)l[labels[i]] - l[arg]);
        out->count++;
        out->correct += arg == labels[i];
    }
}

static void check_xent(bv_compute *c, int64_t n, int64_t k, bool use_mask)
{
    float *logits = random_floats(n * k, -4, 4);
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    uint8_t *mask = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        labels[i] = i % 11 == 3 ? -1 : (int32_t)(rng_next() % (uint64_t)k);
        mask[i] = i % 4 != 1;
        if (i % 13 == 0) /* make many rows right, so `correct` is exercised */
            logits[i * k + (labels[i] < 0 ? 0 : labels[i])] = 9.0f;
    }
    logits[2 * k] = 1000.0f; /* a large logit must stay finite */
    float *d = random_floats(n * k, 5, 6);
    double *dref = malloc((size_t)(n * k) * sizeof *dref);
    bv_xent_result got, want, nograd;
    const float gs = 1.0f / 64.0f;
    ops()->softmax_xent(c, n, k, logits, labels, use_mask ? mask : NULL, gs, d, &got);
    xent_reference(n, k, logits, labels, use_mask ? mask : NULL, gs, dref, &want);
    assert_int_equal(got.count, want.count);
    assert_int_equal(got.correct, want.correct);
    assert_true(want.correct > 0 && want.correct < want.count);
    assert_close(got.loss_sum, want.loss_sum, 1e-6, 1e-9);
    for (int64_t i = 0; i < n * k; i++)
        assert_close(d[i], dref[i], 1e-5, 1e-8);
    ops()->softmax_xent(c, n, k, logits, labels, use_mask ? mask : NULL, gs, NULL, &nograd);
    assert_true(nograd.loss_sum == got.loss_sum);
    assert_int_equal(nograd.count, got.count);
    assert_int_equal(nograd.correct, got.correct);
    free(logits);
    free(labels);
    free(mask);
    free(d);
    free(dref);
}

static void test_softmax_xent_matches_reference_with_mask_and_ignored_labels(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    check_xent(c, 50, 7, true);
    check_xent(c, 50, 7, false);
    check_xent(c, 5000, 7, true); /* several blocks and threads */
    check_xent(c, 300, 8, true);   /* one full vector of exponentials per row */
    check_xent(c, 300, 19, false); /* two full vectors and a tail */
    check_xent(c, 300, 2, false);
    ops()->destroy(c);
}

static void test_softmax_xent_is_bit_identical_for_1_and_3_threads(void **state)
{
    (void)state;
    const int64_t n = 20000, k = 5;
    float *logits = random_floats(n * k, -3, 3);
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    for (int64_t i = 0; i < n; i++)
        labels[i] = (int32_t)(rng_next() % (uint64_t)k);
    float *d[2];
    bv_xent_result r[2];
    for (int t = 0; t < 2; t++) {
        bv_compute *c = make_cpu_compute(t == 0 ? 1 : 3);
        d[t] = malloc((size_t)(n * k) * sizeof(float));
        ops()->softmax_xent(c, n, k, logits, labels, NULL, 1.0f / (float)n, d[t], &r[t]);
        ops()->destroy(c);
    }
    assert_true(r[0].loss_sum == r[1].loss_sum);
    assert_int_equal(r[0].count, n);
    assert_int_equal(r[0].correct, r[1].correct);
    assert_memory_equal(d[0], d[1], (size_t)(n * k) * sizeof(float));
    free(d[0]);
    free(d[1]);
    free(logits);
    free(labels);
}

/* ---- adam ---------------------------------------------------------------------------- */

static void test_adam_l2_first_step_by_hand(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(1);
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    bv_adam_params ap = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .decoupled = false, .step = 1};
    ops()->adam_step(c, 1, &p, &g, &m, &v, &ap);
    /* g' = 0.5 + 0.1 * 1 = 0.6; m = 0.1 * 0.6; v = 0.001 * 0.36;
     * m^ = 0.6, v^ = 0.36, p = 1 - 0.01 * 0.6 / (0.6 + 1e-8) */
    assert_close(m, 0.06, 1e-6, 0);
    /* 1 - 0.999f is 0.001 only to 1.3e-5 relative: the float parameter's own rounding */
    assert_close(v, 0.00036, 2e-5, 0);
    assert_close(p, 0.99, 1e-6, 0);
    ops()->destroy(c);
}

static void test_adamw_first_step_by_hand(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(1);
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    bv_adam_params ap = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                         .weight_decay = 0.1f, .decoupled = true, .step = 1};
    ops()->adam_step(c, 1, &p, &g, &m, &v, &ap);
    /* p = 1 * (1 - 0.01 * 0.1) = 0.999; m = 0.05; v = 0.00025; m^ = 0.5, v^ = 0.25;
     * p = 0.999 - 0.01 * 0.5 / 0.5 = 0.989 */
    assert_close(m, 0.05, 1e-6, 0);
    assert_close(v, 0.00025, 2e-5, 0);
    assert_close(p, 0.989, 1e-6, 0);
    ops()->destroy(c);
}

static void test_adam_later_step_applies_bias_correction_in_both_modes(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t n = 70001;
    for (int decoupled = 0; decoupled <= 1; decoupled++) {
        float *p = random_floats(n, -1, 1), *g = random_floats(n, -1, 1);
        float *m = random_floats(n, -0.1f, 0.1f), *v = random_floats(n, 0, 0.01f);
        float *p0 = malloc((size_t)n * sizeof *p0), *m0 = malloc((size_t)n * sizeof *m0);
        float *v0 = malloc((size_t)n * sizeof *v0);
        memcpy(p0, p, (size_t)n * sizeof *p);
        memcpy(m0, m, (size_t)n * sizeof *m);
        memcpy(v0, v, (size_t)n * sizeof *v);
        bv_adam_params ap = {.lr = 0.005f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f,
                             .weight_decay = 5e-4f, .decoupled = decoupled, .step = 5};
        ops()->adam_step(c, n, p, g, m, v, &ap);
        double bc1 = 1 - pow(0.8, 5), bc2 = 1 - pow(0.99, 5);
        for (int64_t i = 0; i < n; i++) {
            double pi = p0[i], gi = g[i];
            if (decoupled)
                pi *= 1 - (double)ap.lr * ap.weight_decay;
            else
                gi += (double)ap.weight_decay * p0[i];
            double mi = ap.beta1 * (double)m0[i] + (1 - (double)ap.beta1) * gi;
            double vi = ap.beta2 * (double)v0[i] + (1 - (double)ap.beta2) * gi * gi;
            pi -= ap.lr * (mi / bc1) / (sqrt(vi / bc2) + ap.eps);
            /* m = 0.8 m0 + 0.2 g can cancel: tolerance on the inputs' scale (|m0| < 0.1) */
            assert_close(m[i], mi, 1e-6, 3e-8);
            assert_close(v[i], vi, 1e-6, 1e-12);
            assert_close(p[i], pi, 1e-6, 1e-7);
        }
        free(p);
        free(g);
        free(m);
        free(v);
        free(p0);
        free(m0);
        free(v0);
    }
    ops()->destroy(c);
}

/* adam_step_scaled (ABI 1.20) gives what scale and then adam_step give, to the bit, and
 * leaves the gradient as it was: in both modes, a clipping scale and an exact 1, over
 * several threads. */
static void test_adam_step_scaled_is_scale_then_adam_step(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t n = 70001;
    size_t bytes = (size_t)n * sizeof(float);
    const float scales[] = {0.37f, 1.0f, 1e-3f};
    for (int decoupled = 0; decoupled <= 1; decoupled++)
        for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
            float *p = random_floats(n, -1, 1), *g = random_floats(n, -3, 3);
            float *m = random_floats(n, -0.1f, 0.1f), *v = random_floats(n, 0, 0.01f);
            float *p2 = malloc(bytes), *g2 = malloc(bytes), *m2 = malloc(bytes);
            float *v2 = malloc(bytes);
            memcpy(p2, p, bytes);
            memcpy(g2, g, bytes);
            memcpy(m2, m, bytes);
            memcpy(v2, v, bytes);
            bv_adam_params ap = {.lr = 0.005f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                 .weight_decay = 0.1f, .decoupled = decoupled, .step = 7};
            ops()->adam_step_scaled(c, n, scales[k], p, g, m, v, &ap);
            assert_memory_equal(g, g2, bytes); /* the gradient untouched */
            ops()->scale(c, n, scales[k], g2);
            ops()->adam_step(c, n, p2, g2, m2, v2, &ap);
            assert_memory_equal(p, p2, bytes);
            assert_memory_equal(m, m2, bytes);
            assert_memory_equal(v, v2, bytes);
            free(p), free(g), free(m), free(v), free(p2), free(g2), free(m2), free(v2);
        }
    ops()->destroy(c);
}

/* ---- bias, axpy, sum_squares --------------------------------------------------------- */

static void test_add_bias_adds_to_every_row(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t rows = 700, cols = 70;
    float *y = random_floats(rows * cols, -1, 1);
    float *y0 = malloc((size_t)(rows * cols) * sizeof *y0);
    memcpy(y0, y, (size_t)(rows * cols) * sizeof *y);
    float *bias = random_floats(cols, -1, 1);
    ops()->add_bias(c, rows, cols, bias, y);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            assert_true(y[r * cols + j] == y0[r * cols + j] + bias[j]);
    free(y);
    free(y0);
    free(bias);
    ops()->destroy(c);
}

static void test_bias_backward_sums_rows_and_accumulates(void **state)
{
    (void)state;
    const int64_t rows = 1000, cols = 200; /* several 64-column chunks, one partial */
    float *dy = random_floats(rows * cols, -1, 1);
    float *db[2];
    for (int t = 0; t < 2; t++) {
        bv_compute *c = make_cpu_compute(t == 0 ? 1 : 3);
        db[t] = random_floats(cols, 50, 60);
        ops()->bias_backward(c, rows, cols, dy, db[t], false);
        ops()->destroy(c);
    }
    for (int64_t j = 0; j < cols; j++) {
        double s = 0;
        for (int64_t r = 0; r < rows; r++)
            s += dy[r * cols + j];
        assert_true(db[0][j] == (float)s); /* double accumulation, rounded once */
    }
    assert_memory_equal(db[0], db[1], (size_t)cols * sizeof(float));

    bv_compute *c = make_cpu_compute(2);
    float *acc = malloc((size_t)cols * sizeof *acc);
    for (int64_t j = 0; j < cols; j++)
        acc[j] = 1.0f;
    ops()->bias_backward(c, rows, cols, dy, acc, true);
    for (int64_t j = 0; j < cols; j++)
        assert_close(acc[j], 1.0 + db[0][j], 1e-6, 1e-6);
    ops()->destroy(c);
    free(acc);
    free(dy);
    free(db[0]);
    free(db[1]);
}

static void test_axpy_adds_scaled_vector(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(2);
    const int64_t n = 40001;
    float *x = random_floats(n, -1, 1), *y = random_floats(n, -1, 1);
    float *y0 = malloc((size_t)n * sizeof *y0);
    memcpy(y0, y, (size_t)n * sizeof *y);
    ops()->axpy(c, n, -0.75f, x, y);
    for (int64_t i = 0; i < n; i++)
        assert_true(y[i] == y0[i] + -0.75f * x[i]);
    free(x);
    free(y);
    free(y0);
    ops()->destroy(c);
}

static void test_sum_squares_in_double_and_same_for_any_threads(void **state)
{
    (void)state;
    const int64_t n = 100007;
    float *x = random_floats(n, -3, 3);
    double want = 0;
    for (int64_t i = 0; i < n; i++)
        want += (double)x[i] * x[i];
    double got[3];
    for (int t = 0; t < 3; t++) {
        bv_compute *c = make_cpu_compute(t + 1);
        got[t] = ops()->sum_squares(c, n, x);
        if (t == 0) {
            assert_true(ops()->sum_squares(c, 0, x) == 0.0);
            float three[3] = {1, 2, 3};
            assert_true(ops()->sum_squares(c, 3, three) == 14.0);
        }
        ops()->destroy(c);
    }
    assert_close(got[0], want, 1e-12, 0);
    assert_true(got[0] == got[1] && got[0] == got[2]);
    free(x);
}

/* ---- leaky ReLU and ELU -------------------------------------------------------------- */

static void test_leaky_relu_forward_and_backward_match_reference_in_place(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t n = 100003;
    const float slope = 0.2f;
    float *x = random_floats(n, -1, 1);
    x[0] = 0.0f; /* x == 0 takes the negative branch: slope * 0 */
    float *y = malloc((size_t)n * sizeof *y);
    ops()->leaky_relu_forward(c, n, slope, x, y);
    for (int64_t i = 0; i < n; i++)
        assert_true(y[i] == (x[i] > 0 ? x[i] : slope * x[i]));
    float *dy = random_floats(n, -1, 1);
    float *dx = malloc((size_t)n * sizeof *dx);
    ops()->leaky_relu_backward(c, n, slope, x, dy, dx);
    for (int64_t i = 0; i < n; i++)
        assert_true(dx[i] == (x[i] > 0 ? dy[i] : slope * dy[i]));
    ops()->leaky_relu_backward(c, n, slope, x, dy, dy); /* dy and dx alias */
    assert_memory_equal(dx, dy, (size_t)n * sizeof *dx);
    ops()->leaky_relu_forward(c, n, slope, x, x); /* x and y alias */
    assert_memory_equal(x, y, (size_t)n * sizeof *x);
    free(x);
    free(y);
    free(dy);
    free(dx);
    ops()->destroy(c);
}

static void test_elu_forward_and_backward_match_reference(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    const int64_t n = 100003;
    float *x = random_floats(n, -6, 3);
    x[0] = 0.0f;
    x[1] = -1e-6f; /* exp(x) - 1 in float would cancel here; expm1 does not */
    float *y = malloc((size_t)n * sizeof *y);
    ops()->elu_forward(c, n, x, y);
    for (int64_t i = 0; i < n; i++) {
        if (x[i] > 0)
            assert_true(y[i] == x[i]);
        else
            assert_close(y[i], expm1((double)x[i]), 2e-7, 1e-9);
    }
    float *dy = random_floats(n, -1, 1);
    float *dx = malloc((size_t)n * sizeof *dx);
    ops()->elu_backward(c, n, x, dy, dx);
    for (int64_t i = 0; i < n; i++) {
        if (x[i] > 0)
            assert_true(dx[i] == dy[i]);
        else
            assert_close(dx[i], (double)dy[i] * exp((double)x[i]), 3e-7, 1e-12);
    }
    float *y1 = malloc((size_t)n * sizeof *y1);
    bv_compute *c1 = make_cpu_compute(1);
    ops()->elu_forward(c1, n, x, y1);
    assert_memory_equal(y, y1, (size_t)n * sizeof *y);
    ops()->destroy(c1);
    ops()->elu_forward(c, n, x, x); /* in place */
    assert_memory_equal(x, y, (size_t)n * sizeof *x);
    free(x);
    free(y);
    free(y1);
    free(dy);
    free(dx);
    ops()->destroy(c);
}

/* ---- edge kernels -------------------------------------------------------------------- */

/* Edge arrays of a row range get a guard tail that no kernel may touch. */
#define GUARD 16
#define SENTINEL 12345.0f

static int64_t range_edges(const bv_csr *a, int64_t rb, int64_t re)
{
    return a->rowptr[re] - a->rowptr[rb];
}

static float *edge_array(int64_t edges, int heads, float lo, float hi)
{
    float *v = random_floats(edges * heads + GUARD, lo, hi);
    for (int g = 0; g < GUARD; g++)
        v[edges * heads + g] = SENTINEL;
    return v;
}

static void assert_guard_intact(const float *v, int64_t n)
{
    for (int g = 0; g < GUARD; g++)
        assert_true(v[n + g] == SENTINEL);
}

static float *copy_floats(const float *v, int64_t n)
{
    float *c = malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
    memcpy(c, v, (size_t)n * sizeof *c);
    return c;
}

static void check_edge_scores(bv_compute *c, const bv_csr *a, int64_t rb, int64_t re, int heads)
{
    int64_t ss = heads + 3, ds = heads + 2, ne = range_edges(a, rb, re), base = a->rowptr[rb];
    float *src = random_floats(a->ncols * ss, -1, 1);
    float *dst = random_floats((re - rb) * ds, -1, 1);
    float *out = edge_array(ne, heads, 100, 200);
    ops()->edge_scores(c, a, rb, re, heads, src, ss, dst, ds, out);
    for (int64_t i = rb; i < re; i++)
        for (int64_t e = a->rowptr[i]; e < a->rowptr[i + 1]; e++)
            for (int h = 0; h < heads; h++)
                assert_true(out[(e - base) * heads + h] ==
                            src[a->colidx[e] * ss + h] + dst[(i - rb) * ds + h]);
    assert_guard_intact(out, ne * heads);
    free(src);
    free(dst);
    free(out);
}

static void test_edge_scores_adds_source_and_destination_terms_over_subranges(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr a = random_csr(200, 150, 12, false);
    for (int heads = 1; heads <= 4; heads += 3) {
        check_edge_scores(c, &a, 0, a.nrows, heads);
        check_edge_scores(c, &a, 13, 171, heads);
        check_edge_scores(c, &a, 5, 6, heads); /* one empty row */
        check_edge_scores(c, &a, 6, 7, heads);
    }
    free_csr(&a);
    ops()->destroy(c);
}

static void check_edge_scores_backward(bv_compute *c, const bv_csr *a, int64_t rb, int64_t re,
                                       int heads, bool accumulate)
{
    int64_t ss = heads + 3, ds = heads + 2, ne = range_edges(a, rb, re), base = a->rowptr[rb];
    float *dout = edge_array(ne, heads, -1, 1);
    float *dsrc = random_floats(a->ncols * ss, -1, 1);
    float *ddst = random_floats((re - rb) * ds, -1, 1);
    float *dsrc_want = copy_floats(dsrc, a->ncols * ss);
    float *ddst_want = copy_floats(ddst, (re - rb) * ds);
    ops()->edge_scores_backward(c, a, rb, re, heads, dout, dsrc, ss, ddst, ds, accumulate);
    for (int64_t i = rb; i < re; i++)
        for (int h = 0; h < heads; h++) {
            float sum = 0.0f;
            for (int64_t e = a->rowptr[i]; e < a->rowptr[i + 1]; e++)
                sum += dout[(e - base) * heads + h];
            float *d = &ddst_want[(i - rb) * ds + h];
            *d = accumulate ? *d + sum : sum;
        }
    for (int64_t e = a->rowptr[rb]; e < a->rowptr[re]; e++) /* the serial scatter */
        for (int h = 0; h < heads; h++)
            dsrc_want[a->colidx[e] * ss + h] += dout[(e - base) * heads + h];
    assert_memory_equal(ddst, ddst_want, (size_t)((re - rb) * ds) * sizeof(float));
    assert_memory_equal(dsrc, dsrc_want, (size_t)(a->ncols * ss) * sizeof(float));
    free(dout);
    free(dsrc);
    free(ddst);
    free(dsrc_want);
    free(ddst_want);
}

static void test_edge_scores_backward_sums_per_row_and_scatters_in_edge_order(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr a = random_csr(200, 150, 12, false);
    for (int accumulate = 0; accumulate <= 1; accumulate++)
        for (int heads = 1; heads <= 4; heads += 3) {
            check_edge_scores_backward(c, &a, 0, a.nrows, heads, accumulate);
            check_edge_scores_backward(c, &a, 13, 171, heads, accumulate);
            check_edge_scores_backward(c, &a, 5, 6, heads, accumulate);
        }
    free_csr(&a);
    ops()->destroy(c);
}

static void check_edge_softmax(bv_compute *c, const bv_csr *a, int64_t rb, int64_t re, int heads)
{
    int64_t ne = range_edges(a, rb, re), base = a->rowptr[rb];
    float *z = edge_array(ne, heads, -5, 5);
    if (ne > 0)
        z[0] = 1000.0f; /* must not overflow: the row max is subtracted */
    float *alpha = edge_array(ne, heads, 100, 200);
    ops()->edge_softmax(c, a, rb, re, heads, z, alpha);
    for (int64_t i = rb; i < re; i++)
        for (int h = 0; h < heads; h++) {
            int64_t e0 = a->rowptr[i] - base, e1 = a->rowptr[i + 1] - base;
            double mx = -INFINITY, sum = 0.0, total = 0.0;
            for (int64_t e = e0; e < e1; e++)
                mx = fmax(mx, z[e * heads + h]);
            for (int64_t e = e0; e < e1; e++)
                sum += exp((double)z[e * heads + h] - mx);
            for (int64_t e = e0; e < e1; e++) {
                assert_close(alpha[e * heads + h], exp((double)z[e * heads + h] - mx) / sum,
                             1e-6, 1e-9);
                total += alpha[e * heads + h];
            }
            if (e1 > e0)
                assert_close(total, 1.0, 1e-6, 0);
        }
    assert_guard_intact(alpha, ne * heads);

    /* backward */
    float *dalpha = edge_array(ne, heads, -1, 1);
    float *dz = edge_array(ne, heads, 100, 200);
    ops()->edge_softmax_backward(c, a, rb, re, heads, alpha, dalpha, dz);
    for (int64_t i = rb; i < re; i++)
        for (int h = 0; h < heads; h++) {
            int64_t e0 = a->rowptr[i] - base, e1 = a->rowptr[i + 1] - base;
            double dot = 0.0;
            for (int64_t e = e0; e < e1; e++)
                dot += (double)alpha[e * heads + h] * dalpha[e * heads + h];
            for (int64_t e = e0; e < e1; e++)
                assert_close(dz[e * heads + h],
                             alpha[e * heads + h] * (dalpha[e * heads + h] - dot), 1e-5, 1e-7);
        }
    assert_guard_intact(dz, ne * heads);
    ops()->edge_softmax_backward(c, a, rb, re, heads, alpha, dalpha, dalpha); /* in place */
    assert_memory_equal(dz, dalpha, (size_t)(ne * heads) * sizeof(float));
    ops()->edge_softmax(c, a, rb, re, heads, z, z); /* in place */
    assert_memory_equal(z, alpha, (size_t)(ne * heads) * sizeof(float));
    free(z);
    free(alpha);
    free(dalpha);
    free(dz);
}

static void test_edge_softmax_and_backward_match_reference_over_subranges(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr a = random_csr(200, 150, 12, false);
    const int head_counts[] = {1, 4, 8, 16}; /* 8 and 16: the 8-lane path */
    for (size_t hc = 0; hc < sizeof head_counts / sizeof head_counts[0]; hc++) {
        int heads = head_counts[hc];
        check_edge_softmax(c, &a, 0, a.nrows, heads);
        check_edge_softmax(c, &a, 13, 171, heads);
        check_edge_softmax(c, &a, 5, 6, heads);
        check_edge_softmax(c, &a, 6, 8, heads);
    }
    free_csr(&a);
    ops()->destroy(c);
}

static void check_gather_heads(bv_compute *c, const bv_csr *a, int64_t rb, int64_t re,
                               int heads, int64_t d)
{
    int64_t width = heads * d, xs = width + 5, ne = range_edges(a, rb, re), base = a->rowptr[rb];
    float *w = edge_array(ne, heads, -1, 1);
    float *x = random_floats(a->ncols * xs, -1, 1);
    float *y = random_floats((re - rb) * width, 100, 200); /* overwritten, empty rows too */
    ops()->gather_heads(c, a, rb, re, heads, d, w, x, xs, y);
    for (int64_t i = rb; i < re; i++)
        for (int h = 0; h < heads; h++)
            for (int64_t j = 0; j < d; j++) {
                float s = 0.0f; /* the documented sum in edge order, in float */
                for (int64_t e = a->rowptr[i]; e < a->rowptr[i + 1]; e++)
                    s += w[(e - base) * heads + h] * x[a->colidx[e] * xs + h * d + j];
                if (y[(i - rb) * width + h * d + j] != s)
                    fail_msg("gather_heads row %lld head %d j %lld: got %.9g want %.9g",
                             (long long)i, h, (long long)j, y[(i - rb) * width + h * d + j], s);
            }

    /* backward w.r.t. the weights (SDDMM) */
    float *dy = random_floats((re - rb) * width, -1, 1);
    float *dw = edge_array(ne, heads, 100, 200);
    ops()->gather_heads_backward_w(c, a, rb, re, heads, d, dy, x, xs, dw);
    for (int64_t i = rb; i < re; i++)
        for (int64_t e = a->rowptr[i]; e < a->rowptr[i + 1]; e++)
            for (int h = 0; h < heads; h++) {
                double s = 0.0, mag = 0.0;
                for (int64_t j = 0; j < d; j++) {
                    double t = (double)dy[(i - rb) * width + h * d + j] *
                               x[a->colidx[e] * xs + h * d + j];
                    s += t;
                    mag += fabs(t);
                }
                assert_close(dw[(e - base) * heads + h], s, 0, 1e-6 * (mag + 1e-3));
            }
    assert_guard_intact(dw, ne * heads);
    free(w);
    free(x);
    free(y);
    free(dy);
    free(dw);
}

static void test_gather_heads_and_backward_w_match_reference(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr a = random_csr(200, 150, 12, false);
    const int heads[] = {1, 3, 2};
    const int64_t dims[] = {8, 13, 1};
    for (int t = 0; t < 3; t++) {
        check_gather_heads(c, &a, 0, a.nrows, heads[t], dims[t]);
        check_gather_heads(c, &a, 13, 171, heads[t], dims[t]);
        check_gather_heads(c, &a, 5, 6, heads[t], dims[t]);
    }
    free_csr(&a);
    ops()->destroy(c);
}

/* dx through the transpose and perm, against the scatter over a's own edges: a's rows in
 * ascending order reach each column u in the transpose's (stable) order, so they agree. */
static void check_gather_heads_backward_x(bv_compute *c, const bv_csr *a, int heads, int64_t d)
{
    int64_t width = heads * d, xs = width + 5;
    int64_t *perm = NULL;
    bv_csr *at = bv_csr_transpose_perm(a, &perm);
    assert_non_null(at);
    float *w = random_floats(a->nnz * heads, -1, 1);
    float *dy = random_floats(a->nrows * width, -1, 1);
    float *dx = random_floats(a->ncols * xs, -1, 1); /* accumulated into */
    float *want = copy_floats(dx, a->ncols * xs);
    ops()->gather_heads_backward_x(c, at, perm, heads, d, w, dy, dx, xs);
    for (int64_t v = 0; v < a->nrows; v++)
        for (int64_t e = a->rowptr[v]; e < a->rowptr[v + 1]; e++)
            for (int h = 0; h < heads; h++)
                for (int64_t j = 0; j < d; j++)
                    want[a->colidx[e] * xs + h * d + j] +=
                        w[e * heads + h] * dy[v * width + h * d + j];
    assert_memory_equal(dx, want, (size_t)(a->ncols * xs) * sizeof(float));
    free(w);
    free(dy);
    free(dx);
    free(want);
    bv_free_aligned(perm);
    bv_csr_free(at);
}

static void test_gather_heads_backward_x_through_transpose_matches_scatter(void **state)
{
    (void)state;
    bv_compute *c = make_cpu_compute(3);
    bv_csr a = random_csr(200, 150, 12, false);
    check_gather_heads_backward_x(c, &a, 1, 8);
    check_gather_heads_backward_x(c, &a, 3, 13);
    check_gather_heads_backward_x(c, &a, 4, 1);
    free_csr(&a);
    ops()->destroy(c);
}

/* Every ABI 1.1 kernel on a graph big enough to split, on 1 and 3 threads. */
static void test_edge_kernels_are_bit_identical_for_1_and_3_threads(void **state)
{
    (void)state;
    const int heads = 4;
    const int64_t d = 8, width = heads * d, rb = 17, re = 2900;
    bv_csr a = random_csr(3000, 3000, 16, false);
    int64_t *perm = NULL;
    bv_csr *at = bv_csr_transpose_perm(&a, &perm);
    int64_t ne = range_edges(&a, rb, re), rows = re - rb;
    float *src = random_floats(a.ncols * heads, -1, 1);
    float *dst = random_floats(rows * heads, -1, 1);
    float *x = random_floats(a.ncols * width, -1, 1);
    float *dy = random_floats(a.nrows * width, -1, 1);
    float *dedge = random_floats(a.nnz * heads, -1, 1);
    float *dsrc0 = random_floats(a.ncols * heads, -1, 1);
    float *dx0 = random_floats(a.ncols * width, -1, 1);
    struct {
        float *z, *alpha, *dz, *dsrc, *ddst, *y, *dw, *dx;
    } r[2];
    for (int t = 0; t < 2; t++) {
        bv_compute *c = make_cpu_compute(t == 0 ? 1 : 3);
        r[t].z = calloc((size_t)(ne * heads), sizeof(float));
        r[t].alpha = calloc((size_t)(ne * heads), sizeof(float));
        r[t].dz = calloc((size_t)(ne * heads), sizeof(float));
        r[t].dsrc = copy_floats(dsrc0, a.ncols * heads);
        r[t].ddst = calloc((size_t)(rows * heads), sizeof(float));
        r[t].y = calloc((size_t)(rows * width), sizeof(float));
        r[t].dw = calloc((size_t)(ne * heads), sizeof(float));
        r[t].dx = copy_floats(dx0, a.ncols * width);
        ops()->edge_scores(c, &a, rb, re, heads, src, heads, dst, heads, r[t].z);
        ops()->leaky_relu_forward(c, ne * heads, 0.2f, r[t].z, r[t].z);
        ops()->edge_softmax(c, &a, rb, re, heads, r[t].z, r[t].alpha);
        ops()->edge_softmax_backward(c, &a, rb, re, heads, r[t].alpha, dedge, r[t].dz);
        ops()->edge_scores_backward(c, &a, rb, re, heads, r[t].dz, r[t].dsrc, heads, r[t].ddst,
                                    heads, false);
        ops()->gather_heads(c, &a, rb, re, heads, d, r[t].alpha, x, width, r[t].y);
        ops()->gather_heads_backward_w(c, &a, rb, re, heads, d, dy, x, width, r[t].dw);
        ops()->gather_heads_backward_x(c, at, perm, heads, d, dedge, dy, r[t].dx, width);
        ops()->destroy(c);
    }
    assert_memory_equal(r[0].alpha, r[1].alpha, (size_t)(ne * heads) * sizeof(float));
    assert_memory_equal(r[0].dz, r[1].dz, (size_t)(ne * heads) * sizeof(float));
    assert_memory_equal(r[0].dsrc, r[1].dsrc, (size_t)(a.ncols * heads) * sizeof(float));
    assert_memory_equal(r[0].ddst, r[1].ddst, (size_t)(rows * heads) * sizeof(float));
    assert_memory_equal(r[0].y, r[1].y, (size_t)(rows * width) * sizeof(float));
    assert_memory_equal(r[0].dw, r[1].dw, (size_t)(ne * heads) * sizeof(float));
    assert_memory_equal(r[0].dx, r[1].dx, (size_t)(a.ncols * width) * sizeof(float));
    for (int t = 0; t < 2; t++) {
        free(r[t].z);
        free(r[t].alpha);
        free(r[t].dz);
        free(r[t].dsrc);
        free(r[t].ddst);
        free(r[t].y);
        free(r[t].dw);
        free(r[t].dx);
    }
    free(src);
    free(dst);
    free(x);
    free(dy);
    free(dedge);
    free(dsrc0);
    free(dx0);
    bv_free_aligned(perm);
    bv_csr_free(at);
    free_csr(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor_names_the_plugin_and_its_options),
        cmocka_unit_test(test_threads_zero_means_every_core_and_n_means_n),
        cmocka_unit_test(test_gemm_all_transpose_combinations_with_alpha_beta_and_lds),
        cmocka_unit_test(test_gemm_beta_zero_ignores_nan_and_k_zero_scales),
        cmocka_unit_test(test_spmm_matches_reference_with_empty_rows_and_subranges),
        cmocka_unit_test(test_spmm_is_bit_identical_for_1_2_3_threads),
        cmocka_unit_test(test_spmm_dropout_heads_equals_head_by_head),
        cmocka_unit_test(test_dense_dropout_heads_equals_sparse_with_every_element),
        cmocka_unit_test(test_relu_forward_and_backward_match_reference_in_place),
        cmocka_unit_test(test_dropout_mask_is_documented_hash_and_keeps_half),
        cmocka_unit_test(test_dropout_mask_other_rates_and_signed_zeros),
        cmocka_unit_test(test_dropout_same_mask_for_any_threads_and_any_split),
        cmocka_unit_test(test_dropout_backward_uses_the_forward_mask_and_p0_copies),
        cmocka_unit_test(test_softmax_xent_matches_reference_with_mask_and_ignored_labels),
        cmocka_unit_test(test_softmax_xent_is_bit_identical_for_1_and_3_threads),
        cmocka_unit_test(test_adam_l2_first_step_by_hand),
        cmocka_unit_test(test_adamw_first_step_by_hand),
        cmocka_unit_test(test_adam_later_step_applies_bias_correction_in_both_modes),
        cmocka_unit_test(test_adam_step_scaled_is_scale_then_adam_step),
        cmocka_unit_test(test_add_bias_adds_to_every_row),
        cmocka_unit_test(test_bias_backward_sums_rows_and_accumulates),
        cmocka_unit_test(test_axpy_adds_scaled_vector),
        cmocka_unit_test(test_sum_squares_in_double_and_same_for_any_threads),
        cmocka_unit_test(test_leaky_relu_forward_and_backward_match_reference_in_place),
        cmocka_unit_test(test_elu_forward_and_backward_match_reference),
        cmocka_unit_test(test_edge_scores_adds_source_and_destination_terms_over_subranges),
        cmocka_unit_test(test_edge_scores_backward_sums_per_row_and_scatters_in_edge_order),
        cmocka_unit_test(test_edge_softmax_and_backward_match_reference_over_subranges),
        cmocka_unit_test(test_gather_heads_and_backward_w_match_reference),
        cmocka_unit_test(test_gather_heads_backward_x_through_transpose_matches_scatter),
        cmocka_unit_test(test_edge_kernels_are_bit_identical_for_1_and_3_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
