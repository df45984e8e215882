/* The pipeline nodes' links (core/src/engine/pipeline/stage_link.h) over the example
 * in-process transport (examples/plugins/transport_queue.c, compiled in): messages
 * matched by (type, sender, tag, step) with early ones stashed, exact sizes, an abort that
 * ends a wait, one that names nodes and ends only the waits for them, a timeout that says what it waited for, a payload filled in place, the ring
 * all-reduce on three nodes (the same bits on each), and packed states read back or
 * refused. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "../../examples/plugins/transport_queue.c"
#include "stage_link.h"

#define NODES 4

static const char *const addrs[NODES] = {"inproc://n0", "inproc://n1", "inproc://n2",
                                         "inproc://coord"};

static bv_transport *make_transport(bv_opts *opts)
{
    bv_error err = {0};
    assert_int_equal(bv_opts_defaults(opts, "transport", queue_options, &err), BV_OK);
    bv_transport *t = queue_ops.create(opts, &err);
    assert_non_null(t);
    return t;
}

static bv_stage_link *open_node(bv_transport *t, int self)
{
    bv_stage_link *l;
    bv_error err = {0};
    assert_int_equal(bv_stage_link_open(&queue_ops, t, addrs, NODES, self, &l, &err), BV_OK);
    return l;
}

static void test_matching(void **state)
{
    (void)state;
    bv_opts opts = {0};
    bv_transport *t = make_transport(&opts);
    bv_stage_link *a = open_node(t, 0), *b = open_node(t, 1), *c = open_node(t, 3);
    bv_error err = {0};
    float act[3] = {1, 2, 3}, grad[2] = {4, 5}, got[3];
    /* the gradient of microbatch 1 comes first; the activations of 0 are asked for first */
    assert_int_equal(bv_stage_link_send(a, 1, BV_PIPE_GRAD, 1, 7, grad, sizeof grad, &err),
                     BV_OK);
    assert_int_equal(bv_stage_link_send(a, 1, BV_PIPE_ACT, 0, 7, act, sizeof act, &err),
                     BV_OK);
    assert_int_equal(bv_stage_link_recv_into(b, BV_PIPE_ACT, 0, 0, 7, 1000, "activations",
                                             got, sizeof act, &err),
                     BV_OK);
    assert_memory_equal(got, act, sizeof act);
    assert_int_equal(bv_stage_link_recv_into(b, BV_PIPE_GRAD, 0, 1, 7, 1000, "gradients",
                                             got, sizeof grad, &err),
                     BV_OK);
    assert_memory_equal(got, grad, sizeof grad);
    /* another size than the schedule's is refused, naming the message */
    assert_int_equal(bv_stage_link_send(a, 1, BV_PIPE_ACT, 2, 7, act, 8, &err), BV_OK);
    assert_int_equal(bv_stage_link_recv_into(b, BV_PIPE_ACT, 0, 2, 7, 1000, "activations",
                                             got, sizeof act, &err),
                     BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "activations from node 0: 8 bytes, expected 12");
    /* a wait that nothing answers says what it waited for */
    assert_int_equal(bv_stage_link_recv_into(b, BV_PIPE_ACT, 0, 3, 7, 20, "activations", got,
                                             sizeof act, &err),
                     BV_ERR_IO);
    assert_string_equal(err.msg, "no activations within 0.02 s");
    assert_true(bv_stage_link_timed_out(b));
    /* an abort from the coordinator ends a wait, even one that would wait forever */
    assert_int_equal(bv_stage_link_send(c, 1, BV_PIPE_CMD, BV_PIPE_ABORT, 7, NULL, 0, &err),
                     BV_OK);
    assert_int_equal(bv_stage_link_recv_into(b, BV_PIPE_GRAD, 0, 3, 7, -1, "gradients", got,
                                             sizeof grad, &err),
                     BV_ERR_STOPPED);
    assert_string_equal(err.msg, "stopped while waiting for gradients");
    /* an answer to a command may be an error: a wait for DONE takes it */
    assert_int_equal(bv_stage_link_send(b, 3, BV_PIPE_ERROR, BV_PIPE_TRAIN, 7, "no", 2, &err),
                     BV_OK);
    bv_pipe_msg_in m;
    assert_int_equal(bv_stage_link_recv(c, BV_PIPE_DONE, -1, BV_PIPE_TRAIN, 7, 1000, "an answer",
                                        &m, &err),
                     BV_OK);
    assert_int_equal(m.type, BV_PIPE_ERROR);
    assert_int_equal(m.sender, 1);
    bv_stage_link_release(c, &m);
    bv_stage_link_close(a);
    bv_stage_link_close(b);
    bv_stage_link_close(c);
    queue_ops.destroy(t);
    bv_opts_free(&opts);
}

/* An ABORT that names nodes (a lost stage process, docs/redundancy.md#lazy-brc) ends only
 * the waits for them: a wait for another node goes on, a message a named node sent before
 * is still taken, a send to one is dropped; the next command forgets them. */
static void test_named_abort(void **state)
{
    (void)state;
    bv_opts opts = {0};
    bv_transport *t = make_transport(&opts);
    bv_stage_link *a = open_node(t, 0), *b = open_node(t, 1), *c = open_node(t, 3);
    bv_error err = {0};
    float act[3] = {1, 2, 3}, got[3];
    int32_t lost = 0;
    bv_stage_link_command(b, 7);
    assert_int_equal(bv_stage_link_send(a, 1, BV_PIPE_ACT, 5, 7, act, sizeof act, &err), BV_OK);
    assert_int_equal(bv_stage_link_send(c, 1, BV_PIPE_CMD, BV_PIPE_ABORT, 7, &lost, sizeof lost,
                                        &err),
                     BV_OK);
    /* a wait for node 2 is not ended by it: it runs out */
    assert_int_equal(bv_stage_link_recv_into(b, BV_PIPE_ACT, 2, 0, 7, 50, "activations", got,
                                             sizeof act, &err),
                     BV_ERR_IO);
    assert_string_equal(err.msg, "no activations within 0.05 s");
    /* what node 0 sent before is taken; a wait for more of it ends at once */
    assert_int_equal(bv_stage_link_recv_into(b, BV_PIPE_ACT, 0, 5, 7, 1000, "activations", got,
                                             sizeof act, &err),
                     BV_OK);
    assert_memory_equal(got, act, sizeof act);
    assert_int_equal(bv_stage_link_recv_into(b, BV_PIPE_ACT, 0, 6, 7, -1, "activations", got,
                                             sizeof act, &err),
                     BV_ERR_STOPPED);
    assert_string_equal(err.msg, "stopped while waiting for activations (node 0 sends nothing "
                        "more)");
    /* a send to node 0 is dropped */
    assert_int_equal(bv_stage_link_send(b, 0, BV_PIPE_GRAD, 5, 7, act, sizeof act, &err), BV_OK);
    assert_int_equal(bv_stage_link_recv_into(a, BV_PIPE_GRAD, 1, 5, 7, 50, "gradients", got,
                                             sizeof act, &err),
                     BV_ERR_IO);
    /* the next command forgets it */
    bv_stage_link_command(b, 8);
    assert_int_equal(bv_stage_link_send(b, 0, BV_PIPE_GRAD, 5, 8, act, sizeof act, &err), BV_OK);
    assert_int_equal(bv_stage_link_recv_into(a, BV_PIPE_GRAD, 1, 5, 8, 1000, "gradients", got,
                                             sizeof act, &err),
                     BV_OK);
    bv_stage_link_close(a);
    bv_stage_link_close(b);
    bv_stage_link_close(c);
    queue_ops.destroy(t);
    bv_opts_free(&opts);
}

/* A payload written in pieces by bv_stage_link_send_fill: the filler gets the message's
 * own buffer, and the receiver the bytes, with the step and tag. */
static void fill_squares(void *dst, size_t bytes, const void *ctx)
{
    const int *n = ctx;
    float *f = dst;
    assert_int_equal(bytes, (size_t)*n * sizeof *f);
    for (int i = 0; i < *n; i++)
        f[i] = (float)(i * i);
}

static void test_send_fill(void **state)
{
    (void)state;
    bv_opts opts = {0};
    bv_transport *t = make_transport(&opts);
    bv_stage_link *a = open_node(t, 0), *b = open_node(t, 1);
    bv_error err = {0};
    int n = 5;
    assert_int_equal(bv_stage_link_send_fill(a, 1, BV_PIPE_REPLICA, 0, 9, n * sizeof(float),
                                             fill_squares, &n, &err),
                     BV_OK);
    bv_pipe_msg_in m;
    assert_int_equal(bv_stage_link_recv(b, BV_PIPE_REPLICA, 0, 0, 9, 1000, "the replica's "
                                        "gradients", &m, &err),
                     BV_OK);
    const float want[5] = {0, 1, 4, 9, 16};
    assert_int_equal(m.bytes, sizeof want);
    assert_memory_equal(m.data, want, sizeof want);
    assert_int_equal(m.step, 9);
    bv_stage_link_release(b, &m);
    bv_stage_link_close(a);
    bv_stage_link_close(b);
    queue_ops.destroy(t);
    bv_opts_free(&opts);
}

typedef struct ring_arg {
    bv_transport *t;
    int rank;
    float x[10];
    bv_status st;
} ring_arg;

static void *ring_main(void *p)
{
    ring_arg *a = p;
    bv_stage_link *l = open_node(a->t, a->rank);
    static const int ring[3] = {0, 1, 2};
    bv_error err = {0};
    a->st = bv_stage_link_allreduce(l, ring, 3, a->rank, 42, a->x, 10, 5000, &err);
    bv_stage_link_close(l);
    return NULL;
}

/* Ten floats over three nodes (chunks of 3, 3 and 4): every node ends with every sum. */
static void test_allreduce(void **state)
{
    (void)state;
    bv_opts opts = {0};
    bv_transport *t = make_transport(&opts);
    ring_arg a[3];
    pthread_t th[3];
    for (int r = 0; r < 3; r++) {
        a[r] = (ring_arg){.t = t, .rank = r};
        for (int i = 0; i < 10; i++)
            a[r].x[i] = (float)(100 * r + i) + 0.25f * (float)r;
    }
    for (int r = 0; r < 3; r++)
        assert_int_equal(pthread_create(&th[r], NULL, ring_main, &a[r]), 0);
    for (int r = 0; r < 3; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(a[r].st, BV_OK);
        for (int i = 0; i < 10; i++)
            assert_true(a[r].x[i] == 300.0f + 3.0f * (float)i + 0.75f);
        assert_memory_equal(a[r].x, a[0].x, sizeof a[0].x);
    }
    queue_ops.destroy(t);
    bv_opts_free(&opts);
}

static void test_state_packing(void **state)
{
    (void)state;
    bv_state s = {0}, back = {0};
    float w[4] = {1, 2, 3, 4};
    assert_int_equal(bv_state_add(&s, "layer/embed/wte", w, sizeof w), BV_OK);
    assert_int_equal(bv_state_add(&s, "layer/head/lnf", w, 0), BV_OK);
    uint8_t *buf;
    size_t bytes;
    bv_error err = {0};
    assert_int_equal(bv_stage_state_pack(&s, &buf, &bytes, &err), BV_OK);
    assert_int_equal(bytes, (4 + 15 + 8 + 16) + (4 + 14 + 8));
    assert_int_equal(bv_stage_state_unpack(buf, bytes, &back, &err), BV_OK);
    assert_int_equal(back.count, 2);
    float r[4];
    assert_true(bv_state_read(&back, "layer/embed/wte", r, sizeof r));
    assert_memory_equal(r, w, sizeof w);
    bv_state_free(&back);
    /* cut anywhere, the buffer is refused (never read past its end) */
    assert_int_equal(bv_stage_state_unpack(buf, 2, &back, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "a state cut off in a name's length");
    bv_state_free(&back);
    assert_int_equal(bv_stage_state_unpack(buf, 30, &back, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "state blob layer/embed/wte: 16 bytes, 3 left");
    bv_state_free(&back);
    buf[2] = 0x10; /* a name of 1 MB */
    assert_int_equal(bv_stage_state_unpack(buf, bytes, &back, &err), BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "a state with a name of 1048591 bytes");
    bv_state_free(&back);
    free(buf);
    bv_state_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matching),
        cmocka_unit_test(test_named_abort),
        cmocka_unit_test(test_send_fill),
        cmocka_unit_test(test_allreduce),
        cmocka_unit_test(test_state_packing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
