/* Dense float32 tensors (row-major) and CSR sparse matrices. */
#ifndef BIVOUAC_TENSOR_H
#define BIVOUAC_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BV_TENSOR_MAX_DIMS 4

typedef struct bv_tensor {
    float *data; /* owned unless `view` */
    int ndim;
    int64_t shape[BV_TENSOR_MAX_DIMS];
    int view; /* 1: data belongs to someone else */
} bv_tensor;

/* Allocates a zeroed rows x cols tensor (64-byte aligned). Returns NULL on failure. */
bv_tensor *bv_tensor_new2(int64_t rows, int64_t cols);
bv_tensor *bv_tensor_new(int ndim, const int64_t *shape);
void bv_tensor_free(bv_tensor *t);
int64_t bv_tensor_numel(const bv_tensor *t);
int64_t bv_tensor_rows(const bv_tensor *t); /* shape[0] */
int64_t bv_tensor_cols(const bv_tensor *t); /* product of the remaining dims */

/* 64-byte aligned zeroed allocation for kernels' buffers; free with bv_free_aligned. */
void *bv_alloc_aligned(size_t bytes);
void bv_free_aligned(void *p);

/* Compressed sparse rows. Column indices within a row are ascending. */
typedef struct bv_csr {
    int64_t nrows;
    int64_t ncols;
    int64_t nnz;
    int64_t *rowptr; /* nrows + 1 */
    int32_t *colidx; /* nnz */
    float *values;   /* nnz; NULL means all ones */
    int owned;       /* 1: free the arrays with the struct */
} bv_csr;

bv_csr *bv_csr_new(int64_t nrows, int64_t ncols, int64_t nnz);
void bv_csr_free(bv_csr *m);
/* Fills a's row pointers, columns (ascending) and values with the nonzeros of x, an
 * a->nrows x a->ncols row-major array; a's arrays hold a->nnz entries, x's nonzero count. */
void bv_csr_set_dense(bv_csr *a, const float *x);
/* The transpose as a new CSR (counting sort; keeps columns ascending). */
bv_csr *bv_csr_transpose(const bv_csr *m);
/* The same, and *perm (nnz entries, from bv_alloc_aligned: free it with bv_free_aligned)
 * maps each edge of the transpose to its index in m, so per-edge arrays laid out in m's
 * order can be read in the transpose's. */
bv_csr *bv_csr_transpose_perm(const bv_csr *m, int64_t **perm);

#ifdef __cplusplus
}
#endif
#endif
