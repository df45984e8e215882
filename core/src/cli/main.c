/* bivouac: train deep-learning models on cheap, unreliable compute. Entry point. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: bivouac <command> [options]\n"
    "\n"
    "commands:\n"
    "  run EXP.yaml [options]   train the experiment\n"
    "      -s, --set KEY.PATH=VALUE   override a config value (repeatable)\n"
    "      --out DIR                  output directory (default runs/<name>-<time>); one\n"
    "                                 that holds another run is refused\n"
    "      --force                    replace the run --out DIR holds (only its own\n"
    "                                 files are deleted)\n"
    "      --seed N                   seed in [0, 2^53] (default: train.seed)\n"
    "      --repeat N                 run N seeds in [1, 1000] (seed, seed+1, ...);\n"
    "                                 result.json has the mean and standard deviation\n"
    "      --resume DIR               continue the run in DIR from its newest good\n"
    "                                 checkpoint, with DIR's copy of the experiment\n"
    "                                 (-s pipeline.KEY=VALUE may re-partition it,\n"
    "                                 -s cloud.KEY=VALUE move it)\n"
    "      --quiet                    no progress line\n"
    "      --no-plot                  do not draw DIR/curves.png and curves.svg at the end\n"
    "      --x step|time              the curves' x-axis: epochs or steps (default), or\n"
    "                                 wall time in seconds\n"
    "      --tensorboard DIR          also write the series as TensorBoard event files\n"
    "                                 (DIR/seed-N/ for each seed of --repeat)\n"
    "  check EXP.yaml [-s KEY=VALUE]...   validate the experiment; report every error\n"
    "  plot RUN_DIR [--x step|time] [--tensorboard DIR]   draw RUN_DIR/curves.png and\n"
    "                           curves.svg: loss, accuracy, learning rate and every\n"
    "                           reported series (and TensorBoard event files into DIR)\n"
    "  compare RUN_DIR... [options]   a table of the runs' results (mean +- std over a\n"
    "                           --repeat run's seeds) and their series overlaid\n"
    "      --series A,B,...           the series to draw (default: the val_ ones)\n"
    "      --out FILE.png             the picture (default compare.png; .svg beside it)\n"
    "      --x step|time              x-axis, as for run\n"
    "  simulate EXP.yaml [options]   the experiment's pipeline training on a simulated\n"
    "                           market (cloud: {plugin: sim}): a table of the runs' means and\n"
    "                           spreads (preemptions, lifetimes, fatal failures, nodes,\n"
    "                           throughput, cost, value; docs/simulation.md)\n"
    "      --runs N                   simulated runs in [1, 100000], seeds seed, seed+1, ...\n"
    "                                 (default simulate.runs)\n"
    "      --seed N                   the first seed, in [0, 2^53] (default train.seed)\n"
    "      --out DIR                  write DIR/summary.json, the first run's metrics.jsonl\n"
    "                                 and its curves, and the runs' distributions\n"
    "                                 (DIR/distribution/)\n"
    "      -s, --set KEY.PATH=VALUE   override a config value (repeatable)\n"
    "      --quiet                    no progress line\n"
    "      --no-plot                  draw no curves\n"
    "  profile EXP.yaml [options]   a short real run of the experiment, its stages as\n"
    "                           processes of the local cloud, whose directory is the\n"
    "                           workload profile simulate reads (simulate.profile)\n"
    "      --steps N                  steps to run, in [1, 1000000] (default 50)\n"
    "      --out DIR                  the run's directory (default runs/profile-<time>)\n"
    "      -s, --set KEY.PATH=VALUE   override a config value (repeatable); one of\n"
    "                                 cloud keeps the experiment's cloud as it says\n"
    "  plugins [--json]          list the plugins found, their options, and failures\n"
    "  sample --checkpoint DIR [options]   generate text from a sequence model's checkpoint\n"
    "      --prompt TEXT              text to continue (default: a newline)\n"
    "      --tokens N                 tokens to generate, in [1, 1000000] (default 500)\n"
    "      --temperature T            softmax temperature in [0, 100]; 0 is greedy\n"
    "                                 (default 0.8)\n"
    "      --top-k K                  sample among the K likeliest tokens, K in\n"
    "                                 [0, 1000000]; 0: all (default 200)\n"
    "      --seed N                   sampling seed in [0, 2^53] (default 1337)\n"
    "  role ...                  one role of a cluster run (docs/cluster.md); the run's\n"
    "                            coordinator starts these itself\n"
    "  partition EXP.yaml --parts G [options]   how a graph experiment's dataset splits\n"
    "                                 across G graph servers: per part its vertices,\n"
    "                                 edges, ghosts and sends; the edge cut\n"
    "      --method metis|range       METIS k-way edge cut or contiguous vertex ranges\n"
    "                                 (default metis)\n"
    "      --seed N                   METIS's seed in [0, 2^31-1] (default 0)\n"
    "      -s, --set KEY.PATH=VALUE   override a config value (repeatable)\n"
    "  schedule EXP.yaml [-s KEY=VALUE]... | --stages P --microbatches M [options]\n"
    "                                 every stage's instructions for one step of a\n"
    "                                 P-stage pipeline, run together: the step's time,\n"
    "                                 the bubble, the activations each stage holds; from\n"
    "                                 an experiment's `pipeline:` section, each stage's\n"
    "                                 layers, costing in proportion to them\n"
    "      --kind 1f1b|gpipe          one forward one backward, or all forwards then all\n"
    "                                 backwards (default 1f1b)\n"
    "      --forward F, --backward B  a microbatch's cost on a stage (default 1 and 2)\n"
    "      --out FILE.png             also draw the step as a timeline (.svg beside it)\n"
    "\n"
    "  --help                    this text\n"
    "  --version                 print the version\n"
    "\n"
    "environment:\n"
    "  BIVOUAC_DATA_DIR      where `dataset: {name: X}` is looked up (X is a directory)\n"
    "  BIVOUAC_PLUGIN_PATH   colon-separated directories searched for plugins first\n"
    "  BIVOUAC_CACHE_DIR     where parsed datasets are cached (default ~/.cache/bivouac)\n"
    "\n"
    "exit status: 0 success, 1 the run failed, 2 bad usage or invalid input.\n";

/* File order: by file, line, column; messages at the same place (and those without one,
 * which go last) keep the order they were found in. */
static const bv_diag *sort_diag;
static int compare_diag(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const bv_diag_entry *x = &sort_diag->entries[i], *y = &sort_diag->entries[j];
    int c = (x->line <= 0) - (y->line <= 0);
    if (!c && x->line > 0)
        c = strcmp(x->file ? x->file : "", y->file ? y->file : "");
    if (!c)
        c = (x->line > y->line) - (x->line < y->line);
    if (!c)
        c = (x->col > y->col) - (x->col < y->col);
    return c ? c : (i > j) - (i < j);
}

void bv_cli_print_diag(const bv_diag *d)
{
    char line[BV_ERROR_MSG_MAX + 512];
    size_t *order = malloc((d->count + 1) * sizeof *order);
    for (size_t i = 0; i < d->count; i++)
        if (order)
            order[i] = i;
    if (order) {
        sort_diag = d;
        qsort(order, d->count, sizeof *order, compare_diag);
    }
    for (size_t i = 0; i < d->count; i++) {
        bv_diag_format(d, order ? order[i] : i, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }
    free(order);
}

int bv_cli_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bivouac: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return BV_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return BV_EXIT_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("bivouac %s\n", BIVOUAC_VERSION);
        return BV_EXIT_OK;
    }
    /* `bivouac run --help` and friends: the one usage text covers every command. */
    bool known = !strcmp(cmd, "run") || !strcmp(cmd, "check") || !strcmp(cmd, "plugins") ||
                 !strcmp(cmd, "sample") || !strcmp(cmd, "partition") || !strcmp(cmd, "plot") ||
                 !strcmp(cmd, "compare") || !strcmp(cmd, "schedule") ||
                 !strcmp(cmd, "simulate") || !strcmp(cmd, "profile");
    for (int i = 2; known && i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return BV_EXIT_OK;
        }
    if (!strcmp(cmd, "run"))
        return bv_cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "check"))
        return bv_cli_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "plugins"))
        return bv_cli_plugins(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample"))
        return bv_cli_sample(argc - 1, argv + 1);
    if (!strcmp(cmd, "role"))
        return bv_cli_role(argc - 1, argv + 1);
    if (!strcmp(cmd, "partition"))
        return bv_cli_partition(argc - 1, argv + 1);
    if (!strcmp(cmd, "schedule"))
        return bv_cli_schedule(argc - 1, argv + 1);
    if (!strcmp(cmd, "plot"))
        return bv_cli_plot(argc - 1, argv + 1);
    if (!strcmp(cmd, "compare"))
        return bv_cli_compare(argc - 1, argv + 1);
    if (!strcmp(cmd, "simulate"))
        return bv_cli_simulate(argc - 1, argv + 1);
    if (!strcmp(cmd, "profile"))
        return bv_cli_profile(argc - 1, argv + 1);
    fprintf(stderr, "bivouac: error: unknown command '%s'\n\n%s", cmd, usage);
    return BV_EXIT_USAGE;
}
