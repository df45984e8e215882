/* Tests for transport_zmq.so: messages over inproc://, ipc:// and tcp:// (loopback only),
 * fan-in ordering, 16 MiB and empty payloads, timeouts (also under signals), malformed
 * peers, and error texts. Every wait is bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "bivouac/plugin.h"
#include "bivouac/transport.h"
#include "bivouac/wire.h"

const bv_plugin *bv_transport_zmq_plugin(void);

#define RECV_WAIT_MS 10000 /* generous: the machine running the tests may be loaded */

static const bv_transport_ops *ops(void)
{
    return bv_transport_zmq_plugin()->ops;
}

static bv_transport *transport_new(void)
{
    bv_opts opts;
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(
        bv_opts_defaults(&opts, "transport", bv_transport_zmq_plugin()->options, &err), BV_OK);
    bv_transport *t = ops()->create(&opts, &err);
    if (!t)
        fail_msg("create: %s", err.msg);
    bv_opts_free(&opts);
    return t;
}

/* A transport with some options changed: pairs of name, YAML text, ending in NULL. */
static bv_transport *transport_with(const char *name, ...)
{
    bv_opts opts;
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(
        bv_opts_defaults(&opts, "transport", bv_transport_zmq_plugin()->options, &err), BV_OK);
    va_list ap;
    va_start(ap, name);
    for (const char *n = name; n; n = va_arg(ap, const char *)) {
        const char *text = va_arg(ap, const char *);
        bv_opt_value *v = (bv_opt_value *)bv_opts_find(&opts, n);
        assert_non_null(v);
        bv_opt_value parsed = {0};
        if (bv_opt_parse(v->decl, text, &parsed, &err) != BV_OK)
            fail_msg("%s=%s: %s", n, text, err.msg);
        if (v->decl->type == BV_OPT_STRING)
            free(v->v.s);
        v->v = parsed.v;
    }
    va_end(ap);
    bv_transport *t = ops()->create(&opts, &err);
    if (!t)
        fail_msg("create: %s", err.msg);
    bv_opts_free(&opts);
    return t;
}

static bv_transport_counters counters_of(bv_endpoint *ep)
{
    bv_transport_counters c = {.size = sizeof c};
    ops()->counters(ep, &c);
    assert_int_equal(c.size, sizeof c);
    return c;
}

static bv_endpoint *bind_ok(bv_transport *t, const char *address)
{
    bv_error err;
    bv_error_clear(&err);
    bv_endpoint *ep = ops()->bind(t, address, &err);
    if (!ep)
        fail_msg("bind %s: %s", address, err.msg);
    return ep;
}

static bv_endpoint *connect_ok(bv_transport *t, const char *address)
{
    bv_error err;
    bv_error_clear(&err);
    bv_endpoint *ep = ops()->connect(t, address, &err);
    if (!ep)
        fail_msg("connect %s: %s", address, err.msg);
    return ep;
}

static void fill_pattern(unsigned char *buf, size_t len, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
}

/* Sends a framed message: wire header + payload. */
static void send_framed(bv_endpoint *out, uint16_t type, uint32_t sender, uint32_t tag,
                        const void *payload, size_t len)
{
    bv_wire_header h;
    bv_wire_header_make(&h, type, sender, tag, payload, len);
    bv_error err;
    bv_error_clear(&err);
    bv_status st = ops()->send(out, &h, sizeof h, payload, len, &err);
    if (st != BV_OK)
        fail_msg("send: %s", err.msg);
}

/* Receives one message and checks its frame; returns the decoded header. */
static bv_wire_header recv_framed(bv_endpoint *in, uint16_t type, bv_msg *msg)
{
    bv_error err;
    bv_error_clear(&err);
    bv_status st = ops()->recv(in, msg, RECV_WAIT_MS, &err);
    if (st != BV_OK)
        fail_msg("recv: %s", err.msg);
    bv_wire_header h;
    st = bv_wire_check(msg->header, msg->header_len, msg->payload, msg->payload_len, type,
                       &h, &err);
    if (st != BV_OK)
        fail_msg("wire check: %s", err.msg);
    /* The plugin promises 8-byte alignment: tensors are read in place. */
    assert_true((uintptr_t)msg->header % 8 == 0);
    assert_true(msg->payload_len == 0 || (uintptr_t)msg->payload % 8 == 0);
    return h;
}

static double elapsed_ms(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) * 1e3 +
           (double)(now.tv_nsec - start->tv_nsec) / 1e6;
}

/* ---- descriptor -------------------------------------------------------------------- */

static void descriptor_names_the_plugin_and_its_options(void **state)
{
    const bv_plugin *p = bv_transport_zmq_plugin();
    assert_int_equal(p->magic, BV_PLUGIN_MAGIC);
    assert_int_equal(p->abi_major, BV_ABI_MAJOR);
    assert_int_equal(p->struct_size, sizeof(bv_plugin));
    assert_int_equal(p->kind, BV_KIND_TRANSPORT);
    assert_string_equal(p->name, "zmq");
    assert_string_equal(p->version, "0.2.0");
    assert_int_equal(p->ops_size, sizeof(bv_transport_ops));
    const bv_transport_ops *o = p->ops;
    assert_non_null(o->create);
    assert_non_null(o->destroy);
    assert_non_null(o->bind);
    assert_non_null(o->connect);
    assert_non_null(o->send);
    assert_non_null(o->recv);
    assert_non_null(o->release);
    assert_non_null(o->close);
    assert_non_null(o->bound_address);
    assert_non_null(o->counters);
    assert_non_null(p->get_proc_address("bv_zmq_curve_keypair"));
    assert_null(p->get_proc_address("nothing"));

    assert_int_equal(bv_schema_count(p->options), 8);
    const bv_option *send_timeout = bv_schema_find(p->options, "send_timeout_ms");
    assert_non_null(send_timeout);
    assert_string_equal(send_timeout->default_value, "5000");
    const bv_option *max_msg = bv_schema_find(p->options, "max_message_bytes");
    assert_non_null(max_msg);
    assert_string_equal(max_msg->default_value, "1073741824");
    assert_non_null(bv_schema_find(p->options, "curve_secret_key"));
    assert_non_null(bv_schema_find(p->options, "curve_server_key"));
    assert_non_null(bv_schema_find(p->options, "curve_client_keys"));
    const bv_option *io = bv_schema_find(p->options, "io_threads");
    const bv_option *hwm = bv_schema_find(p->options, "hwm");
    const bv_option *linger = bv_schema_find(p->options, "linger_ms");
    assert_non_null(io);
    assert_non_null(hwm);
    assert_non_null(linger);
    assert_string_equal(io->default_value, "1");
    assert_true(io->min == 0 && io->max == 64);
    assert_string_equal(hwm->default_value, "1000");
    assert_true(hwm->min == 1 && hwm->max == 1e7);
    assert_string_equal(linger->default_value, "1000");
    assert_true(linger->min == 0 && linger->max == 1e7); /* close never waits forever */
}

/* ---- inproc ------------------------------------------------------------------------ */

enum { FAN_IN_SENDERS = 2, FAN_IN_MESSAGES = 500 };

typedef struct sender_job {
    bv_transport *t;
    uint32_t id;
    bv_status status;
    char error[BV_ERROR_MSG_MAX];
} sender_job;

/* Each sender owns its outbox (sockets are single-threaded) and sends tags 0, 1, 2, ... */
static void *fan_in_sender(void *arg)
{
    sender_job *job = arg;
    bv_error err;
    bv_error_clear(&err);
    bv_endpoint *out = ops()->connect(job->t, "inproc://fan-in", &err);
    job->status = err.status;
    if (!out) {
        snprintf(job->error, sizeof job->error, "%s", err.msg);
        return NULL;
    }
    for (uint32_t tag = 0; tag < FAN_IN_MESSAGES && job->status == BV_OK; tag++) {
        uint32_t payload[4] = {job->id, tag, job->id * 1000u + tag, 0xC0FFEEu};
        bv_wire_header h;
        bv_wire_header_make(&h, 1, job->id, tag, payload, sizeof payload);
        job->status = ops()->send(out, &h, sizeof h, payload, sizeof payload, &err);
    }
    if (job->status != BV_OK)
        snprintf(job->error, sizeof job->error, "%s", err.msg);
    ops()->close(out);
    return NULL;
}

static void inproc_fan_in_keeps_each_senders_order(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "inproc://fan-in");

    pthread_t threads[FAN_IN_SENDERS];
    sender_job jobs[FAN_IN_SENDERS];
    for (uint32_t i = 0; i < FAN_IN_SENDERS; i++) {
        jobs[i] = (sender_job){.t = t, .id = i};
        assert_int_equal(pthread_create(&threads[i], NULL, fan_in_sender, &jobs[i]), 0);
    }

    uint32_t next_tag[FAN_IN_SENDERS] = {0};
    for (int n = 0; n < FAN_IN_SENDERS * FAN_IN_MESSAGES; n++) {
        bv_msg msg;
        bv_wire_header h = recv_framed(in, 1, &msg);
        assert_true(h.sender < FAN_IN_SENDERS);
        assert_int_equal(h.tag, next_tag[h.sender]);
        next_tag[h.sender]++;
        uint32_t payload[4];
        assert_int_equal(msg.payload_len, sizeof payload);
        memcpy(payload, msg.payload, sizeof payload);
        assert_int_equal(payload[0], h.sender);
        assert_int_equal(payload[1], h.tag);
        ops()->release(&msg);
    }
    for (int i = 0; i < FAN_IN_SENDERS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        if (jobs[i].status != BV_OK)
            fail_msg("sender %d: %s", i, jobs[i].error);
        assert_int_equal(next_tag[i], FAN_IN_MESSAGES);
    }

    /* Nothing else arrived. */
    bv_msg msg;
    bv_error err;
    assert_int_equal(ops()->recv(in, &msg, 0, &err), BV_ERR_IO);
    assert_non_null(strstr(err.msg, "timeout"));

    ops()->close(in);
    ops()->destroy(t);
}

static void sixteen_mebibyte_payload_round_trips(void **state)
{
    size_t len = (size_t)16 << 20;
    unsigned char *payload = malloc(len);
    assert_non_null(payload);
    fill_pattern(payload, len, 16);

    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "inproc://large");
    bv_endpoint *out = connect_ok(t, "inproc://large");
    send_framed(out, 9, 4, 77, payload, len);

    bv_msg msg;
    bv_wire_header h = recv_framed(in, 9, &msg);
    assert_int_equal(h.sender, 4);
    assert_int_equal(h.tag, 77);
    assert_int_equal(h.payload_len, len);
    assert_int_equal(msg.payload_len, len);
    assert_memory_equal(msg.payload, payload, len);
    ops()->release(&msg);
    assert_null(msg.impl);

    ops()->close(out);
    ops()->close(in);
    ops()->destroy(t);
    free(payload);
}

static void empty_payload_round_trips(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "inproc://empty");
    bv_endpoint *out = connect_ok(t, "inproc://empty");
    send_framed(out, 2, 1, 5, NULL, 0);

    bv_msg msg;
    bv_wire_header h = recv_framed(in, 2, &msg);
    assert_int_equal(msg.header_len, sizeof(bv_wire_header));
    assert_int_equal(msg.payload_len, 0);
    assert_int_equal(h.payload_len, 0);
    assert_int_equal(h.tag, 5);
    ops()->release(&msg);

    ops()->close(out);
    ops()->close(in);
    ops()->destroy(t);
}

/* transport.h: sends to an inproc inbox bound later are queued. */
static void inproc_connect_before_bind_is_queued(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *out = connect_ok(t, "inproc://later");
    send_framed(out, 3, 0, 1, "early", 5);
    bv_endpoint *in = bind_ok(t, "inproc://later");

    bv_msg msg;
    bv_wire_header h = recv_framed(in, 3, &msg);
    assert_int_equal(h.tag, 1);
    assert_memory_equal(msg.payload, "early", 5);
    ops()->release(&msg);

    ops()->close(out);
    ops()->close(in);
    ops()->destroy(t);
}

/* ---- timeouts ---------------------------------------------------------------------- */

static void recv_timeout_returns_io_error_within_twice_the_timeout(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "inproc://quiet");

    bv_msg msg;
    memset(&msg, 0x5A, sizeof msg);
    bv_msg untouched = msg;
    bv_error err;
    bv_error_clear(&err);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    assert_int_equal(ops()->recv(in, &msg, 200, &err), BV_ERR_IO);
    double waited = elapsed_ms(&start);
    assert_int_equal(err.status, BV_ERR_IO);
    assert_string_equal(err.msg, "timeout: no message on inproc://quiet within 200 ms");
    assert_memory_equal(&msg, &untouched, sizeof msg);
    assert_true(waited >= 199.0);
    assert_true(waited <= 400.0);

    /* Zero polls once. */
    assert_int_equal(ops()->recv(in, &msg, 0, &err), BV_ERR_IO);
    assert_non_null(strstr(err.msg, "timeout"));

    ops()->close(in);
    ops()->destroy(t);
}

static volatile sig_atomic_t alarms;

static void count_alarm(int sig)
{
    alarms++;
}

/* A signal every 5 ms (no SA_RESTART, so every wait sees EINTR) neither cuts the timeout
 * short nor turns into an error. */
static void recv_timeout_holds_through_signals(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "inproc://signals");

    struct sigaction sa = {.sa_handler = count_alarm}, old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
    struct itimerval every5 = {.it_interval = {0, 5000}, .it_value = {0, 5000}};
    struct itimerval off = {{0, 0}, {0, 0}};
    alarms = 0;
    assert_int_equal(setitimer(ITIMER_REAL, &every5, NULL), 0);

    bv_msg msg;
    bv_error err;
    bv_error_clear(&err);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    bv_status st = ops()->recv(in, &msg, 150, &err);
    double waited = elapsed_ms(&start);

    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old, NULL);

    assert_int_equal(st, BV_ERR_IO);
    assert_non_null(strstr(err.msg, "timeout"));
    assert_true(alarms >= 2);
    assert_true(waited >= 149.0);
    assert_true(waited <= 300.0);

    ops()->close(in);
    ops()->destroy(t);
}

/* ---- ipc and tcp ------------------------------------------------------------------- */

static void round_trip_sizes(bv_endpoint *in, bv_endpoint *out)
{
    /* Odd sizes: tcp frames come out of a shared buffer at any offset. */
    static const size_t sizes[] = {1, 3, 17, 33, 64, 65, 1000, 8191, 100003};
    unsigned char *payload = malloc(100003);
    assert_non_null(payload);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        fill_pattern(payload, sizes[i], (uint32_t)i);
        send_framed(out, 4, 1, (uint32_t)i, payload, sizes[i]);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        bv_msg msg;
        bv_wire_header h = recv_framed(in, 4, &msg);
        assert_int_equal(h.tag, i);
        assert_int_equal(msg.payload_len, sizes[i]);
        fill_pattern(payload, sizes[i], (uint32_t)i);
        assert_memory_equal(msg.payload, payload, sizes[i]);
        ops()->release(&msg);
    }
    free(payload);
}

static void ipc_round_trip_in_a_private_directory(void **state)
{
    char dir[] = "/tmp/bivouac-zmq-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char address[128];
    snprintf(address, sizeof address, "ipc://%s/inbox", dir);

    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, address);
    assert_string_equal(ops()->bound_address(in), address);
    bv_endpoint *out = connect_ok(t, address);
    round_trip_sizes(in, out);
    char path[128];
    snprintf(path, sizeof path, "%s/inbox", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    ops()->close(out);
    ops()->close(in);
    ops()->destroy(t);

    /* Closing the inbox removed its socket file: the directory is empty again. */
    assert_int_equal(stat(path, &st), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(rmdir(dir), 0);
}

static void tcp_round_trip_on_a_port_the_kernel_chose(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "tcp://127.0.0.1:*");
    const char *bound = ops()->bound_address(in);
    int port = 0;
    assert_int_equal(sscanf(bound, "tcp://127.0.0.1:%d", &port), 1);
    assert_true(port > 0 && port < 65536);

    bv_endpoint *out = connect_ok(t, bound);
    assert_string_equal(ops()->bound_address(out), bound);
    round_trip_sizes(in, out);

    size_t len = (size_t)16 << 20;
    unsigned char *big = malloc(len);
    assert_non_null(big);
    fill_pattern(big, len, 99);
    send_framed(out, 6, 2, 3, big, len);
    bv_msg msg;
    bv_wire_header h = recv_framed(in, 6, &msg);
    assert_int_equal(h.payload_len, len);
    assert_memory_equal(msg.payload, big, len);
    ops()->release(&msg);
    free(big);

    ops()->close(out);
    ops()->close(in);
    ops()->destroy(t);
}

/* ---- what goes wrong --------------------------------------------------------------- */

static void expect_bind_error(bv_transport *t, const char *address, const char *message)
{
    bv_error err;
    bv_error_clear(&err);
    assert_null(ops()->bind(t, address, &err));
    assert_int_equal(err.status, BV_ERR_IO);
    assert_string_equal(err.msg, message);
}

static void bind_errors_carry_the_address_and_zmq_text(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "tcp://127.0.0.1:*");
    char taken[256], message[512];
    snprintf(taken, sizeof taken, "%s", ops()->bound_address(in));
    snprintf(message, sizeof message, "cannot bind %s: Address already in use", taken);
    expect_bind_error(t, taken, message);

    bv_endpoint *inproc = bind_ok(t, "inproc://only-once");
    expect_bind_error(t, "inproc://only-once",
                      "cannot bind inproc://only-once: Address already in use");
    expect_bind_error(t, "carrier-pigeon://loft",
                      "cannot bind carrier-pigeon://loft: Protocol not supported");

    bv_error err;
    bv_error_clear(&err);
    assert_null(ops()->connect(t, "carrier-pigeon://loft", &err));
    assert_string_equal(err.msg, "cannot connect to carrier-pigeon://loft: Protocol not supported");

    ops()->close(inproc);
    ops()->close(in);
    ops()->destroy(t);
}

static void send_on_an_inbox_and_recv_on_an_outbox_are_refused(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "inproc://roles");
    bv_endpoint *out = connect_ok(t, "inproc://roles");
    bv_error err;
    bv_msg msg;
    assert_int_equal(ops()->send(in, "h", 1, "p", 1, &err), BV_ERR_INTERNAL);
    assert_string_equal(err.msg,
                        "cannot send on inproc://roles: it is an inbox (bound), not an outbox");
    assert_int_equal(ops()->recv(out, &msg, 0, &err), BV_ERR_INTERNAL);
    assert_string_equal(
        err.msg, "cannot receive on inproc://roles: it is an outbox (connected), not an inbox");
    ops()->close(out);
    ops()->close(in);
    ops()->destroy(t);
}

/* A foreign zmq peer may send any number of frames: the inbox reports it, drops that
 * message whole and carries on with the next one. */
static void messages_without_two_frames_are_rejected_whole(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "tcp://127.0.0.1:*");
    const char *bound = ops()->bound_address(in);

    void *ctx = zmq_ctx_new();
    assert_non_null(ctx);
    void *raw = zmq_socket(ctx, ZMQ_PUSH);
    assert_non_null(raw);
    int linger = 0;
    zmq_setsockopt(raw, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_connect(raw, bound), 0);
    assert_int_equal(zmq_send(raw, "one", 3, 0), 3);
    assert_int_equal(zmq_send(raw, "a", 1, ZMQ_SNDMORE), 1);
    assert_int_equal(zmq_send(raw, "b", 1, ZMQ_SNDMORE), 1);
    assert_int_equal(zmq_send(raw, "c", 1, 0), 1);
    bv_wire_header h;
    bv_wire_header_make(&h, 8, 0, 42, "ok", 2);
    assert_int_equal(zmq_send(raw, &h, sizeof h, ZMQ_SNDMORE), (int)sizeof h);
    assert_int_equal(zmq_send(raw, "ok", 2, 0), 2);

    char message[512];
    bv_error err;
    bv_msg msg;
    assert_int_equal(ops()->recv(in, &msg, RECV_WAIT_MS, &err), BV_ERR_CORRUPT);
    snprintf(message, sizeof message,
             "message on %s has 1 frame, expected 2 (header, payload)", bound);
    assert_string_equal(err.msg, message);
    assert_int_equal(ops()->recv(in, &msg, RECV_WAIT_MS, &err), BV_ERR_CORRUPT);
    snprintf(message, sizeof message,
             "message on %s has 3 frames, expected 2 (header, payload)", bound);
    assert_string_equal(err.msg, message);
    bv_wire_header got = recv_framed(in, 8, &msg);
    assert_int_equal(got.tag, 42);
    ops()->release(&msg);
    assert_int_equal(counters_of(in).frames_malformed, 2);

    zmq_close(raw);
    zmq_ctx_term(ctx);
    ops()->close(in);
    ops()->destroy(t);
}

/* The transport moves bytes; the wire check catches what was damaged before sending. */
static void a_damaged_frame_arrives_and_fails_the_wire_check(void **state)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, "inproc://damaged");
    bv_endpoint *out = connect_ok(t, "inproc://damaged");

    unsigned char payload[256];
    fill_pattern(payload, sizeof payload, 1);
    bv_wire_header h;
    bv_wire_header_make(&h, 5, 0, 0, payload, sizeof payload);
    payload[100] ^= 0x01;
    bv_error err;
    assert_int_equal(ops()->send(out, &h, sizeof h, payload, sizeof payload, &err), BV_OK);
    bv_wire_header wrong_type;
    bv_wire_header_make(&wrong_type, 3, 0, 1, NULL, 0);
    assert_int_equal(ops()->send(out, &wrong_type, sizeof wrong_type, NULL, 0, &err), BV_OK);
    assert_int_equal(ops()->send(out, &h, 12, NULL, 0, &err), BV_OK);

    bv_msg msg;
    assert_int_equal(ops()->recv(in, &msg, RECV_WAIT_MS, &err), BV_OK);
    assert_int_equal(bv_wire_check(msg.header, msg.header_len, msg.payload, msg.payload_len,
                                   5, NULL, &err),
                     BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "payload checksum mismatch");
    ops()->release(&msg);

    assert_int_equal(ops()->recv(in, &msg, RECV_WAIT_MS, &err), BV_OK);
    assert_int_equal(bv_wire_check(msg.header, msg.header_len, msg.payload, msg.payload_len,
                                   5, NULL, &err),
                     BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "unexpected message type 3 (expected 5)");
    ops()->release(&msg);

    assert_int_equal(ops()->recv(in, &msg, RECV_WAIT_MS, &err), BV_OK);
    assert_int_equal(bv_wire_check(msg.header, msg.header_len, msg.payload, msg.payload_len,
                                   5, NULL, &err),
                     BV_ERR_CORRUPT);
    assert_string_equal(err.msg, "frame too short: 12 bytes, header is 32");
    ops()->release(&msg);

    ops()->close(out);
    ops()->close(in);
    ops()->destroy(t);
}

/* ---- two processes ----------------------------------------------------------------- */

enum { CHILD_MESSAGES = 50 };

/* In a forked child: a transport of its own (never the parent's context), an outbox to
 * address, CHILD_MESSAGES framed messages; exits 0 when all were sent. */
static void child_sends(const char *address)
{
    bv_transport *t = transport_new();
    bv_error err;
    bv_error_clear(&err);
    bv_endpoint *out = ops()->connect(t, address, &err);
    if (!out)
        _exit(2);
    for (uint32_t i = 0; i < CHILD_MESSAGES; i++) {
        unsigned char payload[1000];
        fill_pattern(payload, sizeof payload, i);
        bv_wire_header h;
        bv_wire_header_make(&h, 7, (uint32_t)getpid(), i, payload, sizeof payload);
        if (ops()->send(out, &h, sizeof h, payload, sizeof payload, &err) != BV_OK)
            _exit(3);
    }
    ops()->close(out);
    ops()->destroy(t);
    _exit(0);
}

static void receive_from_a_child_process(const char *bind_address, bool check_port)
{
    bv_transport *t = transport_new();
    bv_endpoint *in = bind_ok(t, bind_address);
    const char *bound = ops()->bound_address(in);
    if (check_port) {
        int port = 0;
        assert_int_equal(sscanf(bound, "tcp://127.0.0.1:%d", &port), 1);
        assert_true(port > 0 && port < 65536);
    }
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child_sends(bound);

    for (uint32_t i = 0; i < CHILD_MESSAGES; i++) {
        bv_msg msg;
        bv_wire_header h = recv_framed(in, 7, &msg);
        assert_int_equal(h.sender, (uint32_t)pid);
        assert_int_equal(h.tag, i);
        unsigned char want[1000];
        fill_pattern(want, sizeof want, i);
        assert_int_equal(msg.payload_len, sizeof want);
        assert_memory_equal(msg.payload, want, sizeof want);
        ops()->release(&msg);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    bv_transport_counters c = counters_of(in);
    assert_int_equal(c.frames_malformed, 0);
    assert_int_equal(c.auth_rejected, 0);
    ops()->close(in);
    ops()->destroy(t);
}

static void frames_cross_processes_over_ipc(void **state)
{
    char dir[] = "/tmp/bivouac-zmq-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char address[128], path[128];
    snprintf(address, sizeof address, "ipc://%s/inbox", dir);
    snprintf(path, sizeof path, "%s/inbox", dir);
    receive_from_a_child_process(address, false);
    assert_int_equal(access(path, F_OK), -1); /* no socket file left behind */
    assert_int_equal(rmdir(dir), 0);
}

static void frames_cross_processes_over_tcp_on_a_wildcard_port(void **state)
{
    receive_from_a_child_process("tcp://127.0.0.1:*", true);
}

/* ---- bounded sends ----------------------------------------------------------------- */

/* Nobody listens on the port: the send fails after send_timeout_ms, naming the peer as
 * unreachable, and is counted; close and destroy return at once. */
static void a_send_nobody_takes_fails_as_unreachable_within_the_bound(void **state)
{
    bv_transport *probe = transport_new();
    bv_endpoint *gone = bind_ok(probe, "tcp://127.0.0.1:*");
    char address[256];
    snprintf(address, sizeof address, "%s", ops()->bound_address(gone));
    ops()->close(gone); /* a port that was just free: nothing listens there now */
    ops()->destroy(probe);

    bv_transport *t = transport_with("send_timeout_ms", "300", NULL);
    bv_endpoint *out = connect_ok(t, address);
    bv_wire_header h;
    bv_wire_header_make(&h, 1, 0, 0, "x", 1);
    bv_error err;
    bv_error_clear(&err);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    assert_int_equal(ops()->send(out, &h, sizeof h, "x", 1, &err), BV_ERR_IO);
    double waited = elapsed_ms(&start);
    char message[600];
    snprintf(message, sizeof message,
             "cannot send to %s: peer unreachable (no connected peer took the message within "
             "300 ms: it is down, not listening, refused our keys, or not reading)",
             address);
    assert_string_equal(err.msg, message);
    assert_true(waited >= 299.0 && waited <= 2000.0);
    assert_int_equal(counters_of(out).send_timeouts, 1);

    /* send_owned takes the same path (and frees the payload: ASan checks). */
    void *owned = malloc(4096);
    assert_non_null(owned);
    memset(owned, 1, 4096);
    bv_wire_header_make(&h, 1, 0, 1, owned, 4096);
    assert_int_equal(ops()->send_owned(out, &h, sizeof h, owned, 4096, &err), BV_ERR_IO);
    assert_non_null(strstr(err.msg, "peer unreachable"));
    assert_int_equal(counters_of(out).send_timeouts, 2);

    clock_gettime(CLOCK_MONOTONIC, &start);
    ops()->close(out);
    ops()->destroy(t);
    assert_true(elapsed_ms(&start) < 1000.0); /* nothing queued: no linger wait */
}

/* ---- frame size limit -------------------------------------------------------------- */

/* A frame over max_message_bytes never reaches recv (zmq refuses it before allocating it
 * and drops that connection); frames within the limit on a new connection still arrive. */
static void a_frame_over_max_message_bytes_is_refused(void **state)
{
    bv_transport *t = transport_with("max_message_bytes", "4096", NULL);
    bv_endpoint *in = bind_ok(t, "tcp://127.0.0.1:*");
    bv_transport *peer = transport_new();
    bv_endpoint *out = connect_ok(peer, ops()->bound_address(in));
    unsigned char *big = calloc(1, 8192);
    assert_non_null(big);
    send_framed(out, 1, 0, 0, big, 8192);
    free(big);
    bv_msg msg;
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(ops()->recv(in, &msg, 500, &err), BV_ERR_IO);
    assert_non_null(strstr(err.msg, "timeout"));
    ops()->close(out);

    bv_endpoint *again = connect_ok(peer, ops()->bound_address(in));
    send_framed(again, 1, 0, 9, "small", 5);
    bv_wire_header h = recv_framed(in, 1, &msg);
    assert_int_equal(h.tag, 9);
    ops()->release(&msg);
    ops()->close(again);
    ops()->destroy(peer);
    ops()->close(in);
    ops()->destroy(t);
}

/* ---- CURVE ------------------------------------------------------------------------- */

typedef int (*keypair_fn)(char *public_z85, char *secret_z85);

static void keypair(char public_z85[41], char secret_z85[41])
{
    keypair_fn fn = (keypair_fn)bv_transport_zmq_plugin()->get_proc_address(
        "bv_zmq_curve_keypair");
    assert_non_null(fn);
    assert_int_equal(fn(public_z85, secret_z85), 0);
    assert_int_equal(strlen(public_z85), 40);
    assert_int_equal(strlen(secret_z85), 40);
}

/* Polls the inbox's counters until `want` handshakes were refused (they are reported
 * asynchronously) or 10 s pass. */
static uint64_t wait_rejected(bv_endpoint *in, uint64_t want)
{
    for (int i = 0; i < 1000; i++) {
        uint64_t n = counters_of(in).auth_rejected;
        if (n >= want)
            return n;
        struct timespec ms10 = {0, 10 * 1000 * 1000};
        nanosleep(&ms10, NULL);
    }
    return counters_of(in).auth_rejected;
}

/* One keypair for the run: a client holding it delivers; a client with another keypair
 * (that knows the server's public key) and a client without CURVE are refused in the
 * handshake, counted, and their sends time out as unreachable. */
static void curve_lets_in_only_the_runs_key(void **state)
{
    char run_public[41], run_secret[41], other_public[41], other_secret[41];
    keypair(run_public, run_secret);
    keypair(other_public, other_secret);

    bv_transport *server = transport_with("curve_secret_key", run_secret, NULL);
    bv_endpoint *in = bind_ok(server, "tcp://127.0.0.1:*");
    const char *address = ops()->bound_address(in);

    bv_transport *good = transport_with("curve_secret_key", run_secret, NULL);
    bv_endpoint *good_out = connect_ok(good, address);
    send_framed(good_out, 2, 1, 11, "secret", 6);
    bv_msg msg;
    bv_wire_header h = recv_framed(in, 2, &msg);
    assert_int_equal(h.tag, 11);
    assert_memory_equal(msg.payload, "secret", 6);
    ops()->release(&msg);
    assert_int_equal(counters_of(in).auth_rejected, 0);

    bv_transport *stranger = transport_with("curve_secret_key", other_secret,
                                            "curve_server_key", run_public,
                                            "send_timeout_ms", "300", NULL);
    bv_endpoint *stranger_out = connect_ok(stranger, address);
    bv_wire_header_make(&h, 2, 9, 12, "intruder", 8);
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(ops()->send(stranger_out, &h, sizeof h, "intruder", 8, &err), BV_ERR_IO);
    assert_non_null(strstr(err.msg, "peer unreachable"));
    assert_true(wait_rejected(in, 1) >= 1);

    bv_transport *plain = transport_with("send_timeout_ms", "300", NULL);
    bv_endpoint *plain_out = connect_ok(plain, address);
    uint64_t before = counters_of(in).auth_rejected;
    assert_int_equal(ops()->send(plain_out, &h, sizeof h, "intruder", 8, &err), BV_ERR_IO);
    assert_non_null(strstr(err.msg, "peer unreachable"));
    assert_true(wait_rejected(in, before + 1) >= before + 1);

    /* Nothing of theirs arrived; the good client still gets through. */
    assert_int_equal(ops()->recv(in, &msg, 200, &err), BV_ERR_IO);
    send_framed(good_out, 2, 1, 13, "again", 5);
    h = recv_framed(in, 2, &msg);
    assert_int_equal(h.tag, 13);
    ops()->release(&msg);
    assert_int_equal(counters_of(in).frames_malformed, 0);

    ops()->close(plain_out);
    ops()->destroy(plain);
    ops()->close(stranger_out);
    ops()->destroy(stranger);
    ops()->close(good_out);
    ops()->destroy(good);
    ops()->close(in);
    ops()->destroy(server);
}

/* A client key listed in curve_client_keys is let in too (its holder has its own keypair
 * and knows the server's public key). */
static void curve_client_keys_extend_the_allowed_set(void **state)
{
    char run_public[41], run_secret[41], other_public[41], other_secret[41];
    keypair(run_public, run_secret);
    keypair(other_public, other_secret);
    bv_transport *server = transport_with("curve_secret_key", run_secret,
                                          "curve_client_keys", other_public, NULL);
    bv_endpoint *in = bind_ok(server, "tcp://127.0.0.1:*");
    bv_transport *client = transport_with("curve_secret_key", other_secret,
                                          "curve_server_key", run_public, NULL);
    bv_endpoint *out = connect_ok(client, ops()->bound_address(in));
    send_framed(out, 3, 2, 21, "listed", 6);
    bv_msg msg;
    bv_wire_header h = recv_framed(in, 3, &msg);
    assert_int_equal(h.tag, 21);
    ops()->release(&msg);
    assert_int_equal(counters_of(in).auth_rejected, 0);
    ops()->close(out);
    ops()->destroy(client);
    ops()->close(in);
    ops()->destroy(server);
}

static void bad_curve_options_are_refused_at_create(void **state)
{
    bv_opts opts;
    bv_error err;
    bv_error_clear(&err);
    assert_int_equal(
        bv_opts_defaults(&opts, "transport", bv_transport_zmq_plugin()->options, &err), BV_OK);
    bv_opt_value *v = (bv_opt_value *)bv_opts_find(&opts, "curve_secret_key");
    free(v->v.s);
    v->v.s = strdup("not-a-key");
    assert_null(ops()->create(&opts, &err));
    assert_int_equal(err.status, BV_ERR_INVALID);
    assert_string_equal(err.msg,
                        "zmq transport: curve_secret_key is not a Z85 key of 40 characters");
    free(v->v.s);
    v->v.s = strdup("");
    v = (bv_opt_value *)bv_opts_find(&opts, "curve_server_key");
    free(v->v.s);
    v->v.s = strdup("rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7");
    assert_null(ops()->create(&opts, &err));
    assert_string_equal(err.msg, "zmq transport: curve_server_key and curve_client_keys need "
                                 "curve_secret_key");
    bv_opts_free(&opts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(descriptor_names_the_plugin_and_its_options),
        cmocka_unit_test(inproc_fan_in_keeps_each_senders_order),
        cmocka_unit_test(sixteen_mebibyte_payload_round_trips),
        cmocka_unit_test(empty_payload_round_trips),
        cmocka_unit_test(inproc_connect_before_bind_is_queued),
        cmocka_unit_test(recv_timeout_returns_io_error_within_twice_the_timeout),
        cmocka_unit_test(recv_timeout_holds_through_signals),
        cmocka_unit_test(ipc_round_trip_in_a_private_directory),
        cmocka_unit_test(tcp_round_trip_on_a_port_the_kernel_chose),
        cmocka_unit_test(bind_errors_carry_the_address_and_zmq_text),
        cmocka_unit_test(send_on_an_inbox_and_recv_on_an_outbox_are_refused),
        cmocka_unit_test(messages_without_two_frames_are_rejected_whole),
        cmocka_unit_test(a_damaged_frame_arrives_and_fails_the_wire_check),
        cmocka_unit_test(frames_cross_processes_over_ipc),
        cmocka_unit_test(frames_cross_processes_over_tcp_on_a_wildcard_port),
        cmocka_unit_test(a_send_nobody_takes_fails_as_unreachable_within_the_bound),
        cmocka_unit_test(a_frame_over_max_message_bytes_is_refused),
        cmocka_unit_test(curve_lets_in_only_the_runs_key),
        cmocka_unit_test(curve_client_keys_extend_the_allowed_set),
        cmocka_unit_test(bad_curve_options_are_refused_at_create),
    };
    return cmocka_run_group_tests_name("transport_zmq", tests, NULL, NULL);
}
