/* The pipeline's coordinator (pipeline_seq.h): the stages started, as threads over the
 * experiment's transport (inproc) or as processes on its cloud (ipc, in a private
 * directory, node_group.h); one command at a time to every stage, their replies
 * collected; a stage's error, or a stage process that ends, aborts the others' waits and
 * is returned naming the stage. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "bivouac/series.h"
#include "clock.h"
#include "membership.h"
#include "node_group.h"
#include "pipeline_plan.h"
#include "pipeline_seq.h"
#include "stage_link.h"

#define ADDR_LEN 96
#define WATCH_MS 50
#define BOOK_MAGIC "bivouac-stage-book 1"
/* A PING's command step: a range of its own (bit 61), never a training step's or an
 * evaluation's (BV_SEQ_EVAL_STEP, bit 62), so that no late message of theirs matches. */
#define PING_STEP(n) ((int64_t)(n) | (int64_t)1 << 61)
/* How long hunt() waits for the PINGs' answers (or peer_timeout, if shorter): a node asked
 * has been silent for peer_timeout already, and a live one answers at once. */
#define PING_WAIT_MS 1000

struct bv_seq_pipe {
    bv_seq_pipe_cfg cfg;
    bv_transport *tr;
    int nodes; /* stages of every pipeline; the coordinator is node `nodes` */
    char (*addr)[ADDR_LEN];
    const char **addrs;
    bv_seq_stage_arg *args;
    pthread_t *threads;
    int started;   /* threads started */
    bv_stage_link *link;
    /* stages as processes */
    bv_cloud *cloud;
    bool own_cloud; /* created here (cfg.cloud was NULL): destroyed when it stops */
    int64_t *node; /* per process (launched for stage node n): the cloud's id, -1 gone */
    int *host;     /* per stage node: the process that runs it (its own, or a shadow's) */
    int lost;      /* the process whose end failed the last command, -1 none */
    const int *watch; /* the nodes asked alone (ask, gather); another's end is kept */
    int nwatch;       /*   for later; 0: every end fails the wait */
    bv_error deferred; /* how that other end was seen */
    bv_error last_loss; /* how the last process lost was seen (wherever) */
    double loss_at;     /* when a training step's collect() first named a loss (0: none):
                           the failover's pause counts from there */
    int64_t gathers;   /* gathers of stage states: each has a step of its own (-gathers),
                          so that a late answer of one that failed is never taken for a
                          later one's */
    int reroute;      /* a stage given a process of its own whose address not every node
                         has been told yet, -1 none */
    bool two_phase; /* bv_seq_pipe_two_phase: steps prepared, then committed */
    int failovers, replacements;
    int resumed, lazy_brc; /* failed steps that went on from their update; lost stages'
                              backwards run again by their shadows (lazy BRC) */
    int64_t pings; /* PINGs sent (hunt()) */
    double failover_s; /* from each loss seen to the end of the step run again */
    int offered;       /* capacity the cloud offered (BV_CLOUD_OFFERED) not launched yet */
    int asked_offered, asked_degraded; /* what the last `joined` event said */
    int64_t degraded_steps;            /* steps run with a stage in another's process */
    bool relayout_due;                 /* the policy chose to lay the stages out afresh */
    bv_seq_pipe_layout relayout;       /*   as this says */
    double degraded_since;
    char dir[64];
    bool signals;
    bool failed; /* a stage failed or ended: stop ends the rest without waiting */
    int send_bound_ms; /* the transport's send bound (< 0: none) */
    double next_watch;
    double started_at;
    /* cluster.membership: etcd: the coordinator's own key, the stage processes' watched */
    bv_membership member;
    int64_t *token; /* per process: the launch its key names */
    int64_t launches;
};

static atomic_int pipe_counter;

static void stage_name(const bv_seq_pipe *p, int node, char *buf, size_t len)
{
    if (p->cfg.pipelines > 1)
        snprintf(buf, len, "stage %d of pipeline %d", node % p->cfg.stages,
                 node / p->cfg.stages);
    else
        snprintf(buf, len, "stage %d", node);
}

static bv_status watch(bv_seq_pipe *p, bv_error *err);
static bool recovered(bv_seq_pipe *p, double *lost_at, bv_error *err);
static bv_status reroute(bv_seq_pipe *p, bv_error *err);

/* Sends a message to a stage node. With stage processes each try gives up after
 * BV_SEND_SLICE_MS and the stages are looked at between tries, until the transport's
 * send bound: a stage that ended fails the send within a slice of its end, named (the
 * transport's own words would not name it), not after the whole bound. */
static bv_status send_to(bv_seq_pipe *p, int node, uint16_t type, uint32_t tag, int64_t step,
                         const void *data, size_t bytes, bv_error *err)
{
    if (p->node && p->node[p->host[node]] < 0) /* its process ended: nobody would take it */
        return bv_error_set(err, BV_ERR_IO, "stage node %d has ended", node);
    double until = bv_now_seconds() + p->send_bound_ms * 1e-3;
    bv_status rc;
    for (;;) {
        rc = bv_stage_link_send(p->link, node, type, tag, step, data, bytes, err);
        if (rc != BV_ERR_IO || !p->cloud ||
            (p->send_bound_ms >= 0 && bv_now_seconds() >= until))
            break;
        bv_error why = {0};
        if (watch(p, &why) != BV_OK) {
            *err = why;
            p->failed = true;
            return why.status;
        }
    }
    /* explained by a stage process that ended, if one does within a moment */
    for (double end = bv_now_seconds() + 1.0; rc != BV_OK && p->cloud && bv_now_seconds() < end;) {
        bv_error why = {0};
        if (watch(p, &why) != BV_OK) {
            *err = why;
            p->failed = true;
            return why.status;
        }
        nanosleep(&(struct timespec){0, WATCH_MS * 1000000L}, NULL);
    }
    return rc;
}

static bv_status send_cmd(bv_seq_pipe *p, int node, uint32_t cmd, int64_t step,
                          const void *data, size_t bytes, bv_error *err)
{
    return send_to(p, node, BV_PIPE_CMD, cmd, step, data, bytes, err);
}

static void node_name(void *p, int node, char *buf, size_t len)
{
    stage_name(p, node, buf, len);
}

/* The resilience strategies hear first that stage node n's process (cloud id `id`) is
 * gone. */
static void tell_strategies(const bv_seq_pipe *p, int n, int64_t id)
{
    bv_peer_event ev = {sizeof ev, "stage", id, p->addr[n], bv_now_seconds() - p->started_at};
    if (p->cfg.peer_failed)
        p->cfg.peer_failed(p->cfg.loop, &ev);
}

/* Process n (cloud node id) is lost, as `how` says: err says so, or, where the
 * coordinator waits for one other node's answer alone, it is kept for later. */
static bv_status lose(bv_seq_pipe *p, int n, int64_t id, const char *how, bv_error *err)
{
    char who[64];
    p->lost = n;
    stage_name(p, n, who, sizeof who);
    tell_strategies(p, n, id);
    bool later = p->two_phase && p->nwatch > 0;
    for (int i = 0; i < p->nwatch; i++)
        later = later && p->host[p->watch[i]] != n;
    bv_status st = bv_error_set(later ? &p->deferred : err, BV_ERR_IO,
                                "lost %s (node %lld on localhost): it %s", who,
                                (long long)id, how);
    p->last_loss = later ? p->deferred : *err;
    return later ? BV_OK : st; /* a wait for another node goes on */
}

/* What etcd said (cluster.membership: etcd): a stage process whose lease ran out (it
 * died, froze, or lost its network for the whole lease) is killed, so that it cannot
 * come back, and lost; the coordinator's own lease lost ends the run, for the stages
 * hear of it and stop. A key of an earlier launch, or of a process already lost, is
 * nothing new. */
static bv_status heard(bv_seq_pipe *p, bv_error *err)
{
    int n;
    int64_t token;
    bool own;
    while (bv_membership_next_lost(&p->member, &n, &token, &own)) {
        if (own)
            return bv_membership_own_lost(&p->member, err);
        if (n < 0 || n >= p->nodes || p->token[n] != token || p->node[n] < 0)
            continue;
        int64_t id = p->node[n];
        bv_node_group_kill(p->cfg.cloud_ops, p->cloud, p->node, n);
        char how[128];
        bv_membership_how(&p->member, how, sizeof how);
        bv_status st = lose(p, n, id, how, err);
        if (st != BV_OK)
            return st;
    }
    return BV_OK;
}

/* A stage that cannot answer: a thread that could not open its inbox, a process that
 * ended (named, with how it ended), one whose etcd lease ran out, or Ctrl-C. */
static bv_status watch(bv_seq_pipe *p, bv_error *err)
{
    for (int n = 0; n < p->started; n++)
        if (atomic_load(&p->args[n].gone)) {
            char who[64];
            stage_name(p, n, who, sizeof who);
            return bv_error_set(err, BV_ERR_IO, "%s could not open its inbox", who);
        }
    if (!p->cloud)
        return BV_OK;
    int n;
    int64_t id;
    int32_t status;
    int got = bv_node_group_poll(p->cfg.cloud_ops, p->cloud, p->node, p->nodes, &n, &id,
                                 &status, err);
    if (got < 0)
        return err->status ? err->status : BV_ERR_PLUGIN;
    if (got == 2)
        p->offered++;
    if (got == 3 && p->offered > 0) /* a launch would stand for no node of the cloud's */
        p->offered--;
    if (got == 1) {
        char how[96];
        bv_node_group_exit_text(status, how, sizeof how);
        return lose(p, n, id, how, err);
    }
    if (bv_node_group_interrupted())
        return bv_error_set(err, BV_ERR_IO, "interrupted (%s): stopping the stages",
                            strsignal(bv_node_group_interrupted()));
    return p->member.member ? heard(p, err) : BV_OK;
}

static bv_status watch_due(bv_seq_pipe *p, bv_error *err)
{
    double t = bv_now_seconds();
    if (t < p->next_watch)
        return BV_OK;
    p->next_watch = t + WATCH_MS * 1e-3;
    return watch(p, err);
}

/* The first failure of a command: err says it, and every stage stops waiting for the
 * failed one (ABORT). */
static bv_status abort_all(bv_seq_pipe *p, int64_t step, bv_error *err, bv_status st,
                           const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static bv_status abort_all(bv_seq_pipe *p, int64_t step, bv_error *err, bv_status st,
                           const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[sizeof err->msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bv_error ignored;
    for (int n = 0; n < p->nodes; n++)
        send_cmd(p, n, BV_PIPE_ABORT, step, NULL, 0, &ignored);
    return bv_error_set(err, st, "%s", msg);
}

/* Whether stage node n's process is gone. */
static bool node_lost(const bv_seq_pipe *p, int n)
{
    return p->node[p->host[n]] < 0;
}

/* An ABORT of the training step `step` that names the nodes n[0..count) (they send
 * nothing more for it), to every node whose process is there: only the waits for those
 * end (stage_link.c). */
static void abort_nodes(bv_seq_pipe *p, int64_t step, const int32_t *n, int count)
{
    bv_error ignored;
    for (int k = 0; k < p->nodes; k++)
        if (!node_lost(p, k))
            send_cmd(p, k, BV_PIPE_ABORT, step, n, (size_t)count * sizeof *n, &ignored);
}

/* Whether a stage node's process is gone that no ABORT of the step named yet. */
static bool lost_unnamed(const bv_seq_pipe *p, const bool *named)
{
    for (int n = 0; n < p->nodes; n++)
        if (node_lost(p, n) && !named[n])
            return true;
    return false;
}

/* Waits for `answers` answers to cmd (every node's, or the one node's asked): DONE (data
 * handed to each(), may be NULL) or ERROR. The first error aborts the waits of the others
 * (ABORT), so no stage is left waiting for a peer, and drops what came so far; a stage
 * process that ended (or Ctrl-C) ends the wait at once, and the stop ends the rest. A
 * training step of stages that fail over is the exception (docs/redundancy.md#lazy-brc):
 * there a lost process's nodes are named in an ABORT that ends only the waits for them,
 * and so is each node that answers an error after it, and every other node's answer is
 * awaited: each stage gets as far into the step as the messages sent before the loss
 * take it, and a failed step may go on from where they left it. With
 * stage processes, an answer still missing peer_timeout after the last one came (after
 * the command, where one node was asked) is an error too: a process that hangs is alive
 * and says nothing (recovered() finds it). Stages that wait on each other answer within
 * moments of each other, and a stage that waits on one that hangs errs in peer_timeout. */
static bv_status collect(bv_seq_pipe *p, int answers, uint32_t cmd, int64_t step,
                         uint16_t done_type,
                         bv_status (*each)(bv_seq_pipe *, int node, const bv_pipe_msg_in *,
                                           void *, bv_error *),
                         void *ctx, bv_error *err)
{
    bv_status first = BV_OK;
    double bound = p->cloud ? p->cfg.peer_timeout_ms * 1e-3 : 0, last = bv_now_seconds();
    bool train = cmd == BV_PIPE_TRAIN && p->two_phase && p->host && answers == p->nodes;
    bool targeted = false; /* a loss named in an ABORT: each error is named too */
    bool *said = train ? calloc((size_t)p->nodes, sizeof *said) : NULL; /* answered */
    bool *named = train ? calloc((size_t)p->nodes, sizeof *named) : NULL;
    int32_t *gone = train ? calloc((size_t)p->nodes, sizeof *gone) : NULL;
    if (!gone || !named || !said)
        train = false;
    for (int answered = 0; answered < answers; answered++) {
        bv_pipe_msg_in m = {0};
        bv_error e = {0};
        bv_status rc = BV_OK;
        /* the stages are looked at every WATCH_MS, answering or not (Ctrl-C) */
        while (!(train && lost_unnamed(p, named)) && (rc = watch_due(p, &e)) == BV_OK &&
               (rc = bv_stage_link_recv(p->link, done_type, -1, cmd, step, WATCH_MS,
                                        "an answer", &m, &e)) != BV_OK &&
               bv_stage_link_timed_out(p->link)) {
            if (bound > 0 && (answered > 0 || answers == 1) &&
                bv_now_seconds() - last > bound) {
                char who[64] = "";
                if (answers == 1 && p->nwatch == 1)
                    stage_name(p, p->watch[0], who, sizeof who);
                else
                    snprintf(who, sizeof who, "%d of %d stage nodes", answers - answered,
                             answers);
                rc = bv_error_set(&e, BV_ERR_IO, "no answer from %s within %g s", who,
                                  bound);
                break;
            }
        }
        last = bv_now_seconds();
        if (train && lost_unnamed(p, named) && !bv_node_group_interrupted()) {
            /* lost processes (seen here or in a send): their nodes answer nothing more,
             * and are named; the others are awaited */
            int count = 0;
            for (int n = 0; n < p->nodes; n++)
                if (node_lost(p, n) && !named[n]) {
                    bool in_hand = m.own && n == (int)m.sender; /* counted below */
                    named[n] = true;
                    gone[count++] = n;
                    answers -= !said[n] && !in_hand;
                    said[n] = true;
                }
            abort_nodes(p, step, gone, count);
            if (first == BV_OK)
                first = bv_error_set(err, BV_ERR_IO, "%s", p->last_loss.msg);
            if (p->loss_at == 0)
                p->loss_at = bv_now_seconds();
            targeted = true;
            if (!m.own) { /* no answer came: wait again */
                answered--;
                continue;
            }
            rc = BV_OK; /* the answer that came is taken below */
        }
        if (rc != BV_OK) {
            if (first == BV_OK)
                first = abort_all(p, step, err, rc, "%s", e.msg);
            break;
        }
        char who[64];
        stage_name(p, (int)m.sender, who, sizeof who);
        if (said && m.sender < (uint32_t)p->nodes)
            said[m.sender] = true;
        if (m.type == BV_PIPE_ERROR && targeted) { /* it sends nothing more either */
            int32_t n = (int32_t)m.sender;
            abort_nodes(p, step, &n, 1);
        } else if (m.type == BV_PIPE_ERROR) {
            if (first == BV_OK)
                first = abort_all(p, step, err, BV_ERR_STOPPED, "%s: %.*s", who, (int)m.bytes,
                                  (const char *)m.data);
        } else if (each && first == BV_OK) {
            rc = each(p, (int)m.sender, &m, ctx, &e);
            if (rc != BV_OK)
                first = bv_error_set(err, rc, "%s: %s", who, e.msg);
        }
        bv_stage_link_release(p->link, &m);
    }
    free(said);
    free(named);
    free(gone);
    if (first != BV_OK) {
        bv_stage_link_clear(p->link);
        p->failed = true;
    }
    return first;
}

static bv_status broadcast(bv_seq_pipe *p, uint32_t cmd, int64_t step, const void *data,
                           size_t bytes,
                           bv_status (*each)(bv_seq_pipe *, int, const bv_pipe_msg_in *,
                                             void *, bv_error *),
                           void *ctx, bv_error *err)
{
    for (int n = 0; n < p->nodes; n++) {
        bv_status rc = send_cmd(p, n, cmd, step, data, bytes, err);
        if (rc != BV_OK) { /* the nodes that have it would wait for this one */
            bv_error e = *err;
            p->failed = true;
            return abort_all(p, step, err, rc, "%s", e.msg);
        }
    }
    return collect(p, p->nodes, cmd, step, BV_PIPE_DONE, each, ctx, err);
}

/* broadcast() of a command of step 0 that is whole again after a failover (INIT,
 * SET_STATE, REPLICA_CRC): a stage process lost in it is failed over, and it is sent to
 * every stage again. */
static bv_status broadcast_again(bv_seq_pipe *p, uint32_t cmd, const void *data,
                                 size_t bytes,
                                 bv_status (*each)(bv_seq_pipe *, int, const bv_pipe_msg_in *,
                                                   void *, bv_error *),
                                 void *ctx, bv_error *err)
{
    double lost_at = 0;
    bv_status rc;
    while ((rc = broadcast(p, cmd, 0, data, bytes, each, ctx, err)) != BV_OK &&
           recovered(p, &lost_at, err)) {
    }
    return rc;
}

void bv_seq_pipe_stop(bv_seq_pipe *p)
{
    if (!p)
        return;
    bv_error e = {0};
    for (int n = 0; p->link && n < (p->cloud ? p->nodes : p->started); n++)
        send_cmd(p, n, BV_PIPE_STOP, 0, NULL, 0, &e);
    for (int n = 0; n < p->started; n++)
        pthread_join(p->threads[n], NULL);
    if (p->cloud) { /* the processes exit on STOP; the cloud ends those that do not */
        if (!p->failed && !bv_node_group_interrupted())
            bv_node_group_await_exits(p->cfg.cloud_ops, p->cloud, p->node, p->nodes,
                                      p->cfg.peer_timeout_ms / 1e3, node_name, p);
        if (p->own_cloud)
            bv_node_group_end(p->cfg.cloud_ops, p->cloud, p->node, p->nodes);
        else
            bv_node_group_end_nodes(p->cfg.cloud_ops, p->cloud, p->node, p->nodes);
    }
    bv_membership_leave(&p->member); /* after the stages: they stop when its key goes */
    free(p->token);
    bv_stage_link_close(p->link);
    if (p->tr)
        p->cfg.x->transport_ops.destroy(p->tr);
    if (p->dir[0])
        bv_node_group_remove_dir(p->dir);
    if (p->signals)
        bv_node_group_signals_off();
    free(p->node);
    free(p->host);
    free(p->addr);
    free(p->addrs);
    free(p->args);
    free(p->threads);
    free(p);
}

/* The stages' spans of the model's `layers` layers (the embeddings, the blocks, the head)
 * from the blocks' partition first[0..stages]: the first stage also runs the embeddings,
 * the last the head. */
static void set_spans(bv_seq_pipe_cfg *c, const int *first, size_t layers)
{
    for (int s = 0; s < c->stages; s++) {
        c->span_first[s] = s == 0 ? 0 : 1 + (size_t)first[s];
        c->span_end[s] = s == c->stages - 1 ? layers : 1 + (size_t)first[s + 1];
    }
}

bv_status bv_seq_pipe_cfg_make(const bv_experiment *x, const bv_text_corpus *corpus,
                               const bv_seq_model_ops *mops, uint64_t seed,
                               bv_seq_pipe_cfg *c, bv_error *err)
{
    bv_pipeline_plan plan;
    bv_diag diag = {0};
    bv_status st = bv_pipeline_plan_make(x, &plan, &diag);
    bv_diag_free(&diag);
    if (st != BV_OK)
        return bv_error_set(err, BV_ERR_INVALID, "the pipeline does not fit the model");
    int64_t batch = bv_opts_int(&x->train, "batch"), block = bv_opts_int(&x->train, "block");
    bv_seq_shape shape = {corpus->vocab_size, block, batch};
    bv_seq_model *m = mops->create(&x->model.opts, &shape, err);
    if (!m)
        return err->status ? err->status : BV_ERR_PLUGIN;
    size_t layers = mops->layer_count(m);
    mops->destroy(m);
    *c = (bv_seq_pipe_cfg){.x = x, .corpus = corpus, .mops = mops, .stages = plan.stages,
                           .pipelines = (int)bv_opts_int(&x->pipeline, "pipelines"),
                           .microbatches = plan.microbatches, .kind = plan.kind,
                           .batch = batch, .block = block, .seed = seed,
                           .adamw = bv_adamw_from_opts(&x->train),
                           .peer_timeout_ms =
                               (int)(1e3 * bv_opts_float(&x->pipeline, "peer_timeout"))};
    if (x->cluster.values && strcmp(bv_opts_str(&x->cluster, "membership"), "etcd") == 0) {
        snprintf(c->etcd, sizeof c->etcd, "%s", bv_opts_str(&x->cluster, "etcd"));
        c->lease_s = (int)bv_opts_int(&x->cluster, "lease");
    }
    set_spans(c, plan.first, layers);
    return BV_OK;
}

bv_status bv_seq_pipe_cfg_layout(bv_seq_pipe_cfg *c, const bv_seq_pipe_layout *l,
                                 bv_error *err)
{
    size_t layers = c->span_end[c->stages - 1];
    int first[BV_PIPELINE_MAX_STAGES + 1];
    const char *spec = bv_opts_str(&c->x->pipeline, "partition");
    bool balanced = strcmp(spec, "balanced") == 0;
    if (strcmp(spec, "uniform") != 0 && !balanced &&
        l->stages != bv_opts_int(&c->x->pipeline, "stages")) {
        bv_log(BV_LOG_INFO, "pipeline.partition '%s' is for %lld stages: %d stages take the "
               "layers uniformly", spec, (long long)bv_opts_int(&c->x->pipeline, "stages"),
               l->stages);
        spec = "uniform";
    }
    bv_status st = bv_pipeline_partition((int)layers - 2, l->stages, spec, first, err);
    if (st != BV_OK)
        return st;
    bv_seq_pipe_cfg_free(c); /* the schedules of the layout of before */
    c->stages = l->stages;
    c->pipelines = l->pipelines;
    c->microbatches = l->microbatches;
    c->standby = l->standby;
    set_spans(c, first, layers);
    return balanced ? bv_seq_pipe_balance(c, NULL, err) : BV_OK;
}

bv_status bv_seq_pipe_schedules(bv_seq_pipe_cfg *c,
                                bv_status (*hook)(void *loop, bv_schedule *s, bv_error *err),
                                void *loop, bv_error *err)
{
    if (!(c->sched = calloc((size_t)c->stages, sizeof *c->sched)))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_status st = BV_OK;
    for (int s = 0; s < c->stages; s++)
        bv_schedule_init(&c->sched[s]);
    for (int s = 0; st == BV_OK && s < c->stages; s++) {
        st = bv_schedule_generate(c->kind, s, c->stages, c->microbatches, &c->sched[s], err);
        if (st == BV_OK && hook)
            st = hook(loop, &c->sched[s], err);
    }
    bv_schedule_costs *cost = calloc((size_t)c->stages, sizeof *cost);
    for (int s = 0; cost && s < c->stages; s++)
        cost[s] = (bv_schedule_costs){.forward = 1, .backward = 2};
    bv_schedule_timeline t = {0};
    bv_error why = {0};
    if (st == BV_OK && !cost)
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    else if (st == BV_OK && bv_schedule_simulate(c->sched, c->stages, cost, &t, &why) != BV_OK)
        st = bv_error_set(err, BV_ERR_PLUGIN, "the stages' schedules, as the resilience "
                          "strategies left them, do not run: %s", why.msg);
    bv_schedule_timeline_free(&t);
    free(cost);
    return st;
}

void bv_seq_pipe_cfg_free(bv_seq_pipe_cfg *c)
{
    for (int s = 0; c->sched && s < c->stages; s++)
        bv_schedule_free(&c->sched[s]);
    free(c->sched);
    c->sched = NULL;
}

/* The book: every node's inbox, one a line, the coordinator's last; then each stage's
 * layers (a balanced partition was measured here, once, for every stage). */
static bv_status write_book(const bv_seq_pipe *p, const char *path, int moved,
                            const char *inbox, bv_error *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    }
    fprintf(f, "%s\n", BOOK_MAGIC);
    fprintf(f, "layout %d %d %d %d\n", p->cfg.stages, p->cfg.pipelines, p->cfg.microbatches,
            p->cfg.relaunches);
    for (int n = 0; n <= p->nodes; n++)
        fprintf(f, "%s\n", n == moved ? inbox : p->addr[n]);
    if (p->cfg.curve_secret[0]) /* the directory and the file are the run's alone */
        fprintf(f, "curve %s\n", p->cfg.curve_secret);
    for (int s = 0; s < p->cfg.stages; s++)
        fprintf(f, "span %zu %zu\n", p->cfg.span_first[s], p->cfg.span_end[s]);
    for (int s = 0; p->cfg.sched && s < p->cfg.stages; s++) /* as the strategies left them */
        for (size_t i = 0; i < p->cfg.sched[s].count; i++) {
            const bv_instruction *ins = bv_schedule_at(&p->cfg.sched[s], i);
            fprintf(f, "ins %d %u %d %d %d\n", s, ins->op, ins->microbatch, ins->stage,
                    ins->peer);
        }
    if (fclose(f) != 0)
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    return BV_OK;
}

bv_status bv_seq_pipe_read_book(const char *path, bv_seq_pipe_cfg *cfg, char (**addr)[96],
                                bv_error *err)
{
    size_t layers = cfg->span_end[cfg->stages - 1];
    *addr = NULL;
    FILE *f = fopen(path, "r");
    if (!f)
        return bv_error_set(err, BV_ERR_IO, "%s: %s", path, strerror(errno));
    char line[256], extra;
    int P, D, M, nodes = 0;
    bool ok = fgets(line, sizeof line, f) && strcmp(line, BOOK_MAGIC "\n") == 0 &&
              fgets(line, sizeof line, f) &&
              sscanf(line, "layout %d %d %d %d %c", &P, &D, &M, &cfg->relaunches, &extra) == 4 &&
              P >= 1 && P <= BV_PIPELINE_MAX_STAGES && (size_t)P <= layers && D >= 1 &&
              D <= 4096 && M >= 1 && M <= 1 << 20 && cfg->relaunches >= 0;
    if (ok) { /* the layout the coordinator chose, which a relayout may have changed */
        cfg->stages = P;
        cfg->pipelines = D;
        cfg->microbatches = M;
        nodes = P * D;
        ok = (*addr = calloc((size_t)nodes + 1, sizeof **addr)) != NULL;
    }
    for (int n = 0; ok && n <= nodes; n++) {
        ok = fgets(line, sizeof line, f) && strlen(line) > 1 && strlen(line) < 96;
        if (ok) {
            line[strcspn(line, "\n")] = '\0';
            snprintf((*addr)[n], 96, "%s", line);
        }
    }
    size_t end = 0;
    cfg->curve_secret[0] = '\0';
    for (int s = 0; ok && s < cfg->stages; s++) {
        size_t a, b;
        ok = fgets(line, sizeof line, f) != NULL;
        if (ok && s == 0 && strncmp(line, "curve ", 6) == 0) { /* links over tcp */
            ok = strlen(line) == 6 + 40 + 1 && line[46] == '\n';
            snprintf(cfg->curve_secret, sizeof cfg->curve_secret, "%.40s", line + 6);
            ok = ok && fgets(line, sizeof line, f) != NULL;
        }
        ok = ok &&
             sscanf(line, "span %zu %zu %c", &a, &b, &extra) == 2 && a == end && b > a &&
             b <= layers;
        if (ok) {
            cfg->span_first[s] = a;
            cfg->span_end[s] = end = b;
        }
    }
    ok = ok && end == layers;
    /* each stage's schedule (bv_seq_pipe_schedules), in stage order */
    if (ok && !(cfg->sched = calloc((size_t)cfg->stages, sizeof *cfg->sched)))
        ok = false;
    for (int s = 0; ok && s < cfg->stages; s++)
        bv_schedule_init(&cfg->sched[s]);
    while (ok && fgets(line, sizeof line, f)) {
        int s, mb, stage, peer;
        unsigned op;
        bv_error e;
        ok = sscanf(line, "ins %d %u %d %d %d %c", &s, &op, &mb, &stage, &peer, &extra) == 5 &&
             s >= 0 && s < cfg->stages && stage >= 0 && stage < cfg->stages &&
             peer >= -1 && peer < cfg->stages && mb >= -1 && mb < cfg->microbatches;
        bv_instruction ins = {op, mb, stage, peer, -1};
        ok = ok && bv_schedule_append(&cfg->sched[s], &ins, sizeof ins, &e) == BV_OK;
    }
    for (int s = 0; ok && s < cfg->stages; s++) {
        ok = cfg->sched[s].count > 0;
        cfg->sched[s].stage = s;
        cfg->sched[s].stages = cfg->stages;
        cfg->sched[s].microbatches = cfg->microbatches;
    }
    fclose(f);
    if (!ok) {
        free(*addr);
        *addr = NULL;
        return bv_error_set(err, BV_ERR_CORRUPT, "%s is not the address book of a pipeline "
                            "of %zu layers", path, layers);
    }
    return BV_OK;
}

/* Whether an answer's data is an address a stage bound over tcp: no wildcard port. */
static bool tcp_address(const bv_pipe_msg_in *m)
{
    return m->bytes > 6 && m->bytes < ADDR_LEN && memcmp(m->data, "tcp://", 6) == 0 &&
           !memchr(m->data, '\n', m->bytes) && !memchr(m->data, '*', m->bytes);
}

/* Links over tcp: a HELLO from every stage (only: from stage node `only` alone, one
 * launched again) with the address it bound, then the whole book of addresses to each.
 * Like an answer (collect()), a HELLO still missing peer_timeout after the last one came
 * (after the start, for one node) fails it: a process that hangs says nothing. */
static bv_status rendezvous(bv_seq_pipe *p, int only, bv_error *err)
{
    bool *seen = calloc((size_t)p->nodes, sizeof *seen);
    if (!seen)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_status rc = BV_OK;
    int hellos = only < 0 ? p->nodes : 1;
    double last = bv_now_seconds(), bound = p->cfg.peer_timeout_ms * 1e-3;
    for (int hello = 0; rc == BV_OK && hello < hellos; hello++) {
        bv_pipe_msg_in m = {0};
        while ((rc = watch_due(p, err)) == BV_OK &&
               (rc = bv_stage_link_recv(p->link, BV_PIPE_HELLO, only, 0, 0, WATCH_MS,
                                        "a stage's address", &m, err)) != BV_OK &&
               bv_stage_link_timed_out(p->link)) {
            if ((hello > 0 || hellos == 1) && bv_now_seconds() - last > bound) {
                rc = bv_error_set(err, BV_ERR_IO, "no address from %d of %d stage nodes "
                                  "within %g s (pipeline.peer_timeout)", hellos - hello,
                                  hellos, bound);
                break;
            }
        }
        last = bv_now_seconds();
        if (rc != BV_OK)
            break;
        int n = (int)m.sender;
        bool ok = n < p->nodes && !seen[n] && tcp_address(&m);
        if (ok) {
            seen[n] = true;
            snprintf(p->addr[n], ADDR_LEN, "%.*s", (int)m.bytes, (const char *)m.data);
        }
        bv_stage_link_release(p->link, &m);
        if (!ok)
            rc = bv_error_set(err, BV_ERR_CORRUPT, "a stage's HELLO is not an address of "
                              "this run");
    }
    free(seen);
    char *book = malloc((size_t)(p->nodes + 1) * ADDR_LEN);
    if (rc == BV_OK && !book)
        rc = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    size_t len = 0;
    for (int n = 0; rc == BV_OK && n <= p->nodes; n++)
        len += (size_t)snprintf(book + len, ADDR_LEN, "%s\n", p->addr[n]);
    if (rc == BV_OK && only >= 0) /* the coordinator's outbox to it, at the new port */
        rc = bv_stage_link_reroute(p->link, only, NULL, err);
    for (int n = 0; rc == BV_OK && n < p->nodes; n++)
        if (only < 0 || n == only)
            rc = send_to(p, n, BV_PIPE_BOOK, 0, 0, book, len, err);
    free(book);
    if (rc == BV_OK)
        for (int n = 0; n < p->nodes; n++) {
            char who[64];
            stage_name(p, n, who, sizeof who);
            if (only < 0 || n == only)
                bv_log(BV_LOG_INFO, "%s: inbox %s", who, p->addr[n]);
        }
    return rc;
}

/* A `bivouac role --role stage` process for stage node n, started by the cloud, reading
 * the book the coordinator wrote at `book`. */
static bv_status launch_node(bv_seq_pipe *p, int n, const char *book, bv_error *err)
{
    const bv_seq_pipe_cfg *c = &p->cfg;
    char exe[4096];
    bv_status st = bv_node_group_self_exe(NULL, exe, sizeof exe, err);
    if (st != BV_OK)
        return st;
    char seed[32], index[16], zone[16], label[64], address[ADDR_LEN];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    snprintf(index, sizeof index, "%d", n);
    snprintf(zone, sizeof zone, "%d", n % c->stages); /* consecutive stages: other zones */
    stage_name(p, n, label, sizeof label);
    char member[BV_MEMBER_KEY_MAX] = "";
    if (p->member.member) { /* a key of its own for each launch: a late loss of an earlier
                               one is no loss of this one */
        p->token[n] = ++p->launches;
        bv_membership_node_key(&p->member, n, p->token[n], member, sizeof member);
    }
    const char *argv[] = {exe,      "role",  "--experiment", c->experiment_file,
                          "--role", "stage", "--index",      index,
                          "--seed", seed,    "--book",       book,
                          member[0] ? "--member" : NULL, member, NULL};
    bv_node_request req = {.size = sizeof req, .role = "stage", .argv = argv, .label = label,
                           .zone = zone};
    if ((p->node[n] = bv_node_group_launch(c->cloud_ops, p->cloud, &req, address,
                                           sizeof address, err)) < 0)
        return err->status ? err->status : BV_ERR_PLUGIN;
    if (!c->tcp) /* over tcp the inbox is known after the stage's HELLO */
        bv_log(BV_LOG_INFO, "%s: node %lld on localhost, inbox %s", label,
               (long long)p->node[n], p->addr[n]);
    else
        bv_log(BV_LOG_INFO, "%s: node %lld on localhost", label, (long long)p->node[n]);
    return BV_OK;
}

/* One stage process per stage node, on the run's cloud. */
static bv_status launch(bv_seq_pipe *p, const char *book, bv_error *err)
{
    const bv_seq_pipe_cfg *c = &p->cfg;
    p->own_cloud = !c->cloud;
    if (!(p->cloud = c->cloud ? c->cloud : c->cloud_ops->create(c->cloud_opts, &c->run_info,
                                                                  err)))
        return err->status ? err->status : BV_ERR_PLUGIN;
    bv_node_group_signals_on();
    p->signals = true;
    bv_status st = BV_OK;
    if (c->etcd[0] && !(p->token = calloc((size_t)p->nodes, sizeof *p->token)))
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (st == BV_OK && c->etcd[0])
        st = bv_membership_coordinator(&p->member, c->etcd, c->lease_s, p->dir, err);
    for (int n = 0; st == BV_OK && n < p->nodes; n++)
        st = launch_node(p, n, book, err);
    return st;
}

bv_status bv_seq_pipe_start(const bv_seq_pipe_cfg *cfg, bv_seq_pipe **out, bv_error *err)
{
    *out = NULL;
    bv_seq_pipe *p = calloc(1, sizeof *p);
    if (!p)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    p->cfg = *cfg;
    p->nodes = cfg->stages * cfg->pipelines;
    p->addr = calloc((size_t)p->nodes + 1, sizeof *p->addr);
    p->addrs = calloc((size_t)p->nodes + 1, sizeof *p->addrs);
    p->args = calloc((size_t)p->nodes, sizeof *p->args);
    p->threads = calloc((size_t)p->nodes, sizeof *p->threads);
    if (!p->addr || !p->addrs || !p->args || !p->threads) {
        bv_seq_pipe_stop(p);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    bv_status rc = BV_OK;
    p->started_at = bv_now_seconds();
    int id = atomic_fetch_add(&pipe_counter, 1);
    if (cfg->cloud_ops && (!(p->node = malloc((size_t)p->nodes * sizeof *p->node)) ||
                           !(p->host = malloc((size_t)p->nodes * sizeof *p->host))))
        rc = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (int n = 0; p->node && n < p->nodes; n++)
        p->node[n] = -1;
    for (int n = 0; p->host && n < p->nodes; n++)
        p->host[n] = n;
    p->lost = -1;
    p->reroute = -1;
    p->offered = cfg->standby;
    p->two_phase = bv_seq_pipe_two_phase(cfg);
    if (rc == BV_OK && cfg->cloud_ops)
        rc = bv_node_group_make_dir(p->dir, sizeof p->dir, err);
    for (int n = 0; n <= p->nodes; n++) {
        if (cfg->cloud_ops && cfg->tcp) /* each binds a port of its choosing (HELLO) */
            snprintf(p->addr[n], ADDR_LEN, "tcp://%s:*", cfg->address);
        else if (cfg->cloud_ops)
            snprintf(p->addr[n], ADDR_LEN, "ipc://%s/n%d", p->dir, n);
        else
            snprintf(p->addr[n], ADDR_LEN, "inproc://bv-pipe%d-%d", id, n);
        p->addrs[n] = p->addr[n];
    }
    const bv_transport_ops *t = &cfg->x->transport_ops;
    const bv_opt_value *bound = bv_opts_find(&cfg->x->transport.opts, "send_timeout_ms");
    p->send_bound_ms = bound ? (int)bound->v.i : -1;
    if (rc == BV_OK) /* a stage thread shares the transport: its sends are not sliced */
        rc = bv_node_group_transport(t, &cfg->x->transport.opts, cfg->curve_secret,
                                     cfg->cloud_ops ? BV_SEND_SLICE_MS : 0, &p->tr, err);
    if (rc == BV_OK)
        rc = bv_stage_link_open(t, p->tr, p->addrs, p->nodes + 1, p->nodes, &p->link, err);
    if (rc == BV_OK && cfg->tcp)
        snprintf(p->addr[p->nodes], ADDR_LEN, "%s", bv_stage_link_bound(p->link));
    char book[sizeof p->dir + 8];
    snprintf(book, sizeof book, "%s/book", p->dir);
    if (rc == BV_OK && cfg->cloud_ops && (rc = write_book(p, book, -1, NULL, err)) == BV_OK)
        rc = launch(p, book, err);
    if (rc == BV_OK && cfg->cloud_ops && cfg->tcp)
        rc = rendezvous(p, -1, err);
    for (int n = 0; rc == BV_OK && !cfg->cloud_ops && n < p->nodes; n++) {
        bv_seq_stage_arg *a = &p->args[n];
        a->cfg = &p->cfg;
        a->addrs = p->addrs;
        a->transport = p->tr;
        a->stage = n % cfg->stages;
        a->pipeline = n / cfg->stages;
        atomic_init(&a->gone, false);
        atomic_init(&a->bound, 0);
        if (pthread_create(&p->threads[n], NULL, bv_seq_stage_main, &p->args[n]) != 0)
            rc = bv_error_set(err, BV_ERR_IO, "cannot start a thread for stage %d",
                              n % cfg->stages);
        else
            p->started++;
    }
    /* a stage lost as the run starts is failed over too, and every stage initialised
     * again (the same draws) */
    if (rc == BV_OK)
        rc = broadcast_again(p, BV_PIPE_INIT, NULL, 0, NULL, NULL, err);
    if (rc != BV_OK) {
        bv_seq_pipe_stop(p);
        return rc;
    }
    *out = p;
    return BV_OK;
}

/* ---- train, evaluate ---- */

typedef struct step_acc {
    double sum[6]; /* loss sum, count, norm, compute, wait (all stages), seconds (longest) */
    double compute[BV_PIPELINE_MAX_STAGES], wait[BV_PIPELINE_MAX_STAGES]; /* per stage */
} step_acc;

static bv_status take_step(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                           bv_error *err)
{
    double r[6];
    step_acc *a = ctx;
    if (m->bytes != sizeof r)
        return bv_error_set(err, BV_ERR_CORRUPT, "a step's results of %zu bytes", m->bytes);
    memcpy(r, m->data, sizeof r);
    for (int i = 0; i < 6; i++)
        a->sum[i] = i == 2   ? r[i]
                    : i == 5 ? (r[i] > a->sum[i] ? r[i] : a->sum[i])
                             : a->sum[i] + r[i];
    a->compute[node % p->cfg.stages] += r[3];
    a->wait[node % p->cfg.stages] += r[4];
    return BV_OK;
}

/* One command to one node and its one answer (DONE, or done_type), into each(). Where
 * stages fail over, another stage process that ends meanwhile does not end the wait: the
 * loss is kept (p->lost, p->deferred) for the failover after it. */
static bv_status ask(bv_seq_pipe *p, int node, uint32_t cmd, int64_t step, const void *data,
                     size_t bytes, uint16_t done_type,
                     bv_status (*each)(bv_seq_pipe *, int, const bv_pipe_msg_in *, void *,
                                       bv_error *),
                     void *ctx, bv_error *err)
{
    p->watch = &node;
    p->nwatch = 1;
    bv_status rc = send_cmd(p, node, cmd, step, data, bytes, err);
    if (rc == BV_OK)
        rc = collect(p, 1, cmd, step, done_type, each, ctx, err);
    p->nwatch = 0;
    return rc;
}

/* One gather's states, one per stage of the pipeline, put together in stage order. */
typedef struct gathered {
    int first; /* the pipeline's first node */
    bv_state *part;
} gathered;

static bv_status take_part(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                           bv_error *err)
{
    gathered *g = ctx;
    int k = node - g->first;
    if (k < 0 || k >= p->cfg.stages || g->part[k].count)
        return bv_error_set(err, BV_ERR_CORRUPT, "a state from node %d, not asked", node);
    return bv_stage_state_unpack(m->data, m->bytes, &g->part[k], err);
}

/* Appends the blobs of parts[0..n) to *out in that order, moved (the parts are left
 * empty). */
static bv_status append_parts(bv_state *out, bv_state *parts, int n, bv_error *err)
{
    size_t total = out->count;
    for (int k = 0; k < n; k++)
        total += parts[k].count;
    bv_blob *b = realloc(out->blobs, (total ? total : 1) * sizeof *b);
    if (!b)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the state");
    out->blobs = b;
    for (int k = 0; k < n; k++) {
        if (parts[k].count)
            memcpy(b + out->count, parts[k].blobs, parts[k].count * sizeof *b);
        out->count += parts[k].count;
        free(parts[k].blobs);
        parts[k].blobs = NULL;
        parts[k].count = 0;
    }
    return BV_OK;
}

/* The layers (and moments) of pipeline d's stages but stage `skip` (-1: none), appended
 * to *out in stage order. Every stage is asked at once, so that they pack their states
 * side by side; as in ask(), where stages fail over the end of a process that runs none
 * of them is kept for later. Each gather has a step of its own, so that a late answer of
 * one that failed is never taken for a later one's. */
static bv_status gather(bv_seq_pipe *p, int d, int skip, bv_state *out, bv_error *err)
{
    int P = p->cfg.stages, n = 0;
    gathered g = {d * P, calloc((size_t)P, sizeof *g.part)};
    int *nodes = calloc((size_t)P, sizeof *nodes);
    bv_status rc = g.part && nodes ? BV_OK : bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    for (int k = 0; rc == BV_OK && k < P; k++)
        if (k != skip)
            nodes[n++] = d * P + k;
    int64_t step = -++p->gathers; /* below every training step's wire step */
    p->watch = nodes;
    p->nwatch = n;
    for (int i = 0; rc == BV_OK && i < n; i++)
        rc = send_cmd(p, nodes[i], BV_PIPE_GET_STATE, step, NULL, 0, err);
    if (rc == BV_OK)
        rc = collect(p, n, BV_PIPE_GET_STATE, step, BV_PIPE_STATE, take_part, &g, err);
    p->nwatch = 0;
    if (rc == BV_OK)
        rc = append_parts(out, g.part, P, err);
    for (int k = 0; g.part && k < P; k++)
        bv_state_free(&g.part[k]);
    free(g.part);
    free(nodes);
    return rc;
}

/* A prepared step applied by every stage (two-phase steps): COMMIT goes to every node
 * whose process is there before any answer is awaited, so a loss now leaves every other
 * stage, and the lost one's replica, with the step applied. */
static bv_status commit(bv_seq_pipe *p, int64_t ws, bv_error *err)
{
    bv_status first = BV_OK;
    for (int n = 0; n < p->nodes; n++) {
        bv_error e = {0};
        bv_status rc = send_cmd(p, n, BV_PIPE_COMMIT, ws, NULL, 0, &e);
        if (rc != BV_OK && first == BV_OK)
            first = rc, *err = e;
    }
    return first != BV_OK ? first
                          : collect(p, p->nodes, BV_PIPE_COMMIT, ws, BV_PIPE_DONE, NULL, NULL,
                                    err);
}

/* The stage nodes that run in another stage's process (since a failover). */
static int degraded(const bv_seq_pipe *p)
{
    int k = 0;
    for (int n = 0; p->host && n < p->nodes; n++)
        k += p->host[n] != n;
    return k;
}

/* The policy's decision on a reconfiguration event (engine.h), one of choices: the
 * first where the run has no policy for it. often: an event raised at every step, of
 * which only decisions other than the first are logged. */
static bv_status decide(bv_seq_pipe *p, const char *event, const bv_metric *m, size_t n,
                        const char *const *choices, bool often, char *decision, size_t len,
                        bv_error *err)
{
    snprintf(decision, len, "%s", choices[0]);
    return p->cfg.reconfigure ? p->cfg.reconfigure(p->cfg.loop, event, m, n, choices, often,
                                                   decision, len, err)
                              : BV_OK;
}

/* Why the lost stage node v cannot be failed over ("" where it can): its process ran
 * another stage too, or its shadow is gone (two consecutive stages). */
static void uncovered(const bv_seq_pipe *p, int v, char *why, size_t len)
{
    int P = p->cfg.stages, shadow = v - v % P + (v % P + P - 1) % P, count = 0;
    for (int n = 0; n < p->nodes; n++)
        count += p->host[n] == p->host[v];
    char who[64], by[64];
    stage_name(p, v, who, sizeof who);
    stage_name(p, shadow, by, sizeof by);
    why[0] = '\0';
    if (count > 1)
        snprintf(why, len, "the process of %s ran %d stage nodes (a shadow and the stage it "
                 "had taken over): no replica of them all is left", who, count);
    else if (node_lost(p, shadow))
        snprintf(why, len, "%s and its shadow, %s, are both gone: nothing keeps %s's layers",
                 who, by, who);
}

/* The layers (and moments) of pipeline d's stages but stage `skip` (-1: none), gathered
 * one stage at a time and packed into *buf (the caller frees it). */
static bv_status pipeline_state(bv_seq_pipe *p, int d, int skip, uint8_t **buf,
                                size_t *bytes, bv_error *err)
{
    bv_state s = {0};
    bv_status rc = gather(p, d, skip, &s, err);
    if (rc == BV_OK)
        rc = bv_stage_state_pack(&s, buf, bytes, err);
    bv_state_free(&s);
    return rc;
}

/* The address the adopted stage node bound (over tcp a port of its own, on the shadow's
 * host), from its answer to ADOPT. */
static bv_status take_address(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                              bv_error *err)
{
    (void)ctx;
    if (!p->cfg.tcp)
        return BV_OK;
    if (!tcp_address(m))
        return bv_error_set(err, BV_ERR_CORRUPT, "an adopted stage's answer is not an "
                            "address of this run");
    snprintf(p->addr[node], ADDR_LEN, "%.*s", (int)m->bytes, (const char *)m->data);
    return BV_OK;
}

/* The lost stage node v taken over by its shadow's process (docs/redundancy.md#the-failover),
 * with the replica's weights and moments and the state of v's pipeline's other stages
 * (the one after v's for v's own replica, the owners of tied tensors), at the step
 * boundary every stage is at. Over tcp v's inbox is a new port on the shadow's host, and
 * every other node is told it (REROUTE). */
static bv_status adopt_node(bv_seq_pipe *p, int v, bv_error *err)
{
    int P = p->cfg.stages, d = v / P, s = v % P, shadow = d * P + (s + P - 1) % P;
    char who[64], by[64];
    stage_name(p, v, who, sizeof who);
    stage_name(p, shadow, by, sizeof by);
    bv_log(BV_LOG_INFO, "failover: %s's process (node %lld) adopts %s from its replica", by,
           (long long)p->node[p->host[shadow]], who);
    uint8_t *buf = NULL;
    size_t bytes = 0;
    bv_status rc = pipeline_state(p, d, s, &buf, &bytes, err);
    /* the message: v, every node's address as it is now (v's own inbox among them, bound
     * again in the shadow's process), then the state */
    size_t head = sizeof(int32_t) + sizeof(uint32_t), book = 0;
    uint8_t *msg = rc == BV_OK ? malloc(head + (size_t)(p->nodes + 1) * ADDR_LEN + bytes)
                               : NULL;
    if (rc == BV_OK && !msg)
        rc = bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (rc == BV_OK && p->cfg.tcp) { /* tcp://HOST:PORT of the shadow -> tcp://HOST:* */
        char host[ADDR_LEN];
        snprintf(host, sizeof host, "%s", p->addr[shadow]);
        char *port = strrchr(host + 6, ':');
        if (port)
            *port = '\0';
        if (snprintf(p->addr[v], ADDR_LEN, "%.*s:*", ADDR_LEN - 3, host) >= ADDR_LEN)
            rc = bv_error_set(err, BV_ERR_INVALID, "%s's address is too long", by);
    }
    if (rc == BV_OK) {
        for (int n = 0; n <= p->nodes; n++)
            book += (size_t)sprintf((char *)msg + head + book, "%s\n", p->addr[n]);
        int32_t node = v;
        uint32_t book_len = (uint32_t)book;
        memcpy(msg, &node, sizeof node);
        memcpy(msg + sizeof node, &book_len, sizeof book_len);
        memcpy(msg + head + book, buf, bytes);
        p->host[v] = p->host[shadow];
        rc = ask(p, shadow, BV_PIPE_ADOPT, p->failovers, msg, head + book + bytes,
                 BV_PIPE_DONE, take_address, NULL, err);
    }
    if (rc == BV_OK && p->cfg.tcp) {
        bv_log(BV_LOG_INFO, "%s: inbox %s, in %s's process", who, p->addr[v], by);
        p->reroute = v;
        rc = bv_stage_link_reroute(p->link, v, NULL, err);
        if (rc == BV_OK)
            rc = reroute(p, err);
    }
    free(msg);
    free(buf);
    if (rc != BV_OK) {
        bv_error e = *err;
        return bv_error_set(err, rc, "the failover of %s: %s", who, e.msg);
    }
    p->failovers++;
    return BV_OK;
}

/* ---- layouts (docs/redundancy.md#reconfigurations-that-change-the-layout) ---- */

/* The stage processes that are there, and the capacity the cloud offered that none runs
 * on yet. */
static int capacity(const bv_seq_pipe *p)
{
    int alive = 0;
    for (int n = 0; p->node && n < p->nodes; n++)
        alive += p->node[n] >= 0;
    return alive + p->offered;
}

/* A pipeline each stage of which runs in a process that is there (-1: none). */
static int whole_pipeline(const bv_seq_pipe *p)
{
    for (int d = 0, P = p->cfg.stages; d < p->cfg.pipelines; d++) {
        int s = 0;
        while (s < P && !node_lost(p, d * P + s))
            s++;
        if (s == P)
            return d;
    }
    return -1;
}

/* The layout the capacity there is holds (Bamboo's Appendix A), from a whole pipeline's
 * state: the experiment's depth P (fewer stages where fewer processes are there, 2 at
 * least), as many pipelines as the processes fill, up to its D, and microbatches of as
 * many rows as its own; the rest stand by. False where stages keep no replicas (a step
 * is not two-phase: a stage may have applied a step the others did not), no pipeline is
 * whole, or there is room for fewer than 2 stages. */
static bool layout_for(const bv_seq_pipe *p, bv_seq_pipe_layout *l)
{
    const bv_opts *o = &p->cfg.x->pipeline;
    int P = (int)bv_opts_int(o, "stages"), D = (int)bv_opts_int(o, "pipelines");
    int M = (int)bv_opts_int(o, "microbatches"), cap = capacity(p), from = whole_pipeline(p);
    int blocks = (int)p->cfg.span_end[p->cfg.stages - 1] - 2;
    P = P < cap ? P : cap;
    P = P < blocks ? P : blocks;
    if (!p->two_phase || !p->host || from < 0 || P < 2)
        return false;
    int d = cap / P < D ? cap / P : D;
    while ((D * M) % d)
        d--;
    *l = (bv_seq_pipe_layout){P, d, D * M / d, from, cap - P * d};
    return true;
}

/* The policy's decision to lay the stages out afresh as l: the command (or the step
 * about to start) fails with err saying why, for the engine to do it
 * (bv_seq_pipe_relayout_due). */
static bv_status relayout_due(bv_seq_pipe *p, const bv_seq_pipe_layout *l, bv_error *err,
                              bv_status st, const char *why)
{
    p->relayout_due = true;
    p->relayout = *l;
    return bv_error_set(err, st, "%s; the policy lays the stages out afresh: %d x %d stages "
                        "(were %d x %d)", why, l->pipelines, l->stages, p->cfg.pipelines,
                        p->cfg.stages);
}

bool bv_seq_pipe_relayout_due(bv_seq_pipe *p, bv_seq_pipe_layout *l)
{
    if (!p || !p->relayout_due)
        return false;
    p->relayout_due = false;
    *l = p->relayout;
    return true;
}

/* Bamboo's failover of every stage process lost (loss: how the first was seen). The
 * cloud's events of the next moment are read first: a bulk preemption ends several at
 * once. Each lost stage node is put to the policy (`preempted`: failover, or restart from
 * the last checkpoint); one that cannot be covered (uncovered(), or any in a run without
 * replicas, where `restart` is the one choice) ends the command with why, for the loop to
 * restart the run; threads end it as it failed. */
static bv_status failover(bv_seq_pipe *p, const bv_error *loss, bv_error *err)
{
    if (!p->host) {
        *err = *loss;
        return err->status;
    }
    for (double end = bv_now_seconds() + WATCH_MS * 1e-3; bv_now_seconds() < end;) {
        bv_error e = {0};
        watch(p, &e); /* marks the processes that ended */
        nanosleep(&(struct timespec){0, 5000000L}, NULL);
    }
    if (bv_node_group_interrupted())
        return bv_error_set(err, BV_ERR_IO, "interrupted (%s): stopping the stages",
                            strsignal(bv_node_group_interrupted()));
    p->lost = -1;
    char why[256] = "";
    for (int v = 0; !why[0] && v < p->nodes; v++)
        if (node_lost(p, v) && p->two_phase)
            uncovered(p, v, why, sizeof why);
        else if (node_lost(p, v))
            snprintf(why, sizeof why, "no stage keeps a replica");
    /* where another pipeline is whole, the stages may be laid out afresh from it */
    static const char *const choices[2][2][4] = {
        {{"failover", "restart", NULL}, {"failover", "restart", "reconfigure", NULL}},
        {{"restart", NULL}, {"restart", "reconfigure", NULL}}};
    if (!why[0])
        bv_log(BV_LOG_WARN, "%s", loss->msg);
    bv_status rc = BV_OK;
    for (int v = 0; rc == BV_OK && v < p->nodes; v++) {
        if (!node_lost(p, v))
            continue;
        bv_seq_pipe_layout l;
        bool relay = layout_for(p, &l);
        /* the policy's say: Bamboo's fails over what it can, and lays the stages out
         * afresh (or restarts) where it cannot */
        int P = p->cfg.stages;
        bv_metric m[] = {{"stage", v % P},
                         {"pipeline", v / P},
                         {"coverable", !why[0]},
                         {"degraded", degraded(p)},
                         {"offered", p->offered},
                         {"reconfigurable", relay},
                         {"pipelines", p->cfg.pipelines},
                         {"pipelines_possible", relay ? l.pipelines : 0}};
        char decision[32];
        rc = decide(p, "preempted", m, sizeof m / sizeof *m, choices[why[0] != 0][relay],
                    false, decision, sizeof decision, err);
        if (rc != BV_OK)
            return rc;
        if (!p->two_phase) /* the loss says it all */
            return bv_error_set(err, loss->status, "%s", loss->msg);
        if (strcmp(decision, "reconfigure") == 0) {
            char said[sizeof err->msg];
            snprintf(said, sizeof said, "%.600s%s%.300s", loss->msg, why[0] ? "; " : "", why);
            return relayout_due(p, &l, err, loss->status, said);
        }
        if (why[0])
            return bv_error_set(err, loss->status, "%s; %s", loss->msg, why);
        if (strcmp(decision, "restart") == 0)
            return bv_error_set(err, loss->status, "%s; the policy restarts the run from its "
                                "last checkpoint", loss->msg);
        rc = adopt_node(p, v, err);
    }
    return rc;
}

/* After a command failed with no stage process seen to end (a stage's wait for a peer,
 * or the coordinator's for an answer, ran out; collect() waited for every other answer
 * first): every stage node is asked to answer at once (PING), and the process of a node
 * that does not within PING_WAIT_MS is taken to hang (a frozen instance: alive, and
 * answering nothing). It is killed and lost, as if killed outright (true, err says which;
 * more than one: the rest are logged). False where every node answers: the failure
 * stands. */
static bool hunt(bv_seq_pipe *p, bv_error *err)
{
    bool *answered = calloc((size_t)p->nodes, sizeof *answered);
    if (!answered)
        return false;
    int64_t step = PING_STEP(++p->pings);
    int asked = 0, got = 0;
    bv_error e = {0};
    for (int n = 0; n < p->nodes && p->lost < 0; n++) {
        if (node_lost(p, n))
            answered[n] = true;
        else if (send_cmd(p, n, BV_PIPE_PING, step, NULL, 0, &e) == BV_OK)
            asked++;
    }
    int wait_ms = p->cfg.peer_timeout_ms < PING_WAIT_MS ? p->cfg.peer_timeout_ms : PING_WAIT_MS;
    double until = bv_now_seconds() + wait_ms * 1e-3;
    bool cut = false; /* Ctrl-C, or the link failed: nobody is judged */
    while (!cut && p->lost < 0 && got < asked && bv_now_seconds() < until) {
        bv_pipe_msg_in m;
        cut = watch_due(p, &e) != BV_OK;
        bv_status rc = cut ? BV_ERR_IO
                           : bv_stage_link_recv(p->link, BV_PIPE_DONE, -1, BV_PIPE_PING,
                                                step, WATCH_MS, "an answer", &m, &e);
        if (rc == BV_OK && m.sender < (uint32_t)p->nodes && !answered[m.sender]) {
            answered[m.sender] = true;
            got++;
        }
        if (rc == BV_OK)
            bv_stage_link_release(p->link, &m);
        else if (!bv_stage_link_timed_out(p->link))
            cut = true;
    }
    bv_stage_link_clear(p->link); /* late answers of the failed command */
    if (p->lost >= 0 || cut) { /* one ended meanwhile: that is the loss */
        free(answered);
        if (p->lost >= 0)
            *err = e;
        return p->lost >= 0;
    }
    int hung = 0;
    for (int n = 0; n < p->nodes; n++) {
        int proc = p->host[n];
        if (answered[n] || p->node[proc] < 0)
            continue;
        char who[64];
        stage_name(p, proc, who, sizeof who);
        int64_t id = p->node[proc];
        bv_node_group_kill(p->cfg.cloud_ops, p->cloud, p->node, proc);
        tell_strategies(p, proc, id);
        bv_error *say = hung++ == 0 ? err : &e;
        bv_error_set(say, BV_ERR_IO, "%s (node %lld on localhost) hangs: it answered "
                     "nothing for %g s, and was killed", who, (long long)id,
                     (p->cfg.peer_timeout_ms + wait_ms) * 1e-3);
        if (say == &e)
            bv_log(BV_LOG_WARN, "%s", e.msg);
        p->lost = proc;
    }
    free(answered);
    return hung > 0;
}

/* After a command failed: a stage process lost (or found to hang) in a run with
 * two-phase steps is failed over (true: the command may run again); else err stays the
 * failure (one that hangs is killed and named in it). */
static bool recovered(bv_seq_pipe *p, double *lost_at, bv_error *err)
{
    double failed_at = p->loss_at > 0 ? p->loss_at : bv_now_seconds();
    p->loss_at = 0;
    if (p->lost < 0 && p->cloud && !hunt(p, err))
        return false;
    if (!p->two_phase) { /* no replicas: the policy hears of it, to restart the run */
        bv_error loss = *err;
        failover(p, &loss, err);
        return false;
    }
    if (*lost_at == 0)
        *lost_at = failed_at;
    bv_error loss = *err;
    p->failed = false;
    if (failover(p, &loss, err) == BV_OK)
        return true;
    p->failed = true;
    return false;
}

/* Every other node told the address of the stage that got a process of its own
 * (REROUTE: each opens its outbox to it again), one node at a time; again after a
 * failover where a loss cut it short. */
static bv_status reroute(bv_seq_pipe *p, bv_error *err)
{
    int v = p->reroute;
    size_t len = strlen(p->addr[v]);
    uint8_t msg[sizeof(int32_t) + ADDR_LEN];
    int32_t node = v;
    memcpy(msg, &node, sizeof node);
    memcpy(msg + sizeof node, p->addr[v], len);
    bv_status rc = BV_OK;
    for (int n = 0; rc == BV_OK && n < p->nodes; n++)
        if (n != v && !node_lost(p, n))
            rc = ask(p, n, BV_PIPE_REROUTE, 0, msg, sizeof node + len, BV_PIPE_DONE, NULL,
                     NULL, err);
    if (rc == BV_OK)
        p->reroute = -1;
    return rc;
}

/* A stage that runs in its shadow's process since a failover, and capacity the cloud
 * offered: the stage gets a process of its own again, at a step boundary. Its pipeline's
 * state is gathered (the adopted stage's layers and its replica's owners among it), the
 * adopted thread stopped and joined, and a stage process launched for the node with a
 * book that gives it a new inbox (a connection to the old one may still take a message
 * and lose it with the closing socket): every other node is told the address (REROUTE,
 * which opens its outbox again), then the new process gets the state. */
static bv_status replace(bv_seq_pipe *p, int v, bv_error *err)
{
    int P = p->cfg.stages, d = v / P, shadow = d * P + (v % P + P - 1) % P;
    double began = bv_now_seconds();
    char who[64], by[64];
    stage_name(p, v, who, sizeof who);
    stage_name(p, shadow, by, sizeof by);
    /* the process is launched first, with a book that gives it its new inbox: it starts
     * (loads the experiment and the data, makes its model) while the state is gathered,
     * through the routes of before */
    char book[sizeof p->dir + 32], inbox[ADDR_LEN];
    snprintf(book, sizeof book, "%s/book.%d", p->dir, p->replacements + 1);
    if (p->cfg.tcp) /* a port of its choosing, said in its HELLO */
        snprintf(inbox, sizeof inbox, "tcp://%s:*", p->cfg.address);
    else
        snprintf(inbox, sizeof inbox, "ipc://%s/n%d.%d", p->dir, v, p->replacements + 1);
    bv_status rc = write_book(p, book, v, inbox, err);
    if (rc == BV_OK)
        rc = launch_node(p, v, book, err);
    uint8_t *buf = NULL;
    size_t bytes = 0;
    if (rc == BV_OK) /* the whole pipeline's: a replica may hold another stage's tied
                        weights (the head's embedding) */
        rc = pipeline_state(p, d, -1, &buf, &bytes, err);
    if (rc == BV_OK)
        rc = send_cmd(p, v, BV_PIPE_STOP, 0, NULL, 0, err);
    if (rc == BV_OK)
        rc = ask(p, shadow, BV_PIPE_RELEASE, 0, NULL, 0, BV_PIPE_DONE, NULL, NULL, err);
    if (rc == BV_OK) { /* from here on node v is the new process */
        snprintf(p->addr[v], ADDR_LEN, "%s", inbox);
        rc = p->cfg.tcp ? rendezvous(p, v, err) /* its HELLO waited in the stash */
                        : bv_stage_link_reroute(p->link, v, NULL, err); /* p->addrs[v] */
    }
    if (rc == BV_OK) {
        p->host[v] = v;
        p->offered--;
        p->reroute = v;
        rc = ask(p, v, BV_PIPE_SET_STATE, 0, buf, bytes, BV_PIPE_DONE, NULL, NULL, err);
    }
    if (rc == BV_OK)
        rc = reroute(p, err);
    free(buf);
    if (rc != BV_OK) {
        bv_error why = *err;
        return bv_error_set(err, rc, "giving %s a process of its own again: %s", who,
                            why.msg);
    }
    p->replacements++;
    bv_log(BV_LOG_INFO, "replaced: %s runs in a process of its own again (node %lld), no "
           "longer in %s's (the run paused %.2f s)", who, (long long)p->node[v], by,
           bv_now_seconds() - began);
    return BV_OK;
}

/* At a step boundary: capacity that came while a stage runs in another's process, or
 * enough of it for a larger layout (`joined`: the policy gives the stages processes of
 * their own again, keeps the capacity waiting, or grows the layout), then a look at a
 * degraded pipeline (`degraded`, every step: go on, restart from the last checkpoint, or
 * lay the stages out afresh). */
static bv_status boundary(bv_seq_pipe *p, bv_error *err)
{
    int deg = degraded(p);
    char decision[32];
    bv_status rc = BV_OK;
    bv_seq_pipe_layout l;
    bool relay = layout_for(p, &l);
    bool grows = relay && l.stages * l.pipelines > p->cfg.stages * p->cfg.pipelines;
    if ((deg > 0 || grows) && p->offered > 0 &&
        (p->offered != p->asked_offered || deg != p->asked_degraded)) {
        p->asked_offered = p->offered;
        p->asked_degraded = deg;
        static const char *const choices[2][4] = {{"replace", "wait", NULL},
                                                  {"replace", "wait", "grow", NULL}};
        bv_metric m[] = {{"offered", p->offered},
                         {"degraded", deg},
                         {"reconfigurable", grows},
                         {"pipelines", p->cfg.pipelines},
                         {"pipelines_possible", grows ? l.pipelines : p->cfg.pipelines},
                         {"stages", p->cfg.stages},
                         {"stages_possible", grows ? l.stages : p->cfg.stages}};
        rc = decide(p, "joined", m, sizeof m / sizeof *m, choices[grows], false, decision,
                    sizeof decision, err);
        if (rc == BV_OK && strcmp(decision, "grow") == 0)
            return relayout_due(p, &l, err, BV_ERR_STOPPED, "capacity came");
        for (int v = 0; rc == BV_OK && !strcmp(decision, "replace") && p->offered > 0 &&
                        v < p->nodes;
             v++)
            if (p->host[v] != v)
                rc = replace(p, v, err);
        deg = degraded(p);
    }
    if (rc != BV_OK || deg == 0) {
        p->degraded_since = 0;
        p->degraded_steps = 0;
        return rc;
    }
    double now = bv_now_seconds();
    if (p->degraded_since == 0)
        p->degraded_since = now;
    static const char *const choices[2][4] = {{"continue", "restart", NULL},
                                              {"continue", "restart", "reconfigure", NULL}};
    relay = layout_for(p, &l);
    bv_metric m[] = {{"degraded", deg},
                     {"steps_degraded", (double)p->degraded_steps++},
                     {"seconds_degraded", now - p->degraded_since},
                     {"offered", p->offered},
                     {"stages_active", p->cfg.stages * p->cfg.pipelines - deg},
                     {"reconfigurable", relay},
                     {"pipelines", p->cfg.pipelines}};
    rc = decide(p, "degraded", m, sizeof m / sizeof *m, choices[relay], true, decision,
                sizeof decision, err);
    char why[128];
    snprintf(why, sizeof why, "%d stage%s ran in another stage's process for %lld step%s",
             deg, deg > 1 ? "s" : "", (long long)p->degraded_steps,
             p->degraded_steps > 1 ? "s" : "");
    if (rc == BV_OK && strcmp(decision, "restart") == 0)
        rc = bv_error_set(err, BV_ERR_STOPPED, "the policy restarts the run from its last "
                          "checkpoint: %s", why);
    else if (rc == BV_OK && strcmp(decision, "reconfigure") == 0)
        rc = relayout_due(p, &l, err, BV_ERR_STOPPED, why);
    return rc;
}

/* Between two steps, where stages fail over: an address not every node was told yet,
 * losses seen while one node was asked (failed over now), then boundary(); a loss in
 * it is failed over, and it runs again. */
static bv_status between_steps(bv_seq_pipe *p, bv_error *err)
{
    double lost_at = 0;
    for (int tries = 0; tries < 8; tries++) {
        bv_status rc = p->reroute >= 0 ? reroute(p, err) : BV_OK;
        if (rc == BV_OK && p->lost < 0)
            rc = boundary(p, err);
        if (rc == BV_OK && p->lost < 0)
            return BV_OK;
        if (p->relayout_due) /* the engine lays the stages out afresh */
            return rc;
        if (rc == BV_OK) /* seen while another node was asked */
            *err = p->deferred;
        if (!recovered(p, &lost_at, err))
            return err->status ? err->status : BV_ERR_IO;
    }
    return bv_error_set(err, BV_ERR_IO, "stage processes were lost 8 times between two "
                        "steps");
}

/* ---- lazy recovery (docs/redundancy.md#lazy-brc) ---- */

static bv_status take_phase(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                            bv_error *err)
{
    int32_t *at = ctx;
    if (m->bytes != sizeof *at || node < 0 || node >= p->nodes)
        return bv_error_set(err, BV_ERR_CORRUPT, "a phase answer of %zu bytes", m->bytes);
    memcpy(&at[node], m->data, sizeof *at);
    return BV_OK;
}

/* How each node runs the attempt after `prev` failed and its losses were failed over.
 * Every node is asked where prev left it (PHASE). A pipeline whose every stage reached
 * the update with its own gradient sums goes on from there (r[n].prev = prev), and so does
 * one whose stage lost in prev was adopted by a shadow whose replica ran its forward on
 * every microbatch (eflb), where the stage after it kept the gradients it sent (or the
 * lost stage was the last): the shadow runs the lost stage's backward from those forwards'
 * saved activations (Bamboo's lazy BRC), and the adopted stage takes its gradients; with
 * efeb the shadow ran that backward already and sends what it got. The
 * other pipelines run the whole step (r[n].prev = -1); every all-reduce starts from the
 * stages' own sums either way. Returns the pipelines that go on; *brc: the lazy BRCs. */
static int plan_resume(bv_seq_pipe *p, int64_t prev, bv_pipe_resume *r, int *brc)
{
    int P = p->cfg.stages, D = p->cfg.pipelines, n = p->nodes, going = 0;
    *brc = 0;
    for (int k = 0; k < n; k++)
        r[k] = (bv_pipe_resume){-1, -1, -1, -1, 0};
    int32_t *at = calloc((size_t)n, sizeof *at);
    bool was_failed = p->failed;
    bv_error e = {0};
    if (!at || broadcast(p, BV_PIPE_PHASE, prev, NULL, 0, take_phase, at, &e) != BV_OK) {
        if (p->lost < 0) /* a stage that cannot say: the step runs again, as before */
            p->failed = was_failed;
        free(at);
        return 0;
    }
    for (int d = 0; d < D; d++) {
        bool ok = true;
        for (int s = 0; ok && s < P; s++) {
            int v = d * P + s, shadow = d * P + (s + P - 1) % P, next = d * P + (s + 1) % P;
            if (!(at[v] & BV_PIPE_AT_UPDATE)) /* lost in prev: a lazy BRC, if it can */
                ok = p->host[v] == p->host[shadow] && p->host[v] != v &&
                     (at[shadow] & BV_PIPE_AT_UPDATE) &&
                     ((at[shadow] & BV_PIPE_HAS_BRC) ||
                      ((at[shadow] & BV_PIPE_HAS_FRC) &&
                       (s == P - 1 || next == shadow ||
                        ((at[next] & BV_PIPE_AT_UPDATE) && (at[next] & BV_PIPE_HAS_KEPT)))));
        }
        for (int s = 0; ok && s < P; s++) {
            int v = d * P + s, shadow = d * P + (s + P - 1) % P, next = d * P + (s + 1) % P;
            r[v].prev = prev;
            if (at[v] & BV_PIPE_AT_UPDATE)
                continue;
            (*brc)++;
            r[v].brc_from = shadow;
            r[shadow].brc_for = v;
            if (s != P - 1 && next != shadow && !(at[shadow] & BV_PIPE_HAS_BRC))
                r[next].resend_to = shadow;
        }
        going += ok;
    }
    free(at);
    return going;
}

/* broadcast() of TRAIN where each node is told how it runs the step (r, NULL: the whole
 * schedule everywhere). */
static bv_status train_nodes(bv_seq_pipe *p, int64_t ws, double lr, const bv_pipe_resume *r,
                             step_acc *a, bv_error *err)
{
    if (!r)
        return broadcast(p, BV_PIPE_TRAIN, ws, &lr, sizeof lr, take_step, a, err);
    uint8_t msg[sizeof lr + sizeof *r];
    memcpy(msg, &lr, sizeof lr);
    for (int n = 0; n < p->nodes; n++) {
        memcpy(msg + sizeof lr, &r[n], sizeof r[n]);
        bv_status rc = send_cmd(p, n, BV_PIPE_TRAIN, ws, msg,
                                r[n].prev >= 0 ? sizeof msg : sizeof lr, err);
        if (rc != BV_OK) {
            bv_error e = *err;
            p->failed = true;
            return abort_all(p, ws, err, rc, "%s", e.msg);
        }
    }
    return collect(p, p->nodes, BV_PIPE_TRAIN, ws, BV_PIPE_DONE, take_step, a, err);
}

bv_status bv_seq_pipe_train(bv_seq_pipe *p, int64_t it, double lr, bv_seq_pipe_step *out,
                            bv_error *err)
{
    if (p->two_phase && p->host) {
        bv_status rc = between_steps(p, err);
        if (rc != BV_OK)
            return rc;
    }
    step_acc a;
    double lost_at = 0;
    bv_status rc;
    bv_pipe_resume *resume = NULL; /* how the nodes run an attempt after a failed one */
    bool going = false;
    for (int attempt = 0;; attempt++) {
        int64_t ws = BV_SEQ_WIRE_STEP(it, attempt);
        a = (step_acc){0};
        rc = train_nodes(p, ws, lr, going ? resume : NULL, &a, err);
        bool prepared = rc == BV_OK;
        if (rc == BV_OK && p->two_phase)
            rc = commit(p, ws, err);
        /* a stage process lost: before every stage had prepared the step nobody applied
         * it, and it runs again; after, every stage that is left applied it */
        if (rc == BV_OK || !recovered(p, &lost_at, err)) {
            if (rc != BV_OK && prepared && p->relayout_due) { /* applied: laid out afresh */
                bv_log(BV_LOG_WARN, "%s", err->msg);     /* from the step's end */
                rc = BV_OK;
            }
            break;
        }
        if (prepared) { /* applied: its results are whole */
            rc = BV_OK;
            break;
        }
        if (!resume)
            resume = calloc((size_t)p->nodes, sizeof *resume);
        int brc = 0, on = resume ? plan_resume(p, ws, resume, &brc) : 0;
        going = on > 0;
        int D = p->cfg.pipelines;
        if (on == 0)
            bv_log(BV_LOG_INFO, "step %lld runs again (attempt %d)", (long long)it + 1,
                   attempt + 2);
        else if (on < D)
            bv_log(BV_LOG_INFO, "step %lld: %d of %d pipelines go on from their update "
                   "(attempt %d), the others run it again%s", (long long)it + 1, on, D,
                   attempt + 2, brc ? "; a lost stage's backward is run again by its shadow "
                   "from its replica's saved activations (lazy BRC)" : "");
        else
            bv_log(BV_LOG_INFO, "step %lld goes on from its update (attempt %d)%s",
                   (long long)it + 1, attempt + 2, brc ? ": the lost stage's backward is "
                   "run again by its shadow from its replica's saved activations (lazy BRC)"
                   : "");
        p->resumed += going;
        p->lazy_brc += brc;
    }
    free(resume);
    if (lost_at > 0)
        p->failover_s += bv_now_seconds() - lost_at;
    if (rc != BV_OK)
        return rc;
    if (p->two_phase && p->node) { /* the cluster as it trained this step (Bamboo's Fig. 11) */
        int alive = 0;
        for (int n = 0; n < p->nodes; n++)
            alive += p->node[n] >= 0;
        bv_series_report("stage_processes", "processes", alive);
        bv_series_report("stages_degraded", "stages", degraded(p));
    }
    /* each stage's seconds computing and waiting (mean over the pipelines), as series */
    for (int s = 0; s < p->cfg.stages; s++) {
        char name[48];
        snprintf(name, sizeof name, "stage%d_compute", s);
        bv_series_report(name, "s", a.compute[s] / p->cfg.pipelines);
        snprintf(name, sizeof name, "stage%d_wait", s);
        bv_series_report(name, "s", a.wait[s] / p->cfg.pipelines);
    }
    double *acc = a.sum;
    *out = (bv_seq_pipe_step){acc[1] > 0 ? acc[0] / acc[1] : 0, acc[2], acc[3], acc[4],
                              acc[5]};
    return BV_OK;
}

void bv_seq_pipe_failovers(const bv_seq_pipe *p, bv_seq_pipe_recovery *r)
{
    *r = (bv_seq_pipe_recovery){p->failovers, p->replacements, p->resumed, p->lazy_brc,
                                p->failover_s};
}

bool bv_seq_pipe_two_phase(const bv_seq_pipe_cfg *cfg)
{
    for (int s = 0; cfg->sched && s < cfg->stages; s++)
        for (size_t i = 0; i < cfg->sched[s].count; i++)
            if (bv_schedule_at(&cfg->sched[s], i)->op == BV_INSTR_REPLICA_UPDATE)
                return true;
    return false;
}

typedef struct eval_acc {
    double *sums; /* per batch: loss sum, count (over the pipelines) */
    int64_t iters;
} eval_acc;

static bv_status take_eval(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                           bv_error *err)
{
    eval_acc *a = ctx;
    bool last = node % p->cfg.stages == p->cfg.stages - 1;
    size_t want = last ? (size_t)(2 * a->iters) * sizeof(double) : 0;
    if (m->bytes != want)
        return bv_error_set(err, BV_ERR_CORRUPT, "evaluation results of %zu bytes, expected "
                            "%zu", m->bytes, want);
    for (int64_t i = 0; i < 2 * a->iters && last; i++) {
        double v;
        memcpy(&v, (const char *)m->data + i * (int64_t)sizeof v, sizeof v);
        a->sums[i] += v;
    }
    return BV_OK;
}

bv_status bv_seq_pipe_eval(bv_seq_pipe *p, int64_t done, int split, int64_t iters,
                           double *loss, bv_error *err)
{
    eval_acc a = {calloc((size_t)(2 * iters), sizeof(double)), iters};
    if (!a.sums)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    int64_t args[2] = {split, iters};
    bv_status rc;
    double lost_at = 0;
    for (int attempt = 0;; attempt++) { /* again after a failover */
        memset(a.sums, 0, (size_t)(2 * iters) * sizeof *a.sums);
        rc = broadcast(p, BV_PIPE_EVAL, BV_SEQ_EVAL_STEP(done, split, attempt), args, sizeof args,
                       take_eval, &a, err);
        if (rc == BV_OK || !recovered(p, &lost_at, err))
            break;
    }
    double sum = 0;
    for (int64_t i = 0; i < iters; i++)
        sum += a.sums[2 * i + 1] > 0 ? a.sums[2 * i] / a.sums[2 * i + 1] : 0;
    *loss = sum / (double)iters;
    free(a.sums);
    return rc;
}

/* ---- state, checksum ---- */

bv_status bv_seq_pipe_gather(bv_seq_pipe *p, int d, bv_state *s, bv_error *err)
{
    double lost_at = 0;
    bv_status rc = gather(p, d, -1, s, err);
    if (rc != BV_OK && recovered(p, &lost_at, err))
        rc = gather(p, d, -1, s, err);
    return rc;
}

bv_status bv_seq_pipe_get_state(bv_seq_pipe *p, bv_state *s, bv_error *err)
{
    return bv_seq_pipe_gather(p, 0, s, err); /* the other pipelines hold the same bits */
}

bv_status bv_seq_pipe_set_state(bv_seq_pipe *p, const bv_state *s, bv_error *err)
{
    uint8_t *buf;
    size_t bytes;
    bv_status rc = bv_stage_state_pack(s, &buf, &bytes, err);
    if (rc != BV_OK)
        return rc;
    rc = broadcast_again(p, BV_PIPE_SET_STATE, buf, bytes, NULL, NULL, err);
    free(buf);
    return rc;
}

static bv_status take_crc(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m, void *ctx,
                          bv_error *err)
{
    (void)p;
    (void)node;
    if (m->bytes != sizeof(uint32_t))
        return bv_error_set(err, BV_ERR_CORRUPT, "a checksum of %zu bytes", m->bytes);
    memcpy(ctx, m->data, sizeof(uint32_t));
    return BV_OK;
}

bv_status bv_seq_pipe_crc32c(bv_seq_pipe *p, uint32_t *crc, bv_error *err)
{
    *crc = 0;
    for (int n = 0; n < p->cfg.stages; n++) { /* in layer order: stage by stage */
        bv_status rc = ask(p, n, BV_PIPE_CRC, 0, crc, sizeof *crc, BV_PIPE_DONE, take_crc, crc,
                           err);
        if (rc != BV_OK)
            return rc;
    }
    return BV_OK;
}

/* ---- replicas ---- */

typedef struct replica_crc {
    int32_t stage; /* the replica's, -1 none */
    uint32_t own, rep;
} replica_crc;

static bv_status take_replica_crc(bv_seq_pipe *p, int node, const bv_pipe_msg_in *m,
                                  void *ctx, bv_error *err)
{
    uint32_t r[3];
    if (m->bytes != sizeof r)
        return bv_error_set(err, BV_ERR_CORRUPT, "replica checksums of %zu bytes", m->bytes);
    memcpy(r, m->data, sizeof r);
    if ((int32_t)r[0] >= p->cfg.stages || (int32_t)r[0] < -1)
        return bv_error_set(err, BV_ERR_CORRUPT, "a replica of stage %d", (int32_t)r[0]);
    ((replica_crc *)ctx)[node] = (replica_crc){(int32_t)r[0], r[1], r[2]};
    return BV_OK;
}

bv_status bv_seq_pipe_replicas(bv_seq_pipe *p, int *replicas, int *equal, bv_error *err)
{
    replica_crc *c = calloc((size_t)p->nodes, sizeof *c);
    if (!c)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_status rc = broadcast_again(p, BV_PIPE_REPLICA_CRC, NULL, 0, take_replica_crc, c, err);
    *replicas = *equal = 0;
    for (int n = 0; rc == BV_OK && n < p->nodes; n++) {
        if (c[n].stage < 0)
            continue;
        int of = n - n % p->cfg.stages + c[n].stage; /* the same pipeline's stage */
        char who[64], whose[64];
        stage_name(p, n, who, sizeof who);
        stage_name(p, of, whose, sizeof whose);
        ++*replicas;
        if (c[n].rep == c[of].own)
            ++*equal;
        else
            bv_log(BV_LOG_ERROR, "%s's replica of %s differs from it (crc32c %08x, not %08x)",
                   who, whose, c[n].rep, c[of].own);
    }
    free(c);
    return rc;
}
