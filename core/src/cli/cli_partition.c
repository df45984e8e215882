/* bivouac partition: how a graph experiment's dataset splits across G graph servers (per
 * part: vertices, edges, ghosts it receives, rows it sends; the edge cut), without running
 * anything. docs/partitioning.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/graph.h"
#include "clock.h"
#include "cli.h"
#include "experiment.h"
#include "graph_ops.h"
#include "graph_partition.h"
#include "registry.h"

#define MAX_OVERRIDES 64

typedef struct partition_args {
    const char *experiment;
    char *overrides[MAX_OVERRIDES];
    size_t noverrides;
    long long parts;
    bv_partition_method method;
    long long seed;
} partition_args;

static int parse_args(int argc, char **argv, partition_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool takes_value = !strcmp(arg, "-s") || !strcmp(arg, "--set") ||
                           !strcmp(arg, "--parts") || !strcmp(arg, "--method") ||
                           !strcmp(arg, "--seed");
        if (takes_value && i + 1 >= argc)
            return bv_cli_fail(BV_EXIT_USAGE, "%s needs a value", arg);
        int rc = 0;
        if (!strcmp(arg, "-s") || !strcmp(arg, "--set")) {
            rc = bv_cli_override_arg(argv[++i], a->overrides, &a->noverrides, MAX_OVERRIDES);
        } else if (!strcmp(arg, "--parts")) {
            rc = bv_cli_int_arg(arg, argv[++i], 1, INT32_MAX, &a->parts);
        } else if (!strcmp(arg, "--seed")) {
            rc = bv_cli_int_arg(arg, argv[++i], 0, INT32_MAX, &a->seed);
        } else if (!strcmp(arg, "--method")) {
            if (!bv_partition_method_parse(argv[++i], &a->method))
                return bv_cli_fail(BV_EXIT_USAGE, "--method is metis or range, got '%s'",
                                   argv[i]);
        } else if (arg[0] == '-') {
            return bv_cli_fail(BV_EXIT_USAGE, "unknown option '%s' for partition", arg);
        } else if (a->experiment) {
            return bv_cli_fail(BV_EXIT_USAGE, "partition takes one experiment file, got '%s' "
                               "and '%s'", a->experiment, arg);
        } else {
            a->experiment = arg;
        }
        if (rc)
            return rc;
    }
    if (!a->experiment)
        return bv_cli_fail(BV_EXIT_USAGE, "partition needs an experiment file: bivouac "
                           "partition EXP.yaml --parts G");
    if (!a->parts)
        return bv_cli_fail(BV_EXIT_USAGE, "partition needs --parts G");
    return 0;
}

static void print_partition(const bv_partition *pt, const bv_graph_dataset *g, double secs)
{
    printf("%s: %lld vertices, %lld edges, %s into %d parts (seed %u) in %.3f s\n", g->name,
           (long long)g->num_nodes, (long long)g->num_undirected_edges,
           bv_partition_method_name(pt->method), pt->parts, pt->seed, secs);
    printf("%6s %12s %12s %12s %12s\n", "part", "vertices", "in-edges", "ghosts", "sends");
    int64_t ghosts = 0;
    for (int32_t p = 0; p < pt->parts; p++) {
        const bv_partition_part *part = &pt->part[p];
        const bv_partition_halo *h = &part->halo[BV_PARTITION_FWD];
        printf("%6d %12lld %12lld %12lld %12lld\n", p, (long long)part->num_owned,
               (long long)part->num_edges, (long long)h->num_ghosts, (long long)h->num_send);
        ghosts += h->num_ghosts;
    }
    int64_t edges = g->adj.nnz / 2;
    printf("edge cut: %lld of %lld edges (%.1f %%)\n", (long long)pt->edge_cut,
           (long long)edges, edges ? 100.0 * (double)pt->edge_cut / (double)edges : 0.0);
    /* One float32 column of every ghost row, each way: multiply by the widths of the
     * model's Gathers (GCN: hidden + classes) for the bytes of one epoch. */
    printf("boundary: %lld ghost rows each way; %lld bytes per epoch per unit of Gather "
           "width\n",
           (long long)ghosts,
           (long long)bv_partition_predict_traffic(pt, 1, (const int64_t[]){1}).total_bytes);
    printf("fingerprint: %016llx\n", (unsigned long long)pt->fingerprint);
}

int bv_cli_partition(int argc, char **argv)
{
    partition_args a = {.method = BV_PARTITION_METIS};
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc;
    bv_registry *reg = bv_registry_new();
    bv_diag d;
    bv_diag_init(&d);
    bv_experiment *x = NULL;
    bv_graph_dataset *g = NULL;
    bv_partition *pt = NULL;
    bv_error err;
    bv_error_clear(&err);
    int code = BV_EXIT_OK;
    bv_status st = bv_experiment_load(a.experiment, a.overrides, a.noverrides, reg, &x, &d);
    if (st != BV_OK) {
        bv_cli_print_diag(&d);
        code = st == BV_ERR_NOMEM ? BV_EXIT_FAILED : BV_EXIT_USAGE;
    } else if (x->engine_ops != &bv_graph_engine_ops) {
        code = bv_cli_fail(BV_EXIT_USAGE, "%s: model %s is not a graph model: there is no "
                           "graph to partition", a.experiment, x->model.plugin->name);
    } else if ((st = bv_graph_load_data(x, 0, &g, &err)) != BV_OK) {
        code = bv_cli_fail(st == BV_ERR_INVALID ? BV_EXIT_USAGE : BV_EXIT_FAILED, "%s",
                           err.msg);
    } else {
        bv_partition_opts o = {.method = a.method, .parts = (int32_t)a.parts,
                               .seed = (uint32_t)a.seed};
        double t0 = bv_now_seconds();
        st = bv_partition_new(&g->adj, &o, &pt, &err);
        if (st != BV_OK)
            code = bv_cli_fail(st == BV_ERR_INVALID ? BV_EXIT_USAGE : BV_EXIT_FAILED, "%s",
                               err.msg);
        else
            print_partition(pt, g, bv_now_seconds() - t0);
    }
    bv_partition_free(pt);
    bv_graph_free(g);
    bv_diag_free(&d);
    bv_experiment_free(x);
    bv_registry_free(reg);
    return code;
}
