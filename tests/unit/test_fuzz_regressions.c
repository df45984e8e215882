/* Inputs the fuzzers (tests/fuzz/) found crashes or sanitizer reports with, fed to the
 * same entry point as the fuzz target that found them, with the exact result each must
 * now give. Under BIVOUAC_SANITIZE (scripts/test.sh's sanitizer pass) these also show the
 * undefined behaviour is gone. The inputs live in tests/data/fuzz-regressions/<target>/;
 * tests/fuzz/README.md says how to add one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/graph.h"
#include "config.h"
#include "graph_internal.h"

static char *read_whole(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *text = calloc(1, 1 << 16);
    assert_non_null(text);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    assert_true(n > 0 && feof(f));
    fclose(f);
    return text;
}

static char *regression_input(const char *name)
{
    const char *src = getenv("BIVOUAC_SOURCE_DIR");
    assert_non_null(src); /* ctest sets it */
    char *path = malloc(strlen(src) + strlen(name) + 64);
    assert_non_null(path);
    sprintf(path, "%s/tests/data/fuzz-regressions/%s", src, name);
    return path;
}

/* fuzz_graph_cache: a header that fails its checks (here: no magic, every offset
 * 0xff..ff) must be refused without forming pointers from its offsets; the reader used
 * to compute the name and row-pointer addresses before looking at the verdict. */
static void test_graph_cache_refuses_header_with_huge_offsets(void **state)
{
    (void)state;
    char *path = regression_input("graph_cache/header-all-ff.bvg");
    bv_graph_dataset *g = (bv_graph_dataset *)1;
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(bv_graph_cache_open(path, UINT64_MAX, &g, &err), BV_ERR_CORRUPT);
    assert_null(g);
    char want[1200];
    snprintf(want, sizeof want, "%s: not a bivouac graph cache", path);
    assert_string_equal(err.msg, want);
    free(path);
}

/* fuzz_config: an override of 129 steps nested its value deeper than the loader reads
 * (128 levels), so bv_node_to_yaml's text (the resolved experiment a run saves) did not
 * load back. It is refused now; 128 steps still work and round-trip. */
static void test_config_override_deeper_than_the_loader_is_refused(void **state)
{
    (void)state;
    char *path = regression_input("config/override-too-deep.yaml");
    char *text = read_whole(path);
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    assert_int_equal(bv_config_load_string(text, path, &root, &d), BV_OK);
    assert_int_equal(strncmp(text, "#= ", 3), 0);
    *strchr(text, '\n') = '\0';
    assert_int_equal(bv_config_override(root, text + 3, &d), BV_ERR_INVALID);
    assert_int_equal(d.count, 1);
    char msg[1024];
    bv_diag_format(&d, 0, msg, sizeof msg);
    assert_non_null(strstr(msg, "<command line>:1:1: error: override 'a.a.a."));
    assert_non_null(strstr(msg, ".a.a' nests the experiment deeper than 128 levels"));
    assert_int_equal(root->count, 1); /* the tree is unchanged: only `name` */

    /* One step less is the deepest the loader reads: accepted, and it loads back. */
    char deepest[512] = "";
    for (int i = 0; i < 127; i++)
        strcat(deepest, "a.");
    strcat(deepest, "a=1");
    bv_diag_free(&d);
    bv_diag_init(&d);
    assert_int_equal(bv_config_override(root, deepest, &d), BV_OK);
    char *yaml = bv_node_to_yaml(root);
    assert_non_null(yaml);
    bv_node *again = NULL;
    assert_int_equal(bv_config_load_string(yaml, "emitted", &again, &d), BV_OK);
    assert_int_equal(d.count, 0);
    assert_string_equal(bv_node_at_path(again, "name")->scalar, "deep");
    bv_node_free(again);
    free(yaml);
    bv_node_free(root);
    bv_diag_free(&d);
    free(text);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_cache_refuses_header_with_huge_offsets),
        cmocka_unit_test(test_config_override_deeper_than_the_loader_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
