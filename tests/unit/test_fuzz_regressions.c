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
#include "graph_internal.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_cache_refuses_header_with_huge_offsets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
