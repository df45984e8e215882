/* Pipeline schedules as data (core/src/engine/pipeline/schedule_gen.h): the exact lists of
 * 1F1B and GPipe, and their simulation: both fit together without deadlock, take
 * (M + P - 1)(f + b) with uniform costs, leave a bubble of (P - 1) / (M + P - 1), and hold
 * min(P - s, M) (1F1B) or M (GPipe) microbatches' activations at stage s; broken
 * schedules are named where they break. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pipeline_plan.h"
#include "schedule_gen.h"

/* The schedule's labels, space-separated. */
static void labels(const bv_schedule *s, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; i < s->count; i++) {
        char one[32];
        bv_instruction_label(bv_schedule_at(s, i), one, sizeof one);
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s%s", i ? " " : "", one);
    }
}

static void expect_list(bv_schedule_kind kind, int stage, int stages, int m, const char *want)
{
    bv_schedule s;
    bv_schedule_init(&s);
    bv_error err;
    assert_int_equal(bv_schedule_generate(kind, stage, stages, m, &s, &err), BV_OK);
    char got[1024];
    labels(&s, got, sizeof got);
    assert_string_equal(got, want);
    bv_schedule_free(&s);
}

static void test_lists(void **state)
{
    (void)state;
    expect_list(BV_SCHEDULE_1F1B, 0, 2, 3,
                "F0 SA0>1 F1 SA1>1 RG0<1 B0 F2 SA2>1 RG1<1 B1 RG2<1 B2 U");
    expect_list(BV_SCHEDULE_1F1B, 1, 2, 3,
                "RA0<0 F0 B0 SG0>0 RA1<0 F1 B1 SG1>0 RA2<0 F2 B2 SG2>0 U");
    expect_list(BV_SCHEDULE_1F1B, 1, 3, 1, "RA0<0 F0 SA0>2 RG0<2 B0 SG0>0 U");
    expect_list(BV_SCHEDULE_GPIPE, 1, 2, 2, "RA0<0 F0 RA1<0 F1 B1 SG1>0 B0 SG0>0 U");
    expect_list(BV_SCHEDULE_GPIPE, 0, 1, 2, "F0 F1 B1 B0 U");
    bv_schedule s;
    bv_schedule_init(&s);
    bv_error err;
    assert_int_equal(bv_schedule_generate(BV_SCHEDULE_1F1B, 2, 2, 4, &s, &err),
                     BV_ERR_INVALID);
    assert_string_equal(err.msg, "no stage 2 of 2 stages with 4 microbatches");
    bv_schedule_kind k;
    assert_true(bv_schedule_kind_parse("gpipe", &k) && k == BV_SCHEDULE_GPIPE);
    assert_false(bv_schedule_kind_parse("zb", &k));
}

/* All P stages of a kind, simulated with forward f = 1, backward b = 2. */
static void simulate(bv_schedule_kind kind, int p, int m, bv_schedule_timeline *t)
{
    bv_schedule s[16];
    bv_schedule_costs c[16];
    bv_error err;
    memset(s, 0, sizeof s);
    memset(c, 0, sizeof c);
    assert_true(p >= 1 && p <= 16);
    for (int i = 0; i < p; i++) {
        bv_schedule_init(&s[i]);
        assert_int_equal(bv_schedule_generate(kind, i, p, m, &s[i], &err), BV_OK);
        c[i] = (bv_schedule_costs){.forward = 1, .backward = 2};
    }
    assert_int_equal(bv_schedule_simulate(s, p, c, t, &err), BV_OK);
    for (int i = 0; i < p; i++)
        bv_schedule_free(&s[i]);
}

static void test_simulated_times_and_memory(void **state)
{
    (void)state;
    static const int shapes[][2] = {{1, 1}, {2, 3}, {4, 8}, {4, 2}, {8, 16}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int p = shapes[k][0], m = shapes[k][1];
        for (int kind = 0; kind < 2; kind++) {
            bv_schedule_timeline t;
            simulate((bv_schedule_kind)kind, p, m, &t);
            assert_true(fabs(t.makespan - 3.0 * (m + p - 1)) < 1e-9);
            assert_true(fabs(t.bubble - (double)(p - 1) / (m + p - 1)) < 1e-9);
            for (int s = 0; s < p; s++)
                assert_int_equal(t.max_held[s], kind == BV_SCHEDULE_GPIPE ? m
                                                : p - s < m                ? p - s
                                                                           : m);
            bv_schedule_timeline_free(&t);
        }
    }
}

static bv_instruction ins(bv_instruction_op op, int mb, int peer)
{
    return (bv_instruction){.op = (uint32_t)op, .microbatch = mb, .peer = peer, .version = -1};
}

static void test_broken_schedules_are_named(void **state)
{
    (void)state;
    bv_schedule s[2];
    bv_schedule_costs c[2] = {{1, 2, 0, 0}, {1, 2, 0, 0}};
    bv_schedule_timeline t;
    bv_error err;
    /* stage 0 waits for the gradient before it sends the activations it comes from */
    bv_instruction a[] = {ins(BV_INSTR_FORWARD, 0, -1), ins(BV_INSTR_RECV_GRAD, 0, 1),
                          ins(BV_INSTR_SEND_ACT, 0, 1), ins(BV_INSTR_BACKWARD, 0, -1)};
    bv_instruction b[] = {ins(BV_INSTR_RECV_ACT, 0, 0), ins(BV_INSTR_FORWARD, 0, -1),
                          ins(BV_INSTR_BACKWARD, 0, -1), ins(BV_INSTR_SEND_GRAD, 0, 0)};
    for (int i = 0; i < 2; i++)
        bv_schedule_init(&s[i]);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(bv_schedule_append(&s[0], &a[i], sizeof a[i], &err), BV_OK);
        assert_int_equal(bv_schedule_append(&s[1], &b[i], sizeof b[i], &err), BV_OK);
    }
    assert_int_equal(bv_schedule_simulate(s, 2, c, &t, &err), BV_ERR_INVALID);
    assert_string_equal(err.msg, "stage 0 waits forever at instruction 1 (RG0<1): nothing it "
                                 "waits for is ever sent");
    assert_null(t.slot);
    /* the right order, and one send too many */
    bv_schedule_free(&s[0]);
    bv_instruction fixed[] = {ins(BV_INSTR_FORWARD, 0, -1), ins(BV_INSTR_SEND_ACT, 0, 1),
                              ins(BV_INSTR_RECV_GRAD, 0, 1), ins(BV_INSTR_BACKWARD, 0, -1),
                              ins(BV_INSTR_SEND_ACT, 9, 1)};
    for (int i = 0; i < 5; i++)
        assert_int_equal(bv_schedule_append(&s[0], &fixed[i], sizeof fixed[i], &err), BV_OK);
    assert_int_equal(bv_schedule_simulate(s, 2, c, &t, &err), BV_ERR_INVALID);
    assert_string_equal(err.msg, "stage 0 sends activations of microbatch 9 to stage 1, which "
                                 "never receives it");
    /* a peer that is not a stage */
    bv_instruction stray = ins(BV_INSTR_SEND_GRAD, 0, 5);
    assert_int_equal(bv_schedule_append(&s[1], &stray, sizeof stray, &err), BV_OK);
    assert_int_equal(bv_schedule_simulate(s, 2, c, &t, &err), BV_ERR_INVALID);
    assert_string_equal(err.msg, "stage 1, instruction 4 (SG0>5): no stage 5 to talk to");
    for (int i = 0; i < 2; i++)
        bv_schedule_free(&s[i]);
}

/* A model's layers into stages: uniform (sizes within one, the larger last) or explicit,
 * and every way a partition can be wrong, said in words. */
static void test_partition(void **state)
{
    (void)state;
    int first[BV_PIPELINE_MAX_STAGES + 1];
    bv_error err;
    assert_int_equal(bv_pipeline_partition(4, 3, "uniform", first, &err), BV_OK);
    assert_memory_equal(first, ((int[]){0, 1, 2, 4}), 4 * sizeof(int));
    assert_int_equal(bv_pipeline_partition(12, 4, "uniform", first, &err), BV_OK);
    assert_memory_equal(first, ((int[]){0, 3, 6, 9, 12}), 5 * sizeof(int));
    assert_int_equal(bv_pipeline_partition(4, 2, "3,1", first, &err), BV_OK);
    assert_memory_equal(first, ((int[]){0, 3, 4}), 3 * sizeof(int));
    /* balanced is uniform until a run measures the layers */
    assert_int_equal(bv_pipeline_partition(4, 3, "balanced", first, &err), BV_OK);
    assert_memory_equal(first, ((int[]){0, 1, 2, 4}), 4 * sizeof(int));
    static const struct {
        int layers, stages;
        const char *spec, *msg;
    } bad[] = {
        {4, 5, "uniform", "5 stages for 4 layers: a stage would have no layer"},
        {4, 2, "3,2", "'3,2' adds up to 5 layers; the model has 4"},
        {4, 3, "2,1", "'2,1' gives 2 stages their layers, not 3"},
        {4, 2, "2,1,1", "'2,1,1' gives more than 2 stages their layers"},
        {4, 2, "2,0", "'2,0' is neither uniform, balanced nor 2 layer counts of 1 or "
                      "more, comma-separated"},
        {4, 2, "even", "'even' is neither uniform, balanced nor 2 layer counts of 1 or "
                       "more, comma-separated"},
        {4, 5, "balanced", "5 stages for 4 layers: a stage would have no layer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(bv_pipeline_partition(bad[i].layers, bad[i].stages, bad[i].spec,
                                               first, &err),
                         BV_ERR_INVALID);
        assert_string_equal(err.msg, bad[i].msg);
    }
}

/* The balanced cut: the costliest stage as cheap as it can be, each stage one layer or
 * more, ties to the earliest cut. */
static void test_balance(void **state)
{
    (void)state;
    int first[BV_PIPELINE_MAX_STAGES + 1];
    bv_error err;
    assert_int_equal(bv_pipeline_balance((double[]){1, 1, 1, 1, 4}, 5, 2, first, &err), BV_OK);
    assert_memory_equal(first, ((int[]){0, 4, 5}), 3 * sizeof(int));
    assert_int_equal(bv_pipeline_balance((double[]){4, 1, 1, 1, 1}, 5, 2, first, &err), BV_OK);
    assert_memory_equal(first, ((int[]){0, 1, 5}), 3 * sizeof(int));
    assert_int_equal(bv_pipeline_balance((double[]){1, 2, 3, 4, 5, 6}, 6, 3, first, &err),
                     BV_OK); /* [1 2 3] [4 5] [6]: 9 at most; any other cut costs more */
    assert_memory_equal(first, ((int[]){0, 3, 5, 6}), 4 * sizeof(int));
    assert_int_equal(bv_pipeline_balance((double[]){2, 2, 2, 2}, 4, 4, first, &err), BV_OK);
    assert_memory_equal(first, ((int[]){0, 1, 2, 3, 4}), 5 * sizeof(int));
    assert_int_equal(bv_pipeline_balance((double[]){1, 1}, 2, 3, first, &err), BV_ERR_INVALID);
    assert_string_equal(err.msg, "3 stages for 2 layers");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_simulated_times_and_memory),
        cmocka_unit_test(test_broken_schedules_are_named),
        cmocka_unit_test(test_partition),
        cmocka_unit_test(test_balance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
