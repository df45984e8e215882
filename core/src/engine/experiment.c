/* Experiment loading and validation (experiment.h). */
#include "experiment.h"

#include "bivouac/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "alloc.h"
#include "device_mem.h"

static const char *const top_level_keys[] = {
    "name",   "model",  "dataset", "train", "compute",  "engine", "transport", "resilience",
    "policy", "cluster", "cloud",  "pipeline", "cost", "budget", "simulate"};
#define N_TOP_LEVEL (sizeof top_level_keys / sizeof top_level_keys[0])

static const bv_option engine_schema[] = {
    BV_OPT_INT_RANGE("intervals", "0", 0, 1e6,
                     "vertex intervals per stage (tasks); 0: one per 65,536 vertices"),
    BV_OPT_INT_RANGE("tensor_workers", "1", 1, 64, "tensor worker threads"),
    BV_OPT_BOOLEAN("share_arrays", "true",
                   "roles pass vertex arrays by reference, not by copying them into messages "
                   "(threads of one process, or processes on one host through shared "
                   "memory)"),
    BV_OPT_FLOAT_RANGE("peer_timeout", "5", 0.1, 3600,
                       "seconds a role process may take to answer a stop, or an unreachable "
                       "peer to be noticed, or a role process's heartbeats may stop (it "
                       "hangs: killed), before the run fails naming it"),
    BV_OPT_FLOAT_RANGE("start_timeout", "60", 0.1, 3600,
                       "seconds the role processes have to load the experiment and report "
                       "ready"),
    BV_OPT_END,
};

/* `cluster:` the roles of a run on a cloud (`cloud:`), each its own process. */
static const bv_option cluster_schema[] = {
    BV_OPT_INT_RANGE("graph_servers", "1", 1, 16,
                     "graph server processes (G), each owning a part of the graph"),
    BV_OPT_INT_RANGE("param_servers", "1", 1, 16,
                     "parameter server processes (P), each with all the weights"),
    BV_OPT_INT_RANGE("tensor_workers", "1", 1, 64, "tensor worker processes (T)"),
    BV_OPT_CHOICE("partition", "metis", "metis|range",
                  "how the graph is split between graph servers: METIS's edge cut, or "
                  "contiguous vertex ranges (docs/partitioning.md)"),
    BV_OPT_INT_RANGE("partition_seed", "0", 0, 2147483647, "METIS's seed"),
    BV_OPT_CHOICE("links", "ipc", "ipc|tcp",
                  "how the roles reach each other: unix sockets in a private directory "
                  "(one host), or TCP with the run's CURVE keys (hosts)"),
    BV_OPT_STR("address", "127.0.0.1",
               "links: tcp: the address of this host (the coordinator's) that the roles "
               "placed on it bind and the others reach"),
    BV_OPT_STR("graph_server_hosts", "",
               "links: tcp: where graph servers 0, 1, ... run, comma-separated, each "
               "'HOST@ADDRESS' (HOST a network namespace for the local cloud) or empty for "
               "the coordinator's host"),
    BV_OPT_STR("param_server_hosts", "", "the same for the parameter servers"),
    BV_OPT_STR("tensor_worker_hosts", "", "the same for the tensor workers"),
    BV_OPT_CHOICE("membership", "coordinator", "coordinator|etcd",
                  "how a run's processes (roles, or a pipeline's stages) learn of each "
                  "other's loss: from the coordinator alone (its cloud's events, their "
                  "silence), or also from etcd leases and watches, which reach across hosts "
                  "(docs/membership.md)"),
    BV_OPT_STR("etcd", "http://127.0.0.1:2379",
               "membership: etcd: the client URL of an etcd member"),
    BV_OPT_INT_RANGE("lease", "5", 1, 3600,
                     "membership: etcd: seconds a process's lease outlives its last renewal "
                     "(every third of it); a process silent this long is lost"),
    BV_OPT_END,
};

/* The keys of `cluster:` that a sequence model's pipeline reads: its membership. */
static const char *const pipeline_cluster_keys[] = {"membership", "etcd", "lease"};

/* `pipeline:` a sequence model's layers split into stages, D pipelines side by side, a
 * step's batch cut into microbatches (docs/pipeline.md); checked before the engine's own
 * checks, which read it. */
static const bv_option pipeline_schema[] = {
    BV_OPT_INT_RANGE("stages", "1", 1, 64, "pipeline stages (P), each a run of layers"),
    BV_OPT_INT_RANGE("pipelines", "1", 1, 64,
                     "data-parallel pipelines (D); each trains on batch / D sequences a step "
                     "and their gradients are summed (all-reduce) before the update"),
    BV_OPT_INT_RANGE("microbatches", "1", 1, 4096,
                     "microbatches (M) each pipeline's share of a step's batch is cut into"),
    BV_OPT_CHOICE("schedule", "1f1b", "1f1b|gpipe",
                  "one forward one backward (PipeDream-flush), or all forwards then all "
                  "backwards (GPipe)"),
    BV_OPT_STR("partition", "uniform",
               "uniform, balanced (by the layers' times in a profiling pass), or each "
               "stage's number of layers, comma-separated ('3,1')"),
    BV_OPT_FLOAT_RANGE("peer_timeout", "60", 0.1, 86400,
                       "seconds a stage waits for a peer's activations or gradients, and the "
                       "coordinator for a stage process's answer after the others', before "
                       "the step fails; a stage process silent as long again is taken to "
                       "hang and terminated"),
    BV_OPT_INT_RANGE("restarts", "10", 0, 1e6,
                     "stages as processes: times a run restarts from its last checkpoint "
                     "in the process (a loss nothing covers, or the policy's restart: the "
                     "stages launched again), before it ends for bivouac run --resume"),
    BV_OPT_CHOICE("links", "ipc", "ipc|tcp",
                  "stages as processes (cloud:): unix sockets in a private directory, or TCP "
                  "with the run's CURVE keys"),
    BV_OPT_STR("address", "127.0.0.1",
               "links: tcp: the address the coordinator and the stages bind"),
    BV_OPT_END,
};

/* `cost:` what the run's resources are priced as (docs/cost.md). */
static const bv_option cost_schema[] = {
    BV_OPT_STR("prices", "aws-us-east-1-2021",
               "price table: the name of one shipped in configs/prices/, or the path of a "
               "YAML file of the same form (relative to the experiment file)"),
    BV_OPT_STR("instance", "c5n.2xlarge",
               "instance type this process, and every node a cloud starts for the run, is "
               "priced as"),
    BV_OPT_BOOLEAN("spot", "false",
                   "price the instances at the table's spot rate (where it has one)"),
    BV_OPT_END,
};

/* `budget:` a hard limit on what a run may cost. */
static const bv_option budget_schema[] = {
    BV_OPT_FLOAT_RANGE("usd", "0", 0, 1e9,
                       "stop the run cleanly, its results saved, once its cost reaches this "
                       "many US dollars (0: no budget)"),
    BV_OPT_END,
};

/* `simulate:` the workload model of `bivouac simulate` (docs/simulation.md); a value set
 * here wins over the profile's. */
static const bv_option simulate_schema[] = {
    BV_OPT_INT_RANGE("runs", "1", 1, 100000, "simulated runs, each with its own seed "
                     "(--runs overrides it)"),
    BV_OPT_FLOAT_RANGE("samples", "0", 0, 1e15, "a run ends once it has trained on this many "
                       "samples; 0: train.steps steps of the layout asked for"),
    BV_OPT_FLOAT_RANGE("hours", "1000", 0.001, 1e6, "or once this many simulated hours have "
                       "passed"),
    BV_OPT_DIRECTORY("profile", "", "a run's directory (bivouac run --out DIR): its "
                     "result.json and metrics.jsonl give the step time, the failover pause and "
                     "the slowdown on a shadow, or a graph run's on functions its epoch, task "
                     "time and tensor stages (relative to the experiment file)"),
    BV_OPT_FLOAT_RANGE("step_seconds", "0", 0, 1e7, "a step of one pipeline of "
                       "profile_stages stages, without preemptions (required without a "
                       "profile)"),
    BV_OPT_INT_RANGE("profile_stages", "0", 0, 4096, "the depth step_seconds was measured "
                     "at; 0: pipeline.stages"),
    BV_OPT_FLOAT_RANGE("samples_per_step", "0", 0, 1e12, "samples one pipeline trains on in "
                       "a step; 0: train.batch / pipeline.pipelines"),
    BV_OPT_FLOAT_RANGE("rc_overhead", "0", 0, 100, "what redundant computation adds to a "
                       "step, as a fraction, where the profiled step had none (with "
                       "`redundancy`)"),
    BV_OPT_FLOAT_RANGE("allreduce_mb", "0", 0, 1e9, "one stage's gradients, all-reduced "
                       "across the pipelines every step (MB)"),
    BV_OPT_FLOAT_RANGE("bandwidth_gbps", "10", 0.001, 1e6, "between two nodes"),
    BV_OPT_FLOAT_RANGE("failover_seconds", "0", 0, 1e7, "the pause of a failover"),
    BV_OPT_FLOAT_RANGE("lflb_rc_overhead", "-1", -1, 100, "with `redundancy`: what lazy "
                       "FRC (lflb) adds to a step, where a policy may switch to it (set "
                       "lazy = 1 in on_layout); -1: it may not"),
    BV_OPT_FLOAT_RANGE("lflb_failover_seconds", "0", 0, 1e7, "the pause of a failover "
                       "under lazy FRC"),
    BV_OPT_FLOAT_RANGE("degraded_slowdown", "1", 1, 100, "a step with a stage on its "
                       "shadow, over a normal step"),
    BV_OPT_FLOAT_RANGE("reconfigure_seconds", "20", 0, 1e7, "a reconfiguration at a step "
                       "boundary (Bamboo's simulator: 20 s)"),
    BV_OPT_FLOAT_RANGE("restart_seconds", "30", 0, 1e7, "a restart from the last checkpoint, "
                       "besides the work lost since (Bamboo's simulator: 30 s)"),
    BV_OPT_INT_RANGE("checkpoint_steps", "0", 0, 1e9, "steps between checkpoints; 0: the "
                     "checkpoint strategy's `every`, else 10"),
    /* graph runs (Dorylus): an epoch by graph servers and serverless functions */
    BV_OPT_FLOAT_RANGE("graph_seconds", "0", 0, 1e7, "graph runs: a graph server's own "
                       "work in an epoch"),
    BV_OPT_FLOAT_RANGE("task_seconds", "0", 0, 1e7, "graph runs: a tensor task's time on a "
                       "function that has its graph server's full attention"),
    BV_OPT_INT_RANGE("tensor_stages", "0", 0, 1e6, "graph runs: the tensor stages of an "
                     "epoch (forward, backward, evaluation), each a task per interval"),
    BV_OPT_CHOICE("task_times", "fixed", "fixed|exponential", "graph runs: how a task's "
                  "billed time spreads about its mean: not at all, or exponentially (what "
                  "the billing unit's rounding then adds)"),
    BV_OPT_FLOAT_RANGE("lambda_capacity", "0", 0, 1e6, "graph runs: the functions a graph "
                       "server serves at full speed at once (0: any number); beyond, every "
                       "task takes longer in proportion"),
    BV_OPT_END,
};

static const bv_option policy_schema[] = {
    BV_OPT_FILE("file", NULL, "Lua policy script, relative to the experiment file"),
    BV_OPT_CHOICE("on_error", "continue", "continue|stop",
                  "on a script error: go on without the policy, or stop the run"),
    BV_OPT_INT_RANGE("instructions", "10000000", 1000, 1e12,
                     "Lua instruction budget per call"),
    BV_OPT_INT_RANGE("memory_mb", "64", 1, 65536, "Lua memory cap in MiB"),
    BV_OPT_END,
};

void bv_experiment_free(bv_experiment *x)
{
    if (!x)
        return;
    bv_opts_free(&x->model.opts);
    bv_opts_free(&x->compute.opts);
    bv_opts_free(&x->transport.opts);
    for (size_t i = 0; i < x->nresilience; i++)
        bv_opts_free(&x->resilience[i].opts);
    bv_opts_free(&x->dataset);
    bv_opts_free(&x->train);
    bv_opts_free(&x->engine);
    bv_opts_free(&x->cluster);
    bv_opts_free(&x->pipeline);
    bv_opts_free(&x->cost);
    bv_opts_free(&x->budget);
    bv_opts_free(&x->simulate);
    bv_opts_free(&x->cloud.opts);
    bv_opts_free(&x->policy);
    bv_policy_free(x->policy_ready);
    if (x->data_ready && x->engine_ops && x->engine_ops->free_data)
        x->engine_ops->free_data(x->data_ready);
    free(x->policy_params);
    free(x->policy_exports);
    bv_node_free(x->root);
    free(x->path);
    free(x->name);
    free(x->dataset_dir);
    free(x->dataset_label);
    free(x);
}

/* A plugin section: `plugin:` names it, the other keys are the plugin's options. Returns
 * the plugin, found and loaded, even when its options are wrong (out->plugin is set only
 * when they are right); NULL if there is none. */
static const bv_plugin *load_plugin_section(bv_experiment *x, bv_registry *reg, const bv_node *section,
                                const char *section_name, bv_plugin_kind kind,
                                const char *default_plugin, bv_section *out, bv_diag *diag)
{
    const char *kind_name = bv_plugin_kind_name(kind);
    const bv_node *name_node = section && section->kind == BV_NODE_MAP
                                   ? bv_node_get(section, "plugin")
                                   : NULL;
    if (section && section->kind != BV_NODE_MAP &&
        !(section->kind == BV_NODE_SCALAR && section->scalar[0] == '\0')) {
        bv_diag_add(diag, &section->pos, "section '%s' must be a mapping", section_name);
        return NULL;
    }
    const char *name = name_node ? name_node->scalar : default_plugin;
    if (name_node && name_node->kind != BV_NODE_SCALAR) {
        bv_diag_add(diag, &name_node->pos, "'plugin' in section '%s' must be a name",
                    section_name);
        return NULL;
    }
    if (!name) {
        bv_pos pos = section ? section->pos : (bv_pos){x->root->pos.file, 0, 0};
        bv_diag_add(diag, &pos, "missing required key 'plugin' in section '%s'", section_name);
        return NULL;
    }
    bv_error err = {0};
    const bv_plugin *p = bv_registry_get(reg, kind, name, &err);
    if (!p) {
        const bv_pos *pos = name_node ? &name_node->pos : (section ? &section->pos : NULL);
        if (err.msg[0] && strstr(err.msg, "not found")) {
            const char *names[128];
            size_t n = bv_registry_names(reg, kind, names, 128);
            const char *hint = bv_suggest(name, names, n);
            if (hint)
                bv_diag_add(diag, pos, "unknown %s plugin '%s'; did you mean '%s'?", kind_name,
                            name, hint);
            else /* the registry's message ends "(searched P)" */
                bv_diag_add(diag, pos, "unknown %s plugin '%s' %s", kind_name, name,
                            strstr(err.msg, "(searched") ? strstr(err.msg, "(searched") : "");
        } else {
            bv_diag_add(diag, pos, "%s", err.msg);
        }
        return NULL;
    }
    static const char *const ignore[] = {"plugin", NULL};
    if (bv_config_validate(section, section_name, bv_registry_options(reg, p), ignore, &out->opts, diag) == BV_OK)
        out->plugin = p;
    return p;
}

static void load_policy_params(bv_experiment *x, const bv_node *section, bv_diag *diag)
{
    const bv_node *params = bv_node_get(section, "params");
    if (!params)
        return;
    if (params->kind != BV_NODE_MAP) {
        bv_diag_add(diag, &params->pos, "'params' in section 'policy' must be a mapping");
        return;
    }
    x->policy_params = bv_calloc(params->count + 1, sizeof *x->policy_params);
    if (!x->policy_params) {
        bv_diag_add(diag, &params->pos, "out of memory while reading the policy parameters");
        return;
    }
    for (size_t i = 0; i < params->count; i++) {
        if (params->items[i]->kind != BV_NODE_SCALAR) {
            bv_diag_add(diag, &params->items[i]->pos, "policy parameter '%s' must be a single "
                        "value", params->keys[i]);
            continue;
        }
        x->policy_params[x->npolicy_params++] =
            (bv_policy_param){params->keys[i], params->items[i]->scalar};
    }
}

/* The exports of one plugin, appended to x->policy_exports (each plugin once). */
static void add_plugin_exports(bv_experiment *x, const bv_plugin *p, bv_diag *diag)
{
    if (!p || !p->exports)
        return;
    for (size_t i = 0; i < x->npolicy_exports; i++)
        if (x->policy_exports[i].plugin == p->name &&
            strcmp(x->policy_exports[i].kind, bv_plugin_kind_name((bv_plugin_kind)p->kind)) == 0)
            return; /* the same plugin twice (two resilience sections) */
    size_t n = 0;
    while (p->exports[n].name)
        n++;
    bv_policy_export *grown =
        bv_realloc(x->policy_exports, (x->npolicy_exports + n) * sizeof *grown);
    if (!grown) {
        bv_diag_add(diag, NULL, "out of memory while reading the plugins' exports");
        return;
    }
    x->policy_exports = grown;
    for (size_t i = 0; i < n; i++)
        x->policy_exports[x->npolicy_exports++] = (bv_policy_export){
            bv_plugin_kind_name((bv_plugin_kind)p->kind), p->name, p->exports[i].name,
            p->exports[i].signature, p->exports[i].fn, p->abi_minor};
}

static void collect_exports(bv_experiment *x, bv_diag *diag)
{
    add_plugin_exports(x, x->model.plugin, diag);
    add_plugin_exports(x, x->compute.plugin, diag);
    add_plugin_exports(x, x->transport.plugin, diag);
    for (size_t i = 0; i < x->nresilience; i++)
        add_plugin_exports(x, x->resilience[i].plugin, diag);
}

/* Compiles and sets the script up, so a broken policy is found before anything runs: an
 * error when on_error is stop, a warning (and a run without it) otherwise. A good one is
 * kept for the first run, so its set-up runs once (docs/policies.md). */
static void check_policy_script(bv_experiment *x, bv_diag *diag)
{
    bv_policy *p = NULL;
    bv_error err = {0};
    if (bv_experiment_load_policy(x, &p, &err) == BV_OK) {
        x->policy_ready = p;
        return;
    }
    if (strcmp(bv_opts_str(&x->policy, "on_error"), "stop") == 0) {
        /* where the YAML names the script, then the script's own position */
        bv_diag_add(diag, &bv_opts_find(&x->policy, "file")->pos, "%s", err.msg);
    } else {
        bv_log(BV_LOG_WARN, "%s; the run goes on without the policy", err.msg);
        x->policy_broken = true;
    }
}

bv_status bv_experiment_load_policy(const bv_experiment *x, bv_policy **out, bv_error *err)
{
    bv_policy_limits lim = {bv_opts_int(&x->policy, "instructions"),
                            (size_t)bv_opts_int(&x->policy, "memory_mb") << 20};
    return bv_policy_load_with(bv_opts_str(&x->policy, "file"), x->policy_params,
                               x->npolicy_params, x->policy_exports, x->npolicy_exports, &lim,
                               out, err);
}

void *bv_experiment_take_data(bv_experiment *x)
{
    void *d = x ? x->data_ready : NULL;
    if (x)
        x->data_ready = NULL;
    return d;
}

bv_policy *bv_experiment_take_policy(bv_experiment *x)
{
    bv_policy *p = x ? x->policy_ready : NULL;
    if (x)
        x->policy_ready = NULL;
    return p;
}

static void load_resilience(bv_experiment *x, bv_registry *reg, const bv_node *list,
                            bv_diag *diag)
{
    if (!list)
        return;
    if (list->kind != BV_NODE_SEQ) {
        bv_diag_add(diag, &list->pos, "section 'resilience' must be a list of strategies");
        return;
    }
    for (size_t i = 0; i < list->count; i++) {
        if (x->nresilience == BV_MAX_RESILIENCE) {
            bv_diag_add(diag, &list->items[i]->pos, "at most %d resilience strategies",
                        BV_MAX_RESILIENCE);
            return;
        }
        char name[32];
        snprintf(name, sizeof name, "resilience.%zu", i);
        bv_section *s = &x->resilience[x->nresilience];
        load_plugin_section(x, reg, list->items[i], name, BV_KIND_RESILIENCE, NULL, s, diag);
        if (s->plugin)
            x->nresilience++;
        else
            bv_opts_free(&s->opts);
    }
}

static char *default_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char *name = bv_strdup(base);
    if (name) {
        char *dot = strrchr(name, '.');
        if (dot && (strcmp(dot, ".yaml") == 0 || strcmp(dot, ".yml") == 0))
            *dot = '\0';
    }
    return name;
}

/* The longest experiment name: runs/<name>-<time> must stay a short, plain file name. */
#define MAX_NAME_LEN 64

/* `name:` becomes a directory name under runs/: a plain token (letters, digits, '-', '_',
 * '.'; not starting with '.'), so that `../x` or `/tmp/x` cannot put a run elsewhere. */
static bool plain_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MAX_NAME_LEN || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.';
        if (!ok)
            return false;
    }
    return true;
}

/* The experiment's name: `name:` if set, else the file's name without .yaml. */
static void load_name(bv_experiment *x, const bv_node *name, const char *path, bv_diag *diag)
{
    if (name && name->kind != BV_NODE_SCALAR) {
        bv_diag_add(diag, &name->pos, "expected a string for 'name', got %s",
                    name->kind == BV_NODE_MAP ? "a mapping" : "a list");
        return;
    }
    if (name && name->scalar[0] && !plain_name(name->scalar)) {
        bv_diag_add(diag, &name->pos, "'name' must be a plain name of at most %d letters, "
                    "digits, '-', '_' and '.', not starting with '.' (it names the run "
                    "directory), got '%s'", MAX_NAME_LEN, name->scalar);
        return;
    }
    x->name = name && name->scalar[0] ? bv_strdup(name->scalar) : default_name(path);
    if (!x->name)
        bv_diag_add(diag, NULL, "out of memory while loading %s", path);
}

/* The engine a model plugin's descriptor names. */
static const bv_engine_ops *model_engine(const bv_plugin *p, const bv_node *section,
                                         bv_diag *diag)
{
    const char *name = bv_plugin_model_engine(p);
    const bv_engine_ops *e = name ? bv_engine_find(name) : NULL;
    if (!e)
        bv_diag_add(diag, section ? &section->pos : NULL,
                    "model plugin '%s' needs engine '%s'; this bivouac has %s", p->name,
                    name ? name : "(none)", bv_engine_names());
    return e;
}

const bv_pos *bv_experiment_value_pos(const bv_opts *o, const char *name,
                                      const bv_node *fallback)
{
    const bv_opt_value *v = bv_opts_find(o, name);
    if (v && v->from_user)
        return &v->pos;
    return fallback ? &fallback->pos : NULL;
}

void bv_experiment_dir(const bv_experiment *x, char *buf, size_t len)
{
    snprintf(buf, len, "%s", x->path);
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(buf, len, ".");
}

int bv_cluster_place(const char *list, int index, char *host, size_t host_len, char *addr,
                     size_t addr_len, bv_error *err)
{
    const char *p = list ? list : "";
    for (int i = 0; i < index && *p; i++) { /* to entry `index` */
        p += strcspn(p, ",");
        if (*p == ',')
            p++;
    }
    while (*p == ' ')
        p++;
    size_t n = strcspn(p, ",");
    while (n > 0 && p[n - 1] == ' ')
        n--;
    if (n == 0)
        return 0;
    const char *at = memchr(p, '@', n);
    size_t hn = at ? (size_t)(at - p) : 0, an = at ? n - hn - 1 : 0;
    bool plain = at && hn > 0 && an > 0 && hn < host_len && an < addr_len;
    for (size_t i = 0; plain && i < n; i++)
        plain = p[i] > ' ' && p[i] != '/' && p[i] != ':' && p[i] != '*';
    if (!plain) {
        bv_error_set(err, BV_ERR_INVALID, "'%.*s' is not HOST@ADDRESS (a network namespace "
                     "and its IPv4 address, e.g. ns-a@10.0.0.1)", (int)(n > 60 ? 60 : n), p);
        return -1;
    }
    memcpy(host, p, hn);
    host[hn] = '\0';
    memcpy(addr, at + 1, an);
    addr[an] = '\0';
    return 1;
}

/* cluster.*_hosts: each list well formed, no longer than its kind has roles, and only
 * with links over tcp (a unix socket does not cross hosts). */
static void check_hosts(const bv_experiment *x, bv_diag *diag)
{
    static const char *const lists[] = {"graph_server_hosts", "param_server_hosts",
                                        "tensor_worker_hosts"};
    static const char *const counts[] = {"graph_servers", "param_servers", "tensor_workers"};
    bool tcp = strcmp(bv_opts_str(&x->cluster, "links"), "tcp") == 0;
    for (int k = 0; k < 3; k++) {
        const bv_opt_value *v = bv_opts_find(&x->cluster, lists[k]);
        const char *list = v->v.s ? v->v.s : "";
        if (!list[0])
            continue;
        if (!tcp) {
            bv_diag_add(diag, &v->pos, "'%s' places roles on other hosts, which needs "
                        "'links: tcp' (links: ipc is one host)", lists[k]);
            continue;
        }
        int64_t roles = bv_opts_int(&x->cluster, counts[k]);
        int entries = 1;
        for (const char *p = list; *p; p++)
            entries += *p == ',';
        if (entries > roles) {
            bv_diag_add(diag, &v->pos, "'%s' places %d roles, but the cluster has %lld %s",
                        lists[k], entries, (long long)roles, counts[k]);
            continue;
        }
        for (int i = 0; i < entries; i++) {
            char host[32], addr[64];
            bv_error err = {0};
            if (bv_cluster_place(list, i, host, sizeof host, addr, sizeof addr, &err) < 0) {
                bv_diag_add(diag, &v->pos, "'%s': %s", lists[k], err.msg);
                break;
            }
        }
    }
}

/* `cluster:` and `cloud:` come together: a cluster's roles are processes that a cloud
 * starts; without both, the run is the one-process embedded default. A sequence model
 * has no `cluster:`: with `cloud:` its pipeline's stages are the processes. */
static void load_cluster(bv_experiment *x, bv_registry *reg, bv_diag *diag)
{
    const bv_node *cluster = bv_node_get(x->root, "cluster");
    const bv_node *cloud = bv_node_get(x->root, "cloud");
    bv_config_validate(cluster, "cluster", cluster_schema, NULL, &x->cluster, diag);
    if (cloud)
        load_plugin_section(x, reg, cloud, "cloud", BV_KIND_CLOUD, NULL, &x->cloud, diag);
    if (cluster && !cloud)
        bv_diag_add(diag, &cluster->pos, "section 'cluster' needs a cloud to start its roles "
                    "(e.g. cloud: {plugin: local})");
    /* a sequence model's stages are processes on a cloud when it has one (pipeline:);
     * of `cluster:` it reads the membership alone */
    bool graph = x->engine_ops && strcmp(x->engine_ops->name, "graph") == 0;
    for (size_t i = 0; cluster && cluster->kind == BV_NODE_MAP && x->engine_ops && !graph &&
                       i < cluster->count; i++) {
        const char *key = cluster->keys[i];
        bool ok = false;
        for (size_t k = 0; k < sizeof pipeline_cluster_keys / sizeof *pipeline_cluster_keys;
             k++)
            ok = ok || strcmp(key, pipeline_cluster_keys[k]) == 0;
        if (!ok)
            bv_diag_add(diag, &cluster->key_pos[i], "'cluster.%s' places a graph model's "
                        "roles; the %s engine's stages are set in 'pipeline:' (and run as "
                        "processes on 'cloud:'), and read only cluster.membership, .etcd and "
                        ".lease", key, x->engine_ops->name);
    }
    if (cluster && x->cluster.values)
        check_hosts(x, diag);
}

/* A strategy that gates tasks (resilience before_task: the staleness plugin) is asked by
 * the graph engine's graph servers, and there is one such strategy at most. */
static void check_gates(const bv_experiment *x, bv_diag *diag)
{
    const bv_node *list = bv_node_get(x->root, "resilience");
    if (!list || list->kind != BV_NODE_SEQ || list->count != x->nresilience)
        return; /* what is wrong with the list was said already */
    const char *gate = NULL;
    for (size_t i = 0; i < x->nresilience; i++) {
        const bv_plugin *p = x->resilience[i].plugin;
        const bv_pos *pos = &list->items[i]->pos;
        if (!bv_resilience_gates(p))
            continue;
        if (x->engine_ops && strcmp(x->engine_ops->name, "graph") != 0)
            bv_diag_add(diag, pos, "resilience '%s' gates the graph engine's tasks; this "
                        "model runs on the %s engine", p->name, x->engine_ops->name);
        else if (gate)
            bv_diag_add(diag, pos, "resilience '%s' gates tasks, and so does '%s': at most "
                        "one strategy may", p->name, gate);
        gate = p->name;
    }
}

/* A compute plugin that runs the graph engine's tensor tasks on serverless functions
 * (`lambda`, docs/lambda.md) needs the graph engine, a cloud that has functions, roles that
 * share this host (the workers find their graph server's and parameter servers' sockets),
 * and no task gate yet. */
static void check_functions(const bv_experiment *x, bv_diag *diag)
{
    const bv_node *compute = bv_node_get(x->root, "compute");
    if (!compute || !x->compute.plugin)
        return;
    bv_compute_ops ops = {0};
    bv_ops_copy(&ops, sizeof ops, x->compute.plugin);
    if (ops.task_placement != BV_TASKS_ON_FUNCTIONS)
        return;
    const char *name = x->compute.plugin->name;
    const bv_node *cluster = bv_node_get(x->root, "cluster");
    const bv_node *list = bv_node_get(x->root, "resilience");
    bv_cloud_ops cloud = {0};
    if (x->cloud.plugin)
        bv_ops_copy(&cloud, sizeof cloud, x->cloud.plugin);
    if (x->engine_ops && strcmp(x->engine_ops->name, "graph") != 0) {
        bv_diag_add(diag, &compute->pos, "compute '%s' runs the graph engine's tensor tasks; "
                    "this model runs on the %s engine", name, x->engine_ops->name);
    } else if (!bv_node_get(x->root, "cloud")) {
        bv_diag_add(diag, &compute->pos, "compute '%s' invokes function workers through a "
                    "cloud: add one (e.g. cloud: {plugin: local})", name);
    } else if (x->cloud.plugin && (!cloud.function_limits || !cloud.invoke)) {
        bv_diag_add(diag, &bv_node_get(x->root, "cloud")->pos, "cloud '%s' has no serverless "
                    "functions, which compute '%s' invokes", x->cloud.plugin->name, name);
    } else if (cluster && x->cluster.values &&
               strcmp(bv_opts_str(&x->cluster, "links"), "tcp") == 0) {
        bv_diag_add(diag, &bv_opts_find(&x->cluster, "links")->pos, "compute '%s' runs its "
                    "workers on this host: cluster.links must be ipc", name);
    }
    for (size_t i = 0; list && list->kind == BV_NODE_SEQ && list->count == x->nresilience &&
                       i < x->nresilience; i++)
        if (bv_resilience_gates(x->resilience[i].plugin))
            bv_diag_add(diag, &list->items[i]->pos, "resilience '%s' gates tasks, which "
                        "compute '%s' does not run under yet: its passes go stage by stage",
                        x->resilience[i].plugin->name, name);
}

/* `cost:` its options, and the price table they name, which must price the instance. An
 * experiment without the section runs at the shipped defaults, read when the run starts
 * (bv_train): a check reads nothing it does not have to. */
static void load_prices(bv_experiment *x, const bv_node *section, bv_diag *diag)
{
    if (bv_config_validate(section, "cost", cost_schema, NULL, &x->cost, diag) != BV_OK ||
        !section)
        return;
    const bv_opt_value *prices = bv_opts_find(&x->cost, "prices");
    const bv_opt_value *inst = bv_opts_find(&x->cost, "instance");
    char base[4096];
    bv_experiment_dir(x, base, sizeof base);
    bv_error err = {0};
    if (bv_prices_load(prices->v.s, base, &x->prices, &err) != BV_OK) {
        x->prices.ninstances = 0;
        char known[256] = "";
        for (size_t i = 0; bv_builtin_price_tables[i]; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s",
                     i ? ", " : "", bv_builtin_price_tables[i]);
        bv_diag_add(diag, &prices->pos, "price table '%s': %s (shipped: %s)", prices->v.s,
                    err.msg, known);
        return;
    }
    if (!bv_prices_find(&x->prices, inst->v.s)) {
        char known[512] = "";
        for (int i = 0; i < x->prices.ninstances; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s",
                     i ? ", " : "", x->prices.instances[i].name);
        bv_diag_add(diag, &inst->pos, "instance type '%s' is not in price table %s (%s)",
                    inst->v.s, x->prices.name, known);
    }
}

static bv_status load(const char *path, char *const *overrides, size_t noverrides,
                      bv_registry *reg, bool policy_script, bv_experiment **out, bv_diag *diag)
{
    *out = NULL;
    unsigned long failures_before = bv_alloc_failures();
    bv_experiment *x = bv_calloc(1, sizeof *x);
    if (!x) {
        bv_diag_add(diag, NULL, "out of memory while loading %s", path);
        return BV_ERR_NOMEM;
    }
    x->path = bv_strdup(path);
    size_t before = diag->count;
    if (!x->path) {
        bv_diag_add(diag, NULL, "out of memory while loading %s", path);
        bv_experiment_free(x);
        return BV_ERR_NOMEM;
    }
    bv_status st = bv_config_load_file(path, &x->root, diag);
    if (st != BV_OK) {
        bv_experiment_free(x);
        return st;
    }
    for (size_t i = 0; i < noverrides; i++)
        bv_config_override(x->root, overrides[i], diag);

    const bv_node *root = x->root;
    for (size_t i = 0; i < root->count; i++) {
        bool known = false;
        for (size_t k = 0; k < N_TOP_LEVEL; k++)
            known |= strcmp(root->keys[i], top_level_keys[k]) == 0;
        if (known)
            continue;
        const char *hint = bv_suggest(root->keys[i], top_level_keys, N_TOP_LEVEL);
        if (hint)
            bv_diag_add(diag, &root->key_pos[i], "unknown section '%s'; did you mean '%s'?",
                        root->keys[i], hint);
        else
            bv_diag_add(diag, &root->key_pos[i], "unknown section '%s'", root->keys[i]);
    }
    load_name(x, bv_node_get(root, "name"), path, diag);

    const bv_node *model = bv_node_get(root, "model");
    const bv_plugin *model_plugin = NULL;
    if (!model)
        bv_diag_add(diag, &(bv_pos){root->pos.file, 1, 1},
                    "missing section 'model' (e.g. model: {plugin: gcn})");
    else
        model_plugin = load_plugin_section(x, reg, model, "model", BV_KIND_MODEL, NULL,
                                           &x->model, diag);
    load_plugin_section(x, reg, bv_node_get(root, "compute"), "compute", BV_KIND_COMPUTE, "cpu",
                        &x->compute, diag);
    load_plugin_section(x, reg, bv_node_get(root, "transport"), "transport", BV_KIND_TRANSPORT,
                        "zmq", &x->transport, diag);
    load_resilience(x, reg, bv_node_get(root, "resilience"), diag);

    /* ---- the engine the model needs decides the dataset and train schemas ---- */
    /* (the graph engine's schemas check the rest when no model plugin could be found) */
    const bv_engine_ops *engine = model_plugin ? model_engine(model_plugin, model, diag)
                                               : &bv_graph_engine_ops;
    const bv_node *dataset = bv_node_get(root, "dataset");
    if (!dataset)
        bv_diag_add(diag, &(bv_pos){root->pos.file, 1, 1},
                    engine == &bv_sequence_engine_ops
                        ? "missing section 'dataset' (e.g. dataset: {text: input.txt})"
                        : "missing section 'dataset' (e.g. dataset: {name: cora})");
    const bv_node *pipeline = bv_node_get(root, "pipeline");
    bv_config_validate(pipeline, "pipeline", pipeline_schema, NULL, &x->pipeline, diag);
    if (engine) {
        bool dataset_valid = dataset && bv_config_validate(dataset, "dataset",
                                                           engine->dataset_schema, NULL,
                                                           &x->dataset, diag) == BV_OK;
        bv_config_validate(bv_node_get(root, "train"), "train", engine->train_schema, NULL,
                           &x->train, diag);
        engine->check(x, dataset, dataset_valid, diag->count == before, diag);
    }
    x->engine_ops = engine;
    bv_config_validate(bv_node_get(root, "engine"), "engine", engine_schema, NULL, &x->engine,
                       diag);
    load_cluster(x, reg, diag);
    check_gates(x, diag);
    check_functions(x, diag);
    load_prices(x, bv_node_get(root, "cost"), diag);
    bv_config_validate(bv_node_get(root, "budget"), "budget", budget_schema, NULL, &x->budget,
                       diag);
    static const char *const simulate_own[] = {"instances", NULL}; /* sim_model.c's */
    bv_config_validate(bv_node_get(root, "simulate"), "simulate", simulate_schema,
                       simulate_own, &x->simulate, diag);
    if (pipeline && x->engine_ops && strcmp(x->engine_ops->name, "sequence") != 0)
        bv_diag_add(diag, &pipeline->pos, "section 'pipeline' splits a sequence model's "
                    "layers; model %s runs on the %s engine",
                    x->model.plugin ? x->model.plugin->name : "?", x->engine_ops->name);
    const bv_node *policy = bv_node_get(root, "policy");
    if (policy) {
        static const char *const ignore[] = {"params", NULL};
        if (bv_config_validate(policy, "policy", policy_schema, ignore, &x->policy, diag) ==
            BV_OK) {
            x->has_policy = true;
            const bv_opt_value *file = bv_opts_find(&x->policy, "file");
            FILE *f = fopen(file->v.s, "r");
            if (!f)
                bv_diag_add(diag, &file->pos, "policy file %s cannot be read: %s", file->v.s,
                            strerror(errno));
            else
                fclose(f);
        }
        if (policy->kind == BV_NODE_MAP)
            load_policy_params(x, policy, diag);
        if (x->has_policy && policy_script && diag->count == before) {
            collect_exports(x, diag);
            check_policy_script(x, diag);
        }
    }
    /* out of memory on the way: whatever else was reported, say so, and say it is that */
    if (bv_alloc_failures() != failures_before) {
        bool said = false;
        for (size_t i = before; i < diag->count; i++)
            said |= strncmp(diag->entries[i].msg ? diag->entries[i].msg : "", "out of memory",
                            13) == 0;
        if (!said)
            bv_diag_add(diag, NULL, "out of memory while loading %s", path);
        bv_experiment_free(x);
        return BV_ERR_NOMEM;
    }
    if (diag->count > before) {
        bv_experiment_free(x);
        return BV_ERR_INVALID;
    }
    /* the model's own cross-option checks, once everything else is known to be valid */
    if (x->engine_ops->check_model && x->engine_ops->check_model(x, diag) != BV_OK) {
        bv_experiment_free(x);
        return BV_ERR_INVALID;
    }
    bv_ops_copy(&x->compute_ops, sizeof x->compute_ops, x->compute.plugin);
    /* Before any data is loaded: the engines' buffers then come from the backend's memory. */
    if (x->compute_ops.mem_alloc && x->compute_ops.mem_free &&
        bv_mem_install(x->compute_ops.mem_alloc, x->compute_ops.mem_free) != 0)
        bv_diag_add(diag, NULL, "compute: a process can use one backend's memory, and "
                    "another's is in use");
    bv_ops_copy(&x->transport_ops, sizeof x->transport_ops, x->transport.plugin);
    if (x->cloud.plugin)
        bv_ops_copy(&x->cloud_ops, sizeof x->cloud_ops, x->cloud.plugin);
    for (size_t i = 0; i < x->nresilience; i++)
        bv_ops_copy(&x->resilience_ops[i], sizeof x->resilience_ops[i],
                    x->resilience[i].plugin);
    *out = x;
    return BV_OK;
}

bv_status bv_experiment_load(const char *path, char *const *overrides, size_t noverrides,
                             bv_registry *reg, bv_experiment **out, bv_diag *diag)
{
    return load(path, overrides, noverrides, reg, true, out, diag);
}

bv_status bv_experiment_load_for_role(const char *path, bv_registry *reg, bv_experiment **out,
                                      bv_diag *diag)
{
    return load(path, NULL, 0, reg, false, out, diag);
}
