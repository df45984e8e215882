/* Pipeline schedules as data: the generators and the simulation (schedule_gen.h). */
#include "schedule_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool bv_schedule_kind_parse(const char *name, bv_schedule_kind *out)
{
    if (strcmp(name, "1f1b") == 0)
        *out = BV_SCHEDULE_1F1B;
    else if (strcmp(name, "gpipe") == 0)
        *out = BV_SCHEDULE_GPIPE;
    else
        return false;
    return true;
}

const char *bv_schedule_kind_name(bv_schedule_kind kind)
{
    return kind == BV_SCHEDULE_GPIPE ? "gpipe" : "1f1b";
}

/* ---- generating ---- */

typedef struct gen {
    int stage, stages;
    bv_schedule *out;
    bv_error *err;
    bv_status st;
} gen;

static void emit(gen *g, bv_instruction_op op, int microbatch, int peer)
{
    if (g->st != BV_OK)
        return;
    bv_instruction ins = {.op = (uint32_t)op, .microbatch = microbatch, .stage = g->stage,
                          .peer = peer, .version = -1};
    g->st = bv_schedule_append(g->out, &ins, sizeof ins, g->err);
}

/* A microbatch's forward on this stage: its input from the stage before, its output to
 * the stage after. */
static void forward(gen *g, int mb)
{
    if (g->stage > 0)
        emit(g, BV_INSTR_RECV_ACT, mb, g->stage - 1);
    emit(g, BV_INSTR_FORWARD, mb, -1);
    if (g->stage < g->stages - 1)
        emit(g, BV_INSTR_SEND_ACT, mb, g->stage + 1);
}

/* Its backward: the gradient of the output from the stage after, that of the input to the
 * stage before. */
static void backward(gen *g, int mb)
{
    if (g->stage < g->stages - 1)
        emit(g, BV_INSTR_RECV_GRAD, mb, g->stage + 1);
    emit(g, BV_INSTR_BACKWARD, mb, -1);
    if (g->stage > 0)
        emit(g, BV_INSTR_SEND_GRAD, mb, g->stage - 1);
}

bv_status bv_schedule_generate(bv_schedule_kind kind, int stage, int stages, int microbatches,
                               bv_schedule *out, bv_error *err)
{
    if (stages < 1 || stage < 0 || stage >= stages || microbatches < 1)
        return bv_error_set(err, BV_ERR_INVALID, "no stage %d of %d stages with %d "
                            "microbatches", stage, stages, microbatches);
    gen g = {stage, stages, out, err, BV_OK};
    int m = microbatches;
    out->stage = stage;
    out->stages = stages;
    out->microbatches = microbatches;
    if (kind == BV_SCHEDULE_GPIPE) {
        for (int i = 0; i < m; i++)
            forward(&g, i);
        for (int i = m - 1; i >= 0; i--)
            backward(&g, i);
    } else {
        /* warm-up: enough forwards that the last stage's first backward can come back
         * just as this stage is ready for it; then one forward, one backward; then the
         * backwards left */
        int warm = stages - stage - 1 < m ? stages - stage - 1 : m;
        for (int i = 0; i < warm; i++)
            forward(&g, i);
        for (int j = 0; j < m - warm; j++) {
            forward(&g, warm + j);
            backward(&g, j);
        }
        for (int j = m - warm; j < m; j++)
            backward(&g, j);
    }
    emit(&g, BV_INSTR_UPDATE, -1, -1);
    return g.st;
}

/* ---- simulating ---- */

void bv_instruction_label(const bv_instruction *ins, char *buf, size_t len)
{
    switch ((bv_instruction_op)ins->op) {
    case BV_INSTR_FORWARD: snprintf(buf, len, "F%d", ins->microbatch); break;
    case BV_INSTR_BACKWARD: snprintf(buf, len, "B%d", ins->microbatch); break;
    case BV_INSTR_SEND_ACT: snprintf(buf, len, "SA%d>%d", ins->microbatch, ins->peer); break;
    case BV_INSTR_RECV_ACT: snprintf(buf, len, "RA%d<%d", ins->microbatch, ins->peer); break;
    case BV_INSTR_SEND_GRAD: snprintf(buf, len, "SG%d>%d", ins->microbatch, ins->peer); break;
    case BV_INSTR_RECV_GRAD: snprintf(buf, len, "RG%d<%d", ins->microbatch, ins->peer); break;
    case BV_INSTR_UPDATE: snprintf(buf, len, "U"); break;
    case BV_INSTR_REDUNDANT_FORWARD:
        snprintf(buf, len, "FR%d.%d", ins->microbatch, ins->stage);
        break;
    case BV_INSTR_REDUNDANT_BACKWARD:
        snprintf(buf, len, "BR%d.%d", ins->microbatch, ins->stage);
        break;
    case BV_INSTR_REPLICA_SEND: snprintf(buf, len, "RS>%d", ins->peer); break;
    case BV_INSTR_REPLICA_UPDATE: snprintf(buf, len, "RU%d<%d", ins->stage, ins->peer); break;
    default: snprintf(buf, len, "?%u", ins->op); break;
    }
}

/* A message in flight: sent (its SEND ended at `at`), not yet received. */
typedef struct sent {
    uint32_t op; /* BV_INSTR_SEND_ACT or BV_INSTR_SEND_GRAD */
    int from, to, microbatch;
    double at;
    bool taken;
} sent;

static double own_cost(const bv_instruction *ins, const bv_schedule_costs *c)
{
    switch ((bv_instruction_op)ins->op) {
    case BV_INSTR_FORWARD:
    case BV_INSTR_REDUNDANT_FORWARD: return c->forward;
    case BV_INSTR_BACKWARD:
    case BV_INSTR_REDUNDANT_BACKWARD: return c->backward;
    case BV_INSTR_SEND_ACT:
    case BV_INSTR_SEND_GRAD: return c->send;
    case BV_INSTR_UPDATE: return c->update;
    default: return 0;
    }
}

static bool is_compute(uint32_t op)
{
    return op == BV_INSTR_FORWARD || op == BV_INSTR_BACKWARD || op == BV_INSTR_UPDATE ||
           op == BV_INSTR_REDUNDANT_FORWARD || op == BV_INSTR_REDUNDANT_BACKWARD;
}

void bv_schedule_timeline_free(bv_schedule_timeline *t)
{
    for (int s = 0; t->slot && s < t->stages; s++)
        free(t->slot[s]);
    free(t->slot);
    free(t->count);
    free(t->max_held);
    memset(t, 0, sizeof *t);
}

/* The send a receive waits for, if it has run: the oldest of its kind, pair and
 * microbatch not yet taken. */
static sent *find_sent(sent *q, size_t n, const bv_instruction *recv, int stage)
{
    uint32_t want = recv->op == BV_INSTR_RECV_ACT ? BV_INSTR_SEND_ACT : BV_INSTR_SEND_GRAD;
    for (size_t k = 0; k < n; k++)
        if (!q[k].taken && q[k].op == want && q[k].from == recv->peer && q[k].to == stage &&
            q[k].microbatch == recv->microbatch)
            return &q[k];
    return NULL;
}

bv_status bv_schedule_simulate(const bv_schedule *sched, int stages,
                               const bv_schedule_costs *cost, bv_schedule_timeline *out,
                               bv_error *err)
{
    memset(out, 0, sizeof *out);
    out->stages = stages;
    out->slot = calloc((size_t)stages, sizeof *out->slot);
    out->count = calloc((size_t)stages, sizeof *out->count);
    out->max_held = calloc((size_t)stages, sizeof *out->max_held);
    size_t *pc = calloc((size_t)stages, sizeof *pc), total = 0;
    double *now = calloc((size_t)stages, sizeof *now);
    int *held = calloc((size_t)stages, sizeof *held);
    bv_status st = BV_OK;
    if (!out->slot || !out->count || !out->max_held || !pc || !now || !held)
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory simulating a schedule");
    for (int s = 0; st == BV_OK && s < stages; s++) {
        out->count[s] = sched[s].count;
        total += sched[s].count;
        if (!(out->slot[s] = calloc(sched[s].count + 1, sizeof **out->slot)))
            st = bv_error_set(err, BV_ERR_NOMEM, "out of memory simulating a schedule");
    }
    sent *q = st == BV_OK ? calloc(total + 1, sizeof *q) : NULL;
    size_t nq = 0;
    if (st == BV_OK && !q)
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory simulating a schedule");
    for (bool moved = true; st == BV_OK && moved;) {
        moved = false;
        for (int s = 0; st == BV_OK && s < stages; s++) {
            while (pc[s] < sched[s].count) {
                const bv_instruction *ins = bv_schedule_at(&sched[s], pc[s]);
                bool comm = ins->op >= BV_INSTR_SEND_ACT && ins->op <= BV_INSTR_RECV_GRAD;
                if (comm && (ins->peer < 0 || ins->peer >= stages || ins->peer == s)) {
                    char what[32];
                    bv_instruction_label(ins, what, sizeof what);
                    st = bv_error_set(err, BV_ERR_INVALID, "stage %d, instruction %zu (%s): "
                                      "no stage %d to talk to", s, pc[s], what, ins->peer);
                    break;
                }
                double start = now[s];
                if (ins->op == BV_INSTR_RECV_ACT || ins->op == BV_INSTR_RECV_GRAD) {
                    sent *m = find_sent(q, nq, ins, s);
                    if (!m)
                        break; /* not yet: the other stages go on */
                    m->taken = true;
                    start = m->at > start ? m->at : start;
                }
                double end = start + own_cost(ins, &cost[s]);
                if (ins->op == BV_INSTR_SEND_ACT || ins->op == BV_INSTR_SEND_GRAD)
                    q[nq++] = (sent){ins->op, s, ins->peer, ins->microbatch, end, false};
                if (ins->op == BV_INSTR_FORWARD && ++held[s] > out->max_held[s])
                    out->max_held[s] = held[s];
                if (ins->op == BV_INSTR_BACKWARD)
                    held[s]--;
                out->slot[s][pc[s]] = (bv_schedule_slot){start, end};
                now[s] = end;
                pc[s]++;
                moved = true;
            }
        }
    }
    for (int s = 0; st == BV_OK && s < stages; s++)
        if (pc[s] < sched[s].count) {
            char what[32];
            bv_instruction_label(bv_schedule_at(&sched[s], pc[s]), what, sizeof what);
            st = bv_error_set(err, BV_ERR_INVALID, "stage %d waits forever at instruction "
                              "%zu (%s): nothing it waits for is ever sent", s, pc[s], what);
        }
    for (size_t k = 0; st == BV_OK && k < nq; k++)
        if (!q[k].taken)
            st = bv_error_set(err, BV_ERR_INVALID, "stage %d sends %s of microbatch %d to "
                              "stage %d, which never receives it", q[k].from,
                              q[k].op == BV_INSTR_SEND_ACT ? "activations" : "gradients",
                              q[k].microbatch, q[k].to);
    double busy = 0;
    for (int s = 0; st == BV_OK && s < stages; s++)
        for (size_t i = 0; i < sched[s].count; i++) {
            const bv_schedule_slot *sl = &out->slot[s][i];
            out->makespan = sl->end > out->makespan ? sl->end : out->makespan;
            if (is_compute(bv_schedule_at(&sched[s], i)->op))
                busy += sl->end - sl->start;
        }
    if (st == BV_OK && out->makespan > 0)
        out->bubble = 1.0 - busy / ((double)stages * out->makespan);
    free(q);
    free(pc);
    free(now);
    free(held);
    if (st != BV_OK)
        bv_schedule_timeline_free(out);
    return st;
}
