/* Fuzz target: the binary graph cache reader, bv_graph_cache_open (graph_cache.c).
 * The input is a cache file. It is opened as it is (with the key the header carries, so
 * that check passes), and then once more with its checksums repaired: every section's
 * XXH64 that lies inside the file and the header's own, as bv_graph_cache_write computes
 * them, so that structurally plausible inputs reach the checks behind the checksums.
 * The header layout below is the one graph_cache.c and docs/graph-cache.md describe. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/graph.h"
#include "bivouac/log.h"
#include "fuzz_util.h"
#include "graph_internal.h"

#define HEADER_SIZE 320
#define OFF_KEY 24 /* then nodes, features, edges, nnz, feature_nnz, classes, split counts,
                    file_size (format 3, docs/graph-cache.md) */
#define OFF_SECTIONS 120 /* 8 x {offset, bytes, hash} */
#define NSECTIONS 8
#define OFF_HEADER_HASH (OFF_SECTIONS + NSECTIONS * 24)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    bv_log_set_level(BV_LOG_ERROR);
    return 0;
}

static void try_open(const char *path, uint64_t key)
{
    bv_graph_dataset *g = NULL;
    bv_error err;
    bv_error_clear(&err);
    if (bv_graph_cache_open(path, key, &g, &err) == BV_OK) {
        /* What the reader itself promises after its checks: row pointers that start at 0
         * and end at nnz, a terminated name. */
        if (g->adj.rowptr[0] != 0 || g->adj.rowptr[g->num_nodes] != g->adj.nnz)
            abort();
        (void)strlen(g->name);
        bv_graph_free(g);
    } else if (g) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "graph.bvg");
    uint64_t key = 0;
    if (size >= HEADER_SIZE)
        memcpy(&key, data + OFF_KEY, sizeof key);
    fuzz_write_file(path, data, size);
    try_open(path, key);

    if (size < HEADER_SIZE)
        return 0;
    unsigned char *fixed = malloc(size);
    if (!fixed)
        return 0;
    memcpy(fixed, data, size);
    for (int i = 0; i < NSECTIONS; i++) {
        uint64_t s[3];
        memcpy(s, fixed + OFF_SECTIONS + 24 * i, sizeof s);
        if (s[0] <= size && s[1] <= size - s[0]) {
            s[2] = bv_graph_hash64(fixed + s[0], (size_t)s[1], (uint64_t)i);
            memcpy(fixed + OFF_SECTIONS + 24 * i, s, sizeof s);
        }
    }
    uint64_t file_size = size;
    memcpy(fixed + OFF_SECTIONS - 8, &file_size, sizeof file_size);
    memset(fixed + OFF_HEADER_HASH, 0, 8);
    uint64_t h = bv_graph_hash64(fixed, HEADER_SIZE, 0);
    memcpy(fixed + OFF_HEADER_HASH, &h, 8);
    fuzz_write_file(path, fixed, size);
    free(fixed);
    try_open(path, key);
    return 0;
}
