/* Fuzz target: the reader of a graph server's part file, bv_graph_view_read (graph_view.c),
 * which a graph server's process reads from the coordinator's directory. The input is a
 * part file. It is read as it is, and again with its trailing CRC-32C repaired, so that
 * inputs get past the checksum to the checks of sizes and indices behind it. A part that
 * reads must keep graph_view.h's promises and write back to the same bytes.
 * With BV_FUZZ_WRITE_SEEDS=DIR the target writes seed parts (both parts of a small graph,
 * with and without Â) into DIR and exits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/graph.h"
#include "bivouac/log.h"
#include "bivouac/wire.h"
#include "fuzz_util.h"
#include "graph_internal.h"
#include "graph_view.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A ring of 6 vertices with a chord, 2 classes, 3 features. */
static bv_graph_dataset *small_graph(void)
{
    static const int32_t pairs[] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 0, 0, 3};
    bv_graph_dataset *g = calloc(1, sizeof *g);
    bv_error err;
    if (!g || bv_graph_adj_from_pairs(6, pairs, 7, &g->adj, &err) != BV_OK)
        abort();
    g->name = strdup("ring");
    g->num_nodes = 6;
    g->num_features = 3;
    g->num_classes = 2;
    g->num_undirected_edges = 7;
    g->features = calloc(18, sizeof(float));
    g->labels = calloc(6, sizeof(int32_t));
    g->split = calloc(6, 1);
    for (int i = 0; i < 18; i++)
        g->features[i] = (float)(i % 5) * 0.5f;
    for (int i = 0; i < 6; i++) {
        g->labels[i] = i % 2;
        g->split[i] = (uint8_t)(i % 4);
        g->split_count[g->split[i]]++;
    }
    return g;
}

static void write_seeds(const char *dir)
{
    bv_graph_dataset *g = small_graph();
    static const int32_t part_of[] = {0, 0, 1, 1, 1, 0};
    bv_csr *adj_norm = bv_graph_gcn_norm_adj(g);
    bv_error err;
    for (int sparse = 0; sparse < 2; sparse++) { /* dense features, then as a CSR */
        if (sparse && bv_graph_features_convert(g, BV_FEATURES_SPARSE, &err) != BV_OK)
            abort();
        for (int p = 0; p < 2; p++)
            for (int norm = 0; norm < 2; norm++) {
                bv_graph_view v;
                char path[600];
                snprintf(path, sizeof path, "%s/part%d-%d%s", dir, p, norm, sparse ? "-csr" : "");
                bv_graph_part_info info = {0xfeedULL, 6};
                if (bv_graph_view_make(g, part_of, 2, p, norm ? adj_norm : NULL, &v, &err) !=
                        BV_OK ||
                    bv_graph_view_write(&v, &info, path, &err) != BV_OK)
                    abort();
                bv_graph_view_free(&v);
            }
    }
    bv_csr_free(adj_norm);
    bv_graph_free(g);
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    bv_log_set_level(BV_LOG_ERROR);
    fuzz_write_seeds_if_asked(write_seeds);
    return 0;
}

/* Reads path; a part that reads must keep its promises and write back to the same bytes. */
static void try_read(const char *path, const uint8_t *data, size_t size)
{
    bv_graph_view v;
    bv_graph_part_info info;
    bv_error err;
    bv_error_clear(&err);
    if (bv_graph_view_read(path, &v, &info, &err) != BV_OK) {
        if (v.local || v.global_of || !err.msg[0])
            abort();
        return;
    }
    const bv_graph_dataset *d = v.local;
    if (v.owned < 1 || v.owned > d->num_nodes || d->adj.rowptr[d->num_nodes] != d->adj.nnz ||
        v.send_off[v.parts] < 0 || v.recv_off[v.parts] != d->num_nodes - v.owned)
        abort();
    for (int64_t k = 0; k < d->adj.nnz; k++)
        if (d->adj.colidx[k] < 0 || d->adj.colidx[k] >= d->num_nodes)
            abort();
    char again[600];
    snprintf(again, sizeof again, "%s.again", path);
    if (bv_graph_view_write(&v, &info, again, &err) != BV_OK)
        abort();
    FILE *f = fopen(again, "rb");
    uint8_t *back = malloc(size + 1);
    if (!f || !back || fread(back, 1, size + 1, f) != size || memcmp(back, data, size) != 0)
        abort();
    fclose(f);
    free(back);
    unlink(again);
    bv_graph_view_free(&v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[512];
    fuzz_path(path, sizeof path, "part");
    fuzz_write_file(path, data, size);
    try_read(path, data, size);
    if (size < 8)
        return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed)
        abort();
    memcpy(fixed, data, size);
    uint32_t crc = bv_crc32c(0, fixed, size - 4);
    memcpy(fixed + size - 4, &crc, 4);
    fuzz_write_file(path, fixed, size);
    try_read(path, fixed, size);
    free(fixed);
    return 0;
}
