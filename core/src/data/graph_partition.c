/* Graph partitioning for graph servers: METIS k-way or contiguous ranges, the halos each
 * part exchanges every epoch, and per-part local CSRs (graph_partition.h). */
#include "graph_partition.h"

#include <limits.h>
#include <metis.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

const char *bv_partition_method_name(bv_partition_method m)
{
    return m == BV_PARTITION_METIS ? "metis" : "range";
}

bool bv_partition_method_parse(const char *name, bv_partition_method *out)
{
    if (name && strcmp(name, "metis") == 0)
        *out = BV_PARTITION_METIS;
    else if (name && strcmp(name, "range") == 0)
        *out = BV_PARTITION_RANGE;
    else
        return false;
    return true;
}

/* ---- input checks ----------------------------------------------------------------- */

static bv_status check_csr(const bv_csr *m, const char *what, bv_error *err)
{
    if (m->nrows != m->ncols)
        return bv_error_set(err, BV_ERR_INVALID, "%s is %lld x %lld: a graph's matrix is square",
                            what, (long long)m->nrows, (long long)m->ncols);
    if (m->nrows < 0 || m->nrows > INT32_MAX)
        return bv_error_set(err, BV_ERR_INVALID, "%s has %lld vertices (at most %d)", what,
                            (long long)m->nrows, INT32_MAX);
    if (m->nrows > 0 && (!m->rowptr || (m->nnz > 0 && !m->colidx)))
        return bv_error_set(err, BV_ERR_INVALID, "%s has no row pointers or columns", what);
    if (m->nrows == 0)
        return BV_OK;
    if (m->rowptr[0] != 0 || m->rowptr[m->nrows] != m->nnz)
        return bv_error_set(err, BV_ERR_INVALID,
                            "%s: row pointers run from %lld to %lld, expected 0 to nnz %lld",
                            what, (long long)m->rowptr[0], (long long)m->rowptr[m->nrows],
                            (long long)m->nnz);
    for (int64_t r = 0; r < m->nrows; r++) {
        if (m->rowptr[r + 1] < m->rowptr[r])
            return bv_error_set(err, BV_ERR_INVALID, "%s: row pointers decrease at row %lld",
                                what, (long long)r);
        for (int64_t e = m->rowptr[r]; e < m->rowptr[r + 1]; e++)
            if (m->colidx[e] < 0 || m->colidx[e] >= m->ncols)
                return bv_error_set(err, BV_ERR_INVALID,
                                    "%s: row %lld has column %d, outside [0, %lld)", what,
                                    (long long)r, m->colidx[e], (long long)m->ncols);
    }
    return BV_OK;
}

static bool columns_ascending(const bv_csr *m)
{
    for (int64_t r = 0; r < m->nrows; r++)
        for (int64_t e = m->rowptr[r] + 1; e < m->rowptr[r + 1]; e++)
            if (m->colidx[e] <= m->colidx[e - 1])
                return false;
    return true;
}

/* Whether m equals its transpose, without building it: walking m's entries (r, c) in row
 * order visits, for each c, the r's in ascending order, which must be exactly row c's
 * columns in order (one cursor per row). Needs strictly ascending columns; an unsorted m
 * is treated as not symmetric: the BWD halos are then built from the transpose, which is
 * still right, only not shared. */
static bv_status check_symmetric(const bv_csr *m, bool *symmetric, bv_error *err)
{
    *symmetric = false;
    if (!columns_ascending(m))
        return BV_OK;
    int64_t *cursor = malloc((size_t)(m->nrows ? m->nrows : 1) * sizeof *cursor);
    if (!cursor)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld row cursors",
                            (long long)m->nrows);
    memcpy(cursor, m->rowptr, (size_t)m->nrows * sizeof *cursor);
    bool same = true;
    for (int64_t r = 0; r < m->nrows && same; r++)
        for (int64_t e = m->rowptr[r]; e < m->rowptr[r + 1]; e++) {
            int32_t c = m->colidx[e];
            if (cursor[c] == m->rowptr[c + 1] || m->colidx[cursor[c]] != r) {
                same = false;
                break;
            }
            cursor[c]++;
        }
    for (int64_t c = 0; c < m->nrows && same; c++)
        same = cursor[c] == m->rowptr[c + 1];
    free(cursor);
    *symmetric = same;
    return BV_OK;
}

/* ---- the symmetrised graph METIS sees and the edge cut is counted on -------------- */

static int compare_idx(const void *a, const void *b)
{
    idx_t x = *(const idx_t *)a, y = *(const idx_t *)b;
    return (x > y) - (x < y);
}

/* xadj/adjncy of adj ∪ adjᵀ without self loops or repeated entries (t: adjᵀ, or NULL when
 * adj is symmetric). Sorted symmetric input, the datasets' case, is copied without sorting. */
static bv_status symmetrise(const bv_csr *adj, const bv_csr *t, bool sorted, idx_t **xadj_out,
                            idx_t **adjncy_out, bv_error *err)
{
    int64_t n = adj->nrows, cap = adj->nnz + (t ? t->nnz : 0);
    if (cap > (int64_t)IDX_MAX)
        return bv_error_set(err, BV_ERR_INVALID,
                            "the symmetrised graph has %lld adjacency entries, more than "
                            "METIS's %d-bit indices hold",
                            (long long)cap, IDXTYPEWIDTH);
    idx_t *xadj = malloc((size_t)(n + 1) * sizeof *xadj);
    idx_t *adjncy = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *adjncy);
    if (!xadj || !adjncy) {
        free(xadj);
        free(adjncy);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the symmetrised graph "
                            "(%lld entries)", (long long)cap);
    }
    int64_t k = 0;
    xadj[0] = 0;
    for (int64_t v = 0; v < n; v++) {
        int64_t start = k;
        for (int64_t e = adj->rowptr[v]; e < adj->rowptr[v + 1]; e++)
            if (adj->colidx[e] != v)
                adjncy[k++] = adj->colidx[e];
        if (t)
            for (int64_t e = t->rowptr[v]; e < t->rowptr[v + 1]; e++)
                if (t->colidx[e] != v)
                    adjncy[k++] = t->colidx[e];
        if (t || !sorted)
            qsort(adjncy + start, (size_t)(k - start), sizeof *adjncy, compare_idx);
        int64_t w = start; /* drop repeats */
        for (int64_t e = start; e < k; e++)
            if (w == start || adjncy[e] != adjncy[w - 1])
                adjncy[w++] = adjncy[e];
        k = w;
        xadj[v + 1] = (idx_t)k;
    }
    *xadj_out = xadj;
    *adjncy_out = adjncy;
    return BV_OK;
}

static const char *metis_status_text(int rc)
{
    switch (rc) {
    case METIS_ERROR_INPUT: return "METIS_ERROR_INPUT (the input graph was refused)";
    case METIS_ERROR_MEMORY: return "METIS_ERROR_MEMORY (METIS ran out of memory)";
    default: return "METIS_ERROR (METIS failed)";
    }
}

static bv_status metis_parts(int64_t n, idx_t *xadj, idx_t *adjncy, const bv_partition_opts *o,
                             int32_t *part_of, bv_error *err)
{
    if (xadj[n] == 0) {
        /* METIS is not defined on a graph without edges; every split cuts nothing there, so
         * contiguous ranges are as good an answer as any. */
        for (int64_t v = 0; v < n; v++)
            part_of[v] = (int32_t)(v * o->parts / n);
        return BV_OK;
    }
    idx_t options[METIS_NOPTIONS];
    METIS_SetDefaultOptions(options);
    options[METIS_OPTION_OBJTYPE] = METIS_OBJTYPE_CUT;
    options[METIS_OPTION_NUMBERING] = 0;
    /* Every role runs this itself: the same graph, options and seed give the same parts.
     * Debian's METIS draws from libc's rand(), which it srand()s with this seed at the
     * start of each call; the state is global to the process, so calls are serialised
     * (roles that are threads of one process may partition at the same time) and nothing
     * else in bivouac calls rand(). */
    options[METIS_OPTION_SEED] = (idx_t)(o->seed & 0x7fffffffu);
    idx_t nvtxs = (idx_t)n, ncon = 1, nparts = o->parts, objval = 0;
    idx_t *part = malloc((size_t)n * sizeof *part);
    if (!part)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld part numbers",
                            (long long)n);
    static pthread_mutex_t metis_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&metis_lock);
    int rc = METIS_PartGraphKway(&nvtxs, &ncon, xadj, adjncy, NULL, NULL, NULL, &nparts, NULL,
                                 NULL, options, &objval, part);
    pthread_mutex_unlock(&metis_lock);
    if (rc != METIS_OK) {
        free(part);
        return bv_error_set(err, BV_ERR_INTERNAL,
                            "METIS_PartGraphKway into %d parts of %lld vertices failed: %s",
                            o->parts, (long long)n, metis_status_text(rc));
    }
    for (int64_t v = 0; v < n; v++) {
        if (part[v] < 0 || part[v] >= nparts) {
            idx_t bad = part[v];
            free(part);
            return bv_error_set(err, BV_ERR_INTERNAL,
                                "METIS put vertex %lld in part %lld of %d", (long long)v,
                                (long long)bad, o->parts);
        }
        part_of[v] = (int32_t)part[v];
    }
    free(part);
    return BV_OK;
}

/* ---- the result ------------------------------------------------------------------- */

static void free_halo(bv_partition_halo *h)
{
    free(h->ghosts);
    free(h->ghost_ptr);
    free(h->send);
    free(h->send_ptr);
}

void bv_partition_free(bv_partition *pt)
{
    if (!pt)
        return;
    for (int32_t p = 0; pt->part && p < pt->parts; p++) {
        bv_partition_part *part = &pt->part[p];
        free(part->owned);
        free_halo(&part->halo[BV_PARTITION_FWD]);
        if (!pt->symmetric)
            free_halo(&part->halo[BV_PARTITION_BWD]);
    }
    free(pt->part);
    free(pt->part_of);
    free(pt->local_of);
    free(pt);
}

/* Owned lists (ascending, by a counting sort over v) and the global-to-local map. */
static bv_status build_owned(bv_partition *pt, const bv_csr *adj, bv_error *err)
{
    for (int64_t v = 0; v < pt->num_vertices; v++) {
        bv_partition_part *part = &pt->part[pt->part_of[v]];
        part->num_owned++;
        part->num_edges += adj->rowptr[v + 1] - adj->rowptr[v];
    }
    for (int32_t p = 0; p < pt->parts; p++) {
        bv_partition_part *part = &pt->part[p];
        part->owned = malloc((size_t)(part->num_owned ? part->num_owned : 1) * sizeof *part->owned);
        if (!part->owned)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for part %d's %lld vertices",
                                p, (long long)part->num_owned);
        part->num_owned = 0;
    }
    for (int64_t v = 0; v < pt->num_vertices; v++) {
        bv_partition_part *part = &pt->part[pt->part_of[v]];
        pt->local_of[v] = (int32_t)part->num_owned;
        part->owned[part->num_owned++] = (int32_t)v;
    }
    return BV_OK;
}

/* The ghosts of every part along m's rows (m: adj for FWD, adjᵀ for BWD): the columns of
 * its owned rows that another part owns, each once, grouped by owner, ascending. A stamp
 * per vertex dedupes; scanning the stamps in vertex order sorts. O(nnz + n·G). */
static bv_status build_ghosts(bv_partition *pt, const bv_csr *m, bv_partition_dir dir,
                              int32_t *stamp, bv_error *err)
{
    int64_t n = pt->num_vertices;
    int32_t G = pt->parts;
    for (int64_t v = 0; v < n; v++)
        stamp[v] = -1;
    for (int32_t p = 0; p < G; p++) {
        bv_partition_part *part = &pt->part[p];
        bv_partition_halo *h = &part->halo[dir];
        h->ghost_ptr = calloc((size_t)G + 1, sizeof *h->ghost_ptr);
        h->send_ptr = calloc((size_t)G + 1, sizeof *h->send_ptr);
        if (!h->ghost_ptr || !h->send_ptr)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for part %d's halo", p);
        int64_t lo = n, hi = -1; /* the stamped range, to keep the scan short */
        for (int64_t i = 0; i < part->num_owned; i++) {
            int32_t v = part->owned[i];
            for (int64_t e = m->rowptr[v]; e < m->rowptr[v + 1]; e++) {
                int32_t u = m->colidx[e];
                if (pt->part_of[u] == p || stamp[u] == p)
                    continue;
                stamp[u] = p;
                h->ghost_ptr[pt->part_of[u] + 1]++;
                h->num_ghosts++;
                lo = u < lo ? u : lo;
                hi = u > hi ? u : hi;
            }
        }
        for (int32_t q = 0; q < G; q++)
            h->ghost_ptr[q + 1] += h->ghost_ptr[q];
        h->ghosts = malloc((size_t)(h->num_ghosts ? h->num_ghosts : 1) * sizeof *h->ghosts);
        int64_t *next = malloc((size_t)G * sizeof *next);
        if (!h->ghosts || !next) {
            free(next);
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for part %d's %lld ghosts",
                                p, (long long)h->num_ghosts);
        }
        memcpy(next, h->ghost_ptr, (size_t)G * sizeof *next);
        for (int64_t u = lo; u <= hi; u++)
            if (stamp[u] == p)
                h->ghosts[next[pt->part_of[u]]++] = (int32_t)u;
        free(next);
    }
    return BV_OK;
}

/* Part q sends part p the rows of p's ghost block q, in that block's order. */
static bv_status build_sends(bv_partition *pt, bv_partition_dir dir, bv_error *err)
{
    int32_t G = pt->parts;
    for (int32_t q = 0; q < G; q++) {
        bv_partition_halo *hq = &pt->part[q].halo[dir];
        for (int32_t p = 0; p < G; p++) {
            const bv_partition_halo *hp = &pt->part[p].halo[dir];
            hq->send_ptr[p + 1] = hq->send_ptr[p] + (hp->ghost_ptr[q + 1] - hp->ghost_ptr[q]);
        }
        hq->num_send = hq->send_ptr[G];
        hq->send = malloc((size_t)(hq->num_send ? hq->num_send : 1) * sizeof *hq->send);
        if (!hq->send)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for part %d's %lld sends",
                                q, (long long)hq->num_send);
        for (int32_t p = 0; p < G; p++) {
            const bv_partition_halo *hp = &pt->part[p].halo[dir];
            int64_t k = hq->send_ptr[p];
            for (int64_t i = hp->ghost_ptr[q]; i < hp->ghost_ptr[q + 1]; i++)
                hq->send[k++] = pt->local_of[hp->ghosts[i]];
        }
    }
    return BV_OK;
}

static bv_status build_halos(bv_partition *pt, const bv_csr *adj, const bv_csr *t,
                             bv_error *err)
{
    int32_t *stamp = malloc((size_t)(pt->num_vertices ? pt->num_vertices : 1) * sizeof *stamp);
    if (!stamp)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld vertex marks",
                            (long long)pt->num_vertices);
    bv_status st = build_ghosts(pt, adj, BV_PARTITION_FWD, stamp, err);
    if (st == BV_OK)
        st = build_sends(pt, BV_PARTITION_FWD, err);
    if (st == BV_OK && !pt->symmetric) {
        st = build_ghosts(pt, t, BV_PARTITION_BWD, stamp, err);
        if (st == BV_OK)
            st = build_sends(pt, BV_PARTITION_BWD, err);
    }
    free(stamp);
    if (st == BV_OK && pt->symmetric)
        for (int32_t p = 0; p < pt->parts; p++)
            pt->part[p].halo[BV_PARTITION_BWD] = pt->part[p].halo[BV_PARTITION_FWD];
    return st;
}

/* Edges of the symmetrised graph across parts. Counted on adj itself when it is symmetric
 * (then strictly sorted, so each edge is there once each way), else on xadj/adjncy. */
static int64_t count_cut(const bv_partition *pt, const bv_csr *adj, const idx_t *xadj,
                         const idx_t *adjncy)
{
    int64_t arcs = 0;
    for (int64_t v = 0; v < pt->num_vertices; v++) {
        if (xadj)
            for (idx_t e = xadj[v]; e < xadj[v + 1]; e++)
                arcs += pt->part_of[v] != pt->part_of[adjncy[e]];
        else
            for (int64_t e = adj->rowptr[v]; e < adj->rowptr[v + 1]; e++)
                arcs += pt->part_of[v] != pt->part_of[adj->colidx[e]];
    }
    return arcs / 2; /* each edge both ways */
}

static uint64_t fingerprint(const bv_partition *pt)
{
    uint64_t head[2] = {(uint64_t)pt->method, (uint64_t)pt->parts};
    uint64_t h = bv_graph_hash64(head, sizeof head, 0x6269766f75616321ull);
    return bv_graph_hash64(pt->part_of, (size_t)pt->num_vertices * sizeof *pt->part_of, h);
}

static bv_status partition_build(bv_partition *pt, const bv_csr *adj, bv_error *err)
{
    int64_t n = pt->num_vertices;
    bool symmetric = false;
    bv_status st = check_symmetric(adj, &symmetric, err);
    if (st != BV_OK)
        return st;
    pt->symmetric = symmetric;
    bv_csr *t = NULL; /* the transpose, for BWD halos and METIS, only when it differs */
    if (!symmetric && !(t = bv_csr_transpose(adj)))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the transpose of a "
                            "%lld-vertex graph", (long long)n);
    /* The symmetrised graph: METIS's input, and the edge cut's when adj is not symmetric. */
    idx_t *xadj = NULL, *adjncy = NULL;
    bool metis = pt->method == BV_PARTITION_METIS && pt->parts > 1;
    if (metis || !symmetric)
        st = symmetrise(adj, t, columns_ascending(adj), &xadj, &adjncy, err);
    if (st == BV_OK) {
        if (pt->parts == 1)
            memset(pt->part_of, 0, (size_t)n * sizeof *pt->part_of);
        else if (metis)
            st = metis_parts(n, xadj, adjncy, &(bv_partition_opts){pt->method, pt->parts,
                                                                    pt->seed},
                             pt->part_of, err);
        else
            for (int64_t v = 0; v < n; v++) /* lengths differ by at most one */
                pt->part_of[v] = (int32_t)(v * pt->parts / n);
    }
    if (st == BV_OK) {
        pt->edge_cut = count_cut(pt, adj, xadj, adjncy);
        st = build_owned(pt, adj, err);
    }
    free(xadj);
    free(adjncy);
    if (st == BV_OK)
        st = build_halos(pt, adj, t, err);
    bv_csr_free(t);
    if (st == BV_OK)
        pt->fingerprint = fingerprint(pt);
    return st;
}

bv_status bv_partition_new(const bv_csr *adj, const bv_partition_opts *opts,
                           bv_partition **out, bv_error *err)
{
    *out = NULL;
    if (opts->method != BV_PARTITION_RANGE && opts->method != BV_PARTITION_METIS)
        return bv_error_set(err, BV_ERR_INVALID, "unknown partition method %d (metis or range)",
                            (int)opts->method);
    bv_status st = check_csr(adj, "the graph", err);
    if (st != BV_OK)
        return st;
    int64_t n = adj->nrows;
    if (opts->parts < 1)
        return bv_error_set(err, BV_ERR_INVALID, "cannot split a graph into %d parts: at least "
                            "1", opts->parts);
    if (opts->parts > (n > 0 ? n : 1))
        return bv_error_set(err, BV_ERR_INVALID,
                            "cannot split %lld vertices into %d parts: every graph server "
                            "needs a vertex (use at most %lld)",
                            (long long)n, opts->parts, (long long)(n > 0 ? n : 1));
    bv_partition *pt = calloc(1, sizeof *pt);
    if (!pt)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    pt->method = opts->method;
    pt->parts = opts->parts;
    pt->seed = opts->seed;
    pt->num_vertices = n;
    pt->symmetric = true; /* until checked: bv_partition_free must not free the BWD views */
    size_t vbytes = (size_t)(n ? n : 1) * sizeof(int32_t);
    pt->part_of = malloc(vbytes);
    pt->local_of = malloc(vbytes);
    pt->part = calloc((size_t)opts->parts, sizeof *pt->part);
    if (!pt->part_of || !pt->local_of || !pt->part) {
        bv_partition_free(pt);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a partition of %lld vertices",
                            (long long)n);
    }
    st = partition_build(pt, adj, err);
    if (st != BV_OK) {
        bv_partition_free(pt);
        return st;
    }
    *out = pt;
    return BV_OK;
}

/* ---- per-part matrices and traffic ------------------------------------------------- */

bv_status bv_partition_local_csr(const bv_partition *pt, int32_t p, bv_partition_dir dir,
                                 const bv_csr *m, bv_csr **out, bv_error *err)
{
    *out = NULL;
    if (p < 0 || p >= pt->parts)
        return bv_error_set(err, BV_ERR_INVALID, "no part %d (the partition has %d)", p,
                            pt->parts);
    if (dir != BV_PARTITION_FWD && dir != BV_PARTITION_BWD)
        return bv_error_set(err, BV_ERR_INVALID, "unknown direction %d", (int)dir);
    bv_status st = check_csr(m, "the matrix", err);
    if (st != BV_OK)
        return st;
    if (m->nrows != pt->num_vertices)
        return bv_error_set(err, BV_ERR_INVALID,
                            "the matrix has %lld rows but the partitioned graph %lld vertices",
                            (long long)m->nrows, (long long)pt->num_vertices);
    const bv_partition_part *part = &pt->part[p];
    const bv_partition_halo *h = &part->halo[dir];
    /* global -> local for this part; -1: not visible here */
    int32_t *local = malloc((size_t)(pt->num_vertices ? pt->num_vertices : 1) * sizeof *local);
    if (!local)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for %lld vertex indexes",
                            (long long)pt->num_vertices);
    for (int64_t v = 0; v < pt->num_vertices; v++)
        local[v] = -1;
    for (int64_t i = 0; i < part->num_owned; i++)
        local[part->owned[i]] = (int32_t)i;
    for (int64_t i = 0; i < h->num_ghosts; i++)
        local[h->ghosts[i]] = (int32_t)(part->num_owned + i);
    int64_t nnz = 0;
    for (int64_t i = 0; i < part->num_owned; i++)
        nnz += m->rowptr[part->owned[i] + 1] - m->rowptr[part->owned[i]];
    bv_csr *c = bv_csr_new(part->num_owned, part->num_owned + h->num_ghosts, nnz);
    if (!c) {
        free(local);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for part %d's %lld entries", p,
                            (long long)nnz);
    }
    int64_t k = 0;
    for (int64_t i = 0; i < part->num_owned; i++) {
        int32_t v = part->owned[i];
        for (int64_t e = m->rowptr[v]; e < m->rowptr[v + 1]; e++) {
            int32_t u = m->colidx[e];
            if (local[u] < 0) {
                free(local);
                bv_csr_free(c);
                return bv_error_set(err, BV_ERR_INVALID,
                                    "the matrix's entry (%d, %d) is not an edge of the "
                                    "partitioned graph (%s): part %d has no row for vertex %d",
                                    v, u, dir == BV_PARTITION_FWD ? "forward" : "backward", p,
                                    u);
            }
            c->colidx[k] = local[u];
            c->values[k] = m->values ? m->values[e] : 1.0f;
            k++;
        }
        c->rowptr[i + 1] = k;
    }
    free(local);
    *out = c;
    return BV_OK;
}

bv_partition_traffic bv_partition_predict_traffic(const bv_partition *pt, int layers,
                                                  const int64_t *widths)
{
    bv_partition_traffic t = {0};
    int64_t row_bytes = 0;
    for (int l = 0; l < layers; l++)
        row_bytes += widths[l] * (int64_t)sizeof(float);
    for (int32_t p = 0; p < pt->parts; p++) {
        int64_t fwd = pt->part[p].halo[BV_PARTITION_FWD].num_ghosts * row_bytes;
        int64_t bwd = pt->part[p].halo[BV_PARTITION_BWD].num_ghosts * row_bytes;
        t.forward_bytes += fwd;
        t.backward_bytes += bwd;
        if (fwd + bwd > t.max_part_recv_bytes)
            t.max_part_recv_bytes = fwd + bwd;
    }
    t.total_bytes = t.forward_bytes + t.backward_bytes;
    return t;
}
