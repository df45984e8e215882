/* The main loop every graph-engine role runs on its thread (graph server, parameter
 * server, tensor workers): set up, report READY, then receive, validate and dispatch
 * messages until SHUTDOWN, reporting each failure as an ERROR. */
#ifndef BIVOUAC_ROLE_LOOP_H
#define BIVOUAC_ROLE_LOOP_H

#include "engine_graph_internal.h"

/* What a role plugs into the loop. The callbacks get `self`, the role's own state; the
 * endpoint pointers point into it, so the role's code uses its endpoints as it always
 * did. */
typedef struct bv_role {
    const char *name; /* for log lines: "graph server", "tensor worker 3" */
    uint32_t id;      /* the wire header's sender: BV_ROLE_GS, BV_ROLE_TW + i, ... */
    bv_graph_engine *e;
    void *self;
    /* Binds *inbox and makes the role's state. A failure goes to the coordinator as
     * ERROR (its READY never comes). */
    bv_status (*setup)(void *self, bv_error *err);
    /* One validated message, never SHUTDOWN; types it does not know it ignores
     * (returns BV_OK). It sends its own replies; on failure the loop sends err to
     * *report_to. It may keep the message: it then takes m's contents and zeroes m. */
    bv_status (*handle)(void *self, bv_role_msg *m, bv_error *err);
    /* Frees what setup made, also after a failed or partial setup. */
    void (*teardown)(void *self);
    bv_endpoint **inbox;     /* bound by setup */
    bv_endpoint **to_coord;  /* connected by the loop after setup, closed by it at the end */
    bv_endpoint **report_to; /* whoever waits on this role's results: gets ERROR */
} bv_role;

/* Runs the role until SHUTDOWN, then tears it down. Returns when the thread may end. */
void bv_role_run(const bv_role *r);

#endif
