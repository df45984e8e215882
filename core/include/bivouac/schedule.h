/* A schedule: the list of instructions a pipeline stage runs for one step (forward and
 * backward of a microbatch, sends and receives between stages, the weight update).
 * The pipeline engine builds it; resilience plugins may append to it (resilience.h). */
#ifndef BIVOUAC_SCHEDULE_H
#define BIVOUAC_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "bivouac/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bv_instruction_op {
    BV_INSTR_FORWARD = 1,   /* run the stage's forward on a microbatch */
    BV_INSTR_BACKWARD = 2,  /* its backward */
    BV_INSTR_SEND_ACT = 3,  /* send a microbatch's activations to `peer` */
    BV_INSTR_RECV_ACT = 4,  /* receive them from `peer` */
    BV_INSTR_SEND_GRAD = 5, /* send the input gradients to `peer` */
    BV_INSTR_RECV_GRAD = 6,
    BV_INSTR_UPDATE = 7,    /* the optimizer step of the stage's weights */
    /* Bamboo §4: forward of `stage` (a neighbour's layers) run redundantly here, so the
     * neighbour's work survives its preemption. */
    BV_INSTR_REDUNDANT_FORWARD = 8,
    BV_INSTR_REDUNDANT_BACKWARD = 9,
    /* ABI 1.9, Bamboo's replicas: after UPDATE, send the gradients the stage's own
     * optimizer step used (clipped) to `peer`, which keeps a replica of its layers ... */
    BV_INSTR_REPLICA_SEND = 10,
    /* ... and there: receive stage `stage`'s from `peer` and step the replica with them,
     * so it stays equal to the original (weights and optimizer moments) at every step */
    BV_INSTR_REPLICA_UPDATE = 11
} bv_instruction_op;

/* One instruction. New fields go at the end; bv_schedule_append takes the caller's
 * sizeof, so a plugin built against an older header still appends correctly. */
typedef struct bv_instruction {
    uint32_t op;        /* bv_instruction_op */
    int32_t microbatch; /* -1: not about one microbatch (UPDATE) */
    int32_t stage;      /* the pipeline stage whose layers it runs */
    int32_t peer;       /* SEND/RECV: the other stage's node id; -1 otherwise */
    int64_t version;    /* weight version to use; -1: the latest */
} bv_instruction;

/* The core owns the array; plugins read it through bv_schedule_at (its element size is
 * the core's, which may be larger than the plugin's sizeof(bv_instruction)). */
typedef struct bv_schedule {
    size_t size;             /* sizeof(bv_schedule) as the core compiled it */
    size_t instruction_size; /* sizeof(bv_instruction) as the core compiled it */
    size_t count;
    size_t cap;
    void *items; /* count elements of instruction_size bytes */
    /* ABI 1.9 (read them when size covers them): whose schedule it is, of how many stages
     * and microbatches a step (-1: not a pipeline stage's) */
    int32_t stage, stages, microbatches;
} bv_schedule;

/* An empty schedule (no allocation until the first append). */
void bv_schedule_init(bv_schedule *s);
void bv_schedule_free(bv_schedule *s);
/* Appends a copy of *ins, whose struct is ins_size bytes (pass sizeof *ins): the fields
 * past ins_size are set to zero, those past the core's size ignored. BV_ERR_NOMEM leaves
 * s as it was. */
bv_status bv_schedule_append(bv_schedule *s, const bv_instruction *ins, size_t ins_size,
                             bv_error *err);
/* ABI 1.9: inserts a copy of *ins before instruction `at` (<= count; count appends), the
 * same way as bv_schedule_append. A resilience plugin's schedule hook uses it to put its
 * instructions where the pipeline has room (Bamboo's redundant forward in the bubble). */
bv_status bv_schedule_insert(bv_schedule *s, size_t at, const bv_instruction *ins,
                             size_t ins_size, bv_error *err);
/* Instruction i (< count), in the core's layout. */
const bv_instruction *bv_schedule_at(const bv_schedule *s, size_t i);

#ifdef __cplusplus
}
#endif
#endif
