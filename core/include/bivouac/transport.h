/* The transport plugin kind: moves two-part messages (a header and a payload) between
 * roles. It knows nothing of their meaning; the core's wire protocol (wire.h) builds and
 * validates frames. Addresses are URLs: inproc://name, ipc:///path, tcp://host:port. */
#ifndef BIVOUAC_TRANSPORT_H
#define BIVOUAC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bv_transport bv_transport; /* one per process (e.g. the zmq context) */
typedef struct bv_endpoint bv_endpoint;   /* an inbox (bound) or an outbox (connected) */

/* A received message. Buffers stay valid until release. */
typedef struct bv_msg {
    void *header;
    size_t header_len;
    void *payload;
    size_t payload_len;
    void *impl; /* the transport's own bookkeeping */
} bv_msg;

#define BV_TIMEOUT_FOREVER (-1)

/* What an endpoint refused or could not do, since it was opened (ABI 1.6, the `counters`
 * slot). The caller sets `size` to sizeof(bv_transport_counters) as it was compiled; the
 * transport fills the fields that size covers and zeroes those it does not count. Fields
 * are only ever appended. */
typedef struct bv_transport_counters {
    size_t size;
    uint64_t frames_malformed; /* inbox: messages dropped whole by the transport (not two
                                  frames, or cut off) before the core saw them */
    uint64_t auth_rejected;    /* inbox: connections refused in the handshake (no keys,
                                  wrong keys, a client key not allowed, a foreign protocol) */
    uint64_t send_timeouts;    /* outbox: sends no peer accepted within the send bound */
} bv_transport_counters;

typedef struct bv_transport_ops {
    bv_transport *(*create)(const bv_opts *opts, bv_error *err);
    void (*destroy)(bv_transport *t); /* all endpoints must be closed first */

    /* An inbox that many senders may connect to (fan-in). */
    bv_endpoint *(*bind)(bv_transport *t, const char *address, bv_error *err);
    /* An outbox to one bound inbox. Sends to an inproc inbox bound later are queued. */
    bv_endpoint *(*connect)(bv_transport *t, const char *address, bv_error *err);

    /* Sends header + payload as one message (copies both). Blocks while the queue is full,
     * up to the transport's send bound if it has one (zmq: send_timeout_ms for ipc and
     * tcp), then fails with BV_ERR_IO saying the peer is unreachable. */
    bv_status (*send)(bv_endpoint *ep, const void *header, size_t header_len,
                      const void *payload, size_t payload_len, bv_error *err);
    /* Receives one message. timeout_ms < 0 waits forever. A timeout returns
     * BV_ERR_IO with "timeout" in the message and msg untouched. */
    bv_status (*recv)(bv_endpoint *ep, bv_msg *msg, int timeout_ms, bv_error *err);
    void (*release)(bv_msg *msg);

    void (*close)(bv_endpoint *ep);

    /* ---- appended slots: the core checks ops_size before using one ---- */

    /* Optional (may be NULL). The address an inbox actually listens on, with wildcards
     * resolved (bind "tcp://127.0.0.1:*" -> "tcp://127.0.0.1:41237"); for an outbox, the
     * address it connects to. Valid until close. */
    const char *(*bound_address)(bv_endpoint *ep);

    /* ABI 1.3, optional: like send, but the payload is a malloc'd buffer the transport
     * takes over (it free()s it when done, also on failure), so large messages are not
     * copied again on the way out. */
    bv_status (*send_owned)(bv_endpoint *ep, const void *header, size_t header_len,
                            void *payload, size_t payload_len, bv_error *err);

    /* ABI 1.6, optional (the core's default reports zeros): the endpoint's counters, see
     * bv_transport_counters. Called by the thread that uses the endpoint. */
    void (*counters)(bv_endpoint *ep, bv_transport_counters *out);
} bv_transport_ops;

#ifdef __cplusplus
}
#endif
#endif
