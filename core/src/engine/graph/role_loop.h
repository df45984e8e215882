/* The main loop every graph-engine role (graph server, parameter server, tensor worker)
 * runs: set up, READY, then receive, validate and dispatch until SHUTDOWN; ERROR on failure. */
#ifndef BIVOUAC_ROLE_LOOP_H
#define BIVOUAC_ROLE_LOOP_H

#include "engine_graph_internal.h"

/* A role's life, as the role and the coordinator's stop agree on it with one
 * compare-and-swap each: a role that finished its set-up moves STARTING -> LISTENING and
 * from then on takes messages until SHUTDOWN; a stop moves STARTING -> CANCELLED, and a
 * role that finds itself cancelled ends without listening. So a stop sends SHUTDOWN
 * exactly to the roles that will receive it (never to one whose set-up failed and whose
 * inbox is gone, where the send would wait forever), and joins every role. */
enum bv_role_life { BV_ROLE_STARTING = 0, BV_ROLE_LISTENING = 1, BV_ROLE_CANCELLED = 2 };

/* What a role plugs into the loop. The callbacks get `self`, the role's own state; the
 * endpoint and compute pointers point into it, so the role's code uses them as it always
 * did. What every role has (inbox, outboxes to the workers, compute instance, outbox to
 * the coordinator) the loop opens before setup and closes after teardown. */
typedef struct bv_role {
    const char *name; /* for log lines: "graph server", "tensor worker 3" */
    uint32_t id;      /* the wire header's sender: BV_ROLE_GS, BV_ROLE_TW + i, ... */
    bv_graph_engine *e;
    void *self;
    /* Makes the rest of the role's state. A failure (or the loop's own) goes to the
     * coordinator as ERROR (its READY never comes). */
    bv_status (*setup)(void *self, bv_error *err);
    /* One validated message, never SHUTDOWN; types it does not know it ignores
     * (returns BV_OK). It sends its own replies; on failure the loop sends err to
     * *report_to. It may keep the message: it then takes m's contents and zeroes m. */
    bv_status (*handle)(void *self, bv_role_msg *m, bv_error *err);
    /* Frees what setup made, also after a failed, partial or skipped setup. */
    void (*teardown)(void *self);
    const char *inbox_addr;
    bv_endpoint **inbox;      /* bound at inbox_addr */
    const char *inbox2_addr;  /* NULL, or a second inbox (a tensor worker's for WEIGHTS) */
    bv_endpoint **inbox2;
    const char *book_key;     /* its lines in the address book: "gs", "ps", "tw" (HELLO) */
    int index;
    bv_compute **compute;     /* the role's own compute plugin instance */
    char (*worker_addrs)[BV_ADDR_LEN]; /* NULL, or an outbox to every tensor worker: */
    bv_endpoint **to_workers;          /* to_workers[i] at worker_addrs[i] */
    bv_endpoint **to_coord;
    bv_endpoint **report_to;  /* whoever waits on this role's results: gets ERROR */
    _Atomic int *life;        /* enum bv_role_life, shared with the coordinator */
    const bv_task_hdr *ready; /* NULL, or the header READY carries */
    bv_endpoint **ready_to;   /* NULL: READY goes to the coordinator; else here (a function
                                 worker's graph server, which invoked it) */
    int idle_exit_ms;         /* > 0: the role ends when no message came for this long (a
                                 function worker whose graph server is gone) */
} bv_role;

/* Runs the role until SHUTDOWN, then tears it down. Returns when the thread may end. */
void bv_role_run(const bv_role *r);

#endif
