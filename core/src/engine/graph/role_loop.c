/* The roles' common main loop (role_loop.h), so that a change to how roles live (processes,
 * deadlines, peer failures) is made once, not in each role. */
#include "role_loop.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "stopper.h"

/* Links over tcp (docs/cluster.md, "Hosts"): the role bound its inboxes on a port the
 * system picked, tells the coordinator where (HELLO) and waits for the whole address book
 * (BOOK), as long as the run's start may take. */
static bv_status rendezvous(const bv_role *r, bv_error *err)
{
    bv_graph_engine *e = r->e;
    const bv_transport_ops *t = e->cfg.transport_ops;
    const char *a1 = t->bound_address ? t->bound_address(*r->inbox) : NULL;
    const char *a2 = r->inbox2 && t->bound_address ? t->bound_address(*r->inbox2) : NULL;
    if (!a1 || (r->inbox2 && !a2))
        return bv_error_set(err, BV_ERR_PLUGIN, "%s: the transport cannot tell the address "
                            "it bound, which links over tcp need", r->name);
    char hello[2 * BV_ADDR_LEN + 64];
    int n = snprintf(hello, sizeof hello, "%s %d %s\n", r->book_key, r->index, a1);
    if (a2)
        snprintf(hello + n, sizeof hello - (size_t)n, "%sw %d %s\n", r->book_key, r->index, a2);
    bv_status st = bv_role_send(t, *r->to_coord, BV_MSG_HELLO, r->id, NULL, hello,
                                strlen(hello), NULL, 0, NULL, 0, err);
    double deadline = bv_engine_now() + e->cfg.start_timeout;
    while (st == BV_OK) {
        double left = deadline - bv_engine_now();
        if (left <= 0)
            return bv_error_set(err, BV_ERR_IO, "%s: no address book from the coordinator "
                                "within %.1f s (engine.start_timeout)", r->name,
                                e->cfg.start_timeout);
        bv_role_msg m;
        if (bv_role_recv_valid(t, *r->inbox, &m, (int)(left * 1000) + 1, &e->frames_dropped,
                               err) != BV_OK)
            continue;
        uint16_t type = m.wire.type;
        if (type == BV_MSG_BOOK)
            st = bv_engine_parse_book(e, (const char *)m.a, (size_t)m.hdr.na, err);
        bv_role_release(t, &m);
        if (type == BV_MSG_BOOK)
            return st;
        if (type == BV_MSG_SHUTDOWN)
            return bv_error_set(err, BV_ERR_IO, "%s: stopped before the run started",
                                r->name);
    }
    return st;
}

/* What every role has: its inboxes, outboxes to the tensor workers (if it sends them
 * anything), its compute instance. */
static bv_status role_open(const bv_role *r, bv_error *err)
{
    bv_graph_engine *e = r->e;
    if (!(*r->inbox = e->cfg.transport_ops->bind(e->transport, r->inbox_addr, err)))
        return err->status;
    if (r->inbox2 && !(*r->inbox2 = e->cfg.transport_ops->bind(e->transport, r->inbox2_addr, err)))
        return err->status;
    if (e->rendezvous) {
        bv_status st = rendezvous(r, err);
        if (st != BV_OK)
            return st;
    }
    bv_status st = r->worker_addrs
                       ? bv_engine_connect_workers(e, r->worker_addrs, r->to_workers, err)
                       : BV_OK;
    if (st != BV_OK)
        return st;
    *r->compute = e->cfg.compute_ops->create(e->cfg.compute_opts, err);
    if (!*r->compute)
        return err->status ? err->status : BV_ERR_PLUGIN;
    return BV_OK;
}

/* A role process says what its inboxes refused: connections without the run's keys
 * (links over tcp) and messages the transport dropped whole. */
static void report_refused(const bv_role *r)
{
    const bv_transport_ops *t = r->e->cfg.transport_ops;
    bv_transport_counters c = {.size = sizeof c}, c2 = {.size = sizeof c2};
    if (!r->e->serving || !t->counters || !*r->inbox)
        return;
    t->counters(*r->inbox, &c);
    if (r->inbox2 && *r->inbox2)
        t->counters(*r->inbox2, &c2);
    uint64_t auth = c.auth_rejected + c2.auth_rejected;
    uint64_t malformed = c.frames_malformed + c2.frames_malformed;
    if (auth)
        bv_log(BV_LOG_WARN, "%s: refused %llu connection%s without the run's keys", r->name,
               (unsigned long long)auth, auth == 1 ? "" : "s");
    if (malformed)
        bv_log(BV_LOG_WARN, "%s: the transport dropped %llu malformed message%s", r->name,
               (unsigned long long)malformed, malformed == 1 ? "" : "s");
}

/* After the role's teardown: what role_open opened, and the outbox to the coordinator. */
static void role_close(const bv_role *r)
{
    const bv_graph_engine *e = r->e;
    report_refused(r);
    if (*r->compute)
        e->cfg.compute_ops->destroy(*r->compute);
    if (r->worker_addrs)
        bv_engine_close_all(e, r->to_workers, (size_t)e->cfg.tensor_workers);
    bv_engine_close_all(e, r->to_coord, 1);
    bv_engine_close_all(e, r->inbox, 1);
    if (r->inbox2)
        bv_engine_close_all(e, r->inbox2, 1);
}

/* A role process's heartbeat (docs/cluster.md#a-role-that-hangs): HEARTBEAT to the
 * coordinator every BV_HEARTBEAT_MS, from a thread and an outbox of its own, from READY
 * until the role ends. A process that stops (a frozen instance) falls silent, however
 * long a task of the role's own thread takes. Not in threads (no process to lose) nor in
 * function workers (their graph server's time limit watches them; their sends are
 * throttled and rate-limited through state in role_msg.c that only their own thread may
 * touch, which bv_role_send leaves alone in every other role). */
typedef struct heartbeat {
    const bv_role *r;
    int32_t slot;
    bv_stopper stopper; /* its stop wakes the thread at once */
    pthread_t thread;
    bool on;
} heartbeat;

static void *beat_main(void *arg)
{
    heartbeat *h = arg;
    bv_graph_engine *e = h->r->e;
    bv_error err = {0};
    bv_endpoint *out = bv_engine_connect(e, e->addr_coord, &err);
    bv_task_hdr hdr = {.reply_to = h->slot};
    for (bool stop = bv_stopper_stopped(&h->stopper); out && !stop;
         stop = bv_stopper_wait_ms(&h->stopper, BV_HEARTBEAT_MS))
        bv_role_send(e->cfg.transport_ops, out, BV_MSG_HEARTBEAT, h->r->id, &hdr, NULL, 0,
                     NULL, 0, NULL, 0, &err); /* a coordinator that is gone: the role ends */
    if (out)
        bv_engine_close_all(e, &out, 1);
    return NULL;
}

/* The role's place in the coordinator's tables (bv_role_slots), -1 for no heartbeat. */
static int32_t beat_slot(const bv_role *r)
{
    if (!r->e->serving || r->ready_to)
        return -1;
    if (strcmp(r->book_key, "gs") == 0)
        return r->index;
    if (strcmp(r->book_key, "ps") == 0)
        return bv_slot_ps(r->e, r->index);
    return strcmp(r->book_key, "tw") == 0 ? bv_slot_tw(r->e, r->index) : -1;
}

static void beat_start(heartbeat *h, const bv_role *r)
{
    *h = (heartbeat){.r = r, .slot = beat_slot(r)};
    if (h->slot < 0)
        return;
    bv_stopper_init(&h->stopper);
    h->on = pthread_create(&h->thread, NULL, beat_main, h) == 0;
    if (!h->on)
        bv_stopper_destroy(&h->stopper);
}

static void beat_stop(heartbeat *h)
{
    if (!h->on)
        return;
    bv_stopper_stop(&h->stopper);
    pthread_join(h->thread, NULL);
    bv_stopper_destroy(&h->stopper);
    h->on = false;
}

/* Fault injection for the tests of a failed start (tests/integration/role_failure.sh):
 * BIVOUAC_FAULT_ROLE_SETUP names a role ("tensor worker 0") whose set-up then fails. */
static bv_status injected_setup_fault(const bv_role *r, bv_error *err)
{
    const char *who = getenv("BIVOUAC_FAULT_ROLE_SETUP");
    if (who && strcmp(who, r->name) == 0)
        return bv_error_set(err, BV_ERR_INTERNAL, "%s: set-up failed (injected fault)",
                            r->name);
    return BV_OK;
}

void bv_role_run(const bv_role *r)
{
    const bv_transport_ops *t = r->e->cfg.transport_ops;
    bv_error err = {0};
    /* the coordinator's inbox first: it is bound already, and a rendezvous needs it */
    *r->to_coord = bv_engine_connect(r->e, r->e->addr_coord, &err);
    bv_status st = *r->to_coord ? role_open(r, &err) : err.status;
    if (st == BV_OK)
        st = r->setup(r->self, &err);
    if (st == BV_OK)
        st = injected_setup_fault(r, &err);
    if (st != BV_OK || !*r->to_coord)
        atomic_store(&r->e->role_failed, 1);
    if (!*r->to_coord) { /* nobody to tell */
        bv_log(BV_LOG_ERROR, "%s: %s", r->name, err.msg);
        r->teardown(r->self);
        role_close(r);
        return;
    }
    int starting = BV_ROLE_STARTING;
    heartbeat beat = {0};
    if (st != BV_OK) {
        bv_role_send_error(t, *r->to_coord, r->id, &err);
    } else if (!atomic_compare_exchange_strong(r->life, &starting, BV_ROLE_LISTENING)) {
        /* the engine is stopping already: nobody will send this role anything */
    } else {
        bv_role_send(t, r->ready_to ? *r->ready_to : *r->to_coord, BV_MSG_READY, r->id,
                     r->ready, NULL, 0, NULL, 0, NULL, 0, &err);
        beat_start(&beat, r);
        int timeout = r->idle_exit_ms > 0 ? r->idle_exit_ms : BV_TIMEOUT_FOREVER;
        for (;;) {
            bv_role_msg m;
            bv_status got = bv_role_recv_valid(t, *r->inbox, &m, timeout,
                                               &r->e->frames_dropped, &err);
            if (got != BV_OK && r->idle_exit_ms > 0) { /* a timeout (transport.h) */
                bv_log(BV_LOG_WARN, "%s: %s after %.1f s idle: ending", r->name,
                       strstr(err.msg, "timeout") ? "nothing from its graph server"
                                                  : err.msg, 1e-3 * r->idle_exit_ms);
                break;
            }
            if (got != BV_OK) {
                bv_role_send_error(t, *r->report_to, r->id, &err);
                continue;
            }
            uint16_t type = m.wire.type;
            bv_error op_err = {0};
            st = type == BV_MSG_SHUTDOWN ? BV_OK : r->handle(r->self, &m, &op_err);
            bv_role_release(t, &m);
            if (type == BV_MSG_SHUTDOWN)
                break;
            if (st != BV_OK)
                bv_role_send_error(t, *r->report_to, r->id, &op_err);
        }
    }
    beat_stop(&beat);
    uint64_t dropped = atomic_load(&r->e->frames_dropped);
    if (r->e->serving && dropped)
        bv_log(BV_LOG_WARN, "%s: dropped %llu message%s that failed their checks", r->name,
               (unsigned long long)dropped, dropped == 1 ? "" : "s");
    r->teardown(r->self);
    role_close(r);
}
