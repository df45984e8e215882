/* The ZeroMQ transport: an inbox is a PULL socket that any number of PUSH outboxes fan
 * into; a message is two zmq frames, header then payload. Works over inproc://, ipc://
 * and tcp:// (whatever libzmq speaks).
 *
 * Threads: a bv_transport (the zmq context) may be shared by every thread; an endpoint
 * may be used by one thread at a time (zmq sockets are not thread-safe), though it may
 * move between threads with a happens-before hand-off. inproc:// endpoints only reach
 * each other through the same bv_transport.
 *
 * Across processes and hosts (ipc://, tcp://) three things change, and inproc:// keeps
 * today's behaviour (an embedded run pays for none of them):
 *  - sends are bounded: an outbox sets ZMQ_IMMEDIATE (messages queue only on a finished
 *    connection, so a peer that is down does not swallow them into a queue of its own)
 *    and ZMQ_SNDTIMEO = send_timeout_ms, so a send that no peer takes fails with
 *    "peer unreachable" instead of hanging; close waits at most linger_ms;
 *  - frames larger than max_message_bytes are refused by zmq before it allocates them
 *    (ZMQ_MAXMSGSIZE: the peer is disconnected);
 *  - with curve_secret_key set, links are CURVE (authenticated and encrypted): an inbox
 *    is a CURVE server, and a ZAP handler (a thread on inproc://zeromq.zap.01 in this
 *    transport's context, joined in destroy) lets in only clients whose public key is
 *    this process's own (one keypair per run, shared by its roles) or listed in
 *    curve_client_keys. Handshakes an inbox refuses are counted (a socket monitor). */
#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "bivouac/plugin.h"
#include "bivouac/transport.h"

#define CURVE_KEY_Z85 40 /* a 32-byte key in Z85 text */
#define CURVE_KEY_BYTES 32
#define MAX_CLIENT_KEYS 64

struct bv_transport {
    void *ctx;
    int hwm;
    int linger_ms;
    int send_timeout_ms;
    int64_t max_message_bytes;
    atomic_uint next_monitor; /* names each inbox's monitor socket */
    /* CURVE, when curve_secret_key is set. */
    bool curve;
    char secret_z85[CURVE_KEY_Z85 + 1];
    char public_z85[CURVE_KEY_Z85 + 1];
    char server_z85[CURVE_KEY_Z85 + 1]; /* what outboxes expect of the inbox */
    uint8_t allowed[MAX_CLIENT_KEYS][CURVE_KEY_BYTES]; /* [0] is our own public key */
    int n_allowed;
    bool zap_running;
    pthread_t zap_thread;
    void *zap_socket;
};

typedef enum endpoint_role { ENDPOINT_INBOX, ENDPOINT_OUTBOX } endpoint_role;

struct bv_endpoint {
    void *socket;
    void *monitor; /* inbox over ipc/tcp: a PAIR receiving its handshake failures */
    endpoint_role role;
    bool network;  /* ipc:// or tcp:// (anything but inproc://) */
    int send_timeout_ms;
    char *address; /* inbox: as resolved by zmq (wildcards filled in); outbox: as given */
    uint64_t frames_malformed, auth_rejected, send_timeouts;
};

/* Received parts are handed out 8-byte aligned, so a payload of floats, doubles or
 * 64-bit integers can be read in place. zmq does not promise that (tcp and ipc frames
 * are sliced out of a shared receive buffer at any offset), so a misaligned part is
 * copied: into `small_copy` when small, else into a heap block. zmq's own buffers and the
 * sender's are at least 8-aligned, so in practice only small tcp/ipc frames are copied. */
#define PART_ALIGN 8
#define PART_INLINE_MAX 64

typedef struct received_part {
    zmq_msg_t frame;
    void *heap_copy;
    alignas(PART_ALIGN) unsigned char small_copy[PART_INLINE_MAX];
} received_part;

typedef struct received_msg {
    received_part header;
    received_part payload;
} received_msg;

static const bv_option zmq_options[] = {
    BV_OPT_INT_RANGE("io_threads", "1", 0, 64,
                     "zmq I/O threads (0 is enough for a process that only uses inproc://)"),
    BV_OPT_INT_RANGE("hwm", "1000", 1, 1e7,
                     "send and receive high-water mark, in messages; send blocks beyond it"),
    BV_OPT_INT_RANGE("linger_ms", "1000", 0, 1e7,
                     "how long closing waits to deliver queued messages, at most"),
    BV_OPT_INT_RANGE("send_timeout_ms", "5000", -1, 1e7,
                     "ipc/tcp: a send that no connected peer takes within this fails as "
                     "peer unreachable (-1: wait forever); inproc sends always wait"),
    BV_OPT_INT_RANGE("max_message_bytes", "1073741824", -1, 1e15,
                     "ipc/tcp: largest frame accepted; a bigger one is refused before it is "
                     "allocated and its sender disconnected (-1: no limit)"),
    BV_OPT_STR("curve_secret_key", "",
               "ipc/tcp: this process's CURVE secret key (Z85, 40 characters); set, every "
               "link is authenticated and encrypted. One keypair per run, shared by its roles"),
    BV_OPT_STR("curve_server_key", "",
               "CURVE public key (Z85) the inboxes this process connects to must have; "
               "empty: the public key of curve_secret_key (one keypair per run)"),
    BV_OPT_STR("curve_client_keys", "",
               "comma-separated CURVE public keys (Z85), besides this process's own, whose "
               "holders may connect to this process's inboxes"),
    BV_OPT_END,
};

/* ---- CURVE and its ZAP handler ----------------------------------------------------- */

/* A Z85 key of exactly 40 characters into 32 bytes; false if it is not one. */
static bool z85_key(const char *text, size_t len, uint8_t out[CURVE_KEY_BYTES])
{
    char buf[CURVE_KEY_Z85 + 1];
    if (len != CURVE_KEY_Z85)
        return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    return zmq_z85_decode(out, buf) != NULL;
}

static bv_status curve_configure(bv_transport *t, const bv_opts *opts, bv_error *err)
{
    const char *secret = bv_opts_str(opts, "curve_secret_key");
    const char *server = bv_opts_str(opts, "curve_server_key");
    const char *clients = bv_opts_str(opts, "curve_client_keys");
    if (!secret || !secret[0]) {
        if ((server && server[0]) || (clients && clients[0]))
            return bv_error_set(err, BV_ERR_INVALID,
                                "zmq transport: curve_server_key and curve_client_keys need "
                                "curve_secret_key");
        return BV_OK;
    }
    if (!zmq_has("curve"))
        return bv_error_set(err, BV_ERR_INVALID,
                            "zmq transport: curve_secret_key is set but this libzmq was "
                            "built without CURVE");
    uint8_t key[CURVE_KEY_BYTES];
    if (!z85_key(secret, strlen(secret), key))
        return bv_error_set(err, BV_ERR_INVALID,
                            "zmq transport: curve_secret_key is not a Z85 key of 40 "
                            "characters");
    memcpy(t->secret_z85, secret, CURVE_KEY_Z85 + 1);
    if (zmq_curve_public(t->public_z85, t->secret_z85) != 0)
        return bv_error_set(err, BV_ERR_INVALID, "zmq transport: cannot derive the public "
                                                 "key of curve_secret_key: %s",
                            zmq_strerror(errno));
    if (server && server[0]) {
        if (!z85_key(server, strlen(server), key))
            return bv_error_set(err, BV_ERR_INVALID,
                                "zmq transport: curve_server_key is not a Z85 key of 40 "
                                "characters");
        memcpy(t->server_z85, server, CURVE_KEY_Z85 + 1);
    } else {
        memcpy(t->server_z85, t->public_z85, CURVE_KEY_Z85 + 1);
    }
    z85_key(t->public_z85, CURVE_KEY_Z85, t->allowed[0]);
    t->n_allowed = 1;
    for (const char *p = clients ? clients : ""; *p;) {
        while (*p == ',' || *p == ' ')
            p++;
        if (!*p)
            break;
        size_t n = strcspn(p, ", ");
        if (t->n_allowed == MAX_CLIENT_KEYS)
            return bv_error_set(err, BV_ERR_INVALID,
                                "zmq transport: curve_client_keys lists more than %d keys",
                                MAX_CLIENT_KEYS - 1);
        if (!z85_key(p, n, t->allowed[t->n_allowed]))
            return bv_error_set(err, BV_ERR_INVALID,
                                "zmq transport: curve_client_keys: '%.*s' is not a Z85 key "
                                "of 40 characters",
                                (int)(n > 60 ? 60 : n), p);
        t->n_allowed++;
        p += n;
    }
    t->curve = true;
    return BV_OK;
}

static bool client_key_allowed(const bv_transport *t, const zmq_msg_t *key)
{
    if (zmq_msg_size((zmq_msg_t *)key) != CURVE_KEY_BYTES)
        return false;
    for (int i = 0; i < t->n_allowed; i++)
        if (memcmp(zmq_msg_data((zmq_msg_t *)key), t->allowed[i], CURVE_KEY_BYTES) == 0)
            return true;
    return false;
}

static bool zap_send(void *socket, const void *data, size_t len, bool more)
{
    while (zmq_send(socket, data, len, more ? ZMQ_SNDMORE : 0) < 0)
        if (errno != EINTR)
            return false;
    return true;
}

/* One ZAP request (RFC 27: version, request id, domain, address, identity, mechanism,
 * credentials...) answered 200 for a CURVE client whose key is allowed, 400 otherwise.
 * Returns false when the context is shutting down. */
static bool zap_serve_one(bv_transport *t)
{
    enum { VERSION, REQUEST_ID, DOMAIN, ADDRESS, IDENTITY, MECHANISM, KEY, N_FRAMES };
    zmq_msg_t frames[N_FRAMES];
    int n = 0;
    bool more = true, alive = true;
    while (more) {
        zmq_msg_t f;
        zmq_msg_init(&f);
        if (zmq_msg_recv(&f, t->zap_socket, 0) < 0) {
            zmq_msg_close(&f);
            if (errno == EINTR)
                continue;
            alive = false; /* ETERM */
            break;
        }
        more = zmq_msg_more(&f);
        if (n < N_FRAMES)
            frames[n++] = f;
        else
            zmq_msg_close(&f);
    }
    if (alive) { /* a REP socket must answer every request, even a malformed one */
        bool ok = n == N_FRAMES && zmq_msg_size(&frames[MECHANISM]) == 5 &&
                  memcmp(zmq_msg_data(&frames[MECHANISM]), "CURVE", 5) == 0 &&
                  client_key_allowed(t, &frames[KEY]);
        const void *id = n > REQUEST_ID ? zmq_msg_data(&frames[REQUEST_ID]) : "";
        size_t id_len = n > REQUEST_ID ? zmq_msg_size(&frames[REQUEST_ID]) : 0;
        alive = zap_send(t->zap_socket, "1.0", 3, true) &&
                zap_send(t->zap_socket, id, id_len, true) &&
                zap_send(t->zap_socket, ok ? "200" : "400", 3, true) &&
                zap_send(t->zap_socket, ok ? "OK" : "client key not allowed",
                         ok ? 2 : 22, true) &&
                zap_send(t->zap_socket, "", 0, true) && zap_send(t->zap_socket, "", 0, false);
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
    return alive;
}

static void *zap_main(void *arg)
{
    bv_transport *t = arg;
    while (zap_serve_one(t))
        ;
    zmq_close(t->zap_socket);
    return NULL;
}

static bv_status zap_start(bv_transport *t, bv_error *err)
{
    t->zap_socket = zmq_socket(t->ctx, ZMQ_REP);
    int linger = 0;
    if (!t->zap_socket ||
        zmq_setsockopt(t->zap_socket, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_bind(t->zap_socket, "inproc://zeromq.zap.01") != 0) {
        bv_error_set(err, BV_ERR_IO, "cannot start the zmq ZAP handler: %s",
                     zmq_strerror(errno));
        if (t->zap_socket)
            zmq_close(t->zap_socket);
        return BV_ERR_IO;
    }
    int rc = pthread_create(&t->zap_thread, NULL, zap_main, t);
    if (rc != 0) {
        zmq_close(t->zap_socket);
        return bv_error_set(err, BV_ERR_IO, "cannot start the zmq ZAP handler thread: %s",
                            strerror(rc));
    }
    t->zap_running = true;
    return BV_OK;
}

/* Generates a fresh CURVE keypair (Z85, 41 bytes each with the NUL) for a run: the
 * coordinator makes one and hands the secret to every role as curve_secret_key. Reached
 * through the descriptor's get_proc_address("bv_zmq_curve_keypair"). 0 on success. */
static int zmq_curve_keypair_export(char *public_z85, char *secret_z85)
{
    return zmq_curve_keypair(public_z85, secret_z85);
}

static void *zmq_get_proc_address(const char *name)
{
    if (strcmp(name, "bv_zmq_curve_keypair") == 0)
        return (void *)zmq_curve_keypair_export;
    return NULL;
}

/* ---- transport (the context) ------------------------------------------------------- */

static bv_transport *zmq_transport_create(const bv_opts *opts, bv_error *err)
{
    bv_transport *t = calloc(1, sizeof *t);
    if (!t) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory creating the zmq transport");
        return NULL;
    }
    t->hwm = (int)bv_opts_int(opts, "hwm");
    t->linger_ms = (int)bv_opts_int(opts, "linger_ms");
    t->send_timeout_ms = (int)bv_opts_int(opts, "send_timeout_ms");
    t->max_message_bytes = bv_opts_int(opts, "max_message_bytes");
    int io_threads = (int)bv_opts_int(opts, "io_threads");
    if (curve_configure(t, opts, err) != BV_OK) {
        free(t);
        return NULL;
    }

    t->ctx = zmq_ctx_new();
    if (!t->ctx) {
        bv_error_set(err, BV_ERR_IO, "cannot create a zmq context: %s", zmq_strerror(errno));
        free(t);
        return NULL;
    }
    if (zmq_ctx_set(t->ctx, ZMQ_IO_THREADS, io_threads) != 0) {
        bv_error_set(err, BV_ERR_IO, "cannot set zmq io_threads to %d: %s", io_threads,
                     zmq_strerror(errno));
        zmq_ctx_term(t->ctx);
        free(t);
        return NULL;
    }
    if (t->curve && zap_start(t, err) != BV_OK) {
        zmq_ctx_term(t->ctx);
        free(t);
        return NULL;
    }
    return t;
}

static void zmq_transport_destroy(bv_transport *t)
{
    if (!t)
        return;
    if (t->zap_running) {
        /* Wakes the ZAP handler's blocking receive with ETERM; it closes its socket. */
        zmq_ctx_shutdown(t->ctx);
        pthread_join(t->zap_thread, NULL);
    }
    /* Waits for each closed socket's linger (bounded: linger_ms); a signal interrupts the
     * wait, not the job. */
    while (zmq_ctx_term(t->ctx) != 0 && errno == EINTR)
        ;
    free(t);
}

/* ---- endpoints --------------------------------------------------------------------- */

static bool set_int_option(void *socket, int name, int value)
{
    return zmq_setsockopt(socket, name, &value, sizeof value) == 0;
}

static bool set_int64_option(void *socket, int name, int64_t value)
{
    return zmq_setsockopt(socket, name, &value, sizeof value) == 0;
}

/* Over ipc and tcp: bounded sends, the frame-size limit, CURVE. */
static bool set_network_options(const bv_transport *t, bv_endpoint *ep)
{
    if (ep->role == ENDPOINT_OUTBOX) {
        ep->send_timeout_ms = t->send_timeout_ms;
        if (!set_int_option(ep->socket, ZMQ_IMMEDIATE, 1) ||
            !set_int_option(ep->socket, ZMQ_SNDTIMEO, t->send_timeout_ms))
            return false;
    } else if (!set_int64_option(ep->socket, ZMQ_MAXMSGSIZE, t->max_message_bytes)) {
        return false;
    }
    if (!t->curve)
        return true;
    if (ep->role == ENDPOINT_INBOX)
        return set_int_option(ep->socket, ZMQ_CURVE_SERVER, 1) &&
               zmq_setsockopt(ep->socket, ZMQ_CURVE_SECRETKEY, t->secret_z85,
                              CURVE_KEY_Z85) == 0 &&
               zmq_setsockopt(ep->socket, ZMQ_ZAP_DOMAIN, "bivouac", 7) == 0;
    return zmq_setsockopt(ep->socket, ZMQ_CURVE_SERVERKEY, t->server_z85, CURVE_KEY_Z85) ==
               0 &&
           zmq_setsockopt(ep->socket, ZMQ_CURVE_PUBLICKEY, t->public_z85, CURVE_KEY_Z85) ==
               0 &&
           zmq_setsockopt(ep->socket, ZMQ_CURVE_SECRETKEY, t->secret_z85, CURVE_KEY_Z85) == 0;
}

/* An inbox over ipc/tcp reports its failed handshakes to a PAIR socket of its own, read
 * (without blocking) by the thread that uses the inbox, in recv and counters. */
static bool monitor_open(bv_transport *t, bv_endpoint *ep)
{
    char name[64];
    snprintf(name, sizeof name, "inproc://bv-zmq-monitor-%u",
             atomic_fetch_add(&t->next_monitor, 1));
    if (zmq_socket_monitor(ep->socket, name,
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) != 0)
        return false;
    ep->monitor = zmq_socket(t->ctx, ZMQ_PAIR);
    if (!ep->monitor)
        return false;
    if (!set_int_option(ep->monitor, ZMQ_LINGER, 0) || zmq_connect(ep->monitor, name) != 0) {
        zmq_close(ep->monitor);
        ep->monitor = NULL;
        return false;
    }
    return true;
}

/* Counts the handshake failures the monitor has reported so far. */
static void monitor_drain(bv_endpoint *ep)
{
    if (!ep->monitor)
        return;
    for (;;) {
        zmq_msg_t event;
        zmq_msg_init(&event);
        if (zmq_msg_recv(&event, ep->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&event);
            if (errno == EINTR)
                continue;
            return;
        }
        bool first = zmq_msg_size(&event) >= 2;
        uint16_t id = 0;
        if (first)
            memcpy(&id, zmq_msg_data(&event), sizeof id);
        bool more = zmq_msg_more(&event);
        zmq_msg_close(&event);
        while (more) { /* the second frame: the peer's address */
            zmq_msg_init(&event);
            if (zmq_msg_recv(&event, ep->monitor, 0) < 0 && errno != EINTR) {
                zmq_msg_close(&event);
                break;
            }
            more = zmq_msg_more(&event);
            zmq_msg_close(&event);
        }
        if (id & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))
            ep->auth_rejected++;
    }
}

/* A PULL socket bound to address (inbox) or a PUSH socket connected to it (outbox), with
 * the transport's high-water mark and linger (and, over ipc/tcp, set_network_options). */
static bv_endpoint *endpoint_open(bv_transport *t, endpoint_role role, const char *address,
                                  bv_error *err)
{
    const char *verb = role == ENDPOINT_INBOX ? "bind" : "connect to";
    bv_endpoint *ep = calloc(1, sizeof *ep);
    if (!ep) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory opening %s", address);
        return NULL;
    }
    ep->role = role;
    ep->network = strncmp(address, "inproc://", 9) != 0;
    ep->send_timeout_ms = -1;
    ep->socket = zmq_socket(t->ctx, role == ENDPOINT_INBOX ? ZMQ_PULL : ZMQ_PUSH);
    if (!ep->socket) {
        bv_error_set(err, BV_ERR_IO, "cannot %s %s: %s", verb, address, zmq_strerror(errno));
        free(ep);
        return NULL;
    }
    if (!set_int_option(ep->socket, ZMQ_LINGER, t->linger_ms) ||
        !set_int_option(ep->socket, ZMQ_SNDHWM, t->hwm) ||
        !set_int_option(ep->socket, ZMQ_RCVHWM, t->hwm) ||
        (ep->network && !set_network_options(t, ep))) {
        bv_error_set(err, BV_ERR_IO, "cannot %s %s: setting socket options: %s", verb,
                     address, zmq_strerror(errno));
        goto fail;
    }
    if (ep->network && role == ENDPOINT_INBOX && !monitor_open(t, ep)) {
        bv_error_set(err, BV_ERR_IO, "cannot %s %s: monitoring the socket: %s", verb,
                     address, zmq_strerror(errno));
        goto fail;
    }

    int rc = role == ENDPOINT_INBOX ? zmq_bind(ep->socket, address)
                                    : zmq_connect(ep->socket, address);
    if (rc != 0) {
        bv_error_set(err, BV_ERR_IO, "cannot %s %s: %s", verb, address, zmq_strerror(errno));
        goto fail;
    }

    /* The inbox remembers where it really listens (tcp://127.0.0.1:* -> a port). */
    char resolved[1024];
    size_t resolved_len = sizeof resolved;
    const char *name = address;
    if (role == ENDPOINT_INBOX &&
        zmq_getsockopt(ep->socket, ZMQ_LAST_ENDPOINT, resolved, &resolved_len) == 0 &&
        resolved_len > 1 && resolved_len <= sizeof resolved)
        name = resolved;
    ep->address = strdup(name);
    if (!ep->address) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory opening %s", address);
        goto fail;
    }
    return ep;

fail:
    if (ep->monitor)
        zmq_close(ep->monitor);
    set_int_option(ep->socket, ZMQ_LINGER, 0);
    zmq_close(ep->socket);
    free(ep);
    return NULL;
}

static bv_endpoint *zmq_transport_bind(bv_transport *t, const char *address, bv_error *err)
{
    return endpoint_open(t, ENDPOINT_INBOX, address, err);
}

static bv_endpoint *zmq_transport_connect(bv_transport *t, const char *address,
                                          bv_error *err)
{
    return endpoint_open(t, ENDPOINT_OUTBOX, address, err);
}

static void zmq_transport_close(bv_endpoint *ep)
{
    if (!ep)
        return;
    if (ep->monitor) {
        zmq_socket_monitor(ep->socket, NULL, 0); /* stop the monitor before its reader */
        zmq_close(ep->monitor);
    }
    /* An ipc:// inbox removes its socket file. libzmq 4.3.4 leaves the file behind on
     * close and on unbind alike (test_transport_zmq checks), so after unbinding (no new
     * connections) the inbox unlinks the path it bound itself. */
    if (ep->role == ENDPOINT_INBOX && strncmp(ep->address, "ipc://", 6) == 0) {
        zmq_unbind(ep->socket, ep->address);
        if (ep->address[6] != '@') /* "ipc://@name": Linux abstract namespace, no file */
            unlink(ep->address + 6);
    }
    /* Queued messages are delivered within linger_ms (never forever: close is bounded). */
    zmq_close(ep->socket);
    free(ep->address);
    free(ep);
}

static const char *zmq_transport_bound_address(bv_endpoint *ep)
{
    return ep->address;
}

static void zmq_transport_counters(bv_endpoint *ep, bv_transport_counters *out)
{
    monitor_drain(ep);
    bv_transport_counters all = {
        .size = sizeof all,
        .frames_malformed = ep->frames_malformed,
        .auth_rejected = ep->auth_rejected,
        .send_timeouts = ep->send_timeouts,
    };
    size_t size = out->size < sizeof all ? out->size : sizeof all;
    all.size = size;
    memcpy(out, &all, size);
}

/* ---- send -------------------------------------------------------------------------- */

static void free_part_buffer(void *data, void *hint)
{
    free(data);
}

/* Copies len bytes into a new frame. Large frames get a malloc'd buffer (aligned, so an
 * inproc receiver can use it in place) that zmq frees when done, maybe on its I/O thread. */
static bool frame_from_copy(zmq_msg_t *frame, const void *data, size_t len)
{
    if (len <= PART_INLINE_MAX) {
        if (zmq_msg_init_size(frame, len) != 0)
            return false;
        if (len > 0)
            memcpy(zmq_msg_data(frame), data, len);
        return true;
    }
    void *copy = malloc(len);
    if (!copy)
        return false;
    memcpy(copy, data, len);
    if (zmq_msg_init_data(frame, copy, len, free_part_buffer, NULL) != 0) {
        free(copy);
        return false;
    }
    return true;
}

/* libzmq is not built with ThreadSanitizer, so the hand-off of a frame's buffer through
 * its lock-free pipes is invisible to it; over inproc the receiver reads the sender's
 * buffer in place. Under TSan, the send releases and the receive acquires the buffer's
 * address, which is the happens-before zmq provides. Elsewhere these are nothing. */
static void handoff_release(zmq_msg_t *frame)
{
#if defined(__SANITIZE_THREAD__)
    __tsan_release(zmq_msg_data(frame));
#else
    (void)frame;
#endif
}

static void handoff_acquire(zmq_msg_t *frame)
{
#if defined(__SANITIZE_THREAD__)
    __tsan_acquire(zmq_msg_data(frame));
#else
    (void)frame;
#endif
}

static bool frame_send(zmq_msg_t *frame, void *socket, int flags)
{
    handoff_release(frame);
    while (zmq_msg_send(frame, socket, flags) < 0)
        if (errno != EINTR)
            return false;
    return true;
}

static bv_status send_frames(bv_endpoint *ep, zmq_msg_t *head, zmq_msg_t *body,
                             bv_error *err);

/* The payload's buffer becomes the frame's: no copy (inproc receivers read it in place). */
static bv_status zmq_transport_send_owned(bv_endpoint *ep, const void *header,
                                          size_t header_len, void *payload, size_t payload_len,
                                          bv_error *err)
{
    if (ep->role != ENDPOINT_OUTBOX) {
        free(payload);
        return bv_error_set(err, BV_ERR_INTERNAL,
                            "cannot send on %s: it is an inbox (bound), not an outbox",
                            ep->address);
    }
    zmq_msg_t head, body;
    if (!frame_from_copy(&head, header, header_len)) {
        free(payload);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory sending %zu bytes to %s",
                            header_len, ep->address);
    }
    bool ok;
    if (payload_len <= PART_INLINE_MAX) {
        ok = frame_from_copy(&body, payload, payload_len);
        free(payload);
    } else {
        ok = zmq_msg_init_data(&body, payload, payload_len, free_part_buffer, NULL) == 0;
        if (!ok)
            free(payload);
    }
    if (!ok) {
        zmq_msg_close(&head);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory sending %zu bytes to %s",
                            payload_len, ep->address);
    }
    return send_frames(ep, &head, &body, err);
}

static bv_status zmq_transport_send(bv_endpoint *ep, const void *header, size_t header_len,
                                    const void *payload, size_t payload_len, bv_error *err)
{
    if (ep->role != ENDPOINT_OUTBOX)
        return bv_error_set(err, BV_ERR_INTERNAL,
                            "cannot send on %s: it is an inbox (bound), not an outbox",
                            ep->address);

    /* Both frames are built before either is sent, so running out of memory never leaves
     * half a message on the socket. */
    zmq_msg_t head, body;
    if (!frame_from_copy(&head, header, header_len))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory sending %zu bytes to %s",
                            header_len, ep->address);
    if (!frame_from_copy(&body, payload, payload_len)) {
        zmq_msg_close(&head);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory sending %zu bytes to %s",
                            payload_len, ep->address);
    }
    return send_frames(ep, &head, &body, err);
}

static bv_status send_frames(bv_endpoint *ep, zmq_msg_t *head, zmq_msg_t *body, bv_error *err)
{
    if (!frame_send(head, ep->socket, ZMQ_SNDMORE)) {
        int e = errno;
        zmq_msg_close(head);
        zmq_msg_close(body);
        if (e == EAGAIN) { /* ZMQ_SNDTIMEO ran out: nothing of the message was queued */
            ep->send_timeouts++;
            return bv_error_set(err, BV_ERR_IO,
                                "cannot send to %s: peer unreachable (no connected peer took "
                                "the message within %d ms: it is down, not listening, "
                                "refused our keys, or not reading)",
                                ep->address, ep->send_timeout_ms);
        }
        return bv_error_set(err, BV_ERR_IO, "cannot send to %s: %s", ep->address,
                            zmq_strerror(e));
    }
    /* Once the header frame is queued zmq delivers the payload with it or not at all;
     * the only failure left here is the context shutting down. */
    if (!frame_send(body, ep->socket, 0)) {
        int e = errno;
        zmq_msg_close(body);
        return bv_error_set(err, BV_ERR_IO, "cannot send to %s: %s", ep->address,
                            zmq_strerror(e));
    }
    return BV_OK;
}

/* ---- receive ----------------------------------------------------------------------- */

static int64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until the inbox has a message: BV_OK, a timeout, or an error. Signals (EINTR) and
 * early wake-ups go back to waiting for what is left of the timeout. */
static bv_status wait_readable(bv_endpoint *ep, int timeout_ms, int64_t deadline,
                               bv_error *err)
{
    for (;;) {
        long wait_ms = -1;
        if (timeout_ms >= 0) {
            int64_t left = deadline - monotonic_ms();
            wait_ms = left > 0 ? (long)left : 0;
        }
        zmq_pollitem_t item = {.socket = ep->socket, .events = ZMQ_POLLIN};
        int n = zmq_poll(&item, 1, wait_ms);
        if (n > 0 && (item.revents & ZMQ_POLLIN))
            return BV_OK;
        if (n < 0 && errno != EINTR)
            return bv_error_set(err, BV_ERR_IO, "cannot receive on %s: %s", ep->address,
                                zmq_strerror(errno));
        if (timeout_ms >= 0 && monotonic_ms() >= deadline)
            return bv_error_set(err, BV_ERR_IO, "timeout: no message on %s within %d ms",
                                ep->address, timeout_ms);
    }
}

/* Receives one frame; the message is already complete (zmq delivers all frames of a
 * message at once), so this only waits through signals. */
static bool frame_recv(zmq_msg_t *frame, void *socket, int flags)
{
    while (zmq_msg_recv(frame, socket, flags) < 0)
        if (errno != EINTR)
            return false;
    handoff_acquire(frame);
    return true;
}

/* Where the caller may read the part: zmq's buffer when aligned, else a copy. */
static bool part_expose(received_part *part, void **data, size_t *len)
{
    *len = zmq_msg_size(&part->frame);
    void *p = zmq_msg_data(&part->frame);
    if (*len == 0 || (uintptr_t)p % PART_ALIGN == 0) {
        *data = p;
        return true;
    }
    void *copy = part->small_copy;
    if (*len > PART_INLINE_MAX) {
        copy = part->heap_copy = malloc(*len);
        if (!copy)
            return false;
    }
    memcpy(copy, p, *len);
    *data = copy;
    return true;
}

static void received_msg_free(received_msg *r)
{
    zmq_msg_close(&r->header.frame);
    zmq_msg_close(&r->payload.frame);
    free(r->header.heap_copy);
    free(r->payload.heap_copy);
    free(r);
}

/* Reads and drops the rest of a message with too many frames; returns the frame count. */
static int discard_rest(void *socket, int frames_so_far)
{
    int frames = frames_so_far;
    int more = 1;
    while (more) {
        zmq_msg_t extra;
        zmq_msg_init(&extra);
        if (!frame_recv(&extra, socket, 0)) {
            zmq_msg_close(&extra);
            break;
        }
        frames++;
        more = zmq_msg_more(&extra);
        zmq_msg_close(&extra);
    }
    return frames;
}

static bv_status zmq_transport_recv(bv_endpoint *ep, bv_msg *msg, int timeout_ms,
                                    bv_error *err)
{
    if (ep->role != ENDPOINT_INBOX)
        return bv_error_set(err, BV_ERR_INTERNAL,
                            "cannot receive on %s: it is an outbox (connected), not an inbox",
                            ep->address);
    int64_t deadline = timeout_ms >= 0 ? monotonic_ms() + timeout_ms : 0;
    monitor_drain(ep);

    /* Allocated before anything is taken off the socket, so no message is lost to it. */
    received_msg *r = calloc(1, sizeof *r);
    if (!r)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory receiving on %s", ep->address);
    zmq_msg_init(&r->header.frame);
    zmq_msg_init(&r->payload.frame);

    for (;;) {
        bv_status st = wait_readable(ep, timeout_ms, deadline, err);
        if (st != BV_OK) {
            received_msg_free(r);
            return st;
        }
        if (zmq_msg_recv(&r->header.frame, ep->socket, ZMQ_DONTWAIT) >= 0) {
            handoff_acquire(&r->header.frame);
            break;
        }
        if (errno != EAGAIN && errno != EINTR) { /* EAGAIN: a spurious wake-up; wait again */
            int e = errno;
            received_msg_free(r);
            return bv_error_set(err, BV_ERR_IO, "cannot receive on %s: %s", ep->address,
                                zmq_strerror(e));
        }
    }

    /* A peer that is not a bivouac transport may send any number of frames. */
    if (!zmq_msg_more(&r->header.frame)) {
        ep->frames_malformed++;
        received_msg_free(r);
        return bv_error_set(err, BV_ERR_CORRUPT,
                            "message on %s has 1 frame, expected 2 (header, payload)",
                            ep->address);
    }
    if (!frame_recv(&r->payload.frame, ep->socket, 0)) {
        int e = errno;
        received_msg_free(r);
        return bv_error_set(err, BV_ERR_IO, "cannot receive on %s: %s", ep->address,
                            zmq_strerror(e));
    }
    if (zmq_msg_more(&r->payload.frame)) {
        int frames = discard_rest(ep->socket, 2);
        ep->frames_malformed++;
        received_msg_free(r);
        return bv_error_set(err, BV_ERR_CORRUPT,
                            "message on %s has %d frames, expected 2 (header, payload)",
                            ep->address, frames);
    }

    bv_msg out = {.impl = r};
    if (!part_expose(&r->header, &out.header, &out.header_len) ||
        !part_expose(&r->payload, &out.payload, &out.payload_len)) {
        size_t total = zmq_msg_size(&r->header.frame) + zmq_msg_size(&r->payload.frame);
        received_msg_free(r);
        return bv_error_set(err, BV_ERR_NOMEM,
                            "out of memory aligning a %zu-byte message from %s", total,
                            ep->address);
    }
    *msg = out;
    return BV_OK;
}

static void zmq_transport_release(bv_msg *msg)
{
    if (!msg || !msg->impl)
        return;
    received_msg_free(msg->impl);
    memset(msg, 0, sizeof *msg);
}

/* ---- descriptor -------------------------------------------------------------------- */

static const bv_transport_ops zmq_ops = {
    .create = zmq_transport_create,
    .destroy = zmq_transport_destroy,
    .bind = zmq_transport_bind,
    .connect = zmq_transport_connect,
    .send = zmq_transport_send,
    .recv = zmq_transport_recv,
    .release = zmq_transport_release,
    .close = zmq_transport_close,
    .bound_address = zmq_transport_bound_address,
    .send_owned = zmq_transport_send_owned,
    .counters = zmq_transport_counters,
};

static const bv_plugin zmq_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_TRANSPORT, "zmq", "0.2.0",
                     "ZeroMQ PUSH/PULL messaging over inproc://, ipc:// and tcp://"),
    .options = zmq_options,
    .ops = &zmq_ops,
    .ops_size = sizeof zmq_ops,
    .get_proc_address = zmq_get_proc_address,
};

BV_PLUGIN_EXPORT const bv_plugin *bv_transport_zmq_plugin(void);
BV_PLUGIN_EXPORT const bv_plugin *bv_transport_zmq_plugin(void)
{
    return &zmq_plugin;
}
