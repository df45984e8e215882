/* One pipeline stage (pipeline_seq.h): its span of layers, its compute instance and its
 * links, a loop that takes the coordinator's commands, and the interpreter of its
 * schedule (docs/pipeline.md#the-runtime). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bivouac/log.h"
#include "bivouac/wire.h"
#include "clock.h"
#include "membership.h"
#include "node_group.h"
#include "pipeline_plan.h"
#include "pipeline_seq.h"
#include "plugin_arrays.h"
#include "stage_link.h"

typedef struct stage {
    const bv_seq_pipe_cfg *cfg;
    const bv_experiment *x;
    int s, d, P, D, M, node, coord;
    int64_t rows_mb, rows_pipe; /* sequences per microbatch, per pipeline */
    bv_stage_link *link;
    bv_seq_model *model;
    bv_compute *c;
    bv_layer_engine *le;
    size_t first, end, nlayers;
    bool has_head;
    int slots;
    bv_schedule sched;
    int32_t *tokens, *targets; /* this pipeline's rows of the batch */
    float *dout, *flat;        /* a received d(output); the gradients for the all-reduce */
    size_t nflat;
    double *sq;                /* per owned tensor: its squared gradient norm */
    size_t nsq, nsq_all;
    const float **out;         /* per slot: the forward's output */
    /* Bamboo's replica (the redundancy strategy's instructions name another stage): that
     * stage's layers, kept equal to them, run redundantly on its microbatches */
    int rep_stage;             /* -1: none */
    bv_layer_engine *rep;
    int rep_slots;
    bool rep_backward; /* the schedule runs the replica's backward (efeb) */
    size_t rep_nflat;
    float *rep_dout;           /* efeb: the gradient of the replica's output, received */
    int64_t rep_out_w;
    int64_t in_w, out_w;
    double compute_s, wait_s;
    /* lazy recovery (docs/redundancy.md#lazy-brc): the attempt whose schedule reached
     * UPDATE here with this stage's own gradient sums still at hand (-1: none), its loss,
     * and whether the replica ran its forward on every microbatch of it */
    int64_t upd_ws;
    double upd_loss[2];
    int frc_done, brc_done; /* the replica's forwards and (efeb) backwards of the attempt */
    bool upd_frc, upd_brc;  /* all of them, at UPDATE; the backwards' gradients untouched */
    double rep_loss[2];     /* efeb: the replica's loss, where it is the last stage */
    float *kept;      /* eflb: the input gradients this step sent, per microbatch, for a
                         shadow's BRC of the stage before (NULL: not kept) */
    float *local;     /* with a replica, where the update changes the gradients: its own
                         sums of the step, kept for a lazy recovery (every gradient where
                         the all-reduce sums them, else those sum_tied adds to; NULL: the
                         update leaves them be, or none is kept) */
    float *tied_in;   /* the owner's scratch for a tied tensor's gradient (sum_tied) */
    /* two-phase steps (bv_seq_pipe_two_phase): a prepared step waits for COMMIT */
    bool two_phase, pending;
    int64_t pending_ws;
    double pending_lr, pending_norm;
    /* the thread's argument; the stage this one adopted after a failover (its replica's),
     * run as a thread of this process */
    bv_seq_stage_arg *arg;
    struct adopted *adopted;
    pthread_t adopted_thread;
} stage;

/* A stage adopted after a failover: its thread's argument, and the address book the
 * coordinator sent with ADOPT (every node's address as it is now: stages that got a
 * process of their own again listen elsewhere than the book this process read). */
typedef struct adopted {
    bv_seq_stage_arg a;
    char (*addr)[96];
    const char **addrs;
} adopted;

static void adopted_free(adopted *w)
{
    if (!w)
        return;
    if (w->a.adopt) {
        bv_state_free(w->a.adopt);
        free(w->a.adopt);
    }
    free(w->addr);
    free(w->addrs);
    free(w);
}

/* ADOPT's book: `nodes` lines, one address each, into w. */
static bv_status adopted_book(adopted *w, int nodes, const char *p, size_t len, bv_error *err)
{
    w->addr = calloc((size_t)nodes, sizeof *w->addr);
    w->addrs = calloc((size_t)nodes, sizeof *w->addrs);
    if (!w->addr || !w->addrs)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    const char *end = p + len;
    for (int n = 0; n < nodes; n++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || nl - p >= 96)
            return bv_error_set(err, BV_ERR_CORRUPT, "an adopt command's book is not %d "
                                "addresses", nodes);
        snprintf(w->addr[n], 96, "%.*s", (int)(nl - p), p);
        w->addrs[n] = w->addr[n];
        p = nl + 1;
    }
    return p == end ? BV_OK
                    : bv_error_set(err, BV_ERR_CORRUPT, "an adopt command's book is not %d "
                                   "addresses", nodes);
}

/* Faults for the failover tests (docs/redundancy.md#testing-a-failover): the stage
 * process of node `node` kills itself (SIGKILL) where its first attempt at step `step`
 * reaches `what` (the last microbatch's forward, the first's backward, the all-reduce, or
 * the commit of the prepared step), or with `:hang` stops there (SIGSTOP: alive and
 * answering nothing, as a frozen instance); from BIVOUAC_STAGE_FAULT
 * (NODE:STEP:WHAT[:hang], commas between faults), read by a stage process only. */
#define MAX_FAULTS 8
static struct {
    int node;
    int64_t step;
    char what[16];
    bool hang;
} faults[MAX_FAULTS];
static int nfaults;

static void maybe_die(stage *st, int64_t ws, const char *what)
{
    for (int i = 0; i < nfaults && !st->arg->adopted; i++)
        if (faults[i].node == st->node && ws == faults[i].step &&
            strcmp(what, faults[i].what) == 0) {
            bv_log(BV_LOG_WARN, "stage node %d: BIVOUAC_STAGE_FAULT: %s at the %s of step %lld",
                   st->node, faults[i].hang ? "hangs" : "killed", what, (long long)ws);
            if (!faults[i].hang && !st->adopted) { /* at `what`: what it sent before it is
                                                    * delivered (the links' linger) */
                bv_stage_link_close(st->link);
                st->link = NULL;
                st->x->transport_ops.destroy(st->arg->transport);
            }
            raise(faults[i].hang ? SIGSTOP : SIGKILL);
        }
}

static bv_status read_faults(const char *text, bv_error *err)
{
    for (const char *f = text; f && *f && nfaults < MAX_FAULTS; nfaults++) {
        long long step = -1;
        int used = 0, hang = 0;
        if (sscanf(f, "%d:%lld:%15[a-z]%n", &faults[nfaults].node, &step,
                   faults[nfaults].what, &used) == 3 &&
            strncmp(f + used, ":hang", 5) == 0) {
            used += 5;
            hang = 1;
        }
        if (used == 0 || (f[used] != ',' && f[used] != '\0') ||
            (strcmp(faults[nfaults].what, "forward") && strcmp(faults[nfaults].what, "backward") &&
             strcmp(faults[nfaults].what, "allreduce") && strcmp(faults[nfaults].what, "prepared")))
            return bv_error_set(err, BV_ERR_INVALID, "BIVOUAC_STAGE_FAULT=%s is not "
                                "NODE:STEP:forward|backward|allreduce|prepared[:hang][,...]",
                                text);
        faults[nfaults].step = step;
        faults[nfaults].hang = hang;
        f = f[used] == ',' ? f + used + 1 : NULL;
    }
    return BV_OK;
}

static int node_of(const stage *st, int pipeline, int s)
{
    return pipeline * st->P + s;
}

static int stage_of_layer(const stage *st, size_t l)
{
    for (int s = 0; s < st->P; s++)
        if (l >= st->cfg->span_first[s] && l < st->cfg->span_end[s])
            return s;
    return -1;
}

bv_compute *bv_seq_stage_compute(const bv_experiment *x, int stages, bv_error *err)
{
    const bv_opt_value *th = bv_opts_find(&x->compute.opts, "threads");
    if (!th || th->decl->type != BV_OPT_INT || th->v.i != 0)
        return x->compute_ops.create(&x->compute.opts, err);
    cpu_set_t set;
    int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    int share = cores / stages;
    char text[32];
    snprintf(text, sizeof text, "%d", share > 0 ? share : 1);
    bv_opts opts;
    if (bv_opts_copy(&x->compute.opts, &opts, err) != BV_OK)
        return NULL;
    bv_compute *c = bv_opts_set(&opts, "threads", text, err) == BV_OK
                        ? x->compute_ops.create(&opts, err)
                        : NULL;
    bv_opts_free(&opts);
    return c;
}

/* A tensor's n gradients copied to to + off, or from from + off (neither: nothing). */
static void copy_grad(float *grad, size_t n, float *to, const float *from, size_t off)
{
    if (to)
        memcpy(to + off, grad, n * sizeof *to);
    else if (from)
        memcpy(grad, from + off, n * sizeof *from);
}

/* Every gradient buffer of an engine's span, in layer and parameter order (its own
 * tensors, replicas and the tied ones' own gradients), copied into `to` or from `from`
 * (neither: only counted); returns the floats. The same span in two engines has the same
 * order. */
static size_t flat_grads(const bv_layer_engine *le, float *to, const float *from)
{
    bv_layer_tensor t;
    size_t off = 0, o, oi, first, end;
    bv_layer_engine_span_of(le, &first, &end);
    for (size_t l = first; l < end; l++)
        for (size_t i = 0; i < bv_layer_engine_layer(le, l)->nparams; i++) {
            if (!bv_layer_engine_tensor(le, l, i, &t) && !bv_layer_engine_tie(le, l, i, &o, &oi))
                continue;
            copy_grad(t.grad, (size_t)t.n, to, from, off);
            off += (size_t)t.n;
        }
    return off;
}

/* A tied tensor (l, i) this stage takes part in summing (sum_tied): it, or its owner
 * (o, oi), is here. */
typedef struct tie {
    size_t l, i, o, oi;
    bool here, owner_here;
    size_t next_l, next_i; /* where next_tie looks on from */
} tie;

/* The next tie, in layer and parameter order, from {.next_l = st->first}; false after the
 * last. */
static bool next_tie(const stage *st, tie *t)
{
    for (size_t l = t->next_l, i = t->next_i; l < st->nlayers; l++, i = 0)
        for (; i < bv_layer_engine_layer(st->le, l)->nparams; i++) {
            size_t o, oi;
            if (!bv_layer_engine_tie(st->le, l, i, &o, &oi))
                continue;
            bool here = l < st->end, owner_here = o >= st->first && o < st->end;
            if (here || owner_here) {
                *t = (tie){l, i, o, oi, here, owner_here, l, i + 1};
                return true;
            }
        }
    return false;
}

/* The gradient buffers sum_tied adds to (the owner's where it is here, else the tie's),
 * in its order, copied into `to` or from `from` (neither: only counted); returns the
 * floats. */
static size_t tied_grads(const stage *st, float *to, const float *from)
{
    bv_layer_tensor t;
    size_t off = 0;
    for (tie k = {.next_l = st->first}; next_tie(st, &k);) {
        if (k.owner_here)
            bv_layer_engine_tensor(st->le, k.o, k.oi, &t);
        else
            bv_layer_engine_tensor(st->le, k.l, k.i, &t);
        copy_grad(t.grad, (size_t)t.n, to, from, off);
        off += (size_t)t.n;
    }
    return off;
}

/* bv_stage_link_send_fill's filler: the layer engine ctx's gradients, flat. */
static void fill_grads(void *dst, size_t bytes, const void *ctx)
{
    (void)bytes;
    flat_grads(ctx, dst, NULL);
}

/* The replica the schedule asks for: the layers of the stage its REDUNDANT_* and
 * REPLICA_UPDATE instructions name, with room for every microbatch's redundant forward
 * (its saved activations wait until a failure needs them, or the step ends). */
static bv_status replica_setup(stage *st, bv_error *err)
{
    st->rep_stage = -1;
    int forwards = 0;
    for (size_t i = 0; i < st->sched.count; i++) {
        const bv_instruction *ins = bv_schedule_at(&st->sched, i);
        bool names = ins->op == BV_INSTR_REDUNDANT_FORWARD ||
                     ins->op == BV_INSTR_REDUNDANT_BACKWARD ||
                     ins->op == BV_INSTR_REPLICA_UPDATE;
        if (!names)
            continue;
        if (ins->stage == st->s || ins->stage < 0 || ins->stage >= st->P ||
            (st->rep_stage >= 0 && ins->stage != st->rep_stage))
            return bv_error_set(err, BV_ERR_PLUGIN, "stage %d's schedule has redundant work "
                                "for stage %d: a stage keeps one replica, of another stage",
                                st->s, ins->stage);
        st->rep_stage = ins->stage;
        forwards += ins->op == BV_INSTR_REDUNDANT_FORWARD;
        st->rep_backward |= ins->op == BV_INSTR_REDUNDANT_BACKWARD;
    }
    if (st->rep_stage < 0)
        return BV_OK;
    st->rep_slots = forwards > 0 ? st->M : 1;
    bv_layer_span span = {st->cfg->span_first[st->rep_stage], st->cfg->span_end[st->rep_stage],
                          st->rep_slots};
    bv_status rc = bv_layer_engine_create_span(st->cfg->mops, st->model, &st->x->compute_ops,
                                               st->c, st->rows_mb, st->cfg->block, &span,
                                               &st->rep, err);
    if (rc != BV_OK)
        return rc;
    st->rep_nflat = flat_grads(st->rep, NULL, NULL);
    st->rep_out_w = bv_layer_engine_layer(st->rep, span.end - 1)->out_width;
    size_t bytes = (size_t)(st->rows_mb * st->cfg->block * st->rep_out_w) * sizeof(float);
    if (!(st->rep_dout = malloc(bytes)))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for stage %d's replica", st->s);
    return BV_OK;
}

/* Whether a failure's lost backward can be run again here lazily: the replica runs the
 * next stage's forward on every microbatch (eflb; efeb runs its backward eagerly). */
static bool lazy(const stage *st)
{
    return st->rep && st->rep_slots == st->M && !st->rep_backward;
}

static bv_status stage_setup(stage *st, bv_error *err)
{
    const bv_seq_pipe_cfg *cfg = st->cfg;
    bv_seq_shape shape = {st->cfg->corpus->vocab_size, cfg->block, st->rows_mb};
    if (!(st->model = cfg->mops->create(&st->x->model.opts, &shape, err)))
        return err->status ? err->status : BV_ERR_PLUGIN;
    if (!(st->c = bv_seq_stage_compute(st->x, st->P * st->D, err)))
        return err->status ? err->status : BV_ERR_PLUGIN;
    st->first = cfg->span_first[st->s];
    st->end = cfg->span_end[st->s];
    st->slots = cfg->kind == BV_SCHEDULE_GPIPE || st->P - st->s > st->M ? st->M
                                                                        : st->P - st->s;
    bv_layer_span span = {st->first, st->end, st->slots};
    bv_status rc = bv_layer_engine_create_span(cfg->mops, st->model, &st->x->compute_ops,
                                               st->c, st->rows_mb, cfg->block, &span,
                                               &st->le, err);
    if (rc != BV_OK)
        return rc;
    st->nlayers = bv_layer_engine_layers(st->le);
    st->has_head = st->end == st->nlayers;
    st->in_w = bv_layer_engine_layer(st->le, st->first)->in_width;
    st->out_w = bv_layer_engine_layer(st->le, st->end - 1)->out_width;
    bv_schedule_init(&st->sched);
    if (cfg->sched) /* as the resilience strategies left it */
        for (size_t i = 0; rc == BV_OK && i < cfg->sched[st->s].count; i++)
            rc = bv_schedule_append(&st->sched, bv_schedule_at(&cfg->sched[st->s], i),
                                    sizeof(bv_instruction), err);
    else
        rc = bv_schedule_generate(cfg->kind, st->s, st->P, st->M, &st->sched, err);
    if (rc != BV_OK)
        return rc;
    int64_t T = st->rows_mb * cfg->block;
    st->tokens = malloc((size_t)(st->rows_pipe * cfg->block) * sizeof *st->tokens);
    st->targets = malloc((size_t)(st->rows_pipe * cfg->block) * sizeof *st->targets);
    st->dout = malloc((size_t)(T * st->out_w) * sizeof *st->dout);
    st->out = calloc((size_t)st->slots, sizeof *st->out);
    /* every gradient buffer this stage has (the all-reduce, a replica's update), every
     * owned tensor (the norm) */
    bv_layer_tensor t;
    st->nflat = flat_grads(st->le, NULL, NULL);
    for (size_t l = st->first; l < st->end; l++)
        for (size_t i = 0; i < bv_layer_engine_layer(st->le, l)->nparams; i++)
            st->nsq += bv_layer_engine_tensor(st->le, l, i, &t) && !t.replica;
    if ((rc = replica_setup(st, err)) != BV_OK)
        return rc;
    st->upd_ws = -1;
    /* sum_tied's scratch: the largest tied tensor owned here and tied elsewhere */
    size_t tied_n = 0;
    bool tied_here = false;
    for (tie k = {.next_l = st->first}; next_tie(st, &k);) {
        tied_here = true;
        if (k.owner_here && !k.here && bv_layer_engine_tensor(st->le, k.o, k.oi, &t) &&
            (size_t)t.n > tied_n)
            tied_n = (size_t)t.n;
    }
    st->tied_in = malloc((tied_n + 1) * sizeof *st->tied_in);
    if (st->s > 0 && lazy(st)) /* what a shadow's BRC of the stage before needs from here */
        st->kept = malloc((size_t)(st->M * T * st->in_w) * sizeof *st->kept);
    if ((st->D > 1 || tied_here) && st->rep) /* a failed step may go on from its update */
        st->local = malloc((st->D > 1 ? st->nflat : tied_grads(st, NULL, NULL)) *
                           sizeof *st->local);
    st->two_phase = bv_seq_pipe_two_phase(cfg);
    size_t flat = st->nflat > st->rep_nflat ? st->nflat : st->rep_nflat;
    st->flat = malloc((flat + 1) * sizeof *st->flat);
    st->sq = malloc((st->nsq + 1) * sizeof *st->sq);
    if (!st->tokens || !st->targets || !st->dout || !st->out || !st->sq || !st->flat ||
        !st->tied_in || (st->s > 0 && lazy(st) && !st->kept) ||
        ((st->D > 1 || tied_here) && st->rep && !st->local))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for stage %d", st->s);
    return BV_OK;
}

static void stage_free(stage *st)
{
    bv_layer_engine_free(st->le);
    bv_layer_engine_free(st->rep);
    free(st->rep_dout);
    if (st->c)
        st->x->compute_ops.destroy(st->c);
    if (st->model)
        st->cfg->mops->destroy(st->model);
    bv_schedule_free(&st->sched);
    free(st->tokens);
    free(st->targets);
    free(st->dout);
    free(st->flat);
    free(st->kept);
    free(st->local);
    free(st->tied_in);
    free(st->sq);
    free(st->out);
    bv_stage_link_close(st->link);
}

static bv_seq_ctx make_ctx(const stage *st, int mb, bool training, int64_t step)
{
    int64_t T = st->rows_mb * st->cfg->block;
    return (bv_seq_ctx){.k = &st->x->compute_ops, .compute = st->c, .batch = st->rows_mb,
                        .seq = st->cfg->block, .tokens = st->tokens + mb * T,
                        .training = training, .seed = st->cfg->seed, .step = step,
                        .row0 = st->d * st->rows_pipe + mb * st->rows_mb};
}

static bv_status recv_into(stage *st, uint16_t type, int from, uint32_t tag, int64_t step,
                           const char *what, void *buf, size_t bytes, bv_error *err)
{
    double t0 = bv_now_seconds();
    bv_status rc = bv_stage_link_recv_into(st->link, type, from, tag, step,
                                           st->cfg->peer_timeout_ms, what, buf, bytes, err);
    st->wait_s += bv_now_seconds() - t0;
    return rc;
}

/* ---- the update: gradients summed over the pipelines, tied ones over their stages, the
 * global norm over every stage, then AdamW ---- */

static bv_status allreduce(stage *st, int64_t ws, bv_error *err)
{
    flat_grads(st->le, st->flat, NULL);
    int ring[64];
    for (int d = 0; d < st->D; d++)
        ring[d] = node_of(st, d, st->s);
    bv_status rc = bv_stage_link_allreduce(st->link, ring, st->D, st->d, ws, st->flat,
                                           st->nflat, st->cfg->peer_timeout_ms, err);
    if (rc == BV_OK)
        flat_grads(st->le, NULL, st->flat);
    return rc;
}

/* owner += tied, for every tied tensor: here when both layers are on this stage, else
 * through the owner's stage, which sends the sum back to the replica. */
static bv_status sum_tied(stage *st, int64_t ws, bv_error *err)
{
    const bv_compute_ops *k = &st->x->compute_ops;
    bv_layer_tensor t, ot;
    for (tie tk = {.next_l = st->first}; next_tie(st, &tk);) {
        size_t l = tk.l, i = tk.i, o = tk.o;
        bool here = tk.here, owner_here = tk.owner_here;
        bv_layer_engine_tensor(st->le, l, i, &t);
        bv_layer_engine_tensor(st->le, o, tk.oi, &ot);
        uint32_t tag = (uint32_t)(l << 16 | i);
        bv_status rc = BV_OK;
        if (!st->local) /* its own sums change now, and none are kept */
            st->upd_ws = -1;
        if (here && owner_here) {
            k->axpy(st->c, t.n, 1.0f, t.grad, ot.grad);
        } else if (here) { /* a replica: its gradient out, the owner's sum back */
            int to = node_of(st, st->d, stage_of_layer(st, o));
            rc = bv_stage_link_send(st->link, to, BV_PIPE_TIED, tag, ws, t.grad,
                                    (size_t)t.n * sizeof(float), err);
            if (rc == BV_OK)
                rc = recv_into(st, BV_PIPE_TIED, to, tag, ws, "a tied tensor's gradient",
                               t.grad, (size_t)t.n * sizeof(float), err);
        } else { /* the owner: the replica's gradient in, the sum out */
            int from = node_of(st, st->d, stage_of_layer(st, l));
            rc = recv_into(st, BV_PIPE_TIED, from, tag, ws, "a tied tensor's gradient",
                           st->tied_in, (size_t)ot.n * sizeof(float), err);
            if (rc == BV_OK) {
                k->axpy(st->c, ot.n, 1.0f, st->tied_in, ot.grad);
                rc = bv_stage_link_send(st->link, from, BV_PIPE_TIED, tag, ws, ot.grad,
                                        (size_t)ot.n * sizeof(float), err);
            }
        }
        if (rc != BV_OK)
            return rc;
    }
    return BV_OK;
}

/* The global norm: each owned tensor's squares, summed in layer order by stage 0 as one
 * process sums them (adamw.c), and sent back. */
static bv_status global_norm(stage *st, int64_t ws, double *norm, bv_error *err)
{
    const bv_compute_ops *k = &st->x->compute_ops;
    bv_layer_tensor t;
    size_t n = 0;
    for (size_t l = st->first; l < st->end; l++)
        for (size_t i = 0; i < bv_layer_engine_layer(st->le, l)->nparams; i++)
            if (bv_layer_engine_tensor(st->le, l, i, &t) && !t.replica)
                st->sq[n++] = k->sum_squares(st->c, t.n, t.grad);
    int root = node_of(st, st->d, 0);
    if (st->s > 0) {
        bv_status rc = bv_stage_link_send(st->link, root, BV_PIPE_NORM, (uint32_t)st->s, ws,
                                          st->sq, n * sizeof *st->sq, err);
        return rc != BV_OK ? rc
                           : recv_into(st, BV_PIPE_NORM, root, 0, ws, "the gradient norm",
                                       norm, sizeof *norm, err);
    }
    double sq = 0;
    for (size_t j = 0; j < n; j++)
        sq += st->sq[j];
    for (int s = 1; s < st->P; s++) {
        bv_pipe_msg_in m;
        bv_status rc = bv_stage_link_recv(st->link, BV_PIPE_NORM, node_of(st, st->d, s),
                                          (uint32_t)s, ws, st->cfg->peer_timeout_ms,
                                          "a stage's gradient norms", &m, err);
        if (rc != BV_OK)
            return rc;
        if (m.bytes % sizeof(double)) {
            bv_stage_link_release(st->link, &m);
            return bv_error_set(err, BV_ERR_CORRUPT, "stage %d's norms: %zu bytes", s,
                                m.bytes);
        }
        for (size_t j = 0; j < m.bytes / sizeof(double); j++) {
            double v;
            memcpy(&v, (const char *)m.data + j * sizeof v, sizeof v);
            sq += v;
        }
        bv_stage_link_release(st->link, &m);
    }
    *norm = sqrt(sq);
    for (int s = 1; s < st->P; s++) {
        bv_status rc = bv_stage_link_send(st->link, node_of(st, st->d, s), BV_PIPE_NORM, 0, ws,
                                          norm, sizeof *norm, err);
        if (rc != BV_OK)
            return rc;
    }
    return BV_OK;
}

/* The optimizer step of step `it` on this stage's layers, and on its replica's (whose
 * gradients REPLICA_UPDATE received: the original's, before clipping, clipped here with
 * the same norm). A step whose gradients are not finite (the loss was not) changes no
 * weight: every stage has the same norm, so every stage skips it, and the loop stops the
 * run. */
static void apply_step(stage *st, int64_t it, double lr, double norm)
{
    if (!isfinite(norm))
        return;
    bv_adamw_apply(st->le, &st->x->compute_ops, st->c, &st->cfg->adamw, it + 1, lr, norm);
    if (st->rep)
        bv_adamw_apply(st->rep, &st->x->compute_ops, st->c, &st->cfg->adamw, it + 1, lr, norm);
}

/* The gradients summed (over the pipelines, tied ones over their stages), the global norm;
 * then the step, unless steps are two-phase (the coordinator's COMMIT applies it). ws is
 * the step's wire step (its attempt). This stage's own sums are kept (st->local) for an
 * attempt that goes on from this one's update (again: they are taken back). */
static bv_status update(stage *st, int64_t ws, double lr, double *norm, bool again,
                        bv_error *err)
{
    double t0 = bv_now_seconds(), w0 = st->wait_s;
    maybe_die(st, ws, "allreduce");
    if (st->local && st->D > 1)
        flat_grads(st->le, again ? NULL : st->local, again ? st->local : NULL);
    else if (st->local)
        tied_grads(st, again ? NULL : st->local, again ? st->local : NULL);
    bv_status rc = st->D > 1 ? allreduce(st, ws, err) : BV_OK;
    if (rc == BV_OK && st->D > 1 && !st->local) /* its own sums are gone */
        st->upd_ws = -1;
    if (rc == BV_OK)
        rc = sum_tied(st, ws, err);
    if (rc == BV_OK)
        rc = global_norm(st, ws, norm, err);
    if (rc == BV_OK && !st->two_phase)
        apply_step(st, BV_SEQ_STEP_OF(ws), lr, *norm);
    st->compute_s += bv_now_seconds() - t0 - (st->wait_s - w0);
    return rc;
}

/* ---- the replica (Bamboo's redundant computation) ---- */

/* The replica's forward on microbatch mb: the input is what this stage just sent the next
 * (its own output, still in its slot), or for the last stage's replica of the first the
 * tokens; the same dropout masks as the original's (the same step and rows). */
static bv_status redundant_forward(stage *st, int mb, int slot, const bv_seq_ctx *ctx,
                                   bv_error *err)
{
    if (!st->rep || st->rep_stage != (st->s + 1) % st->P)
        return bv_error_set(err, BV_ERR_INTERNAL, "stage %d has no replica of the next stage",
                            st->s);
    int rs = mb % st->rep_slots;
    int64_t T = st->rows_mb * st->cfg->block;
    if (st->rep_stage != 0)
        memcpy(bv_layer_engine_input(st->rep, rs), st->out[slot],
               (size_t)(T * st->out_w) * sizeof(float));
    const float *out;
    return bv_layer_engine_span_forward(st->rep, rs, ctx, &out, err);
}

/* The training loss of microbatch mb on the last stage's layers (this stage's own, or its
 * replica's): the mean over the whole batch's tokens, so the microbatches' gradients sum
 * to the batch's. */
static bv_status train_loss(const stage *st, bv_layer_engine *le, int slot,
                            const bv_seq_ctx *ctx, int mb, bv_xent_result *xr, bv_error *err)
{
    int64_t T = st->rows_mb * st->cfg->block;
    return bv_layer_engine_span_loss(le, slot, ctx, st->targets + mb * T,
                                     1.0f / (float)(st->cfg->batch * st->cfg->block), xr, err);
}

/* The replica's backward on microbatch mb, from its forward's saved activations (efeb: the
 * next stage's backward, eagerly). Its output's gradient: the loss, where the replica is
 * the last stage; this stage's own input gradient `din`, where the replica's output is
 * this stage's input (two stages); else what the schedule received from the stage after
 * the replica (RECV_GRAD naming the replica's stage). Its gradients stay in the replica's
 * buffers for a failover; the replica's step takes the original's. */
static bv_status redundant_backward(stage *st, int mb, const bv_seq_ctx *ctx,
                                    const float *din, bv_error *err)
{
    if (!st->rep || st->rep_stage != (st->s + 1) % st->P)
        return bv_error_set(err, BV_ERR_INTERNAL, "stage %d has no replica of the next stage",
                            st->s);
    int rs = mb % st->rep_slots;
    const float *rdin;
    if (st->cfg->span_end[st->rep_stage] == st->nlayers) {
        bv_xent_result xr;
        bv_status rc = train_loss(st, st->rep, rs, ctx, mb, &xr, err);
        st->rep_loss[0] += xr.loss_sum;
        st->rep_loss[1] += (double)xr.count;
        return rc != BV_OK ? rc
                           : bv_layer_engine_span_backward(st->rep, rs, ctx, NULL, &rdin, err);
    }
    const float *dout = (st->rep_stage + 1) % st->P == st->s ? din : st->rep_dout;
    if (!dout)
        return bv_error_set(err, BV_ERR_INTERNAL, "stage %d: the replica's backward of "
                            "microbatch %d has no output gradient", st->s, mb);
    return bv_layer_engine_span_backward(st->rep, rs, ctx, dout, &rdin, err);
}

/* The original's gradients of the step, summed as its optimizer takes them, into the
 * replica's: apply_step gives the replica the original's step, so weights and moments
 * stay equal to the bit. */
static bv_status replica_update(stage *st, int peer, int64_t ws, bv_error *err)
{
    if (!st->rep)
        return bv_error_set(err, BV_ERR_INTERNAL, "stage %d has no replica", st->s);
    double t0 = bv_now_seconds();
    bv_pipe_msg_in m;
    bv_status rc = bv_stage_link_recv(st->link, BV_PIPE_REPLICA, peer, 0, ws,
                                      st->cfg->peer_timeout_ms, "the replica's gradients", &m,
                                      err);
    st->wait_s += bv_now_seconds() - t0;
    if (rc != BV_OK)
        return rc;
    size_t want = st->rep_nflat * sizeof(float);
    if (m.bytes != want) /* taken from the message itself: no copy on the way */
        rc = bv_error_set(err, BV_ERR_CORRUPT, "the replica's gradients from node %d: %zu "
                          "bytes, expected %zu", peer, m.bytes, want);
    else
        flat_grads(st->rep, NULL, m.data);
    st->upd_brc = false; /* efeb's own gradients are gone */
    bv_stage_link_release(st->link, &m);
    return rc;
}

/* ---- lazy recovery: a lost stage's backward from the redundant forward's saved
 * activations (Bamboo's lazy BRC; docs/redundancy.md#lazy-brc) ---- */

typedef struct brc_grads {
    const bv_layer_engine *le;
    double loss[2];
} brc_grads;

/* bv_stage_link_send_fill's filler: the replica's gradients, flat, then the loss. */
static void fill_brc(void *dst, size_t bytes, const void *ctx)
{
    const brc_grads *g = ctx;
    size_t n = flat_grads(g->le, dst, NULL);
    memcpy((float *)dst + n, g->loss, bytes - n * sizeof(float));
}

/* The shadow's part: the lost node v's backward on every microbatch, in the order v's
 * schedule ran them (its gradients sum in that order, so they are v's to the bit), on the
 * replica from the saved activations of its forwards of the failed attempt; the output
 * gradients are the loss (v was the last stage), this stage's own kept input gradients
 * (two stages) or those the stage after v sends again. efeb ran those backwards eagerly:
 * their gradients are there already. Then the gradients, and v's loss, to the adopted
 * node v. */
static bv_status lazy_backward(stage *st, int v, int64_t ws, bv_error *err)
{
    bool eager = st->upd_brc && node_of(st, st->d, st->rep_stage) == v;
    if (!eager && (!lazy(st) || !st->upd_frc || node_of(st, st->d, st->rep_stage) != v ||
                   !st->cfg->sched))
        return bv_error_set(err, BV_ERR_INTERNAL, "stage node %d cannot run node %d's "
                            "backward: no replica's forward of every microbatch", st->node, v);
    st->upd_frc = st->upd_brc = false; /* a backward may write over saved activations */
    int64_t it = BV_SEQ_STEP_OF(ws), T = st->rows_mb * st->cfg->block;
    int next = (st->rep_stage + 1) % st->P;
    bool last = st->cfg->span_end[st->rep_stage] == st->nlayers;
    const bv_schedule *vs = &st->cfg->sched[st->rep_stage];
    size_t out_elems = (size_t)(T * st->rep_out_w);
    brc_grads g = {st->rep, {st->rep_loss[0], st->rep_loss[1]}};
    if (!eager) {
        g.loss[0] = g.loss[1] = 0;
        bv_layer_engine_zero_grads(st->rep);
    }
    bv_status rc = BV_OK;
    for (size_t i = 0; !eager && rc == BV_OK && i < vs->count; i++) {
        const bv_instruction *ins = bv_schedule_at(vs, i);
        if (ins->op != BV_INSTR_BACKWARD)
            continue;
        int mb = ins->microbatch, rs = mb % st->rep_slots;
        double t0 = bv_now_seconds();
        bv_seq_ctx ctx = make_ctx(st, mb, true, it);
        const float *dout = NULL, *rdin;
        if (last) {
            bv_xent_result xr;
            rc = train_loss(st, st->rep, rs, &ctx, mb, &xr, err);
            g.loss[0] += xr.loss_sum;
            g.loss[1] += (double)xr.count;
        } else if (next == st->s) {
            dout = st->kept + (size_t)mb * out_elems;
        } else {
            rc = recv_into(st, BV_PIPE_GRAD, node_of(st, st->d, next), (uint32_t)mb, ws,
                           "gradients kept for a lost stage", st->rep_dout,
                           out_elems * sizeof(float), err);
            dout = st->rep_dout;
        }
        if (rc == BV_OK)
            rc = bv_layer_engine_span_backward(st->rep, rs, &ctx, dout, &rdin, err);
        st->compute_s += bv_now_seconds() - t0;
    }
    return rc != BV_OK ? rc
                       : bv_stage_link_send_fill(st->link, v, BV_PIPE_REPLICA,
                                                 BV_PIPE_REPLICA_BRC, ws,
                                                 st->rep_nflat * sizeof(float) + sizeof g.loss,
                                                 fill_brc, &g, err);
}

/* The adopted node's part: its gradients of the failed attempt, and its loss, from the
 * shadow's lazy_backward: its schedule goes on from UPDATE with them. */
static bv_status take_brc(stage *st, int shadow, int64_t ws, bv_error *err)
{
    bv_pipe_msg_in m;
    double t0 = bv_now_seconds();
    bv_status rc = bv_stage_link_recv(st->link, BV_PIPE_REPLICA, shadow, BV_PIPE_REPLICA_BRC,
                                      ws, st->cfg->peer_timeout_ms,
                                      "the gradients its shadow ran again", &m, err);
    st->wait_s += bv_now_seconds() - t0;
    if (rc != BV_OK)
        return rc;
    size_t want = st->nflat * sizeof(float) + sizeof st->upd_loss;
    if (m.bytes != want) {
        rc = bv_error_set(err, BV_ERR_CORRUPT, "the gradients run again by node %d: %zu "
                          "bytes, expected %zu", shadow, m.bytes, want);
    } else {
        flat_grads(st->le, NULL, m.data);
        if (st->local && st->D > 1) /* the update takes its own sums from there */
            memcpy(st->local, m.data, st->nflat * sizeof(float));
        else if (st->local)
            tied_grads(st, st->local, NULL);
        memcpy(st->upd_loss, (const float *)m.data + st->nflat, sizeof st->upd_loss);
    }
    bv_stage_link_release(st->link, &m);
    return rc;
}

/* The stage after the lost one: the input gradients it sent it in the failed attempt,
 * again, to the shadow that runs its backward. */
static bv_status resend_kept(stage *st, int shadow, int64_t ws, bv_error *err)
{
    size_t elems = (size_t)(st->rows_mb * st->cfg->block * st->in_w);
    if (!st->kept)
        return bv_error_set(err, BV_ERR_INTERNAL, "stage node %d kept no gradients",
                            st->node);
    bv_status rc = BV_OK;
    for (int mb = 0; rc == BV_OK && mb < st->M; mb++)
        rc = bv_stage_link_send(st->link, shadow, BV_PIPE_GRAD, (uint32_t)mb, ws,
                                st->kept + (size_t)mb * elems, elems * sizeof(float), err);
    return rc;
}

/* Where the failed attempt `prev` left this stage (PHASE's answer). */
static int32_t update_phase(const stage *st, int64_t prev)
{
    if (st->upd_ws != prev || prev < 0)
        return 0;
    return BV_PIPE_AT_UPDATE | (st->upd_frc ? BV_PIPE_HAS_FRC : 0) |
           (st->kept ? BV_PIPE_HAS_KEPT : 0) | (st->upd_brc ? BV_PIPE_HAS_BRC : 0);
}

/* A step that goes on from the update of the failed attempt r->prev: the adopted node's
 * gradients taken from its shadow, the kept ones sent again, the lost node's backward run;
 * the instruction to go on from (UPDATE's), the loss of the step. */
static bv_status go_on(stage *st, const bv_pipe_resume *r, int64_t ws, size_t *from,
                       bv_error *err)
{
    bv_status rc = BV_OK;
    if (r->brc_from >= 0)
        rc = take_brc(st, r->brc_from, ws, err);
    else if (st->upd_ws != r->prev || r->prev < 0)
        rc = bv_error_set(err, BV_ERR_INTERNAL, "stage node %d cannot go on from the update "
                          "of attempt %lld: its gradients of it are gone", st->node,
                          (long long)r->prev);
    if (rc == BV_OK && r->resend_to >= 0)
        rc = resend_kept(st, r->resend_to, ws, err);
    if (rc == BV_OK && r->brc_for >= 0)
        rc = lazy_backward(st, r->brc_for, ws, err);
    *from = st->sched.count;
    for (size_t i = 0; i < st->sched.count; i++)
        if (bv_schedule_at(&st->sched, i)->op == BV_INSTR_UPDATE) {
            *from = i;
            break;
        }
    if (rc == BV_OK || r->brc_from < 0) /* its sums are still its own */
        st->upd_ws = ws;
    return rc;
}

/* ---- one step of the schedule ---- */

/* Step `it` of the schedule, its messages tagged ws (the attempt's wire step); with
 * two-phase steps prepared only (COMMIT applies it). r: the step goes on from the update
 * of a failed attempt (NULL: the whole schedule). */
static bv_status train_step(stage *st, int64_t ws, double lr, const bv_pipe_resume *r,
                            double res[6], bv_error *err)
{
    const bv_seq_pipe_cfg *cfg = st->cfg;
    int64_t it = BV_SEQ_STEP_OF(ws);
    st->pending = false; /* an aborted attempt's, if any */
    bv_stage_link_drop_steps(st->link, ws, true);
    double t_step = bv_now_seconds();
    st->compute_s = st->wait_s = 0;
    int64_t T = st->rows_mb * cfg->block;
    size_t in_bytes = (size_t)(T * st->in_w) * sizeof(float);
    size_t out_bytes = (size_t)(T * st->out_w) * sizeof(float);
    double loss_sum = 0, count = 0, norm = 0;
    const float *din = NULL;
    bv_status rc = BV_OK;
    size_t from = 0;
    if (r) {
        rc = go_on(st, r, ws, &from, err);
        loss_sum = st->upd_loss[0];
        count = st->upd_loss[1];
    } else {
        bv_text_corpus_batch(cfg->corpus, cfg->seed, BV_SEQ_STREAM_TRAIN(it), false,
                             cfg->batch, cfg->block, st->d * st->rows_pipe, st->rows_pipe,
                             st->tokens, st->targets);
        bv_layer_engine_zero_grads(st->le);
        if (st->rep_backward) /* efeb's gradients are this step's; REPLICA_UPDATE writes
                               * every one of the replica's gradients, so nothing else needs
                               * zeros */
            bv_layer_engine_zero_grads(st->rep);
        st->upd_ws = -1;
        st->frc_done = st->brc_done = 0;
        st->rep_loss[0] = st->rep_loss[1] = 0;
    }
    for (size_t i = from; rc == BV_OK && i < st->sched.count; i++) {
        const bv_instruction *ins = bv_schedule_at(&st->sched, i);
        int mb = ins->microbatch, slot = mb >= 0 ? mb % st->slots : 0;
        int peer = ins->peer >= 0 ? node_of(st, st->d, ins->peer) : -1;
        bv_seq_ctx ctx = make_ctx(st, mb >= 0 ? mb : 0, true, it);
        double t0 = bv_now_seconds();
        switch (ins->op) {
        case BV_INSTR_RECV_ACT:
            rc = recv_into(st, BV_PIPE_ACT, peer, (uint32_t)mb, ws, "activations",
                           bv_layer_engine_input(st->le, slot), in_bytes, err);
            break;
        case BV_INSTR_FORWARD:
            if (mb == st->M - 1)
                maybe_die(st, ws, "forward");
            rc = bv_layer_engine_span_forward(st->le, slot, &ctx, &st->out[slot], err);
            st->compute_s += bv_now_seconds() - t0;
            break;
        case BV_INSTR_SEND_ACT:
            rc = bv_stage_link_send(st->link, peer, BV_PIPE_ACT, (uint32_t)mb, ws,
                                    st->out[slot], out_bytes, err);
            break;
        case BV_INSTR_RECV_GRAD:
            if (st->rep && ins->stage == st->rep_stage) /* for the replica's backward */
                rc = recv_into(st, BV_PIPE_GRAD, peer, (uint32_t)mb, ws, "gradients",
                               st->rep_dout,
                               (size_t)(T * st->rep_out_w) * sizeof(float), err);
            else
                rc = recv_into(st, BV_PIPE_GRAD, peer, (uint32_t)mb, ws, "gradients",
                               st->dout, out_bytes, err);
            break;
        case BV_INSTR_BACKWARD:
            if (mb == 0)
                maybe_die(st, ws, "backward");
            if (st->has_head) {
                bv_xent_result xr;
                rc = train_loss(st, st->le, slot, &ctx, mb, &xr, err);
                loss_sum += xr.loss_sum;
                count += (double)xr.count;
            }
            if (rc == BV_OK)
                rc = bv_layer_engine_span_backward(st->le, slot, &ctx,
                                                   st->has_head ? NULL : st->dout, &din, err);
            st->compute_s += bv_now_seconds() - t0;
            break;
        case BV_INSTR_SEND_GRAD:
            if (st->kept && mb >= 0 && mb < st->M && din)
                memcpy(st->kept + (size_t)mb * (in_bytes / sizeof(float)), din, in_bytes);
            rc = bv_stage_link_send(st->link, peer, BV_PIPE_GRAD, (uint32_t)mb, ws, din,
                                    in_bytes, err);
            break;
        case BV_INSTR_UPDATE:
            if (!r) { /* the step's work is done: a failure from here on may keep it */
                st->upd_ws = ws;
                st->upd_loss[0] = loss_sum;
                st->upd_loss[1] = count;
                st->upd_frc = lazy(st) && st->frc_done == st->M;
                st->upd_brc = st->rep_backward && st->brc_done == st->M;
            }
            rc = update(st, ws, lr, &norm, r != NULL, err);
            break;
        case BV_INSTR_REDUNDANT_FORWARD: /* the next stage's forward, here, on its input */
            rc = redundant_forward(st, mb, slot, &ctx, err);
            st->frc_done += rc == BV_OK;
            st->compute_s += bv_now_seconds() - t0;
            break;
        case BV_INSTR_REDUNDANT_BACKWARD: /* and its backward (efeb) */
            rc = redundant_backward(st, mb, &ctx, din, err);
            st->brc_done += rc == BV_OK;
            st->compute_s += bv_now_seconds() - t0;
            break;
        case BV_INSTR_REPLICA_SEND:
            rc = bv_stage_link_send_fill(st->link, peer, BV_PIPE_REPLICA, 0, ws,
                                         st->nflat * sizeof *st->flat, fill_grads, st->le,
                                         err);
            break;
        case BV_INSTR_REPLICA_UPDATE:
            rc = replica_update(st, peer, ws, err);
            break;
        default:
            rc = bv_error_set(err, BV_ERR_INTERNAL, "stage %d cannot run instruction %u",
                              st->s, ins->op);
        }
    }
    double out[6] = {loss_sum, count, norm, st->compute_s, st->wait_s,
                     bv_now_seconds() - t_step};
    memcpy(res, out, sizeof out);
    if (rc == BV_OK && st->two_phase)
        st->pending = true, st->pending_ws = ws, st->pending_lr = lr, st->pending_norm = norm;
    return rc;
}

/* Forward only, one microbatch at a time; the last stage sums each batch's loss. ws: the
 * steps done, and the attempt, which the messages' steps carry. */
static bv_status eval_batches(stage *st, int64_t ws, int split, int64_t iters, double *res,
                              bv_error *err)
{
    const bv_seq_pipe_cfg *cfg = st->cfg;
    int64_t done = BV_SEQ_STEP_OF(ws), attempt = BV_SEQ_STEP_OF(ws >> BV_SEQ_ATTEMPT_SHIFT);
    int64_t T = st->rows_mb * cfg->block;
    size_t in_bytes = (size_t)(T * st->in_w) * sizeof(float);
    size_t out_bytes = (size_t)(T * st->out_w) * sizeof(float);
    for (int64_t i = 0; i < iters; i++) {
        bv_text_corpus_batch(cfg->corpus, cfg->seed, BV_SEQ_STREAM_EVAL(done, split, i),
                             split == 1, cfg->batch, cfg->block, st->d * st->rows_pipe,
                             st->rows_pipe, st->tokens, st->targets);
        res[2 * i] = res[2 * i + 1] = 0;
        int64_t tag_step = -1 - i - (attempt << BV_SEQ_ATTEMPT_SHIFT);
        for (int mb = 0; mb < st->M; mb++) {
            bv_seq_ctx ctx = make_ctx(st, mb, false, done);
            bv_status rc = BV_OK;
            if (st->s > 0)
                rc = recv_into(st, BV_PIPE_ACT, node_of(st, st->d, st->s - 1), (uint32_t)mb,
                               tag_step, "activations", bv_layer_engine_input(st->le, 0),
                               in_bytes, err);
            if (rc == BV_OK)
                rc = bv_layer_engine_span_forward(st->le, 0, &ctx, &st->out[0], err);
            if (rc == BV_OK && !st->has_head)
                rc = bv_stage_link_send(st->link, node_of(st, st->d, st->s + 1), BV_PIPE_ACT,
                                        (uint32_t)mb, tag_step, st->out[0], out_bytes, err);
            if (rc == BV_OK && st->has_head) {
                bv_xent_result xr;
                rc = bv_layer_engine_span_loss(st->le, 0, &ctx, st->targets + mb * T, 0.0f,
                                               &xr, err);
                res[2 * i] += xr.loss_sum;
                res[2 * i + 1] += (double)xr.count;
            }
            if (rc != BV_OK)
                return rc;
        }
    }
    return BV_OK;
}

/* ---- state and checksum ---- */

static bv_status send_state(stage *st, int64_t step, bv_error *err)
{
    bv_state s = {0};
    bv_status rc = BV_OK;
    for (size_t l = st->first; rc == BV_OK && l < st->end; l++)
        rc = bv_layer_engine_layer_get(st->le, l, true, &s, err);
    uint8_t *buf = NULL;
    size_t bytes = 0;
    if (rc == BV_OK)
        rc = bv_stage_state_pack(&s, &buf, &bytes, err);
    bv_state_free(&s);
    if (rc == BV_OK)
        rc = bv_stage_link_send(st->link, st->coord, BV_PIPE_STATE, BV_PIPE_GET_STATE, step,
                                buf, bytes, err);
    free(buf);
    return rc;
}

/* This stage's layers, and its replica's (from the original's blobs), from s. */
static bv_status set_layers(stage *st, const bv_state *s, bv_error *err)
{
    bv_status rc = BV_OK;
    for (size_t l = st->first; rc == BV_OK && l < st->end; l++)
        rc = bv_layer_engine_layer_set(st->le, l, true, s, err);
    if (st->rep) {
        size_t first, end;
        bv_layer_engine_span_of(st->rep, &first, &end);
        for (size_t l = first; rc == BV_OK && l < end; l++)
            rc = bv_layer_engine_layer_set(st->rep, l, true, s, err);
    }
    return rc;
}

static bv_status set_state(stage *st, const bv_pipe_msg_in *m, bv_error *err)
{
    bv_state s = {0};
    bv_status rc = bv_stage_state_unpack(m->data, m->bytes, &s, err);
    if (rc == BV_OK)
        rc = set_layers(st, &s, err);
    bv_state_free(&s);
    return rc;
}

/* CRC-32C over an engine's own parameters (not its replicas), continuing crc. */
static uint32_t params_crc(const bv_layer_engine *le, uint32_t crc)
{
    bv_layer_tensor t;
    size_t first, end;
    bv_layer_engine_span_of(le, &first, &end);
    for (size_t l = first; l < end; l++)
        for (size_t i = 0; i < bv_layer_engine_layer(le, l)->nparams; i++)
            if (bv_layer_engine_tensor(le, l, i, &t) && !t.replica)
                crc = bv_crc32c(crc, t.param, (size_t)t.n * sizeof(float));
    return crc;
}

/* ---- the failover: a shadow adopts the stage it keeps a replica of ---- */

/* ADOPT (node, the address book as the coordinator has it now, then the packed state of
 * the pipeline's other stages): the node's stage started as a thread of this process, its
 * layers this stage's replica (weights and moments, equal to the lost original's at the
 * last step boundary), its own replica from the state that came with the command; it
 * binds the lost node's inbox, so its peers need no new address, and answers the
 * coordinator itself. */
static bv_status adopt(stage *st, const bv_pipe_msg_in *m, bv_error *err)
{
    int32_t node;
    uint32_t book;
    if (m->bytes < sizeof node + sizeof book)
        return bv_error_set(err, BV_ERR_CORRUPT, "an adopt command of %zu bytes", m->bytes);
    const char *p = m->data;
    memcpy(&node, p, sizeof node);
    memcpy(&book, p + sizeof node, sizeof book);
    size_t at = sizeof node + sizeof book;
    if (book > m->bytes - at)
        return bv_error_set(err, BV_ERR_CORRUPT, "an adopt command of %zu bytes", m->bytes);
    if (!st->rep || node != node_of(st, st->d, st->rep_stage) || st->adopted)
        return bv_error_set(err, BV_ERR_INVALID, "stage node %d cannot adopt node %d: it "
                            "keeps %s", st->node, (int)node,
                            st->adopted ? "an adopted stage already" : "no replica of it");
    adopted *w = calloc(1, sizeof *w);
    bv_state *s = calloc(1, sizeof *s);
    if (!w || !s) {
        free(w);
        free(s);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    w->a.adopt = s;
    bv_status rc = adopted_book(w, st->coord + 1, p + at, book, err);
    if (rc == BV_OK)
        rc = bv_stage_state_unpack(p + at + book, m->bytes - at - book, s, err);
    size_t first, end;
    bv_layer_engine_span_of(st->rep, &first, &end);
    for (size_t l = first; rc == BV_OK && l < end; l++)
        rc = bv_layer_engine_layer_get(st->rep, l, true, s, err);
    bv_seq_stage_arg *a = &w->a;
    *a = (bv_seq_stage_arg){.cfg = st->cfg, .addrs = w->addrs,
                            .transport = st->arg->transport, .stage = st->rep_stage,
                            .pipeline = st->d, .sliced = st->arg->sliced,
                            .send_bound_ms = st->arg->send_bound_ms, .adopt = s,
                            .adopt_step = m->step, .adopted = true};
    atomic_init(&a->gone, false);
    atomic_init(&a->bound, 0);
    if (rc == BV_OK && pthread_create(&st->adopted_thread, NULL, bv_seq_stage_main, a) != 0)
        rc = bv_error_set(err, BV_ERR_IO, "cannot start a thread for node %d", (int)node);
    if (rc != BV_OK) {
        adopted_free(w);
        return rc;
    }
    st->adopted = w;
    while (atomic_load(&a->bound) == 0) /* its inbox, or why not */
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    if (atomic_load(&a->bound) < 0)
        return bv_error_set(err, BV_ERR_IO, "node %d's stage could not open its inbox %s",
                            (int)node, w->addrs[node]);
    return BV_OK;
}

/* ---- the command loop ---- */

static bv_status run_command(stage *st, const bv_pipe_msg_in *m, bv_error *err)
{
    double res[6] = {0};
    switch (m->tag) {
    case BV_PIPE_INIT:
        bv_layer_engine_init(st->le, st->cfg->seed);
        if (st->rep) /* the same draws as the original's */
            bv_layer_engine_init(st->rep, st->cfg->seed);
        break;
    case BV_PIPE_TRAIN: {
        double lr;
        bv_pipe_resume r;
        if (m->bytes != sizeof lr && m->bytes != sizeof lr + sizeof r)
            return bv_error_set(err, BV_ERR_CORRUPT, "a train command of %zu bytes", m->bytes);
        memcpy(&lr, m->data, sizeof lr);
        if (m->bytes > sizeof lr)
            memcpy(&r, (const char *)m->data + sizeof lr, sizeof r);
        bv_status rc = train_step(st, m->step, lr, m->bytes > sizeof lr ? &r : NULL, res, err);
        if (rc != BV_OK)
            return rc;
        return bv_stage_link_send(st->link, st->coord, BV_PIPE_DONE, m->tag, m->step, res,
                                  sizeof res, err);
    }
    case BV_PIPE_COMMIT:
        if (!st->pending || m->step != st->pending_ws)
            return bv_error_set(err, BV_ERR_INTERNAL, "stage node %d has no prepared step "
                                "%lld to commit", st->node, (long long)m->step);
        maybe_die(st, m->step, "prepared");
        apply_step(st, BV_SEQ_STEP_OF(m->step), st->pending_lr, st->pending_norm);
        st->pending = false;
        break;
    case BV_PIPE_ADOPT:
        return adopt(st, m, err); /* the adopted stage answers */
    case BV_PIPE_PING: /* the coordinator looks for a stage process that hangs */
        break;
    case BV_PIPE_PHASE: { /* after a failure: may the step go on from its update here? */
        int32_t r = update_phase(st, m->step);
        return bv_stage_link_send(st->link, st->coord, BV_PIPE_DONE, m->tag, m->step, &r,
                                  sizeof r, err);
    }
    case BV_PIPE_REROUTE: { /* a stage given a process of its own again */
        int32_t node;
        char address[96];
        if (m->bytes <= sizeof node || m->bytes - sizeof node >= sizeof address)
            return bv_error_set(err, BV_ERR_CORRUPT, "a reroute command of %zu bytes",
                                m->bytes);
        memcpy(&node, m->data, sizeof node);
        snprintf(address, sizeof address, "%.*s", (int)(m->bytes - sizeof node),
                 (const char *)m->data + sizeof node);
        bv_status rc = bv_stage_link_reroute(st->link, node, address, err);
        if (rc != BV_OK)
            return rc;
        break;
    }
    case BV_PIPE_RELEASE: /* it runs in a process of its own again */
        if (!st->adopted)
            return bv_error_set(err, BV_ERR_INVALID, "stage node %d adopted no stage",
                                st->node);
        pthread_join(st->adopted_thread, NULL);
        adopted_free(st->adopted);
        st->adopted = NULL;
        break;
    case BV_PIPE_EVAL: {
        int64_t a[2];
        if (m->bytes != sizeof a)
            return bv_error_set(err, BV_ERR_CORRUPT, "an eval command of %zu bytes", m->bytes);
        memcpy(a, m->data, sizeof a);
        double *sums = calloc((size_t)(2 * a[1]) + 1, sizeof *sums);
        if (!sums)
            return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        bv_status rc = eval_batches(st, m->step, (int)a[0], a[1], sums, err);
        if (rc == BV_OK)
            rc = bv_stage_link_send(st->link, st->coord, BV_PIPE_DONE, m->tag, m->step, sums,
                                    st->has_head ? (size_t)(2 * a[1]) * sizeof *sums : 0,
                                    err);
        free(sums);
        return rc;
    }
    case BV_PIPE_GET_STATE:
        return send_state(st, m->step, err);
    case BV_PIPE_SET_STATE: {
        bv_status rc = set_state(st, m, err);
        if (rc != BV_OK)
            return rc;
        break;
    }
    case BV_PIPE_CRC: {
        uint32_t crc;
        if (m->bytes != sizeof crc)
            return bv_error_set(err, BV_ERR_CORRUPT, "a crc command of %zu bytes", m->bytes);
        memcpy(&crc, m->data, sizeof crc);
        crc = params_crc(st->le, crc);
        return bv_stage_link_send(st->link, st->coord, BV_PIPE_DONE, m->tag, m->step, &crc,
                                  sizeof crc, err);
    }
    case BV_PIPE_REPLICA_CRC: {
        uint32_t r[3] = {(uint32_t)st->rep_stage, params_crc(st->le, 0),
                         st->rep ? params_crc(st->rep, 0) : 0};
        return bv_stage_link_send(st->link, st->coord, BV_PIPE_DONE, m->tag, m->step, r,
                                  sizeof r, err);
    }
    default:
        return bv_error_set(err, BV_ERR_CORRUPT, "unknown command %u", m->tag);
    }
    return bv_stage_link_send(st->link, st->coord, BV_PIPE_DONE, m->tag, m->step, NULL, 0, err);
}

/* Links over tcp: the address this stage bound to the coordinator, and every node's
 * address back (the book), into addr (which the link reads its peers' from). */
static bv_status rendezvous(stage *st, char (*addr)[96], bv_error *err)
{
    const char *bound = bv_stage_link_bound(st->link);
    bv_status rc = bv_stage_link_send(st->link, st->coord, BV_PIPE_HELLO, 0, 0, bound,
                                      strlen(bound), err);
    bv_pipe_msg_in m;
    if (rc == BV_OK)
        rc = bv_stage_link_recv(st->link, BV_PIPE_BOOK, st->coord, 0, 0,
                                st->cfg->peer_timeout_ms, "address book", &m, err);
    if (rc != BV_OK)
        return rc;
    const char *p = m.data, *end = p + m.bytes;
    int n = 0;
    for (; n <= st->coord && p < end; n++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : 0;
        if (!nl || len <= 6 || len >= 96 || memcmp(p, "tcp://", 6) != 0 || memchr(p, '*', len))
            break;
        snprintf(addr[n], 96, "%.*s", (int)len, p);
        p = nl + 1;
    }
    bool whole = n == st->coord + 1 && p == end;
    bv_stage_link_release(st->link, &m);
    return whole ? BV_OK
                 : bv_error_set(err, BV_ERR_CORRUPT, "the coordinator's book is not the "
                                "addresses of %d nodes", st->coord + 1);
}

void *bv_seq_stage_main(void *arg)
{
    bv_seq_stage_arg *a = arg;
    const bv_seq_pipe_cfg *cfg = a->cfg;
    stage st = {.cfg = cfg, .x = cfg->x, .s = a->stage, .d = a->pipeline, .P = cfg->stages,
                .D = cfg->pipelines, .M = cfg->microbatches, .arg = a};
    st.node = node_of(&st, st.d, st.s);
    st.coord = st.D * st.P;
    st.rows_pipe = cfg->batch / st.D;
    st.rows_mb = st.rows_pipe / st.M;
    bv_error err = {0};
    if (bv_stage_link_open(&cfg->x->transport_ops, a->transport, a->addrs, st.coord + 1,
                           st.node, &st.link, &err) != BV_OK) {
        bv_log(BV_LOG_ERROR, "stage %d of pipeline %d: %s", st.s, st.d, err.msg);
        stage_free(&st);
        atomic_store(&a->gone, true); /* the coordinator's wait sees it and says so */
        if (a->adopted) /* the shadow answers for it (and frees a->adopt) */
            atomic_store(&a->bound, -1);
        return NULL;
    }
    if (a->adopted)
        atomic_store(&a->bound, 1);
    if (a->sliced)
        bv_stage_link_slice_sends(st.link, a->send_bound_ms);
    if (a->addr_store && rendezvous(&st, a->addr_store, &err) != BV_OK) {
        bv_log(BV_LOG_ERROR, "stage %d of pipeline %d: %s", st.s, st.d, err.msg);
        stage_free(&st);
        atomic_store(&a->gone, true);
        return NULL;
    }
    bv_status setup = stage_setup(&st, &err);
    bv_error setup_err = err;
    if (a->adopted) { /* its state, then its answer to the coordinator's ADOPT */
        bv_status rc = setup == BV_OK ? set_layers(&st, a->adopt, &err) : setup;
        bv_state_free(a->adopt);
        free(a->adopt);
        a->adopt = NULL;
        bv_error e2 = {0};
        const char *bound = bv_stage_link_bound(st.link); /* over tcp: a new port */
        if (rc == BV_OK)
            bv_stage_link_send(st.link, st.coord, BV_PIPE_DONE, BV_PIPE_ADOPT, a->adopt_step,
                               bound, strlen(bound), &e2);
        else
            bv_stage_link_send(st.link, st.coord, BV_PIPE_ERROR, BV_PIPE_ADOPT, a->adopt_step,
                               err.msg, strlen(err.msg), &e2);
        if (setup == BV_OK && rc != BV_OK)
            setup = rc, setup_err = err;
    }
    for (;;) {
        bv_pipe_msg_in m;
        bv_status rc = bv_stage_link_recv(st.link, BV_PIPE_CMD, st.coord, BV_PIPE_ANY_TAG,
                                          BV_PIPE_ANY_STEP, BV_TIMEOUT_FOREVER, "a command",
                                          &m, &err);
        if (rc == BV_ERR_STOPPED) /* an abort that found this stage idle */
            continue;
        if (rc != BV_OK)
            break;
        if (m.tag == BV_PIPE_STOP) {
            bv_stage_link_release(st.link, &m);
            break;
        }
        err = setup_err;
        bv_stage_link_command(st.link, m.step); /* only its own abort stops it */
        rc = setup != BV_OK ? setup : run_command(&st, &m, &err);
        int64_t step = m.step;
        uint32_t cmd = m.tag;
        bv_stage_link_release(st.link, &m);
        if (rc != BV_OK) { /* the failed command's messages are stale; over a training
                               * step's, those of its next attempt may have come */
            if (cmd == BV_PIPE_TRAIN)
                bv_stage_link_drop_steps(st.link, step, false);
            else
                bv_stage_link_clear(st.link);
            bv_error e2 = {0};
            bv_stage_link_send(st.link, st.coord, BV_PIPE_ERROR, cmd, step, err.msg,
                               strlen(err.msg), &e2);
        }
    }
    if (st.adopted) { /* it ends on the coordinator's STOP too */
        pthread_join(st.adopted_thread, NULL);
        adopted_free(st.adopted);
    }
    stage_free(&st);
    return NULL;
}

/* ---- a stage as its own process ---- */

bv_status bv_seq_serve_stage(const bv_experiment *x, void *corpus, int index, uint64_t seed,
                             const char *book, const char *member, bv_error *err)
{
    bv_seq_model_ops mops;
    bv_ops_copy(&mops, sizeof mops, x->model.plugin);
    bv_seq_pipe_cfg cfg;
    bv_status rc = bv_seq_pipe_cfg_make(x, corpus, &mops, seed, &cfg, err);
    if (rc != BV_OK)
        return rc;
    char(*addr)[96] = NULL;
    rc = bv_seq_pipe_read_book(book, &cfg, &addr, err); /* the layout is the book's */
    int nodes = cfg.stages * cfg.pipelines;
    if (rc == BV_OK && (index < 0 || index >= nodes))
        rc = bv_error_set(err, BV_ERR_INVALID, "stage node %d of %d", index, nodes);
    const char **addrs = rc == BV_OK ? calloc((size_t)nodes + 1, sizeof *addrs) : NULL;
    if (rc == BV_OK && !addrs)
        rc = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (int n = 0; addrs && n <= nodes; n++)
        addrs[n] = addr[n];
    bv_transport *tr = NULL;
    if (rc == BV_OK) {
        bv_node_group_term_cleanup_begin(book); /* SIGTERM: the run's sockets go too */
        for (int n = 0; n <= nodes; n++)
            bv_node_group_term_cleanup_add(addr[n]);
        bv_node_group_term_cleanup_arm();
        cfg.tcp = cfg.curve_secret[0] != '\0'; /* the book holds a key over tcp alone */
        rc = bv_node_group_transport(&x->transport_ops, &x->transport.opts, cfg.curve_secret,
                                     BV_SEND_SLICE_MS, &tr, err);
    }
    const bv_opt_value *bound = bv_opts_find(&x->transport.opts, "send_timeout_ms");
    bv_membership joined = {0};
    char what[32];
    snprintf(what, sizeof what, "stage node %d", index);
    if (rc == BV_OK && member && !cfg.etcd[0])
        rc = bv_error_set(err, BV_ERR_INVALID, "--member %s: the experiment has no "
                          "cluster.membership: etcd", member);
    else if (rc == BV_OK && member)
        rc = bv_membership_node(&joined, cfg.etcd, cfg.lease_s, member, what, err);
    if (rc == BV_OK && !cfg.relaunches) /* a fault fires in the run's first launch only */
        rc = read_faults(getenv("BIVOUAC_STAGE_FAULT"), err);
    if (rc == BV_OK) {
        bv_seq_stage_arg a = {.cfg = &cfg, .addrs = addrs, .transport = tr,
                              .stage = index % cfg.stages, .pipeline = index / cfg.stages,
                              .addr_store = cfg.tcp ? addr : NULL, .sliced = true,
                              .send_bound_ms = bound ? (int)bound->v.i : -1};
        atomic_init(&a.gone, false);
        atomic_init(&a.bound, 0);
        bv_seq_stage_main(&a);
        if (atomic_load(&a.gone))
            rc = bv_error_set(err, BV_ERR_IO, "stage node %d could not open its inbox %s",
                              index, addr[index]);
    }
    bv_membership_leave(&joined);
    if (tr)
        x->transport_ops.destroy(tr);
    bv_seq_pipe_cfg_free(&cfg);
    free(addr);
    free(addrs);
    return rc;
}
