/* Sparse feature rows on the wire (sparse_rows.h). */
#include "sparse_rows.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static size_t packed_bytes(int64_t rows, int64_t nnz)
{
    return 3 * sizeof(int64_t) + (size_t)(rows + 1) * sizeof(int64_t) +
           (size_t)nnz * (sizeof(int32_t) + sizeof(float));
}

uint8_t *bv_sparse_rows_pack(const bv_csr *x, int64_t r0, int64_t rows, size_t *bytes)
{
    int64_t base = x->rowptr[r0], nnz = x->rowptr[r0 + rows] - base;
    *bytes = packed_bytes(rows, nnz);
    uint8_t *p = malloc(*bytes);
    if (!p)
        return NULL;
    int64_t head[3] = {rows, x->ncols, nnz};
    uint8_t *at = p;
    memcpy(at, head, sizeof head);
    at += sizeof head;
    for (int64_t r = 0; r <= rows; r++, at += sizeof(int64_t)) {
        int64_t v = x->rowptr[r0 + r] - base;
        memcpy(at, &v, sizeof v);
    }
    memcpy(at, x->colidx + base, (size_t)nnz * sizeof(int32_t));
    at += (size_t)nnz * sizeof(int32_t);
    memcpy(at, x->values + base, (size_t)nnz * sizeof(float));
    return p;
}

bv_csr *bv_sparse_rows_unpack(const void *p, size_t bytes, int64_t rows, int64_t cols,
                              bv_error *err)
{
    int64_t head[3];
    if (bytes < sizeof head) {
        bv_error_set(err, BV_ERR_CORRUPT, "sparse rows of %zu bytes, shorter than their counts",
                     bytes);
        return NULL;
    }
    memcpy(head, p, sizeof head);
    if (head[0] != rows || head[1] != cols || head[2] < 0 ||
        (uint64_t)head[2] > bytes / (sizeof(int32_t) + sizeof(float)) ||
        packed_bytes(rows, head[2]) != bytes) {
        bv_error_set(err, BV_ERR_CORRUPT, "sparse rows say %lld x %lld with %lld nonzeros in %zu "
                     "bytes, the task %lld x %lld", (long long)head[0], (long long)head[1],
                     (long long)head[2], bytes, (long long)rows, (long long)cols);
        return NULL;
    }
    int64_t nnz = head[2];
    bv_csr *x = bv_csr_new(rows, cols, nnz);
    if (!x) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld sparse rows", (long long)rows);
        return NULL;
    }
    const uint8_t *at = (const uint8_t *)p + sizeof head;
    memcpy(x->rowptr, at, (size_t)(rows + 1) * sizeof(int64_t));
    at += (size_t)(rows + 1) * sizeof(int64_t);
    memcpy(x->colidx, at, (size_t)nnz * sizeof(int32_t));
    at += (size_t)nnz * sizeof(int32_t);
    memcpy(x->values, at, (size_t)nnz * sizeof(float));
    bool ok = x->rowptr[0] == 0 && x->rowptr[rows] == nnz;
    for (int64_t r = 0; ok && r < rows; r++)
        ok = x->rowptr[r] <= x->rowptr[r + 1];
    for (int64_t k = 0; ok && k < nnz; k++)
        ok = x->colidx[k] >= 0 && x->colidx[k] < cols;
    if (!ok) {
        bv_csr_free(x);
        bv_error_set(err, BV_ERR_CORRUPT, "sparse rows with a row pointer or column out of "
                     "range");
        return NULL;
    }
    return x;
}
