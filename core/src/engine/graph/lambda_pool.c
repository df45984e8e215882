/* A graph server's controller of serverless function workers (lambda_pool.h). One thread:
 * the graph server's. A worker slot is the address of one worker (tw<k> in the book);
 * a slot's worker lives FREE -> STARTING (launched, its READY not in yet) -> BUSY (an
 * invocation out) <-> IDLE (warm) -> RETIRING (told to end, its exit not seen yet) ->
 * FREE. A slot is never reused before its old worker's exit is seen, so two processes
 * never hold one address. */
#include "lambda_pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "grow.h"
#include "node_group.h"
#include "task_hdr.h"

enum { SLOT_FREE, SLOT_STARTING, SLOT_IDLE, SLOT_BUSY, SLOT_RETIRING };

/* How long the controller waits for a message before it looks at its timers again. */
#define POLL_MS 20

typedef struct fn_slot {
    int state;
    int64_t node;  /* the cloud's id of its worker */
    uint64_t task; /* STARTING, BUSY: the task it runs (0: none) */
    double since;  /* STARTING: launched; IDLE: idle since; BUSY: invoked */
} fn_slot;

typedef struct fn_task {
    uint64_t id; /* > 0; hdr.step of the invocations, and of their results */
    uint16_t type;
    bv_task_hdr hdr;
    uint8_t *data; /* arrays a, b, c, one after the other */
    size_t na, nb, nc;
    int slot; /* -1: waiting in the queue */
    int attempts;
} fn_task;

struct bv_lambda_pool {
    bv_graph_engine *e;
    const bv_transport_ops *t;
    bv_endpoint *inbox;
    bv_endpoint **to; /* per slot of the whole run (tw<k>) */
    const bv_cloud_ops *ops;
    bv_cloud *cloud;
    bv_function_limits lim;
    char exe[4096];
    int first, nslots; /* this server's slots */
    int lambdas;       /* the knob: workers kept at most */
    fn_slot *slots;
    fn_task *tasks; /* out: queued or invoked */
    size_t ntasks, cap;
    uint64_t next_id;
    double billing_s; /* an invocation's billed time is rounded up to this */
    double gb;        /* GB of memory billed per second of an invocation */
    double fig[BV_FN_FIGURES];
    double mark, queue_area, idle_area, span, task_s, completed;
    char lost_why[256]; /* why the last invocation was lost */
};

static bool is_result(uint16_t type)
{
    return type == BV_MSG_FWD_RESULT || type == BV_MSG_BWD_RESULT ||
           type == BV_MSG_LOSS_RESULT || type == BV_MSG_EDGE_FWD_RESULT ||
           type == BV_MSG_EDGE_BWD_RESULT || type == BV_MSG_FUSED_RESULT;
}

/* The slot of this server a message's sender is, or -1. */
static int sender_slot(const bv_lambda_pool *p, const bv_role_msg *m)
{
    int k = (int)m->wire.sender - BV_ROLE_TW - p->first;
    return m->wire.sender >= BV_ROLE_TW && k >= 0 && k < p->nslots ? k : -1;
}

static fn_task *find_task(bv_lambda_pool *p, uint64_t id)
{
    for (size_t i = 0; i < p->ntasks; i++)
        if (p->tasks[i].id == id)
            return &p->tasks[i];
    return NULL;
}

static int count_state(const bv_lambda_pool *p, int state)
{
    int n = 0;
    for (int k = 0; k < p->nslots; k++)
        n += p->slots[k].state == state;
    return n;
}

static int alive(const bv_lambda_pool *p)
{
    return p->nslots - count_state(p, SLOT_FREE) - count_state(p, SLOT_RETIRING);
}

static int queued(const bv_lambda_pool *p)
{
    int n = 0;
    for (size_t i = 0; i < p->ntasks; i++)
        n += p->tasks[i].slot < 0;
    return n;
}

/* The time-weighted figures, up to now: tasks waiting, workers idle while tasks are out. */
static void account(bv_lambda_pool *p, double now)
{
    double dt = now - p->mark;
    p->mark = now;
    if (dt <= 0 || !p->ntasks)
        return;
    p->span += dt;
    p->queue_area += dt * queued(p);
    p->idle_area += dt * count_state(p, SLOT_IDLE);
}

/* An invocation that ran `seconds`: billed rounded up to the provider's unit. */
static void bill(bv_lambda_pool *p, double seconds)
{
    double billed = p->billing_s > 0 ? ceil(seconds / p->billing_s - 1e-9) * p->billing_s
                                     : seconds;
    if (billed < p->billing_s)
        billed = p->billing_s;
    p->fig[BV_FN_BILLED_S] += billed;
    p->fig[BV_FN_GB_S] += billed * p->gb;
}

static void drop_task(bv_lambda_pool *p, fn_task *task)
{
    free(task->data);
    *task = p->tasks[--p->ntasks];
}

/* The worker of slot k is gone or given up on (why: for the log; kind: BV_FN_LOST or
 * BV_FN_TIMEOUTS): its task, if any, goes back to the queue for another invocation, after
 * the billing of the lost one. */
static void lose(bv_lambda_pool *p, int k, int kind, const char *why, double now)
{
    fn_slot *sl = &p->slots[k];
    fn_task *task = sl->task ? find_task(p, sl->task) : NULL;
    if (task) {
        if (sl->state == SLOT_BUSY)
            bill(p, now - sl->since);
        task->slot = -1;
        task->attempts++;
        p->fig[kind]++;
        p->fig[BV_FN_RELAUNCHES]++;
        snprintf(p->lost_why, sizeof p->lost_why, "function worker %d %s", p->first + k, why);
    }
    sl->task = 0;
}

static bv_status launch(bv_lambda_pool *p, int k, double now, bv_error *err)
{
    const bv_graph_engine *e = p->e;
    char index[16], seed[32], label[48];
    snprintf(index, sizeof index, "%d", p->first + k);
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)e->cfg.seed);
    snprintf(label, sizeof label, "function worker %d", p->first + k);
    const char *argv[] = {p->exe, "role", "--experiment", e->cfg.experiment_file, "--role",
                          "function", "--index", index, "--seed", seed, "--book", e->book,
                          NULL};
    bv_node_request req = {.size = sizeof req, .role = "function", .node_type = "lambda",
                           .argv = argv, .label = label};
    char address[BV_ADDR_LEN];
    int64_t node = p->ops->launch(p->cloud, &req, address, sizeof address, err);
    if (node < 0)
        return err->status ? err->status : BV_ERR_PLUGIN;
    p->slots[k] = (fn_slot){SLOT_STARTING, node, 0, now};
    p->fig[BV_FN_COLD_STARTS]++;
    return BV_OK;
}

/* Hands task to slot k's worker, with the fault the platform injects into it. A send that
 * fails loses the invocation. */
static void invoke(bv_lambda_pool *p, int k, fn_task *task, double now)
{
    fn_slot *sl = &p->slots[k];
    bv_task_hdr h = task->hdr;
    h.step = (int64_t)task->id;
    if (p->lim.cpu > 0 && !p->lim.cpu_enforced)
        h.flags |= BV_TASK_THROTTLE;
    switch (p->ops->invoke(p->cloud, sl->node)) {
    case BV_INVOKE_FAIL: h.flags |= BV_TASK_FAULT_FAIL; break;
    case BV_INVOKE_HANG: h.flags |= BV_TASK_FAULT_HANG; break;
    default: break; /* none, or a kill the cloud does itself */
    }
    task->slot = k;
    *sl = (fn_slot){SLOT_BUSY, sl->node, task->id, now};
    p->fig[BV_FN_INVOCATIONS]++;
    p->fig[BV_FN_BYTES_TO] += (double)(BV_TASK_HDR_WIRE_SIZE + task->na + task->nb + task->nc);
    bv_error why;
    if (bv_role_send(p->t, p->to[p->first + k], task->type, BV_ROLE_GS, &h, task->data,
                     task->na, task->data + task->na, task->nb, task->data + task->na + task->nb,
                     task->nc, &why) != BV_OK) {
        lose(p, k, BV_FN_LOST, why.msg, now);
        p->ops->terminate(p->cloud, sl->node, &why);
        sl->state = SLOT_FREE;
    }
}

/* Tells slot k's worker to end; its exit frees the slot (watch: or the cloud ends it, if
 * it has not exited within engine.peer_timeout). */
static void retire(bv_lambda_pool *p, int k, double now)
{
    bv_error ignored;
    bv_role_send(p->t, p->to[p->first + k], BV_MSG_SHUTDOWN, BV_ROLE_GS, NULL, NULL, 0, NULL, 0,
                 NULL, 0, &ignored);
    p->slots[k].state = SLOT_RETIRING;
    p->slots[k].since = now;
}

/* The oldest waiting task, or NULL. */
static fn_task *next_queued(bv_lambda_pool *p)
{
    fn_task *best = NULL;
    for (size_t i = 0; i < p->ntasks; i++)
        if (p->tasks[i].slot < 0 && (!best || p->tasks[i].id < best->id))
            best = &p->tasks[i];
    return best;
}

/* Waiting tasks to idle workers (the one idle the shortest first, as a platform keeps the
 * fewest warm), or to new ones while fewer than `lambdas` live; idle workers beyond the
 * knob are retired. */
static bv_status dispatch(bv_lambda_pool *p, double now, bv_error *err)
{
    for (int k = 0; k < p->nslots; k++) /* past the keep-warm period */
        if (p->slots[k].state == SLOT_IDLE && now - p->slots[k].since >= p->lim.keep_warm)
            retire(p, k, now);
    for (fn_task *task; (task = next_queued(p));) {
        int warm = -1, free_slot = -1;
        for (int k = 0; k < p->nslots; k++) {
            if (p->slots[k].state == SLOT_IDLE &&
                (warm < 0 || p->slots[k].since > p->slots[warm].since))
                warm = k;
            if (p->slots[k].state == SLOT_FREE && free_slot < 0)
                free_slot = k;
        }
        if (warm >= 0) {
            invoke(p, warm, task, now);
            continue;
        }
        if (free_slot < 0 || alive(p) >= p->lambdas)
            break;
        bv_status st = launch(p, free_slot, now, err);
        if (st != BV_OK)
            return st;
        p->slots[free_slot].task = task->id; /* invoked when its READY comes */
        task->slot = free_slot;
    }
    for (int k = 0; k < p->nslots && alive(p) > p->lambdas; k++)
        if (p->slots[k].state == SLOT_IDLE)
            retire(p, k, now);
    int n = alive(p);
    if (n > p->fig[BV_FN_WORKERS_MAX])
        p->fig[BV_FN_WORKERS_MAX] = n;
    if (queued(p) > p->fig[BV_FN_QUEUE_MAX])
        p->fig[BV_FN_QUEUE_MAX] = queued(p);
    return BV_OK;
}

/* The cloud's news (workers that ended), and the time limits. */
static bv_status watch(bv_lambda_pool *p, double now, bv_error *err)
{
    bv_cloud_event ev[16];
    for (int i = 0; i < 16; i++)
        ev[i].size = sizeof ev[i];
    int got = p->ops->poll(p->cloud, ev, 16, err);
    if (got < 0)
        return err->status ? err->status : BV_ERR_PLUGIN;
    for (int i = 0; i < got; i++) {
        if (ev[i].kind != BV_CLOUD_EXITED && ev[i].kind != BV_CLOUD_PREEMPTED)
            continue;
        for (int k = 0; k < p->nslots; k++) {
            fn_slot *sl = &p->slots[k];
            if (sl->state == SLOT_FREE || sl->node != ev[i].node)
                continue;
            if (sl->task) {
                char how[96];
                bv_node_group_exit_text(ev[i].wait_status, how, sizeof how);
                lose(p, k, BV_FN_LOST, how, now);
            }
            sl->state = SLOT_FREE;
        }
    }
    for (int k = 0; k < p->nslots; k++) {
        fn_slot *sl = &p->slots[k];
        bool late = (sl->state == SLOT_BUSY && now - sl->since > p->lim.time_limit) ||
                    (sl->state == SLOT_STARTING && now - sl->since > p->e->cfg.start_timeout);
        if (late) { /* the platform kills it */
            lose(p, k, BV_FN_TIMEOUTS, sl->state == SLOT_BUSY ? "ran past the time limit"
                                                              : "did not start in time", now);
            bv_error ignored;
            p->ops->terminate(p->cloud, sl->node, &ignored);
            sl->state = SLOT_FREE;
        } else if (sl->state == SLOT_RETIRING && now - sl->since > p->e->cfg.peer_timeout) {
            bv_error ignored; /* told to end and still there (its SHUTDOWN was lost) */
            p->ops->terminate(p->cloud, sl->node, &ignored);
            sl->state = SLOT_FREE;
        }
    }
    for (size_t i = 0; i < p->ntasks; i++)
        if (p->tasks[i].attempts >= BV_FN_MAX_ATTEMPTS)
            return bv_error_set(err, BV_ERR_IO, "a %s task on interval %d lost %d invocations "
                                "in a row; the last: %s", p->e->stages[p->tasks[i].hdr.stage]->name,
                                p->tasks[i].hdr.interval, p->tasks[i].attempts, p->lost_why);
    return BV_OK;
}

/* The controller's own messages: READY of a worker (its task goes out), a result of a task
 * done already (dropped), a worker's ERROR (its invocation is lost, the worker retired).
 * A task's first result is taken off the books and left to the caller (false). */
static bool take(bv_lambda_pool *p, bv_role_msg *m, double now)
{
    int k = sender_slot(p, m);
    if (k < 0)
        return false;
    fn_slot *sl = &p->slots[k];
    uint16_t type = m->wire.type;
    if (type == BV_MSG_READY) {
        fn_task *task = sl->state == SLOT_STARTING && sl->task ? find_task(p, sl->task) : NULL;
        if (task)
            invoke(p, k, task, now);
        else if (sl->state == SLOT_STARTING)
            *sl = (fn_slot){SLOT_IDLE, sl->node, 0, now};
    } else if (type == BV_MSG_ERROR) {
        if (sl->state == SLOT_BUSY) {
            char why[200];
            snprintf(why, sizeof why, "failed: %.*s", (int)(m->hdr.na < 160 ? m->hdr.na : 160),
                     (const char *)m->a);
            lose(p, k, BV_FN_LOST, why, now);
            retire(p, k, now);
        }
    } else if (is_result(type)) {
        fn_task *task = find_task(p, (uint64_t)m->hdr.step);
        if (!task || task->slot != k || sl->state != SLOT_BUSY || sl->task != task->id) {
            p->fig[BV_FN_DUPLICATES]++;
        } else {
            p->fig[BV_FN_BYTES_FROM] += (double)m->raw.payload_len;
            bill(p, now - sl->since);
            p->task_s += now - sl->since;
            p->completed++;
            drop_task(p, task);
            *sl = (fn_slot){SLOT_IDLE, sl->node, 0, now};
            return false;
        }
    } else {
        return false;
    }
    bv_role_release(p->t, m);
    return true;
}

bv_status bv_lambda_pool_open(bv_graph_engine *e, bv_endpoint *inbox, bv_endpoint **to_workers,
                              bv_lambda_pool **out, bv_error *err)
{
    bv_lambda_pool *p = calloc(1, sizeof *p);
    if (!(*out = p))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    p->e = e;
    p->t = e->cfg.transport_ops;
    p->inbox = inbox;
    p->to = to_workers;
    p->ops = e->cfg.fn_cloud_ops;
    p->nslots = bv_fn_slots(e);
    p->first = e->gs_index * p->nslots;
    p->lambdas = e->cfg.lambdas;
    p->billing_s = 1e-3 * e->cfg.fn_billing_ms;
    p->next_id = 1;
    p->mark = bv_engine_now();
    if (!(p->slots = calloc((size_t)p->nslots, sizeof *p->slots)))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_status st = bv_node_group_self_exe(e->cfg.role_exe, p->exe, sizeof p->exe, err);
    if (st != BV_OK)
        return st;
    p->cloud = p->ops->create(e->cfg.cloud_opts, &e->cfg.run_info, err);
    if (!p->cloud)
        return err->status ? err->status : BV_ERR_PLUGIN;
    p->lim = (bv_function_limits){.size = sizeof p->lim};
    if ((st = p->ops->function_limits(p->cloud, &p->lim, err)) != BV_OK)
        return st;
    p->gb = (p->lim.memory_mb > 0 ? p->lim.memory_mb : e->cfg.fn_bill_mb) / 1024.0;
    return BV_OK;
}

static void slot_name(void *ctx, int k, char *buf, size_t len)
{
    const bv_lambda_pool *p = ctx;
    snprintf(buf, len, "function worker %d", p->first + k);
}

void bv_lambda_pool_close(bv_lambda_pool *p)
{
    if (!p)
        return;
    if (p->cloud) {
        int64_t nodes[BV_MAX_TENSOR_WORKERS];
        for (int k = 0; k < p->nslots; k++) {
            nodes[k] = p->slots[k].state == SLOT_FREE ? -1 : p->slots[k].node;
            bv_error ignored;
            if (p->slots[k].state == SLOT_IDLE || p->slots[k].state == SLOT_BUSY)
                bv_role_send(p->t, p->to[p->first + k], BV_MSG_SHUTDOWN, BV_ROLE_GS, NULL,
                             NULL, 0, NULL, 0, NULL, 0, &ignored);
        }
        bv_node_group_await_exits(p->ops, p->cloud, nodes, p->nslots, p->e->cfg.peer_timeout,
                                  slot_name, p);
        p->ops->destroy(p->cloud); /* terminates the rest, joins their output */
    }
    for (size_t i = 0; i < p->ntasks; i++)
        free(p->tasks[i].data);
    free(p->tasks);
    free(p->slots);
    free(p);
}

bv_status bv_lambda_pool_submit(bv_lambda_pool *p, uint16_t type, const bv_task_hdr *h,
                                const void *a, size_t na, const void *b, size_t nb,
                                const void *c, size_t nc, bv_error *err)
{
    double now = bv_engine_now();
    account(p, now);
    if (!bv_grow((void **)&p->tasks, &p->cap, p->ntasks, sizeof *p->tasks, 16))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a function task");
    uint8_t *data = malloc(na + nb + nc + 1);
    if (!data)
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for a function task");
    if (na)
        memcpy(data, a, na);
    if (nb)
        memcpy(data + na, b, nb);
    if (nc)
        memcpy(data + na + nb, c, nc);
    p->tasks[p->ntasks++] = (fn_task){p->next_id++, type, *h, data, na, nb, nc, -1, 0};
    return dispatch(p, now, err);
}

bv_status bv_lambda_pool_recv(bv_lambda_pool *p, bv_role_msg *m, bv_error *err)
{
    for (;;) {
        double now = bv_engine_now();
        account(p, now);
        bv_status st = watch(p, now, err);
        if (st == BV_OK)
            st = dispatch(p, now, err);
        if (st != BV_OK)
            return st;
        bv_error why;
        if (bv_role_recv_valid(p->t, p->inbox, m, POLL_MS, &p->e->frames_dropped, &why) !=
            BV_OK)
            continue; /* a timeout: the timers again */
        now = bv_engine_now();
        account(p, now);
        if (!take(p, m, now))
            return BV_OK;
    }
}

bool bv_lambda_pool_take(bv_lambda_pool *p, bv_role_msg *m)
{
    return take(p, m, bv_engine_now());
}

bv_status bv_lambda_count_ok(const bv_graph_engine *e, double value, bv_error *err)
{
    if (!(value >= 1 && value <= bv_fn_slots(e)))
        return bv_error_set(err, BV_ERR_INVALID, "compute.lambdas must be 1 .. %d (the "
                            "worker slots of a graph server: compute.max_lambdas)",
                            bv_fn_slots(e));
    return BV_OK;
}

bv_status bv_lambda_pool_set_lambdas(bv_lambda_pool *p, double value, bv_error *err)
{
    bv_status st = bv_lambda_count_ok(p->e, value, err);
    if (st == BV_OK)
        p->lambdas = (int)value;
    return st;
}

void bv_lambda_pool_begin(bv_lambda_pool *p)
{
    memset(p->fig, 0, sizeof p->fig);
    p->mark = bv_engine_now();
    p->queue_area = p->idle_area = p->span = p->task_s = p->completed = 0;
    bv_error ignored; /* idle workers past their keep-warm period go now */
    dispatch(p, p->mark, &ignored);
}

void bv_lambda_pool_figures(bv_lambda_pool *p, double out[BV_FN_FIGURES])
{
    account(p, bv_engine_now());
    memcpy(out, p->fig, sizeof p->fig);
    out[BV_FN_QUEUE_MEAN] = p->span > 0 ? p->queue_area / p->span : 0;
    out[BV_FN_IDLE_MEAN] = p->span > 0 ? p->idle_area / p->span : 0;
    out[BV_FN_LAMBDAS] = p->lambdas;
    out[BV_FN_TASK_MS_MEAN] = p->completed > 0 ? 1e3 * p->task_s / p->completed : 0;
}
