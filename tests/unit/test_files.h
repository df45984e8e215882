/* Helpers the dataset tests share (test_graph.c, test_graph_verify.c): the path of a
 * hand-written fixture, a load that must fail with an exact message, a temporary
 * directory, removing a tree, copying a file. Header-only,
 * like test_support.h; include after <cmocka.h>. */
#ifndef BIVOUAC_TEST_FILES_H
#define BIVOUAC_TEST_FILES_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bivouac/graph.h"

/* tests/data/graphs/<name> in the source tree (malloc'd). */
static inline char *fixture(const char *name)
{
    const char *src = getenv("BIVOUAC_SOURCE_DIR");
    assert_non_null(src); /* ctest sets it */
    char *path = malloc(strlen(src) + strlen(name) + 32);
    assert_non_null(path);
    sprintf(path, "%s/tests/data/graphs/%s", src, name);
    return path;
}

/* A new directory under /tmp (malloc'd path). */
static inline char *make_temp_dir(void)
{
    char *dir = strdup("/tmp/bivouac-test-graph-XXXXXX");
    assert_non_null(dir);
    assert_non_null(mkdtemp(dir));
    return dir;
}

static inline void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char child[4096];
            if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) < (int)sizeof child)
                remove_tree(child);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Loads fixture `name`, which must fail with status and exactly the message want (after
 * "<fixture dir>/" when in_dir), leaving no dataset. */
static inline void expect_dataset_error(const char *name, bool in_dir, bv_status status,
                                        const char *want)
{
    char *dir = fixture(name);
    char full[2048];
    snprintf(full, sizeof full, "%s%s%s", in_dir ? dir : "", in_dir ? "/" : "", want);
    bv_graph_dataset *g = (bv_graph_dataset *)&g; /* must be reset to NULL */
    bv_error err;
    bv_error_clear(&err);
    bv_status s = bv_graph_load_dir(dir, NULL, &g, &err);
    assert_null(g);
    assert_string_equal(err.msg, full);
    assert_int_equal(s, status);
    assert_int_equal(err.status, status);
    free(dir);
}

static inline void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
}

#endif
