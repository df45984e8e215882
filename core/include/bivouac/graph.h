/* Graph datasets: the loader for the shared directory format, the binary cache that makes
 * a second load a mmap, and the built-in synthetic generators. */
#ifndef BIVOUAC_GRAPH_H
#define BIVOUAC_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { BV_SPLIT_NONE = 0, BV_SPLIT_TRAIN = 1, BV_SPLIT_VAL = 2, BV_SPLIT_TEST = 3 };

typedef struct bv_graph_dataset {
    char *name;
    int64_t num_nodes;
    int64_t num_features;
    int32_t num_classes;
    int64_t num_undirected_edges;
    /* Symmetric adjacency: both directions of every undirected edge, no self loops,
     * values NULL (all ones). Rows sorted, columns ascending. */
    bv_csr adj;
    /* The features, in one of two forms (bv_graph_features_sparse says which):
     * dense: num_nodes x num_features row-major floats, features_csr all zero;
     * sparse: features NULL, features_csr a num_nodes x num_features CSR with values,
     * columns ascending, no stored zeros (bag-of-words rows are ~99 % zeros). */
    float *features;
    bv_csr features_csr;
    int32_t *labels; /* num_nodes; -1 for unlabeled */
    uint8_t *split;  /* num_nodes; BV_SPLIT_* */
    int64_t split_count[4];
    /* storage: either malloc'd arrays or views into one mmap'd cache file */
    void *mapping;
    size_t mapping_len;
} bv_graph_dataset;

/* Loads a dataset directory (edges.tsv, features.svm, split.tsv, meta.yaml).
 * If cache_dir is not NULL, a valid cache file there (keyed by the directory's real
 * path and the files' sizes, mtimes, ctimes and inodes) is mmap'd instead; otherwise the
 * files are checked against meta.yaml's sha256 sums and counts, parsed, and the cache is
 * written (atomically) for next time. A dataset with no labelled training vertex is
 * refused. Errors name the file and line:
 * "cora/edges.tsv:17: node 2708 out of range (2708 nodes)". */
bv_status bv_graph_load_dir(const char *dir, const char *cache_dir, bv_graph_dataset **out,
                            bv_error *err);

/* Planted-partition ("communities") graph: nodes split evenly into `classes` blocks;
 * each node gets about avg_degree neighbours, a fraction `homophily` inside its block;
 * features are sparse binary bag-of-words where each class has its own preferred words.
 * Split: train_per_class labelled nodes per class, then val and test counts. */
typedef struct bv_synth_communities {
    int64_t nodes;
    int64_t features;
    int32_t classes;
    double avg_degree;
    double homophily;         /* in [0,1] */
    double feature_density;   /* fraction of nonzero features per node */
    double feature_signal;    /* fraction of a node's words drawn from its class's words */
    int64_t train_per_class;
    int64_t val;
    int64_t test;
    uint64_t seed;
} bv_synth_communities;

/* Power-law graph of a requested size (Chung-Lu style degree sequence with exponent
 * `exponent`), dense random features and labels from a random linear teacher so that
 * models have something learnable. Meant for scale and speed tests. */
typedef struct bv_synth_powerlaw {
    int64_t nodes;
    int64_t edges; /* undirected edges wanted (duplicates and self loops removed) */
    int64_t features;
    int32_t classes;
    double exponent; /* e.g. 2.1 */
    uint64_t seed;
} bv_synth_powerlaw;

bv_status bv_graph_synth_communities(const bv_synth_communities *p, bv_graph_dataset **out,
                                     bv_error *err);
bv_status bv_graph_synth_powerlaw(const bv_synth_powerlaw *p, bv_graph_dataset **out,
                                  bv_error *err);

void bv_graph_free(bv_graph_dataset *g);

/* How an experiment keeps its features (`dataset.features`). */
typedef enum bv_features_form {
    BV_FEATURES_AUTO = 0, /* sparse when at most BV_FEATURES_SPARSE_DENSITY are nonzero */
    BV_FEATURES_SPARSE = 1,
    BV_FEATURES_DENSE = 2
} bv_features_form;

/* auto's threshold: a CSR entry costs 8 bytes (column, value) against a dense 4, and the
 * sparse first-layer kernels beat the dense ones well below it. */
#define BV_FEATURES_SPARSE_DENSITY 0.25

static inline bool bv_graph_features_sparse(const bv_graph_dataset *g)
{
    return g->features == NULL && g->features_csr.rowptr != NULL;
}

/* Nonzero features (the CSR's entries, or a count over the dense array). */
int64_t bv_graph_features_nnz(const bv_graph_dataset *g);

/* Bytes of the features as they are held (dense array, or CSR), and of the whole dataset
 * (adjacency, features, labels, split). */
size_t bv_graph_features_bytes(const bv_graph_dataset *g);
size_t bv_graph_dataset_bytes(const bv_graph_dataset *g);

/* Puts the features in the form asked (auto: by density). A no-op when they are in it. */
bv_status bv_graph_features_convert(bv_graph_dataset *g, bv_features_form form, bv_error *err);

/* Divides every feature row by its sum (rows summing to 0 are left alone), as Kipf's
 * preprocess_features, in either form, with the same bits. Works on mmap'd data too
 * (copies the values first). */
bv_status bv_graph_row_normalize_features(bv_graph_dataset *g, bv_error *err);

/* Â = D^-1/2 (A + I) D^-1/2 as a new CSR with values (Kipf & Welling eq. 2). */
bv_csr *bv_graph_gcn_norm_adj(const bv_graph_dataset *g);

#ifdef __cplusplus
}
#endif
#endif
