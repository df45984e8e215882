/* An example transport plugin built out of tree against the installed SDK: in-process
 * message passing with one queue (a mutex and two condition variables) per inproc://
 * address. A starting point to copy (docs/plugins.md).
 *
 * It implements every required slot of bv_transport_ops (transport.h): create, destroy,
 * bind, connect, send, recv (with a timeout), release and close. The optional ones,
 * bound_address and send_owned, stay NULL and the core does without them. The engine's
 * roles (coordinator, graph server, parameter server, tensor workers) are threads of one
 * process that talk only through the transport, so a training run with this plugin gives
 * the same weights as one with the default zmq transport.
 *
 * Build: cmake or make in this directory (CMakeLists.txt, Makefile); then
 *   BIVOUAC_PLUGIN_PATH=<dir with transport_queue.so> bivouac run gcn-quickstart.yaml \
 *       -s 'transport={plugin: queue}' */
/* POSIX for pthreads, clock_gettime and strdup: the Makefile compiles with -std=c17. */
#define _POSIX_C_SOURCE 200809L

#include <bivouac.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const bv_option queue_options[] = {
    BV_OPT_INT_RANGE("capacity", "1000", 1, 1e7,
                     "messages an inbox holds before send blocks (back-pressure)"),
    BV_OPT_END,
};

/* One message, header and payload copied into buffers of their own (malloc's alignment
 * lets the receiver read floats and 64-bit integers in place). */
typedef struct message {
    struct message *next;
    void *header;
    size_t header_len;
    void *payload;
    size_t payload_len;
} message;

/* The queue behind one address. It is created by the first bind or connect that names the
 * address, so messages sent before the inbox is bound wait here (transport.h asks for
 * that), and it lives until the transport is destroyed. */
typedef struct mailbox {
    struct mailbox *next; /* the transport's list */
    char *address;
    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    bool bound; /* an inbox is open on it */
    message *head, *tail;
    size_t count;
    size_t capacity; /* the transport's option, copied here so send needs only the box */
} mailbox;

struct bv_transport {
    size_t capacity;
    pthread_mutex_t lock; /* guards the list of mailboxes */
    mailbox *mailboxes;
};

/* An endpoint is a mailbox seen from one side: the inbox receives, outboxes send. */
struct bv_endpoint {
    mailbox *box;
    bool inbox;
};

static const char inproc_prefix[] = "inproc://";

/* ---- messages ---------------------------------------------------------------------- */

static void message_free(message *m)
{
    if (!m)
        return;
    free(m->header);
    free(m->payload);
    free(m);
}

/* A copy of header and payload; NULL when out of memory. malloc(0) may return NULL, so
 * every buffer is at least one byte. */
static message *message_new(const void *header, size_t header_len, const void *payload,
                            size_t payload_len)
{
    message *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->header = malloc(header_len ? header_len : 1);
    m->payload = malloc(payload_len ? payload_len : 1);
    if (!m->header || !m->payload) {
        message_free(m);
        return NULL;
    }
    if (header_len)
        memcpy(m->header, header, header_len);
    if (payload_len)
        memcpy(m->payload, payload, payload_len);
    m->header_len = header_len;
    m->payload_len = payload_len;
    return m;
}

/* ---- mailboxes --------------------------------------------------------------------- */

static void mailbox_drop_messages(mailbox *b)
{
    while (b->head) {
        message *m = b->head;
        b->head = m->next;
        message_free(m);
    }
    b->tail = NULL;
    b->count = 0;
}

static void mailbox_free(mailbox *b)
{
    mailbox_drop_messages(b);
    pthread_cond_destroy(&b->not_full);
    pthread_cond_destroy(&b->not_empty);
    pthread_mutex_destroy(&b->lock);
    free(b->address);
    free(b);
}

static mailbox *mailbox_new(const char *address, size_t capacity)
{
    mailbox *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->address = strdup(address);
    if (!b->address) {
        free(b);
        return NULL;
    }
    b->capacity = capacity;
    /* recv's timeout is measured on the monotonic clock: a change of the wall clock
     * neither cuts it short nor stretches it. */
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->not_empty, &attr);
    pthread_cond_init(&b->not_full, NULL);
    pthread_condattr_destroy(&attr);
    return b;
}

/* The mailbox of address, created if it is the first time the address is named. */
static mailbox *mailbox_get(bv_transport *t, const char *address, bv_error *err)
{
    if (strncmp(address, inproc_prefix, sizeof inproc_prefix - 1) != 0) {
        bv_error_set(err, BV_ERR_INVALID,
                     "the queue transport carries inproc:// addresses only (one process), "
                     "not '%s'; use the zmq transport for ipc:// or tcp://", address);
        return NULL;
    }
    pthread_mutex_lock(&t->lock);
    mailbox *b = t->mailboxes;
    while (b && strcmp(b->address, address) != 0)
        b = b->next;
    if (!b && (b = mailbox_new(address, t->capacity)) != NULL) {
        b->next = t->mailboxes;
        t->mailboxes = b;
    }
    pthread_mutex_unlock(&t->lock);
    if (!b)
        bv_error_set(err, BV_ERR_NOMEM, "out of memory opening %s", address);
    return b;
}

/* ---- transport --------------------------------------------------------------------- */

static bv_transport *queue_create(const bv_opts *opts, bv_error *err)
{
    bv_transport *t = calloc(1, sizeof *t);
    if (!t) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory creating the queue transport");
        return NULL;
    }
    t->capacity = (size_t)bv_opts_int(opts, "capacity");
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

/* Every endpoint is closed by now (transport.h), so nobody waits on a mailbox. */
static void queue_destroy(bv_transport *t)
{
    if (!t)
        return;
    while (t->mailboxes) {
        mailbox *b = t->mailboxes;
        t->mailboxes = b->next;
        mailbox_free(b);
    }
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* ---- endpoints --------------------------------------------------------------------- */

static bv_endpoint *endpoint_new(mailbox *b, bool inbox, bv_error *err)
{
    bv_endpoint *ep = calloc(1, sizeof *ep);
    if (!ep) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory opening %s", b->address);
        return NULL;
    }
    ep->box = b;
    ep->inbox = inbox;
    return ep;
}

/* One inbox per address at a time; any number of outboxes fan into it. */
static bv_endpoint *queue_bind(bv_transport *t, const char *address, bv_error *err)
{
    mailbox *b = mailbox_get(t, address, err);
    if (!b)
        return NULL;
    pthread_mutex_lock(&b->lock);
    bool taken = b->bound;
    b->bound = true;
    pthread_mutex_unlock(&b->lock);
    if (taken) {
        bv_error_set(err, BV_ERR_IO, "cannot bind %s: address already in use", address);
        return NULL;
    }
    bv_endpoint *ep = endpoint_new(b, true, err);
    if (!ep) {
        pthread_mutex_lock(&b->lock);
        b->bound = false;
        pthread_mutex_unlock(&b->lock);
    }
    return ep;
}

static bv_endpoint *queue_connect(bv_transport *t, const char *address, bv_error *err)
{
    mailbox *b = mailbox_get(t, address, err);
    return b ? endpoint_new(b, false, err) : NULL;
}

/* Closing the inbox discards what is still queued (nobody is left to read it) and wakes
 * senders blocked on a full queue; the address may be bound again. Closing an outbox
 * leaves its sent messages queued. */
static void queue_close(bv_endpoint *ep)
{
    if (!ep)
        return;
    if (ep->inbox) {
        mailbox *b = ep->box;
        pthread_mutex_lock(&b->lock);
        b->bound = false;
        mailbox_drop_messages(b);
        pthread_cond_broadcast(&b->not_full);
        pthread_mutex_unlock(&b->lock);
    }
    free(ep);
}

/* ---- send and receive -------------------------------------------------------------- */

static bv_status queue_send(bv_endpoint *ep, const void *header, size_t header_len,
                            const void *payload, size_t payload_len, bv_error *err)
{
    mailbox *b = ep->box;
    if (ep->inbox)
        return bv_error_set(err, BV_ERR_INTERNAL,
                            "cannot send on %s: it is an inbox (bound), not an outbox",
                            b->address);
    /* Copy outside the lock: the receiver is not held up by a large memcpy. */
    message *m = message_new(header, header_len, payload, payload_len);
    if (!m)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory sending %zu bytes to %s",
                            header_len + payload_len, b->address);
    pthread_mutex_lock(&b->lock);
    /* transport.h: send blocks while the queue is full, so a slow receiver holds its
     * senders back instead of letting the queue grow without bound. */
    while (b->count >= b->capacity)
        pthread_cond_wait(&b->not_full, &b->lock);
    if (b->tail)
        b->tail->next = m;
    else
        b->head = m;
    b->tail = m;
    b->count++;
    pthread_cond_signal(&b->not_empty);
    pthread_mutex_unlock(&b->lock);
    return BV_OK;
}

/* The absolute CLOCK_MONOTONIC time timeout_ms from now, for pthread_cond_timedwait. */
static struct timespec deadline_after(int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Hands out the oldest message; its buffers are the caller's until release. Messages from
 * one outbox arrive in the order they were sent. */
static bv_status queue_recv(bv_endpoint *ep, bv_msg *msg, int timeout_ms, bv_error *err)
{
    mailbox *b = ep->box;
    if (!ep->inbox)
        return bv_error_set(err, BV_ERR_INTERNAL,
                            "cannot receive on %s: it is an outbox (connected), not an inbox",
                            b->address);
    struct timespec deadline = deadline_after(timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&b->lock);
    while (!b->head) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&b->not_empty, &b->lock);
        } else if (pthread_cond_timedwait(&b->not_empty, &b->lock, &deadline) == ETIMEDOUT &&
                   !b->head) {
            pthread_mutex_unlock(&b->lock);
            /* The wording matters: callers recognise a timeout by "timeout" (transport.h). */
            return bv_error_set(err, BV_ERR_IO, "timeout: no message on %s within %d ms",
                                b->address, timeout_ms);
        }
    }
    message *m = b->head;
    b->head = m->next;
    if (!b->head)
        b->tail = NULL;
    b->count--;
    pthread_cond_signal(&b->not_full);
    pthread_mutex_unlock(&b->lock);

    *msg = (bv_msg){.header = m->header, .header_len = m->header_len,
                    .payload = m->payload, .payload_len = m->payload_len, .impl = m};
    return BV_OK;
}

static void queue_release(bv_msg *msg)
{
    message_free(msg->impl);
    *msg = (bv_msg){0};
}

/* Designated initialisers: slots added by later ABI minors (appended to the table) start
 * out NULL, which is what "optional" means to the core. */
static const bv_transport_ops queue_ops = {
    .create = queue_create,
    .destroy = queue_destroy,
    .bind = queue_bind,
    .connect = queue_connect,
    .send = queue_send,
    .recv = queue_recv,
    .release = queue_release,
    .close = queue_close,
    /* .bound_address, .send_owned: optional, NULL (inproc addresses have no wildcards,
     * and send copying the payload is what send_owned would save). */
};

static const bv_plugin queue_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_TRANSPORT, "queue", "0.1.0",
                     "in-process queues, one per inproc:// address (example plugin)"),
    .options = queue_options,
    .ops = &queue_ops,
    .ops_size = sizeof queue_ops,
};

/* The one exported symbol: bv_transport_queue_plugin, in transport_queue.so. */
BV_PLUGIN_ENTRY(transport, queue, queue_plugin)
