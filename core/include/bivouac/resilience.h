/* The resilience plugin kind: hooks at fixed points of both engines: before a task runs,
 * at the end of a step or epoch, on a peer's failure, on a join, and on a schedule.
 * Checkpointing uses the end of an epoch and restore; bounded staleness (before_task,
 * set_knob) and redundant computation (schedule) use the later hooks. Every slot after
 * destroy is optional (NULL). */
#ifndef BIVOUAC_RESILIENCE_H
#define BIVOUAC_RESILIENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"
#include "bivouac/model.h" /* bv_engine_kind */
#include "bivouac/options.h"
#include "bivouac/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A named piece of training state (a weight matrix, Adam moments, the RNG, the epoch...). */
typedef struct bv_blob {
    char *name;
    void *data;
    size_t size;
} bv_blob;

/* The whole training state at the end of an epoch, as the engine lays it out. */
typedef struct bv_state {
    int64_t epoch; /* epochs completed */
    bv_blob *blobs;
    size_t count;
} bv_state;

/* Frees every blob's name and data, and the array (for states a plugin returned). */
void bv_state_free(bv_state *s);
/* Finds a blob by name; NULL if absent. */
const bv_blob *bv_state_find(const bv_state *s, const char *name);
/* Appends a copy of size bytes under name. BV_ERR_NOMEM leaves s as it was. */
bv_status bv_state_add(bv_state *s, const char *name, const void *data, size_t size);
/* Copies blob `name` into out if it exists and is exactly size bytes; else false. */
bool bv_state_read(const bv_state *s, const char *name, void *out, size_t size);

/* What a resilience plugin knows about the run. */
typedef struct bv_run_info {
    const char *out_dir;    /* the run's output directory (exists) */
    const char *config_dir; /* directory of the experiment YAML (for relative paths) */
    uint64_t seed;
} bv_run_info;

typedef struct bv_resilience bv_resilience;

/* ---- ABI 1.4: what the new hooks are told. Each struct starts with its size (the core's
 * sizeof): a plugin reads a field only when size covers it. ---- */

typedef enum bv_task_kind {
    BV_TASK_TENSOR_FORWARD = 1,  /* graph: AV/AE forward on an interval */
    BV_TASK_TENSOR_BACKWARD = 2, /* graph: their backward */
    BV_TASK_GATHER = 3,          /* graph: GA or its backward on the graph server */
    BV_TASK_WEIGHT_UPDATE = 4,   /* both: the optimizer step */
    BV_TASK_INSTRUCTION = 5,     /* sequence/pipeline: one bv_instruction (schedule.h) */
    BV_TASK_LOSS = 6             /* graph (ABI 1.11): the loss on an interval */
} bv_task_kind;

/* The task or instruction about to run. */
typedef struct bv_task_info {
    size_t size;
    bv_engine_kind engine;
    uint32_t kind;       /* bv_task_kind */
    int64_t epoch;       /* graph: 0-based epoch; sequence: -1 */
    int64_t step;        /* sequence: 0-based step; graph: -1 */
    int64_t stage;       /* graph: stage index; pipeline: stage; -1: none */
    int64_t interval;    /* graph: vertex interval; -1: none */
    int64_t microbatch;  /* pipeline: microbatch; -1: none */
    uint32_t instruction; /* BV_TASK_INSTRUCTION: the bv_instruction_op */
    /* ABI 1.11, graph engine (the graph server asks for every task of a training pass it
     * runs interval by interval: docs/staleness.md). */
    int32_t backward;    /* 1: the task belongs to the backward pass */
    /* A forward GATHER: the oldest epoch of the neighbour rows it would read now (an
     * in-neighbour interval that has not yet produced this epoch's rows offers those of
     * an earlier pass; -1: rows no pass wrote yet). Every other task: its own epoch. */
    int64_t input_epoch;
    /* The graph server's intervals that have not yet finished the step before this one
     * (0: the task would run after a barrier). */
    int64_t waiting;
    /* The epoch of the graph server's slowest interval: a task of a later epoch belongs to
     * an interval that would run ahead into the next epoch (Dorylus's bound S on how far
     * apart intervals may be). */
    int64_t slowest_epoch;
} bv_task_info;

/* The answer of before_task. The core fills the defaults (run now, latest weights). */
typedef struct bv_task_decision {
    size_t size;
    bool run_now;           /* false: the engine retries the task later */
    int64_t weight_version; /* weights to run with; -1: the latest (Dorylus §5.2 bounds
                             * how stale a version may be) */
} bv_task_decision;

/* A peer that failed (preempted, timed out) or joined. */
typedef struct bv_peer_event {
    size_t size;
    const char *role;    /* "graph", "tensor", "param", "stage", ... */
    int64_t id;          /* the node id (cloud.h) */
    const char *address; /* its transport address; NULL if unknown */
    double time;         /* seconds since the run started */
} bv_peer_event;

typedef struct bv_resilience_ops {
    bv_resilience *(*create)(const bv_opts *opts, const bv_run_info *info, bv_error *err);
    /* Finishes pending work (e.g. a checkpoint being written) and joins its threads. */
    void (*destroy)(bv_resilience *r);

    /* The end of a step or epoch: called at the end of each epoch (graph engine) or at
     * each evaluation step (sequence engine) with the live state. A plugin that keeps it must copy it
     * before returning (the engine goes on changing it); it must not hold training up for
     * longer than that copy. */
    bv_status (*epoch_end)(bv_resilience *r, const bv_state *state, bv_error *err);

    /* Resume: fills out with the newest state that passes its checks. Damaged ones are
     * reported with bv_log(BV_LOG_WARN, ...) and skipped. BV_ERR_IO with a message if
     * there is none. May be NULL for plugins that keep no state. */
    bv_status (*restore)(bv_resilience *r, bv_state *out, bv_error *err);

    /* ---- ABI 1.4, all optional. The core reads the table through a copy (registry) in
     * which a NULL hook is a no-op returning BV_OK (restore stays NULL: "keeps no state").
     * The graph engine calls before_task (the staleness plugin), the pipeline engine
     * schedule (redundancy), the training loop peer_failed. */

    /* Before a task (graph engine) or an instruction (pipeline engine) runs: may it run
     * now, and with which weight version? out arrives filled with the defaults. */
    bv_status (*before_task)(bv_resilience *r, const bv_task_info *task,
                             bv_task_decision *out, bv_error *err);
    /* A peer failed; the plugin may rebuild its own state (Bamboo: the redundant stage
     * takes over). */
    bv_status (*peer_failed)(bv_resilience *r, const bv_peer_event *peer, bv_error *err);
    /* A node joined (a replacement, or more capacity). */
    bv_status (*peer_joined)(bv_resilience *r, const bv_peer_event *peer, bv_error *err);
    /* The pipeline engine's schedule for the next step, before it runs: the plugin may
     * append instructions (bv_schedule_append), e.g. Bamboo's redundant forward. */
    bv_status (*schedule)(bv_resilience *r, bv_schedule *s, bv_error *err);

    /* ---- ABI 1.11, optional ---- */
    /* A policy's `set = {["<plugin>.<knob>"] = value}` at an epoch boundary, with the
     * part after the dot: BV_ERR_INVALID with a message if the plugin has no such knob or
     * the value is out of its range. Called on every instance of the plugin (the graph
     * server's too), before the next epoch. NULL: the plugin has no knobs. */
    bv_status (*set_knob)(bv_resilience *r, const char *name, double value, bv_error *err);
} bv_resilience_ops;

#ifdef __cplusplus
}
#endif
#endif
