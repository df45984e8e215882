/* Sparse feature rows on the wire: an interval's rows of the dataset's features_csr as
 * one task array (BV_TASK_SPARSE_INPUT, role_msg.h), so that a tensor or function worker
 * is sent and keeps the nonzeros, never an N x F array. Internal to core/src/engine/graph.
 *
 * Layout, native byte order: int64 rows, cols, nnz; int64 rowptr[rows + 1] (from 0);
 * int32 colidx[nnz]; float values[nnz]. */
#ifndef BIVOUAC_SPARSE_ROWS_H
#define BIVOUAC_SPARSE_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/tensor.h"

/* Rows [r0, r0 + rows) of x packed (malloc'd; *bytes its size); NULL when out of memory. */
uint8_t *bv_sparse_rows_pack(const bv_csr *x, int64_t r0, int64_t rows, size_t *bytes);

/* A packed array back as a CSR of `rows` rows and `cols` columns, every count, row pointer
 * and column checked (BV_ERR_CORRUPT names what is wrong). */
bv_csr *bv_sparse_rows_unpack(const void *p, size_t bytes, int64_t rows, int64_t cols,
                              bv_error *err);

#endif
