/* Graph partitioning for G graph servers (Dorylus §3-§4): which vertices each server owns,
 * the remote rows (ghosts) it receives and the rows it sends every epoch, and each part's
 * rows of a sparse matrix in a local index space. docs/partitioning.md. */
#ifndef BIVOUAC_GRAPH_PARTITION_H
#define BIVOUAC_GRAPH_PARTITION_H

#include <stdbool.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/tensor.h"

typedef enum bv_partition_method {
    BV_PARTITION_RANGE = 0, /* contiguous vertex ranges of equal size (+-1) */
    BV_PARTITION_METIS = 1  /* METIS_PartGraphKway, edge-cut objective, fixed seed */
} bv_partition_method;

typedef struct bv_partition_opts {
    bv_partition_method method;
    int32_t parts;  /* G >= 1; at most the number of vertices (or 1 for an empty graph) */
    uint32_t seed;  /* METIS_OPTION_SEED; METIS takes the low 31 bits */
} bv_partition_opts;

/* The direction rows travel in: FWD for activations (a vertex gathers its in-neighbours
 * along the matrix's rows), BWD for gradients (along the transpose). */
typedef enum bv_partition_dir { BV_PARTITION_FWD = 0, BV_PARTITION_BWD = 1 } bv_partition_dir;

/* One part's boundary exchange in one direction.
 * Receive: ghosts[ghost_ptr[q] .. ghost_ptr[q+1]) are the global ids owned by part q whose
 * rows this part needs, ascending; in the part's local index space ghost i is row
 * num_owned + i, so part q's message fills one contiguous block of rows.
 * Send: send[send_ptr[q] .. send_ptr[q+1]) are local ids (indexes into `owned`) of this
 * part's rows that part q needs, in the order of q's ghost block for this part: rows packed
 * in this order land in q's rows unpacked in order. ghost_ptr[p] == ghost_ptr[p+1] and
 * send_ptr[p] == send_ptr[p+1] for the part p itself. */
typedef struct bv_partition_halo {
    int64_t num_ghosts;
    int32_t *ghosts;    /* num_ghosts global ids */
    int64_t *ghost_ptr; /* parts + 1 */
    int64_t num_send;
    int32_t *send;      /* num_send local ids */
    int64_t *send_ptr;  /* parts + 1 */
} bv_partition_halo;

typedef struct bv_partition_part {
    int64_t num_owned;
    int32_t *owned;    /* global ids, ascending; owned[local] = global */
    int64_t num_edges; /* entries of the partitioned graph's rows owned here */
    bv_partition_halo halo[2]; /* [BV_PARTITION_FWD], [BV_PARTITION_BWD] */
} bv_partition_part;

typedef struct bv_partition {
    bv_partition_method method;
    int32_t parts;
    uint32_t seed;
    int64_t num_vertices;
    /* True when the graph equals its transpose: the BWD halos are then views of the FWD
     * ones (same arrays). */
    bool symmetric;
    int32_t *part_of;  /* num_vertices: the part that owns each vertex */
    int32_t *local_of; /* num_vertices: its index in that part's `owned` */
    /* Undirected edges {u, v}, u != v, of the symmetrised graph (an edge either way) whose
     * endpoints lie in different parts; METIS's objective. */
    int64_t edge_cut;
    /* XXH64 of method, parts and part_of: roles that derive the partition themselves can
     * compare one number to know they agree. */
    uint64_t fingerprint;
    bv_partition_part *part; /* parts */
} bv_partition;

/* Splits the graph whose adjacency is adj (square; row v lists v's in-neighbours, the
 * vertices whose rows v gathers) into opts->parts parts. adj need not be symmetric: METIS
 * sees the symmetrised graph without self loops; the halos follow adj (FWD) and its
 * transpose (BWD). G = 1 is the identity (one part owning everything, no ghosts) for either
 * method. The result depends only on adj and opts, so every process computes the same one.
 * Errors: G < 1, G larger than the number of vertices, a malformed CSR, a graph too large
 * for METIS's index type, METIS failing, out of memory. */
bv_status bv_partition_new(const bv_csr *adj, const bv_partition_opts *opts,
                           bv_partition **out, bv_error *err);
void bv_partition_free(bv_partition *pt);

/* Part p's rows of m (rows and columns are the partitioned graph's vertices) as a new CSR
 * of num_owned rows (row i is global row owned[i]) and num_owned + num_ghosts columns in
 * p's local index space for direction dir: [0, num_owned) the owned vertices by local id,
 * then the ghosts of halo[dir] in order. Within a row the entries keep m's order (so a
 * Gather over the local rows sums in the same order as over m and gives the same bits);
 * local column indices are therefore not necessarily ascending. Values are copied (all
 * ones when m has none).
 * For FWD pass the forward matrix (adj, Â, ...), for BWD its transpose (the matrix ∇GA
 * multiplies by, e.g. bv_csr_transpose(Â)). m may have entries the partitioned graph lacks
 * only on its diagonal (self loops, as Â has); any other column that is neither owned nor a
 * ghost of p is an error naming the entry. */
bv_status bv_partition_local_csr(const bv_partition *pt, int32_t p, bv_partition_dir dir,
                                 const bv_csr *m, bv_csr **out, bv_error *err);

/* Boundary traffic of one epoch: for every Gather layer l of width widths[l] (floats per
 * row), each part receives its FWD ghosts' activation rows and, backward, its BWD ghosts'
 * gradient rows of the same width, as float32. Message headers are not counted. */
typedef struct bv_partition_traffic {
    int64_t forward_bytes;  /* sum over parts of FWD ghosts x sum(widths) x 4 */
    int64_t backward_bytes; /* the same with the BWD ghosts */
    int64_t total_bytes;
    int64_t max_part_recv_bytes; /* the busiest part's received bytes, both directions */
} bv_partition_traffic;

bv_partition_traffic bv_partition_predict_traffic(const bv_partition *pt, int layers,
                                                  const int64_t *widths);

/* "metis" / "range" and back; parse returns false for anything else. */
const char *bv_partition_method_name(bv_partition_method m);
bool bv_partition_method_parse(const char *name, bv_partition_method *out);

#endif
