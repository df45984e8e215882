/* `bivouac simulate EXP.yaml`: the experiment's pipeline training on a cloud with a
 * simulated clock (`cloud: {plugin: sim}`), run --runs times with seeds seed, seed + 1,
 * ...; prints the Table-3-style summary (Bamboo section 6.2: means and spreads over the
 * runs) and, with --out DIR, writes DIR/summary.json, DIR/result.json (in a real run's
 * terms), the first run's DIR/metrics.jsonl and its curves, and the runs' distributions
 * (DIR/distribution/) (docs/simulation.md). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "cli.h"
#include "clock.h"
#include "experiment.h"
#include "input_file.h"
#include "json_out.h"
#include "json_read.h"
#include "ledger.h"
#include "plot.h"
#include "plugin_defaults.h"
#include "registry.h"
#include "sim.h"
#include "sorted.h"

#define MAX_OVERRIDES 256
#define RUNS_MAX 100000
#define SEED_MAX 9007199254740992LL /* 2^53 */

typedef struct sim_args {
    const char *experiment, *out;
    char *overrides[MAX_OVERRIDES];
    size_t noverrides;
    long long runs, seed; /* 0, -1: from the experiment */
    int quiet, no_plot;
} sim_args;

/* The columns of the summary: a result's field, how it is printed and named in JSON. */
typedef struct column {
    const char *key, *label, *unit;
    size_t offset;
} column;

#define COL(key, label, unit, field) {key, label, unit, offsetof(bv_sim_result, field)}
static const column columns[] = {
    COL("preemptions", "preemptions", "preemptions", preemptions),
    COL("interval_hours", "interval (h)", "h between preemptions", interval_hours),
    COL("lifetime_hours", "lifetime (h)", "h a node lives", lifetime_hours),
    COL("fatal_failures", "fatal failures", "restarts", fatal),
    COL("nodes", "nodes", "nodes", nodes),
    COL("throughput", "throughput (samples/s)", "samples/s", throughput),
    COL("cost_per_hour", "cost ($/h)", "USD/h", cost_per_hour),
    COL("value", "value (samples/s per $/h)", "samples/s per USD/h", value),
    COL("hours", "time (h)", "h a run takes", hours),
    COL("useful_fraction", "useful time", "fraction", useful_fraction),
    COL("failovers", "failovers", "failovers", failovers),
    COL("reconfigurations", "reconfigurations", "reconfigurations", reconfigurations),
    COL("instance_switches", "instance switches", "moves to another instance type",
        instance_switches),
    COL("usd", "cost ($)", "USD", usd),
};
#define NCOLUMNS (sizeof columns / sizeof columns[0])

static double field(const bv_sim_result *r, const column *c)
{
    return *(const double *)((const char *)r + c->offset);
}

/* Mean, sample standard deviation, minimum and maximum of a column over n runs. */
static void stats(const bv_sim_result *r, size_t n, const column *c, double out[4])
{
    double sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double v = field(&r[i], c);
        sum += v;
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    double mean = sum / (double)n;
    for (size_t i = 0; i < n; i++)
        sq += (field(&r[i], c) - mean) * (field(&r[i], c) - mean);
    out[0] = mean;
    out[1] = n > 1 ? sqrt(sq / (double)(n - 1)) : 0;
    out[2] = lo;
    out[3] = hi;
}

static int parse_args(int argc, char **argv, sim_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool takes_value = !strcmp(arg, "-s") || !strcmp(arg, "--set") ||
                           !strcmp(arg, "--out") || !strcmp(arg, "--seed") ||
                           !strcmp(arg, "--runs");
        if (takes_value && i + 1 >= argc)
            return bv_cli_fail(BV_EXIT_USAGE, "%s needs a value", arg);
        if (!strcmp(arg, "-s") || !strcmp(arg, "--set")) {
            if (bv_cli_override_arg(argv[++i], a->overrides, &a->noverrides, MAX_OVERRIDES))
                return BV_EXIT_USAGE;
        } else if (!strcmp(arg, "--out")) {
            a->out = argv[++i];
        } else if (!strcmp(arg, "--seed")) {
            if (bv_cli_int_arg(arg, argv[++i], 0, SEED_MAX, &a->seed))
                return BV_EXIT_USAGE;
        } else if (!strcmp(arg, "--runs")) {
            if (bv_cli_int_arg(arg, argv[++i], 1, RUNS_MAX, &a->runs))
                return BV_EXIT_USAGE;
        } else if (!strcmp(arg, "--quiet") || !strcmp(arg, "-q")) {
            a->quiet = 1;
        } else if (!strcmp(arg, "--no-plot")) {
            a->no_plot = 1;
        } else if (arg[0] == '-') {
            return bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' (see bivouac --help)", arg);
        } else if (!a->experiment) {
            a->experiment = arg;
        } else {
            return bv_cli_fail(BV_EXIT_USAGE, "unexpected argument '%s'", arg);
        }
    }
    if (!a->experiment)
        return bv_cli_fail(BV_EXIT_USAGE, "simulate needs an experiment file: bivouac "
                           "simulate EXP.yaml");
    return 0;
}

/* Where the experiment cannot be simulated: no cloud with a simulated clock, or a model
 * that does not train in pipelines. */
static bool simulable(const bv_experiment *x, bv_diag *d)
{
    const bv_node *cloud = bv_node_get(x->root, "cloud");
    if (!x->cloud.plugin || !x->cloud_ops.next_event || !x->cloud_ops.advance) {
        bv_diag_add(d, cloud ? &cloud->pos : NULL, "simulate needs a cloud with a simulated "
                    "clock, cloud: {plugin: sim}; %s%s%s", x->cloud.plugin ? "cloud '" : "",
                    x->cloud.plugin ? x->cloud.plugin->name : "this experiment has no cloud",
                    x->cloud.plugin ? "' runs in real time" : "");
        return false;
    }
    bv_compute_ops compute = {0};
    bv_ops_copy(&compute, sizeof compute, x->compute.plugin);
    if (strcmp(x->engine_ops->name, "graph") == 0 &&
        compute.task_placement != BV_TASKS_ON_FUNCTIONS) {
        const bv_node *c = bv_node_get(x->root, "compute");
        bv_diag_add(d, c ? &c->pos : NULL, "simulate runs a graph model's tensor tasks on "
                    "serverless functions (compute: {plugin: lambda}); compute '%s' runs "
                    "them on tensor workers, which are not simulated", x->compute.plugin->name);
        return false;
    }
    /* a cloud that cannot be made (a malformed option, an unreadable trace) is the
     * experiment's error, said where the cloud is, before any run */
    char dir[4096];
    bv_experiment_dir(x, dir, sizeof dir);
    bv_run_info info = {NULL, dir, 0};
    bv_error err = {0};
    bv_cloud *c = x->cloud_ops.create(&x->cloud.opts, &info, &err);
    if (!c) {
        bv_diag_add(d, &cloud->pos, "%s", err.msg);
        return false;
    }
    x->cloud_ops.destroy(c);
    const bv_opt_value *trace = bv_opts_find(&x->cloud.opts, "trace");
    if (trace && trace->from_user && !bv_opts_bool(&x->cost, "spot"))
        bv_log(BV_LOG_WARN, "cost.spot is false: the nodes are on demand, which the trace "
               "does not preempt (set cost.spot: true to replay it on them)");
    return true;
}

static void print_summary(FILE *f, const bv_experiment *x, const bv_sim_result *r, size_t n,
                          unsigned long long seed)
{
    size_t done = 0;
    for (size_t i = 0; i < n; i++)
        done += r[i].finished;
    fprintf(f, "%s: %zu simulated run%s (seeds %llu to %llu), %zu finished\n", x->name, n,
            n == 1 ? "" : "s", seed, seed + n - 1, done);
    fprintf(f, "  %-27s %12s %12s %12s %12s\n", "", "mean", "std", "min", "max");
    for (size_t c = 0; c < NCOLUMNS; c++) {
        double s[4];
        stats(r, n, &columns[c], s);
        fprintf(f, "  %-27s %12.4g %12.4g %12.4g %12.4g\n", columns[c].label, s[0], s[1], s[2],
                s[3]);
    }
}

/* Closes f, written to tmp, and renames it to path: 0, or -1 (tmp removed). */
static int commit(FILE *f, const char *tmp, const char *path)
{
    bool ok = !ferror(f);
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int write_json(const char *path, const bv_experiment *x, const bv_sim_model *m,
                      const bv_sim_result *r, size_t n, unsigned long long seed)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    size_t done = 0;
    for (size_t i = 0; i < n; i++)
        done += r[i].finished;
    fputs("{\"experiment\": ", f);
    bv_json_string(f, x->name);
    fprintf(f, ", \"simulated\": true, \"cloud\": ");
    bv_json_string(f, x->cloud.plugin->name);
    fprintf(f, ", \"runs\": %zu, \"seed\": %llu, \"finished\": %zu", n, seed, done);
    fprintf(f, ", \"pipeline_stages\": %d, \"pipelines\": %d", m->stages, m->pipelines);
    bv_json_field(f, "samples", m->samples);
    bv_json_field(f, "step_seconds",
                  bv_sim_step_seconds(m, 0, m->stages, m->pipelines, false, false));
    bv_json_field(f, "failover_pause_seconds", m->failover_seconds);
    bv_json_field(f, "degraded_slowdown", m->degraded_slowdown);
    bv_json_field(f, "reconfigure_seconds", m->reconfigure_seconds);
    bv_json_field(f, "restart_seconds", m->restart_seconds);
    fprintf(f, ", \"checkpoint_steps\": %lld, \"redundancy\": %s", (long long)m->checkpoint_steps,
            m->redundancy ? "true" : "false");
    if (m->profile[0]) {
        fputs(", \"profile\": ", f);
        bv_json_string(f, m->profile);
    }
    fputs(", \"instance_types\": [", f);
    for (int k = 0; k < m->ntypes; k++) {
        fprintf(f, "%s{\"instance\": ", k ? ", " : "");
        bv_json_string(f, m->types[k].name);
        bv_json_field(f, "step_seconds", m->types[k].step);
        bv_json_field(f, "usd_per_hour", m->types[k].usd_per_hour);
        fputc('}', f);
    }
    fputc(']', f);
    for (size_t c = 0; c < NCOLUMNS; c++) {
        double s[4];
        stats(r, n, &columns[c], s);
        bv_json_field(f, columns[c].key, s[0]);
        char key[64];
        snprintf(key, sizeof key, "%s_std", columns[c].key);
        bv_json_field(f, key, s[1]);
    }
    /* the name a real run's result.json gives the cost */
    for (size_t c = 0; c < NCOLUMNS; c++)
        if (strcmp(columns[c].key, "usd") == 0) {
            double s[4];
            stats(r, n, &columns[c], s);
            bv_json_field(f, "cost_usd", s[0]);
        }
    fputs(", \"per_run\": [", f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s{\"seed\": %llu, \"finished\": %s", i ? ", " : "", seed + i,
                r[i].finished ? "true" : "false");
        for (size_t c = 0; c < NCOLUMNS; c++)
            bv_json_field(f, columns[c].key, field(&r[i], &columns[c]));
        fputc('}', f);
    }
    fputs("]}\n", f);
    return commit(f, tmp, path);
}

/* DIR/result.json in a real run's terms (a --repeat run's, the runs its seeds), so that
 * bivouac compare and the scripts that read real runs read simulated ones: the steps, the
 * (simulated) wall seconds, the cost, the value 1/(T C) as a real run's, Bamboo's value
 * (samples/s per $/h) as bamboo_value. */
static int write_result(const char *dir, const bv_experiment *x, const bv_sim_result *r,
                        size_t n, unsigned long long seed)
{
    char path[4300], tmp[4400];
    snprintf(path, sizeof path, "%s/result.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    double steps = 0, wall = 0, usd = 0, value = 0;
    for (size_t i = 0; i < n; i++) {
        double t = r[i].hours * 3600;
        steps += r[i].steps / (double)n;
        wall += t / (double)n;
        usd += r[i].usd / (double)n;
        value += (t > 0 && r[i].usd > 0 ? 1 / (t * r[i].usd) : 0) / (double)n;
    }
    fputs("{\"experiment\": ", f);
    bv_json_string(f, x->name);
    fputs(", \"model\": ", f);
    bv_json_string(f, x->model.plugin->name);
    fputs(", \"dataset\": ", f);
    bv_json_string(f, x->dataset_label ? x->dataset_label : "?");
    fprintf(f, ", \"simulated\": true, \"seed\": %llu", seed);
    bv_json_field(f, "steps", steps);
    bv_json_field(f, "wall_seconds", wall);
    bv_json_field(f, "cost_usd", usd);
    bv_json_field(f, "value", value);
    fputs(", \"runs\": [", f);
    for (size_t i = 0; i < n; i++) {
        double t = r[i].hours * 3600;
        fprintf(f, "%s{\"seed\": %llu", i ? ", " : "", seed + i);
        bv_json_field(f, "steps", r[i].steps);
        bv_json_field(f, "wall_seconds", t);
        bv_json_field(f, "samples_per_second", r[i].throughput);
        bv_json_field(f, "cost_usd", r[i].usd);
        bv_json_field(f, "value", t > 0 && r[i].usd > 0 ? 1 / (t * r[i].usd) : 0);
        bv_json_field(f, "bamboo_value", r[i].value);
        fputc('}', f);
    }
    fputs("]}\n", f);
    return commit(f, tmp, path);
}

/* DIR/distribution/metrics.jsonl: each figure's values over the runs, sorted (the figure
 * of rank k is the k-th smallest), which plot draws as the batch's distributions. */
static int write_distribution(const char *dir, const bv_sim_result *r, size_t n)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/distribution", dir);
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return -1;
    snprintf(path, sizeof path, "%s/distribution/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    double *v = malloc(n * sizeof *v);
    bool ok = f && v;
    for (size_t c = 0; ok && c < NCOLUMNS; c++) {
        for (size_t i = 0; i < n; i++)
            v[i] = field(&r[i], &columns[c]);
        bv_sort_doubles(v, n);
        for (size_t i = 0; i < n; i++) {
            fprintf(f, "{\"rank\": %zu, \"series\": \"%s\", \"unit\": \"%s\"", i + 1,
                    columns[c].key, columns[c].unit);
            bv_json_field(f, "value", v[i]);
            fprintf(f, ", \"seconds\": %zu}\n", i + 1);
        }
    }
    free(v);
    ok &= f && !ferror(f);
    if (f)
        ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

/* The first run's curves (DIR/curves.png) and the runs' distributions
 * (DIR/distribution/curves.png). */
static void plot(const char *dir, const sim_args *a)
{
    const char *why = "";
    const bv_plot_module *pm = a->no_plot ? NULL : bv_cli_plot_module(&why);
    bv_plot_options o = {.x = BV_PLOT_X_TIME};
    bv_error err = {0};
    char dist[4300];
    snprintf(dist, sizeof dist, "%s/distribution", dir);
    bv_plot_options od = {.x = BV_PLOT_X_UNIT};
    if (!a->no_plot && !pm)
        bv_log(BV_LOG_WARN, "no curves drawn (the plot module cannot be loaded: %s)", why);
    else if (pm && (pm->plot_dir(dir, &o, &err) != BV_OK || pm->plot_dir(dist, &od, &err) != BV_OK))
        bv_log(BV_LOG_WARN, "no curves drawn for %s: %s", dir, err.msg);
}

/* Whether DIR holds a real run (its run.yaml, or a result.json that is not a
 * simulation's): simulate does not write over one. */
static bool holds_real_run(const char *dir)
{
    char path[4300], *text = NULL;
    size_t len = 0;
    bv_error err = {0};
    snprintf(path, sizeof path, "%s/run.yaml", dir);
    if (access(path, F_OK) == 0)
        return true;
    snprintf(path, sizeof path, "%s/result.json", dir);
    if (access(path, F_OK) != 0)
        return false;
    if (bv_input_read(path, (uint64_t)1 << 30, "a result", "BIVOUAC_MAX_PROFILE_BYTES", &text,
                      &len, &err) != BV_OK)
        return true;
    bv_json v;
    bool parsed = bv_json_parse(text, len, &v);
    const bv_json *flag = parsed ? bv_json_get(&v, "simulated") : NULL;
    bool sim = flag && flag->type == BV_JSON_BOOL && flag->number == 1;
    if (parsed)
        bv_json_free(&v);
    free(text);
    return !sim;
}

static int simulate_all(bv_experiment *x, const bv_sim_model *m, const sim_args *a)
{
    size_t n = a->runs ? (size_t)a->runs : (size_t)bv_opts_int(&x->simulate, "runs");
    unsigned long long seed = a->seed >= 0 ? (unsigned long long)a->seed
                                           : (unsigned long long)bv_opts_int(&x->train, "seed");
    bv_sim_result *r = calloc(n, sizeof *r);
    if (!r)
        return bv_cli_fail(BV_EXIT_FAILED, "out of memory");
    char path[4200];
    FILE *metrics = NULL;
    if (a->out && holds_real_run(a->out)) {
        free(r);
        return bv_cli_fail(BV_EXIT_USAGE, "%s holds a run of bivouac run: simulate writes "
                           "its results elsewhere (another --out)", a->out);
    }
    if (a->out) {
        if (mkdir(a->out, 0777) != 0 && errno != EEXIST) {
            free(r);
            return bv_cli_fail(BV_EXIT_FAILED, "cannot create %s: %s", a->out, strerror(errno));
        }
        snprintf(path, sizeof path, "%s/metrics.jsonl", a->out);
        if (!(metrics = fopen(path, "w"))) {
            free(r);
            return bv_cli_fail(BV_EXIT_FAILED, "cannot write %s: %s", path, strerror(errno));
        }
    }
    bool progress = !a->quiet && isatty(STDERR_FILENO);
    double t0 = bv_now_seconds();
    int code = BV_EXIT_OK;
    for (size_t i = 0; i < n && code == BV_EXIT_OK; i++) {
        bv_error err = {0};
        bv_policy *policy = NULL;
        if (x->has_policy && !x->policy_broken &&
            bv_experiment_load_policy(x, &policy, &err) != BV_OK) {
            code = bv_cli_fail(BV_EXIT_USAGE, "%s", err.msg);
            break;
        }
        if (bv_sim_run(x, m, seed + i, policy, i == 0 ? metrics : NULL, &r[i], &err) != BV_OK)
            code = bv_cli_fail(err.status == BV_ERR_INVALID ? BV_EXIT_USAGE : BV_EXIT_FAILED,
                               "simulated run %zu (seed %llu): %s", i + 1, seed + i, err.msg);
        bv_policy_free(policy);
        if (progress)
            fprintf(stderr, "\r\033[Ksimulated %zu/%zu runs, %.1f s", i + 1, n,
                    bv_now_seconds() - t0);
    }
    if (progress)
        fputs("\r\033[K", stderr);
    if (metrics && fclose(metrics) != 0 && code == BV_EXIT_OK)
        code = bv_cli_fail(BV_EXIT_FAILED, "cannot write %s/metrics.jsonl", a->out);
    if (code == BV_EXIT_OK) {
        print_summary(stdout, x, r, n, seed);
        fflush(stdout);
        if (a->out) {
            snprintf(path, sizeof path, "%s/summary.json", a->out);
            if (write_json(path, x, m, r, n, seed) != 0)
                code = bv_cli_fail(BV_EXIT_FAILED, "cannot write %s", path);
            else if (write_result(a->out, x, r, n, seed) != 0)
                code = bv_cli_fail(BV_EXIT_FAILED, "cannot write %s/result.json", a->out);
            else if (write_distribution(a->out, r, n) != 0)
                code = bv_cli_fail(BV_EXIT_FAILED, "cannot write %s/distribution", a->out);
            else
                plot(a->out, a);
        }
        fprintf(stderr, "%zu simulated run%s in %.2f s%s%s\n", n, n == 1 ? "" : "s",
                bv_now_seconds() - t0, a->out ? " -> " : "", a->out ? path : "");
    }
    free(r);
    return code;
}

int bv_cli_simulate(int argc, char **argv)
{
    sim_args a = {.seed = -1};
    int code = parse_args(argc, argv, &a);
    if (code)
        return code;
    bv_registry *reg = bv_registry_new();
    bv_diag d;
    bv_diag_init(&d);
    bv_experiment *x = NULL;
    bv_sim_model m;
    bv_status st = bv_experiment_load(a.experiment, a.overrides, a.noverrides, reg, &x, &d);
    if (st == BV_OK && (!simulable(x, &d) || bv_sim_model_load(x, &m, &d) != BV_OK))
        st = BV_ERR_INVALID;
    if (st == BV_OK && x->prices.ninstances == 0) { /* no cost: section: the defaults, as a
                                                       run reads them when it starts */
        bv_error err = {0};
        if (bv_prices_load(bv_opts_str(&x->cost, "prices"), NULL, &x->prices, &err) != BV_OK)
            bv_diag_add(&d, NULL, "%s", err.msg);
        st = d.count ? BV_ERR_INVALID : BV_OK;
    }
    if (st != BV_OK) {
        bv_cli_print_diag(&d);
        code = st == BV_ERR_NOMEM ? BV_EXIT_FAILED : BV_EXIT_USAGE;
    }
    bv_diag_free(&d);
    if (code == BV_EXIT_OK)
        code = simulate_all(x, &m, &a);
    bv_experiment_free(x);
    bv_registry_free(reg);
    return code;
}
