/* Tests for what the graph loader checks before it trusts a dataset (core/src/data/
 * graph_load.c verify_files, graph_util.c bv_graph_check_split): meta.yaml's sha256 sums,
 * its counts against the files before anything is allocated for them, a split with nothing
 * to train on, and the cache re-verifying a file changed in place. One fixture per error
 * in tests/data/graphs (README.md there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/graph.h"
#include "graph_internal.h"
#include "test_files.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1 /* ASan maps terabytes of shadow: an address-space limit cannot apply */
#else
#define UNDER_ASAN 0
#endif

/* --- sha256 ------------------------------------------------------------------------- */

/* features.svm of the fixture differs from ok's in one byte ("1 1:2" became "1 1:3"): the
 * same size, and it would parse and train. */
static void test_sha256_mismatch_is_refused(void **state)
{
    (void)state;
    expect_dataset_error("sha256_mismatch", true, BV_ERR_INVALID,
                 "features.svm: sha256 mismatch: meta.yaml says "
                 "a22a0b7cfd4fd11429891aa9f2f1490ae0c2bef3477f01220faff697aff44bd7, the file "
                 "has f99ffad3cb35fbfcd88150fe080b1f6f2ffba1db11237597425f730373b380e5 (the "
                 "file is corrupt or was changed: restore it, or update meta.yaml if the "
                 "change is meant)");
}

static void test_sha256_not_hex_is_refused(void **state)
{
    (void)state;
    expect_dataset_error("bad_sha256", true, BV_ERR_INVALID,
                 "meta.yaml:11: the sha256 of features.svm must be 64 hex digits, not "
                 "'a22a0b7c'");
}

/* ok lists all three sums: they match, and the load is the usual one. */
static void test_sums_that_match_load(void **state)
{
    (void)state;
    char *dir = fixture("ok");
    bv_graph_dataset *g = NULL;
    bv_error err;
    bv_error_clear(&err);
    if (bv_graph_load_dir(dir, NULL, &g, &err) != BV_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(g->num_nodes, 5);
    assert_int_equal(g->num_undirected_edges, 4);
    bv_graph_free(g);
    free(dir);
}

/* The cache is keyed on each file's size, mtime, ctime and inode, not on its bytes: a file
 * rewritten in place to the same size with its mtime put back must still miss the cache
 * and be hashed again, not be trusted through the old entry. */
static void test_file_changed_in_place_is_verified_again(void **state)
{
    (void)state;
    char *src = fixture("ok");
    char tmp[] = "/tmp/bivouac-test-verify-XXXXXX";
    assert_non_null(mkdtemp(tmp));
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
    bv_graph_dataset *g = NULL;
    bv_error err;
    bv_error_clear(&err);
    for (int load = 0; load < 2; load++) { /* parse and write the cache, then map it */
        if (bv_graph_load_dir(data, cache, &g, &err) != BV_OK)
            fail_msg("%s", err.msg);
        assert_true((g->mapping != NULL) == (load == 1));
        bv_graph_free(g);
    }

    char features[4096];
    snprintf(features, sizeof features, "%s/features.svm", data);
    struct stat before;
    assert_int_equal(stat(features, &before), 0);
    sleep(1); /* so that the ctime the rewrite leaves differs even on a coarse clock */
    int fd = open(features, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "3", 1, 16), 1); /* line 2 "1 1:2" becomes "1 1:3" */
    close(fd);
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    assert_int_equal(utimensat(AT_FDCWD, features, times, 0), 0);
    struct stat after;
    assert_int_equal(stat(features, &after), 0);
    assert_int_equal(after.st_size, before.st_size);
    assert_int_equal(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
    assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);

    g = (bv_graph_dataset *)&g;
    assert_int_equal(bv_graph_load_dir(data, cache, &g, &err), BV_ERR_INVALID);
    assert_null(g);
    char want[8192];
    snprintf(want, sizeof want,
             "%s: sha256 mismatch: meta.yaml says "
             "a22a0b7cfd4fd11429891aa9f2f1490ae0c2bef3477f01220faff697aff44bd7, the file has "
             "f99ffad3cb35fbfcd88150fe080b1f6f2ffba1db11237597425f730373b380e5 (the file is "
             "corrupt or was changed: restore it, or update meta.yaml if the change is meant)",
             features);
    assert_string_equal(err.msg, want);
    remove_tree(tmp);
    free(src);
}

/* --- counts against the files, before allocating -------------------------------------- */

/* The process's address space in bytes now (VmSize). */
static size_t address_space(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    unsigned long pages = 0;
    assert_int_equal(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* Loads a fixture in a child whose address space may grow by at most 64 MB; returns the
 * child's error message (the child exits with the load's status). A meta.yaml that claims
 * 2e9 nodes would need 24 GB for the feature, label and split arrays alone: the refusal must
 * come from the count check, not from the allocator. */
static int load_in_small_address_space(const char *dir, char *msg, size_t len)
{
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        if (!UNDER_ASAN) {
            rlim_t cap = (rlim_t)(address_space() + ((size_t)64 << 20));
            struct rlimit lim = {cap, cap};
            if (setrlimit(RLIMIT_AS, &lim) != 0)
                _exit(100);
        }
        bv_graph_dataset *g = NULL;
        bv_error err;
        bv_error_clear(&err);
        bv_status s = bv_graph_load_dir(dir, NULL, &g, &err);
        if (write(pipefd[1], err.msg, strlen(err.msg)) < 0)
            _exit(101);
        _exit((int)s);
    }
    close(pipefd[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < len && (n = read(pipefd[0], msg + got, len - 1 - got)) > 0)
        got += (size_t)n;
    msg[got] = '\0';
    close(pipefd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_nodes_beyond_the_lines_refused_before_allocating(void **state)
{
    (void)state;
    char *dir = fixture("huge_nodes");
    char msg[2048], want[2048];
    int status = load_in_small_address_space(dir, msg, sizeof msg);
    snprintf(want, sizeof want,
             "%s/features.svm: 5 lines, but meta.yaml says nodes: 2000000000 (one line per "
             "node)",
             dir);
    assert_string_equal(msg, want);
    assert_int_equal(status, BV_ERR_INVALID);
    free(dir);
}

static void test_edges_beyond_the_lines_refused_before_allocating(void **state)
{
    (void)state;
    char *dir = fixture("huge_edges");
    char msg[2048], want[2048];
    int status = load_in_small_address_space(dir, msg, sizeof msg);
    snprintf(want, sizeof want,
             "%s/edges.tsv: 4 lines, but meta.yaml says undirected_edges: 2000000000 (one "
             "line per edge)",
             dir);
    assert_string_equal(msg, want);
    assert_int_equal(status, BV_ERR_INVALID);
    free(dir);
}

/* 5 nodes x 1e12 features is 20 TB of dense floats: more than any machine this runs on. */
static void test_features_beyond_memory_refused_before_allocating(void **state)
{
    (void)state;
    char *dir = fixture("huge_features");
    char msg[2048], want[2048];
    int status = load_in_small_address_space(dir, msg, sizeof msg);
    snprintf(want, sizeof want,
             "%s/meta.yaml: nodes: 5 x features: 1000000000000 is 20000.0 GB of dense "
             "features, more than this machine's ",
             dir);
    assert_memory_equal(msg, want, strlen(want));
    const char *tail = " GB of memory";
    assert_true(strlen(msg) > strlen(tail));
    assert_string_equal(msg + strlen(msg) - strlen(tail), tail);
    assert_int_equal(status, BV_ERR_INVALID);
    free(dir);
}

/* --- the split ----------------------------------------------------------------------- */

static void test_no_training_vertices_is_refused(void **state)
{
    (void)state;
    expect_dataset_error("no_train", false, BV_ERR_INVALID,
                 "dataset tiny has no training vertices (split.tsv marks none 'train')");
}

static void test_only_unlabelled_training_vertices_is_refused(void **state)
{
    (void)state;
    expect_dataset_error("unlabelled_train", false, BV_ERR_INVALID,
                 "dataset tiny has no labelled training vertices (all 2 marked 'train' have "
                 "label -1)");
}

/* Neither refusal writes a cache entry that a later load could hit. */
static void test_refused_split_writes_no_cache(void **state)
{
    (void)state;
    char *dir = fixture("no_train");
    char tmp[] = "/tmp/bivouac-test-verify-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    bv_graph_dataset *g = NULL;
    bv_error err;
    assert_int_equal(bv_graph_load_dir(dir, tmp, &g, &err), BV_ERR_INVALID);
    assert_null(g);
    DIR *d = opendir(tmp);
    assert_non_null(d);
    int entries = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        entries += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    assert_int_equal(entries, 0);
    remove_tree(tmp);
    free(dir);
}

static void test_synthetic_options_with_an_empty_training_split_are_refused(void **state)
{
    (void)state;
    bv_graph_dataset *g = (bv_graph_dataset *)&g;
    bv_error err;
    bv_synth_communities c = {.nodes = 100, .features = 20, .classes = 4, .avg_degree = 4,
                              .homophily = 0.8, .feature_density = 0.1, .feature_signal = 0.5,
                              .train_per_class = 0, .val = 10, .test = 10, .seed = 1};
    assert_int_equal(bv_graph_synth_communities(&c, &g, &err), BV_ERR_INVALID);
    assert_null(g);
    assert_string_equal(err.msg, "communities: train_per_class must be at least 1, not 0 (the "
                                 "training split would be empty)");
    g = (bv_graph_dataset *)&g;
    bv_synth_powerlaw p = {.nodes = 9, .edges = 10, .features = 4, .classes = 2,
                           .exponent = 2.1, .seed = 1};
    assert_int_equal(bv_graph_synth_powerlaw(&p, &g, &err), BV_ERR_INVALID);
    assert_null(g);
    assert_string_equal(err.msg, "powerlaw: nodes must be at least 10, not 9 (the 10% training "
                                 "split would be empty)");
    p.nodes = 10; /* 1 train, 1 val, 8 test */
    assert_int_equal(bv_graph_synth_powerlaw(&p, &g, &err), BV_OK);
    assert_int_equal(g->split_count[BV_SPLIT_TRAIN], 1);
    assert_int_equal(g->split_count[BV_SPLIT_VAL], 1);
    bv_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_mismatch_is_refused),
        cmocka_unit_test(test_sha256_not_hex_is_refused),
        cmocka_unit_test(test_sums_that_match_load),
        cmocka_unit_test(test_file_changed_in_place_is_verified_again),
        cmocka_unit_test(test_nodes_beyond_the_lines_refused_before_allocating),
        cmocka_unit_test(test_edges_beyond_the_lines_refused_before_allocating),
        cmocka_unit_test(test_features_beyond_memory_refused_before_allocating),
        cmocka_unit_test(test_no_training_vertices_is_refused),
        cmocka_unit_test(test_only_unlabelled_training_vertices_is_refused),
        cmocka_unit_test(test_refused_split_writes_no_cache),
        cmocka_unit_test(test_synthetic_options_with_an_empty_training_split_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
