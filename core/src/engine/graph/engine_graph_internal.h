/* State shared by the graph engine's role threads. Each role reads only the immutable
 * parts (configuration, layout, the dataset it owns) and talks to the others through
 * the transport. */
#ifndef BIVOUAC_ENGINE_GRAPH_INTERNAL_H
#define BIVOUAC_ENGINE_GRAPH_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine_graph.h"
#include "graph_view.h"
#include "membership.h"
#include "role_msg.h"
#include "shared_segment.h"

#define BV_MAX_TENSOR_WORKERS 64
#define BV_MAX_PARAM_SERVERS 16
#define BV_MAX_GRAPH_SERVERS 16
#define BV_ADDR_LEN 96
#define BV_FN_SLOTS 16 /* room for lambda_pool.h's BV_FN_FIGURES */
#define BV_FN_SEND_MS 1000

typedef struct bv_shared_array {
    void *base;
    size_t bytes;
} bv_shared_array;

struct bv_graph_engine {
    bv_graph_engine_cfg cfg;
    bv_transport *transport;
    /* A graph server's or parameter server's process of a run on functions: the outboxes
     * to the function workers, whose sends give up after BV_FN_SEND_MS (a worker may be
     * gone: its loss must not hold the sender for the transport's whole send bound). */
    bv_transport *fn_transport;
    /* layout */
    size_t nparams;
    const bv_param_spec **params;
    size_t *param_off; /* float offset of each param in the concatenation */
    size_t param_floats;
    size_t nstages;
    const bv_stage **stages;  /* each points into stage_copy */
    bv_stage *stage_copy;     /* the model's stages in this build's layout (bv_stage_copy) */
    int64_t *interval_begin; /* intervals + 1 */
    int *vin;                /* per stage: the stage whose vertex array it reads; -1 features */
    int64_t *vin_width;      /* floats per row of that array */
    bool has_edge_stages;
    bool has_norm_gathers; /* some GATHER uses Â (else Â is never built) */
    /* graph server data */
    bv_csr *adj_norm;   /* Â */
    bv_csr *adj_norm_t; /* Âᵀ for ∇GA: adj_norm itself for a whole graph (symmetric) */
    bv_csr *adj_loops;  /* A + I, unweighted, for EDGE and weighted GATHER stages */
    bv_csr *adj_loops_t;
    int64_t *loops_perm; /* edge of adj_loops_t -> edge of adj_loops */
    /* addresses */
    int nps; /* parameter servers: each holds all the weights (param_server.c) */
    int ngs; /* graph servers: each owns a part of the graph (graph_view.h) */
    int gs_index;       /* a graph server's process: which part is its */
    bv_graph_view view; /* a graph server's process with ngs > 1: its part */
    char addr_coord[BV_ADDR_LEN], addr_gs[BV_MAX_GRAPH_SERVERS][BV_ADDR_LEN];
    char addr_ps[BV_MAX_PARAM_SERVERS][BV_ADDR_LEN];
    char addr_tw[BV_MAX_TENSOR_WORKERS][BV_ADDR_LEN];
    char addr_tw_weights[BV_MAX_TENSOR_WORKERS][BV_ADDR_LEN];
    /* coordinator's endpoints (used by the calling thread only) */
    bv_endpoint *coord_in, *to_gs[BV_MAX_GRAPH_SERVERS], *to_ps[BV_MAX_PARAM_SERVERS];
    bv_endpoint *to_tw[BV_MAX_TENSOR_WORKERS];
    /* threads */
    pthread_t gs_thread, ps_thread[BV_MAX_PARAM_SERVERS], tw_thread[BV_MAX_TENSOR_WORKERS];
    struct bv_tw_arg *ps_args; /* one per parameter server */
    struct bv_tw_arg *tw_args; /* one per tensor worker */
    bool gs_started, ps_started[BV_MAX_PARAM_SERVERS], tw_started[BV_MAX_TENSOR_WORKERS];
    /* Whether each role will take a SHUTDOWN (role_loop.h, bv_role_life): stopping must
     * not send one to a role that never listens, or wait for one that never stops. */
    _Atomic int gs_life, ps_life[BV_MAX_PARAM_SERVERS], tw_life[BV_MAX_TENSOR_WORKERS];
    /* Arrays the graph server shares with the tensor workers when cfg.share_arrays is on
     * (role_msg.h, bv_array_ref): the dataset's, then each stage's output and gradient.
     * The graph server sets an entry before it sends a task naming it. */
    bv_shared_array *shared; /* bv_shared_count(e) */
    /* Roles as processes on one host (links over ipc) with share_arrays: the stage arrays
     * live in memory the processes share (shared_segment.h). A graph server's process
     * makes its segment; a tensor worker's maps each graph server's when BV_MSG_SEGMENT
     * comes, and its windows resolve against that server's table, not `shared`. */
    bool shm;
    bv_segment segment;
    bv_segment peer_segment[BV_MAX_GRAPH_SERVERS];
    bv_shared_array *peer_shared[BV_MAX_GRAPH_SERVERS]; /* bv_shared_count(e) each */
    /* ---- roles as processes (cfg.cloud_ops; role_launch.c) ---- */
    bool procs;          /* the roles are processes the cloud started */
    bv_cloud *cloud;
    char dir[64];        /* private directory: ipc sockets and the address book */
    int64_t *node;       /* per role (bv_role_slot): the cloud's node id, -1 none */
    bool failed;         /* a role failed or died: stop ends the rest without asking */
    double next_watch;   /* when the coordinator next looks at the processes */
    double *beat_at;     /* per role: when its last heartbeat came (0: none yet) */
    double waited_until; /* when the coordinator last stopped reading its inbox */
    double launched_at;  /* when the processes were started (a lost one's event time) */
    _Atomic int role_failed; /* in a role process: its set-up failed (role_loop.c) */
    /* Messages this process's roles dropped because they failed their checks (malformed,
     * truncated, oversized, not of this protocol): never trusted, only counted. */
    _Atomic uint64_t frames_dropped;
    bool serving; /* this process serves one role of a cluster (bv_graph_engine_serve) */
    const char *book; /* then: the run's address book (a graph server's function workers
                         read it too) */
    bool rendezvous; /* links over tcp: the roles' ports are known once they have bound */
    /* where each role slot runs: a host (network namespace) name, "" for this host */
    char slot_host[BV_MAX_GRAPH_SERVERS + BV_MAX_PARAM_SERVERS + BV_MAX_TENSOR_WORKERS][32];
    int64_t ghost_bytes; /* the last pass's boundary rows sent between graph servers */
    /* Several graph servers (docs/cluster.md): the partition a graph server's process
     * derived (READY carries it: version = fingerprint, row_begin = its ghosts, rows =
     * the edge cut), and at the coordinator what they reported. */
    bv_task_hdr part_info;
    int64_t edge_cut, ghosts_total;
    int64_t train_ghost_bytes; /* the last training pass's boundary bytes, all servers */
    int send_bound_ms;  /* the transport's send bound (send_timeout_ms; -1: none) */
    /* Several parameter servers: what each reported with its last STEPPED, the gradient
     * messages that came to it from the workers, and its seconds per message, averaged
     * over the epochs (half the last, half those before). The graph servers hand the
     * next epoch's intervals out by them (bv_engine_pick_servers). */
    int64_t ps_taken[BV_MAX_PARAM_SERVERS];
    double ps_cost[BV_MAX_PARAM_SERVERS];
    double pipe_fig[BV_PIPE_FIGURES]; /* the last training pass's (gated passes) */
    double *pipe_stage; /* per stage: the most intervals at it at once, that pass */
    /* Tensor tasks on functions (cfg.functions): what the graph servers reported of them
     * (lambda_pool.h, BV_FN_*), this epoch's passes and the whole run's. */
    double fn_epoch[BV_FN_SLOTS], fn_total[BV_FN_SLOTS];
    int64_t version;    /* weights version the PS last reported */
    double decay_now;   /* sum of squares of the decayed weights, as of that version */
    /* roles as processes, cluster.membership: etcd: the coordinator's lease and watch (at
     * the end: out of the way of the fields the training reads) */
    bv_membership member;
};

/* Whether stage s's vertex array is read across edges (by a GATHER or EDGE stage), and so
 * has ghost rows to exchange between graph servers. */
bool bv_stage_read_across_edges(const bv_graph_engine *e, size_t s);

/* The arrays a bv_array_ref may name. */
enum { BV_SHARED_FEATURES, BV_SHARED_LABELS, BV_SHARED_SPLIT, BV_SHARED_STAGES };
static inline int64_t bv_shared_act(size_t stage)
{
    return BV_SHARED_STAGES + 2 * (int64_t)stage;
}
static inline int64_t bv_shared_dact(size_t stage)
{
    return BV_SHARED_STAGES + 2 * (int64_t)stage + 1;
}
/* Then a graph server's two arrays of edge tasks (graph_server.c, bv_gs_edge_pass): the
 * attention inputs of every vertex, packed once per edge pass, which every task of the
 * pass reads; and the partial d(inputs) of every vertex the backward tasks in flight
 * write, one slot each (bv_gs_edge_slots), which the graph server adds up in interval
 * order. */
static inline int64_t bv_shared_edge_input(const bv_graph_engine *e)
{
    return BV_SHARED_STAGES + 2 * (int64_t)e->nstages;
}
static inline int64_t bv_shared_edge_partials(const bv_graph_engine *e)
{
    return bv_shared_edge_input(e) + 1;
}
static inline size_t bv_shared_count(const bv_graph_engine *e)
{
    return (size_t)bv_shared_edge_partials(e) + 1;
}
/* The window ref names in graph server gs's arrays, if it lies inside a shared array that
 * exists, is `bytes` long and, for writing, is not the dataset's; else NULL and err says
 * why. */
void *bv_engine_shared_window(const bv_graph_engine *e, int gs, const bv_array_ref *ref,
                              size_t bytes, bool write, bv_error *err);
/* A tensor worker's process: maps the segment a BV_MSG_SEGMENT offers. */
bv_status bv_engine_map_segment(bv_graph_engine *e, const bv_role_msg *m, bv_error *err);
/* Array `which` (0 a, 1 b, 2 c) of a task, of `bytes` bytes: its bytes in the message, or
 * the shared window it names (BV_TASK_REF_*); else NULL and err says why. */
const void *bv_engine_task_array(const bv_graph_engine *e, const bv_role_msg *m, int which,
                                 size_t bytes, bv_error *err);

/* The parameter server of each of `intervals` intervals for an epoch (docs/cluster.md,
 * "Several parameter servers"): in interval order, the least-loaded one, the server whose
 * share would be done soonest, (intervals it has so far + 1) × its seconds per interval
 * (cost[k]; servers with no measure count as the mean of those with one, all equal when
 * none has; servers within 2× of the fastest count as the fastest, since timings on a
 * shared machine differ by that much for nothing); ties go round the servers from
 * `first`, so equal servers take turns. */
void bv_engine_pick_servers(const double *cost, int nps, int intervals, int64_t first,
                            int32_t *ps_of);

/* Roles in a fixed order, for per-role tables: the graph servers, the parameter servers,
 * the tensor workers (none when tasks run on functions: the graph servers start those). */
static inline int bv_slot_ps(const bv_graph_engine *e, int i)
{
    return e->ngs + i;
}
static inline int bv_slot_tw(const bv_graph_engine *e, int i)
{
    return e->ngs + e->nps + i;
}
static inline int bv_role_slots(const bv_graph_engine *e)
{
    return bv_slot_tw(e, e->cfg.functions ? 0 : e->cfg.tensor_workers);
}
/* Tasks on functions: the worker slots each graph server has (graph server g's are
 * [g * n, (g + 1) * n)). */
static inline int bv_fn_slots(const bv_graph_engine *e)
{
    return e->cfg.tensor_workers / e->ngs;
}
/* "graph server", "parameter server" ("graph server 1", "parameter server 1" when there
 * are several), "tensor worker 3". */
void bv_role_slot_name(const bv_graph_engine *e, int slot, char *buf, size_t len);

/* ---- role_launch.c: the coordinator's side of roles as processes ---- */
/* Makes the private directory and the ipc addresses, writes the address book, starts a
 * process per role on the cloud. */
bv_status bv_engine_launch(bv_graph_engine *e, bv_error *err);
/* Receives on the coordinator's inbox until a message of `type` arrives, while watching
 * the role processes: one that dies fails the wait with its name, as does Ctrl-C, and
 * (deadline > 0, CLOCK_MONOTONIC seconds) the deadline passing. */
bv_status bv_engine_coord_wait(bv_graph_engine *e, uint16_t type, double deadline,
                               bv_role_msg *m, bv_error *err);
/* A request from the coordinator to a role process: the processes are looked at first,
 * so that a role that just died is named instead of waited for (a send to a peer that is
 * gone blocks for the transport's send bound), and a send that fails all the same is
 * explained by the process that ended, if one did within a moment. */
bv_status bv_engine_coord_send(bv_graph_engine *e, bv_endpoint *to, uint16_t type,
                               const bv_task_hdr *h, const void *a, size_t na, const void *b,
                               size_t nb, const void *c, size_t nc, bv_error *err);
/* Several graph servers: cuts the graph into the parts once, in the coordinator, and
 * writes part P to DIR/partP (bv_graph_view_write) for graph server P's process. */
bv_status bv_engine_write_parts(const bv_graph_engine *e, bv_error *err);
/* Ends every role process (SHUTDOWN, then the cloud's terminate for those that do not
 * exit within peer_timeout; at once after a failure), removes the private directory. */
void bv_engine_land(bv_graph_engine *e);
/* Reads the address book `path` into e's addresses (a role process); an address with
 * the port `*` (links over tcp) is this role's to bind, and sets e->rendezvous: the whole
 * book then comes from the coordinator (BV_MSG_BOOK) once every role has bound. */
bv_status bv_engine_read_book(bv_graph_engine *e, const char *path, bv_error *err);
/* The address book as text (`len` bytes), as BV_MSG_BOOK carries it. */
bv_status bv_engine_parse_book(bv_graph_engine *e, const char *text, size_t len,
                               bv_error *err);
/* The run's CURVE secret key from the book's `curve` line into key (41 bytes), or "". */
bv_status bv_engine_book_key(const char *path, char *key, bv_error *err);
double bv_engine_now(void); /* CLOCK_MONOTONIC seconds */
/* In a role process: SIGTERM removes the run's socket files, the book and its directory,
 * then exits 128 + SIGTERM. */
void bv_engine_role_cleanup_on_term(const bv_graph_engine *e, const char *book);

void *bv_graph_server_main(void *engine);
void *bv_param_server_main(void *ps_arg); /* a bv_tw_arg */
void *bv_tensor_worker_main(void *tw_arg); /* a bv_tw_arg */

/* Parameter servers and tensor workers get their engine and index through this. */
typedef struct bv_tw_arg {
    bv_graph_engine *engine;
    int index;
    bool function; /* a serverless function worker (lambda_pool.h), not a tensor worker */
} bv_tw_arg;

/* The ops that zero and copy the engine's arrays where they lie (compute.h's bv_zero and
 * bv_copy_rows): the back end's, when it has memory of its own (a device's), since a host
 * loop would move the arrays' pages to the host and its next kernel back; none (the host
 * loops) otherwise, and always with the shared segment, whose arrays are host memory. */
const bv_compute_ops *bv_engine_movers(const bv_graph_engine *e);
/* Opens an outbox or fails the role with a message to the coordinator. */
bv_endpoint *bv_engine_connect(bv_graph_engine *e, const char *addr, bv_error *err);
/* Opens out[i], an outbox to tensor worker i's inbox at addrs[i] (e->addr_tw: tasks;
 * e->addr_tw_weights: weights), for every worker. */
bv_status bv_engine_connect_workers(bv_graph_engine *e, char (*addrs)[BV_ADDR_LEN],
                                    bv_endpoint **out, bv_error *err);
/* Opens out[i], an outbox to parameter server i, for every one. */
bv_status bv_engine_connect_servers(bv_graph_engine *e, bv_endpoint **out, bv_error *err);
/* Opens out[i], an outbox to graph server i, for every one. */
bv_status bv_engine_connect_graph_servers(bv_graph_engine *e, bv_endpoint **out,
                                          bv_error *err);
/* Closes the endpoints of eps[0, n) that are open. */
void bv_engine_close_all(const bv_graph_engine *e, bv_endpoint *const *eps, size_t n);

#endif
