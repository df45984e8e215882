/* Sparse times dense (spmm) for the CPU plugin: rows are split across threads by their
 * nonzero count, and each output row is summed by one thread in edge order, so the result
 * is bit-identical for every thread count. */
#include <string.h>

#include "cpu_internal.h"

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

static void spmm_task(void *arg, int tid, int ntasks)
{
    const spmm_ctx *s = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(s->a->rowptr, s->row_begin, s->row_end, tid, ntasks, &b, &e);
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    const float *values = s->a->values;
    int64_t f = s->f;
    for (int64_t i = b; i < e; i++) {
        float *yr = s->y + (i - s->row_begin) * f;
        memset(yr, 0, (size_t)f * sizeof *yr);
        if (values)
            for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++)
                row_axpy(f, values[k], s->x + (int64_t)colidx[k] * f, yr);
        else
            for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++)
                row_add(f, s->x + (int64_t)colidx[k] * f, yr);
    }
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
    cpu_pool_run(c->pool, ntasks, spmm_task, &s);
}
