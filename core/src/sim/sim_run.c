/* One simulated run (docs/simulation.md, "What a run simulates"): D pipelines of P stages
 * on the nodes a `sim` cloud grants, stepping at the workload model's pace while the
 * cloud's clock follows them from event to event.
 *
 *   - The run asks the cloud for D x P spot nodes and asks again for every node it loses,
 *     as an autoscaling group keeps its size. A node that joins waits as a standby.
 *   - Training starts (after a reconfiguration's pause) once P nodes are up, with as many
 *     pipelines as the nodes fill, up to D, or the layout the policy's on_layout sets
 *     (depth, width, lazy FRC); the rest stand by.
 *   - A loss during a step: with `redundancy`, a stage whose shadow (the stage before it,
 *     the last for the first) is up and runs only its own stage fails over, the policy's
 *     `preempted` agreeing: the step pauses failover_seconds and goes on, and the steps
 *     after run slower (degraded_slowdown) while a stage runs on its shadow. Two
 *     consecutive stages lost, a shadow lost, or no `redundancy`: a restart from the last
 *     checkpoint (restart_seconds, and the steps since are lost), or, with `redundancy`
 *     where another pipeline is whole and the policy's `preempted` says `reconfigure`,
 *     the nodes up laid out afresh from it (a reconfiguration's pause, the step run
 *     again), as the pipeline engine does. An uncovered loss during a reconfiguration's
 *     pause is a restart.
 *   - At a step boundary the policy's decisions take effect: `joined` (replace: the
 *     standbys take the stages shadows run, at the end of the pause; grow: the nodes up
 *     laid out afresh) and `degraded` (reconfigure: laid out afresh; restart) are a
 *     reconfiguration, a pause of reconfigure_seconds.
 *   - Where the model has several instance types, the policy's on_layout picks one before
 *     the first request and may move the run to another at any layout: every node is
 *     given back and D x P of the new type asked for, the state kept.
 * Every node is paid for from its joining to its loss, its giving back or the run's end,
 * by the experiment's cost ledger. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "grow.h"
#include "json_out.h"
#include "ledger.h"
#include "sim.h"

/* GONE: given back (the run moved to another instance type) */
typedef enum node_state { WAITING, STANDBY, ACTIVE, LOST, GONE } node_state;

typedef struct sim_node {
    int64_t id; /* the cloud's */
    node_state state;
    int zone;
    int type; /* its instance type, an index of the model's types */
    double joined;
} sim_node;

typedef enum phase { IDLE, STEPPING, PAUSED } phase;

typedef struct sim {
    const bv_experiment *x;
    const bv_sim_model *m;
    const bv_cloud_ops *ops;
    bv_cloud *cloud;
    bv_ledger *ledger;
    bv_policy *policy;
    FILE *metrics;
    bv_sim_result *r;
    sim_node *nodes;
    size_t count, cap;
    int *host;   /* host[d * P + s]: the node that runs stage s of pipeline d */
    bool *on_shadow; /* [d * P + s]: that node is the stage's shadow's (a failover) */
    int d, p;    /* pipelines running, their stages */
    bool lazy;   /* under lazy FRC (a policy's choice, the lflb figures) */
    int type;    /* the instance type the run asks for (a policy's choice; 0: cost.instance) */
    double type_since, type_samples, type_usd; /* when the run first trained on it (-1:
                                                  not yet); its samples and cost then */
    int nodes_asked; /* D x P of the experiment: the cluster the run keeps asking for */
    int asked;   /* zone of the next request */
    double now, phase_end, step_start, last_preemption, paid_since, node_seconds;
    phase phase;
    bool pause_holds_state; /* a reconfiguration's pause: the state is on the nodes (a
                               restart's or the start's comes from a checkpoint) */
    double steps, samples, kept_steps, kept_samples, kept_useful, useful;
    double degraded_since;
    int64_t steps_degraded;
    bool replace, grow, relayout;
    int lambdas;      /* a graph run's functions per graph server */
    double lambda_gb; /* a function's memory, GB (what it is billed for) */
    int paid;   /* nodes paid for now */
    int joined; /* nodes that ever joined */
} sim;

static const char *const preempted_choices[] = {"failover", "restart", NULL};
/* an uncovered loss where another pipeline is whole (the real run's choices too) */
static const char *const uncovered_choices[] = {"restart", "reconfigure", NULL};
static const char *const joined_choices[] = {"replace", "wait", "grow", NULL};
static const char *const degraded_choices[] = {"continue", "restart", "reconfigure", NULL};

static int stages(const sim *s)
{
    return s->p;
}

/* Stages that run on their shadow's node (since a failover). */
static int degraded(const sim *s)
{
    int k = 0;
    for (int i = 0; i < s->d * s->p; i++)
        k += s->on_shadow[i];
    return k;
}

static int count_state(const sim *s, node_state st)
{
    int k = 0;
    for (size_t i = 0; i < s->count; i++)
        k += s->nodes[i].state == st;
    return k;
}

static void pay(sim *s, int delta)
{
    s->node_seconds += s->paid * (s->now - s->paid_since);
    s->paid_since = s->now;
    s->paid += delta;
}

static bv_status request(sim *s, bv_error *err)
{
    if (!bv_grow((void **)&s->nodes, &s->cap, s->count, sizeof *s->nodes, 128))
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    char zone[16];
    int z = s->asked++ % s->m->zones;
    snprintf(zone, sizeof zone, "%d", z);
    bv_node_request req = {.size = sizeof req, .role = "stage",
                           .node_type = s->m->types[s->type].name,
                           .spot = bv_opts_bool(&s->x->cost, "spot"), .zone = zone};
    int64_t id = s->ops->launch(s->cloud, &req, NULL, 0, err);
    if (id < 0)
        return err->status ? err->status : BV_ERR_PLUGIN;
    s->nodes[s->count++] = (sim_node){.id = id, .state = WAITING, .zone = z, .type = s->type};
    return BV_OK;
}

static sim_node *find(sim *s, int64_t id)
{
    for (size_t i = 0; i < s->count; i++)
        if (s->nodes[i].id == id)
            return &s->nodes[i];
    return NULL;
}

/* A policy's error: the run's (policy.on_error: stop), or a warning and the rest of the
 * run without the policy (continue), as in a real run. */
static bv_status policy_failed(sim *s, bv_status st, bv_error *err)
{
    if (strcmp(bv_opts_str(&s->x->policy, "on_error"), "stop") == 0)
        return st;
    bv_log(BV_LOG_WARN, "%s; the simulated run goes on without the policy", err->msg);
    bv_error_clear(err);
    s->policy = NULL;
    return BV_OK;
}

/* The head of a decision's line in metrics.jsonl: the step, the event and the choice; the
 * caller adds its fields, then "seconds" and the line's end. */
static void decision_line(sim *s, const char *event, const char *pick)
{
    fprintf(s->metrics, "{\"step\": %.0f, \"event\": ", s->steps);
    bv_json_string(s->metrics, event);
    fputs(", \"decision\": ", s->metrics);
    bv_json_string(s->metrics, pick);
}

/* A policy decision, written to metrics.jsonl as a real run's are (one of an event raised
 * every step, `often`, only when it is not the first choice). */
static bv_status decide(sim *s, const char *event, const bv_metric *mt, size_t n,
                        const char *const *choices, bool often, const char **pick,
                        bv_error *err)
{
    *pick = choices[0];
    bv_policy_actions a = {0};
    if (s->policy && bv_policy_has_handler(s->policy, event)) {
        bv_status st = bv_policy_decide(s->policy, event, mt, n, choices, &a, pick, err);
        if (st != BV_OK && (st = policy_failed(s, st, err)) != BV_OK)
            return st;
    }
    if (s->metrics && (!often || *pick != choices[0])) {
        decision_line(s, event, *pick);
        if (a.reason[0]) {
            fputs(", \"reason\": ", s->metrics);
            bv_json_string(s->metrics, a.reason);
        }
        for (size_t i = 0; i < n; i++)
            bv_json_field(s->metrics, mt[i].name, mt[i].value);
        bv_json_field(s->metrics, "seconds", s->now);
        fputs("}\n", s->metrics);
    }
    return BV_OK;
}

/* A standby node for stage i (the i-th of the layout): one of its zone where there is
 * one (consecutive stages apart), else any; -1: none stands by. */
static int standby_for(const sim *s, int i)
{
    int zone = (i % stages(s)) % s->m->zones, any = -1;
    for (size_t k = 0; k < s->count; k++)
        if (s->nodes[k].state == STANDBY) {
            if (s->nodes[k].zone == zone)
                return (int)k;
            if (any < 0)
                any = (int)k;
        }
    return any;
}

/* The figures of the layout and the workload model every reconfiguration event carries,
 * so that a policy can weigh another layout (scripts/lua/value.lua), and, where the run
 * may use more than one instance type, the current one's number (from 1), the hours
 * since the run's first step on it and the value it has given since (samples a second
 * per dollar an hour; 0 before then), their count and each one's step and price.
 * Returns how many it wrote. */
#define LAYOUT_FIXED 17
#define LAYOUT_METRICS (LAYOUT_FIXED + 4 + 2 * BV_SIM_MAX_TYPES)
static size_t layout_metrics(const sim *s, int up, bv_metric *mt)
{
    const bv_sim_model *m = s->m;
    bv_metric all[LAYOUT_FIXED] = {
        {"nodes", up}, {"stages", s->p}, {"pipelines", s->d}, {"stages_asked", m->stages},
        {"pipelines_asked", m->pipelines}, {"nodes_asked", s->nodes_asked},
        {"profile_step", m->profile_step},
        {"profile_stages", m->profile_stages}, {"microbatches", m->microbatches},
        {"layers", m->layers},
        {"rc_factor", m->rc_factor}, {"samples_per_step", m->samples_per_step},
        {"allreduce_mb", m->allreduce_mb}, {"bandwidth_gbps", m->bandwidth_gbps},
        {"lazy", s->lazy}, {"lflb_rc_factor", m->lflb_rc_factor},
        {"lflb_failover_seconds", m->lflb_failover_seconds}};
    memcpy(mt, all, sizeof all);
    size_t n = LAYOUT_FIXED;
    if (m->ntypes > 1) {
        double hours = s->type_since < 0 ? 0 : (s->now - s->type_since) / 3600;
        double usd = bv_ledger_usd(s->ledger, s->now) - s->type_usd;
        mt[n++] = (bv_metric){"instance", s->type + 1};
        mt[n++] = (bv_metric){"instance_hours", hours};
        mt[n++] = (bv_metric){"instance_value", usd > 0 && hours > 0
                                                    ? (s->samples - s->type_samples) /
                                                          (hours * 3600) / (usd / hours)
                                                    : 0};
        mt[n++] = (bv_metric){"instance_types", m->ntypes};
        for (int k = 0; k < m->ntypes; k++) {
            mt[n++] = (bv_metric){m->types[k].step_key, m->types[k].step};
            mt[n++] = (bv_metric){m->types[k].usd_key, m->types[k].usd_per_hour};
        }
    }
    return n;
}

static int nodes_up(const sim *s)
{
    return count_state(s, ACTIVE) + count_state(s, STANDBY);
}

/* The run moves to instance type k (a policy's on_layout): its state is checkpointed
 * where it stands, every node of the type it leaves is given back (paid for to now), and
 * it asks for its D x P nodes of the new type, training again once P of them are up. */
static bv_status switch_type(sim *s, int k, bv_error *err)
{
    for (size_t i = 0; i < s->count; i++) {
        sim_node *n = &s->nodes[i];
        if (n->state == LOST || n->state == GONE)
            continue;
        if (n->state == STANDBY || n->state == ACTIVE) {
            s->r->lifetime_hours += (s->now - n->joined) / 3600;
            bv_ledger_stop_node(s->ledger, n->id, s->now);
            pay(s, -1);
        }
        n->state = GONE;
        bv_status st = s->ops->terminate(s->cloud, n->id, err);
        if (st != BV_OK)
            return st;
    }
    if (s->metrics) {
        decision_line(s, "layout", "instance");
        fputs(", \"instance\": ", s->metrics);
        bv_json_string(s->metrics, s->m->types[k].name);
        bv_json_field(s->metrics, "seconds", s->now);
        fputs("}\n", s->metrics);
    }
    s->type = k;
    s->type_since = -1;
    s->r->instance_switches++;
    s->kept_steps = s->steps;
    s->kept_samples = s->samples;
    s->kept_useful = s->useful;
    s->d = 0;
    s->phase = IDLE;
    bv_status st = BV_OK;
    for (int i = 0; st == BV_OK && i < s->nodes_asked; i++)
        st = request(s, err);
    return st;
}

/* The nodes up laid out afresh: the layout the policy's on_layout sets ({set = {stages =
 * P, pipelines = D, lazy = 0|1, instance = K}}, D x P no more than the nodes up; lazy:
 * lazy FRC, where the model has its figures; instance: another of the model's instance
 * types, which the run then moves to), or as many pipelines of the
 * experiment's depth as the nodes fill, up to its D; stage s of each on a node of zone s
 * where one is free (consecutive stages apart), the rest standing by. `before`: the run
 * has no node yet, and only the instance type is taken from on_layout. */
static bv_status layout(sim *s, bool before, bv_error *err)
{
    int up = nodes_up(s), p = s->m->stages, d = -1, type = s->type;
    bool lazy = s->lazy;
    if (s->policy && bv_policy_has_handler(s->policy, "layout")) {
        bv_metric mt[LAYOUT_METRICS];
        size_t nmt = layout_metrics(s, up, mt);
        bv_policy_actions a;
        bv_status st = bv_policy_call(s->policy, "layout", mt, nmt, &a, err);
        for (size_t i = 0; st == BV_OK && i < a.nsets; i++) {
            const char *name = a.sets[i].name;
            double v = a.sets[i].value;
            int k = !strcmp(name, "stages") ? 0 : !strcmp(name, "pipelines") ? 1
                  : !strcmp(name, "lazy") ? 2 : !strcmp(name, "instance") ? 3 : -1;
            double hi = k == 2 ? (s->m->lflb_rc_factor > 0) : k == 3 ? s->m->ntypes
                                                                     : s->nodes_asked;
            if (k < 0 || v != floor(v) || v < (k == 0 || k == 3) || v > hi)
                st = bv_error_set(err, BV_ERR_INVALID, "%s: on_layout sets %s = %g; it sets "
                                  "stages (1 to %d), pipelines (0 to %d), lazy (0%s) and "
                                  "instance (1 to %d, the instance types) only",
                                  bv_policy_path(s->policy), name, v, s->nodes_asked,
                                  s->nodes_asked,
                                  s->m->lflb_rc_factor > 0 ? " or 1" : ": no lflb figures",
                                  s->m->ntypes);
            else if (k == 0)
                p = (int)v;
            else if (k == 1)
                d = (int)v;
            else if (k == 2)
                lazy = v > 0;
            else
                type = (int)v - 1;
        }
        if (st == BV_OK && (a.stop || a.set_lr || a.reconfigure[0]))
            st = bv_error_set(err, BV_ERR_INVALID, "%s: on_layout returns set only",
                              bv_policy_path(s->policy));
        if (st != BV_OK && (st = policy_failed(s, st, err)) != BV_OK)
            return st;
        if (!s->policy) { /* dropped: the default layout */
            p = s->m->stages;
            d = -1;
            lazy = false;
            type = s->type;
        }
    }
    if (before) {
        s->type = type;
        return BV_OK;
    }
    if (type != s->type)
        return switch_type(s, type, err);
    s->lazy = lazy;
    for (size_t i = 0; i < s->count; i++)
        if (s->nodes[i].state == ACTIVE)
            s->nodes[i].state = STANDBY;
    s->p = p;
    if (d < 0 || d > up / p)
        d = d < 0 && up / p > s->m->pipelines ? s->m->pipelines : up / p;
    s->d = d;
    for (int i = 0; i < s->d * p; i++) {
        int pick = standby_for(s, i);
        s->nodes[pick].state = ACTIVE;
        s->host[i] = pick;
        s->on_shadow[i] = false;
    }
    s->replace = s->grow = s->relayout = false;
    return BV_OK;
}

static void start_step(sim *s)
{
    if (s->type_since < 0) { /* the first step on this instance type */
        s->type_since = s->now;
        s->type_samples = s->samples;
        s->type_usd = bv_ledger_usd(s->ledger, s->now);
    }
    s->phase = STEPPING;
    s->step_start = s->now;
    s->phase_end = s->now + bv_sim_step_seconds(s->m, s->type, s->p, s->d, degraded(s) > 0,
                                                s->lazy);
}

/* A pause after which the nodes up are laid out afresh and the steps go on; holds_state:
 * a reconfiguration's, whose state is on the nodes until it ends. */
static void pause_for(sim *s, double seconds, bool holds_state)
{
    s->phase = PAUSED;
    s->phase_end = s->now + seconds;
    s->pause_holds_state = holds_state;
}

static void restart(sim *s)
{
    s->r->fatal++;
    s->steps = s->kept_steps;
    s->samples = s->kept_samples;
    s->useful = s->kept_useful;
    s->relayout = true;
    pause_for(s, s->m->restart_seconds, false);
}

/* `replace`: each stage that runs on its shadow gets a standby node of its own (its zone's
 * where there is one), the layout otherwise kept. */
static void replace(sim *s)
{
    int p = stages(s);
    for (int i = 0; i < s->d * p; i++) {
        int pick = s->on_shadow[i] ? standby_for(s, i) : -1;
        if (pick >= 0) {
            s->nodes[pick].state = ACTIVE;
            s->host[i] = pick;
            s->on_shadow[i] = false;
        }
    }
}

/* Stage i's shadow: the stage before it in its pipeline (the last for the first). */
static int shadow_of(const sim *s, int i)
{
    int p = stages(s);
    return i % p ? i - 1 : i + p - 1;
}

/* Nodes lost at one time: failovers where shadows cover them, else a restart. During a
 * reconfiguration's pause a covered loss needs no failover (the new layout takes the
 * stage's state from its replica), and an uncovered one is as fatal as during a step: a
 * stage on its shadow has no replica until the reconfiguration has ended. */
static bv_status lost(sim *s, bv_error *err)
{
    int p = stages(s), n = s->d * p;
    bool any = false, fatal = false, stepping = s->phase == STEPPING;
    for (int i = 0; i < n; i++)
        any |= s->nodes[s->host[i]].state == LOST;
    if (!any || (s->phase == PAUSED && !s->pause_holds_state))
        return BV_OK; /* the layout after the pause has the nodes up */
    int whole = 0; /* pipelines none of whose stages' nodes is lost */
    for (int d = 0; d < s->d; d++) {
        int k = 0;
        while (k < p && s->nodes[s->host[d * p + k]].state != LOST)
            k++;
        whole += k == p;
    }
    bool relay = false;
    for (int i = 0; i < n && !fatal && !relay; i++) {
        if (s->nodes[s->host[i]].state != LOST)
            continue;
        /* covered: its node ran only it, its shadow's node is up and runs only that */
        int sh = shadow_of(s, i), host = s->host[sh];
        bool alone = true, shadow_alone = true;
        for (int k = i - i % p; k < i - i % p + p; k++) {
            alone &= k == i || s->host[k] != s->host[i];
            shadow_alone &= k == sh || s->host[k] != host;
        }
        int coverable = s->m->redundancy && p > 1 && alone && shadow_alone &&
                        s->nodes[host].state == ACTIVE;
        /* uncovered: laid out afresh from a whole pipeline, where the policy says so */
        int reconfigurable = !coverable && s->m->redundancy && whole > 0 && stepping;
        bv_metric mt[] = {{"stage", i % p}, {"pipeline", i / p}, {"coverable", coverable},
                          {"degraded", degraded(s)},
                          {"offered", count_state(s, STANDBY)},
                          {"reconfigurable", reconfigurable}};
        const char *pick = preempted_choices[0];
        if ((coverable || reconfigurable) && stepping) {
            bv_status st = decide(s, "preempted", mt, 6,
                                  coverable ? preempted_choices : uncovered_choices, false,
                                  &pick, err);
            if (st != BV_OK)
                return st;
        }
        if (reconfigurable && strcmp(pick, "reconfigure") == 0) {
            relay = true;
        } else if (!coverable || strcmp(pick, "restart") == 0) {
            fatal = true;
        } else {
            s->host[i] = host;
            s->on_shadow[i] = true;
            s->r->failovers += stepping;
        }
    }
    if (fatal) {
        restart(s);
    } else if (relay) { /* laid out now (no stage on a lost node), the step again after */
        s->r->reconfigurations++;
        bv_status st = layout(s, false, err);
        if (st != BV_OK || s->phase == IDLE) /* or it moved to another instance type */
            return st;
        pause_for(s, s->m->reconfigure_seconds, true);
    } else if (stepping) {
        s->phase_end += s->lazy ? s->m->lflb_failover_seconds : s->m->failover_seconds;
    }
    return BV_OK;
}

/* The cloud's events at the current time: joins stand by, losses are asked for again;
 * *any_lost: a node that ran something (ACTIVE) is among the lost. */
static bv_status poll_events(sim *s, bool *any_lost, bv_error *err)
{
    *any_lost = false;
    for (;;) {
        bv_cloud_event ev = {.size = sizeof ev, .zone = -1};
        int n = s->ops->poll(s->cloud, &ev, 1, err);
        if (n < 0)
            return err->status ? err->status : BV_ERR_PLUGIN;
        if (n == 0)
            break;
        sim_node *node = find(s, ev.node);
        if (!node)
            continue;
        if (ev.kind == BV_CLOUD_PREEMPTED && node->state != LOST && node->state != GONE) {
            s->r->preemptions++;
            if (s->r->preemptions > 1)
                s->r->interval_hours += (s->now - s->last_preemption) / 3600;
            s->last_preemption = s->now;
            if (node->state == STANDBY || node->state == ACTIVE) {
                s->r->lifetime_hours += (s->now - node->joined) / 3600;
                bv_ledger_stop_node(s->ledger, node->id, s->now);
                pay(s, -1);
            }
            *any_lost |= node->state == ACTIVE;
            node->state = LOST;
            bv_status st = request(s, err);
            if (st != BV_OK)
                return st;
        } else if (ev.kind == BV_CLOUD_JOINED && node->state == WAITING) {
            node->state = STANDBY;
            node->joined = s->now;
            s->joined++;
            if (ev.zone >= 0) /* where the cloud put it, which may not be where it was asked */
                node->zone = ev.zone % s->m->zones;
            bv_ledger_start(s->ledger, s->m->types[node->type].name, node->id, s->now);
            pay(s, 1);
        }
    }
    return BV_OK;
}

/* The cloud's events at the current time, for a pipeline run. */
static bv_status cloud_events(sim *s, bv_error *err)
{
    bool any_lost;
    bv_status st = poll_events(s, &any_lost, err);
    if (st == BV_OK && any_lost)
        st = lost(s, err);
    if (st != BV_OK)
        return st;
    int standby = count_state(s, STANDBY), p = stages(s);
    if (s->phase == IDLE && standby >= p) {
        pause_for(s, s->m->reconfigure_seconds, false);
        s->relayout = true;
    } else if (s->phase == STEPPING && standby > 0) {
        /* without a policy's layout, no more than the experiment's D */
        int deg = degraded(s), possible = (s->d * p - deg + standby) / p;
        if (possible > s->m->pipelines &&
            !(s->policy && bv_policy_has_handler(s->policy, "layout")))
            possible = s->m->pipelines;
        if (deg > 0 || possible > s->d) {
            bv_metric mt[4 + LAYOUT_METRICS] = {
                {"offered", standby}, {"degraded", deg}, {"pipelines_possible", possible},
                {"reconfigurable", 1}};
            size_t n = 4 + layout_metrics(s, nodes_up(s), mt + 4);
            const char *pick;
            st = decide(s, "joined", mt, n, joined_choices, false, &pick, err);
            s->replace |= st == BV_OK && strcmp(pick, "replace") == 0;
            s->grow |= st == BV_OK && strcmp(pick, "grow") == 0;
        }
    }
    return st;
}

static void write_step(sim *s, double dt)
{
    if (!s->metrics)
        return;
    fprintf(s->metrics, "{\"step\": %.0f", s->steps);
    bv_json_field(s->metrics, "samples_per_second", s->d * s->m->samples_per_step / dt);
    bv_json_field(s->metrics, "seconds", s->now);
    bv_json_field(s->metrics, "cost_usd", bv_ledger_usd(s->ledger, s->now));
    bv_json_field(s->metrics, "instances", s->paid);
    fputs("}\n", s->metrics);
    fprintf(s->metrics, "{\"step\": %.0f, \"series\": \"pipelines\", \"unit\": \"pipelines\", "
            "\"value\": %d", s->steps, s->d);
    bv_json_field(s->metrics, "seconds", s->now);
    fprintf(s->metrics, "}\n{\"step\": %.0f, \"series\": \"stages_degraded\", \"unit\": "
            "\"stages\", \"value\": %d", s->steps, degraded(s));
    bv_json_field(s->metrics, "seconds", s->now);
    fputs("}\n", s->metrics);
}

/* After a step (an epoch) is counted: a checkpoint every checkpoint_steps; whether the
 * run has trained on all its samples (then it has ended). */
static bool counted(sim *s)
{
    if (fmod(s->steps, (double)s->m->checkpoint_steps) == 0) {
        s->kept_steps = s->steps;
        s->kept_samples = s->samples;
        s->kept_useful = s->useful;
    }
    if (s->samples < s->m->samples)
        return false;
    s->phase = IDLE;
    s->r->finished = true;
    return true;
}

/* A step ended: its samples count, a checkpoint every checkpoint_steps, then the
 * policy's reconfigurations take effect, or the next step starts. */
static bv_status step_done(sim *s, bv_error *err)
{
    double dt = s->now - s->step_start;
    s->steps++;
    s->samples += s->d * s->m->samples_per_step;
    s->useful += dt;
    write_step(s, dt);
    if (counted(s))
        return BV_OK;
    int deg = degraded(s);
    if (deg == 0) {
        s->steps_degraded = 0;
        s->degraded_since = s->now;
    } else {
        s->steps_degraded++;
        bv_metric mt[6 + LAYOUT_METRICS] = {
            {"degraded", deg}, {"steps_degraded", (double)s->steps_degraded},
            {"seconds_degraded", s->now - s->degraded_since},
            {"offered", count_state(s, STANDBY)}, {"stages_active", s->d * stages(s) - deg},
            {"reconfigurable", 1}};
        size_t n = 6 + layout_metrics(s, nodes_up(s), mt + 6);
        const char *pick;
        bv_status st = decide(s, "degraded", mt, n, degraded_choices, true, &pick, err);
        if (st != BV_OK)
            return st;
        if (strcmp(pick, "restart") == 0) {
            restart(s);
            return BV_OK;
        }
        s->relayout |= strcmp(pick, "reconfigure") == 0;
    }
    s->replace &= degraded(s) > 0 && count_state(s, STANDBY) > 0;
    if (s->replace || s->grow || s->relayout) {
        s->r->reconfigurations++;
        s->relayout |= s->grow;
        pause_for(s, s->m->reconfigure_seconds, true);
        return BV_OK;
    }
    start_step(s);
    return BV_OK;
}

/* After a pause: the nodes up laid out afresh where the pause was for that (a start, a
 * restart, grow, reconfigure), or the stages on shadows given the nodes standing by (a
 * replacement: the state moved to them during the pause), then the steps. */
static bv_status pause_done(sim *s, bv_error *err)
{
    bv_status st = s->relayout ? layout(s, false, err) : BV_OK;
    if (st != BV_OK || s->phase == IDLE) /* or it moved to another instance type */
        return st;
    if (!s->relayout && s->replace)
        replace(s);
    s->replace = false;
    if (s->d > 0) {
        s->steps_degraded = 0;
        s->degraded_since = s->now;
        start_step(s);
    } else {
        s->phase = IDLE;
    }
    return BV_OK;
}

/* ---- graph runs (Dorylus): servers, and tensor tasks on functions ----
 * The run asks for its G graph servers, P parameter servers and coordinator, and trains
 * once all are up (after a start's pause): epochs of graph_seconds of graph work and
 * tensor_stages stages of tasks, one per interval, in waves over the L functions of each
 * graph server (bv_sim_epoch_seconds). Each epoch's invocations are billed at its end, for
 * their time rounded up to the price table's billing unit, at the functions' memory. A
 * lost server is a restart from the last checkpoint (the graph engine keeps no
 * replicas), once all are up again. The policy's on_layout sets L ({set = {lambdas = L}})
 * at every start. */

#define GRAPH_METRICS 16
static void graph_metrics(const sim *s, bv_metric *mt)
{
    const bv_sim_model *m = s->m;
    const bv_instance_price *price = bv_prices_find(&s->x->prices,
                                                    bv_opts_str(&s->x->cost, "instance"));
    bool spot = bv_opts_bool(&s->x->cost, "spot") && price && price->spot > 0;
    bv_metric all[GRAPH_METRICS] = {
        {"graph", 1}, {"lambdas", s->lambdas}, {"intervals", m->intervals},
        {"tensor_stages", m->tensor_stages}, {"graph_seconds", m->graph_seconds},
        {"task_seconds", m->task_seconds}, {"lambda_capacity", m->lambda_capacity},
        {"graph_servers", m->graph_servers}, {"servers", s->nodes_asked},
        {"server_usd_per_hour", price ? (spot ? price->spot : price->on_demand) : 0},
        {"lambda_usd_per_request", s->x->prices.lambda_per_request},
        {"lambda_usd_per_gb_second", s->x->prices.lambda_per_gb_second},
        {"lambda_billing_ms", s->x->prices.lambda_billing_ms},
        {"lambda_memory_gb", s->lambda_gb}, {"epochs", m->epochs},
        {"task_exponential", m->task_exponential}};
    memcpy(mt, all, sizeof all);
}

/* A start (or a restart's end): with every server up, the policy's L, then epochs. */
static bv_status graph_start(sim *s, bv_error *err)
{
    if (nodes_up(s) < s->nodes_asked) {
        s->phase = IDLE;
        return BV_OK;
    }
    for (size_t i = 0; i < s->count; i++)
        if (s->nodes[i].state == STANDBY)
            s->nodes[i].state = ACTIVE;
    if (s->policy && bv_policy_has_handler(s->policy, "layout")) {
        bv_metric mt[GRAPH_METRICS];
        graph_metrics(s, mt);
        bv_policy_actions a;
        bv_status st = bv_policy_call(s->policy, "layout", mt, GRAPH_METRICS, &a, err);
        for (size_t i = 0; st == BV_OK && i < a.nsets; i++) {
            double v = a.sets[i].value;
            if (strcmp(a.sets[i].name, "lambdas") != 0 || v != floor(v) || v < 1 || v > 1e6)
                st = bv_error_set(err, BV_ERR_INVALID, "%s: on_layout sets %s = %g; in a "
                                  "graph run it sets lambdas (1 to 1000000) only",
                                  bv_policy_path(s->policy), a.sets[i].name, v);
            else
                s->lambdas = (int)v;
        }
        if (st == BV_OK && (a.stop || a.set_lr || a.reconfigure[0]))
            st = bv_error_set(err, BV_ERR_INVALID, "%s: on_layout returns set only",
                              bv_policy_path(s->policy));
        if (st != BV_OK && (st = policy_failed(s, st, err)) != BV_OK)
            return st;
        if (!s->policy)
            s->lambdas = s->m->lambdas;
    }
    s->phase = STEPPING;
    s->step_start = s->now;
    s->phase_end = s->now + bv_sim_epoch_seconds(s->m, s->lambdas, NULL);
    return BV_OK;
}

static bv_status graph_events(sim *s, bv_error *err)
{
    bool any_lost;
    bv_status st = poll_events(s, &any_lost, err);
    if (st != BV_OK)
        return st;
    if (any_lost && (s->phase == STEPPING || s->phase == PAUSED)) {
        for (size_t i = 0; i < s->count; i++) /* the survivors wait for the restart */
            if (s->nodes[i].state == ACTIVE)
                s->nodes[i].state = STANDBY;
        restart(s);
    } else if (s->phase == IDLE && nodes_up(s) == s->nodes_asked) {
        pause_for(s, s->m->reconfigure_seconds, false);
    }
    return BV_OK;
}

/* An epoch ended: its invocations are billed, a checkpoint every checkpoint_steps. */
static bv_status epoch_done(sim *s, bv_error *err)
{
    (void)err;
    double task, dt = s->now - s->step_start;
    bv_sim_epoch_seconds(s->m, s->lambdas, &task);
    double billed = bv_sim_billed_seconds(s->m, task, s->x->prices.lambda_billing_ms / 1000);
    double invocations = (double)s->m->graph_servers * s->m->tensor_stages * s->m->intervals;
    bv_ledger_charge_functions(s->ledger, invocations, invocations * billed * s->lambda_gb);
    s->steps++;
    s->samples++;
    s->useful += dt;
    if (s->metrics) {
        fprintf(s->metrics, "{\"epoch\": %.0f", s->steps);
        bv_json_field(s->metrics, "seconds", s->now);
        bv_json_field(s->metrics, "cost_usd", bv_ledger_usd(s->ledger, s->now));
        bv_json_field(s->metrics, "instances", s->paid);
        fprintf(s->metrics, "}\n{\"epoch\": %.0f, \"series\": \"lambdas\", \"unit\": "
                "\"functions\", \"value\": %d", s->steps, s->lambdas);
        bv_json_field(s->metrics, "seconds", s->now);
        fputs("}\n", s->metrics);
    }
    if (counted(s))
        return BV_OK;
    s->step_start = s->now;
    s->phase_end = s->now + bv_sim_epoch_seconds(s->m, s->lambdas, NULL);
    return BV_OK;
}

static bv_status simulate(sim *s, bv_error *err)
{
    double end = s->m->hours * 3600;
    bv_status st = BV_OK;
    if (!s->m->graph && s->m->ntypes > 1) /* the instance type, before asking for nodes */
        st = layout(s, true, err);
    for (int i = 0; st == BV_OK && i < s->nodes_asked; i++)
        st = request(s, err);
    while (st == BV_OK && !s->r->finished) {
        double mine = s->phase == IDLE ? INFINITY : s->phase_end;
        double theirs = s->ops->next_event(s->cloud);
        double t = fmin(fmin(mine, theirs), end);
        if (t >= end && !(mine <= end) && !(theirs <= end)) {
            s->now = end;
            break;
        }
        st = s->ops->advance(s->cloud, t, err);
        s->now = t;
        if (st == BV_OK && theirs <= mine)
            st = s->m->graph ? graph_events(s, err) : cloud_events(s, err);
        else if (st == BV_OK && s->phase == STEPPING)
            st = s->m->graph ? epoch_done(s, err) : step_done(s, err);
        else if (st == BV_OK && s->phase == PAUSED)
            st = s->m->graph ? graph_start(s, err) : pause_done(s, err);
    }
    return st;
}

bv_status bv_sim_run(const bv_experiment *x, const bv_sim_model *m, uint64_t seed,
                     bv_policy *policy, FILE *metrics, bv_sim_result *out, bv_error *err)
{
    memset(out, 0, sizeof *out);
    sim s = {.x = x, .m = m, .ops = &x->cloud_ops, .policy = policy, .metrics = metrics,
             .r = out, .p = m->stages, .nodes_asked = m->pipelines * m->stages,
             .lambdas = m->lambdas, .type_since = -1};
    if (m->graph) {
        s.p = 1;
        s.nodes_asked = m->graph_servers + m->param_servers + 1;
    }
    char dir[4096];
    bv_experiment_dir(x, dir, sizeof dir);
    bv_run_info info = {NULL, dir, seed};
    s.host = calloc((size_t)s.nodes_asked, sizeof *s.host);
    s.on_shadow = calloc((size_t)s.nodes_asked, sizeof *s.on_shadow);
    s.ledger = bv_ledger_new(&x->prices, bv_opts_str(&x->cost, "instance"),
                             bv_opts_bool(&x->cost, "spot"));
    if (!s.host || !s.on_shadow || !s.ledger) {
        free(s.host);
        free(s.on_shadow);
        bv_ledger_free(s.ledger);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    s.cloud = x->cloud_ops.create(&x->cloud.opts, &info, err);
    bv_function_limits fn = {.size = sizeof fn};
    if (s.cloud && x->cloud_ops.function_limits &&
        x->cloud_ops.function_limits(s.cloud, &fn, err) == BV_OK)
        s.lambda_gb = (fn.memory_mb > 0 ? fn.memory_mb : x->prices.lambda_memory_mb) / 1024;
    bv_status st = s.cloud ? simulate(&s, err) : (err->status ? err->status : BV_ERR_PLUGIN);
    if (st == BV_OK) {
        pay(&s, 0);
        double seconds = s.now > 0 ? s.now : 1e-9;
        for (size_t i = 0; i < s.count; i++)
            if (s.nodes[i].state == STANDBY || s.nodes[i].state == ACTIVE)
                out->lifetime_hours += (s.now - s.nodes[i].joined) / 3600;
        out->lifetime_hours = s.joined ? out->lifetime_hours / s.joined : 0;
        out->interval_hours = out->preemptions > 1 ? out->interval_hours / (out->preemptions - 1)
                                                   : 0;
        out->hours = s.now / 3600;
        out->steps = s.steps;
        out->samples = s.samples;
        out->nodes = s.node_seconds / seconds;
        out->throughput = s.samples / seconds;
        out->usd = bv_ledger_usd(s.ledger, s.now);
        out->cost_per_hour = out->usd / (seconds / 3600);
        out->value = out->cost_per_hour > 0 ? out->throughput / out->cost_per_hour : 0;
        out->useful_fraction = s.useful / seconds;
    }
    if (s.cloud)
        x->cloud_ops.destroy(s.cloud);
    bv_ledger_free(s.ledger);
    free(s.host);
    free(s.on_shadow);
    free(s.nodes);
    return st;
}
