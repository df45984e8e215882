/* The workload model of `bivouac simulate` (docs/simulation.md, "The workload model"):
 * what a step costs at the layout the simulation runs, from a profile of a real run or the
 * experiment's `simulate:` section, scaled by a written-down model of a 1F1B pipeline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "input_file.h"
#include "json_read.h"
#include "ledger.h"
#include "sim.h"
#include "sorted.h"

/* A profile's DIR/result.json, parsed into r (path: its name); *max: the size limit of
 * the profile's files (BIVOUAC_MAX_PROFILE_BYTES). */
static bool read_result(const char *dir, char *path, size_t len, uint64_t *max, bv_json *r,
                        bv_error *err)
{
    char *text = NULL;
    size_t n = 0;
    snprintf(path, len, "%s/result.json", dir);
    if (bv_input_limit("BIVOUAC_MAX_PROFILE_BYTES", (uint64_t)1 << 30, max, err) != BV_OK ||
        bv_input_read(path, *max, "a profile", "BIVOUAC_MAX_PROFILE_BYTES", &text, &n,
                      err) != BV_OK)
        return false;
    bool ok = bv_json_parse(text, n, r);
    free(text);
    if (!ok)
        bv_error_set(err, BV_ERR_INVALID, "%s: not JSON", path);
    return ok;
}

/* The next line of metrics.jsonl's text [*at, end) that parses as JSON, into j (freed by
 * the caller); false at the end. */
static bool next_record(char **at, const char *end, bv_json *j)
{
    while (*at < end) {
        char *line = *at, *next = memchr(line, '\n', (size_t)(end - line));
        if (!next)
            next = (char *)end;
        *at = next + 1;
        if (next != line && bv_json_parse(line, (size_t)(next - line), j))
            return true;
    }
    return false;
}

static bool read_profile(const char *dir, bv_sim_profile *p, bv_error *err)
{
    char path[4200];
    char *text = NULL;
    size_t len = 0;
    bv_json r;
    uint64_t max = 0;
    if (!read_result(dir, path, sizeof path, &max, &r, err))
        return false;
    double failovers = bv_json_num(&r, "failovers"), stages = bv_json_num(&r, "pipeline_stages"),
           pipelines = bv_json_num(&r, "pipelines"), batch = bv_json_num(&r, "batch");
    p->failover = failovers > 0 ? bv_json_num(&r, "failover_seconds") / failovers : NAN;
    double restarts = bv_json_num(&r, "restarts");
    p->restart = restarts > 0 ? bv_json_num(&r, "restart_seconds") / restarts : NAN;
    double relayouts = bv_json_num(&r, "reconfigurations");
    p->reconfigure = relayouts > 0 ? bv_json_num(&r, "reconfigure_seconds") / relayouts : NAN;
    bv_json_free(&r);
    if (!(stages >= 1) || !(pipelines >= 1) || !(batch >= 1)) {
        bv_error_set(err, BV_ERR_INVALID, "%s: not a pipeline run's result (no "
                     "pipeline_stages, pipelines or batch)", path);
        return false;
    }
    p->stages = (int)stages;
    p->pipelines = (int)pipelines;
    p->samples_per_step = batch / pipelines;

    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bv_input_read(path, max, "a profile", "BIVOUAC_MAX_PROFILE_BYTES", &text, &len,
                      err) != BV_OK)
        return false;
    size_t n = 0, ncap = 0, nd = 0, dcap = 0;
    double *normal = NULL, *slow = NULL;
    double last = 0, degraded = 0;
    bool ok = true;
    bv_json j;
    for (char *at = text; ok && next_record(&at, text + len, &j);) {
        const char *series = bv_json_str(&j, "series");
        double t = bv_json_num(&j, "seconds");
        if (series && strcmp(series, "stages_degraded") == 0)
            degraded = bv_json_num(&j, "value");
        else if (!series && !bv_json_get(&j, "event") && isfinite(bv_json_num(&j, "train_loss")) &&
                 isfinite(t)) {
            double dt = t - last;
            last = t;
            /* the degraded count a step reports comes after its own line: this step's
             * state is the one the step before left */
            if (degraded > 0 && (ok = bv_grow((void **)&slow, &dcap, nd, sizeof *slow, 256)))
                slow[nd++] = dt;
            else if (!(degraded > 0) &&
                     (ok = bv_grow((void **)&normal, &ncap, n, sizeof *normal, 1024)))
                normal[n++] = dt;
        }
        bv_json_free(&j);
    }
    free(text);
    if (!ok)
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    p->step = bv_median(normal, n);
    p->degraded = bv_median(slow, nd);
    free(normal);
    free(slow);
    if (ok && !(p->step > 0)) {
        bv_error_set(err, BV_ERR_INVALID, "%s: no training steps", path);
        return false;
    }
    return ok;
}

/* A graph run on functions, from its directory (graph_profile): result.json's graph servers
 * and intervals; metrics.jsonl's epochs (the median time between two, the first, which
 * holds the start, left out), and per epoch the invocations made once (lambda_invocations
 * less lambda_relaunches), the mean task time (lambda_task_ms) and the functions a
 * server kept (lambdas), their medians. */
typedef struct graph_profile {
    double epoch, task, lambdas, calls;
    int graph_servers, intervals;
} graph_profile;

/* The medians of metrics.jsonl's training epochs' spacing and of four of its series. */
enum { GP_EPOCH, GP_CALLS, GP_RELAUNCHED, GP_TASK_MS, GP_LAMBDAS, GP_N };

static bool read_graph_profile(const char *dir, graph_profile *g, bv_error *err)
{
    static const char *const series[GP_N] = {NULL, "lambda_invocations", "lambda_relaunches",
                                             "lambda_task_ms", "lambdas"};
    char path[4200];
    char *text = NULL;
    size_t len = 0;
    uint64_t max = 0;
    bv_json r;
    bool ok = true;
    if (!read_result(dir, path, sizeof path, &max, &r, err))
        return false;
    double gs = bv_json_num(&r, "graph_servers"), iv = bv_json_num(&r, "intervals"),
           calls = bv_json_num(&r, "lambda_invocations");
    bv_json_free(&r);
    if (!(gs >= 1) || !(iv >= 1) || !(calls > 0)) {
        bv_error_set(err, BV_ERR_INVALID, "%s: not the result of a graph run on functions "
                     "(no graph_servers, intervals or lambda_invocations)", path);
        return false;
    }
    g->graph_servers = (int)gs;
    g->intervals = (int)iv;
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    if (bv_input_read(path, max, "a profile", "BIVOUAC_MAX_PROFILE_BYTES", &text, &len,
                      err) != BV_OK)
        return false;
    double *v[GP_N] = {NULL};
    size_t n[GP_N] = {0}, cap[GP_N] = {0};
    double last = NAN;
    bv_json j;
    for (char *at = text; ok && next_record(&at, text + len, &j);) {
        const char *name = bv_json_str(&j, "series");
        int k = -1;
        double x = NAN;
        if (!name && !bv_json_get(&j, "event") && isfinite(bv_json_num(&j, "train_loss"))) {
            double t = bv_json_num(&j, "seconds");
            if (isfinite(last) && isfinite(t)) {
                k = GP_EPOCH;
                x = t - last;
            }
            last = t;
        }
        for (int i = 1; name && i < GP_N; i++)
            if (strcmp(name, series[i]) == 0) {
                k = i;
                x = bv_json_num(&j, "value");
            }
        if (k >= 0 && isfinite(x) &&
            (ok = bv_grow((void **)&v[k], &cap[k], n[k], sizeof *v[k], 64)))
            v[k][n[k]++] = x;
        bv_json_free(&j);
    }
    free(text);
    if (!ok)
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    double med[GP_N];
    for (int i = 0; i < GP_N; i++) {
        med[i] = n[i] ? bv_median(v[i], n[i]) : NAN;
        free(v[i]);
    }
    if (ok && (!(med[GP_EPOCH] > 0) || !(med[GP_TASK_MS] > 0) || !(med[GP_LAMBDAS] >= 1) ||
               !(med[GP_CALLS] > 0))) {
        bv_error_set(err, BV_ERR_INVALID, "%s: needs two epochs or more, with the series "
                     "lambda_task_ms, lambdas and lambda_invocations", path);
        ok = false;
    }
    g->epoch = med[GP_EPOCH];
    g->task = med[GP_TASK_MS] / 1e3;
    g->lambdas = med[GP_LAMBDAS];
    g->calls = med[GP_CALLS] - (isfinite(med[GP_RELAUNCHED]) ? med[GP_RELAUNCHED] : 0);
    return ok;
}

static const bv_opt_value *user_set(const bv_opts *o, const char *name)
{
    const bv_opt_value *v = bv_opts_find(o, name);
    return v && v->from_user ? v : NULL;
}

/* The modelled all-reduce of one step across d pipelines: a ring's 2 (d - 1) / d of a
 * stage's gradients each way, at the bandwidth between two nodes. */
static double allreduce_seconds(const bv_sim_model *m, int d)
{
    return d > 1 ? 2.0 * (d - 1) / d * m->allreduce_mb * 8e-3 / m->bandwidth_gbps : 0;
}

/* simulate.profile for a graph run: the figures its directory gives where the section
 * sets none, scaled from the profiled run's G0 graph servers and I0 intervals to the
 * experiment's G and I (docs/simulation.md, "Graph runs"): a server's graph work by
 * G0 / G, a task (its rows) by G0 I0 / (G I); its task time is the mean measured at L0
 * functions, taken back to full speed by the capacity (L0 / lambda_capacity beyond it);
 * the tensor stages are the invocations made once per epoch over G0 I0; the graph work
 * is what the epoch leaves: epoch - stages ceil(I0 / L0) task. */
static void graph_from_profile(const bv_experiment *x, bv_sim_model *m, bv_diag *diag)
{
    const bv_opts *s = &x->simulate;
    const char *dir = bv_opts_str(s, "profile");
    if (!dir || !dir[0])
        return;
    graph_profile p;
    bv_error err = {0};
    snprintf(m->profile, sizeof m->profile, "%s", dir);
    if (!read_graph_profile(dir, &p, &err)) {
        bv_diag_add(diag, bv_experiment_value_pos(s, "profile", bv_node_get(x->root, "simulate")),
                    "simulate.profile: %s", err.msg);
        return;
    }
    if (m->intervals < 1) /* engine.intervals left to the engine: the profiled run's */
        m->intervals = p.intervals;
    double slow = m->lambda_capacity > 0 && p.lambdas > m->lambda_capacity
                      ? p.lambdas / m->lambda_capacity : 1;
    double task = p.task / slow;
    int stages = (int)lround(p.calls / ((double)p.intervals * p.graph_servers));
    double graph = fmax(0, p.epoch - stages * ceil(p.intervals / p.lambdas) * p.task);
    double g = (double)p.graph_servers / (m->graph_servers > 0 ? m->graph_servers : 1);
    double rows = g * p.intervals / m->intervals;
    if (!user_set(s, "task_seconds"))
        m->task_seconds = task * rows;
    if (!user_set(s, "tensor_stages"))
        m->tensor_stages = stages;
    if (!user_set(s, "graph_seconds"))
        m->graph_seconds = graph * g;
}

/* A graph run's model: the `simulate:` section's graph figures, the cluster's servers,
 * engine.intervals, the compute plugin's `lambdas`, train.epochs. */
static bv_status graph_model_load(const bv_experiment *x, bv_sim_model *m, bv_diag *diag)
{
    const bv_opts *s = &x->simulate;
    const bv_node *section = bv_node_get(x->root, "simulate");
    const bv_opt_value *lambdas = bv_opts_find(&x->compute.opts, "lambdas");
    *m = (bv_sim_model){
        .graph = true,
        .graph_servers = (int)bv_opts_int(&x->cluster, "graph_servers"),
        .param_servers = (int)bv_opts_int(&x->cluster, "param_servers"),
        .intervals = (int)bv_opts_int(&x->engine, "intervals"),
        .lambdas = lambdas ? (int)bv_opts_int(&x->compute.opts, "lambdas") : 0,
        .epochs = (int)bv_opts_int(&x->train, "epochs"),
        .hours = bv_opts_float(s, "hours"),
        .graph_seconds = bv_opts_float(s, "graph_seconds"),
        .task_seconds = bv_opts_float(s, "task_seconds"),
        .tensor_stages = (int)bv_opts_int(s, "tensor_stages"),
        .lambda_capacity = bv_opts_float(s, "lambda_capacity"),
        .task_exponential = strcmp(bv_opts_str(s, "task_times"), "exponential") == 0,
        .reconfigure_seconds = bv_opts_float(s, "reconfigure_seconds"),
        .restart_seconds = bv_opts_float(s, "restart_seconds"),
        .checkpoint_steps = bv_opts_int(s, "checkpoint_steps"),
        .zones = 1,
    };
    size_t before = diag->count;
    graph_from_profile(x, m, diag);
    if (!(m->task_seconds > 0) || m->tensor_stages < 1)
        bv_diag_add(diag, section ? &section->pos : NULL, "simulate: a graph run needs "
                    "task_seconds and tensor_stages (and graph_seconds: docs/simulation.md), "
                    "or a profile (a graph run's directory)");
    if (m->intervals < 1)
        bv_diag_add(diag, bv_experiment_value_pos(&x->engine, "intervals",
                                                  bv_node_get(x->root, "engine")),
                    "simulate: a graph run needs engine.intervals (the tasks of a stage on "
                    "a graph server)");
    if (m->lambdas < 1)
        m->lambdas = m->intervals;
    for (size_t i = 0; i < x->nresilience; i++)
        if (strcmp(x->resilience[i].plugin->name, "checkpoint") == 0 && !m->checkpoint_steps)
            m->checkpoint_steps = bv_opts_int(&x->resilience[i].opts, "every");
    if (!m->checkpoint_steps)
        m->checkpoint_steps = 10;
    m->samples = m->epochs;
    return diag->count == before ? BV_OK : BV_ERR_INVALID;
}

/* Instance type k (from 0) of the model: its name, its step and its price. */
static void add_type(const bv_experiment *x, bv_sim_model *m, const char *name, double step)
{
    bv_sim_type *t = &m->types[m->ntypes++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->step = step;
    const bv_instance_price *price = bv_prices_find(&x->prices, name);
    bool spot = bv_opts_bool(&x->cost, "spot");
    t->usd_per_hour = !price ? 0 : spot && price->spot > 0 ? price->spot : price->on_demand;
    snprintf(t->step_key, sizeof t->step_key, "instance_%d_step", m->ntypes);
    snprintf(t->usd_key, sizeof t->usd_key, "instance_%d_usd_per_hour", m->ntypes);
}

/* `simulate.instances: {TYPE: STEP, ...}`: the instance types besides cost.instance that
 * a policy may move the run to, each with one pipeline's step at profile_stages on it;
 * every one in the price table. A trace stands for one type's market: refused with them. */
static void load_types(const bv_experiment *x, bv_sim_model *m, bv_diag *diag)
{
    add_type(x, m, bv_opts_str(&x->cost, "instance"), m->profile_step);
    const bv_node *list = bv_node_at_path(x->root, "simulate.instances");
    if (!list)
        return;
    if (list->kind != BV_NODE_MAP) {
        bv_diag_add(diag, &list->pos, "simulate.instances: a mapping of instance types to "
                    "a pipeline's step on each (seconds, at profile_stages stages)");
        return;
    }
    const char *trace = x->cloud.plugin && bv_opts_find(&x->cloud.opts, "trace")
                            ? bv_opts_str(&x->cloud.opts, "trace") : NULL;
    if (trace && trace[0] && list->count)
        bv_diag_add(diag, &list->pos, "simulate.instances: the cloud replays a trace, "
                    "which is one instance type's market: simulate other types on a drawn "
                    "market (cloud.preemption)");
    for (size_t i = 0; i < list->count; i++) {
        const bv_node *v = list->items[i];
        const char *name = list->keys[i];
        char *end = NULL;
        double step = v->kind == BV_NODE_SCALAR ? strtod(v->scalar, &end) : NAN;
        bool dup = false;
        for (int k = 0; k < m->ntypes; k++)
            dup |= strcmp(m->types[k].name, name) == 0;
        if (!end || end == v->scalar || *end || !(step > 0) || !isfinite(step))
            bv_diag_add(diag, &v->pos, "simulate.instances.%s: a pipeline's step on it in "
                        "seconds (at profile_stages stages), a number above 0", name);
        else if (!bv_prices_find(&x->prices, name))
            bv_diag_add(diag, &list->key_pos[i], "simulate.instances: instance type '%s' "
                        "is not in price table %s", name, x->prices.name);
        else if (dup)
            bv_diag_add(diag, &list->key_pos[i], "simulate.instances: '%s' is the "
                        "experiment's cost.instance, or named twice", name);
        else if (m->ntypes == BV_SIM_MAX_TYPES)
            bv_diag_add(diag, &list->key_pos[i], "simulate.instances: at most %d types "
                        "besides cost.instance", BV_SIM_MAX_TYPES - 1);
        else
            add_type(x, m, name, step);
    }
}

bv_status bv_sim_model_load(const bv_experiment *x, bv_sim_model *m, bv_diag *diag)
{
    if (strcmp(x->engine_ops->name, "graph") == 0) {
        bv_status st = graph_model_load(x, m, diag);
        add_type(x, m, bv_opts_str(&x->cost, "instance"), 0);
        const bv_node *types = bv_node_at_path(x->root, "simulate.instances");
        if (types) {
            bv_diag_add(diag, &types->pos, "simulate.instances: a graph run's servers are "
                        "of cost.instance (other instance types are simulated for pipeline "
                        "runs)");
            st = BV_ERR_INVALID;
        }
        return st;
    }
    const bv_opts *s = &x->simulate;
    const bv_pos *at = bv_experiment_value_pos(s, "profile", bv_node_get(x->root, "simulate"));
    *m = (bv_sim_model){
        .stages = (int)bv_opts_int(&x->pipeline, "stages"),
        .pipelines = (int)bv_opts_int(&x->pipeline, "pipelines"),
        .samples = bv_opts_float(s, "samples"),
        .hours = bv_opts_float(s, "hours"),
        .allreduce_mb = bv_opts_float(s, "allreduce_mb"),
        .bandwidth_gbps = bv_opts_float(s, "bandwidth_gbps"),
        .failover_seconds = bv_opts_float(s, "failover_seconds"),
        .degraded_slowdown = bv_opts_float(s, "degraded_slowdown"),
        .reconfigure_seconds = bv_opts_float(s, "reconfigure_seconds"),
        .restart_seconds = bv_opts_float(s, "restart_seconds"),
        .checkpoint_steps = bv_opts_int(s, "checkpoint_steps"),
        .zones = 1,
    };
    size_t before = diag->count;
    int profile_stages = (int)bv_opts_int(s, "profile_stages");
    double step = bv_opts_float(s, "step_seconds");
    double per_step = bv_opts_float(s, "samples_per_step");
    const char *dir = bv_opts_str(s, "profile");
    if (dir && dir[0]) {
        bv_sim_profile p;
        bv_error err = {0};
        snprintf(m->profile, sizeof m->profile, "%s", dir);
        if (!read_profile(dir, &p, &err)) {
            bv_diag_add(diag, at, "simulate.profile: %s", err.msg);
        } else {
            /* the section's own values win over the profile's; the profile's step had
             * its own all-reduce, which the model adds back */
            if (!user_set(s, "step_seconds"))
                step = p.step - allreduce_seconds(m, p.pipelines);
            if (!user_set(s, "profile_stages"))
                profile_stages = p.stages;
            if (!user_set(s, "samples_per_step"))
                per_step = p.samples_per_step;
            if (!user_set(s, "failover_seconds") && isfinite(p.failover))
                m->failover_seconds = p.failover;
            if (!user_set(s, "restart_seconds") && isfinite(p.restart))
                m->restart_seconds = p.restart;
            if (!user_set(s, "reconfigure_seconds") && isfinite(p.reconfigure))
                m->reconfigure_seconds = p.reconfigure;
            if (!user_set(s, "degraded_slowdown") && isfinite(p.degraded))
                m->degraded_slowdown = fmax(1.0, p.degraded / p.step);
        }
    }
    if (!(step > 0) && diag->count == before)
        bv_diag_add(diag, bv_node_get(x->root, "simulate") ?
                              &bv_node_get(x->root, "simulate")->pos : NULL,
                    "simulate: needs step_seconds (a step's time) or a profile (a run's "
                    "directory)");
    if (!profile_stages)
        profile_stages = m->stages;
    int64_t batch = bv_opts_int(&x->train, "batch");
    m->samples_per_step = per_step > 0 ? per_step : (double)batch / m->pipelines;
    if (m->samples <= 0)
        m->samples = (double)bv_opts_int(&x->train, "steps") * m->samples_per_step * m->pipelines;
    m->profile_step = step;
    m->profile_stages = profile_stages;
    m->microbatches = (double)bv_opts_int(&x->pipeline, "microbatches");
    if (bv_opts_find(&x->model.opts, "layers"))
        m->layers = (int)bv_opts_int(&x->model.opts, "layers");
    m->rc_factor = 1;
    for (size_t i = 0; i < x->nresilience; i++) {
        const char *name = x->resilience[i].plugin->name;
        if (strcmp(name, "redundancy") == 0) {
            m->redundancy = true;
            m->rc_factor = 1 + bv_opts_float(s, "rc_overhead");
            if (bv_opts_float(s, "lflb_rc_overhead") >= 0)
                m->lflb_rc_factor = 1 + bv_opts_float(s, "lflb_rc_overhead");
            m->lflb_failover_seconds = bv_opts_float(s, "lflb_failover_seconds");
        }
        if (strcmp(name, "checkpoint") == 0 && !m->checkpoint_steps)
            m->checkpoint_steps = bv_opts_int(&x->resilience[i].opts, "every");
    }
    if (!m->checkpoint_steps)
        m->checkpoint_steps = 10;
    const bv_opt_value *zones = x->cloud.plugin ? bv_opts_find(&x->cloud.opts, "zones") : NULL;
    if (zones)
        m->zones = (int)bv_opts_int(&x->cloud.opts, "zones");
    load_types(x, m, diag);
    return diag->count == before ? BV_OK : BV_ERR_INVALID;
}

double bv_sim_epoch_seconds(const bv_sim_model *m, int lambdas, double *task_seconds)
{
    /* a stage's tasks go out in waves of L; beyond the capacity a graph server serves
     * at full speed, each task takes longer in proportion */
    double slow = m->lambda_capacity > 0 && lambdas > m->lambda_capacity
                      ? lambdas / m->lambda_capacity : 1;
    double task = m->task_seconds * slow;
    if (task_seconds)
        *task_seconds = task;
    double waves = ceil((double)m->intervals / lambdas);
    return m->graph_seconds + m->tensor_stages * waves * task;
}

double bv_sim_billed_seconds(const bv_sim_model *m, double task, double unit)
{
    if (unit <= 0)
        return task;
    if (m->task_exponential) /* the sum over k of P(time > k units) */
        return unit / -expm1(-unit / task);
    return ceil(task / unit - 1e-9) * unit;
}

bv_status bv_sim_profile_read(const char *dir, bv_sim_profile *out, bv_error *err)
{
    return read_profile(dir, out, err) ? BV_OK : (err->status ? err->status : BV_ERR_INVALID);
}

double bv_sim_step_seconds(const bv_sim_model *m, int type, int p, int d, bool degraded,
                           bool lazy)
{
    /* 1F1B: M + P - 1 slots of a microbatch on the slowest stage, whose work is its
     * layers': ceil(L / P) of L (1 / P where L is unknown) */
    double share = m->layers > 0 ? ceil((double)m->layers / p) /
                                       ceil((double)m->layers / m->profile_stages)
                                 : (double)m->profile_stages / p;
    double pipe = m->types[type].step * share * (m->microbatches + p - 1) /
                  (m->microbatches + m->profile_stages - 1);
    return pipe * (lazy ? m->lflb_rc_factor : m->rc_factor) *
               (degraded ? m->degraded_slowdown : 1) +
           allreduce_seconds(m, d);
}
