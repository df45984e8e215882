/* bv_series_report (bivouac/series.h): what the loop drains after a unit, in the order the
 * names were first reported, the last value of each; bad names refused; units cut short. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "bivouac/log.h"
#include "bivouac/series.h"
#include "series_sink.h"

static void test_drain_keeps_order_and_last_value(void **state)
{
    (void)state;
    bv_series_reset();
    bv_series_report("queue_depth", "tasks", 3);
    bv_series_report("cost", "USD", 0.25);
    bv_series_report("queue_depth", "tasks", 5);
    bv_series_report("plain", NULL, 1);
    bv_series_point pts[8];
    size_t n = bv_series_drain(pts, 8);
    assert_int_equal(n, 3);
    assert_string_equal(pts[0].name, "queue_depth");
    assert_string_equal(pts[0].unit, "tasks");
    assert_true(pts[0].value == 5);
    assert_string_equal(pts[1].name, "cost");
    assert_true(pts[1].value == 0.25);
    assert_string_equal(pts[2].unit, "");
    assert_int_equal(bv_series_drain(pts, 8), 0); /* drained */
}

static void test_drain_in_parts(void **state)
{
    (void)state;
    bv_series_reset();
    bv_series_report("a", "", 1);
    bv_series_report("b", "", 2);
    bv_series_report("c", "", 3);
    bv_series_point pts[2];
    assert_int_equal(bv_series_drain(pts, 2), 2);
    assert_string_equal(pts[1].name, "b");
    assert_int_equal(bv_series_drain(pts, 2), 1);
    assert_string_equal(pts[0].name, "c");
}

static void test_bad_names_refused_long_units_cut(void **state)
{
    (void)state;
    bv_log_set_level(BV_LOG_ERROR); /* the refusals' warnings are expected */
    bv_series_reset();
    bv_series_report("", "x", 1);
    bv_series_report("with space", "x", 1);
    bv_series_report(NULL, "x", 1);
    char longname[BV_SERIES_NAME_MAX + 1];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    bv_series_report(longname, "x", 1);
    bv_series_report("ok.name_2", "a unit far longer than twenty-three bytes", NAN);
    bv_series_point pts[4];
    assert_int_equal(bv_series_drain(pts, 4), 1);
    assert_string_equal(pts[0].name, "ok.name_2");
    assert_int_equal(strlen(pts[0].unit), BV_SERIES_UNIT_MAX - 1);
    assert_true(isnan(pts[0].value));
    assert_false(bv_series_name_ok("a-b"));
    assert_true(bv_series_name_ok("gpu0.util"));
    bv_log_set_level(BV_LOG_INFO);
}

static void *reporter(void *arg)
{
    char name[16];
    snprintf(name, sizeof name, "t%d", (int)(intptr_t)arg);
    for (int i = 0; i < 1000; i++)
        bv_series_report(name, "", i);
    return NULL;
}

static void test_reports_from_threads(void **state)
{
    (void)state;
    bv_series_reset();
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, reporter, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    bv_series_point pts[8];
    assert_int_equal(bv_series_drain(pts, 8), 4);
    for (int i = 0; i < 4; i++)
        assert_true(pts[i].value == 999);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drain_keeps_order_and_last_value),
        cmocka_unit_test(test_drain_in_parts),
        cmocka_unit_test(test_bad_names_refused_long_units_cut),
        cmocka_unit_test(test_reports_from_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
