/* A graph server's part of the graph (graph_view.h). Every process that needs a part
 * derives it from the whole dataset alone, so the two sides of every exchange list the
 * same vertices in the same order without telling each other. */
#include "graph_view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "bivouac/wire.h"

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
        bv_free_aligned(m->values);
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

/* The part's rows (global_of) of g's sparse features as d's, in the dataset's own arrays
 * (bv_alloc_aligned blocks, as bv_graph_free frees them). */
static bv_status part_features_sparse(const bv_graph_dataset *g, const int64_t *global_of,
                                      int64_t rows, bv_graph_dataset *d)
{
    const bv_csr *x = &g->features_csr;
    int64_t nnz = 0;
    for (int64_t k = 0; k < rows; k++)
        nnz += x->rowptr[global_of[k] + 1] - x->rowptr[global_of[k]];
    bv_csr *y = &d->features_csr;
    *y = (bv_csr){.nrows = rows, .ncols = x->ncols, .nnz = nnz};
    y->rowptr = bv_alloc_aligned((size_t)(rows + 1) * sizeof *y->rowptr);
    y->colidx = bv_alloc_aligned((size_t)(nnz + 1) * sizeof *y->colidx);
    y->values = bv_alloc_aligned((size_t)(nnz + 1) * sizeof *y->values);
    if (!y->rowptr || !y->colidx || !y->values)
        return BV_ERR_NOMEM;
    y->rowptr[0] = 0;
    for (int64_t k = 0; k < rows; k++) {
        int64_t b = x->rowptr[global_of[k]], len = x->rowptr[global_of[k] + 1] - b;
        memcpy(y->colidx + y->rowptr[k], x->colidx + b, (size_t)len * sizeof *y->colidx);
        memcpy(y->values + y->rowptr[k], x->values + b, (size_t)len * sizeof *y->values);
        y->rowptr[k + 1] = y->rowptr[k] + len;
    }
    return BV_OK;
}

bv_status bv_graph_view_make(const bv_graph_dataset *g, const int32_t *part_of, int parts,
                             int part, const bv_csr *norm, bv_graph_view *out, bv_error *err)
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
        bool sparse = bv_graph_features_sparse(g);
        if (st == BV_OK && sparse)
            st = part_features_sparse(g, out->global_of, rows, d);
        else if (st == BV_OK)
            d->features = bv_alloc_aligned((size_t)(rows * f + 1) * sizeof(float));
        d->labels = bv_alloc_aligned((size_t)(rows + 1) * sizeof(int32_t));
        d->split = bv_alloc_aligned((size_t)rows + 1);
        bv_csr *adj = st == BV_OK ? remap_rows(&g->adj, out->global_of, out->owned, local_of,
                                               rows, rows)
                                  : NULL;
        if (st != BV_OK || !d->name || (!sparse && !d->features) || !d->labels || !d->split ||
            !adj) {
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
            if (d->features)
                memcpy(d->features + k * f, g->features + u * f, (size_t)f * sizeof(float));
            bool own = k < out->owned;
            d->labels[k] = own ? g->labels[u] : -1;
            d->split[k] = own ? g->split[u] : BV_SPLIT_NONE;
            d->split_count[d->split[k]]++;
        }
        if (st == BV_OK && norm) {
            out->adj_norm = remap_rows(norm, out->global_of, out->owned, local_of, rows, rows);
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

/* ---- parts as files ---- */

#define PART_MAGIC "BVPART\0"
#define PART_VERSION 2u /* 2: sparse features as a CSR */
#define PART_ENDIAN 0x01020304u

void bv_graph_part_path(const char *dir, size_t dir_len, int part, char *buf, size_t len)
{
    snprintf(buf, len, "%.*s/part%d", (int)dir_len, dir, part);
}

/* Native layout: the file goes from the coordinator to its own roles on this host. */
typedef struct part_header {
    char magic[8];
    uint32_t version, endian;
    uint64_t fingerprint;
    int64_t whole_nodes, nodes, owned, num_features, nnz, norm_nnz, parts, part;
    int64_t train_total, edge_cut, send_total, recv_total, num_undirected_edges;
    int64_t split_count[4];
    int32_t num_classes, has_norm;
    int32_t sparse, reserved; /* sparse: the features as a CSR of feature_nnz entries */
    int64_t feature_nnz;
} part_header;

typedef struct part_section {
    void *p;
    size_t bytes;
} part_section;

/* The file's arrays after its header, in order. */
static size_t part_sections(const bv_graph_view *v, const part_header *h, part_section *s)
{
    const bv_graph_dataset *d = v->local;
    size_t n = 0, rows = (size_t)h->nodes, parts = (size_t)h->parts;
    s[n++] = (part_section){d->adj.rowptr, (rows + 1) * sizeof(int64_t)};
    s[n++] = (part_section){d->adj.colidx, (size_t)h->nnz * sizeof(int32_t)};
    if (h->sparse) {
        const bv_csr *x = &d->features_csr;
        s[n++] = (part_section){x->rowptr, (rows + 1) * sizeof(int64_t)};
        s[n++] = (part_section){x->colidx, (size_t)h->feature_nnz * sizeof(int32_t)};
        s[n++] = (part_section){x->values, (size_t)h->feature_nnz * sizeof(float)};
    } else {
        s[n++] = (part_section){d->features, rows * (size_t)h->num_features * sizeof(float)};
    }
    s[n++] = (part_section){d->labels, rows * sizeof(int32_t)};
    s[n++] = (part_section){d->split, rows};
    s[n++] = (part_section){v->global_of, rows * sizeof(int64_t)};
    if (h->has_norm) {
        s[n++] = (part_section){v->adj_norm->rowptr, (rows + 1) * sizeof(int64_t)};
        s[n++] = (part_section){v->adj_norm->colidx, (size_t)h->norm_nnz * sizeof(int32_t)};
        s[n++] = (part_section){v->adj_norm->values, (size_t)h->norm_nnz * sizeof(float)};
    }
    s[n++] = (part_section){v->send_off, (parts + 1) * sizeof(int64_t)};
    s[n++] = (part_section){v->send_idx, (size_t)h->send_total * sizeof(int64_t)};
    s[n++] = (part_section){v->recv_off, (parts + 1) * sizeof(int64_t)};
    s[n++] = (part_section){v->recv_idx, (size_t)h->recv_total * sizeof(int64_t)};
    return n;
}

bv_status bv_graph_view_write(const bv_graph_view *v, const bv_graph_part_info *info,
                              const char *path, bv_error *err)
{
    const bv_graph_dataset *d = v->local;
    part_header h = {
        .version = PART_VERSION, .endian = PART_ENDIAN, .fingerprint = info->fingerprint,
        .whole_nodes = info->whole_nodes, .nodes = d->num_nodes, .owned = v->owned,
        .num_features = d->num_features, .nnz = d->adj.nnz,
        .norm_nnz = v->adj_norm ? v->adj_norm->nnz : 0, .parts = v->parts, .part = v->part,
        .train_total = v->train_total, .edge_cut = v->edge_cut,
        .send_total = v->send_off[v->parts], .recv_total = v->recv_off[v->parts],
        .num_undirected_edges = d->num_undirected_edges, .num_classes = d->num_classes,
        .has_norm = v->adj_norm != NULL, .sparse = bv_graph_features_sparse(d),
        .feature_nnz = bv_graph_features_sparse(d) ? d->features_csr.nnz : 0,
    };
    memcpy(h.magic, PART_MAGIC, sizeof h.magic);
    memcpy(h.split_count, d->split_count, sizeof h.split_count);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wbx"); /* 0600 from the directory's owner: mkdtemp's 0700 */
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    part_section s[16];
    size_t n = part_sections(v, &h, s);
    uint32_t crc = bv_crc32c(0, &h, sizeof h);
    bool ok = fwrite(&h, sizeof h, 1, f) == 1;
    for (size_t i = 0; ok && i < n; i++) {
        crc = bv_crc32c(crc, s[i].p, s[i].bytes);
        ok = s[i].bytes == 0 || fwrite(s[i].p, s[i].bytes, 1, f) == 1;
    }
    ok = ok && fwrite(&crc, sizeof crc, 1, f) == 1;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return bv_error_set(err, BV_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    return BV_OK;
}

/* Whether every entry of idx[0 .. count) lies in [0, bound). */
static bool all_below(const int64_t *idx, int64_t count, int64_t bound)
{
    for (int64_t i = 0; i < count; i++)
        if (idx[i] < 0 || idx[i] >= bound)
            return false;
    return true;
}

/* A CSR's rows ascend within [0, nnz] and its columns lie in [0, cols). */
static bool csr_sound(const int64_t *rowptr, const int32_t *colidx, int64_t rows, int64_t nnz,
                      int64_t cols)
{
    if (rowptr[0] != 0 || rowptr[rows] != nnz)
        return false;
    for (int64_t r = 0; r < rows; r++)
        if (rowptr[r + 1] < rowptr[r])
            return false;
    for (int64_t k = 0; k < nnz; k++)
        if (colidx[k] < 0 || colidx[k] >= cols)
            return false;
    return true;
}

/* Offsets from 0 that ascend to total. */
static bool offsets_sound(const int64_t *off, int64_t parts, int64_t total)
{
    if (off[0] != 0 || off[parts] != total)
        return false;
    for (int64_t q = 0; q < parts; q++)
        if (off[q + 1] < off[q])
            return false;
    return true;
}

static bool header_sound(const part_header *h)
{
    const int64_t big = INT32_MAX;
    return memcmp(h->magic, PART_MAGIC, sizeof h->magic) == 0 &&
           h->version == PART_VERSION && h->endian == PART_ENDIAN && h->nodes > 0 &&
           h->nodes <= big && h->owned > 0 && h->owned <= h->nodes &&
           h->whole_nodes >= h->nodes && h->num_features > 0 &&
           h->num_features <= big && h->nnz >= 0 && h->nnz <= h->nodes * h->nodes &&
           h->norm_nnz >= 0 && h->norm_nnz <= h->nodes * h->nodes && h->parts > 1 &&
           h->parts <= 4096 && h->part >= 0 && h->part < h->parts && h->send_total >= 0 &&
           h->recv_total >= 0 && h->send_total <= h->owned * h->parts &&
           h->recv_total == h->nodes - h->owned && h->num_classes > 0 &&
           (h->has_norm == 1 || (h->has_norm == 0 && h->norm_nnz == 0)) &&
           (h->sparse == 1 || (h->sparse == 0 && h->feature_nnz == 0)) && h->reserved == 0 &&
           h->feature_nnz >= 0 && h->feature_nnz <= h->nodes * h->num_features;
}

/* acc += count × width, false on overflow. */
static bool add_bytes(uint64_t *acc, uint64_t count, uint64_t width)
{
    uint64_t b;
    return !__builtin_mul_overflow(count, width, &b) && !__builtin_add_overflow(*acc, b, acc);
}

/* The size of the file a sound header describes (header, arrays, CRC), or 0 when it
 * does not fit in 64 bits: read before anything is allocated, so a header cannot ask for
 * more memory than its file holds. */
static uint64_t part_file_bytes(const part_header *h)
{
    uint64_t n = (uint64_t)h->nodes, total = sizeof *h + sizeof(uint32_t);
    bool ok = add_bytes(&total, n + 1, 8) && add_bytes(&total, (uint64_t)h->nnz, 4) &&
              (h->sparse ? add_bytes(&total, n + 1, 8) &&
                               add_bytes(&total, (uint64_t)h->feature_nnz, 8)
                         : add_bytes(&total, n * (uint64_t)h->num_features, 4)) &&
              add_bytes(&total, n, 4) &&
              add_bytes(&total, n, 1) && add_bytes(&total, n, 8) &&
              add_bytes(&total, 2 * ((uint64_t)h->parts + 1), 8) &&
              add_bytes(&total, (uint64_t)h->send_total + (uint64_t)h->recv_total, 8) &&
              (!h->has_norm || (add_bytes(&total, n + 1, 8) &&
                                add_bytes(&total, (uint64_t)h->norm_nnz, 8)));
    return ok ? total : 0;
}

bv_status bv_graph_view_read(const char *path, bv_graph_view *out, bv_graph_part_info *info,
                             bv_error *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    part_header h;
    bv_status st = BV_OK;
    struct stat sb;
    if (fread(&h, sizeof h, 1, f) != 1 || !header_sound(&h))
        st = bv_error_set(err, BV_ERR_CORRUPT, "%s is not a part of a graph this build wrote",
                          path);
    else if (fstat(fileno(f), &sb) != 0 || (uint64_t)sb.st_size != part_file_bytes(&h))
        st = bv_error_set(err, BV_ERR_CORRUPT, "%s is damaged (truncated, or its "
                          "checksum is wrong)", path);
    bv_graph_dataset *d = st == BV_OK ? calloc(1, sizeof *d) : NULL;
    if (st == BV_OK && !d)
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (st == BV_OK) {
        size_t rows = (size_t)h.nodes, parts = (size_t)h.parts;
        out->local = d;
        d->name = malloc(32);
        d->num_nodes = h.nodes;
        d->num_features = h.num_features;
        d->num_classes = h.num_classes;
        d->num_undirected_edges = h.num_undirected_edges;
        memcpy(d->split_count, h.split_count, sizeof d->split_count);
        d->adj = (bv_csr){h.nodes, h.nodes, h.nnz, NULL, NULL, NULL, 0};
        /* as bv_graph_view_make makes them: the dataset's arrays bv_alloc_aligned blocks */
        d->adj.rowptr = bv_alloc_aligned((rows + 1) * sizeof(int64_t));
        d->adj.colidx = bv_alloc_aligned(((size_t)h.nnz + 1) * sizeof(int32_t));
        if (h.sparse) {
            d->features_csr = (bv_csr){.nrows = h.nodes, .ncols = h.num_features,
                                       .nnz = h.feature_nnz};
            d->features_csr.rowptr = bv_alloc_aligned((rows + 1) * sizeof(int64_t));
            d->features_csr.colidx =
                bv_alloc_aligned(((size_t)h.feature_nnz + 1) * sizeof(int32_t));
            d->features_csr.values = bv_alloc_aligned(((size_t)h.feature_nnz + 1) * sizeof(float));
        } else {
            d->features = bv_alloc_aligned((rows * (size_t)h.num_features + 1) * sizeof(float));
        }
        d->labels = bv_alloc_aligned((rows + 1) * sizeof(int32_t));
        d->split = bv_alloc_aligned(rows + 1);
        out->global_of = malloc((rows + 1) * sizeof(int64_t));
        out->adj_norm = h.has_norm ? bv_csr_new(h.nodes, h.nodes, h.norm_nnz) : NULL;
        out->send_off = malloc((parts + 1) * sizeof(int64_t));
        out->send_idx = malloc(((size_t)h.send_total + 1) * sizeof(int64_t));
        out->recv_off = malloc((parts + 1) * sizeof(int64_t));
        out->recv_idx = malloc(((size_t)h.recv_total + 1) * sizeof(int64_t));
        bool features = h.sparse ? d->features_csr.rowptr && d->features_csr.colidx &&
                                       d->features_csr.values
                                 : d->features != NULL;
        if (!d->name || !d->adj.rowptr || !d->adj.colidx || !features || !d->labels ||
            !d->split || !out->global_of || (h.has_norm && !out->adj_norm) ||
            !out->send_off || !out->send_idx || !out->recv_off || !out->recv_idx)
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory for part %lld of the graph",
                              (long long)h.part);
        else
            snprintf(d->name, 32, "part%lld", (long long)h.part);
    }
    if (st == BV_OK) {
        part_section s[16];
        size_t n = part_sections(out, &h, s);
        uint32_t crc = bv_crc32c(0, &h, sizeof h), want = 0;
        bool ok = true;
        for (size_t i = 0; ok && i < n; i++) {
            ok = s[i].bytes == 0 || fread(s[i].p, s[i].bytes, 1, f) == 1;
            crc = bv_crc32c(crc, s[i].p, s[i].bytes);
        }
        if (!ok || fread(&want, sizeof want, 1, f) != 1 || want != crc || fgetc(f) != EOF)
            st = bv_error_set(err, BV_ERR_CORRUPT, "%s is damaged (truncated, or its "
                              "checksum is wrong)", path);
    }
    if (st == BV_OK) {
        int64_t rows = h.nodes;
        bool sound = csr_sound(d->adj.rowptr, d->adj.colidx, rows, h.nnz, rows) &&
                     (!h.sparse || csr_sound(d->features_csr.rowptr, d->features_csr.colidx,
                                             rows, h.feature_nnz, h.num_features)) &&
                     (!h.has_norm || csr_sound(out->adj_norm->rowptr, out->adj_norm->colidx,
                                               rows, h.norm_nnz, rows)) &&
                     all_below(out->global_of, rows, h.whole_nodes) &&
                     offsets_sound(out->send_off, h.parts, h.send_total) &&
                     offsets_sound(out->recv_off, h.parts, h.recv_total) &&
                     all_below(out->send_idx, h.send_total, h.owned) &&
                     all_below(out->recv_idx, h.recv_total, rows);
        int64_t count[4] = {0};
        for (int64_t k = 0; sound && k < rows; k++) {
            sound = d->split[k] < 4 && d->labels[k] >= -1 && d->labels[k] < h.num_classes;
            count[sound ? d->split[k] : 0]++;
        }
        sound = sound && memcmp(count, h.split_count, sizeof count) == 0;
        if (!sound)
            st = bv_error_set(err, BV_ERR_CORRUPT, "%s holds indices outside its arrays", path);
    }
    fclose(f);
    if (st != BV_OK) {
        bv_graph_view_free(out);
        return st;
    }
    out->owned = h.owned;
    out->train_total = h.train_total;
    out->parts = (int)h.parts;
    out->part = (int)h.part;
    out->edge_cut = h.edge_cut;
    *info = (bv_graph_part_info){h.fingerprint, h.whole_nodes};
    return BV_OK;
}
