/* The cloud plugin kind: where roles run and what they cost. A cloud launches a node for
 * a role, terminates it, reports preemptions and joins, and prices node types. `local`
 * runs processes on this machine (and replays preemption traces by killing them); `sim`
 * is a discrete-event market for scales one machine cannot run (DESIGN.md). */
#ifndef BIVOUAC_CLOUD_H
#define BIVOUAC_CLOUD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/options.h"
#include "bivouac/resilience.h" /* bv_run_info */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bv_cloud bv_cloud;

/* What to launch. Starts with its size (the core's sizeof) so it can grow. */
typedef struct bv_node_request {
    size_t size;
    const char *role;      /* "graph", "tensor", "param", "stage", ... */
    const char *node_type; /* the cloud's own name ("c5.xlarge", "lambda"); NULL: default */
    bool spot;             /* preemptible capacity, if the cloud has it */
    const char *const *argv; /* the command the node runs (NULL-terminated) */
    /* ABI 1.6 (read only when size covers them): */
    const char *label; /* what the node's output lines are prefixed with ("tensor worker 2");
                          NULL: role */
    const char *host;  /* where to run it, in the cloud's own terms (`local`: a network
                          namespace name); NULL: the cloud chooses */
    /* ABI 1.13: the availability zone to place it in, a number the cloud folds onto its
     * zones (the pipeline engine asks zone s for stage s: consecutive stages in
     * different zones, as Bamboo places them); NULL: the cloud chooses */
    const char *zone;
} bv_node_request;

typedef enum bv_cloud_event_kind {
    BV_CLOUD_PREEMPTED = 1, /* the node is gone (or will be at `time`) */
    BV_CLOUD_JOINED = 2,    /* a launched node is up and reachable at its address */
    BV_CLOUD_EXITED = 3,    /* the node's command ended by itself */
    BV_CLOUD_OFFERED = 4,   /* ABI 1.13: capacity came (a spot node joined the group): the
                               next launch gets it; node is -1 */
    BV_CLOUD_WITHDRAWN = 5  /* ABI 1.21: capacity offered and not launched on is gone again
                               (that spot node was preempted first); node is -1 */
} bv_cloud_event_kind;

typedef struct bv_cloud_event {
    size_t size;   /* set by the core before poll; the plugin fills fields it covers */
    uint32_t kind; /* bv_cloud_event_kind */
    int64_t node;  /* the id launch returned */
    double time;   /* seconds since create (the simulated clock for `sim`) */
    /* ABI 1.6: BV_CLOUD_EXITED: how the node ended, as waitpid(2) reports it (WIFEXITED,
     * WTERMSIG...); -1 when the cloud cannot tell. */
    int32_t wait_status;
    /* ABI 1.14: BV_CLOUD_JOINED: the availability zone the node runs in, as the cloud
     * numbers its zones (the caller sets -1 before poll: the cloud does not say) */
    int32_t zone;
} bv_cloud_event;

/* ABI 1.12: serverless functions. A launch whose node_type is "lambda" starts a
 * function's worker under the limits the platform imposes on it; the caller (the `lambda`
 * compute plugin's controller on a graph server) hands the worker invocations itself and
 * enforces the time limit and keep-warm period the platform reports here. */
typedef struct bv_function_limits {
    size_t size;           /* set by the caller */
    double memory_mb;      /* the worker's memory cap (0: none) */
    double cpu;            /* its share of one core (0: none) */
    bool cpu_enforced;     /* the platform caps the share itself (cgroup v2 cpu.max); false:
                              the worker must hold itself to it */
    double time_limit;     /* seconds an invocation may take before the platform kills it */
    double keep_warm;      /* seconds an idle worker stays alive for the next invocation */
    double bandwidth_mbps; /* the worker's network bandwidth, each way (0: unlimited) */
} bv_function_limits;

/* What the platform does to one invocation (injected faults, docs/lambda.md). */
typedef enum bv_invoke_fault {
    BV_INVOKE_OK = 0,
    BV_INVOKE_FAIL = 1, /* the function fails: it ends without a result */
    BV_INVOKE_HANG = 2, /* the function hangs until the time limit */
    BV_INVOKE_KILL = 3  /* the platform kills the worker while it runs (the cloud does it) */
} bv_invoke_fault;

typedef struct bv_cloud_ops {
    /* Required: the cloud for one run (credentials, a trace, the simulated market...). */
    bv_cloud *(*create)(const bv_opts *opts, const bv_run_info *info, bv_error *err);
    /* Required: terminates every node still running and joins the plugin's threads. */
    void (*destroy)(bv_cloud *c);

    /* Required: starts a node for req->role; returns its id (>= 0, unique in this cloud)
     * or -1 with err set. address (address_len bytes) receives where the node will listen
     * (a transport URL), or "" when the node reports it itself after joining. Returns
     * before the node is up: a BV_CLOUD_JOINED event says when it is. */
    int64_t (*launch)(bv_cloud *c, const bv_node_request *req, char *address,
                      size_t address_len, bv_error *err);
    /* Required: stops a node (no event follows). An unknown id is BV_ERR_INVALID. */
    bv_status (*terminate)(bv_cloud *c, int64_t node, bv_error *err);
    /* Required: up to max pending events, oldest first, without blocking; returns how
     * many (0: none) or -1 with err set. Each events[i].size is set by the caller. */
    int (*poll)(bv_cloud *c, bv_cloud_event *events, int max, bv_error *err);

    /* Optional: the price per hour of node_type (spot or on-demand) now, in US dollars.
     * NULL: the core's default, which reports 0 (the cloud does not bill, like `local`). */
    bv_status (*price_per_hour)(bv_cloud *c, const char *node_type, bool spot, double *out,
                                bv_error *err);

    /* ---- ABI 1.12, optional: serverless functions (NULL: the cloud has none) ---- */
    /* The limits every function worker runs under. */
    bv_status (*function_limits)(bv_cloud *c, bv_function_limits *out, bv_error *err);
    /* The caller is about to hand function worker `node` an invocation: the fault the
     * platform injects into it (bv_invoke_fault). BV_INVOKE_KILL: the cloud kills the
     * node within the next tenths of a second (its EXITED event follows). */
    int (*invoke)(bv_cloud *c, int64_t node);

    /* ---- ABI 1.14, optional: a simulated clock (the `sim` cloud; NULL: wall time) ----
     * A cloud with a clock of its own does nothing until the caller moves it: `bivouac
     * simulate` asks when the cloud's next event is due, moves the clock there (or to an
     * event of its own that comes first) and polls what happened. Both or neither. */
    /* The simulated time of the cloud's next event (seconds since create); INFINITY when
     * nothing more will happen unless the caller launches a node. */
    double (*next_event)(bv_cloud *c);
    /* Moves the clock to `t` (not before the current time): everything due by then
     * happens, and its events wait for poll, each with its own time. */
    bv_status (*advance)(bv_cloud *c, double t, bv_error *err);

    /* ---- ABI 1.19, optional ---- */
    /* Stops a node at once, with no grace and nothing run in it (the local cloud's
     * SIGKILL): a node that hangs, terminated while the run goes on, whose clean-up on
     * SIGTERM would remove the run's files. No event follows. NULL: terminate. */
    bv_status (*kill)(bv_cloud *c, int64_t node, bv_error *err);
} bv_cloud_ops;

#ifdef __cplusplus
}
#endif
#endif
