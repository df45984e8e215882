/* Fuzz target: the graph dataset loader (core/src/data/graph_load.c) on all four text
 * files, then the binary cache written from what it loaded (graph_cache.c).
 *
 * The input is the four files of a dataset directory, in the order meta.yaml, edges.tsv,
 * features.svm, split.tsv, separated by lines "@@@@" ("\n@@@@\n"); files the input does
 * not reach are empty. meta.yaml's node and feature counts size the dense feature matrix,
 * so an input whose meta.yaml asks for more than 1M nodes or 4M feature cells is skipped:
 * such sizes are legitimate, just not worth the fuzzer's memory.
 *
 * A dataset that loads must keep the loader's promises (graph.h): a symmetric-adjacency
 * CSR with rows in order and columns in [0, n), labels -1 or a class, split values
 * BV_SPLIT_*. It is then loaded through a cache directory twice (parse and write the
 * cache, then map it) and the mapped copy must equal the parsed one. With
 * BV_FUZZ_CACHE_OUT=DIR the cache files are kept in DIR (run.sh makes the seeds of
 * fuzz_graph_cache this way). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "bivouac/graph.h"
#include "bivouac/log.h"
#include "fuzz_util.h"

#define SEP "\n@@@@\n"
#define MAX_NODES 1000000LL
#define MAX_CELLS 4000000LL

static const char *const file_names[4] = {"meta.yaml", "edges.tsv", "features.svm",
                                          "split.tsv"};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    bv_log_set_level(BV_LOG_ERROR + 1); /* the cache's warnings are expected noise */
    return 0;
}

/* Whether meta.yaml (as the loader reads it: the first document's top-level keys) asks
 * for a feature matrix this target is willing to allocate. */
static bool meta_is_small(const uint8_t *text, size_t len)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    bool small = true;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, text, len);
    if (yaml_parser_load(&parser, &doc)) {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        long long nodes = 1, features = 0;
        if (root && root->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
                 p < root->data.mapping.pairs.top; p++) {
                yaml_node_t *k = yaml_document_get_node(&doc, p->key);
                yaml_node_t *v = yaml_document_get_node(&doc, p->value);
                if (!k || !v || k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE)
                    continue;
                long long x = strtoll((const char *)v->data.scalar.value, NULL, 10);
                if (strcmp((const char *)k->data.scalar.value, "nodes") == 0)
                    nodes = x;
                else if (strcmp((const char *)k->data.scalar.value, "features") == 0)
                    features = x;
            }
        }
        small = nodes <= MAX_NODES && (features <= 0 || features <= MAX_CELLS / (nodes ? nodes : 1));
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    return small;
}

static void check_promises(const bv_graph_dataset *g)
{
    int64_t n = g->num_nodes;
    const bv_csr *a = &g->adj;
    if (a->nrows != n || a->ncols != n || a->rowptr[0] != 0 || a->rowptr[n] != a->nnz)
        abort();
    for (int64_t i = 0; i < n; i++) {
        if (a->rowptr[i] > a->rowptr[i + 1])
            abort();
        for (int64_t k = a->rowptr[i]; k < a->rowptr[i + 1]; k++) {
            if (a->colidx[k] < 0 || a->colidx[k] >= n || a->colidx[k] == i)
                abort();
            if (k > a->rowptr[i] && a->colidx[k] <= a->colidx[k - 1])
                abort();
        }
    }
    for (int64_t i = 0; i < n; i++) {
        if (g->labels[i] < -1 || g->labels[i] >= g->num_classes)
            abort();
        if (g->split[i] > BV_SPLIT_TEST)
            abort();
    }
}

/* The features of both, in the form the loader gives (a CSR). */
static bool same_features(const bv_graph_dataset *a, const bv_graph_dataset *b)
{
    const bv_csr *x = &a->features_csr, *y = &b->features_csr;
    int64_t n = a->num_nodes;
    if (!bv_graph_features_sparse(a) || !bv_graph_features_sparse(b))
        return false;
    return x->nnz == y->nnz &&
           memcmp(x->rowptr, y->rowptr, (size_t)(n + 1) * sizeof(int64_t)) == 0 &&
           memcmp(x->colidx, y->colidx, (size_t)x->nnz * sizeof(int32_t)) == 0 &&
           memcmp(x->values, y->values, (size_t)x->nnz * sizeof(float)) == 0;
}

static bool same_dataset(const bv_graph_dataset *a, const bv_graph_dataset *b)
{
    int64_t n = a->num_nodes;
    return n == b->num_nodes && a->num_features == b->num_features &&
           a->num_classes == b->num_classes && a->adj.nnz == b->adj.nnz &&
           strcmp(a->name, b->name) == 0 &&
           memcmp(a->adj.rowptr, b->adj.rowptr, (size_t)(n + 1) * sizeof(int64_t)) == 0 &&
           memcmp(a->adj.colidx, b->adj.colidx, (size_t)a->adj.nnz * sizeof(int32_t)) == 0 &&
           same_features(a, b) &&
           memcmp(a->labels, b->labels, (size_t)n * sizeof(int32_t)) == 0 &&
           memcmp(a->split, b->split, (size_t)n) == 0 &&
           memcmp(a->split_count, b->split_count, sizeof a->split_count) == 0;
}

static void empty_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *part[4] = {0};
    size_t part_len[4] = {0};
    const uint8_t *p = data, *end = data + size;
    for (int f = 0; f < 4 && p <= end; f++) {
        const uint8_t *sep = memmem(p, (size_t)(end - p), SEP, sizeof SEP - 1);
        part[f] = p;
        part_len[f] = sep ? (size_t)(sep - p) : (size_t)(end - p);
        p = sep ? sep + sizeof SEP - 1 : end + 1;
    }
    if (!meta_is_small(part[0] ? part[0] : data, part_len[0]))
        return 0;

    char dir[512], cache[512], path[600];
    fuzz_path(dir, sizeof dir, "dataset");
    const char *keep = getenv("BV_FUZZ_CACHE_OUT");
    if (keep) {
        snprintf(cache, sizeof cache, "%s", keep);
    } else {
        fuzz_path(cache, sizeof cache, "cache");
        empty_dir(cache);
    }
    mkdir(dir, 0700);
    for (int f = 0; f < 4; f++) {
        snprintf(path, sizeof path, "%s/%s", dir, file_names[f]);
        fuzz_write_file(path, part[f] ? (const void *)part[f] : "", part_len[f]);
    }

    bv_graph_dataset *g = NULL;
    bv_error err;
    bv_error_clear(&err);
    if (bv_graph_load_dir(dir, NULL, &g, &err) != BV_OK) {
        if (g)
            abort(); /* *out must stay NULL on failure */
        return 0;
    }
    check_promises(g);

    bv_graph_dataset *written = NULL, *mapped = NULL;
    if (bv_graph_load_dir(dir, cache, &written, &err) != BV_OK ||
        bv_graph_load_dir(dir, cache, &mapped, &err) != BV_OK) {
        fprintf(stderr, "a dataset that loads without a cache fails with one: %s\n", err.msg);
        abort();
    }
    if (!same_dataset(g, written) || !same_dataset(g, mapped)) {
        fprintf(stderr, "the cached dataset differs from the parsed one\n");
        abort();
    }
    bv_graph_free(mapped);
    bv_graph_free(written);
    bv_graph_free(g);
    return 0;
}
