/* The sequence engine as a pipeline (docs/pipeline.md#the-runtime): D pipelines of P
 * stages, each stage a span of the model's layers (layer_engine.h) running its schedule
 * (engine/pipeline/schedule_gen.h) on M microbatches a step, as a thread of this process;
 * stages talk only through the transport (engine/pipeline/stage_link.h), to their
 * neighbours (activations, gradients), to the stage that owns a tied tensor, and to their
 * replicas in the other pipelines (the gradient all-reduce). The coordinator here drives
 * them by commands: initialise, train a step, evaluate, state, checksum, stop. */
#ifndef BIVOUAC_PIPELINE_SEQ_H
#define BIVOUAC_PIPELINE_SEQ_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "adamw.h"
#include "bivouac/cloud.h"
#include "experiment.h"
#include "policy.h"
#include "schedule_gen.h"
#include "text_corpus.h"

/* The random streams the sequence engine draws its batches from (text_corpus.h): step
 * it's training batch, and evaluation batch i of a split after `done` steps. */
#define BV_SEQ_STREAM_TRAIN(it) ((uint64_t)(it) * 2)
#define BV_SEQ_STREAM_EVAL(done, split, i) \
    ((uint64_t)1 << 62 | (uint64_t)(done) << 24 | (uint64_t)(split) << 23 | (uint64_t)(i))

/* A training step's messages carry its attempt (a step run again after a failover is a
 * new attempt, whose messages a late one of the abandoned attempt never matches). */
#define BV_SEQ_ATTEMPT_SHIFT 40
#define BV_SEQ_WIRE_STEP(it, attempt) ((int64_t)(it) | (int64_t)(attempt) << BV_SEQ_ATTEMPT_SHIFT)
#define BV_SEQ_STEP_OF(wire) ((wire) & (((int64_t)1 << BV_SEQ_ATTEMPT_SHIFT) - 1))
/* An evaluation's command step: its own range, so that an abort of the evaluation after
 * `done` steps is never taken for one of training step `done` (bv_stage_link_command),
 * and the split in its attempt field, so that one of the first split's is never taken for
 * the second's: both run after `done` steps, each from attempt 0. (It was: a failover in
 * the train split's evaluation left an abort that stopped the val split's, which then
 * had the same step; failover.sh, "stopped while waiting for activations".) */
#define BV_SEQ_EVAL_STEP(done, split, attempt)                                             \
    (BV_SEQ_WIRE_STEP(done, 2 * (int64_t)(attempt) + (split)) | (int64_t)1 << 62)

typedef struct bv_seq_pipe_cfg {
    const bv_experiment *x;
    const bv_text_corpus *corpus;
    const bv_seq_model_ops *mops; /* the core's copy of the model's table */
    int stages, pipelines, microbatches;
    bv_schedule_kind kind;
    size_t span_first[65], span_end[65]; /* stage s runs layers [first, end) */
    int64_t batch, block;        /* the global batch: every pipeline's rows */
    uint64_t seed;
    bv_adamw adamw;
    int peer_timeout_ms;         /* a stage waits this long for a peer's message */
    /* Stages as processes (the experiment has a `cloud:`): the cloud that starts them and
     * the run's copy of the experiment they load; NULL: stages as threads. */
    const bv_cloud_ops *cloud_ops;
    const bv_opts *cloud_opts;
    /* the cloud to launch them on, the caller's (it outlives the pipeline: a restart
     * from a checkpoint launches the stages again on the same one); NULL: the pipeline
     * creates its own and destroys it when it stops */
    bv_cloud *cloud;
    int relaunches; /* this pipeline's launches before: restarts from a checkpoint and
                       relayouts (the book says it: a stage process of a later launch
                       injects no BIVOUAC_STAGE_FAULT) */
    int standby;    /* capacity there is beyond the stages when they start (a relayout
                       left it standing by): the cloud offered it before */
    bv_run_info run_info;
    char experiment_file[4096];
    bool tcp;              /* links: tcp (processes): CURVE with the run's key */
    char curve_secret[41]; /* the run's key ("" over ipc) */
    char address[64];      /* links: tcp: what the coordinator and the stages bind */
    /* cluster.membership: etcd (docs/membership.md): etcd's client URL ("": the
     * coordinator alone), and the leases' time to live */
    char etcd[256];
    int lease_s;
    /* each stage's schedule, as the resilience strategies left it (bv_seq_pipe_schedules);
     * NULL: each stage generates its own */
    bv_schedule *sched;
    /* the training loop's hook for a lost stage process (engine.h); may be NULL */
    void (*peer_failed)(void *loop, const bv_peer_event *peer);
    /* the training loop's policy for reconfiguration events (engine.h); may be NULL */
    bv_status (*reconfigure)(void *loop, const char *event, const bv_metric *m, size_t n,
                             const char *const *choices, bool often, char *decision,
                             size_t len, bv_error *err);
    void *loop;
} bv_seq_pipe_cfg;

/* The stages laid out afresh (docs/redundancy.md#reconfigurations-that-change-the-layout):
 * P stages (the layers partitioned over them again), D pipelines, M microbatches, their
 * state taken from pipeline `from` of the layout of before. */
typedef struct bv_seq_pipe_layout {
    int stages, pipelines, microbatches;
    int from;
    int standby; /* the capacity the layout leaves standing by */
} bv_seq_pipe_layout;

/* The pipeline of an experiment whose check passed (`pipeline:` and the model's layers:
 * the first stage also runs the embeddings, the last the head), for stages as threads;
 * the caller sets the cloud fields for processes. mops must outlive the pipeline. */
bv_status bv_seq_pipe_cfg_make(const bv_experiment *x, const bv_text_corpus *corpus,
                               const bv_seq_model_ops *mops, uint64_t seed,
                               bv_seq_pipe_cfg *cfg, bv_error *err);

/* What one training step gave. */
typedef struct bv_seq_pipe_step {
    double loss;           /* mean over the global batch */
    double norm;           /* the global gradient norm before clipping */
    double compute_seconds; /* summed over the stages */
    double wait_seconds;    /* stages waiting on a peer's message, summed */
    double seconds;         /* the step's wall time */
} bv_seq_pipe_step;

typedef struct bv_seq_pipe bv_seq_pipe;

/* Every stage's schedule, generated and handed to the resilience strategies' schedule
 * hook (hook may be NULL), then simulated together: a strategy's instructions must not
 * make the stages wait on each other forever. Into cfg->sched. */
bv_status bv_seq_pipe_schedules(bv_seq_pipe_cfg *cfg,
                                bv_status (*hook)(void *loop, bv_schedule *s, bv_error *err),
                                void *loop, bv_error *err);
/* Whether stages keep replicas of others (a schedule has the redundancy strategy's
 * REPLICA_UPDATE): then a training step is two-phase, prepared by every stage and applied
 * only when the coordinator commits it, so that a stage lost during a step leaves no
 * stage a step ahead of the others, and its shadow can take over (docs/redundancy.md). */
bool bv_seq_pipe_two_phase(const bv_seq_pipe_cfg *cfg);
/* cfg laid out as l: its P, D and M, and the stages' spans partitioned again as
 * pipeline.partition says (uniform; balanced, from a profiling pass; layer counts for
 * another number of stages: uniform). The schedules are freed: bv_seq_pipe_schedules
 * makes them for the new layout. */
bv_status bv_seq_pipe_cfg_layout(bv_seq_pipe_cfg *cfg, const bv_seq_pipe_layout *l,
                                 bv_error *err);
/* Frees what the cfg functions allocated (the schedules). */
void bv_seq_pipe_cfg_free(bv_seq_pipe_cfg *cfg);

/* Starts the D x P stages (threads, or processes on cfg->cloud_ops) and initialises
 * their layers from cfg->seed. */
bv_status bv_seq_pipe_start(const bv_seq_pipe_cfg *cfg, bv_seq_pipe **out, bv_error *err);
/* Stops every stage and frees everything (NULL: nothing). */
void bv_seq_pipe_stop(bv_seq_pipe *p);

/* Step `it` on every stage. With two-phase steps, a stage process lost during it is
 * failed over (its shadow adopts it) and the step runs again if it was not prepared by
 * every stage; the run goes on. */
bv_status bv_seq_pipe_train(bv_seq_pipe *p, int64_t it, double lr, bv_seq_pipe_step *out,
                            bv_error *err);
/* What the pipeline's recovery did so far: the failovers, the stages given a process of
 * their own again after one (the cloud offered capacity), the failed steps that went on
 * from their update and the lost backwards run again by shadows in them (lazy BRC), and
 * the seconds from each loss seen to the end of its step. */
typedef struct bv_seq_pipe_recovery {
    int failovers, replaced, resumed, lazy_brc;
    double seconds;
} bv_seq_pipe_recovery;
void bv_seq_pipe_failovers(const bv_seq_pipe *p, bv_seq_pipe_recovery *r);
/* Whether the last call failed because the run's policy chose to lay the stages out
 * afresh (a `reconfigure` or a `grow`): *l says how; the caller gathers the state of
 * pipeline l->from (bv_seq_pipe_gather), stops this pipeline, starts the new layout and
 * sets the state, then calls again. Once per decision. */
bool bv_seq_pipe_relayout_due(bv_seq_pipe *p, bv_seq_pipe_layout *l);
/* Pipeline d's layers (and moments), from the stages that run them now. */
bv_status bv_seq_pipe_gather(bv_seq_pipe *p, int d, bv_state *s, bv_error *err);
/* Mean loss over `iters` batches of a split (split 1: validation) after `done` steps,
 * batch i drawn from BV_SEQ_STREAM_EVAL(done, split, i). */
bv_status bv_seq_pipe_eval(bv_seq_pipe *p, int64_t done, int split, int64_t iters,
                           double *loss, bv_error *err);
/* Every layer's blobs (layer_engine.h's names), from the stages that own them. */
bv_status bv_seq_pipe_get_state(bv_seq_pipe *p, bv_state *s, bv_error *err);
bv_status bv_seq_pipe_set_state(bv_seq_pipe *p, const bv_state *s, bv_error *err);
/* Bamboo's replicas checked against their originals: how many stages keep one, and how
 * many of those equal the original to the bit (a difference is logged, naming both). */
bv_status bv_seq_pipe_replicas(bv_seq_pipe *p, int *replicas, int *equal, bv_error *err);
/* CRC-32C over every owned parameter in layer order (the layer engine's order). */
bv_status bv_seq_pipe_crc32c(bv_seq_pipe *p, uint32_t *crc, bv_error *err);

/* A profiling pass (pipeline_profile.c): every layer's forward and backward seconds on
 * one microbatch (the median of `reps` passes after one to warm up) and the bytes it
 * holds, with a stage's share of the cores. cost has one entry per model layer. */
typedef struct bv_seq_layer_cost {
    double forward, backward, bytes;
} bv_seq_layer_cost;
bv_status bv_seq_pipe_profile(const bv_seq_pipe_cfg *cfg, int reps, bv_seq_layer_cost *cost,
                              size_t layers, bv_error *err);
/* partition: balanced: the stages' spans cut from a profiling pass so that the costliest
 * stage (forward + backward, the embeddings on the first, the head on the last) costs as
 * little as it can; *stage_cost (if not NULL, cfg->stages entries) gets each stage's. */
bv_status bv_seq_pipe_balance(bv_seq_pipe_cfg *cfg, bv_seq_layer_cost *stage_cost,
                              bv_error *err);

/* ---- inside: one stage, the thread's body (pipeline_stage.c) ---- */
/* The compute instance of one of `stages` stages in this process: `threads: 0` (every
 * core) gives each its share of the cores instead of all of them. */
bv_compute *bv_seq_stage_compute(const bv_experiment *x, int stages, bv_error *err);
typedef struct bv_seq_stage_arg {
    const bv_seq_pipe_cfg *cfg;
    const char *const *addrs; /* every node's inbox */
    void *transport;          /* bv_transport * */
    int stage, pipeline;
    atomic_bool gone; /* set if the thread ended without its inbox (no answer will come) */
    /* a process over tcp: where the book's addresses are kept, so the stage can fill in
     * its peers' from the coordinator's BOOK after its HELLO; NULL otherwise */
    char (*addr_store)[96];
    /* a process's sends are sliced (bv_stage_link_slice_sends) up to this bound */
    bool sliced;
    int send_bound_ms;
    /* a stage adopted by its shadow's process after a failover: its layers and its own
     * replica's (the thread frees it), and the ADOPT command's step, which it answers
     * when its inbox is bound and the state set; NULL otherwise */
    bv_state *adopt;
    int64_t adopt_step;
    bool adopted;
    atomic_int bound; /* adopted: 1 once the inbox is bound, -1 if it could not be */
} bv_seq_stage_arg;

void *bv_seq_stage_main(void *arg);

/* Reads the book the coordinator wrote: the layout (P, D, M) into cfg, every node's
 * address (the coordinator's last) into *addr (allocated: the caller frees it), each
 * stage's layers into cfg's spans, and every stage's schedule into cfg->sched
 * (bv_seq_pipe_cfg_free frees it). */
bv_status bv_seq_pipe_read_book(const char *path, bv_seq_pipe_cfg *cfg, char (**addr)[96],
                                bv_error *err);

/* `bivouac role --role stage`: node `index` of a pipeline run as this process, its
 * coordinator's and peers' addresses in the book the coordinator wrote; returns when the
 * coordinator says stop. member (cluster.membership: etcd; NULL: none) is its key in etcd
 * (membership.h): it keeps a lease on it and watches the coordinator's, and stops when
 * either runs out. */
bv_status bv_seq_serve_stage(const bv_experiment *x, void *corpus, int index, uint64_t seed,
                             const char *book, const char *member, bv_error *err);

#endif
