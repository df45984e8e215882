/* Sparse times dense (spmm) for the CPU plugin: rows are split across threads by their
 * nonzero count, and each output row is summed by one thread in edge order, so the result
 * is bit-identical for every thread count. */
#include <string.h>

#include "cpu_internal.h"
#include "cpu_vec.h"

typedef struct spmm_ctx {
    const bv_csr *a;
    int64_t row_begin, row_end;
    const float *x;
    int64_t f;
    float *y;
} spmm_ctx;

static void row_axpy(int64_t f, float w, const float *restrict xr, float *restrict yr)
{
    for (int64_t j = 0; j < f; j++)
        yr[j] += w * xr[j];
}

static void row_add(int64_t f, const float *restrict xr, float *restrict yr)
{
    for (int64_t j = 0; j < f; j++)
        yr[j] += xr[j];
}

/* Rows of x are gathered at random, so memory latency bounds the product: the rows this
 * many nonzeros ahead (across row ends) are requested early, about 8 KiB in flight. */
static inline int64_t spmm_prefetch_distance(int64_t f)
{
    int64_t d = 2048 / (f > 0 ? f : 1);
    return d < CPU_GATHER_PREFETCH ? CPU_GATHER_PREFETCH : d;
}

/* Any width: each output row is accumulated in memory. */
static void spmm_rows_any(const spmm_ctx *s, int64_t b, int64_t e)
{
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    const float *values = s->a->values;
    int64_t f = s->f, ahead = spmm_prefetch_distance(f), k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        float *yr = s->y + (i - s->row_begin) * f;
        memset(yr, 0, (size_t)f * sizeof *yr);
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            if (k + ahead < k_end)
                cpu_prefetch_row(s->x + (int64_t)colidx[k + ahead] * f, f);
            if (values)
                row_axpy(f, values[k], s->x + (int64_t)colidx[k] * f, yr);
            else
                row_add(f, s->x + (int64_t)colidx[k] * f, yr);
        }
    }
}

/* Widths of nv x 8 floats: the output row stays in nv vector registers while its edges
 * are summed, and is stored once. Per element the same operations in the same order as
 * spmm_rows_any (a weight of 1 where there are no values multiplies exactly), so both
 * give the same bits. */
CPU_VEC_INLINE void spmm_rows_vec_body(const spmm_ctx *s, int64_t b, int64_t e, int nv)
{
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    const float *values = s->a->values;
    const float *x = s->x;
    int64_t f = 8 * (int64_t)nv, ahead = spmm_prefetch_distance(f), k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        vec8f acc[8];
        for (int v = 0; v < nv; v++)
            acc[v] = vec8_splat(0.0f);
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            if (k + ahead < k_end)
                cpu_prefetch_row(x + (int64_t)colidx[k + ahead] * f, f);
            const float *xr = x + (int64_t)colidx[k] * f;
            vec8f w = vec8_splat(values ? values[k] : 1.0f);
            for (int v = 0; v < nv; v++)
                acc[v] += w * vec8_load(xr + 8 * v, 8);
        }
        float *yr = s->y + (i - s->row_begin) * f;
        for (int v = 0; v < nv; v++)
            vec8_store(yr + 8 * v, acc[v], 8);
    }
}

CPU_VEC_INLINE void spmm_rows_body(const spmm_ctx *s, int64_t b, int64_t e)
{
    switch (s->f) {
    case 8: spmm_rows_vec_body(s, b, e, 1); break;
    case 16: spmm_rows_vec_body(s, b, e, 2); break;
    case 32: spmm_rows_vec_body(s, b, e, 4); break;
    case 64: spmm_rows_vec_body(s, b, e, 8); break;
    default: spmm_rows_any(s, b, e); break;
    }
}
CPU_DEFINE_DISPATCH(spmm_rows, (const spmm_ctx *s, int64_t b, int64_t e), (s, b, e))

static void spmm_task(void *arg, int tid, int ntasks)
{
    const spmm_ctx *s = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(s->a->rowptr, s->row_begin, s->row_end, tid, ntasks, &b, &e);
    if (b < e)
        spmm_rows(s, b, e);
}

void cpu_spmm(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
              const float *x, int64_t f, float *y)
{
    if (row_end <= row_begin || f <= 0)
        return;
    spmm_ctx s = {.a = a, .row_begin = row_begin, .row_end = row_end, .x = x, .f = f, .y = y};
    int64_t rows = row_end - row_begin;
    int64_t nnz = a->rowptr[row_end] - a->rowptr[row_begin];
    int ntasks = cpu_tasks_for(c, (nnz + rows) * f, CPU_GRAIN);
    if (ntasks > rows)
        ntasks = (int)rows;
    cpu_run(c, CPU_TIME_SPMM, ntasks, spmm_task, &s);
}

/* ---- spmm with dropout on the sparse values (a sparse first layer) ------------------ */

typedef struct spmm_dropout_ctx {
    const bv_csr *a;
    float p, scale;
    uint64_t key, offset;
    int64_t row_stride;
    const float *x;
    int64_t ldx, f;
    float *y;
    int64_t ldy;
} spmm_dropout_ctx;

/* The dropped-out value of edge k of row i: the mask dropout_forward would give the
 * dense element (i, col), so the sparse and dense paths train the same model. */
static inline float kept_value(const spmm_dropout_ctx *s, int64_t i, int64_t k)
{
    float v = s->a->values[k];
    if (s->p <= 0.0f)
        return v;
    uint64_t index = s->offset + (uint64_t)(i * s->row_stride + s->a->colidx[k]);
    return cpu_dropout_uniform(s->key, index) >= s->p ? v * s->scale : 0.0f;
}

/* A dropped value adds w x = 0 x (or -0) to its output row instead of being skipped: the
 * row starts at +0 and a float sum that starts at +0 is never -0, so adding a zero leaves
 * it exactly as it was, and the kept/dropped branch, taken at random with p = 0.6, no
 * longer mispredicts. Widths of nv x 8 (the usual head sizes) keep the row in registers
 * and add in the same order as the any-width loop, so every path gives the same bits. */
CPU_VEC_INLINE void spmm_dropout_rows_vec(const spmm_dropout_ctx *s, int64_t b, int64_t e,
                                          int nv)
{
    for (int64_t i = b; i < e; i++) {
        vec8f acc[8];
        for (int v = 0; v < nv; v++)
            acc[v] = vec8_splat(0.0f);
        for (int64_t k = s->a->rowptr[i]; k < s->a->rowptr[i + 1]; k++) {
            const float *xr = s->x + (int64_t)s->a->colidx[k] * s->ldx;
            vec8f w = vec8_splat(kept_value(s, i, k));
            for (int v = 0; v < nv; v++)
                acc[v] += w * vec8_load(xr + 8 * v, 8);
        }
        float *yr = s->y + i * s->ldy;
        for (int v = 0; v < nv; v++)
            vec8_store(yr + 8 * v, acc[v], 8);
    }
}

CPU_VEC_INLINE void spmm_dropout_rows_body(const spmm_dropout_ctx *s, int64_t b, int64_t e)
{
    switch (s->f) {
    case 8: spmm_dropout_rows_vec(s, b, e, 1); return;
    case 16: spmm_dropout_rows_vec(s, b, e, 2); return;
    case 32: spmm_dropout_rows_vec(s, b, e, 4); return;
    case 64: spmm_dropout_rows_vec(s, b, e, 8); return;
    default: break;
    }
    for (int64_t i = b; i < e; i++) {
        float *yr = s->y + i * s->ldy;
        memset(yr, 0, (size_t)s->f * sizeof *yr);
        for (int64_t k = s->a->rowptr[i]; k < s->a->rowptr[i + 1]; k++)
            row_axpy(s->f, kept_value(s, i, k), s->x + (int64_t)s->a->colidx[k] * s->ldx, yr);
    }
}
CPU_DEFINE_DISPATCH(spmm_dropout_rows, (const spmm_dropout_ctx *s, int64_t b, int64_t e),
                    (s, b, e))

static void spmm_dropout_task(void *arg, int tid, int ntasks)
{
    const spmm_dropout_ctx *s = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(s->a->rowptr, 0, s->a->nrows, tid, ntasks, &b, &e);
    if (b < e)
        spmm_dropout_rows(s, b, e);
}

static spmm_dropout_ctx spmm_dropout_setup(const bv_csr *a, float p, uint64_t seed,
                                           uint64_t stream, uint64_t offset,
                                           int64_t row_stride)
{
    spmm_dropout_ctx s = {.a = a, .p = p >= 1.0f ? 1.0f : p, .offset = offset,
                          .row_stride = row_stride};
    s.scale = p > 0.0f && p < 1.0f ? 1.0f / (1.0f - p) : 1.0f;
    s.key = cpu_dropout_key(seed, stream);
    return s;
}

void cpu_spmm_dropout(bv_compute *c, const bv_csr *a, float p, uint64_t seed, uint64_t stream,
                      uint64_t offset, int64_t row_stride, const float *x, int64_t ldx,
                      int64_t f, float *y, int64_t ldy)
{
    if (a->nrows <= 0 || f <= 0)
        return;
    spmm_dropout_ctx s = spmm_dropout_setup(a, p, seed, stream, offset, row_stride);
    s.x = x;
    s.ldx = ldx;
    s.f = f;
    s.y = y;
    s.ldy = ldy;
    int ntasks = cpu_tasks_for(c, (a->nnz + a->nrows) * f, CPU_GRAIN);
    if (ntasks > a->nrows)
        ntasks = (int)a->nrows;
    cpu_run(c, CPU_TIME_SPMM, ntasks, spmm_dropout_task, &s);
}

/* The weight gradient scatters into rows of dx named by columns. Each task owns a range of
 * dx rows and scans every nonzero in edge order, hashing and adding only those whose
 * column it owns (edge_scores_backward's dsrc scheme): each dx row receives its terms in
 * the serial loop's order, so the bits do not depend on the thread count. A dropped value
 * adds a zero, as in the forward (dx starts at +0 or at a sum, never at -0). */
CPU_VEC_INLINE void spmm_dropout_backward_x_cols(const spmm_dropout_ctx *s,
                                                 int64_t col_begin, int64_t col_end, int nv)
{
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    for (int64_t i = 0; i < s->a->nrows; i++)
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            int64_t col = colidx[k];
            if (col < col_begin || col >= col_end)
                continue;
            float w = kept_value(s, i, k);
            if (w == 0.0f)
                continue;
            const float *xr = s->x + i * s->ldx;
            float *yr = s->y + col * s->ldy;
            if (nv == 0) {
                row_axpy(s->f, w, xr, yr);
                continue;
            }
            vec8f wv = vec8_splat(w);
            for (int v = 0; v < nv; v++)
                vec8_store(yr + 8 * v, vec8_load(yr + 8 * v, 8) + wv * vec8_load(xr + 8 * v, 8),
                           8);
        }
}

/* head-sized rows (nv x 8 floats) as vectors, the same multiply and add per element */
CPU_VEC_INLINE void spmm_dropout_backward_x_range_body(const spmm_dropout_ctx *s, int64_t col_begin,
                                                 int64_t col_end)
{
    switch (s->f) {
    case 8: spmm_dropout_backward_x_cols(s, col_begin, col_end, 1); break;
    case 16: spmm_dropout_backward_x_cols(s, col_begin, col_end, 2); break;
    case 32: spmm_dropout_backward_x_cols(s, col_begin, col_end, 4); break;
    case 64: spmm_dropout_backward_x_cols(s, col_begin, col_end, 8); break;
    default: spmm_dropout_backward_x_cols(s, col_begin, col_end, 0); break;
    }
}
CPU_DEFINE_DISPATCH(spmm_dropout_backward_x_range,
                    (const spmm_dropout_ctx *s, int64_t col_begin, int64_t col_end),
                    (s, col_begin, col_end))

static void spmm_dropout_backward_x_task(void *arg, int tid, int ntasks)
{
    const spmm_dropout_ctx *s = arg;
    int64_t col_begin, col_end;
    cpu_split(s->a->ncols, tid, ntasks, &col_begin, &col_end);
    spmm_dropout_backward_x_range(s, col_begin, col_end);
}

void cpu_spmm_dropout_backward_x(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                                 uint64_t stream, uint64_t offset, int64_t row_stride,
                                 const float *dy, int64_t lddy, int64_t f, float *dx,
                                 int64_t lddx)
{
    if (a->nrows <= 0 || f <= 0)
        return;
    spmm_dropout_ctx s = spmm_dropout_setup(a, p, seed, stream, offset, row_stride);
    s.x = dy;
    s.ldx = lddy;
    s.f = f;
    s.y = dx;
    s.ldy = lddx;
    int ntasks = cpu_tasks_for(c, (a->nnz + a->nrows) * f, CPU_GRAIN);
    if (ntasks > a->ncols)
        ntasks = (int)a->ncols;
    cpu_run(c, CPU_TIME_SPMM, ntasks, spmm_dropout_backward_x_task, &s);
}
