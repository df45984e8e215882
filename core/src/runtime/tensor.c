/* Dense tensors and CSR matrices: allocation, freeing, transpose (tensor.h). */
#include "bivouac/tensor.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Buffers of 4 MiB and more are aligned to 2 MiB and asked to be backed by transparent
 * huge pages (on kernels where THP is "madvise", the common default, nothing is otherwise):
 * SpMM and the gathers read rows of a large feature matrix at random, and with 4 KiB pages
 * nearly every row missed the TLB. Zeroing after the advice faults the huge pages in. */
#define BV_HUGE_MIN (4u << 20)
#define BV_HUGE_ALIGN (2u << 20)

void *bv_alloc_aligned(size_t bytes)
{
    size_t align = bytes >= BV_HUGE_MIN ? BV_HUGE_ALIGN : 64;
    size_t rounded = (bytes + align - 1) & ~(size_t)(align - 1);
    if (!rounded)
        rounded = align;
    void *p = aligned_alloc(align, rounded);
    if (!p)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (align == BV_HUGE_ALIGN)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure changes nothing */
#endif
    memset(p, 0, rounded);
    return p;
}

void bv_free_aligned(void *p)
{
    free(p);
}

bv_tensor *bv_tensor_new(int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > BV_TENSOR_MAX_DIMS)
        return NULL;
    bv_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= shape[i];
    }
    t->data = bv_alloc_aligned((size_t)n * sizeof(float));
    if (!t->data) {
        free(t);
        return NULL;
    }
    return t;
}

bv_tensor *bv_tensor_new2(int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return bv_tensor_new(2, shape);
}

void bv_tensor_free(bv_tensor *t)
{
    if (!t)
        return;
    if (!t->view)
        bv_free_aligned(t->data);
    free(t);
}

int64_t bv_tensor_numel(const bv_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int64_t bv_tensor_rows(const bv_tensor *t)
{
    return t->shape[0];
}

int64_t bv_tensor_cols(const bv_tensor *t)
{
    int64_t n = 1;
    for (int i = 1; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

bv_csr *bv_csr_new(int64_t nrows, int64_t ncols, int64_t nnz)
{
    bv_csr *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->nrows = nrows;
    m->ncols = ncols;
    m->nnz = nnz;
    m->owned = 1;
    m->rowptr = calloc((size_t)nrows + 1, sizeof *m->rowptr);
    m->colidx = malloc((size_t)(nnz ? nnz : 1) * sizeof *m->colidx);
    m->values = malloc((size_t)(nnz ? nnz : 1) * sizeof *m->values);
    if (!m->rowptr || !m->colidx || !m->values) {
        bv_csr_free(m);
        return NULL;
    }
    return m;
}

void bv_csr_free(bv_csr *m)
{
    if (!m)
        return;
    if (m->owned) {
        free(m->rowptr);
        free(m->colidx);
        free(m->values);
    }
    free(m);
}

bv_csr *bv_csr_transpose(const bv_csr *m)
{
    return bv_csr_transpose_perm(m, NULL);
}

bv_csr *bv_csr_transpose_perm(const bv_csr *m, int64_t **perm)
{
    bv_csr *t = bv_csr_new(m->ncols, m->nrows, m->nnz);
    if (!t)
        return NULL;
    int64_t *p = NULL;
    if (perm && !(p = malloc((size_t)(m->nnz ? m->nnz : 1) * sizeof *p))) {
        bv_csr_free(t);
        return NULL;
    }
    for (int64_t e = 0; e < m->nnz; e++)
        t->rowptr[m->colidx[e] + 1]++;
    for (int64_t r = 0; r < t->nrows; r++)
        t->rowptr[r + 1] += t->rowptr[r];
    int64_t *next = malloc((size_t)(t->nrows + 1) * sizeof *next);
    if (!next) {
        free(p);
        bv_csr_free(t);
        return NULL;
    }
    memcpy(next, t->rowptr, (size_t)(t->nrows + 1) * sizeof *next);
    /* Rows of m in ascending order, so each transposed row gets ascending columns. */
    for (int64_t r = 0; r < m->nrows; r++) {
        for (int64_t e = m->rowptr[r]; e < m->rowptr[r + 1]; e++) {
            int64_t dst = next[m->colidx[e]]++;
            t->colidx[dst] = (int32_t)r;
            t->values[dst] = m->values ? m->values[e] : 1.0f;
            if (p)
                p[dst] = e;
        }
    }
    free(next);
    if (perm)
        *perm = p;
    return t;
}
