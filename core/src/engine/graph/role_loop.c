/* The roles' common main loop (role_loop.h), so that a change to how roles live (processes,
 * deadlines, peer failures) is made once, not in each role. */
#include "role_loop.h"

#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"

/* What every role has: its inbox, outboxes to the tensor workers (if it sends them
 * anything), its compute instance. */
static bv_status role_open(const bv_role *r, bv_error *err)
{
    bv_graph_engine *e = r->e;
    if (!(*r->inbox = e->cfg.transport_ops->bind(e->transport, r->inbox_addr, err)))
        return err->status;
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

/* After the role's teardown: what role_open opened, and the outbox to the coordinator. */
static void role_close(const bv_role *r)
{
    const bv_graph_engine *e = r->e;
    if (*r->compute)
        e->cfg.compute_ops->destroy(*r->compute);
    if (r->worker_addrs)
        bv_engine_close_all(e, r->to_workers, (size_t)e->cfg.tensor_workers);
    bv_engine_close_all(e, r->to_coord, 1);
    bv_engine_close_all(e, r->inbox, 1);
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
    bv_status st = role_open(r, &err);
    if (st == BV_OK)
        st = r->setup(r->self, &err);
    if (st == BV_OK)
        st = injected_setup_fault(r, &err);
    *r->to_coord = bv_engine_connect(r->e, r->e->addr_coord, &err);
    if (st != BV_OK || !*r->to_coord)
        atomic_store(&r->e->role_failed, 1);
    if (!*r->to_coord) { /* nobody to tell */
        bv_log(BV_LOG_ERROR, "%s: %s", r->name, err.msg);
        r->teardown(r->self);
        role_close(r);
        return;
    }
    int starting = BV_ROLE_STARTING;
    if (st != BV_OK) {
        bv_role_send_error(t, *r->to_coord, r->id, &err);
    } else if (!atomic_compare_exchange_strong(r->life, &starting, BV_ROLE_LISTENING)) {
        /* the engine is stopping already: nobody will send this role anything */
    } else {
        bv_role_send(t, *r->to_coord, BV_MSG_READY, r->id, NULL, NULL, 0, NULL, 0, NULL, 0,
                     &err);
        for (;;) {
            bv_role_msg m;
            if (bv_role_recv_valid(t, *r->inbox, &m, BV_TIMEOUT_FOREVER, &r->e->frames_dropped,
                                   &err) != BV_OK) {
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
    uint64_t dropped = atomic_load(&r->e->frames_dropped);
    if (r->e->serving && dropped)
        bv_log(BV_LOG_WARN, "%s: dropped %llu message%s that failed their checks", r->name,
               (unsigned long long)dropped, dropped == 1 ? "" : "s");
    r->teardown(r->self);
    role_close(r);
}
