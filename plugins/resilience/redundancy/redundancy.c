/* The `redundancy` resilience strategy (Bamboo §3, §5; docs/redundancy.md): every stage of
 * a pipeline keeps a replica of the next stage's layers (the last stage of the first's),
 * kept equal to them at every step: after its optimizer step, a stage sends the gradients
 * it used to the stage before, which steps the replica with them (REPLICA_SEND, then
 * REPLICA_UPDATE there). With `mode: eflb` (eager forward, lazy backward: Bamboo's
 * default) a stage also runs the next stage's forward on every microbatch it sends it
 * (REDUNDANT_FORWARD), placed where the stage would otherwise wait for a peer (before its
 * next receive: the bubble; on the last stage, whose replica's forward needs nothing
 * received, at the start and before UPDATE; on the others, in 1F1B's cooldown, before the
 * receive of the microbatch's gradient), and keeps that forward's saved activations for
 * the step;
 * `efeb` (eager forward, eager backward) also runs the next stage's backward on every
 * microbatch, on the output gradient the stage after it sends here too (a second
 * SEND_GRAD there, a RECV_GRAD naming the replica's stage here); `lflb` only keeps the
 * replica. All of it is instructions added to the schedules the pipeline engine
 * generated: the engine does not know the modes. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/plugin.h"
#include "bivouac/resilience.h"
#include "bivouac/schedule.h"

struct bv_resilience {
    bool eager;          /* eflb, efeb: the redundant forward on every microbatch */
    bool eager_backward; /* efeb: and the redundant backward */
};

static bv_resilience *redundancy_create(const bv_opts *opts, const bv_run_info *info,
                                        bv_error *err)
{
    (void)info;
    bv_resilience *r = calloc(1, sizeof *r);
    if (!r) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    const char *mode = bv_opts_str(opts, "mode");
    r->eager_backward = strcmp(mode, "efeb") == 0;
    r->eager = r->eager_backward || strcmp(mode, "eflb") == 0;
    return r;
}

static void redundancy_destroy(bv_resilience *r)
{
    free(r);
}

/* Where a stage waits for a peer (or for all of them): the bubble starts there. */
static bool waits(uint32_t op)
{
    return op == BV_INSTR_RECV_ACT || op == BV_INSTR_RECV_GRAD || op == BV_INSTR_UPDATE;
}

/* The first instruction at or after `from` with op `op` on microbatch mb (count: none). */
static size_t find(const bv_schedule *s, size_t from, uint32_t op, int mb)
{
    size_t i = from;
    while (i < s->count && (bv_schedule_at(s, i)->op != op ||
                            bv_schedule_at(s, i)->microbatch != mb))
        i++;
    return i;
}

/* efeb, Bamboo's eager backward: this stage runs the next stage's backward on each
 * microbatch (REDUNDANT_BACKWARD), and sends its own input gradients a second time, to the
 * stage two before, whose replica's backward needs them. Where the replica's output
 * gradient comes from:
 *   - the replica is the last stage: its loss; run before this stage's own RECV_GRAD of
 *     the microbatch (the bubble while the gradient comes back);
 *   - two stages: this stage's own input gradient; run after its own BACKWARD;
 *   - else the stage after the replica sends it (RECV_GRAD naming the replica's stage),
 *     before this stage's own RECV_GRAD; on the last stage (replica of the first), whose
 *     gradients come back last, all of them before UPDATE;
 * and always after the replica's forward of the microbatch. */
static bv_status eager_backward(bv_schedule *s, bv_error *err)
{
    int P = s->stages, st = s->stage, next = (st + 1) % P;
    bv_status rc = BV_OK;
    int to = (st + P - 2) % P; /* whose replica's output gradient this stage computes */
    if (P > 2 && st != 0)
        for (size_t i = 0; rc == BV_OK && i < s->count; i++) {
            const bv_instruction *ins = bv_schedule_at(s, i);
            if (ins->op != BV_INSTR_SEND_GRAD)
                continue;
            bv_instruction again = {BV_INSTR_SEND_GRAD, ins->microbatch, st, to, -1};
            rc = bv_schedule_insert(s, ++i, &again, sizeof again, err);
        }
    for (int mb = 0; rc == BV_OK && mb < s->microbatches; mb++) {
        bv_instruction rb = {BV_INSTR_REDUNDANT_BACKWARD, mb, next, -1, -1};
        bv_instruction recv = {BV_INSTR_RECV_GRAD, mb, next, (st + 2) % P, -1};
        bool loss = next == P - 1, two = P == 2;
        size_t at = two ? find(s, 0, BV_INSTR_BACKWARD, mb) + 1
                  : st == P - 1 ? find(s, 0, BV_INSTR_UPDATE, -1)
                                : find(s, 0, BV_INSTR_RECV_GRAD, mb);
        size_t after_forward = find(s, 0, BV_INSTR_REDUNDANT_FORWARD, mb) + 1;
        if (at < after_forward) /* from the replica's saved activations of mb */
            at = after_forward;
        if (at > s->count)
            at = s->count;
        if (!loss && !two)
            rc = bv_schedule_insert(s, at++, &recv, sizeof recv, err);
        if (rc == BV_OK)
            rc = bv_schedule_insert(s, at, &rb, sizeof rb, err);
    }
    return rc;
}

/* eflb on the last stage, whose replica is the first stage: that forward reads the
 * microbatch's tokens and nothing received, so it need not follow this stage's own
 * forward. It goes where this stage waits: the first P - 1 microbatches' at the start
 * (while the first microbatch crosses the P - 1 stages before), the others before UPDATE
 * (while the stages before finish their backwards). After its own forwards, as before,
 * they took the bubble from nobody and lengthened the step by four forwards at M = 4. */
static bv_status last_stage_forwards(bv_schedule *s, bv_error *err)
{
    int M = s->microbatches, early = M < s->stages - 1 ? M : s->stages - 1;
    bv_status rc = BV_OK;
    for (int mb = 0; rc == BV_OK && mb < M; mb++) {
        bv_instruction rf = {BV_INSTR_REDUNDANT_FORWARD, mb, 0, -1, -1};
        size_t at = mb < early ? (size_t)mb : find(s, 0, BV_INSTR_UPDATE, -1);
        rc = bv_schedule_insert(s, at, &rf, sizeof rf, err);
    }
    return rc;
}

/* eflb on a stage before the last: cool[mb] for the microbatches whose output gradient
 * this stage receives after its last forward (1F1B's cooldown, where it waits for the
 * stages after it to send their gradients back). Their redundant forwards go right before
 * those receives, into that wait, rather than right after their own forwards, where the
 * stage is busy: the forward's output is still in its slot there, since no forward comes
 * after the last one and the microbatch's own backward comes after the receive. */
static void cooldown_forwards(const bv_schedule *s, bool *cool)
{
    size_t last_forward = s->count;
    for (size_t i = 0; i < s->count; i++)
        if (bv_schedule_at(s, i)->op == BV_INSTR_FORWARD)
            last_forward = i;
    for (size_t i = last_forward; s->stage < s->stages - 1 && i < s->count; i++) {
        const bv_instruction *ins = bv_schedule_at(s, i);
        if (ins->op == BV_INSTR_RECV_GRAD && ins->microbatch >= 0 &&
            ins->microbatch < s->microbatches)
            cool[ins->microbatch] = true;
    }
}

static bv_status redundancy_schedule(bv_resilience *r, bv_schedule *s, bv_error *err)
{
    if (s->size < offsetof(bv_schedule, microbatches) + sizeof s->microbatches)
        return bv_error_set(err, BV_ERR_PLUGIN, "redundancy needs a core of plugin ABI 1.9 "
                            "(the schedule's stage and stage count)");
    if (s->stages < 2) /* one stage: nobody to take over for */
        return BV_OK;
    int next = (s->stage + 1) % s->stages, prev = (s->stage + s->stages - 1) % s->stages;
    bv_status st = BV_OK;
    /* efeb's redundant backwards stay placed after the forwards they follow */
    bool eflb = r->eager && !r->eager_backward, last = eflb && s->stage == s->stages - 1;
    if (last)
        st = last_stage_forwards(s, err);
    bool *cool = calloc((size_t)(s->microbatches > 0 ? s->microbatches : 1), sizeof *cool);
    if (!cool)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (eflb)
        cooldown_forwards(s, cool);
    for (size_t i = 0; r->eager && !last && st == BV_OK && i < s->count; i++) {
        const bv_instruction *ins = bv_schedule_at(s, i);
        if (ins->op != BV_INSTR_FORWARD ||
            (ins->microbatch >= 0 && ins->microbatch < s->microbatches && cool[ins->microbatch]))
            continue;
        bv_instruction rf = {BV_INSTR_REDUNDANT_FORWARD, ins->microbatch, next, -1, -1};
        size_t j = i + 1;
        while (j < s->count && !waits(bv_schedule_at(s, j)->op))
            j++;
        st = bv_schedule_insert(s, j, &rf, sizeof rf, err);
        /* on from the next instruction: forwards before that wait get theirs too (after
         * this one), and the one put in is passed over as not a FORWARD */
    }
    for (int mb = 0; st == BV_OK && mb < s->microbatches; mb++)
        if (cool[mb]) {
            bv_instruction rf = {BV_INSTR_REDUNDANT_FORWARD, mb, next, -1, -1};
            st = bv_schedule_insert(s, find(s, 0, BV_INSTR_RECV_GRAD, mb), &rf, sizeof rf, err);
        }
    free(cool);
    if (st == BV_OK && r->eager_backward)
        st = eager_backward(s, err);
    bv_instruction send = {BV_INSTR_REPLICA_SEND, -1, s->stage, prev, -1};
    bv_instruction update = {BV_INSTR_REPLICA_UPDATE, -1, next, next, -1};
    if (st == BV_OK)
        st = bv_schedule_append(s, &send, sizeof send, err);
    if (st == BV_OK)
        st = bv_schedule_append(s, &update, sizeof update, err);
    return st;
}

static const bv_resilience_ops redundancy_ops = {
    .create = redundancy_create,
    .destroy = redundancy_destroy,
    .schedule = redundancy_schedule,
};

static const bv_option redundancy_options[] = {
    BV_OPT_CHOICE("mode", "eflb", "eflb|lflb|efeb",
                  "eflb: the next stage's forward run here on every microbatch (eager), its "
                  "backward only after a failure (lazy); efeb: its backward too (eager); "
                  "lflb: only the replica kept"),
    BV_OPT_END,
};

static const bv_plugin redundancy_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_RESILIENCE, "redundancy", "0.1.0",
                     "Bamboo's redundant computation: each pipeline stage keeps the next "
                     "stage's layers and runs its forward (efeb: and backward) in the "
                     "bubble"),
    .options = redundancy_options,
    .ops = &redundancy_ops,
    .ops_size = sizeof redundancy_ops,
};

BV_PLUGIN_ENTRY(resilience, redundancy, redundancy_plugin)
