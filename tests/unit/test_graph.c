/* Tests for graph datasets (core/src/graph_*.c): the text loader on a handmade fixture and
 * on the real cora and citeseer, one test per loader error message, the binary cache
 * (mmap on the second load, rebuilt when corrupt or stale), the synthetic generators, and
 * GCN preprocessing against hand-computed values. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/graph.h"
#include "engine_graph.h"
#include "engine_graph_internal.h"
#include "graph_internal.h"
#include "graph_view.h"
#include "sparse_rows.h"
#include "test_files.h"

/* --- helpers ---------------------------------------------------------------------- */

/* The shared dataset directory, or NULL (and the test is skipped by the caller). */
static char *shared_dataset(const char *name)
{
    const char *data = getenv("BIVOUAC_DATA_DIR");
    if (!data || !*data) {
        print_message("BIVOUAC_DATA_DIR is not set: skipping the %s test\n", name);
        return NULL;
    }
    char *path = malloc(strlen(data) + strlen(name) + 2);
    assert_non_null(path);
    sprintf(path, "%s/%s", data, name);
    return path;
}

/* The single *.bvg file in dir (malloc'd path), failing the test if there is not one. */
static char *only_cache_file(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *found = NULL;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".bvg") == 0) {
            count++;
            free(found);
            found = malloc(strlen(dir) + len + 2);
            assert_non_null(found);
            sprintf(found, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    assert_int_equal(count, 1);
    return found;
}

static int count_cache_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        count += len > 4 && strcmp(e->d_name + len - 4, ".bvg") == 0;
    }
    closedir(d);
    return count;
}

static bv_graph_dataset *load_ok(const char *dir, const char *cache_dir)
{
    bv_graph_dataset *g = NULL;
    bv_error err;
    bv_error_clear(&err);
    bv_status s = bv_graph_load_dir(dir, cache_dir, &g, &err);
    if (s != BV_OK)
        fail_msg("loading %s: %s", dir, err.msg);
    assert_non_null(g);
    return g;
}

/* g's features made dense (in place), for tests that read them by (row, column). */
static const float *dense_features(bv_graph_dataset *g)
{
    bv_error err;
    if (bv_graph_features_convert(g, BV_FEATURES_DENSE, &err) != BV_OK)
        fail_msg("%s", err.msg);
    assert_non_null(g->features);
    return g->features;
}

static bool has_edge(const bv_graph_dataset *g, int64_t r, int32_t c)
{
    int64_t lo = g->adj.rowptr[r], hi = g->adj.rowptr[r + 1];
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (g->adj.colidx[mid] == c)
            return true;
        if (g->adj.colidx[mid] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* The adjacency invariants graph.h promises: CSR shape, columns strictly ascending (so no
 * duplicates), no self loops, every edge present in both directions, values NULL. */
static void assert_valid_adjacency(const bv_graph_dataset *g)
{
    const bv_csr *a = &g->adj;
    assert_int_equal(a->nrows, g->num_nodes);
    assert_int_equal(a->ncols, g->num_nodes);
    assert_null(a->values);
    assert_int_equal(a->rowptr[0], 0);
    assert_int_equal(a->rowptr[a->nrows], a->nnz);
    assert_int_equal(a->nnz, 2 * g->num_undirected_edges);
    for (int64_t r = 0; r < a->nrows; r++) {
        for (int64_t e = a->rowptr[r]; e < a->rowptr[r + 1]; e++) {
            int32_t c = a->colidx[e];
            assert_true(c >= 0 && c < a->ncols);
            assert_true(c != r);
            if (e > a->rowptr[r])
                assert_true(a->colidx[e - 1] < c);
            assert_true(has_edge(g, c, (int32_t)r));
        }
    }
}

static void assert_same_dataset(const bv_graph_dataset *a, const bv_graph_dataset *b)
{
    assert_string_equal(a->name, b->name);
    assert_int_equal(a->num_nodes, b->num_nodes);
    assert_int_equal(a->num_features, b->num_features);
    assert_int_equal(a->num_classes, b->num_classes);
    assert_int_equal(a->num_undirected_edges, b->num_undirected_edges);
    assert_int_equal(a->adj.nnz, b->adj.nnz);
    size_t n = (size_t)a->num_nodes;
    assert_memory_equal(a->adj.rowptr, b->adj.rowptr, (n + 1) * sizeof(int64_t));
    assert_memory_equal(a->adj.colidx, b->adj.colidx, (size_t)a->adj.nnz * sizeof(int32_t));
    assert_int_equal(bv_graph_features_sparse(a), bv_graph_features_sparse(b));
    if (bv_graph_features_sparse(a)) {
        const bv_csr *x = &a->features_csr, *y = &b->features_csr;
        assert_int_equal(x->nnz, y->nnz);
        assert_memory_equal(x->rowptr, y->rowptr, (n + 1) * sizeof(int64_t));
        assert_memory_equal(x->colidx, y->colidx, (size_t)x->nnz * sizeof(int32_t));
        assert_memory_equal(x->values, y->values, (size_t)x->nnz * sizeof(float));
    } else {
        assert_memory_equal(a->features, b->features,
                            n * (size_t)a->num_features * sizeof(float));
    }
    assert_memory_equal(a->labels, b->labels, n * sizeof(int32_t));
    assert_memory_equal(a->split, b->split, n);
    assert_memory_equal(a->split_count, b->split_count, sizeof a->split_count);
}

/* --- the text loader -------------------------------------------------------------- */

static void test_load_tiny_fixture_exactly(void **state)
{
    (void)state;
    char *dir = fixture("ok");
    bv_graph_dataset *g = load_ok(dir, NULL);
    assert_string_equal(g->name, "tiny");
    assert_int_equal(g->num_nodes, 5);
    assert_int_equal(g->num_features, 3);
    assert_int_equal(g->num_classes, 2);
    assert_int_equal(g->num_undirected_edges, 4);
    assert_null(g->mapping);
    static const int64_t rowptr[] = {0, 2, 4, 6, 7, 8};
    static const int32_t colidx[] = {1, 4, 0, 2, 1, 3, 2, 0};
    assert_int_equal(g->adj.nnz, 8);
    assert_memory_equal(g->adj.rowptr, rowptr, sizeof rowptr);
    assert_memory_equal(g->adj.colidx, colidx, sizeof colidx);
    /* loaded as the CSR features.svm is: no stored zeros, columns ascending */
    assert_true(bv_graph_features_sparse(g));
    static const int64_t feat_rowptr[] = {0, 2, 3, 3, 6, 7};
    static const int32_t feat_colidx[] = {0, 2, 1, 0, 1, 2, 2};
    assert_int_equal(g->features_csr.nnz, 7);
    assert_memory_equal(g->features_csr.rowptr, feat_rowptr, sizeof feat_rowptr);
    assert_memory_equal(g->features_csr.colidx, feat_colidx, sizeof feat_colidx);
    static const float features[] = {1, 0, 0.5f, 0, 2, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1.5e-05f};
    assert_memory_equal(dense_features(g), features, sizeof features);
    assert_false(bv_graph_features_sparse(g));
    static const int32_t labels[] = {0, 1, -1, 0, 1};
    assert_memory_equal(g->labels, labels, sizeof labels);
    static const uint8_t split[] = {BV_SPLIT_TRAIN, BV_SPLIT_TRAIN, BV_SPLIT_VAL, BV_SPLIT_TEST,
                                    BV_SPLIT_NONE};
    assert_memory_equal(g->split, split, sizeof split);
    assert_int_equal(g->split_count[BV_SPLIT_NONE], 1);
    assert_int_equal(g->split_count[BV_SPLIT_TRAIN], 2);
    assert_int_equal(g->split_count[BV_SPLIT_VAL], 1);
    assert_int_equal(g->split_count[BV_SPLIT_TEST], 1);
    assert_valid_adjacency(g);
    bv_graph_free(g);
    free(dir);
}

static void test_load_cora(void **state)
{
    (void)state;
    char *dir = shared_dataset("cora");
    if (!dir)
        skip();
    bv_graph_dataset *g = load_ok(dir, NULL);
    assert_string_equal(g->name, "cora");
    assert_int_equal(g->num_nodes, 2708);
    assert_int_equal(g->num_undirected_edges, 5278);
    assert_int_equal(g->adj.nnz, 10556);
    assert_int_equal(g->num_features, 1433);
    assert_int_equal(g->num_classes, 7);
    assert_int_equal(g->split_count[BV_SPLIT_TRAIN], 140);
    assert_int_equal(g->split_count[BV_SPLIT_VAL], 500);
    assert_int_equal(g->split_count[BV_SPLIT_TEST], 1000);
    assert_int_equal(g->split_count[BV_SPLIT_NONE], 1068);
    assert_valid_adjacency(g);

    /* Node 0, line 1: "3 19:1 81:1 146:1 315:1 774:1 877:1 1194:1 1247:1 1274:1"; its
     * edges.tsv lines are 0-633, 0-1862, 0-2582. */
    static const int32_t words0[] = {19, 81, 146, 315, 774, 877, 1194, 1247, 1274};
    assert_int_equal(g->labels[0], 3);
    assert_int_equal(g->split[0], BV_SPLIT_TRAIN);
    assert_int_equal(bv_graph_features_nnz(g), 49216);
    const float *features = dense_features(g);
    int nonzero = 0;
    for (int j = 0; j < 1433; j++)
        nonzero += features[j] != 0.0f;
    assert_int_equal(nonzero, 9);
    for (size_t k = 0; k < sizeof words0 / sizeof words0[0]; k++)
        assert_true(features[words0[k]] == 1.0f);
    static const int32_t row0[] = {633, 1862, 2582};
    assert_int_equal(g->adj.rowptr[1] - g->adj.rowptr[0], 3);
    assert_memory_equal(g->adj.colidx, row0, sizeof row0);

    /* Node 1708 (line 1709): label 3, split test, 20 words starting 7, 41, 65; neighbours
     * 467, 873, 1358 (as dst) and 1857, 2313, 2314 (as src). */
    const float *x = features + 1708 * 1433;
    assert_int_equal(g->labels[1708], 3);
    assert_int_equal(g->split[1708], BV_SPLIT_TEST);
    nonzero = 0;
    for (int j = 0; j < 1433; j++)
        nonzero += x[j] != 0.0f;
    assert_int_equal(nonzero, 20);
    assert_true(x[7] == 1.0f && x[41] == 1.0f && x[65] == 1.0f && x[1351] == 1.0f);
    static const int32_t row1708[] = {467, 873, 1358, 1857, 2313, 2314};
    assert_int_equal(g->adj.rowptr[1709] - g->adj.rowptr[1708], 6);
    assert_memory_equal(g->adj.colidx + g->adj.rowptr[1708], row1708, sizeof row1708);
    bv_graph_free(g);
    free(dir);
}

static void test_load_citeseer(void **state)
{
    (void)state;
    char *dir = shared_dataset("citeseer");
    if (!dir)
        skip();
    bv_graph_dataset *g = load_ok(dir, NULL);
    assert_int_equal(g->num_nodes, 3327);
    assert_int_equal(g->adj.nnz, 9104);
    assert_int_equal(g->num_undirected_edges, 4552);
    assert_int_equal(g->num_features, 3703);
    assert_int_equal(g->num_classes, 6);
    assert_int_equal(g->split_count[BV_SPLIT_TRAIN], 120);
    assert_int_equal(g->split_count[BV_SPLIT_VAL], 500);
    assert_int_equal(g->split_count[BV_SPLIT_TEST], 1000);
    int unlabeled = 0, isolated = 0;
    for (int64_t i = 0; i < g->num_nodes; i++) {
        if (g->labels[i] == -1) {
            unlabeled++;
            assert_int_equal(g->split[i], BV_SPLIT_NONE); /* README: all 15 are 'none' */
        }
        isolated += g->adj.rowptr[i + 1] == g->adj.rowptr[i];
    }
    assert_int_equal(unlabeled, 15);
    assert_int_equal(isolated, 48);
    assert_valid_adjacency(g);
    bv_graph_free(g);
    free(dir);
}

/* --- one test per error message ----------------------------------------------------- */

static void test_error_missing_file(void **state)
{
    (void)state;
    expect_dataset_error("missing_edges", true, BV_ERR_IO, "edges.tsv: No such file or directory");
}

static void test_error_truncated_features_size(void **state)
{
    (void)state;
    expect_dataset_error("truncated_features", true, BV_ERR_INVALID,
                      "features.svm: 28 bytes, but meta.yaml says 47 (truncated or modified?)");
}

static void test_error_edge_out_of_range(void **state)
{
    (void)state;
    expect_dataset_error("edge_out_of_range", true, BV_ERR_INVALID,
                      "edges.tsv:3: node 5 out of range (5 nodes)");
}

static void test_error_malformed_edge_line(void **state)
{
    (void)state;
    expect_dataset_error("bad_edge_line", true, BV_ERR_INVALID,
                         "edges.tsv:2: expected 'src<TAB>dst'");
}

static void test_error_edge_count_differs_from_meta(void **state)
{
    (void)state;
    expect_dataset_error("edge_count", true, BV_ERR_INVALID,
                      "edges.tsv: 3 lines, but meta.yaml says undirected_edges: 4 (one line per "
                      "edge)");
}

static void test_error_too_few_feature_lines(void **state)
{
    (void)state;
    expect_dataset_error("short_features", true, BV_ERR_INVALID,
                      "features.svm: 3 lines, but meta.yaml says nodes: 5 (one line per node)");
}

static void test_error_malformed_feature(void **state)
{
    (void)state;
    expect_dataset_error("bad_feature", true, BV_ERR_INVALID,
                         "features.svm:4: malformed feature '3:'");
}

static void test_error_feature_index_out_of_range(void **state)
{
    (void)state;
    expect_dataset_error("feature_index_range", true, BV_ERR_INVALID,
                      "features.svm:2: feature index 3 out of range (3 features)");
}

static void test_error_label_out_of_range(void **state)
{
    (void)state;
    expect_dataset_error("label_range", true, BV_ERR_INVALID,
                      "features.svm:5: label 2 out of range (2 classes)");
}

static void test_error_unknown_split(void **state)
{
    (void)state;
    expect_dataset_error("bad_split", true, BV_ERR_INVALID,
                      "split.tsv:3: unknown split 'tran' (expected train, val, test or none)");
}

static void test_error_too_few_split_lines(void **state)
{
    (void)state;
    expect_dataset_error("short_split", true, BV_ERR_INVALID,
                      "split.tsv: 4 lines, but meta.yaml says nodes: 5 (one line per node)");
}

static void test_error_meta_missing_key(void **state)
{
    (void)state;
    expect_dataset_error("meta_missing_nodes", true, BV_ERR_INVALID, "meta.yaml: missing 'nodes'");
}

static void test_error_missing_directory(void **state)
{
    (void)state;
    expect_dataset_error("no_such_dataset", true, BV_ERR_IO,
                         "meta.yaml: No such file or directory");
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A one-node dataset in a temp dir whose only feature line is `line`. */
static bv_status load_feature_line(const char *line, bv_graph_dataset **g, bv_error *err)
{
    char *dir = make_temp_dir();
    write_text(dir, "meta.yaml", "nodes: 1\nundirected_edges: 0\nfeatures: 10\nclasses: 1\n");
    write_text(dir, "edges.tsv", "");
    write_text(dir, "split.tsv", "train\n");
    write_text(dir, "features.svm", line);
    bv_status s = bv_graph_load_dir(dir, NULL, g, err);
    remove_tree(dir);
    free(dir);
    return s;
}

/* The fast path (<= 7 digits, |exponent| <= 10) and the strtof fallback agree with strtof,
 * bit for bit; hex, inf and nan are refused. */
static void test_feature_values_parse_like_strtof(void **state)
{
    (void)state;
    static const char *const values[] = {
        "0.1", "-2.5E+3", "1e-30", "0.123456789", "3.40282e+38",
        "1",   "7e-45",   "100000000", "9.99999e-11", "1234567e3",
    };
    char line[512] = "0";
    for (int i = 0; i < 10; i++)
        snprintf(line + strlen(line), sizeof line - strlen(line), " %d:%s", i, values[i]);
    strcat(line, "\n");
    bv_graph_dataset *g = NULL;
    bv_error err;
    if (load_feature_line(line, &g, &err) != BV_OK)
        fail_msg("%s", err.msg);
    const float *features = dense_features(g);
    for (int i = 0; i < 10; i++) {
        float want = strtof(values[i], NULL);
        assert_memory_equal(&features[i], &want, sizeof want);
    }
    bv_graph_free(g);

    static const char *const refused[] = {"0 1:nan\n", "0 1:inf\n", "0 1:0x1p3\n", "0 1:1e99\n"};
    for (int i = 0; i < 4; i++) {
        g = NULL;
        assert_int_equal(load_feature_line(refused[i], &g, &err), BV_ERR_INVALID);
        assert_null(g);
        assert_non_null(strstr(err.msg, "features.svm:1: malformed feature '1:"));
    }
}

/* --- the binary cache --------------------------------------------------------------- */

/* First load parses and writes the cache; the second maps it and sees the same bytes. */
static void check_cache_roundtrip(const char *dir, const char *expect_name)
{
    char *tmp = make_temp_dir();
    char cache_dir[4096];
    snprintf(cache_dir, sizeof cache_dir, "%s/nested/cache", tmp); /* mkdir -p */
    bv_graph_dataset *parsed = load_ok(dir, cache_dir);
    assert_null(parsed->mapping);
    char *file = only_cache_file(cache_dir);
    const char *base = strrchr(file, '/') + 1;
    assert_int_equal(strlen(base), strlen(expect_name) + 1 + 16 + 4);
    assert_memory_equal(base, expect_name, strlen(expect_name));
    assert_int_equal(base[strlen(expect_name)], '-');
    assert_int_equal(strspn(base + strlen(expect_name) + 1, "0123456789abcdef"), 16);

    bv_graph_dataset *mapped = load_ok(dir, cache_dir);
    assert_non_null(mapped->mapping);
    assert_true(mapped->mapping_len > 0);
    assert_same_dataset(parsed, mapped);
    assert_valid_adjacency(mapped);
    /* The arrays are views into the mapping, not copies. */
    const char *lo = mapped->mapping, *hi = lo + mapped->mapping_len;
    assert_true((const char *)mapped->adj.colidx >= lo && (const char *)mapped->adj.colidx < hi);
    const bv_csr *x = &mapped->features_csr;
    assert_true((const char *)x->values >= lo && (const char *)x->values < hi);
    assert_int_equal((uintptr_t)x->rowptr % 64, 0);
    assert_int_equal((uintptr_t)x->colidx % 64, 0);
    assert_int_equal((uintptr_t)x->values % 64, 0);
    assert_int_equal((uintptr_t)mapped->adj.rowptr % 64, 0);
    bv_graph_free(mapped);
    bv_graph_free(parsed);
    free(file);
    remove_tree(tmp);
    free(tmp);
}

static void test_cache_second_load_is_mapped_tiny(void **state)
{
    (void)state;
    char *dir = fixture("ok");
    check_cache_roundtrip(dir, "tiny");
    free(dir);
}

static void test_cache_second_load_is_mapped_cora(void **state)
{
    (void)state;
    char *dir = shared_dataset("cora");
    if (!dir)
        skip();
    check_cache_roundtrip(dir, "cora");
    free(dir);
}

typedef enum { FLIP_ROWPTR_BYTE, FLIP_TAIL_BYTE, FLIP_HEADER_BYTE, TRUNCATE, EMPTY } damage;

static void damage_file(const char *path, damage how)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    if (how == TRUNCATE || how == EMPTY) {
        assert_int_equal(truncate(path, how == EMPTY ? 0 : st.st_size - 10), 0);
        return;
    }
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    /* Header byte 40 is in the node count, byte 328 in the row pointers (the first
     * section, right after the 320-byte header); the last 20 bytes straddle the split,
     * the zero padding after it and the name: every byte of the file is checked. */
    off_t at = how == FLIP_HEADER_BYTE ? 40 : how == FLIP_ROWPTR_BYTE ? 328 : st.st_size - 20;
    unsigned char byte;
    assert_int_equal(pread(fd, &byte, 1, at), 1);
    byte ^= 0x10;
    assert_int_equal(pwrite(fd, &byte, 1, at), 1);
    close(fd);
}

static void test_cache_corrupt_file_is_rebuilt(void **state)
{
    (void)state;
    char *dir = fixture("ok");
    static const damage kinds[] = {FLIP_ROWPTR_BYTE, FLIP_TAIL_BYTE, FLIP_HEADER_BYTE, TRUNCATE,
                                   EMPTY};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        char *tmp = make_temp_dir();
        bv_graph_dataset *first = load_ok(dir, tmp);
        char *file = only_cache_file(tmp);
        damage_file(file, kinds[k]);
        bv_graph_dataset *rebuilt = load_ok(dir, tmp); /* warns, parses the text again */
        assert_null(rebuilt->mapping);
        assert_same_dataset(first, rebuilt);
        bv_graph_dataset *mapped = load_ok(dir, tmp); /* and the rewritten cache is good */
        assert_non_null(mapped->mapping);
        assert_same_dataset(first, mapped);
        assert_int_equal(count_cache_files(tmp), 1);
        bv_graph_free(first);
        bv_graph_free(rebuilt);
        bv_graph_free(mapped);
        free(file);
        remove_tree(tmp);
        free(tmp);
    }
    free(dir);
}

static void test_cache_key_changes_with_mtime(void **state)
{
    (void)state;
    char *src = fixture("ok");
    char *tmp = make_temp_dir();
    char data[2048], cache[2048];
    snprintf(data, sizeof data, "%s/tiny", tmp);
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    assert_int_equal(mkdir(data, 0777), 0);
    static const char *const files[] = {"meta.yaml", "edges.tsv", "features.svm", "split.tsv"};
    for (int i = 0; i < 4; i++) {
        char from[4096], to[4096];
        snprintf(from, sizeof from, "%s/%s", src, files[i]);
        snprintf(to, sizeof to, "%s/%s", data, files[i]);
        copy_file(from, to);
    }
    bv_graph_dataset *g = load_ok(data, cache);
    bv_graph_free(g);
    g = load_ok(data, cache);
    assert_non_null(g->mapping);
    bv_graph_free(g);

    char edges[4096];
    snprintf(edges, sizeof edges, "%s/edges.tsv", data);
    struct timespec times[2] = {{.tv_sec = 1000000000, .tv_nsec = 0},
                                {.tv_sec = 1000000000, .tv_nsec = 0}};
    assert_int_equal(utimensat(AT_FDCWD, edges, times, 0), 0);
    g = load_ok(data, cache);
    assert_null(g->mapping); /* a different key: parsed again, written under a new name */
    bv_graph_free(g);
    assert_int_equal(count_cache_files(cache), 2);
    remove_tree(tmp);
    free(tmp);
    free(src);
}

/* The cache checksum is XXH64; these are the reference implementation's outputs. */
static void test_hash64_matches_xxh64_reference(void **state)
{
    (void)state;
    static const char fox[] = "The quick brown fox jumps over the lazy dog";
    assert_int_equal(bv_graph_hash64("", 0, 0), 0xef46db3751d8e999ull);
    assert_int_equal(bv_graph_hash64("abc", 3, 0), 0x44bc2cf5ad770999ull);
    assert_int_equal(bv_graph_hash64(fox, 43, 0), 0x0b242d361fda71bcull);
    assert_int_equal(bv_graph_hash64(fox, 43, 1), 0xdf5091b6dad2c6dbull);
}

/* --- preprocessing ------------------------------------------------------------------ */

static void test_row_normalize_copies_mapped_features(void **state)
{
    (void)state;
    char *dir = fixture("ok");
    char *tmp = make_temp_dir();
    bv_graph_free(load_ok(dir, tmp));
    bv_graph_dataset *g = load_ok(dir, tmp);
    assert_non_null(g->mapping);
    const float *before = g->features_csr.values;
    bv_error err;
    assert_int_equal(bv_graph_row_normalize_features(g, &err), BV_OK);
    assert_ptr_not_equal(g->features_csr.values, before);
    const float *features = dense_features(g);
    /* Rows {1, 0, 0.5}, {0, 2, 0}, {0, 0, 0}, {1, 1, 1}, {0, 0, 1.5e-5}. */
    static const float want[] = {1.0f / 1.5f, 0, 0.5f / 1.5f, 0, 1, 0, 0, 0, 0,
                                 1.0f / 3.0f, 1.0f / 3.0f, 1.0f / 3.0f, 0, 0, 1};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_true(features[i] == want[i]);
    assert_true(before[0] == 1.0f); /* the cache file is untouched */
    bv_graph_free(g);
    remove_tree(tmp);
    free(tmp);
    free(dir);
}

/* A dataset built by hand around an adjacency (heap arrays, freed by bv_graph_free). */
static bv_graph_dataset *dataset_from_rows(int64_t n, const int64_t *rowptr,
                                           const int32_t *colidx)
{
    bv_graph_dataset *g = calloc(1, sizeof *g);
    assert_non_null(g);
    g->name = strdup("hand");
    g->num_nodes = n;
    g->num_undirected_edges = rowptr[n] / 2;
    g->adj.nrows = g->adj.ncols = n;
    g->adj.nnz = rowptr[n];
    g->adj.owned = 1;
    g->adj.rowptr = malloc((size_t)(n + 1) * sizeof *rowptr);
    g->adj.colidx = malloc((size_t)rowptr[n] * sizeof *colidx);
    memcpy(g->adj.rowptr, rowptr, (size_t)(n + 1) * sizeof *rowptr);
    memcpy(g->adj.colidx, colidx, (size_t)rowptr[n] * sizeof *colidx);
    return g;
}

static void test_gcn_norm_adj_path_of_three(void **state)
{
    (void)state;
    /* 0 - 1 - 2. With self loops the degrees are 2, 3, 2, so
     *   Â = [[1/2, 1/√6, 0], [1/√6, 1/3, 1/√6], [0, 1/√6, 1/2]]. */
    static const int64_t rowptr[] = {0, 1, 3, 4};
    static const int32_t colidx[] = {1, 0, 2, 1};
    bv_graph_dataset *g = dataset_from_rows(3, rowptr, colidx);
    bv_csr *a = bv_graph_gcn_norm_adj(g);
    assert_non_null(a);
    static const int64_t want_rowptr[] = {0, 2, 5, 7};
    static const int32_t want_colidx[] = {0, 1, 0, 1, 2, 1, 2};
    const float s6 = (float)(1.0 / sqrt(6.0));
    const float want_values[] = {0.5f, s6, s6, 1.0f / 3.0f, s6, s6, 0.5f};
    assert_int_equal(a->nrows, 3);
    assert_int_equal(a->ncols, 3);
    assert_int_equal(a->nnz, 7);
    assert_memory_equal(a->rowptr, want_rowptr, sizeof want_rowptr);
    assert_memory_equal(a->colidx, want_colidx, sizeof want_colidx);
    for (int i = 0; i < 7; i++)
        assert_true(a->values[i] == want_values[i]);
    bv_csr_free(a);
    bv_graph_free(g);
}

static void test_gcn_norm_adj_isolated_node_and_middle_self_loop(void **state)
{
    (void)state;
    /* Node 2 is linked to 0 and 3 (the self loop goes between them); node 1 is isolated
     * (Â gets just its self loop, 1). Degrees with self loops: 2, 1, 3, 2. */
    static const int64_t rowptr[] = {0, 1, 1, 3, 4};
    static const int32_t colidx[] = {2, 0, 3, 2};
    bv_graph_dataset *g = dataset_from_rows(4, rowptr, colidx);
    bv_csr *a = bv_graph_gcn_norm_adj(g);
    static const int64_t want_rowptr[] = {0, 2, 3, 6, 8};
    static const int32_t want_colidx[] = {0, 2, 1, 0, 2, 3, 2, 3};
    const float s6 = (float)(1.0 / sqrt(6.0));
    const float want_values[] = {0.5f, s6, 1.0f, s6, 1.0f / 3.0f, s6, s6, 0.5f};
    assert_memory_equal(a->rowptr, want_rowptr, sizeof want_rowptr);
    assert_memory_equal(a->colidx, want_colidx, sizeof want_colidx);
    for (int i = 0; i < 8; i++)
        assert_true(a->values[i] == want_values[i]);
    bv_csr_free(a);
    bv_graph_free(g);
}

/* --- synthetic graphs ---------------------------------------------------------------- */

static bv_synth_communities communities_params(uint64_t seed)
{
    return (bv_synth_communities){.nodes = 1000, .features = 200, .classes = 4,
                                  .avg_degree = 8, .homophily = 0.8, .feature_density = 0.05,
                                  .feature_signal = 0.7, .train_per_class = 20, .val = 200,
                                  .test = 400, .seed = seed};
}

static void test_communities_sizes_and_shape(void **state)
{
    (void)state;
    bv_synth_communities p = communities_params(7);
    bv_graph_dataset *g = NULL;
    bv_error err;
    assert_int_equal(bv_graph_synth_communities(&p, &g, &err), BV_OK);
    assert_int_equal(g->num_nodes, 1000);
    assert_int_equal(g->num_features, 200);
    assert_int_equal(g->num_classes, 4);
    assert_int_equal(g->num_undirected_edges, 4000); /* nodes * avg_degree / 2 */
    assert_valid_adjacency(g);
    assert_int_equal(g->split_count[BV_SPLIT_TRAIN], 80);
    assert_int_equal(g->split_count[BV_SPLIT_VAL], 200);
    assert_int_equal(g->split_count[BV_SPLIT_TEST], 400);
    assert_int_equal(g->split_count[BV_SPLIT_NONE], 320);
    int64_t per_class[4] = {0}, train_per_class[4] = {0}, intra = 0;
    for (int64_t i = 0; i < g->num_nodes; i++) {
        assert_true(g->labels[i] >= 0 && g->labels[i] < 4);
        per_class[g->labels[i]]++;
        train_per_class[g->labels[i]] += g->split[i] == BV_SPLIT_TRAIN;
        for (int64_t e = g->adj.rowptr[i]; e < g->adj.rowptr[i + 1]; e++)
            intra += g->labels[g->adj.colidx[e]] == g->labels[i];
        const bv_csr *f = &g->features_csr;
        for (int64_t k = f->rowptr[i]; k < f->rowptr[i + 1]; k++) {
            assert_true(f->values[k] == 1.0f);
            assert_true(k == f->rowptr[i] || f->colidx[k] > f->colidx[k - 1]);
        }
    }
    for (int k = 0; k < 4; k++) {
        assert_int_equal(per_class[k], 250);
        assert_int_equal(train_per_class[k], 20);
    }
    double homophily = (double)intra / (double)g->adj.nnz;
    assert_true(homophily > 0.75 && homophily < 0.85);
    bv_graph_free(g);
}

static void test_communities_deterministic_for_a_seed(void **state)
{
    (void)state;
    bv_synth_communities p = communities_params(42);
    bv_graph_dataset *a = NULL, *b = NULL, *c = NULL;
    bv_error err;
    assert_int_equal(bv_graph_synth_communities(&p, &a, &err), BV_OK);
    assert_int_equal(bv_graph_synth_communities(&p, &b, &err), BV_OK);
    assert_same_dataset(a, b);
    p.seed = 43;
    assert_int_equal(bv_graph_synth_communities(&p, &c, &err), BV_OK);
    assert_true(a->adj.nnz != c->adj.nnz ||
                memcmp(a->adj.colidx, c->adj.colidx, (size_t)a->adj.nnz * 4) != 0);
    bv_graph_free(a);
    bv_graph_free(b);
    bv_graph_free(c);
}

static void test_powerlaw_sizes_shape_and_determinism(void **state)
{
    (void)state;
    bv_synth_powerlaw p = {.nodes = 5000, .edges = 40000, .features = 16, .classes = 5,
                           .exponent = 2.1, .seed = 1};
    bv_graph_dataset *a = NULL, *b = NULL, *c = NULL;
    bv_error err;
    assert_int_equal(bv_graph_synth_powerlaw(&p, &a, &err), BV_OK);
    assert_int_equal(a->num_nodes, 5000);
    assert_int_equal(a->num_features, 16);
    assert_int_equal(a->num_classes, 5);
    assert_int_equal(a->num_undirected_edges, 40000); /* exactly, after dedup */
    assert_int_equal(a->adj.nnz, 80000);
    assert_valid_adjacency(a);
    assert_int_equal(a->split_count[BV_SPLIT_TRAIN], 500);
    assert_int_equal(a->split_count[BV_SPLIT_VAL], 500);
    assert_int_equal(a->split_count[BV_SPLIT_TEST], 4000);
    assert_int_equal(a->split_count[BV_SPLIT_NONE], 0);
    /* Heavy tail: the largest degree is far above the mean (16), every class is used. */
    int64_t max_degree = 0, per_class[5] = {0};
    for (int64_t i = 0; i < a->num_nodes; i++) {
        int64_t d = a->adj.rowptr[i + 1] - a->adj.rowptr[i];
        max_degree = d > max_degree ? d : max_degree;
        assert_true(a->labels[i] >= 0 && a->labels[i] < 5);
        per_class[a->labels[i]]++;
    }
    assert_true(max_degree > 10 * 16);
    for (int k = 0; k < 5; k++)
        assert_true(per_class[k] > 0);

    assert_int_equal(bv_graph_synth_powerlaw(&p, &b, &err), BV_OK);
    assert_same_dataset(a, b);
    p.seed = 2;
    assert_int_equal(bv_graph_synth_powerlaw(&p, &c, &err), BV_OK);
    assert_int_equal(c->num_undirected_edges, 40000);
    assert_true(memcmp(a->adj.colidx, c->adj.colidx, 80000 * sizeof(int32_t)) != 0);
    bv_graph_free(a);
    bv_graph_free(b);
    bv_graph_free(c);
}

static void test_powerlaw_rejects_impossible_requests(void **state)
{
    (void)state;
    bv_graph_dataset *g = (bv_graph_dataset *)&g;
    bv_error err;
    bv_synth_powerlaw p = {.nodes = 10, .edges = 46, .features = 4, .classes = 2,
                           .exponent = 2.1, .seed = 1};
    assert_int_equal(bv_graph_synth_powerlaw(&p, &g, &err), BV_ERR_INVALID);
    assert_null(g);
    assert_string_equal(err.msg, "powerlaw: 46 edges impossible with 10 nodes");
    p.edges = 10;
    p.exponent = 1.0;
    assert_int_equal(bv_graph_synth_powerlaw(&p, &g, &err), BV_ERR_INVALID);
    assert_string_equal(err.msg, "powerlaw: exponent must be above 1, not 1");
}

/* engine.intervals: 0 picks one interval per 65,536 vertices. */
static void test_auto_intervals(void **state)
{
    (void)state;
    assert_int_equal(bv_graph_auto_intervals(0), 1);
    assert_int_equal(bv_graph_auto_intervals(2708), 1);
    assert_int_equal(bv_graph_auto_intervals(65536), 1);
    assert_int_equal(bv_graph_auto_intervals(65537), 2);
    assert_int_equal(bv_graph_auto_intervals(1000000), 16);
}

/* A task's reference into the shared arrays is checked before any use: the array must
 * exist, the window lie inside it with the size the task needs, and nothing may write into
 * the dataset's arrays. */
static void test_shared_window_checks_every_reference(void **state)
{
    (void)state;
    float features[40], act[12], partials[8];
    bv_shared_array table[BV_SHARED_STAGES + 4] = {{features, sizeof features}};
    table[bv_shared_act(0)] = (bv_shared_array){act, sizeof act};
    bv_graph_engine e = {.nstages = 1, .cfg.share_arrays = true, .shared = table};
    table[bv_shared_edge_partials(&e)] = (bv_shared_array){partials, sizeof partials};
    assert_int_equal(bv_shared_count(&e), BV_SHARED_STAGES + 4);
    bv_error err;
    bv_array_ref ref = {bv_shared_act(0), 8, 16};
    assert_ptr_equal(bv_engine_shared_window(&e, 0, &ref, 16, true, &err), act + 2);
    ref = (bv_array_ref){bv_shared_edge_partials(&e), 16, 16}; /* an edge task's slot */
    assert_ptr_equal(bv_engine_shared_window(&e, 0, &ref, 16, true, &err), partials + 4);
    ref = (bv_array_ref){bv_shared_edge_input(&e), 0, 4}; /* no edge stage: none */
    assert_null(bv_engine_shared_window(&e, 0, &ref, 4, false, &err));
    assert_string_equal(err.msg,
                        "task names bytes [0, +4) of shared array 5 (0 bytes, want 4)");
    ref = (bv_array_ref){BV_SHARED_FEATURES, 0, 160};
    assert_ptr_equal(bv_engine_shared_window(&e, 0, &ref, 160, false, &err), features);
    assert_null(bv_engine_shared_window(&e, 0, &ref, 160, true, &err));
    assert_string_equal(err.msg, "task names shared array 0, which is not one");
    ref = (bv_array_ref){(int64_t)bv_shared_count(&e), 0, 4};
    assert_null(bv_engine_shared_window(&e, 0, &ref, 4, false, &err));
    assert_string_equal(err.msg, "task names shared array 7, which is not one");
    ref = (bv_array_ref){bv_shared_dact(0), 0, 4}; /* no gradient array right now */
    assert_null(bv_engine_shared_window(&e, 0, &ref, 4, false, &err));
    assert_string_equal(err.msg,
                        "task names bytes [0, +4) of shared array 4 (0 bytes, want 4)");
    ref = (bv_array_ref){bv_shared_act(0), 40, 16}; /* runs 8 bytes past the end */
    assert_null(bv_engine_shared_window(&e, 0, &ref, 16, false, &err));
    assert_string_equal(err.msg,
                        "task names bytes [40, +16) of shared array 3 (48 bytes, want 16)");
    ref = (bv_array_ref){bv_shared_act(0), UINT64_MAX - 3, 8}; /* offset + bytes wraps */
    assert_null(bv_engine_shared_window(&e, 0, &ref, 8, false, &err));
    ref = (bv_array_ref){bv_shared_act(0), 0, 8};
    assert_null(bv_engine_shared_window(&e, 0, &ref, 12, false, &err)); /* not the size wanted */
    e.cfg.share_arrays = false; /* a run that copies accepts no references */
    assert_null(bv_engine_shared_window(&e, 0, &ref, 8, false, &err));
    assert_string_equal(err.msg, "task names shared array 3, which is not one");

    /* bv_engine_task_array: the message's own bytes, or the window a reference names */
    e.cfg.share_arrays = true;
    float inline_rows[3] = {1, 2, 3};
    ref = (bv_array_ref){bv_shared_act(0), 4, 8};
    bv_role_msg m = {.hdr = {.stage = 2, .na = sizeof inline_rows, .nb = sizeof ref,
                             .flags = BV_TASK_REF_B},
                     .a = (const uint8_t *)inline_rows, .b = (const uint8_t *)&ref};
    assert_ptr_equal(bv_engine_task_array(&e, &m, 0, sizeof inline_rows, &err), inline_rows);
    assert_ptr_equal(bv_engine_task_array(&e, &m, 1, 8, &err), act + 1);
    assert_null(bv_engine_task_array(&e, &m, 0, 8, &err));
    assert_string_equal(err.msg, "task for stage 2 has 12 bytes in array a, not 8");
    m.hdr.nb = 8; /* a reference that is not one */
    assert_null(bv_engine_task_array(&e, &m, 1, 8, &err));
    assert_string_equal(err.msg, "task's array reference is 8 bytes, not 24");
}

/* Roles as processes on one host: a tensor worker maps the segment a graph server offers
 * (BV_MSG_SEGMENT) and resolves windows against it; what it writes there the graph server
 * reads in its own mapping. An offer that lies, comes twice or names arrays outside the
 * segment is refused, and a window of a server that offered nothing is not one. */
static void test_segment_maps_the_graph_servers_arrays(void **state)
{
    (void)state;
    size_t bytes[BV_SHARED_STAGES + 2] = {[BV_SHARED_STAGES] = 48, [BV_SHARED_STAGES + 1] = 8};
    size_t off[BV_SHARED_STAGES + 2];
    bv_segment made;
    bv_error err;
    assert_int_equal(bv_segment_create(&made, "test", bytes, BV_SHARED_STAGES + 2, off, &err),
                     BV_OK);
    assert_int_equal(off[bv_shared_act(0)], 0);
    assert_int_equal(off[bv_shared_dact(0)], (size_t)sysconf(_SC_PAGESIZE));
    bv_array_ref refs[2] = {{bv_shared_act(0), off[bv_shared_act(0)], 48},
                            {bv_shared_dact(0), off[bv_shared_dact(0)], 8}};
    bv_role_msg m = {.hdr = {.version = getpid(), .row_begin = made.fd,
                             .rows = (int64_t)made.bytes, .reply_to = 0, .na = sizeof refs},
                     .a = (const uint8_t *)refs};
    bv_graph_engine e = {.nstages = 1, .ngs = 2, .cfg.share_arrays = true, .shm = true,
                         .serving = true};
    assert_int_equal(bv_engine_map_segment(&e, &m, &err), BV_OK);
    bv_array_ref ref = {bv_shared_act(0), 8, 16};
    float *w = bv_engine_shared_window(&e, 0, &ref, 16, true, &err);
    assert_non_null(w);
    w[1] = 2.5f;
    assert_true(((float *)made.base)[3] == 2.5f); /* the maker sees the worker's write */
    assert_null(bv_engine_shared_window(&e, 1, &ref, 16, true, &err));
    assert_string_equal(err.msg,
                        "task names the shared arrays of graph server 1, which has offered none");
    assert_int_equal(bv_engine_map_segment(&e, &m, &err), BV_ERR_CORRUPT); /* twice */
    assert_string_equal(err.msg, "unexpected shared arrays from graph server 0");
    m.hdr.reply_to = 1;
    m.hdr.rows += 4096; /* not the segment's size */
    assert_int_equal(bv_engine_map_segment(&e, &m, &err), BV_ERR_CORRUPT);
    m.hdr.rows -= 4096;
    refs[1].offset = made.bytes - 4; /* runs past the end */
    assert_int_equal(bv_engine_map_segment(&e, &m, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "graph server 1's shared array 4 lies outside its segment");
    refs[1] = (bv_array_ref){BV_SHARED_FEATURES, 0, 8}; /* the dataset is never shared */
    assert_int_equal(bv_engine_map_segment(&e, &m, &err), BV_ERR_CORRUPT);
    m.hdr.version = -1; /* no such process */
    assert_int_equal(bv_engine_map_segment(&e, &m, &err), BV_ERR_IO);
    assert_null(e.peer_shared[1]);
    bv_segment_free(&e.peer_segment[0]);
    free(e.peer_shared[0]);
    bv_segment_free(&made);
}

/* A part as a file (the coordinator cuts, each graph server reads its own): what is read
 * is what was written, to the bit, with sparse or dense features; a damaged, truncated or
 * foreign file is refused. */
static void part_file_roundtrip_and_damage(bv_features_form form)
{
    char *dir = fixture("ok");
    bv_graph_dataset *g = load_ok(dir, NULL);
    bv_error cerr;
    assert_int_equal(bv_graph_features_convert(g, form, &cerr), BV_OK);
    static const int32_t part_of[] = {0, 0, 1, 1, 0};
    bv_graph_view v, r;
    bv_error err;
    bv_csr *norm = bv_graph_gcn_norm_adj(g);
    assert_non_null(norm);
    assert_int_equal(bv_graph_view_make(g, part_of, 2, 1, norm, &v, &err), BV_OK);
    bv_csr_free(norm);
    char path[] = "/tmp/bivouac-part-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path); /* the writer makes it anew */
    bv_graph_part_info info = {0x1234abcdULL, g->num_nodes}, got;
    assert_int_equal(bv_graph_view_write(&v, &info, path, &err), BV_OK);
    assert_int_equal(bv_graph_view_read(path, &r, &got, &err), BV_OK);
    assert_int_equal(got.fingerprint, 0x1234abcdULL);
    assert_int_equal(got.whole_nodes, 5);
    int64_t rows = v.local->num_nodes;
    assert_int_equal(r.local->num_nodes, rows);
    assert_int_equal(r.owned, v.owned);
    assert_int_equal(r.part, 1);
    assert_int_equal(r.parts, 2);
    assert_int_equal(r.edge_cut, v.edge_cut);
    assert_int_equal(r.train_total, v.train_total);
    assert_int_equal(r.local->adj.nnz, v.local->adj.nnz);
    assert_memory_equal(r.local->adj.rowptr, v.local->adj.rowptr,
                        (size_t)(rows + 1) * sizeof(int64_t));
    assert_memory_equal(r.local->adj.colidx, v.local->adj.colidx,
                        (size_t)v.local->adj.nnz * sizeof(int32_t));
    assert_int_equal(bv_graph_features_sparse(r.local), form == BV_FEATURES_SPARSE);
    if (form == BV_FEATURES_SPARSE) {
        const bv_csr *x = &r.local->features_csr, *y = &v.local->features_csr;
        assert_int_equal(x->nnz, y->nnz);
        assert_int_equal(x->ncols, 3);
        assert_memory_equal(x->rowptr, y->rowptr, (size_t)(rows + 1) * sizeof(int64_t));
        assert_memory_equal(x->colidx, y->colidx, (size_t)y->nnz * sizeof(int32_t));
        assert_memory_equal(x->values, y->values, (size_t)y->nnz * sizeof(float));
        /* the part's rows are the whole graph's rows global_of names */
        const float *whole = dense_features(g);
        const float *mine = dense_features(r.local);
        for (int64_t k = 0; k < rows; k++)
            assert_memory_equal(mine + k * 3, whole + r.global_of[k] * 3, 3 * sizeof(float));
    } else {
        assert_memory_equal(r.local->features, v.local->features,
                            (size_t)(rows * v.local->num_features) * sizeof(float));
    }
    assert_memory_equal(r.local->labels, v.local->labels, (size_t)rows * sizeof(int32_t));
    assert_memory_equal(r.local->split, v.local->split, (size_t)rows);
    assert_memory_equal(r.global_of, v.global_of, (size_t)rows * sizeof(int64_t));
    assert_int_equal(r.adj_norm->nnz, v.adj_norm->nnz);
    assert_memory_equal(r.adj_norm->values, v.adj_norm->values,
                        (size_t)v.adj_norm->nnz * sizeof(float));
    assert_memory_equal(r.send_off, v.send_off, 3 * sizeof(int64_t));
    assert_memory_equal(r.recv_idx, v.recv_idx, (size_t)(rows - v.owned) * sizeof(int64_t));
    bv_graph_view_free(&r);

    /* one byte changed (in the exchange lists): the checksum tells */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, -40, SEEK_END);
    int c = fgetc(f);
    fseek(f, -40, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);
    assert_int_equal(bv_graph_view_read(path, &r, &got, &err), BV_ERR_CORRUPT);
    char want[160];
    snprintf(want, sizeof want, "%s is damaged (truncated, or its checksum is wrong)", path);
    assert_string_equal(err.msg, want);
    assert_null(r.local);
    /* truncated */
    unlink(path);
    assert_int_equal(bv_graph_view_write(&v, &info, path, &err), BV_OK);
    assert_int_equal(truncate(path, 400), 0);
    assert_int_equal(bv_graph_view_read(path, &r, &got, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, want);
    /* not a part at all */
    f = fopen(path, "wb");
    fputs("bivouac-address-book 1\n", f);
    fclose(f);
    assert_int_equal(bv_graph_view_read(path, &r, &got, &err), BV_ERR_CORRUPT);
    snprintf(want, sizeof want, "%s is not a part of a graph this build wrote", path);
    assert_string_equal(err.msg, want);
    unlink(path);
    assert_int_equal(bv_graph_view_read(path, &r, &got, &err), BV_ERR_IO);
    bv_graph_view_free(&v);
    bv_graph_free(g);
    free(dir);
}

static void test_part_file_roundtrip_and_damage(void **state)
{
    (void)state;
    part_file_roundtrip_and_damage(BV_FEATURES_SPARSE);
    part_file_roundtrip_and_damage(BV_FEATURES_DENSE);
}

/* The two forms of the features hold the same values: Cora made dense and sparse again
 * is the CSR it was loaded as, row normalisation gives the same bits in both, and auto
 * keeps Cora (1.3 % nonzero) sparse and the powerlaw graph's N(0, 1) features dense. */
static void test_features_forms_hold_the_same_values(void **state)
{
    (void)state;
    char *dir = shared_dataset("cora");
    if (!dir)
        skip();
    bv_graph_dataset *a = load_ok(dir, NULL), *b = load_ok(dir, NULL);
    bv_error err;
    assert_int_equal(bv_graph_features_convert(b, BV_FEATURES_DENSE, &err), BV_OK);
    assert_int_equal(bv_graph_features_nnz(b), 49216);
    assert_int_equal(bv_graph_features_convert(b, BV_FEATURES_AUTO, &err), BV_OK);
    assert_true(bv_graph_features_sparse(b));
    assert_same_dataset(a, b);
    /* normalised sparse, against normalised dense made sparse */
    assert_int_equal(bv_graph_features_convert(b, BV_FEATURES_DENSE, &err), BV_OK);
    assert_int_equal(bv_graph_row_normalize_features(a, &err), BV_OK);
    assert_int_equal(bv_graph_row_normalize_features(b, &err), BV_OK);
    assert_int_equal(bv_graph_features_convert(b, BV_FEATURES_SPARSE, &err), BV_OK);
    assert_same_dataset(a, b);
    bv_graph_free(a);
    bv_graph_free(b);
    free(dir);

    bv_synth_powerlaw p = {.nodes = 500, .edges = 2000, .features = 8, .classes = 3,
                           .exponent = 2.1, .seed = 1};
    bv_graph_dataset *g = NULL;
    assert_int_equal(bv_graph_synth_powerlaw(&p, &g, &err), BV_OK);
    assert_int_equal(bv_graph_features_convert(g, BV_FEATURES_AUTO, &err), BV_OK);
    assert_false(bv_graph_features_sparse(g));
    bv_graph_free(g);
}

/* The whole graph's Â is its own transpose to the bit, which lets the engine use it for
 * ∇GA instead of a transposed copy. */
static void test_gcn_norm_adj_is_its_transpose(void **state)
{
    (void)state;
    char *dir = shared_dataset("cora");
    if (!dir)
        skip();
    bv_graph_dataset *g = load_ok(dir, NULL);
    bv_csr *a = bv_graph_gcn_norm_adj(g), *t = bv_csr_transpose(a);
    assert_non_null(t);
    assert_int_equal(a->nnz, 10556 + 2708);
    assert_memory_equal(a->rowptr, t->rowptr, (size_t)(a->nrows + 1) * sizeof(int64_t));
    assert_memory_equal(a->colidx, t->colidx, (size_t)a->nnz * sizeof(int32_t));
    assert_memory_equal(a->values, t->values, (size_t)a->nnz * sizeof(float));
    bv_csr_free(t);
    bv_csr_free(a);
    bv_graph_free(g);
    free(dir);
}

/* An interval's sparse rows on the wire: what is unpacked is the rows packed, with row
 * pointers from 0; counts, row pointers or columns that do not fit are refused. */
static void test_sparse_rows_pack_and_refuse(void **state)
{
    (void)state;
    char *dir = fixture("ok");
    bv_graph_dataset *g = load_ok(dir, NULL);
    const bv_csr *x = &g->features_csr; /* rows 1..3: {2 at 1}, {}, {1 at 0, 1, 2} */
    size_t bytes;
    uint8_t *p = bv_sparse_rows_pack(x, 1, 3, &bytes);
    assert_non_null(p);
    assert_int_equal(bytes, 3 * 8 + 4 * 8 + 4 * (4 + 4));
    bv_error err;
    bv_csr *y = bv_sparse_rows_unpack(p, bytes, 3, 3, &err);
    assert_non_null(y);
    assert_memory_equal(y->rowptr, ((int64_t[]){0, 1, 1, 4}), 4 * sizeof(int64_t));
    assert_memory_equal(y->colidx, ((int32_t[]){1, 0, 1, 2}), 4 * sizeof(int32_t));
    assert_memory_equal(y->values, ((float[]){2, 1, 1, 1}), 4 * sizeof(float));
    bv_csr_free(y);
    assert_null(bv_sparse_rows_unpack(p, bytes, 2, 3, &err)); /* not the task's rows */
    assert_string_equal(err.msg, "sparse rows say 3 x 3 with 4 nonzeros in 88 bytes, the "
                                 "task 2 x 3");
    assert_null(bv_sparse_rows_unpack(p, bytes - 4, 3, 3, &err));
    assert_int_equal(err.status, BV_ERR_CORRUPT);
    int32_t bad = 3; /* a column past the last */
    memcpy(p + 3 * 8 + 4 * 8, &bad, sizeof bad);
    assert_null(bv_sparse_rows_unpack(p, bytes, 3, 3, &err));
    assert_string_equal(err.msg, "sparse rows with a row pointer or column out of range");
    free(p);
    bv_graph_free(g);
    free(dir);
}

/* Several parameter servers: each interval of an epoch goes to the least-loaded one,
 * (intervals so far + 1) × seconds per interval; equal servers (and those within 2× of
 * the fastest) take turns from `first`; no measure counts as equal. */
static void test_pick_servers_least_loaded(void **state)
{
    (void)state;
    int32_t ps[8];
    bv_engine_pick_servers(NULL, 2, 4, 0, ps);
    assert_memory_equal(ps, ((int32_t[]){0, 1, 0, 1}), 4 * sizeof(int32_t));
    bv_engine_pick_servers(NULL, 3, 4, 4, ps); /* another graph server, another epoch */
    assert_memory_equal(ps, ((int32_t[]){1, 2, 0, 1}), 4 * sizeof(int32_t));
    bv_engine_pick_servers((double[]){0.25, 0.375}, 2, 4, 0, ps); /* noise: equal */
    assert_memory_equal(ps, ((int32_t[]){0, 1, 0, 1}), 4 * sizeof(int32_t));
    bv_engine_pick_servers((double[]){0.25, 0.75}, 2, 8, 0, ps); /* the second is slow */
    assert_memory_equal(ps, ((int32_t[]){0, 0, 0, 1, 0, 0, 0, 1}), 8 * sizeof(int32_t));
    bv_engine_pick_servers((double[]){0.75, 0}, 2, 4, 1, ps); /* no measure: the mean */
    assert_memory_equal(ps, ((int32_t[]){1, 0, 1, 0}), 4 * sizeof(int32_t));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_tiny_fixture_exactly),
        cmocka_unit_test(test_load_cora),
        cmocka_unit_test(test_load_citeseer),
        cmocka_unit_test(test_error_missing_file),
        cmocka_unit_test(test_error_truncated_features_size),
        cmocka_unit_test(test_error_edge_out_of_range),
        cmocka_unit_test(test_error_malformed_edge_line),
        cmocka_unit_test(test_error_edge_count_differs_from_meta),
        cmocka_unit_test(test_error_too_few_feature_lines),
        cmocka_unit_test(test_error_malformed_feature),
        cmocka_unit_test(test_error_feature_index_out_of_range),
        cmocka_unit_test(test_error_label_out_of_range),
        cmocka_unit_test(test_error_unknown_split),
        cmocka_unit_test(test_error_too_few_split_lines),
        cmocka_unit_test(test_error_meta_missing_key),
        cmocka_unit_test(test_error_missing_directory),
        cmocka_unit_test(test_feature_values_parse_like_strtof),
        cmocka_unit_test(test_cache_second_load_is_mapped_tiny),
        cmocka_unit_test(test_cache_second_load_is_mapped_cora),
        cmocka_unit_test(test_cache_corrupt_file_is_rebuilt),
        cmocka_unit_test(test_cache_key_changes_with_mtime),
        cmocka_unit_test(test_hash64_matches_xxh64_reference),
        cmocka_unit_test(test_row_normalize_copies_mapped_features),
        cmocka_unit_test(test_gcn_norm_adj_path_of_three),
        cmocka_unit_test(test_gcn_norm_adj_isolated_node_and_middle_self_loop),
        cmocka_unit_test(test_communities_sizes_and_shape),
        cmocka_unit_test(test_communities_deterministic_for_a_seed),
        cmocka_unit_test(test_powerlaw_sizes_shape_and_determinism),
        cmocka_unit_test(test_powerlaw_rejects_impossible_requests),
        cmocka_unit_test(test_auto_intervals),
        cmocka_unit_test(test_shared_window_checks_every_reference),
        cmocka_unit_test(test_segment_maps_the_graph_servers_arrays),
        cmocka_unit_test(test_part_file_roundtrip_and_damage),
        cmocka_unit_test(test_features_forms_hold_the_same_values),
        cmocka_unit_test(test_sparse_rows_pack_and_refuse),
        cmocka_unit_test(test_gcn_norm_adj_is_its_transpose),
        cmocka_unit_test(test_pick_servers_least_loaded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
