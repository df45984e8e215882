/* `bivouac run`: validate, load the data, train (once or for --repeat seeds), write
 * DIR/metrics.jsonl, DIR/result.json, and print a one-line summary. */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bivouac/log.h"
#include "cli.h"
#include "clock.h"
#include "config.h"
#include "experiment.h"
#include "plot.h"
#include "registry.h"
#include "run_dir.h"
#include "train.h"

#define MAX_OVERRIDES 256

typedef struct run_args {
    const char *experiment;
    char *overrides[MAX_OVERRIDES];
    size_t noverrides;
    const char *out;
    const char *resume;
    long long seed; /* -1: train.seed */
    long long repeat;
    int quiet;
    int force; /* --force: replace the run DIR holds */
    int no_plot;
    int x_time; /* --x time: the curves against wall time */
    const char *tensorboard; /* --tensorboard DIR: the series as TensorBoard event files */
} run_args;

static int mkdir_p(const char *path)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return (mkdir(buf, 0755) == 0 || errno == EEXIST) ? 0 : -1;
}

/* The ranges of the numeric flags (listed in `bivouac --help`): a seed as train.seed's
 * (integers a double holds exactly, as result.json records it), and a number of seeds
 * that keeps DIR/seed-N/ browsable. */
#define SEED_MAX 9007199254740992LL /* 2^53 */
#define REPEAT_MAX 1000

static int parse_args(int argc, char **argv, run_args *a, bool allow_run_flags)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = !strcmp(arg, "-s") || !strcmp(arg, "--set") ||
                           !strcmp(arg, "--out") || !strcmp(arg, "--seed") ||
                           !strcmp(arg, "--repeat") || !strcmp(arg, "--resume") ||
                           (allow_run_flags && (!strcmp(arg, "--x") ||
                                                !strcmp(arg, "--tensorboard")));
        if (takes_value && !val)
            return bv_cli_fail(BV_EXIT_USAGE, "%s needs a value", arg);
        if (!strcmp(arg, "-s") || !strcmp(arg, "--set")) {
            if (bv_cli_override_arg(argv[++i], a->overrides, &a->noverrides, MAX_OVERRIDES))
                return BV_EXIT_USAGE;
        } else if (allow_run_flags && !strcmp(arg, "--out")) {
            a->out = argv[++i];
        } else if (allow_run_flags && !strcmp(arg, "--seed")) {
            if (bv_cli_int_arg(arg, argv[++i], 0, SEED_MAX, &a->seed))
                return BV_EXIT_USAGE;
        } else if (allow_run_flags && !strcmp(arg, "--repeat")) {
            if (bv_cli_int_arg(arg, argv[++i], 1, REPEAT_MAX, &a->repeat))
                return BV_EXIT_USAGE;
        } else if (allow_run_flags && !strcmp(arg, "--resume")) {
            a->resume = argv[++i];
        } else if (allow_run_flags && (!strcmp(arg, "--quiet") || !strcmp(arg, "-q"))) {
            a->quiet = 1;
        } else if (allow_run_flags && !strcmp(arg, "--force")) {
            a->force = 1;
        } else if (allow_run_flags && !strcmp(arg, "--tensorboard")) {
            a->tensorboard = argv[++i];
        } else if (allow_run_flags && !strcmp(arg, "--no-plot")) {
            a->no_plot = 1;
        } else if (allow_run_flags && !strcmp(arg, "--x")) {
            const char *x = argv[++i];
            if (strcmp(x, "time") != 0 && strcmp(x, "step") != 0 && strcmp(x, "epoch") != 0)
                return bv_cli_fail(BV_EXIT_USAGE, "--x takes 'step' (or 'epoch') or 'time', "
                                   "got '%s'", x);
            a->x_time = !strcmp(x, "time");
        } else if (arg[0] == '-') {
            return bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' (see bivouac --help)", arg);
        } else if (!a->experiment) {
            a->experiment = arg;
        } else {
            return bv_cli_fail(BV_EXIT_USAGE, "unexpected argument '%s'", arg);
        }
    }
    return 0;
}

/* DIR/run.yaml records how the run was started: the experiment file (and a checksum of its
 * bytes, so that --resume can tell it was edited since), the seed, the repeat count and
 * the overrides (already applied in DIR/experiment.yaml, which --resume runs). */
static int write_run_file(const char *dir, const char *experiment, const run_args *a,
                          unsigned long long seed)
{
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/run.yaml", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    char *abs = realpath(experiment, NULL);
    bv_node *root = NULL;
    bv_diag d;
    bv_diag_init(&d);
    /* Built as YAML text through the config module's emitter, so quoting is right. */
    char buf[64];
    snprintf(buf, sizeof buf, "seed=%llu", seed);
    bv_config_load_string("{}", "run.yaml", &root, &d);
    int rc = root ? 0 : -1;
    if (!rc) {
        char *set = malloc(strlen(abs ? abs : experiment) + 16);
        sprintf(set, "experiment=%s", abs ? abs : experiment);
        /* values that look like YAML flow would be parsed; paths never start with [ or { */
        rc |= bv_config_override(root, set, &d) != BV_OK;
        rc |= bv_config_override(root, buf, &d) != BV_OK;
        snprintf(buf, sizeof buf, "repeat=%lld", a->repeat);
        rc |= bv_config_override(root, buf, &d) != BV_OK;
        unsigned crc;
        if (bv_run_dir_file_crc(experiment, &crc)) {
            snprintf(buf, sizeof buf, "experiment_crc32c=%08x", crc);
            rc |= bv_config_override(root, buf, &d) != BV_OK;
        }
        free(set);
        for (size_t i = 0; i < a->noverrides && !rc; i++) {
            char key[64];
            snprintf(key, sizeof key, "overrides.o%04zu=", i);
            char *set2 = malloc(strlen(key) + strlen(a->overrides[i]) + 4);
            sprintf(set2, "%s%s", key, a->overrides[i]);
            rc |= bv_config_override(root, set2, &d) != BV_OK;
            free(set2);
        }
    }
    char *text = rc ? NULL : bv_node_to_yaml(root);
    FILE *f = text ? fopen(tmp, "w") : NULL;
    if (f) {
        fputs(text, f);
        rc = fclose(f) != 0 || rename(tmp, path) != 0;
    } else {
        rc = -1;
    }
    free(text);
    free(abs);
    bv_node_free(root);
    bv_diag_free(&d);
    return rc;
}

/* --resume DIR: the seed and repeat count from DIR/run.yaml. The experiment is DIR's own
 * copy (overrides applied, paths absolute): the file the run started from may since have
 * been edited or deleted, and an edit is worth only a warning. */
static int read_run_file(const char *dir, run_args *a)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/run.yaml", dir);
    bv_diag d;
    bv_diag_init(&d);
    bv_node *root = NULL;
    if (bv_config_load_file(path, &root, &d) != BV_OK) {
        bv_cli_print_diag(&d);
        bv_diag_free(&d);
        return bv_cli_fail(BV_EXIT_USAGE, "%s is not a bivouac run directory", dir);
    }
    bv_diag_free(&d);
    const bv_node *exp = bv_node_get(root, "experiment");
    const bv_node *seed = bv_node_get(root, "seed");
    if (!exp || exp->kind != BV_NODE_SCALAR || !seed || seed->kind != BV_NODE_SCALAR) {
        bv_node_free(root);
        return bv_cli_fail(BV_EXIT_USAGE, "%s: missing 'experiment' or 'seed'", path);
    }
    a->seed = strtoll(seed->scalar, NULL, 10);
    const bv_node *repeat = bv_node_get(root, "repeat");
    if (repeat && repeat->kind == BV_NODE_SCALAR)
        a->repeat = strtoll(repeat->scalar, NULL, 10) > 0 ? strtoll(repeat->scalar, NULL, 10) : 1;
    const bv_node *crc = bv_node_get(root, "experiment_crc32c");
    unsigned now;
    if (crc && crc->kind == BV_NODE_SCALAR && bv_run_dir_file_crc(exp->scalar, &now) &&
        strtoul(crc->scalar, NULL, 16) != now)
        bv_log(BV_LOG_WARN, "%s changed since the run started; resuming with the run's copy "
               "%s/experiment.yaml", exp->scalar, dir);
    bv_node_free(root);
    return 0;
}

static void default_out_dir(const bv_experiment *x, char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    snprintf(buf, len, "runs/%s-%s", x->name, stamp);
}

/* The headline of a --repeat summary line: "test accuracy 0.8141 +- 0.0096". */
static void headline_text(const bv_run_result *runs, long long n, char *buf, size_t len)
{
    const bv_result_field *h = bv_result_headline(&runs[0]);
    if (!h) {
        snprintf(buf, len, "%lld seeds done", n);
        return;
    }
    double mean, std;
    bv_result_mean_std(runs, (size_t)n, (size_t)(h - runs[0].fields), &mean, &std);
    char name[64];
    snprintf(name, sizeof name, "%s", h->name);
    for (char *p = name; *p; p++)
        if (*p == '_')
            *p = ' ';
    snprintf(buf, len, "%s %.4f +- %.4f", name, mean, std);
}

/* DIR/curves.png and .svg, after training and outside its timing: a picture that cannot
 * be drawn (no fonts, a full disk) costs a warning, never the run. */
static void plot_run(const char *dir, const run_args *a)
{
    static bool said; /* a missing module is said once, not once per seed */
    const char *why = "";
    const bv_plot_module *m = bv_cli_plot_module(&why);
    if (!m) {
        if (!said)
            bv_log(BV_LOG_WARN, "no curves drawn (the plot module cannot be loaded: %s); "
                   "the run's results are complete", why);
        said = true;
        return;
    }
    bv_plot_options o = {.x = a->x_time ? BV_PLOT_X_TIME : BV_PLOT_X_UNIT};
    bv_error err = {0};
    if (!a->no_plot && m->plot_dir(dir, &o, &err) != BV_OK)
        bv_log(BV_LOG_WARN, "no curves drawn for %s: %s", dir, err.msg);
    if (a->tensorboard && m->tensorboard_dir(dir, a->tensorboard, &err) != BV_OK)
        bv_log(BV_LOG_WARN, "no TensorBoard events written: %s", err.msg);
}

/* The most memory this process has held so far, in MiB. */
static double peak_rss_mb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
}

/* Trains seeds seed0 .. seed0+repeat-1 (into DIR/seed-N/ when more than one) and writes
 * DIR/result.json over the seeds that produced something. */
static int train_all(bv_experiment *x, void *data, double load_seconds, const char *out,
                     const run_args *a, unsigned long long seed0)
{
    long long n = a->repeat;
    bv_run_result *runs = calloc((size_t)n, sizeof *runs);
    uint64_t *seeds = calloc((size_t)n, sizeof *seeds);
    if (!runs || !seeds) {
        free(runs);
        free(seeds);
        return bv_cli_fail(BV_EXIT_FAILED, "out of memory");
    }
    const char *kill_env = getenv("BIVOUAC_FAULT_KILL_AFTER_EPOCH");
    int code = BV_EXIT_OK;
    for (long long i = 0; i < n && code == BV_EXIT_OK; i++) {
        seeds[i] = seed0 + (unsigned long long)i;
        char dir[4200];
        if (n > 1)
            snprintf(dir, sizeof dir, "%s/seed-%llu", out, (unsigned long long)seeds[i]);
        else
            snprintf(dir, sizeof dir, "%s", out);
        if (mkdir_p(dir) != 0) {
            code = bv_cli_fail(BV_EXIT_FAILED, "cannot create %s: %s", dir, strerror(errno));
            break;
        }
        /* Resuming --repeat seeds: those never started (no checkpoint directory) start;
         * the others, finished or not, continue from their newest checkpoint. */
        char ckpt[4300];
        snprintf(ckpt, sizeof ckpt, "%s/checkpoints", dir);
        struct stat ck;
        bool started = n == 1 || (stat(ckpt, &ck) == 0 && S_ISDIR(ck.st_mode));
        bv_train_options o = {
            .out_dir = dir,
            .run_dir = out,
            .seed = seeds[i],
            .resume = a->resume != NULL && started,
            .progress = !a->quiet && isatty(STDERR_FILENO),
            .kill_after = kill_env ? strtoll(kill_env, NULL, 10) : 0,
            /* the first seed runs the policy validation set up; the others a fresh one */
            .policy = bv_experiment_take_policy(x),
        };
        bv_error err = {0};
        if (bv_train(x, data, &o, &runs[i], &err) != BV_OK) {
            code = bv_cli_fail(err.status == BV_ERR_INVALID ? BV_EXIT_USAGE : BV_EXIT_FAILED,
                               "%s", err.msg);
            break;
        }
        runs[i].load_seconds = load_seconds; /* shared by the seeds: read once */
        runs[i].peak_rss_mb = peak_rss_mb();
        if (runs[i].failed)
            code = bv_cli_fail(BV_EXIT_FAILED, "run stopped: %s", runs[i].stop_reason);
        if (n > 1)
            bv_result_write(dir, x, &runs[i], &seeds[i], 1);
        if (n > 1 && !a->no_plot && runs[i].units > 0) { /* a seed's own; the run's below */
            run_args seed_only = *a;
            seed_only.tensorboard = NULL; /* written once, for every seed, below */
            plot_run(dir, &seed_only);
        }
        if (n > 1) {
            if (!a->quiet)
                printf("seed %llu: %s\n", (unsigned long long)seeds[i], runs[i].brief);
        }
    }
    if (code == BV_EXIT_OK || runs[0].units > 0) {
        long long done = 0;
        while (done < n && runs[done].units > 0)
            done++;
        if (done > 0 && bv_result_write(out, x, runs, seeds, (size_t)done) != 0)
            code = bv_cli_fail(BV_EXIT_FAILED, "cannot write %s/result.json", out);
        else if (done > 0 && (!a->no_plot || a->tensorboard)) /* after result.json */
            plot_run(out, a);
        if (code == BV_EXIT_OK) {
            if (n == 1) {
                printf("%s on %s: %s -> %s/result.json\n", x->model.plugin->name,
                       x->dataset_label, runs[0].summary, out);
            } else {
                char head[128];
                headline_text(runs, n, head, sizeof head);
                printf("%s on %s: %s over %lld seeds in %.2f s -> %s/result.json\n",
                       x->model.plugin->name, x->dataset_label, head, n,
                       bv_result_wall_total(runs, (size_t)n), out);
            }
        }
    }
    free(runs);
    free(seeds);
    return code;
}

int bv_cli_run(int argc, char **argv)
{
    run_args a = {.seed = -1, .repeat = 1};
    int rc = parse_args(argc, argv, &a, true);
    if (rc)
        return rc;
    /* glibc raises its mmap threshold (to up to 32 MiB) each time a mapped block is freed,
     * after which blocks that size come from the heap and freed ones stay resident (up to
     * twice the threshold per thread's arena): on the wide-sparse GCN of bench/ that was
     * 20 of its 69 MB peak. The embedded run's hot paths keep their large buffers instead
     * of allocating them per task (the tensor workers' scratch, bv_task_ctx.scratch), so
     * the threshold stays at 128 KiB and a large block goes back to the kernel when freed:
     * the peak is what is live. (A role process, whose messages are allocated per task,
     * does the opposite: cli_role.c.) */
    mallopt(M_TRIM_THRESHOLD, 4 << 20);
    char *experiment = (char *)a.experiment;
    char copy[4200];
    if (a.resume) {
        /* what a resumed run may change: how the model is cut into stages and pipelines
         * (the checkpoint's state is per layer, so any cut reads it), and the cloud it
         * runs on (a restart lands elsewhere; a replayed trace goes on where it was) */
        for (size_t i = 0; i < a.noverrides; i++)
            if (strncmp(a.overrides[i], "pipeline.", 9) != 0 &&
                strncmp(a.overrides[i], "cloud.", 6) != 0)
                return bv_cli_fail(BV_EXIT_USAGE, "--resume DIR takes -s pipeline.KEY=VALUE "
                                   "and cloud.KEY=VALUE only (re-partitioning the run, "
                                   "another cloud), not '%s'", a.overrides[i]);
        if (a.experiment || a.seed >= 0 || a.repeat != 1 || a.out)
            return bv_cli_fail(BV_EXIT_USAGE, "--resume DIR takes no experiment file, "
                               "--seed, --repeat or --out: they come from DIR/run.yaml");
        if (a.force)
            return bv_cli_fail(BV_EXIT_USAGE, "--force replaces the run in --out DIR; "
                               "--resume DIR continues it: use one or the other");
        if ((rc = read_run_file(a.resume, &a)))
            return rc;
        snprintf(copy, sizeof copy, "%s/experiment.yaml", a.resume);
        experiment = copy;
        a.out = a.resume;
    }
    if (!experiment)
        return bv_cli_fail(BV_EXIT_USAGE, "run needs an experiment file: bivouac run EXP.yaml");

    bv_registry *reg = bv_registry_new();
    bv_diag d;
    bv_diag_init(&d);
    bv_experiment *x = NULL;
    int code = BV_EXIT_OK;
    double t_load = bv_now_seconds(); /* the experiment and its data, before training */
    bv_status st = bv_experiment_load(experiment, a.overrides, a.noverrides, reg, &x, &d);
    if (st != BV_OK) {
        bv_cli_print_diag(&d);
        /* out of memory is not the input's fault: the run failed */
        code = st == BV_ERR_NOMEM ? BV_EXIT_FAILED : BV_EXIT_USAGE;
    }
    bv_diag_free(&d);
    if (code == BV_EXIT_OK && x->cloud_ops.advance)
        code = bv_cli_fail(BV_EXIT_USAGE, "cloud '%s' has a simulated clock: bivouac simulate "
                           "%s runs the experiment on it", x->cloud.plugin->name, experiment);
    void *data = code == BV_EXIT_OK ? bv_experiment_take_data(x) : NULL;
    if (code == BV_EXIT_OK && !data) { /* the check read none: read it now */
        bv_error err = {0};
        if (x->engine_ops->load_data(x, &data, &err) != BV_OK)
            code = bv_cli_fail(err.status == BV_ERR_NOMEM ? BV_EXIT_FAILED : BV_EXIT_USAGE, "%s",
                               err.msg);
    }
    double load_seconds = bv_now_seconds() - t_load;
    if (code == BV_EXIT_OK) {
        unsigned long long seed =
            a.seed >= 0 ? (unsigned long long)a.seed : (unsigned long long)bv_opts_int(&x->train, "seed");
        char out[4096];
        if (a.out)
            snprintf(out, sizeof out, "%s", a.out);
        else
            default_out_dir(x, out, sizeof out);
        /* One run per directory: the lock keeps a second process out for the whole run,
         * and a new run neither mixes with nor prunes what another run left there. */
        bv_run_lock lock = {.fd = -1};
        if (mkdir_p(out) != 0) {
            code = bv_cli_fail(BV_EXIT_FAILED, "cannot create %s: %s", out, strerror(errno));
        } else if ((code = bv_run_dir_lock(out, &lock)) == BV_EXIT_OK) {
            if (!a.resume)
                code = bv_run_dir_claim(out, a.force);
            if (code == BV_EXIT_OK && !a.resume &&
                (write_run_file(out, experiment, &a, seed) != 0 ||
                 bv_run_dir_write_experiment(out, x) != 0))
                code = bv_cli_fail(BV_EXIT_FAILED, "cannot write the run files in %s", out);
            /* re-partitioned or moved: the stage processes load the run's copy */
            if (code == BV_EXIT_OK && a.resume && a.noverrides &&
                bv_run_dir_write_experiment(out, x) != 0)
                code = bv_cli_fail(BV_EXIT_FAILED, "cannot rewrite %s/experiment.yaml", out);
            if (code == BV_EXIT_OK)
                code = train_all(x, data, load_seconds, out, &a, seed);
            bv_run_dir_unlock(&lock);
        }
    }
    if (x && x->engine_ops->free_data)
        x->engine_ops->free_data(data);
    bv_experiment_free(x);
    bv_registry_free(reg);
    return code;
}

int bv_cli_check(int argc, char **argv)
{
    run_args a = {.seed = -1, .repeat = 1};
    int rc = parse_args(argc, argv, &a, false);
    if (rc)
        return rc;
    if (!a.experiment)
        return bv_cli_fail(BV_EXIT_USAGE, "check needs an experiment file: bivouac check EXP.yaml");
    bv_registry *reg = bv_registry_new();
    bv_diag d;
    bv_diag_init(&d);
    bv_experiment *x = NULL;
    int code = BV_EXIT_OK;
    bv_status st = bv_experiment_load(a.experiment, a.overrides, a.noverrides, reg, &x, &d);
    if (st != BV_OK) {
        bv_cli_print_diag(&d);
        fprintf(stderr, "%s: %zu error%s\n", a.experiment, d.count, d.count == 1 ? "" : "s");
        code = st == BV_ERR_NOMEM ? BV_EXIT_FAILED : BV_EXIT_USAGE;
    } else {
        printf("%s: ok (model %s, dataset %s, compute %s, transport %s, %zu resilience "
               "strateg%s%s)\n",
               a.experiment, x->model.plugin->name, x->dataset_label, x->compute.plugin->name,
               x->transport.plugin->name, x->nresilience, x->nresilience == 1 ? "y" : "ies",
               x->has_policy ? ", policy" : "");
    }
    bv_diag_free(&d);
    bv_experiment_free(x);
    bv_registry_free(reg);
    return code;
}
