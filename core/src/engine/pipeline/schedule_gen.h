/* Pipeline schedules as data (issue 14; Bamboo §2, Figure 6; PipeDream-flush and GPipe):
 * the instruction list one stage of a P-stage pipeline runs for one step of M
 * microbatches, generated from (kind, stage, P, M) alone, so every stage's process derives
 * its own and resilience plugins can merge or rewrite them (bivouac/schedule.h); and a
 * simulation of all stages' lists together, which checks that they fit (every receive
 * meets its send, nothing deadlocks) and times them with given costs: the timeline that
 * `bivouac schedule` prints and draws, and the bubble. */
#ifndef BIVOUAC_ENGINE_PIPELINE_SCHEDULE_GEN_H
#define BIVOUAC_ENGINE_PIPELINE_SCHEDULE_GEN_H

#include <stdbool.h>
#include <stddef.h>

#include "bivouac/error.h"
#include "bivouac/schedule.h"

typedef enum bv_schedule_kind {
    /* one forward, one backward (PipeDream-flush, DeepSpeed's TrainSchedule): stage s
     * runs P - s - 1 forwards ahead, then alternates, then drains; at most P - s
     * microbatches' activations held at once */
    BV_SCHEDULE_1F1B,
    /* every forward, then every backward, last microbatch first (GPipe): all M held */
    BV_SCHEDULE_GPIPE,
} bv_schedule_kind;

/* "1f1b" or "gpipe"; false for anything else. */
bool bv_schedule_kind_parse(const char *name, bv_schedule_kind *out);
const char *bv_schedule_kind_name(bv_schedule_kind kind);

/* Appends stage `stage` of `stages`'s instructions for one step of `microbatches`
 * microbatches to out (bv_schedule_init'ed): for each microbatch RECV_ACT (but the first
 * stage), FORWARD, SEND_ACT (but the last), and RECV_GRAD (but the last), BACKWARD,
 * SEND_GRAD (but the first) in the kind's order, then UPDATE. peer is the other stage's
 * index. */
bv_status bv_schedule_generate(bv_schedule_kind kind, int stage, int stages, int microbatches,
                               bv_schedule *out, bv_error *err);

/* One instruction's place in time. */
typedef struct bv_schedule_slot {
    double start, end;
} bv_schedule_slot;

/* Costs of one stage's instructions, in any time unit. */
typedef struct bv_schedule_costs {
    double forward, backward, send, update;
} bv_schedule_costs;

typedef struct bv_schedule_timeline {
    int stages;
    bv_schedule_slot **slot; /* slot[s][i]: instruction i of stage s */
    size_t *count;           /* instructions of stage s */
    double makespan;         /* the last instruction's end */
    double bubble;           /* the share of stage-time not spent computing */
    int *max_held;           /* per stage: the most microbatches whose activations it held */
} bv_schedule_timeline;

/* Runs the stages' schedules together: an instruction starts when its stage's previous one
 * ended and, for a RECV, when the matching SEND (same microbatch, kind and pair of stages)
 * ended; a SEND does not wait (the transport queues it). cost[s] is stage s's. BV_OK and
 * *out filled when every instruction ran; else err names the first stage that cannot go
 * on and the instruction it waits in (a deadlock, or a receive nobody sends), or a send
 * nobody receives. */
bv_status bv_schedule_simulate(const bv_schedule *sched, int stages,
                               const bv_schedule_costs *cost, bv_schedule_timeline *out,
                               bv_error *err);
void bv_schedule_timeline_free(bv_schedule_timeline *t);

/* "F3", "B0", "SA3>2", "RA3<0", "SG0>0", "RG0<2", "U": an instruction in a few letters. */
void bv_instruction_label(const bv_instruction *ins, char *buf, size_t len);

#endif
