/* Writes a dataset exactly as bivouac sees it (same loader or generator, same feature
 * normalisation) to raw arrays, so the reference implementations train on the same bytes.
 *   graph_export --out PREFIX --dir DATASET_DIR [--normalize 1]
 *   graph_export --out PREFIX --synthetic powerlaw --nodes N --edges E --features F
 *                --classes C [--exponent 2.1] [--seed 1] [--normalize 0]
 *   graph_export --out PREFIX --synthetic communities --nodes N --features F --classes C
 *                [--avg-degree 4] [--homophily 0.8] [--feature-density 0.02]
 *                [--feature-signal 0.5] [--train-per-class 20] [--val 500] [--test 1000]
 *                [--seed 1] [--normalize 1]
 * PREFIX.bin holds the arrays back to back, PREFIX.json says where each starts: rowptr
 * (int64, n + 1), colidx (int32, nnz; both directions of each edge, no self loops),
 * features (float32, n x f), labels (int32, n), split (uint8, n; 1 train 2 val 3 test).
 * Defaults are those of the experiment schema (core/src/engine/experiment.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "bivouac/graph.h"

typedef struct section {
    const char *name, *dtype;
    const void *data;
    int64_t count;
    size_t elem;
} section;

static int write_all(const char *prefix, const bv_graph_dataset *g)
{
    section s[] = {
        {"rowptr", "int64", g->adj.rowptr, g->num_nodes + 1, 8},
        {"colidx", "int32", g->adj.colidx, g->adj.nnz, 4},
        {"features", "float32", g->features, g->num_nodes * g->num_features, 4},
        {"labels", "int32", g->labels, g->num_nodes, 4},
        {"split", "uint8", g->split, g->num_nodes, 1},
    };
    size_t nsec = sizeof s / sizeof s[0];
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s.bin", prefix);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        perror(tmp);
        return -1;
    }
    int64_t offsets[8], off = 0;
    for (size_t i = 0; i < nsec; i++) {
        offsets[i] = off;
        size_t n = (size_t)s[i].count;
        if (fwrite(s[i].data, s[i].elem, n, f) != n) {
            perror(tmp);
            fclose(f);
            return -1;
        }
        off += (int64_t)(n * s[i].elem);
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        return -1;
    }
    snprintf(path, sizeof path, "%s.json", prefix);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "w"))) {
        perror(tmp);
        return -1;
    }
    fprintf(f, "{\"name\": \"%s\", \"num_nodes\": %lld, \"num_features\": %lld, "
               "\"num_classes\": %d, \"num_undirected_edges\": %lld, \"nnz\": %lld, "
               "\"sections\": {",
            g->name ? g->name : "", (long long)g->num_nodes, (long long)g->num_features,
            g->num_classes, (long long)g->num_undirected_edges, (long long)g->adj.nnz);
    for (size_t i = 0; i < nsec; i++)
        fprintf(f, "%s\"%s\": {\"offset\": %lld, \"count\": %lld, \"dtype\": \"%s\"}",
                i ? ", " : "", s[i].name, (long long)offsets[i], (long long)s[i].count,
                s[i].dtype);
    fprintf(f, "}}\n");
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *out = bench_arg_str(argc, argv, "out", NULL);
    const char *dir = bench_arg_str(argc, argv, "dir", NULL);
    const char *synth = bench_arg_str(argc, argv, "synthetic", NULL);
    if (!out || (!dir == !synth)) {
        fprintf(stderr, "usage: graph_export --out PREFIX (--dir DATASET_DIR | --synthetic "
                        "powerlaw|communities ...)   (see the header of graph_export.c)\n");
        return 2;
    }
    bv_graph_dataset *g = NULL;
    bv_error err = {0};
    bv_status st;
    bool normalize;
    if (dir) {
        st = bv_graph_load_dir(dir, NULL, &g, &err);
        normalize = bench_arg_int(argc, argv, "normalize", 1) != 0;
    } else if (strcmp(synth, "powerlaw") == 0) {
        bv_synth_powerlaw p = {
            .nodes = bench_arg_int(argc, argv, "nodes", 2000),
            .edges = bench_arg_int(argc, argv, "edges", 10000),
            .features = bench_arg_int(argc, argv, "features", 500),
            .classes = (int32_t)bench_arg_int(argc, argv, "classes", 5),
            .exponent = bench_arg_float(argc, argv, "exponent", 2.1),
            .seed = (uint64_t)bench_arg_int(argc, argv, "seed", 1),
        };
        st = bv_graph_synth_powerlaw(&p, &g, &err);
        normalize = bench_arg_int(argc, argv, "normalize", 1) != 0;
    } else if (strcmp(synth, "communities") == 0) {
        bv_synth_communities p = {
            .nodes = bench_arg_int(argc, argv, "nodes", 2000),
            .features = bench_arg_int(argc, argv, "features", 500),
            .classes = (int32_t)bench_arg_int(argc, argv, "classes", 5),
            .avg_degree = bench_arg_float(argc, argv, "avg-degree", 4),
            .homophily = bench_arg_float(argc, argv, "homophily", 0.8),
            .feature_density = bench_arg_float(argc, argv, "feature-density", 0.02),
            .feature_signal = bench_arg_float(argc, argv, "feature-signal", 0.5),
            .train_per_class = bench_arg_int(argc, argv, "train-per-class", 20),
            .val = bench_arg_int(argc, argv, "val", 500),
            .test = bench_arg_int(argc, argv, "test", 1000),
            .seed = (uint64_t)bench_arg_int(argc, argv, "seed", 1),
        };
        st = bv_graph_synth_communities(&p, &g, &err);
        normalize = bench_arg_int(argc, argv, "normalize", 1) != 0;
    } else {
        fprintf(stderr, "graph_export: --synthetic must be powerlaw or communities, got '%s'\n",
                synth);
        return 2;
    }
    if (st == BV_OK && normalize)
        st = bv_graph_row_normalize_features(g, &err);
    if (st == BV_OK) /* the PyG peer reads them dense, as PyG keeps them */
        st = bv_graph_features_convert(g, BV_FEATURES_DENSE, &err);
    if (st != BV_OK) {
        fprintf(stderr, "graph_export: %s\n", err.msg);
        return 1;
    }
    int rc = write_all(out, g) ? 1 : 0;
    bv_graph_free(g);
    return rc;
}
