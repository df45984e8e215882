/* The ZeroMQ transport: an inbox is a PULL socket that any number of PUSH outboxes fan
 * into; a message is two zmq frames, header then payload. Works over inproc://, ipc://
 * and tcp:// (whatever libzmq speaks).
 *
 * Threads: a bv_transport (the zmq context) may be shared by every thread; an endpoint
 * may be used by one thread at a time (zmq sockets are not thread-safe), though it may
 * move between threads with a happens-before hand-off. inproc:// endpoints only reach
 * each other through the same bv_transport. */
#include <errno.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zmq.h>

#include "bivouac/plugin.h"
#include "bivouac/transport.h"

struct bv_transport {
    void *ctx;
    int hwm;
    int linger_ms;
};

typedef enum endpoint_role { ENDPOINT_INBOX, ENDPOINT_OUTBOX } endpoint_role;

struct bv_endpoint {
    void *socket;
    endpoint_role role;
    char *address; /* inbox: as resolved by zmq (wildcards filled in); outbox: as given */
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
    BV_OPT_INT_RANGE("linger_ms", "1000", -1, 1e7,
                     "how long closing waits to deliver queued messages (-1: forever)"),
    BV_OPT_END,
};

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
    int io_threads = (int)bv_opts_int(opts, "io_threads");

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
    return t;
}

static void zmq_transport_destroy(bv_transport *t)
{
    if (!t)
        return;
    /* Waits for each closed socket's linger; a signal interrupts the wait, not the job. */
    while (zmq_ctx_term(t->ctx) != 0 && errno == EINTR)
        ;
    free(t);
}

/* ---- endpoints --------------------------------------------------------------------- */

static bool set_int_option(void *socket, int name, int value)
{
    return zmq_setsockopt(socket, name, &value, sizeof value) == 0;
}

/* A PULL socket bound to address (inbox) or a PUSH socket connected to it (outbox), with
 * the transport's high-water mark and linger. */
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
    ep->socket = zmq_socket(t->ctx, role == ENDPOINT_INBOX ? ZMQ_PULL : ZMQ_PUSH);
    if (!ep->socket) {
        bv_error_set(err, BV_ERR_IO, "cannot %s %s: %s", verb, address, zmq_strerror(errno));
        free(ep);
        return NULL;
    }
    if (!set_int_option(ep->socket, ZMQ_LINGER, t->linger_ms) ||
        !set_int_option(ep->socket, ZMQ_SNDHWM, t->hwm) ||
        !set_int_option(ep->socket, ZMQ_RCVHWM, t->hwm)) {
        bv_error_set(err, BV_ERR_IO, "cannot %s %s: setting socket options: %s", verb,
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
    zmq_close(ep->socket); /* queued messages are delivered within linger_ms */
    free(ep->address);
    free(ep);
}

static const char *zmq_transport_bound_address(bv_endpoint *ep)
{
    return ep->address;
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

static bool frame_send(zmq_msg_t *frame, void *socket, int flags)
{
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
        if (zmq_msg_recv(&r->header.frame, ep->socket, ZMQ_DONTWAIT) >= 0)
            break;
        if (errno != EAGAIN && errno != EINTR) { /* EAGAIN: a spurious wake-up; wait again */
            int e = errno;
            received_msg_free(r);
            return bv_error_set(err, BV_ERR_IO, "cannot receive on %s: %s", ep->address,
                                zmq_strerror(e));
        }
    }

    /* A peer that is not a bivouac transport may send any number of frames. */
    if (!zmq_msg_more(&r->header.frame)) {
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
};

static const bv_plugin zmq_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_TRANSPORT, "zmq", "0.1.0",
                     "ZeroMQ PUSH/PULL messaging over inproc://, ipc:// and tcp://"),
    .options = zmq_options,
    .ops = &zmq_ops,
    .ops_size = sizeof zmq_ops,
};

BV_PLUGIN_EXPORT const bv_plugin *bv_transport_zmq_plugin(void);
BV_PLUGIN_EXPORT const bv_plugin *bv_transport_zmq_plugin(void)
{
    return &zmq_plugin;
}
