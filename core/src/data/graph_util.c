/* Graph dataset plumbing: allocation and freeing, building the symmetric CSR from edge
 * pairs, and the two GCN preprocessing steps (feature row normalization, Â). */
#include "bivouac/graph.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bivouac/log.h"
#include "graph_internal.h"

bv_graph_dataset *bv_graph_dataset_alloc(const char *name)
{
    bv_graph_dataset *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->name = strdup(name ? name : "");
    if (!g->name) {
        free(g);
        return NULL;
    }
    return g;
}

bv_status bv_graph_check_split(const bv_graph_dataset *g, const char *split_file,
                               bv_error *err)
{
    char marks[256] = "";
    int64_t labelled = 0;
    for (int64_t i = 0; i < g->num_nodes; i++)
        labelled += g->split[i] == BV_SPLIT_TRAIN && g->labels[i] >= 0;
    if (g->split_count[BV_SPLIT_TRAIN] == 0) {
        if (split_file)
            snprintf(marks, sizeof marks, " (%s marks none 'train')", split_file);
        return bv_error_set(err, BV_ERR_INVALID, "dataset %s has no training vertices%s",
                            g->name, marks);
    }
    if (labelled == 0)
        return bv_error_set(err, BV_ERR_INVALID,
                            "dataset %s has no labelled training vertices (all %lld marked "
                            "'train' have label -1)",
                            g->name, (long long)g->split_count[BV_SPLIT_TRAIN]);
    static const char *const words[4] = {[BV_SPLIT_VAL] = "val", [BV_SPLIT_TEST] = "test"};
    for (int which = BV_SPLIT_VAL; which <= BV_SPLIT_TEST; which++) {
        if (g->split_count[which] != 0)
            continue;
        if (split_file)
            snprintf(marks, sizeof marks, " (%s marks none '%s')", split_file, words[which]);
        bv_log(BV_LOG_WARN,
               which == BV_SPLIT_VAL
                   ? "dataset %s has no validation vertices%s: validation loss and accuracy "
                     "read 0, so early stopping and best-on-validation selection have nothing "
                     "to go on"
                   : "dataset %s has no test vertices%s: test loss and accuracy read 0",
               g->name, marks);
    }
    return BV_OK;
}

bool bv_graph_owns(const bv_graph_dataset *g, const void *p)
{
    if (!p)
        return false;
    if (!g->mapping)
        return true;
    const char *lo = g->mapping, *hi = lo + g->mapping_len, *q = p;
    return q < lo || q >= hi;
}

void bv_graph_free(bv_graph_dataset *g)
{
    if (!g)
        return;
    /* Arrays may be a mix: a cached dataset views the mapping, but row normalization
     * replaces the features with a heap copy. */
    void *arrays[] = {g->adj.rowptr, g->adj.colidx, g->adj.values, g->features, g->labels,
                      g->split};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        if (bv_graph_owns(g, arrays[i]))
            bv_free_aligned(arrays[i]);
    if (g->mapping)
        munmap(g->mapping, g->mapping_len);
    free(g->name);
    free(g);
}

static int compare_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

bv_status bv_graph_adj_from_pairs(int64_t n, const int32_t *pairs, int64_t m, bv_csr *adj,
                                  bv_error *err)
{
    memset(adj, 0, sizeof *adj);
    int64_t *rowptr = bv_alloc_aligned((size_t)(n + 1) * sizeof *rowptr);
    if (!rowptr)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld row pointers",
                            (long long)n + 1);
    for (int64_t k = 0; k < m; k++) {
        int32_t u = pairs[2 * k], v = pairs[2 * k + 1];
        if (u != v) {
            rowptr[u + 1]++;
            rowptr[v + 1]++;
        }
    }
    for (int64_t r = 0; r < n; r++)
        rowptr[r + 1] += rowptr[r];
    int64_t nnz = rowptr[n];
    int32_t *colidx = bv_alloc_aligned((size_t)nnz * sizeof *colidx);
    int64_t *next = malloc((size_t)n * sizeof *next);
    if (!colidx || !next) {
        bv_free_aligned(rowptr);
        bv_free_aligned(colidx);
        free(next);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld adjacency entries",
                            (long long)nnz);
    }
    memcpy(next, rowptr, (size_t)n * sizeof *next);
    /* With pairs sorted by (min, max), row r first receives its smaller neighbours (from
     * earlier pairs, in order) and then its larger ones, so rows come out sorted. */
    for (int64_t k = 0; k < m; k++) {
        int32_t u = pairs[2 * k], v = pairs[2 * k + 1];
        if (u != v) {
            colidx[next[u]++] = v;
            colidx[next[v]++] = u;
        }
    }
    free(next);
    /* Unsorted input or duplicates: sort the offending rows and squeeze duplicates out,
     * compacting in place (the write position never passes the read position). */
    int64_t out = 0;
    for (int64_t r = 0; r < n; r++) {
        int64_t begin = rowptr[r], end = rowptr[r + 1];
        bool sorted = true;
        for (int64_t e = begin + 1; e < end && sorted; e++)
            sorted = colidx[e - 1] < colidx[e];
        if (!sorted)
            qsort(colidx + begin, (size_t)(end - begin), sizeof *colidx, compare_int32);
        rowptr[r] = out;
        for (int64_t e = begin; e < end; e++)
            if (e == begin || colidx[e] != colidx[e - 1])
                colidx[out++] = colidx[e];
    }
    rowptr[n] = out;
    adj->nrows = n;
    adj->ncols = n;
    adj->nnz = out;
    adj->rowptr = rowptr;
    adj->colidx = colidx;
    adj->values = NULL;
    adj->owned = 1;
    return BV_OK;
}

bv_status bv_graph_row_normalize_features(bv_graph_dataset *g, bv_error *err)
{
    size_t count = (size_t)g->num_nodes * (size_t)g->num_features;
    if (!bv_graph_owns(g, g->features)) {
        /* The cache mapping is read-only: normalize a private copy. */
        float *copy = bv_alloc_aligned(count * sizeof *copy);
        if (!copy)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory copying %zu features",
                                count);
        if (count)
            memcpy(copy, g->features, count * sizeof *copy);
        g->features = copy;
    }
    int64_t cols = g->num_features;
    for (int64_t r = 0; r < g->num_nodes; r++) {
        float *row = g->features + r * cols;
        double sum = 0.0;
        for (int64_t c = 0; c < cols; c++)
            sum += row[c];
        if (sum == 0.0)
            continue; /* Kipf sets 1/0 to 0, which leaves the row as it was (all zero) */
        for (int64_t c = 0; c < cols; c++)
            row[c] = (float)(row[c] / sum);
    }
    return BV_OK;
}

bv_csr *bv_graph_gcn_norm_adj(const bv_graph_dataset *g)
{
    const bv_csr *a = &g->adj;
    int64_t n = a->nrows;
    bv_csr *m = bv_csr_new(n, n, a->nnz + n);
    double *degree = malloc((size_t)(n ? n : 1) * sizeof *degree);
    if (!m || !degree) {
        bv_csr_free(m);
        free(degree);
        return NULL;
    }
    /* Degrees of A + I (weighted if A has values); the self loop counts once. */
    for (int64_t r = 0; r < n; r++) {
        double d = 1.0;
        for (int64_t e = a->rowptr[r]; e < a->rowptr[r + 1]; e++)
            if (a->colidx[e] != r)
                d += a->values ? a->values[e] : 1.0;
        degree[r] = d;
    }
    int64_t out = 0;
    for (int64_t r = 0; r < n; r++) {
        m->rowptr[r] = out;
        bool self_done = false;
        for (int64_t e = a->rowptr[r]; e <= a->rowptr[r + 1]; e++) {
            bool at_end = e == a->rowptr[r + 1];
            int32_t c = at_end ? INT32_MAX : a->colidx[e];
            if (!self_done && (at_end || c > r)) {
                m->colidx[out] = (int32_t)r;
                m->values[out++] = (float)(1.0 / degree[r]);
                self_done = true;
            }
            if (at_end)
                break;
            if (c == r)
                continue; /* already a self loop in A: the I above replaces it */
            double w = a->values ? a->values[e] : 1.0;
            m->colidx[out] = c;
            m->values[out++] = (float)(w / sqrt(degree[r] * degree[c]));
        }
    }
    m->rowptr[n] = out;
    m->nnz = out;
    free(degree);
    return m;
}
