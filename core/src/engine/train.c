/* The training loop every engine runs under (train.h). Each unit (epoch or step) is
 * trained by the engine and reported as a record; the loop writes it to metrics.jsonl,
 * shows it, hands it to the policy (which may stop the run or set the learning rate), and
 * offers the training state to the resilience strategies (after every unit, or after each
 * evaluation for engines that evaluate periodically). A resumed run rebuilds its history
 * from the checkpoint and replays it through the policy, so it goes on exactly as the
 * uninterrupted run would have. */
#include "train.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "bivouac/series.h"
#include "bivouac/wire.h"
#include "clock.h"
#include "grow.h"
#include "json_out.h"
#include "series_sink.h"

/* Records of one kind, in the order they were made. */
typedef struct record_list {
    bv_record *items;
    size_t count, cap;
} record_list;

typedef struct train_run {
    const bv_experiment *x;
    const bv_engine_ops *ops;
    const bv_train_options *o;
    bv_engine *engine;
    bv_resilience *res[BV_MAX_RESILIENCE];
    bv_policy *policy;
    bool policy_active;
    bool policy_stops_on_error;
    bool policy_failed; /* it failed (in this run or, replayed, before a resume) with stop */
    bool restart_due;   /* a reconfiguration event's decision was `restart` */
    int restarts;       /* restarts in the process from the last checkpoint */
    record_list units, evals;
    bv_record final_eval;
    bool has_final_eval;
    double lr_set;      /* the learning rate a policy set; NaN: the engine's schedule */
    double wall_before; /* seconds spent before a resume */
    double train_seconds;
    double t0, session_start, last_draw;
    int64_t session_units;
    FILE *metrics;
    /* what the run costs (ledger.h): its own process is charge `self`; cost[i] is the
     * running cost after unit i (NaN: not known, a checkpoint from before the ledger),
     * one per unit, as units */
    bv_ledger *ledger;
    int self;
    double *cost;
    size_t ncost, cost_cap;
} train_run;

static bv_status record_push(record_list *l, const bv_record *rec, bv_error *err)
{
    if (!bv_grow((void **)&l->items, &l->cap, l->count, sizeof *l->items, 256))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    l->items[l->count++] = *rec;
    return BV_OK;
}

/* One metrics.jsonl line: {"epoch": 3, "train_loss": 1.2, ..., "seconds": 0.5}, and a
 * unit's running cost after its seconds ("cost_usd": 0.0001) where it is known. */
static void write_record(FILE *f, const bv_record_kind *kind, const bv_record *rec,
                         double cost)
{
    fputc('{', f);
    bv_json_string(f, kind->fields[0]);
    fprintf(f, ": %lld", (long long)rec->v[0]);
    for (size_t i = 1; i < kind->nfields; i++)
        bv_json_field(f, kind->fields[i], rec->v[i]);
    if (!isnan(cost))
        bv_json_field(f, "cost_usd", cost);
    fputs("}\n", f);
    fflush(f);
}

static bv_status cost_push(train_run *r, double usd, bv_error *err)
{
    if (!bv_grow((void **)&r->cost, &r->cost_cap, r->ncost, sizeof *r->cost, 256))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    r->cost[r->ncost++] = usd;
    return BV_OK;
}

/* The series reported since the last call (bivouac/series.h: plugins, the policy's
 * `report` action), one metrics.jsonl line each, at the unit index of the record they
 * follow: {"epoch": 3, "series": "queue_depth", "unit": "tasks", "value": 7, "seconds": 0.5} */
static void write_series(FILE *f, const bv_record_kind *kind, const bv_record *rec)
{
    /* one drain of everything the sink can hold: a reporter that never pauses cannot
     * keep the loop here */
    bv_series_point pts[BV_SERIES_SINK_CAP];
    size_t n = bv_series_drain(pts, BV_SERIES_SINK_CAP);
    for (size_t i = 0; i < n; i++) {
        fputc('{', f);
        bv_json_string(f, kind->fields[0]);
        fprintf(f, ": %lld, \"series\": ", (long long)rec->v[0]);
        bv_json_string(f, pts[i].name);
        fputs(", \"unit\": ", f);
        bv_json_string(f, pts[i].unit);
        bv_json_field(f, "value", pts[i].value);
        bv_json_field(f, "seconds", rec->v[kind->nfields - 1]);
        fputs("}\n", f);
    }
    if (n)
        fflush(f);
}

static double *seconds_of(const bv_record_kind *kind, bv_record *rec)
{
    return &rec->v[kind->nfields - 1];
}

/* A policy's `set` actions: "<strategy>.<knob>" goes to that resilience strategy's
 * set_knob, on the loop's instance (which checks it) and on the engine's own (the graph
 * server's task gate); "compute.<knob>" to the engine (compute.lambdas: the graph
 * servers' function workers). */
static bv_status apply_knobs(train_run *r, const bv_policy_actions *a, bv_error *err)
{
    for (size_t k = 0; k < a->nsets; k++) {
        const char *name = a->sets[k].name, *dot = strchr(name, '.');
        size_t len = dot ? (size_t)(dot - name) : 0, i = 0;
        if (dot && len == 7 && strncmp(name, "compute", 7) == 0) { /* the engine's own */
            bv_status st = r->ops->set_knob
                               ? r->ops->set_knob(r->engine, "compute", dot + 1,
                                                  a->sets[k].value, err)
                               : bv_error_set(err, BV_ERR_INVALID, "set: this engine has no "
                                              "knob '%s'", name);
            if (st != BV_OK)
                return st;
            bv_log(BV_LOG_INFO, "policy: %s = %g", name, a->sets[k].value);
            continue;
        }
        while (dot && i < r->x->nresilience &&
               (strncmp(r->x->resilience[i].plugin->name, name, len) != 0 ||
                r->x->resilience[i].plugin->name[len] != '\0'))
            i++;
        if (!dot || i == r->x->nresilience || !r->x->resilience_ops[i].set_knob)
            return bv_error_set(err, BV_ERR_INVALID, "set: no resilience strategy of this "
                                "run has a knob '%s' (a knob is <strategy>.<name>, e.g. "
                                "staleness.s, or compute.lambdas)", name);
        bv_status st = r->x->resilience_ops[i].set_knob(r->res[i], dot + 1, a->sets[k].value,
                                                        err);
        if (st == BV_OK && r->ops->set_knob)
            st = r->ops->set_knob(r->engine, r->x->resilience[i].plugin->name, dot + 1,
                                  a->sets[k].value, err);
        if (st != BV_OK)
            return st;
        bv_log(BV_LOG_INFO, "policy: %s = %g", name, a->sets[k].value);
    }
    return BV_OK;
}

/* Calls the policy's handler of `event` with metrics m and carries out its actions. A
 * replayed event (resume) rebuilds the policy's own state only: its learning rate is
 * already in the restored state, and its knobs and series are not applied again. */
static void policy_event(train_run *r, const char *event, const bv_metric *m, size_t n,
                         bool replay, bool *stop, char *reason, size_t reason_len)
{
    bv_policy_actions a;
    bv_error perr = {0};
    bv_status st = bv_policy_call(r->policy, event, m, n, &a, &perr);
    if (st == BV_OK && !replay)
        st = apply_knobs(r, &a, &perr);
    if (st != BV_OK) {
        r->policy_active = false;
        if (r->policy_stops_on_error) {
            snprintf(reason, reason_len, "policy error: %.280s", perr.msg);
            *stop = true;
            r->policy_failed = true;
            return;
        }
        if (!replay)
            bv_log(BV_LOG_WARN, "%s; the run goes on without the policy", perr.msg);
        return;
    }
    if (a.set_lr && !replay)
        r->lr_set = a.lr;
    for (size_t i = 0; i < a.nreports && !replay; i++)
        bv_series_report(a.reports[i].name, a.reports[i].unit, a.reports[i].value);
    if (a.stop) {
        *stop = true;
        snprintf(reason, reason_len, "policy: %s", a.reason[0] ? a.reason : "stop");
    }
}

/* The policy's handler for the record's event. Policies see what a user would watch: no
 * test metrics. */
static void policy_record(train_run *r, const bv_record_kind *kind, const bv_record *rec,
                          bool replay, bool *stop, char *reason, size_t reason_len)
{
    if (!r->policy_active || !bv_policy_has_handler(r->policy, kind->event))
        return;
    bv_metric m[BV_RECORD_FIELDS];
    size_t n = 0;
    for (size_t i = 0; i < kind->nfields; i++)
        if (strncmp(kind->fields[i], "test_", 5) != 0)
            m[n++] = (bv_metric){kind->fields[i], rec->v[i]};
    policy_event(r, kind->event, m, n, replay, stop, reason, reason_len);
}

/* The `tick` event, after each unit's training, before its record's event: the unit's
 * number and every series the engine and plugins reported during it (e.g. the task
 * gate's figures: tasks_in_flight_max, gather_lag_max), as metrics.jsonl gets them. */
static void policy_tick(train_run *r, const bv_record_kind *kind, const bv_record *rec,
                        bool *stop, char *reason, size_t reason_len)
{
    if (!r->policy_active || !bv_policy_has_handler(r->policy, "tick"))
        return;
    bv_series_point pts[BV_SERIES_SINK_CAP];
    bv_metric m[BV_SERIES_SINK_CAP + 1];
    size_t np = bv_series_peek(pts, BV_SERIES_SINK_CAP), n = 0;
    m[n++] = (bv_metric){kind->fields[0], rec->v[0]};
    for (size_t i = 0; i < np; i++)
        if (strcmp(pts[i].name, kind->fields[0]) != 0)
            m[n++] = (bv_metric){pts[i].name, pts[i].value};
    policy_event(r, "tick", m, n, false, stop, reason, reason_len);
}

/* The full training state: the engine's plus the loop's own. */
static bv_status snapshot(train_run *r, bv_state *s, bv_error *err)
{
    bv_status st = r->ops->get_state(r->engine, s, err);
    if (st != BV_OK)
        return st;
    int64_t units = (int64_t)r->units.count;
    double wall = r->wall_before + (bv_now_seconds() - r->t0);
    uint64_t seed = r->o->seed;
    double cost = bv_ledger_usd(r->ledger, bv_now_seconds());
    s->epoch = units;
    if (bv_state_add(s, "run/units", &units, sizeof units) != BV_OK ||
        bv_state_add(s, "run/lr", &r->lr_set, sizeof r->lr_set) != BV_OK ||
        bv_state_add(s, "run/seed", &seed, sizeof seed) != BV_OK ||
        bv_state_add(s, "run/wall", &wall, sizeof wall) != BV_OK ||
        bv_state_add(s, "run/train_seconds", &r->train_seconds, sizeof r->train_seconds) !=
            BV_OK ||
        bv_state_add(s, "run/history", r->units.items, r->units.count * sizeof(bv_record)) !=
            BV_OK ||
        bv_state_add(s, "run/evals", r->evals.items, r->evals.count * sizeof(bv_record)) !=
            BV_OK ||
        bv_state_add(s, "run/cost", &cost, sizeof cost) != BV_OK ||
        bv_state_add(s, "run/costs", r->cost, r->ncost * sizeof *r->cost) != BV_OK) {
        bv_state_free(s);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory for the training state");
    }
    return BV_OK;
}

/* Offers the state to every resilience strategy (the checkpoint plugin keeps it). */
static bv_status offer_state(train_run *r, bv_error *err)
{
    if (!r->x->nresilience)
        return BV_OK;
    bv_state s = {0};
    bv_status st = snapshot(r, &s, err);
    for (size_t i = 0; st == BV_OK && i < r->x->nresilience; i++)
        if (r->x->resilience_ops[i].epoch_end)
            st = r->x->resilience_ops[i].epoch_end(r->res[i], &s, err);
    bv_state_free(&s);
    return st;
}

static bv_status read_records(const bv_blob *b, record_list *l, bv_error *err)
{
    size_t n = b->size / sizeof(bv_record);
    bv_status st = BV_OK;
    for (size_t i = 0; st == BV_OK && i < n; i++) {
        bv_record rec;
        memcpy(&rec, (const char *)b->data + i * sizeof rec, sizeof rec);
        st = record_push(l, &rec, err);
    }
    return st;
}

/* Replays the history through the policy in the order it was made: a policy is
 * deterministic (no clock, no random numbers), so this rebuilds its state exactly, and a
 * run its policy stopped stays stopped (with its reason) when resumed. */
static void replay_policy(train_run *r, bool *stop, char *reason, size_t reason_len)
{
    size_t ev = 0;
    bv_policy_set_replay(r->policy, true); /* effectful exports already had their effect */
    for (size_t i = 0; i < r->units.count; i++) {
        *stop = false;
        policy_record(r, r->ops->unit_record, &r->units.items[i], true, stop, reason,
                      reason_len);
        for (; ev < r->evals.count && r->evals.items[ev].v[0] == r->units.items[i].v[0]; ev++)
            policy_record(r, r->ops->eval_record, &r->evals.items[ev], true, stop, reason,
                          reason_len);
    }
    bv_policy_set_replay(r->policy, false);
}

/* Whether a resilience strategy of the run keeps state to resume from. */
static bool keeps_state(const train_run *r)
{
    for (size_t i = 0; i < r->x->nresilience; i++)
        if (r->x->resilience_ops[i].restore)
            return true;
    return false;
}

/* The run from its last checkpoint: a resume (a new process), or in_process after a
 * restart of the engine's nodes, where the history, costs and policy since are dropped
 * (the ledger and the wall clock go on: the lost work was paid for). */
static bv_status restore(train_run *r, bool in_process, bool *stop, char *reason,
                         size_t reason_len, bv_error *err)
{
    bv_state s = {0};
    bv_status st = BV_ERR_IO;
    for (size_t i = 0; i < r->x->nresilience; i++) {
        const bv_resilience_ops *ops = &r->x->resilience_ops[i];
        if (ops->restore && (st = ops->restore(r->res[i], &s, err)) == BV_OK)
            break;
    }
    if (!keeps_state(r))
        return bv_error_set(err, BV_ERR_INVALID, "--resume needs a resilience strategy that "
                            "keeps state, e.g. resilience: [{plugin: checkpoint}]");
    if (st != BV_OK)
        return st;
    int64_t units = 0;
    uint64_t seed = 0;
    double wall_before = 0;
    const bv_blob *hist = bv_state_find(&s, "run/history");
    const bv_blob *evals = bv_state_find(&s, "run/evals");
    if (!bv_state_read(&s, "run/units", &units, sizeof units) ||
        !bv_state_read(&s, "run/lr", &r->lr_set, sizeof r->lr_set) ||
        !bv_state_read(&s, "run/seed", &seed, sizeof seed) ||
        !bv_state_read(&s, "run/wall", &wall_before, sizeof wall_before) ||
        !bv_state_read(&s, "run/train_seconds", &r->train_seconds, sizeof r->train_seconds) ||
        !hist || units < 0 || hist->size != (size_t)units * sizeof(bv_record) || !evals ||
        evals->size % sizeof(bv_record) != 0) {
        bv_state_free(&s);
        return bv_error_set(err, BV_ERR_CORRUPT, "the checkpoint lacks the run's own state");
    }
    if (seed != r->o->seed) {
        bv_state_free(&s);
        return bv_error_set(err, BV_ERR_INVALID, "the checkpoint was made with seed %llu, "
                            "not %llu", (unsigned long long)seed,
                            (unsigned long long)r->o->seed);
    }
    /* what the earlier sessions cost: absent from a checkpoint made before the ledger */
    double cost = 0;
    const bv_blob *costs = bv_state_find(&s, "run/costs");
    if (!in_process && bv_state_read(&s, "run/cost", &cost, sizeof cost))
        bv_ledger_add_before(r->ledger, cost);
    if (!in_process)
        r->wall_before = wall_before;
    r->units.count = r->evals.count = r->ncost = 0;
    size_t known = costs ? costs->size / sizeof(double) : 0;
    for (size_t i = 0; st == BV_OK && i < (size_t)units; i++) { /* NaN: not known */
        double c = NAN;
        if (i < known)
            memcpy(&c, (const char *)costs->data + i * sizeof c, sizeof c);
        st = cost_push(r, c, err);
    }
    if (st == BV_OK)
        st = r->ops->set_state(r->engine, &s, err);
    if (st == BV_OK)
        st = read_records(hist, &r->units, err);
    if (st == BV_OK)
        st = read_records(evals, &r->evals, err);
    bv_state_free(&s);
    if (st != BV_OK)
        return st;
    replay_policy(r, stop, reason, reason_len);
    if (!in_process)
        bv_log(BV_LOG_INFO, "resumed after %s %lld", r->ops->unit, (long long)units);
    return BV_OK;
}

/* The history so far, as engines read it. */
static bv_history history_of(const train_run *r, const char *stop_reason)
{
    double now = bv_now_seconds();
    return (bv_history){
        .units = r->units.items,
        .nunits = r->units.count,
        .evals = r->evals.items,
        .nevals = r->evals.count,
        .final_eval = r->has_final_eval ? &r->final_eval : NULL,
        .train_seconds = r->train_seconds,
        .wall_seconds = r->wall_before + (now - r->t0),
        .session_seconds = now - r->session_start,
        .session_units = r->session_units,
        .stop_reason = stop_reason,
    };
}

static void show_progress(train_run *r, int64_t total)
{
    int64_t done = (int64_t)r->units.count;
    double now = bv_now_seconds();
    if (now - r->last_draw < 0.1 && done < total) /* at most 10 redraws a second */
        return;
    r->last_draw = now;
    bv_history h = history_of(r, NULL);
    char part[256] = "";
    r->ops->progress(r->engine, &h, part, sizeof part);
    double eta = r->session_units > 0 ? h.session_seconds / (double)r->session_units *
                                             (double)(total - done)
                                       : 0;
    fprintf(stderr, "\r\033[K%s %lld/%lld  %s  %.1fs elapsed  ETA %.1fs  $%.4f", r->ops->unit,
            (long long)done, (long long)total, part, h.wall_seconds, eta,
            bv_ledger_usd(r->ledger, now));
    fflush(stderr);
}

static void show_eval(const train_run *r, const bv_record *ev)
{
    const bv_record_kind *k = r->ops->eval_record;
    fprintf(stderr, "\r\033[K%s %lld:", r->ops->unit, (long long)ev->v[0]);
    for (size_t i = 1; i + 1 < k->nfields; i++)
        fprintf(stderr, "%s %s %.4f", i > 1 ? "," : "", k->fields[i], ev->v[i]);
    fputc('\n', stderr);
}

/* A node of the run was lost: every resilience strategy hears of it (their errors are
 * logged: the engine's own error ends the step). */
static void peer_failed(void *loop, const bv_peer_event *peer)
{
    train_run *r = loop;
    for (size_t i = 0; i < r->x->nresilience; i++) {
        bv_error err = {0};
        if (r->res[i] && r->x->resilience_ops[i].peer_failed &&
            r->x->resilience_ops[i].peer_failed(r->res[i], peer, &err) != BV_OK)
            bv_log(BV_LOG_ERROR, "%s: %s", r->x->resilience[i].plugin->name, err.msg);
    }
}

/* An event's line in metrics.jsonl, at unit `at`: {"step": 20, "event": "preempted"; the
 * caller adds its fields, then event_line_end() the time and the line's end. */
static void event_line(train_run *r, int64_t at, const char *event)
{
    fputc('{', r->metrics);
    bv_json_string(r->metrics, r->ops->unit_record->fields[0]);
    fprintf(r->metrics, ": %lld, \"event\": ", (long long)at);
    bv_json_string(r->metrics, event);
}

static void event_line_end(train_run *r)
{
    bv_json_field(r->metrics, "seconds", r->wall_before + (bv_now_seconds() - r->t0));
    fputs("}\n", r->metrics);
    fflush(r->metrics);
}

/* A reconfiguration event of the engine (engine.h): the policy's on_<event> picks one of
 * the choices (the first without a handler, or with one that returns no decision); the
 * decision is logged and written to metrics.jsonl with the event's figures and its time:
 * {"step": 20, "event": "preempted", "decision": "failover", "reason": "...", ...}; an
 * event raised often, only when the decision is not the first. */
static bv_status reconfigure(void *loop, const char *event, const bv_metric *m, size_t n,
                             const char *const *choices, bool often, char *decision,
                             size_t len, bv_error *err)
{
    train_run *r = loop;
    const char *pick = choices[0];
    bv_policy_actions a = {0};
    if (r->policy_active && bv_policy_has_handler(r->policy, event)) {
        bv_error perr = {0};
        bv_status st = bv_policy_decide(r->policy, event, m, n, choices, &a, &pick, &perr);
        if (st != BV_OK) {
            r->policy_active = false;
            if (r->policy_stops_on_error) {
                r->policy_failed = true;
                return bv_error_set(err, st, "policy error: %s", perr.msg);
            }
            bv_log(BV_LOG_WARN, "%s; the run goes on without the policy", perr.msg);
        }
        for (size_t i = 0; i < a.nreports; i++)
            bv_series_report(a.reports[i].name, a.reports[i].unit, a.reports[i].value);
    }
    snprintf(decision, len, "%s", pick);
    if (strcmp(pick, "restart") == 0)
        r->restart_due = true;
    if (often && pick == choices[0])
        return BV_OK;
    bv_log(BV_LOG_INFO, "policy: %s: %s%s%s%s", event, pick, a.reason[0] ? " (" : "",
           a.reason, a.reason[0] ? ")" : "");
    if (r->metrics) {
        event_line(r, (int64_t)r->units.count, event);
        fputs(", \"decision\": ", r->metrics);
        bv_json_string(r->metrics, pick);
        if (a.reason[0]) {
            fputs(", \"reason\": ", r->metrics);
            bv_json_string(r->metrics, a.reason);
        }
        for (size_t i = 0; i < n; i++)
            bv_json_field(r->metrics, m[i].name, m[i].value);
        event_line_end(r);
    }
    return BV_OK;
}

/* A pipeline stage's schedule through every resilience strategy's schedule hook. */
static bv_status schedule(void *loop, bv_schedule *s, bv_error *err)
{
    train_run *r = loop;
    bv_status st = BV_OK;
    for (size_t i = 0; st == BV_OK && i < r->x->nresilience; i++)
        if (r->x->resilience_ops[i].schedule)
            st = r->x->resilience_ops[i].schedule(r->res[i], s, err);
    return st;
}

static bv_status setup(train_run *r, void *data, bv_error *err)
{
    const bv_experiment *x = r->x;
    /* the strategies first: the engine may hand them its schedules as it starts */
    char config_dir[4096];
    bv_experiment_dir(x, config_dir, sizeof config_dir);
    bv_run_info info = {r->o->out_dir, config_dir, r->o->seed};
    for (size_t i = 0; i < x->nresilience; i++) {
        r->res[i] = x->resilience_ops[i].create(&x->resilience[i].opts, &info, err);
        if (!r->res[i])
            return err->status ? err->status : BV_ERR_PLUGIN;
    }
    bv_engine_run run = {r->o->out_dir, r->o->seed,
                         r->o->run_dir ? r->o->run_dir : r->o->out_dir, peer_failed,
                         schedule, reconfigure, r};
    bv_status st = r->ops->create(x, data, &run, &r->engine, err);
    if (st != BV_OK)
        return st;
    if (x->has_policy && !x->policy_broken) { /* a broken one was reported at validation */
        r->policy_stops_on_error = strcmp(bv_opts_str(&x->policy, "on_error"), "stop") == 0;
        /* the one validation set up, if handed over; else a fresh one (another seed) */
        st = r->policy ? BV_OK : bv_experiment_load_policy(x, &r->policy, err);
        if (st != BV_OK) {
            if (r->policy_stops_on_error)
                return st;
            bv_log(BV_LOG_WARN, "%s; the run goes on without the policy", err->msg);
            bv_error_clear(err);
        } else {
            r->policy_active = true;
        }
    }
    return BV_OK;
}

/* The engine first: stopping its nodes may still report a lost one to the strategies
 * (peer_failed), which must then exist. */
static void teardown(train_run *r)
{
    if (r->engine)
        r->ops->destroy(r->engine);
    r->engine = NULL;
    for (size_t i = 0; i < r->x->nresilience; i++) {
        if (r->res[i])
            r->x->resilience_ops[i].destroy(r->res[i]);
        r->res[i] = NULL;
    }
    bv_policy_free(r->policy);
    if (r->metrics)
        fclose(r->metrics);
    free(r->units.items);
    free(r->evals.items);
    free(r->cost);
    bv_ledger_free(r->ledger);
}

/* metrics.jsonl from the start: a resumed run rewrites what it had, interleaved as it
 * was written. */
static bv_status open_metrics(train_run *r, bv_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", r->o->out_dir);
    if (!(r->metrics = fopen(path, "w")))
        return bv_error_set(err, BV_ERR_IO, "cannot write %s", path);
    size_t ev = 0;
    for (size_t i = 0; i < r->units.count; i++) {
        write_record(r->metrics, r->ops->unit_record, &r->units.items[i], r->cost[i]);
        for (; ev < r->evals.count && r->evals.items[ev].v[0] == r->units.items[i].v[0]; ev++)
            write_record(r->metrics, r->ops->eval_record, &r->evals.items[ev], NAN);
    }
    return BV_OK;
}

/* An evaluation after `done` units: recorded, shown, offered to the policy. */
static bv_status evaluate(train_run *r, int64_t done, bool final, bool *stop, char *reason,
                          size_t reason_len, bv_error *err)
{
    const bv_record_kind *kind = r->ops->eval_record;
    bv_record ev = {{0}};
    bv_status st = r->ops->evaluate(r->engine, done, final, &ev, err);
    if (st != BV_OK)
        return st;
    *seconds_of(kind, &ev) = r->wall_before + (bv_now_seconds() - r->t0);
    write_record(r->metrics, kind, &ev, NAN);
    if (final) {
        r->final_eval = ev;
        r->has_final_eval = true;
        return BV_OK;
    }
    if ((st = record_push(&r->evals, &ev, err)) != BV_OK)
        return st;
    if (r->o->progress)
        show_eval(r, &ev);
    policy_record(r, kind, &ev, false, stop, reason, reason_len);
    write_series(r->metrics, kind, &ev);
    return BV_OK;
}

/* result.json's cost: the total, its breakdown, the value 1/(T C) with T the run's wall
 * seconds (Dorylus section 7), and for engines that count tokens, tokens per dollar. */
static void cost_result(train_run *r, bv_run_result *res)
{
    double now = bv_now_seconds();
    res->cost_usd = bv_ledger_usd(r->ledger, now);
    FILE *f = fmemopen(res->cost_json, sizeof res->cost_json, "w");
    if (f) {
        bv_ledger_write_breakdown(f, r->ledger, now);
        if (fclose(f) != 0)
            res->cost_json[0] = '\0';
    }
    for (size_t i = 0; i < res->nfields; i++)
        if (strcmp(res->fields[i].name, "tokens_per_second") == 0 && res->cost_usd > 0)
            bv_result_add(res, "tokens_per_usd",
                          res->fields[i].value * r->train_seconds / res->cost_usd, false,
                          BV_RESULT_MEAN);
}

/* Unit `unit` (0-based) of total: trained, recorded, shown, put to the policy and the
 * budget, then evaluated where one is due, and its state offered to the strategies. */
static bv_status train_unit(train_run *r, int64_t unit, int64_t total, double budget,
                            bool *stop, char *reason, size_t reason_len, bv_error *err)
{
    const bv_engine_ops *ops = r->ops;
    const bv_record_kind *kind = ops->unit_record;
    double lr = isnan(r->lr_set) ? ops->lr(r->engine, unit) : r->lr_set;
    bv_record rec = {{0}};
    double ts = bv_now_seconds();
    bv_status st = ops->train(r->engine, unit, lr, &rec, err);
    if (st != BV_OK)
        return st;
    double te = bv_now_seconds();
    r->train_seconds += te - ts;
    *seconds_of(kind, &rec) = r->wall_before + (te - r->t0);
    if ((st = record_push(&r->units, &rec, err)) != BV_OK)
        return st;
    r->session_units++;
    double cost = bv_ledger_usd(r->ledger, te);
    if ((st = cost_push(r, cost, err)) != BV_OK)
        return st;
    int nodes_ever, running = bv_ledger_running(r->ledger, te, &nodes_ever);
    if (nodes_ever) /* a run on a cloud: its size over time, as Bamboo's Figure 11 */
        bv_series_report("instances", NULL, running);
    write_record(r->metrics, kind, &rec, cost);
    if (r->o->progress)
        show_progress(r, total);
    policy_tick(r, kind, &rec, stop, reason, reason_len);
    policy_record(r, kind, &rec, false, stop, reason, reason_len);
    if (budget > 0 && cost >= budget && !*stop) {
        *stop = true;
        snprintf(reason, reason_len, "reached the budget of $%g (cost $%.4f)", budget, cost);
    }
    write_series(r->metrics, kind, &rec);
    if (ops->eval_record && ops->eval_due(r->engine, unit + 1)) {
        st = evaluate(r, unit + 1, false, stop, reason, reason_len, err);
        if (st == BV_OK)
            st = offer_state(r, err);
    } else if (!ops->eval_record) {
        st = offer_state(r, err);
    }
    if (r->o->kill_after && unit + 1 == r->o->kill_after)
        raise(SIGKILL); /* fault injection for the kill-and-resume tests */
    return st;
}

/* After a failure for which a reconfiguration event's decision was `restart` (err): the
 * engine's nodes ended and started again, and the run from its last checkpoint (from the
 * start where none was made yet), in this process, with a fresh policy that replays the
 * history to there, as a resume would. Where the engine or the run cannot (no strategy
 * keeps state, no restart left), err says so and the run ends. */
static bv_status restart_run(train_run *r, bool *stop, char *reason, size_t reason_len,
                             bv_error *err)
{
    r->restart_due = false;
    bv_error loss = *err, why = {0};
    if (!keeps_state(r))
        return bv_error_set(err, loss.status, "%.600s (no restart: no resilience strategy "
                            "keeps state, e.g. resilience: [{plugin: checkpoint}])", loss.msg);
    int64_t lost = (int64_t)r->units.count;
    bv_status st = r->ops->restart(r->engine, &why);
    if (st != BV_OK && why.status == BV_ERR_STOPPED) /* it restarts no more */
        return bv_error_set(err, loss.status, "%.600s (no restart in the process: %.200s; "
                            "bivouac run --resume goes on)", loss.msg, why.msg);
    bv_log(BV_LOG_WARN, "%s", loss.msg);
    if (st != BV_OK)
        return bv_error_set(err, st, "restart: %s", why.msg);
    r->restarts++;
    bv_error_clear(err);
    if (r->policy_active) { /* a fresh one, as a resume's, replayed by restore() */
        bv_policy_free(r->policy);
        r->policy = NULL;
        if ((st = bv_experiment_load_policy(r->x, &r->policy, err)) != BV_OK)
            return st;
    }
    st = restore(r, true, stop, reason, reason_len, &why);
    if (st == BV_ERR_IO) { /* no checkpoint yet: from the start, initialised afresh */
        r->units.count = r->evals.count = r->ncost = 0;
        r->lr_set = NAN;
        r->train_seconds = 0;
        st = BV_OK;
    } else if (st != BV_OK) {
        return bv_error_set(err, st, "restart: %s", why.msg);
    }
    int64_t from = (int64_t)r->units.count;
    char where[96], again[96] = "none lost";
    if (from)
        snprintf(where, sizeof where, "the checkpoint of %s %lld", r->ops->unit,
                 (long long)from);
    else
        snprintf(where, sizeof where, "the start, as no checkpoint was made yet");
    if (lost > from)
        snprintf(again, sizeof again, "%ss %lld to %lld run again", r->ops->unit,
                 (long long)from + 1, (long long)lost);
    bv_log(BV_LOG_INFO, "restart %d: the run goes on from %s (%s)", r->restarts, where, again);
    if (r->metrics) {
        event_line(r, from, "restarted");
        bv_json_field(r->metrics, "restarts", r->restarts);
        bv_json_field(r->metrics, "lost", (double)(lost - from));
        event_line_end(r);
    }
    return BV_OK;
}

bv_status bv_train(const bv_experiment *x, void *data, const bv_train_options *o,
                   bv_run_result *res, bv_error *err)
{
    memset(res, 0, sizeof *res);
    train_run r = {.x = x, .ops = x->engine_ops, .o = o, .policy = o->policy, .lr_set = NAN};
    r.t0 = bv_now_seconds();
    const bv_engine_ops *ops = r.ops;
    int64_t total = bv_opts_int(&x->train, ops->train_units_option);
    char *reason = res->stop_reason;
    size_t reason_len = sizeof res->stop_reason;
    snprintf(reason, reason_len, "reached %lld %ss", (long long)total, ops->unit);
    bool stop = false;
    bv_series_reset(); /* nothing another seed's roles reported late */
    /* the bill opens before the engine starts, which may start nodes; an experiment
     * without `cost:` is priced by the shipped default table, read now */
    bv_price_table defaults;
    const bv_price_table *prices = &x->prices;
    if (!prices->ninstances) {
        if (bv_prices_load(bv_opts_str(&x->cost, "prices"), NULL, &defaults, err) != BV_OK)
            return err->status;
        prices = &defaults;
    }
    if (!(r.ledger = bv_ledger_new(prices, bv_opts_str(&x->cost, "instance"),
                                   bv_opts_bool(&x->cost, "spot"))))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    bv_ledger_set_current(r.ledger);
    r.self = bv_ledger_start(r.ledger, NULL, -1, r.t0);
    double budget = bv_opts_float(&x->budget, "usd");
    bv_status st = setup(&r, data, err);
    if (st == BV_OK)
        st = o->resume ? restore(&r, false, &stop, reason, reason_len, err)
                        : ops->init(r.engine, err);
    if (st == BV_OK)
        st = open_metrics(&r, err);
    r.session_start = bv_now_seconds();
    /* a run restarted in the process goes on from its last checkpoint (one that failed
     * as it started ends: nothing was trained yet, and whatever failed would again) */
    for (bool started = st == BV_OK;;) {
        for (int64_t unit = (int64_t)r.units.count; st == BV_OK && !stop && unit < total; unit++)
            st = train_unit(&r, unit, total, budget, &stop, reason, reason_len, err);
        if (o->progress && r.session_units)
            fputc('\n', stderr);
        /* engines that evaluate periodically end with a larger final estimate */
        if (st == BV_OK && ops->eval_record) {
            st = evaluate(&r, (int64_t)r.units.count, true, &stop, reason, reason_len, err);
            if (st == BV_OK)
                st = offer_state(&r, err);
        }
        if (st != BV_OK && !started && r.restart_due && ops->restart) {
            bv_error loss = *err;
            bv_error_set(err, loss.status, "%.700s (as the run started: no restart before "
                         "its first %s)", loss.msg, ops->unit);
        }
        if (st == BV_OK || !started || !r.restart_due || !ops->restart)
            break;
        do /* again where stages were lost as they started again */
            st = restart_run(&r, &stop, reason, reason_len, err);
        while (st != BV_OK && r.restart_due);
        if (st != BV_OK)
            break;
    }
    res->failed = r.policy_failed;
    if (st == BV_OK && r.units.count > 0) {
        bv_history h = history_of(&r, reason);
        res->units = (int64_t)r.units.count;
        res->wall_seconds = h.wall_seconds;
        res->params_crc32c = ops->params_crc32c(r.engine);
        ops->result(r.engine, &h, res);
        /* this process is billed for the wall time the result reports, to the bit */
        bv_ledger_stop_after(r.ledger, r.self, h.wall_seconds - r.wall_before);
        cost_result(&r, res);
    }
    teardown(&r);
    return st;
}
