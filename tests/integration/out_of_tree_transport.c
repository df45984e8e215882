/* The parts of the transport contract (transport.h) that a training run does not reach,
 * checked on an example transport plugin through its ops table alone: a send before the
 * inbox is bound waits for it; recv times out with BV_ERR_IO, "timeout" and msg untouched;
 * one inbox per address; fan-in keeps each sender's order; a full queue blocks send;
 * empty payloads; misuse is an error. Only what transport.h promises, so the zmq plugin
 * passes too. Built by out_of_tree_plugin.sh against the installed SDK:
 *   out_of_tree_transport <dir>/transport_queue.so queue */
#define _POSIX_C_SOURCE 200809L

#include <bivouac.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static int failures;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stderr, "FAIL: %s:%d: ", __FILE__, __LINE__);                        \
            fprintf(stderr, __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                         \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

static const bv_transport_ops *ops;

/* Receives one message and checks it is header h, payload p (strings, without the NUL). */
static void expect(bv_endpoint *in, const char *h, const char *p)
{
    bv_msg m;
    bv_error err = {0};
    bv_status st = ops->recv(in, &m, 2000, &err);
    CHECK(st == BV_OK, "recv: %s", err.msg);
    if (st != BV_OK)
        return;
    CHECK(m.header_len == strlen(h) && memcmp(m.header, h, m.header_len) == 0 &&
              m.payload_len == strlen(p) && memcmp(m.payload, p, m.payload_len) == 0,
          "received '%.*s'/'%.*s', expected '%s'/'%s'", (int)m.header_len,
          (const char *)m.header, (int)m.payload_len, (const char *)m.payload, h, p);
    ops->release(&m);
}

static bv_status send_str(bv_endpoint *out, const char *h, const char *p)
{
    bv_error err = {0};
    bv_status st = ops->send(out, h, strlen(h), p, strlen(p), &err);
    CHECK(st == BV_OK, "send '%s': %s", h, err.msg);
    return st;
}

typedef struct sender_arg {
    bv_endpoint *out;
    atomic_int sent;
} sender_arg;

static void *send_three(void *arg)
{
    sender_arg *a = arg;
    const char *h[3] = {"f1", "f2", "f3"};
    for (int i = 0; i < 3; i++)
        if (send_str(a->out, h[i], "x") == BV_OK)
            atomic_fetch_add(&a->sent, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <dir>/transport_NAME.so NAME\n", argv[0]);
        return 2;
    }
    void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "FAIL: %s\n", dlerror());
        return 1;
    }
    char symbol[256];
    snprintf(symbol, sizeof symbol, "bv_transport_%s_plugin", argv[2]);
    bv_plugin_entry_fn entry;
    *(void **)&entry = dlsym(so, symbol);
    if (!entry) {
        fprintf(stderr, "FAIL: no %s in %s\n", symbol, argv[1]);
        return 1;
    }
    const bv_plugin *d = entry();
    ops = d->ops;

    /* The options' defaults, with capacity 2 when the plugin has that option. */
    bv_opts opts;
    bv_error err = {0};
    if (bv_opts_defaults(&opts, "transport", d->options, &err) != BV_OK) {
        fprintf(stderr, "FAIL: defaults: %s\n", err.msg);
        return 1;
    }
    bool bounded = false;
    for (size_t i = 0; i < opts.count; i++)
        if (strcmp(opts.values[i].decl->name, "capacity") == 0) {
            opts.values[i].v.i = 2;
            bounded = true;
        }
    bv_transport *t = ops->create(&opts, &err);
    if (!t) {
        fprintf(stderr, "FAIL: create: %s\n", err.msg);
        return 1;
    }

    /* A send to an inproc inbox bound later waits for it. */
    bv_endpoint *early = ops->connect(t, "inproc://a", &err);
    CHECK(early, "connect before bind: %s", err.msg);
    send_str(early, "h0", "before bind");
    bv_endpoint *in = ops->bind(t, "inproc://a", &err);
    CHECK(in, "bind: %s", err.msg);
    if (!early || !in)
        return 1;
    expect(in, "h0", "before bind");

    /* A timeout is BV_ERR_IO with "timeout" in the message, and msg is untouched. */
    bv_msg m;
    memset(&m, 0xAB, sizeof m);
    bv_msg untouched = m;
    bv_error terr = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bv_status st = ops->recv(in, &m, 50, &terr);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited_ms =
        (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK(st == BV_ERR_IO && strstr(terr.msg, "timeout"),
          "recv on an empty inbox gave status %d '%s', expected BV_ERR_IO with 'timeout'",
          (int)st, terr.msg);
    CHECK(memcmp(&m, &untouched, sizeof m) == 0, "a timed-out recv wrote into msg");
    CHECK(waited_ms >= 45, "recv(50 ms) returned after %.1f ms", waited_ms);
    st = ops->recv(in, &m, 0, &terr);
    CHECK(st == BV_ERR_IO && strstr(terr.msg, "timeout"), "recv(0) on an empty inbox: %d '%s'",
          (int)st, terr.msg);

    /* One inbox per address; only inproc:// here; each side used the right way round. */
    bv_error e2 = {0};
    CHECK(!ops->bind(t, "inproc://a", &e2) && e2.status != BV_OK,
          "a second bind of inproc://a succeeded");
    st = ops->send(in, "h", 1, "p", 1, &e2);
    CHECK(st != BV_OK, "send on an inbox succeeded");
    st = ops->recv(early, &m, 0, &e2);
    CHECK(st != BV_OK && !strstr(e2.msg, "timeout"), "recv on an outbox: %d '%s'", (int)st,
          e2.msg);

    /* Fan-in: two outboxes, each one's messages in the order sent; an empty payload. */
    bv_endpoint *other = ops->connect(t, "inproc://a", &err);
    CHECK(other, "second connect: %s", err.msg);
    if (!other)
        return 1;
    send_str(early, "a1", "");
    send_str(other, "b1", "");
    bv_msg r[2] = {{0}};
    for (int i = 0; i < 2; i++) {
        CHECK(ops->recv(in, &r[i], 2000, &err) == BV_OK, "fan-in recv %d: %s", i, err.msg);
        CHECK(r[i].payload_len == 0, "an empty payload came back as %zu bytes",
              r[i].payload_len);
    }
    CHECK(r[0].header_len == 2 && r[1].header_len == 2 &&
              memcmp(r[0].header, r[1].header, 2) != 0,
          "fan-in did not deliver a1 and b1 once each");
    ops->release(&r[0]);
    ops->release(&r[1]);

    /* A full queue (capacity 2) blocks the third send until a recv makes room. */
    if (bounded) {
        sender_arg a = {.out = other};
        pthread_t th;
        pthread_create(&th, NULL, send_three, &a);
        struct timespec pause = {0, 100 * 1000000L};
        nanosleep(&pause, NULL);
        CHECK(atomic_load(&a.sent) <= 2, "3 sends into a queue of capacity 2 did not block");
        expect(in, "f1", "x");
        pthread_join(th, NULL);
        CHECK(atomic_load(&a.sent) == 3, "the blocked send did not finish after a recv");
        expect(in, "f2", "x");
        expect(in, "f3", "x");
    }

    ops->close(other);
    ops->close(early);
    ops->close(in);
    ops->destroy(t);
    bv_opts_free(&opts);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("transport %s: queueing before bind, timeout, fan-in, back-pressure: ok\n", argv[2]);
    return 0;
}
