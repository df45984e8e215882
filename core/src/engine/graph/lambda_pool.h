/* A graph server's controller of serverless function workers (compute: lambda; Dorylus
 * §6; docs/lambda.md). The graph server hands it each tensor task it would send a tensor
 * worker; the controller runs the task as an invocation of a function worker: a warm one
 * that is idle, or a new one the cloud starts (a cold start), or, with `lambdas` workers
 * busy already, the task waits in its queue. Every invocation is timed: one that passes
 * the platform's time limit has its worker killed, and one whose worker ends without a
 * result (a failure, a kill) is invoked again; a result that comes for a task already
 * done (a late duplicate) is dropped by its task id. A backward result carries the
 * worker's weight gradients, which the graph server sends on to the parameter server with
 * the task's first result (graph_server.c, forward_grads). An idle worker is retired after
 * the platform's keep-warm period. Internal to core/src/engine/graph. */
#ifndef BIVOUAC_LAMBDA_POOL_H
#define BIVOUAC_LAMBDA_POOL_H

#include "engine_graph_internal.h"

typedef struct bv_lambda_pool bv_lambda_pool;

/* What one pass of a graph server did with functions, summed over its invocations; what
 * EPOCH_DONE carries (float64 each, BV_FN_FIGURES of them). */
enum {
    BV_FN_INVOCATIONS,  /* tasks handed to a worker (relaunches included) */
    BV_FN_COLD_STARTS,  /* workers started */
    BV_FN_RELAUNCHES,   /* invocations made again after a loss */
    BV_FN_TIMEOUTS,     /* invocations past the time limit (their worker killed) */
    BV_FN_LOST,         /* invocations whose worker ended (failed, killed) without a result */
    BV_FN_DUPLICATES,   /* results dropped: their task was done already */
    BV_FN_BILLED_S,     /* billed seconds: each invocation's, rounded up to billing_ms */
    BV_FN_GB_S,         /* billed GB-seconds (billed seconds x the worker's memory) */
    BV_FN_BYTES_TO,     /* task bytes sent to workers */
    BV_FN_BYTES_FROM,   /* result bytes received from them */
    BV_FN_QUEUE_MEAN,   /* tasks waiting for a worker, averaged over the pass's time */
    BV_FN_QUEUE_MAX,
    BV_FN_IDLE_MEAN,    /* warm workers idle, averaged over the time tasks were out */
    BV_FN_WORKERS_MAX,  /* workers alive at once, at most */
    BV_FN_LAMBDAS,      /* the knob: workers the controller keeps at most */
    BV_FN_TASK_MS_MEAN, /* invocation time, dispatch to result, mean */
    BV_FN_FIGURES
};

/* The controller of graph server gs_index, with its own instance of the run's cloud;
 * worker slots [first, first + slots) are its (their addresses in the book). */
bv_status bv_lambda_pool_open(bv_graph_engine *e, bv_endpoint *inbox, bv_endpoint **to_workers,
                              bv_lambda_pool **out, bv_error *err);
/* Retires every worker (SHUTDOWN, then the cloud's terminate) and frees the controller. */
void bv_lambda_pool_close(bv_lambda_pool *p);

/* Runs a task (type, header, arrays a, b, c: copied, for an invocation again) on a
 * worker; the result comes back through bv_lambda_pool_recv. */
bv_status bv_lambda_pool_submit(bv_lambda_pool *p, uint16_t type, const bv_task_hdr *h,
                                const void *a, size_t na, const void *b, size_t nb,
                                const void *c, size_t nc, bv_error *err);
/* The graph server's receive while tasks are out: the next message for it that is not
 * the controller's own (a task's first result, boundary rows, an error), handling the
 * workers' READYs, their ends, time limits and duplicates meanwhile. A task that cannot
 * be run (every invocation of it lost, BV_FN_MAX_ATTEMPTS times) fails the receive. */
bv_status bv_lambda_pool_recv(bv_lambda_pool *p, bv_role_msg *m, bv_error *err);
/* Between passes: m (a worker's READY or a late result) is the controller's; it takes it
 * (and releases it) and returns true. */
bool bv_lambda_pool_take(bv_lambda_pool *p, bv_role_msg *m);
/* Whether value is a count the knob compute.lambdas may take (1 .. bv_fn_slots), checked
 * by the coordinator before it sends the knob and by each graph server when it comes. */
bv_status bv_lambda_count_ok(const bv_graph_engine *e, double value, bv_error *err);
/* The knob compute.lambdas (1 .. the slots). */
bv_status bv_lambda_pool_set_lambdas(bv_lambda_pool *p, double value, bv_error *err);
/* A pass begins (the figures restart) and ends (they are read). */
void bv_lambda_pool_begin(bv_lambda_pool *p);
void bv_lambda_pool_figures(bv_lambda_pool *p, double out[BV_FN_FIGURES]);

#define BV_FN_MAX_ATTEMPTS 8

_Static_assert(BV_FN_FIGURES <= BV_FN_SLOTS, "engine_graph_internal.h keeps BV_FN_SLOTS");

#endif
