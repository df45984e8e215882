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
                      g->split, g->features_csr.rowptr, g->features_csr.colidx,
                      g->features_csr.values};
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

/* Sorts a row's entries by column (insertion sort: rows are short and almost always
 * sorted already), keeps the last of repeated columns (as a dense row written left to right
 * would) and drops zeros; returns the entries left. */
int64_t bv_graph_tidy_row(int32_t *col, float *val, int64_t len)
{
    for (int64_t i = 1; i < len; i++) {
        int32_t c = col[i];
        float v = val[i];
        int64_t j = i;
        for (; j > 0 && col[j - 1] > c; j--) {
            col[j] = col[j - 1];
            val[j] = val[j - 1];
        }
        col[j] = c;
        val[j] = v;
    }
    int64_t out = 0;
    for (int64_t i = 0; i < len; i++) {
        if (i + 1 < len && col[i + 1] == col[i])
            continue; /* a later repeat wins (a stable sort keeps their order) */
        if (val[i] != 0.0f) {
            col[out] = col[i];
            val[out++] = val[i];
        }
    }
    return out;
}

/* A heap copy of n floats (count n) in place of *p when *p views the cache mapping. */
static bv_status own_floats(bv_graph_dataset *g, float **p, size_t n, bv_error *err)
{
    if (bv_graph_owns(g, *p) || !*p)
        return BV_OK;
    float *copy = bv_alloc_aligned((n ? n : 1) * sizeof *copy);
    if (!copy)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory copying %zu features", n);
    if (n)
        memcpy(copy, *p, n * sizeof *copy);
    *p = copy;
    return BV_OK;
}

bv_status bv_graph_row_normalize_features(bv_graph_dataset *g, bv_error *err)
{
    bool sparse = bv_graph_features_sparse(g);
    bv_csr *x = &g->features_csr;
    int64_t cols = g->num_features;
    bv_status st = sparse ? own_floats(g, &x->values, (size_t)x->nnz, err)
                          : own_floats(g, &g->features,
                                       (size_t)g->num_nodes * (size_t)cols, err);
    if (st != BV_OK)
        return st;
    /* The dense row's zeros add nothing to the sum (x + 0.0 is x): both forms give the
     * same sums, and so the same bits. */
    for (int64_t r = 0; r < g->num_nodes; r++) {
        float *row = sparse ? x->values + x->rowptr[r] : g->features + r * cols;
        int64_t len = sparse ? x->rowptr[r + 1] - x->rowptr[r] : cols;
        double sum = 0.0;
        for (int64_t c = 0; c < len; c++)
            sum += row[c];
        if (sum == 0.0)
            continue; /* Kipf sets 1/0 to 0, which leaves the row as it was (all zero) */
        for (int64_t c = 0; c < len; c++)
            row[c] = (float)(row[c] / sum);
    }
    return BV_OK;
}

int64_t bv_graph_features_nnz(const bv_graph_dataset *g)
{
    if (bv_graph_features_sparse(g))
        return g->features_csr.nnz;
    int64_t nnz = 0, total = g->num_nodes * g->num_features;
    for (int64_t i = 0; i < total; i++)
        nnz += g->features[i] != 0.0f;
    return nnz;
}

static size_t csr_bytes(const bv_csr *x)
{
    return x->rowptr ? (size_t)(x->nrows + 1) * sizeof(int64_t) +
                           (size_t)x->nnz * (sizeof(int32_t) + (x->values ? sizeof(float) : 0))
                     : 0;
}

size_t bv_graph_features_bytes(const bv_graph_dataset *g)
{
    return bv_graph_features_sparse(g)
               ? csr_bytes(&g->features_csr)
               : (size_t)g->num_nodes * (size_t)g->num_features * sizeof(float);
}

size_t bv_graph_dataset_bytes(const bv_graph_dataset *g)
{
    return csr_bytes(&g->adj) + bv_graph_features_bytes(g) +
           (size_t)g->num_nodes * (sizeof(int32_t) + sizeof(uint8_t));
}

static void free_owned(bv_graph_dataset *g, void *p)
{
    if (bv_graph_owns(g, p))
        bv_free_aligned(p);
}

static bv_status densify(bv_graph_dataset *g, bv_error *err)
{
    bv_csr *x = &g->features_csr;
    size_t count = (size_t)g->num_nodes * (size_t)g->num_features;
    float *d = bv_alloc_aligned((count ? count : 1) * sizeof *d);
    if (!d)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld x %lld dense features",
                            (long long)g->num_nodes, (long long)g->num_features);
    memset(d, 0, count * sizeof *d);
    for (int64_t r = 0; r < g->num_nodes; r++)
        for (int64_t k = x->rowptr[r]; k < x->rowptr[r + 1]; k++)
            d[r * g->num_features + x->colidx[k]] = x->values[k];
    free_owned(g, x->rowptr);
    free_owned(g, x->colidx);
    free_owned(g, x->values);
    memset(x, 0, sizeof *x);
    g->features = d;
    return BV_OK;
}

static bv_status sparsify(bv_graph_dataset *g, int64_t nnz, bv_error *err)
{
    bv_csr x = {.nrows = g->num_nodes, .ncols = g->num_features, .nnz = nnz};
    x.rowptr = bv_alloc_aligned((size_t)(g->num_nodes + 1) * sizeof *x.rowptr);
    x.colidx = bv_alloc_aligned((size_t)(nnz + 1) * sizeof *x.colidx);
    x.values = bv_alloc_aligned((size_t)(nnz + 1) * sizeof *x.values);
    if (!x.rowptr || !x.colidx || !x.values) {
        bv_free_aligned(x.rowptr);
        bv_free_aligned(x.colidx);
        bv_free_aligned(x.values);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld sparse features",
                            (long long)nnz);
    }
    bv_csr_set_dense(&x, g->features);
    free_owned(g, g->features);
    g->features = NULL;
    g->features_csr = x;
    return BV_OK;
}

bv_status bv_graph_features_convert(bv_graph_dataset *g, bv_features_form form, bv_error *err)
{
    bool sparse = bv_graph_features_sparse(g);
    if (form == BV_FEATURES_DENSE)
        return sparse ? densify(g, err) : BV_OK;
    if (form == BV_FEATURES_SPARSE && sparse)
        return BV_OK;
    int64_t nnz = bv_graph_features_nnz(g); /* a count over the dense array: once */
    double total = (double)g->num_nodes * (double)g->num_features;
    if (form == BV_FEATURES_AUTO && (double)nnz > BV_FEATURES_SPARSE_DENSITY * total)
        return sparse ? densify(g, err) : BV_OK;
    return sparse ? BV_OK : sparsify(g, nnz, err);
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
