/* One graph server's part of the graph (docs/cluster.md, "Several graph servers"): the
 * vertices it owns, then the ghosts (its owned vertices' neighbours that other parts
 * own), as a dataset of their own, so that the graph server's code runs on it unchanged;
 * and what it must exchange with each other part around every Gather. */
#ifndef BIVOUAC_GRAPH_VIEW_H
#define BIVOUAC_GRAPH_VIEW_H

#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/graph.h"
#include "bivouac/tensor.h"

typedef struct bv_graph_view {
    /* Rows [0, owned) are the part's own vertices in global order, rows [owned, nodes)
     * its ghosts in global order. adj holds the owned rows only (ghost rows are empty),
     * columns local and ascending; features, labels and split are the vertices' own,
     * but a ghost's split is BV_SPLIT_NONE (its owner counts its loss). */
    bv_graph_dataset *local;
    int64_t owned;
    int64_t *global_of;   /* local row -> global vertex */
    /* Â = D^-1/2 (A + I) D^-1/2 of the whole graph (degrees of the whole graph), rows of
     * the owned vertices, columns local; ghost rows empty. NULL unless asked for. */
    bv_csr *adj_norm;
    /* Labelled training vertices of the whole graph: the loss is their mean. */
    int64_t train_total;
    int parts, part;
    /* Part q's rows: send_idx[send_off[q], send_off[q + 1]) are the owned rows q keeps as
     * ghosts (q's ghost order); recv_idx[recv_off[q], recv_off[q + 1]) the ghost rows q
     * owns. Both sides list the same vertices in the same (global) order. */
    int64_t *send_off, *send_idx;
    int64_t *recv_off, *recv_idx;
    int64_t edge_cut; /* edges (one direction each) whose ends are in different parts */
} bv_graph_view;

/* Part `part` of `parts` of g, where part_of[v] is the part that owns vertex v (a
 * bv_partition's, METIS or ranges); with norm (g's Â, bv_graph_gcn_norm_adj: made once for
 * all parts by the caller), also adj_norm, its rows of the part (GCN's Gather). An empty
 * part is an error. */
bv_status bv_graph_view_make(const bv_graph_dataset *g, const int32_t *part_of, int parts,
                             int part, const bv_csr *norm, bv_graph_view *out, bv_error *err);
void bv_graph_view_free(bv_graph_view *v);

/* A part as a file (docs/cluster.md, "Several graph servers"): the coordinator cuts every
 * part once and writes it to the run's private directory; each graph server's process
 * reads its own instead of loading the whole dataset and cutting it itself. */
typedef struct bv_graph_part_info {
    uint64_t fingerprint; /* the partition's (bv_partition) */
    int64_t whole_nodes;  /* vertices of the whole graph */
} bv_graph_part_info;

/* Where part `part`'s file is in the run's private directory (the first dir_len bytes of
 * dir): DIR/partP. */
void bv_graph_part_path(const char *dir, size_t dir_len, int part, char *buf, size_t len);

/* Writes v to path atomically (a temporary file, then rename), mode 0600. */
bv_status bv_graph_view_write(const bv_graph_view *v, const bv_graph_part_info *info,
                              const char *path, bv_error *err);
/* Reads a part bv_graph_view_write wrote, checked (magic, version, sizes, CRC-32C of the
 * whole, every index within its array) before it is used. */
bv_status bv_graph_view_read(const char *path, bv_graph_view *out, bv_graph_part_info *info,
                             bv_error *err);

#endif
