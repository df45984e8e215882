/* The graph engine (Dorylus §3-§4): a coordinator drives epochs; a graph server owns the
 * graph and the vertex arrays and runs Gather; tensor workers run ApplyVertex and the loss
 * on vertex intervals; a parameter server owns the weights and runs WeightUpdate (Adam).
 * Here the roles are threads of one process talking over the transport's inproc
 * addresses only, so they can be moved into processes without changing this code's
 * protocol. This version runs the pipeline synchronously (staleness 0): each stage
 * finishes on every interval before the next starts. */
#ifndef BIVOUAC_ENGINE_GRAPH_H
#define BIVOUAC_ENGINE_GRAPH_H

#include <stdint.h>

#include "bivouac/cloud.h"
#include "bivouac/compute.h"
#include "bivouac/graph.h"
#include "bivouac/model.h"
#include "bivouac/resilience.h"
#include "bivouac/transport.h"

typedef struct bv_graph_engine_cfg {
    const bv_model_ops *model_ops;
    bv_model *model;
    const bv_compute_ops *compute_ops;
    const bv_opts *compute_opts;
    const bv_transport_ops *transport_ops;
    const bv_opts *transport_opts;
    const bv_graph_dataset *data; /* features already normalised if wanted */
    uint64_t seed;
    int intervals;      /* vertex intervals per stage; 0: bv_graph_auto_intervals */
    int tensor_workers; /* tensor worker threads */
    int param_servers;  /* parameter servers (roles as processes only; 0 means 1) */
    int graph_servers;  /* graph servers, each owning a part (processes only; 0 means 1) */
    bool share_arrays;  /* vertex tasks pass arrays by reference, not by copy */
    int partition;      /* bv_partition_method: how G > 1 graph servers split the graph */
    uint32_t partition_seed;
    /* A graph server's process with G > 1: its part as the coordinator cut it
     * (bv_graph_view_read); the engine takes it over. NULL: it cuts the part itself. */
    struct bv_graph_view *part;
    uint64_t part_fingerprint; /* the partition it came from */
    float beta1, beta2, eps, weight_decay;
    /* Roles as processes (`cluster:` on a `cloud:`, docs/cluster.md); cloud_ops NULL: the
     * roles are threads of this process (the embedded default). */
    const bv_cloud_ops *cloud_ops;
    const bv_opts *cloud_opts;
    bv_run_info run_info;
    const char *experiment_file; /* what each role process loads: the run's own copy */
    /* A resilience strategy that gates the tasks of training passes (before_task: the
     * `staleness` plugin, docs/staleness.md), by name for messages: the graph server makes
     * its own instance and runs those passes interval by interval (graph_pipeline.c).
     * NULL: stage by stage, every interval of a stage before the next (the default). */
    const bv_resilience_ops *gate_ops;
    const bv_opts *gate_opts;
    const char *gate_name;
    /* the training loop's hook for a role process that ended (engine.h); may be NULL */
    void (*peer_failed)(void *loop, const bv_peer_event *peer);
    void *loop;
    const char *role_exe;        /* the program that serves a role (`bivouac role`); NULL:
                                    this process's own executable */
    double peer_timeout, start_timeout; /* seconds (engine.peer_timeout, start_timeout) */
    /* cluster.links: tcp (docs/cluster.md, "Hosts"): this host's address, where each
     * kind of role runs (cluster.*_hosts: graph, param, tensor), and the run's CURVE
     * secret key (Z85) that every link then uses; empty: links over ipc, no key. */
    bool tcp;
    const char *address;
    const char *hosts[3];
    char curve_secret[41];
    /* cluster.membership: etcd (docs/membership.md): etcd's client URL (NULL: the
     * coordinator alone, by the roles' heartbeats), and the leases' time to live */
    const char *etcd;
    int lease_s;
    /* Tensor tasks on serverless function workers (compute_ops->task_placement, the
     * `lambda` plugin; docs/lambda.md): tensor_workers is then the number of worker slots
     * (each an address in the book), none is launched with the other roles, and each graph
     * server's controller (lambda_pool.c) invokes them through its own instance of the
     * cloud. lambdas: the workers it keeps at most to begin with (0: min(intervals,
     * slots)); a knob (compute.lambdas). worker_threads: kernel threads in each. */
    bool functions;
    int lambdas;
    int worker_threads;
    bool fn_remat;  /* backward tasks rematerialise their forward's output (lambda: remat) */
    bool fn_fuse;   /* the last stage's forward, the loss and its backward in one task
                       (lambda: fuse) */
    bool fn_stream; /* forward tasks are computed in halves as they arrive (lambda: stream) */
    /* In a function worker's process: the limits the cloud imposes on it. In a graph
     * server's: the cloud whose instance of its own invokes the workers (and reports
     * their limits; cloud_ops is NULL in every role process). */
    bv_function_limits fn_limits;
    const bv_cloud_ops *fn_cloud_ops;
    /* how the run's price table bills an invocation: rounded up to fn_billing_ms, for the
     * workers' memory cap, or fn_bill_mb (the table's size) when they have none */
    double fn_billing_ms, fn_bill_mb;
} bv_graph_engine_cfg;


/* Per-split results of one pass: index 0 train, 1 val, 2 test. */
typedef struct bv_epoch_stats {
    double loss[3];     /* mean cross-entropy (without weight decay) */
    double accuracy[3]; /* fraction in [0, 1] */
    int64_t count[3];
    double decay_sumsq; /* sum of squares of the weight-decayed params used */
} bv_epoch_stats;

typedef struct bv_graph_engine bv_graph_engine;

/* The default number of intervals: one per 65,536 vertices. An interval's rows of a
 * 64-wide feature matrix are then 16 MiB, under glibc's largest mmap threshold (32 MiB),
 * so per-task buffers come from the heap and are reused between epochs instead of being
 * mapped and zeroed afresh each time (docs/configuration.md). */
#define BV_VERTICES_PER_AUTO_INTERVAL 65536
static inline int bv_graph_auto_intervals(int64_t nodes)
{
    int64_t k = (nodes + BV_VERTICES_PER_AUTO_INTERVAL - 1) / BV_VERTICES_PER_AUTO_INTERVAL;
    return k < 1 ? 1 : (int)k;
}

bv_status bv_graph_engine_start(const bv_graph_engine_cfg *cfg, bv_graph_engine **out,
                                bv_error *err);
/* Joins every role thread (or ends every role process) and frees everything. */
void bv_graph_engine_stop(bv_graph_engine *e);

/* The roles a process of a cluster run may serve (`bivouac role --role NAME`). */
typedef enum bv_graph_role_kind {
    BV_GRAPH_ROLE_GRAPH = 0,
    BV_GRAPH_ROLE_PARAM = 1,
    BV_GRAPH_ROLE_TENSOR = 2,
    BV_GRAPH_ROLE_FUNCTION = 3 /* a tensor worker as a serverless function (lambda_pool.c) */
} bv_graph_role_kind;

/* The whole graph's sizes as the coordinator wrote them in the address book (`shape`
 * line): the parameter servers and tensor workers need no more of the dataset. */
bv_status bv_graph_book_shape(const char *book, bv_graph_shape *shape, bv_error *err);

/* A role process's whole life: lays the engine out from cfg as the coordinator did, reads
 * the run's address book, serves role `kind` number `index` until the coordinator's
 * SHUTDOWN. BV_OK when it ended by SHUTDOWN; else err says why (the coordinator was told
 * too, when it could be reached). */
bv_status bv_graph_engine_serve(const bv_graph_engine_cfg *cfg, bv_graph_role_kind kind,
                                int index, const char *book, bv_error *err);

/* A run whose tensor tasks run on functions: how many figures of them add up over the
 * run (invocations, relaunches, billed seconds...), their names in names[] (room for 16)
 * and their totals so far in *totals; 0 for any other run. */
size_t bv_graph_engine_functions(const bv_graph_engine *e, const char **names,
                                 const double **totals);

/* Initial weights (Glorot uniform from the seed), zero Adam moments, step 0. */
bv_status bv_graph_engine_init_weights(bv_graph_engine *e, bv_error *err);
/* The parameter server's state as blobs "param/<name>", "adam_m/<name>",
 * "adam_v/<name>", "optimizer/step"; and back. */
bv_status bv_graph_engine_get_state(bv_graph_engine *e, bv_state *out, bv_error *err);
bv_status bv_graph_engine_set_state(bv_graph_engine *e, const bv_state *st, bv_error *err);

/* One training epoch: forward with dropout, loss, backward, WeightUpdate with lr.
 * stats are those of the training forward pass. */
bv_status bv_graph_engine_train_epoch(bv_graph_engine *e, int64_t epoch, float lr,
                                      bv_epoch_stats *stats, bv_error *err);
/* Forward without dropout over all vertices; loss and accuracy per split. */
bv_status bv_graph_engine_evaluate(bv_graph_engine *e, int64_t epoch, bv_epoch_stats *stats,
                                   bv_error *err);

/* Several graph servers: the partition's edge cut (undirected edges between parts), and
 * the boundary rows' bytes of the last training epoch (forward activations and backward
 * gradients, frame headers not counted) against what the parts' ghost counts predict. */
typedef struct bv_graph_boundary {
    int parts;
    int64_t edge_cut;
    int64_t measured_bytes, predicted_bytes;
} bv_graph_boundary;
bv_graph_boundary bv_graph_engine_boundary(const bv_graph_engine *e);
/* The vertex intervals of each graph server's part (engine.intervals, or the count the
 * engine chose). */
int bv_graph_engine_intervals(const bv_graph_engine *e);

/* A gated training pass (cfg.gate_ops), as the graph servers measured it: the tasks the
 * gate held, the most epochs between a forward gather's epoch and the oldest neighbour
 * rows it read, the oldest epoch read (-1: rows no pass wrote), the gathers that read
 * rows of an earlier epoch, the most tasks in flight, the most different steps the
 * intervals were at (the pipeline's depth), the intervals that ran ahead into the next
 * epoch, the backward tasks that ran on stashed weights (their forward's, older than the
 * latest), those whose weights were not their forward's (never, unless stashing is
 * broken), the most weight updates an interval's weights were behind the latest (the
 * oldest version in use), and (from the parameter servers) the bytes of the stash. All
 * zero for a pass stage by stage. */
enum { BV_PIPE_HELD, BV_PIPE_LAG_MAX, BV_PIPE_OLDEST_READ, BV_PIPE_STALE_GATHERS,
       BV_PIPE_IN_FLIGHT_MAX, BV_PIPE_DEPTH_MAX, BV_PIPE_AHEAD, BV_PIPE_STASHED,
       BV_PIPE_STASH_MISMATCH, BV_PIPE_WEIGHTS_BEHIND, BV_PIPE_STASH_BYTES,
       BV_PIPE_FIGURES };

/* A policy's knob of strategy `plugin`: sent to each graph server's instance when it is
 * the run's task gate (else nothing to do). The loop's own instance checked it. */
bv_status bv_graph_engine_set_knob(bv_graph_engine *e, const char *plugin, const char *knob,
                                   double value, bv_error *err);

/* Several parameter servers: the fewest and the most gradient messages one of them took
 * from the workers in the last training epoch (docs/cluster.md: the least-loaded pick).
 * Returns the number of servers. */
int bv_graph_engine_server_load(const bv_graph_engine *e, int64_t *fewest, int64_t *most);

/* Layout of the parameters (shared by the roles). */
size_t bv_graph_engine_param_floats(const bv_graph_engine *e);

#endif
