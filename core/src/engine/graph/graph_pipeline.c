/* A graph server's training pass interval by interval, under a task gate (Dorylus §4-§5;
 * docs/staleness.md). Every interval runs the same program of steps: each stage's
 * forward, the loss, each stage's backward. Tensor steps are tasks for the interval's
 * worker; gathers run here, on the interval's rows; a step that exists only over every
 * row (an edge stage, a weighted gather's backward) waits for every interval (a barrier).
 * Besides the data each step needs, the engine asks the run's gating strategy
 * (resilience before_task, e.g. the `staleness` plugin) before each step: that is where
 * the modes (no overlap, barriers at gathers, bounded staleness) live. The engine itself
 * never lets a gather read rows a task in flight is writing (a gated pass's forward
 * results are scattered here, on this thread), and never lets a backward gather read a
 * gradient that is not complete.
 *
 * An interval that has finished the pass's epoch may, if the gate lets it, run ahead
 * into the next epoch's forward steps while the others finish (up to its loss: the
 * gradient arrays are the pass's). Its tasks then carry its own epoch (dropout masks) and
 * the weights version its forward read, which its backward uses too, after the update
 * between the epochs has landed: the parameter servers keep that version (weight
 * stashing, Dorylus §5.1). An evaluation while intervals are ahead runs on arrays of its
 * own, so it disturbs none of their rows. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "graph_server.h"

typedef enum step_dir { STEP_FWD = 0, STEP_LOSS = 1, STEP_BWD = 2 } step_dir;

typedef struct step {
    int32_t stage;
    uint8_t dir;   /* step_dir */
    bool local;    /* a gather on this server's thread, on the interval's rows */
    bool whole;    /* over every row at once: after every interval got here */
    bool exchange; /* several graph servers: the boundary rows of the stage's array (dir
                      STEP_BWD: of its gradient) with the other servers; whole */
} step;

struct bv_gs_pipeline {
    int intervals;
    size_t nsteps;
    step *steps;
    size_t *fwd_at, *bwd_at; /* per stage: the index of its forward, backward step */
    /* intervals x intervals: in_nbr[i * K + j], interval j holds an in-neighbour of one
     * of i's rows (what i's forward gathers read); out_nbr, one its backward gathers read */
    bool *in_nbr, *out_nbr;
    int64_t *ver; /* stages x intervals: the epoch in which the rows of interval j of stage
                     s's array were last written; -1: never (zeros) */
    size_t *pos;  /* per interval: its next step (nsteps: done with its epoch) */
    int64_t *epoch_of;    /* per interval: the epoch its program is in (-1: none yet) */
    int64_t *fwd_version; /* per interval: the weights version its forward read */
    bool *busy;   /* per interval: that step is a task in flight */
    bool *held;   /* per interval: the gate held its next step (counted once) */
    int *load;    /* per worker: tasks in flight */
    /* the pass in progress, or the last one between passes */
    bv_task_hdr cmd;
    int finished; /* intervals done with the pass's epoch */
    int inflight;
    loss_ctx lc;  /* 9 loss stats per interval */
    double fig[BV_PIPE_FIGURES];
    double *at_stage; /* per stage: the most intervals at one of its steps at once */
    float **eval_act; /* per stage: an evaluation's own arrays (made when first needed) */
};

static int interval_of(const bv_graph_engine *e, int64_t row)
{
    int lo = 0, hi = e->cfg.intervals - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (e->interval_begin[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Marks nbr[i * K + j] where a row of interval i has an edge to a row of interval j.
 * Ghost rows (several graph servers) belong to no interval: the boundary exchange, a
 * barrier, brings them before any step reads them. */
static void mark_neighbours(const bv_graph_engine *e, const bv_csr *a, bool *nbr)
{
    int k = e->cfg.intervals;
    int64_t owned = e->interval_begin[k];
    for (int i = 0; a && i < k; i++)
        for (int64_t r = e->interval_begin[i]; r < e->interval_begin[i + 1]; r++)
            for (int64_t x = a->rowptr[r]; x < a->rowptr[r + 1]; x++)
                if (a->colidx[x] < owned)
                    nbr[(size_t)i * (size_t)k + (size_t)interval_of(e, a->colidx[x])] = true;
}

void bv_gs_pipeline_free(graph_server *gs)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    if (!p)
        return;
    for (size_t s = 0; p->eval_act && s < gs->e->nstages; s++)
        bv_free_aligned(p->eval_act[s]);
    free(p->eval_act);
    free(p->steps);
    free(p->fwd_at);
    free(p->bwd_at);
    free(p->in_nbr);
    free(p->out_nbr);
    free(p->ver);
    free(p->pos);
    free(p->epoch_of);
    free(p->fwd_version);
    free(p->busy);
    free(p->held);
    free(p->load);
    free(p->lc.per);
    free(p->at_stage);
    free(p);
    gs->pipeline = NULL;
}

static bv_status pipeline_make(graph_server *gs, bv_error *err)
{
    bv_graph_engine *e = gs->e;
    size_t ns = e->nstages, k = (size_t)e->cfg.intervals;
    struct bv_gs_pipeline *p = calloc(1, sizeof *p);
    gs->pipeline = p;
    if (p) {
        p->intervals = (int)k;
        p->steps = calloc(4 * ns + 1, sizeof *p->steps);
        p->fwd_at = calloc(ns, sizeof *p->fwd_at);
        p->bwd_at = calloc(ns, sizeof *p->bwd_at);
        p->in_nbr = calloc(k * k, sizeof *p->in_nbr);
        p->out_nbr = calloc(k * k, sizeof *p->out_nbr);
        p->ver = malloc(ns * k * sizeof *p->ver);
        p->pos = calloc(k, sizeof *p->pos);
        p->epoch_of = malloc(k * sizeof *p->epoch_of);
        p->fwd_version = calloc(k, sizeof *p->fwd_version);
        p->busy = calloc(k, sizeof *p->busy);
        p->held = calloc(k, sizeof *p->held);
        p->load = calloc((size_t)e->cfg.tensor_workers, sizeof *p->load);
        p->lc.per = calloc(k * 9, sizeof(double));
        p->at_stage = calloc(ns, sizeof *p->at_stage);
    }
    if (!p || !p->steps || !p->fwd_at || !p->bwd_at || !p->in_nbr || !p->out_nbr ||
        !p->ver || !p->pos || !p->epoch_of || !p->fwd_version || !p->busy || !p->held ||
        !p->load || !p->lc.per || !p->at_stage) {
        bv_gs_pipeline_free(gs);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the interval pipeline");
    }
    /* Several graph servers: the exchanges of the stage-by-stage pass, where it has them;
     * and a backward gather over every row, since the ghost rows' gradient goes to their
     * owners. */
    bool parts = e->ngs > 1;
    for (size_t s = 0; s < ns; s++) {
        const bv_stage *st = e->stages[s];
        int v = e->vin[s];
        if (parts && v >= 0 && st->kind != BV_STAGE_TENSOR && bv_gs_first_reader(e, s))
            p->steps[p->nsteps++] = (step){v, STEP_FWD, false, true, true};
        p->fwd_at[s] = p->nsteps;
        p->steps[p->nsteps++] = (step){(int32_t)s, STEP_FWD, st->kind == BV_STAGE_GATHER,
                                       st->kind == BV_STAGE_EDGE, false};
    }
    p->steps[p->nsteps++] = (step){(int32_t)ns - 1, STEP_LOSS, false, false, false};
    for (size_t s = ns; s-- > 0;) {
        const bv_stage *st = e->stages[s];
        bool gather = st->kind == BV_STAGE_GATHER, whole_gather = st->weighted || parts;
        if (parts && bv_stage_read_across_edges(e, s))
            p->steps[p->nsteps++] = (step){(int32_t)s, STEP_BWD, false, true, true};
        p->bwd_at[s] = p->nsteps;
        p->steps[p->nsteps++] = (step){(int32_t)s, STEP_BWD, gather && !whole_gather,
                                       st->kind == BV_STAGE_EDGE || (gather && whole_gather),
                                       false};
    }
    for (size_t x = 0; x < ns * k; x++)
        p->ver[x] = -1;
    for (size_t s = 0; s < ns; s++) /* what a gather reads of rows no pass wrote yet */
        memset(gs->act[s], 0, bv_gs_stage_bytes(gs, s));
    for (size_t i = 0; i < k; i++)
        p->epoch_of[i] = -1;
    p->cmd.epoch = -1;
    mark_neighbours(e, e->adj_norm, p->in_nbr);
    mark_neighbours(e, e->adj_loops, p->in_nbr);
    mark_neighbours(e, e->adj_norm_t, p->out_nbr);
    return BV_OK;
}

void bv_gs_pipeline_wrote_all(graph_server *gs, int64_t epoch)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    for (size_t x = 0; p && x < gs->e->nstages * (size_t)p->intervals; x++)
        p->ver[x] = epoch;
}

/* Where an interval is, as one number: its epoch, then its step. */
static int64_t key(const struct bv_gs_pipeline *p, int64_t epoch, size_t pos)
{
    return epoch * (int64_t)(p->nsteps + 1) + (int64_t)pos;
}

static int64_t key_of(const struct bv_gs_pipeline *p, int i)
{
    return key(p, p->epoch_of[i], p->pos[i]);
}

/* Whether interval i's next step has what it reads; *input_epoch: the oldest epoch of the
 * neighbour rows a forward gather would read (the interval's own epoch for any other
 * step). An interval ahead of the pass runs forward steps of its own only. */
static bool step_ready(const graph_server *gs, int i, int64_t *input_epoch)
{
    const struct bv_gs_pipeline *p = gs->pipeline;
    const bv_graph_engine *e = gs->e;
    const step *st = &p->steps[p->pos[i]];
    int64_t epoch = p->epoch_of[i];
    size_t k = (size_t)p->intervals;
    *input_epoch = epoch;
    if (epoch > p->cmd.epoch && (st->dir != STEP_FWD || st->whole))
        return false;
    if (st->whole) { /* every interval here, nothing in flight */
        for (size_t j = 0; j < k; j++)
            if (key_of(p, (int)j) != key_of(p, i))
                return false;
        return p->inflight == 0;
    }
    if (!st->local)
        return true; /* reads only the interval's own rows, which its earlier steps wrote */
    if (st->dir == STEP_BWD) { /* the out-neighbours' gradient, complete */
        for (size_t j = 0; j < k; j++)
            if (p->out_nbr[(size_t)i * k + j] &&
                key_of(p, (int)j) < key(p, epoch, p->bwd_at[st->stage]))
                return false;
        return true;
    }
    int v = e->vin[st->stage];
    if (v < 0)
        return true; /* the features */
    /* The rows are whatever epoch last wrote them: a neighbour whose task for them is in
     * flight still has its earlier rows here (forward results of a gated pass are
     * scattered on this thread, av_send); one ahead has the next epoch's. */
    for (size_t j = 0; j < k; j++)
        if (p->in_nbr[(size_t)i * k + j] && p->ver[(size_t)v * k + j] < *input_epoch)
            *input_epoch = p->ver[(size_t)v * k + j];
    return true;
}

/* The gate's answer for step `st` of interval i in epoch `epoch`. */
static bv_status gate_allows(graph_server *gs, int i, const step *st, int64_t epoch,
                             int64_t input_epoch, bool *run, bv_error *err)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    uint32_t kind = st->dir == STEP_LOSS ? BV_TASK_LOSS
                    : gs->e->stages[st->stage]->kind == BV_STAGE_GATHER ? BV_TASK_GATHER
                    : st->dir == STEP_BWD ? BV_TASK_TENSOR_BACKWARD
                                          : BV_TASK_TENSOR_FORWARD;
    int64_t here = key(p, epoch, (size_t)(st - p->steps)), waiting = 0;
    int64_t slowest = epoch;
    for (int j = 0; j < p->intervals; j++) {
        waiting += key_of(p, j) < here;
        slowest = p->epoch_of[j] < slowest ? p->epoch_of[j] : slowest;
    }
    bv_task_info info = {
        .size = sizeof info, .engine = BV_ENGINE_GRAPH, .kind = kind, .epoch = epoch,
        .step = -1, .stage = st->stage, .interval = i, .microbatch = -1,
        .backward = st->dir == STEP_BWD, .input_epoch = input_epoch, .waiting = waiting,
        .slowest_epoch = slowest,
    };
    bv_task_decision out = {.size = sizeof out, .run_now = true, .weight_version = -1};
    bv_status rc = gs->e->cfg.gate_ops->before_task(gs->gate, &info, &out, err);
    *run = rc == BV_OK && out.run_now;
    if (rc == BV_OK && !out.run_now && !p->held[i]) {
        p->held[i] = true;
        p->fig[BV_PIPE_HELD]++;
    }
    return rc;
}

/* Interval i's step is done. */
static void advance(graph_server *gs, int i)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    const step *st = &p->steps[p->pos[i]];
    if (st->dir == STEP_FWD)
        p->ver[(size_t)st->stage * (size_t)p->intervals + (size_t)i] = p->epoch_of[i];
    p->held[i] = false;
    if (++p->pos[i] == p->nsteps && p->epoch_of[i] == p->cmd.epoch)
        p->finished++;
}

static const task_kind *task_of(const graph_server *gs, const step *st)
{
    if (st->dir == STEP_LOSS)
        return &bv_gs_loss_task;
    bool edge = gs->e->stages[st->stage]->kind == BV_STAGE_EDGE;
    if (st->dir == STEP_FWD)
        return edge ? &bv_gs_apply_edge : &bv_gs_apply_vertex;
    return edge ? &bv_gs_apply_edge_backward : &bv_gs_apply_vertex_backward;
}

/* Runs a local or whole step now (nothing of it is in flight afterwards). */
static bv_status run_here(graph_server *gs, int i, int64_t input_epoch, bv_error *err)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    const bv_graph_engine *e = gs->e;
    const step *st = &p->steps[p->pos[i]];
    size_t s = (size_t)st->stage;
    if (st->whole) {
        bv_status rc = BV_OK;
        if (st->exchange)
            rc = bv_gs_exchange(gs, &p->cmd, st->stage, st->dir == STEP_BWD, err);
        else if (e->stages[s]->kind == BV_STAGE_EDGE)
            rc = bv_gs_edge_pass(gs, s, &p->cmd, task_of(gs, st), err);
        else
            bv_gs_gather_backward(gs, s);
        for (int j = 0; rc == BV_OK && j < p->intervals; j++)
            advance(gs, j);
        return rc;
    }
    int64_t r0 = e->interval_begin[i], r1 = e->interval_begin[i + 1];
    if (st->dir == STEP_BWD) {
        bv_gs_gather_backward_rows(gs, s, r0, r1);
    } else {
        bv_gs_gather_rows(gs, s, r0, r1);
        int64_t lag = p->epoch_of[i] - input_epoch;
        if (lag > p->fig[BV_PIPE_LAG_MAX])
            p->fig[BV_PIPE_LAG_MAX] = (double)lag;
        if (input_epoch < p->fig[BV_PIPE_OLDEST_READ])
            p->fig[BV_PIPE_OLDEST_READ] = (double)input_epoch;
        p->fig[BV_PIPE_STALE_GATHERS] += lag > 0;
    }
    advance(gs, i);
    return BV_OK;
}

/* A result of a task in flight: checked against the interval's step, taken, the step
 * done. A tensor task's result says which weights it computed with: its interval's
 * forward version, stashed or not. */
static bv_status take_result(graph_server *gs, bv_role_msg *m, bv_error *err)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    int i = m->hdr.interval;
    const step *st = i >= 0 && i < p->intervals && p->busy[i] ? &p->steps[p->pos[i]] : NULL;
    if (m->wire.type == BV_MSG_ERROR) {
        bv_error_set(err, BV_ERR_INTERNAL, "%.*s", (int)m->hdr.na, (const char *)m->a);
        bv_role_release(gs->t, m);
        return BV_ERR_INTERNAL;
    }
    if (m->wire.type == BV_MSG_GHOSTS && gs->e->ngs > 1) /* a server ahead of this one */
        return bv_gs_keep_early(gs, m, err);
    if (!st || task_of(gs, st)->result_type != m->wire.type || m->hdr.stage != st->stage ||
        m->hdr.epoch != p->epoch_of[i]) {
        bv_log(BV_LOG_WARN, "graph server: ignoring message type %u for interval %d, which "
               "has no such task in flight", m->wire.type, i);
        bv_role_release(gs->t, m);
        return BV_OK;
    }
    if (st->dir != STEP_LOSS) {
        p->fig[BV_PIPE_STASH_MISMATCH] += m->hdr.version != p->fwd_version[i];
        p->fig[BV_PIPE_STASHED] += st->dir == STEP_BWD && p->fwd_version[i] < p->cmd.version;
    }
    bv_status rc = task_of(gs, st)->take(gs, (size_t)st->stage, m, &p->lc, err);
    p->busy[i] = false;
    p->load[i % gs->e->cfg.tensor_workers]--;
    p->inflight--;
    if (rc == BV_OK)
        advance(gs, i);
    return rc;
}

/* Interval i, done with the pass's epoch while others are not, starts the next one if the
 * gate lets it (with the weights of now; the update between the epochs lands later). */
static bv_status maybe_run_ahead(graph_server *gs, int i, bool *moved, bv_error *err)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    const step *first = &p->steps[0];
    if (p->epoch_of[i] != p->cmd.epoch || p->finished == p->intervals || first->whole ||
        first->dir != STEP_FWD)
        return BV_OK;
    bool run = false;
    bv_status rc = gate_allows(gs, i, first, p->cmd.epoch + 1, p->cmd.epoch + 1, &run, err);
    if (rc != BV_OK || !run)
        return rc;
    p->epoch_of[i]++;
    p->pos[i] = 0;
    p->fwd_version[i] = p->cmd.version;
    p->held[i] = false;
    p->fig[BV_PIPE_AHEAD]++;
    *moved = true;
    return BV_OK;
}

/* Sends every task that may go now, then runs at most one step here. *moved: something
 * happened. */
static bv_status issue(graph_server *gs, int first, bool *moved, bv_error *err)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    int k = p->intervals, here = -1;
    int64_t here_epoch = 0;
    bv_status rc = BV_OK;
    *moved = false;
    for (int n = 0; rc == BV_OK && n < k; n++) {
        int i = (first + n) % k;
        if (p->busy[i])
            continue;
        if (p->pos[i] == p->nsteps) {
            rc = maybe_run_ahead(gs, i, moved, err);
            if (rc != BV_OK || p->pos[i] == p->nsteps)
                continue;
        }
        const step *st = &p->steps[p->pos[i]];
        bool task = !st->local && !st->whole;
        int64_t input_epoch;
        bool run = false;
        if ((task && p->load[i % gs->e->cfg.tensor_workers] >= 2) ||
            (!task && here >= 0) || !step_ready(gs, i, &input_epoch))
            continue;
        if (st->exchange) /* the engine's own: not the gate's to hold */
            run = true;
        else if ((rc = gate_allows(gs, i, st, p->epoch_of[i], input_epoch, &run, err)) != BV_OK)
            break;
        if (!run)
            continue;
        if (!task) {
            here = i;
            here_epoch = input_epoch;
            continue;
        }
        bv_task_hdr h = p->cmd; /* the interval's own epoch and weights */
        h.epoch = p->epoch_of[i];
        h.version = p->fwd_version[i];
        rc = task_of(gs, st)->send(gs, (size_t)st->stage, &h, i, &p->lc, err);
        if (rc == BV_OK) {
            p->busy[i] = true;
            p->load[i % gs->e->cfg.tensor_workers]++;
            p->inflight++;
            *moved = true;
        }
    }
    if (p->inflight > p->fig[BV_PIPE_IN_FLIGHT_MAX])
        p->fig[BV_PIPE_IN_FLIGHT_MAX] = p->inflight;
    if (rc == BV_OK && here >= 0) {
        rc = run_here(gs, here, here_epoch, err);
        *moved = true;
    }
    return rc;
}

/* How many different steps the intervals are at (the pipeline's depth), and how many are
 * at each stage (a forward or backward step of it). */
static void sample_depth(struct bv_gs_pipeline *p, size_t nstages)
{
    int depth = 0;
    for (int i = 0; i < p->intervals; i++) {
        bool first = p->pos[i] < p->nsteps;
        for (int j = 0; first && j < i; j++)
            first = key_of(p, j) != key_of(p, i);
        depth += first;
    }
    if (depth > p->fig[BV_PIPE_DEPTH_MAX])
        p->fig[BV_PIPE_DEPTH_MAX] = depth;
    for (size_t s = 0; s < nstages; s++) {
        int n = 0;
        for (int i = 0; i < p->intervals; i++)
            n += p->pos[i] < p->nsteps && p->steps[p->pos[i]].stage == (int32_t)s &&
                 !p->steps[p->pos[i]].exchange;
        if (n > p->at_stage[s])
            p->at_stage[s] = n;
    }
}

/* Takes results, waiting for one when `wait` (nothing else can happen), then whatever else
 * is there. *took: some came. */
static bv_status take_results(graph_server *gs, bool wait, bool *took, bv_error *err)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    bv_status rc = BV_OK;
    *took = false;
    for (int ms = wait ? BV_TIMEOUT_FOREVER : 0; rc == BV_OK && p->inflight > 0; ms = 0) {
        bv_role_msg m;
        bv_error quiet = {0};
        bv_status got = bv_role_recv_valid(gs->t, gs->inbox, &m, ms, &gs->e->frames_dropped,
                                           ms ? err : &quiet);
        if (got != BV_OK)
            return ms ? got : BV_OK; /* a real failure, or "nothing there yet" */
        rc = take_result(gs, &m, err);
        *took = true;
    }
    return rc;
}

bool bv_gs_pipeline_is_result(const graph_server *gs, const bv_role_msg *m)
{
    uint16_t t = m->wire.type;
    return gs->pipeline && gs->pipeline->inflight > 0 &&
           (t == BV_MSG_FWD_RESULT || t == BV_MSG_BWD_RESULT || t == BV_MSG_LOSS_RESULT);
}

bv_status bv_gs_pipeline_absorb(graph_server *gs, bv_role_msg *m, bv_error *err)
{
    return take_result(gs, m, err);
}

bv_status bv_gs_pipeline_drain(graph_server *gs, bv_error *err)
{
    bool took;
    bv_status rc = BV_OK;
    while (rc == BV_OK && gs->pipeline && gs->pipeline->inflight > 0)
        rc = take_results(gs, true, &took, err);
    return rc;
}

bool bv_gs_pipeline_ahead(const graph_server *gs)
{
    const struct bv_gs_pipeline *p = gs->pipeline;
    for (int i = 0; p && i < p->intervals; i++)
        if (p->epoch_of[i] > p->cmd.epoch)
            return true;
    return false;
}

bv_status bv_gs_pipeline_swap_arrays(graph_server *gs, bv_error *err)
{
    struct bv_gs_pipeline *p = gs->pipeline;
    size_t ns = gs->e->nstages;
    if (!p->eval_act && !(p->eval_act = calloc(ns, sizeof *p->eval_act)))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for evaluation arrays");
    for (size_t s = 0; s < ns; s++)
        if (!p->eval_act[s] && !(p->eval_act[s] = bv_alloc_aligned(bv_gs_stage_bytes(gs, s))))
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory for evaluation arrays");
    float **t = gs->act;
    gs->act = p->eval_act;
    p->eval_act = t;
    gs->private_arrays = !gs->private_arrays;
    return BV_OK;
}

bv_status bv_gs_pipeline_epoch(graph_server *gs, const bv_task_hdr *cmd, bv_task_hdr *reply,
                               bv_error *err)
{
    bv_graph_engine *e = gs->e;
    bv_status rc = gs->pipeline ? BV_OK : pipeline_make(gs, err);
    if (rc != BV_OK)
        return rc;
    struct bv_gs_pipeline *p = gs->pipeline;
    int k = p->intervals;
    /* every interval in this epoch: fresh, or ahead from the last pass */
    for (int i = 0; i < k; i++) {
        if (p->epoch_of[i] == cmd->epoch)
            continue;
        if (p->epoch_of[i] > cmd->epoch || (p->epoch_of[i] >= 0 && p->pos[i] != p->nsteps))
            return bv_error_set(err, BV_ERR_INTERNAL, "graph server: interval %d is in epoch "
                                "%lld at step %zu, and the pass is epoch %lld", i,
                                (long long)p->epoch_of[i], p->pos[i], (long long)cmd->epoch);
        p->epoch_of[i] = cmd->epoch;
        p->pos[i] = 0;
        p->fwd_version[i] = cmd->version;
    }
    p->cmd = *cmd;
    p->finished = 0;
    memset(p->held, 0, (size_t)k * sizeof *p->held);
    memset(p->lc.per, 0, (size_t)k * 9 * sizeof(double));
    memset(p->fig, 0, sizeof p->fig);
    memset(p->at_stage, 0, e->nstages * sizeof *p->at_stage);
    p->fig[BV_PIPE_OLDEST_READ] = (double)cmd->epoch;
    for (int i = 0; i < k; i++) /* weights an interval ahead still uses */
        if (cmd->version - p->fwd_version[i] > p->fig[BV_PIPE_WEIGHTS_BEHIND])
            p->fig[BV_PIPE_WEIGHTS_BEHIND] = (double)(cmd->version - p->fwd_version[i]);
    gs->ghost_bytes = 0;
    /* every gradient array for the whole pass: intervals are in different stages at once */
    for (size_t s = 0; rc == BV_OK && s < e->nstages; s++)
        rc = bv_gs_grads_for(gs, s, err);
    if (rc == BV_OK)
        rc = bv_gs_ensure_grad(gs, (int)e->nstages - 1, err);
    for (int round = 0; rc == BV_OK && p->finished < k; round++) {
        bool moved, took;
        rc = issue(gs, round % k, &moved, err);
        sample_depth(p, e->nstages);
        /* results that are there, without waiting unless nothing else can happen */
        if (rc == BV_OK)
            rc = take_results(gs, !moved, &took, err);
        if (rc == BV_OK && !moved && !took && p->finished < k)
            rc = bv_error_set(err, BV_ERR_INTERNAL, "graph server: the task gate (%s) holds "
                              "every remaining task of epoch %lld", e->cfg.gate_name,
                              (long long)cmd->epoch);
    }
    for (size_t s = 0; s < e->nstages; s++) /* after a failure, too */
        bv_gs_drop_grad(gs, s);
    bv_gs_sum_losses(gs, &p->lc, reply->stats);
    reply->step = bv_gs_grad_messages(gs);
    reply->reply_to = e->gs_index;
    reply->row_begin = gs->ghost_bytes;
    return rc;
}

void bv_gs_pipeline_figures(const graph_server *gs, const double **figures,
                            const double **stage_counts)
{
    *figures = gs->pipeline->fig;
    *stage_counts = gs->pipeline->at_stage;
}
