/* A graph server's part of the graph (graph_view.h). Every process that needs a part
 * derives it from the whole dataset alone, so the two sides of every exchange list the
 * same vertices in the same order without telling each other. */
#include "graph_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

typedef struct col_val {
    int32_t col;
    float val;
} col_val;

static int compare_col(const void *a, const void *b)
{
    const col_val *x = a, *y = b;
    return (x->col > y->col) - (x->col < y->col);
}

/* Rows take[0 .. ntake) of a (values optional), columns through local_of, each row
 * sorted by its new columns; `rows` rows in all (the rest empty). */
static bv_csr *remap_rows(const bv_csr *a, const int64_t *take, int64_t ntake,
                          const int32_t *local_of, int64_t rows, int64_t cols)
{
    int64_t nnz = 0, widest = 1;
    for (int64_t i = 0; i < ntake; i++) {
        int64_t len = a->rowptr[take[i] + 1] - a->rowptr[take[i]];
        nnz += len;
        if (len > widest)
            widest = len;
    }
    bv_csr *m = bv_csr_new(rows, cols, nnz);
    col_val *row = malloc((size_t)widest * sizeof *row);
    if (!m || !row) {
        bv_csr_free(m);
        free(row);
        return NULL;
    }
    if (!a->values) {
        free(m->values);
        m->values = NULL;
    }
    int64_t out = 0;
    for (int64_t r = 0; r < rows; r++) {
        m->rowptr[r] = out;
        if (r >= ntake)
            continue;
        int64_t k = 0;
        for (int64_t e = a->rowptr[take[r]]; e < a->rowptr[take[r] + 1]; e++)
            row[k++] = (col_val){local_of[a->colidx[e]], a->values ? a->values[e] : 0.0f};
        qsort(row, (size_t)k, sizeof *row, compare_col);
        for (int64_t i = 0; i < k; i++, out++) {
            m->colidx[out] = row[i].col;
            if (m->values)
                m->values[out] = row[i].val;
        }
    }
    m->rowptr[rows] = out;
    m->nnz = out;
    free(row);
    return m;
}

/* The vertices part `from` keeps as ghosts that part `to` owns: mark[] set for them. */
static void mark_ghosts(const bv_csr *a, const int32_t *part_of, int from, int to,
                        uint8_t *mark)
{
    for (int64_t r = 0; r < a->nrows; r++)
        if (part_of[r] == from)
            for (int64_t e = a->rowptr[r]; e < a->rowptr[r + 1]; e++)
                if (part_of[a->colidx[e]] == to)
                    mark[a->colidx[e]] = 1;
}

static bv_status make_lists(bv_graph_view *v, const bv_graph_dataset *g,
                            const int32_t *part_of, const int32_t *local_of, uint8_t *mark)
{
    int parts = v->parts, me = v->part;
    v->send_off = calloc((size_t)parts + 1, sizeof *v->send_off);
    v->recv_off = calloc((size_t)parts + 1, sizeof *v->recv_off);
    int64_t ghosts = v->local->num_nodes - v->owned;
    int64_t sends = v->owned * (parts - 1); /* an upper bound: all my rows to every part */
    v->send_idx = malloc((size_t)(sends + 1) * sizeof *v->send_idx);
    v->recv_idx = malloc((size_t)(ghosts + 1) * sizeof *v->recv_idx);
    if (!v->send_off || !v->recv_off || !v->send_idx || !v->recv_idx)
        return BV_ERR_NOMEM;
    int64_t ns = 0, nr = 0;
    for (int q = 0; q < parts; q++) {
        v->send_off[q] = ns;
        v->recv_off[q] = nr;
        if (q == me)
            continue;
        for (int64_t k = 0; k < v->owned; k++)
            mark[v->global_of[k]] = 0;
        mark_ghosts(&g->adj, part_of, q, me, mark);
        for (int64_t k = 0; k < v->owned; k++) /* owned rows are in global order */
            if (mark[v->global_of[k]])
                v->send_idx[ns++] = k;
        for (int64_t k = v->owned; k < v->local->num_nodes; k++)
            if (part_of[v->global_of[k]] == q)
                v->recv_idx[nr++] = local_of[v->global_of[k]];
    }
    v->send_off[parts] = ns;
    v->recv_off[parts] = nr;
    return BV_OK;
}

bv_status bv_graph_view_make(const bv_graph_dataset *g, const int32_t *part_of, int parts,
                             int part, bool with_norm, bv_graph_view *out, bv_error *err)
{
    memset(out, 0, sizeof *out);
    int64_t n = g->num_nodes, f = g->num_features;
    if (parts < 1 || part < 0 || part >= parts || parts > n)
        return bv_error_set(err, BV_ERR_INVALID, "cannot make part %d of %d of a graph of "
                            "%lld vertices", part, parts, (long long)n);
    out->parts = parts;
    out->part = part;
    int32_t *local_of = malloc((size_t)n * sizeof *local_of);
    uint8_t *mark = calloc((size_t)n + 1, 1);
    bv_graph_dataset *d = out->local = calloc(1, sizeof *d);
    bv_status st = local_of && mark && d ? BV_OK : BV_ERR_NOMEM;
    if (st == BV_OK) {
        for (int64_t u = 0; u < n; u++)
            out->owned += part_of[u] == part;
        if (out->owned == 0) {
            free(local_of);
            free(mark);
            bv_graph_view_free(out);
            return bv_error_set(err, BV_ERR_INVALID, "part %d of %d of the graph is empty: "
                                "use fewer graph servers", part, parts);
        }
        for (int64_t r = 0; r < n; r++)
            if (part_of[r] == part)
                for (int64_t e = g->adj.rowptr[r]; e < g->adj.rowptr[r + 1]; e++)
                    if (part_of[g->adj.colidx[e]] != part)
                        mark[g->adj.colidx[e]] = 1;
        int64_t ghosts = 0;
        for (int64_t u = 0; u < n; u++)
            ghosts += mark[u];
        int64_t rows = out->owned + ghosts;
        out->global_of = malloc((size_t)rows * sizeof *out->global_of);
        if (!out->global_of)
            st = BV_ERR_NOMEM;
        for (int64_t u = 0, k = 0, o = 0; st == BV_OK && u < n; u++) {
            local_of[u] = -1;
            if (part_of[u] == part)
                local_of[u] = (int32_t)o++;
            else if (mark[u])
                local_of[u] = (int32_t)(out->owned + k++);
            if (local_of[u] >= 0)
                out->global_of[local_of[u]] = u;
        }
        for (int64_t u = 0; u < n; u++) {
            out->train_total += g->split[u] == BV_SPLIT_TRAIN && g->labels[u] >= 0;
            for (int64_t e = g->adj.rowptr[u]; e < g->adj.rowptr[u + 1]; e++)
                out->edge_cut += /* once per undirected edge: from its lower part */
                    part_of[u] < part_of[g->adj.colidx[e]];
        }
        size_t name_len = strlen(g->name ? g->name : "graph") + 16;
        d->name = malloc(name_len);
        d->num_nodes = rows;
        d->num_features = f;
        d->num_classes = g->num_classes;
        d->features = bv_alloc_aligned((size_t)(rows * f + 1) * sizeof(float));
        d->labels = bv_alloc_aligned((size_t)(rows + 1) * sizeof(int32_t));
        d->split = bv_alloc_aligned((size_t)rows + 1);
        bv_csr *adj = st == BV_OK ? remap_rows(&g->adj, out->global_of, out->owned, local_of,
                                               rows, rows)
                                  : NULL;
        if (st != BV_OK || !d->name || !d->features || !d->labels || !d->split || !adj) {
            bv_csr_free(adj);
            st = BV_ERR_NOMEM;
        } else {
            snprintf(d->name, name_len, "%s/part%d", g->name ? g->name : "graph", part);
            /* the dataset owns its arrays as bv_alloc_aligned blocks (bv_graph_free) */
            d->adj.nrows = adj->nrows;
            d->adj.ncols = adj->ncols;
            d->adj.nnz = adj->nnz;
            d->adj.rowptr = bv_alloc_aligned((size_t)(rows + 1) * sizeof(int64_t));
            d->adj.colidx = bv_alloc_aligned((size_t)(adj->nnz + 1) * sizeof(int32_t));
            if (d->adj.rowptr && d->adj.colidx) {
                memcpy(d->adj.rowptr, adj->rowptr, (size_t)(rows + 1) * sizeof(int64_t));
                memcpy(d->adj.colidx, adj->colidx, (size_t)adj->nnz * sizeof(int32_t));
                d->num_undirected_edges = adj->nnz / 2;
            } else {
                st = BV_ERR_NOMEM;
            }
            bv_csr_free(adj);
        }
        for (int64_t k = 0; st == BV_OK && k < rows; k++) {
            int64_t u = out->global_of[k];
            memcpy(d->features + k * f, g->features + u * f, (size_t)f * sizeof(float));
            bool own = k < out->owned;
            d->labels[k] = own ? g->labels[u] : -1;
            d->split[k] = own ? g->split[u] : BV_SPLIT_NONE;
            d->split_count[d->split[k]]++;
        }
        if (st == BV_OK && with_norm) {
            bv_csr *norm = bv_graph_gcn_norm_adj(g);
            out->adj_norm =
                norm ? remap_rows(norm, out->global_of, out->owned, local_of, rows, rows) : NULL;
            bv_csr_free(norm);
            if (!out->adj_norm)
                st = BV_ERR_NOMEM;
        }
        if (st == BV_OK)
            st = make_lists(out, g, part_of, local_of, mark);
    }
    free(local_of);
    free(mark);
    if (st != BV_OK) {
        bv_graph_view_free(out);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for part %d of the graph", part);
    }
    return BV_OK;
}

void bv_graph_view_free(bv_graph_view *v)
{
    if (!v)
        return;
    bv_graph_free(v->local);
    bv_csr_free(v->adj_norm);
    free(v->global_of);
    free(v->send_off);
    free(v->send_idx);
    free(v->recv_off);
    free(v->recv_idx);
    memset(v, 0, sizeof *v);
}
