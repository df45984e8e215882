/* The roles' common main loop (role_loop.h): what the graph server, the parameter server
 * and the tensor workers do alike, so that a change to how roles live (processes,
 * deadlines, peer failures) is made once. */
#include "role_loop.h"

#include "bivouac/log.h"

void bv_role_run(const bv_role *r)
{
    const bv_transport_ops *t = r->e->cfg.transport_ops;
    bv_error err = {0};
    bv_status st = r->setup(r->self, &err);
    *r->to_coord = bv_engine_connect(r->e, r->e->addr_coord, &err);
    if (!*r->to_coord) { /* nobody to tell */
        bv_log(BV_LOG_ERROR, "%s: %s", r->name, err.msg);
        r->teardown(r->self);
        return;
    }
    if (st != BV_OK) {
        bv_role_send_error(t, *r->to_coord, r->id, &err);
    } else {
        bv_role_send(t, *r->to_coord, BV_MSG_READY, r->id, NULL, NULL, 0, NULL, 0, NULL, 0,
                     &err);
        for (;;) {
            bv_role_msg m;
            if (bv_role_recv(t, *r->inbox, &m, BV_TIMEOUT_FOREVER, &err) != BV_OK) {
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
    t->close(*r->to_coord);
    *r->to_coord = NULL;
    r->teardown(r->self);
}
