/* Helpers shared by the graph loader, the binary cache and the synthetic generators
 * (graph_load.c, graph_cache.c, graph_synth.c, graph_util.c). Not part of the SDK. */
#ifndef BIVOUAC_GRAPH_INTERNAL_H
#define BIVOUAC_GRAPH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "bivouac/graph.h"

/* A zeroed dataset with a copy of `name`; NULL when out of memory. */
bv_graph_dataset *bv_graph_dataset_alloc(const char *name);

/* True when p is one of g's own heap arrays, false when it points into g->mapping. */
bool bv_graph_owns(const bv_graph_dataset *g, const void *p);

/* Builds the symmetric adjacency of m undirected pairs (pairs[2k], pairs[2k+1]) over n
 * nodes: both directions, self loops dropped, duplicates merged, columns ascending.
 * Pairs must already be in [0, n). Input sorted by (min, max) takes a fast path. */
bv_status bv_graph_adj_from_pairs(int64_t n, const int32_t *pairs, int64_t m, bv_csr *adj,
                                  bv_error *err);

/* Sorts a feature row's entries by column, keeps the last of repeated columns (as a dense
 * row written left to right would) and drops zeros; returns the entries left. */
int64_t bv_graph_tidy_row(int32_t *col, float *val, int64_t len);

/* Refuses a dataset that has nothing to train on: no vertex marked train, or only
 * unlabelled ones (BV_ERR_INVALID, naming split_file when not NULL). An empty validation
 * or test split is allowed but logged as a warning: their accuracies then read 0, and
 * early stopping or best-on-validation selection has nothing to go on. */
bv_status bv_graph_check_split(const bv_graph_dataset *g, const char *split_file,
                               bv_error *err);

/* XXH64 (Yann Collet's xxHash, 64-bit variant): the cache key and its checksums. */
uint64_t bv_graph_hash64(const void *data, size_t len, uint64_t seed);

/* The four files of a dataset directory, in the order the cache key hashes them. */
enum { BV_GRAPH_FILE_META, BV_GRAPH_FILE_EDGES, BV_GRAPH_FILE_FEATURES, BV_GRAPH_FILE_SPLIT,
       BV_GRAPH_NFILES };

/* The cache file for a dataset directory: "<cache_dir>/<name>-<16 hex>.bvg", where the hex
 * is the key (a hash of the directory's real path and the files' sizes, mtimes, ctimes
 * and inodes).
 * Returns a malloc'd path, or NULL (with err set) if the directory's real path is unknown. */
char *bv_graph_cache_path(const char *dir, const char *name, const char *cache_dir,
                          const struct stat st[BV_GRAPH_NFILES], uint64_t *key, bv_error *err);

/* Maps a cache file. BV_OK: *out views the mapping. BV_ERR_IO with err->msg empty: there
 * is no such file. Anything else: the file is unusable and err says why. */
bv_status bv_graph_cache_open(const char *path, uint64_t key, bv_graph_dataset **out,
                              bv_error *err);

/* Writes g to path atomically (temp file in the same directory, fsync, rename), creating
 * the cache directory first if needed. */
bv_status bv_graph_cache_write(const char *cache_dir, const char *path, uint64_t key,
                               const bv_graph_dataset *g, bv_error *err);

#endif
