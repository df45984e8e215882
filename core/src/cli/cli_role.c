/* `bivouac role`: one role of a cluster run (docs/cluster.md), or one stage of a
 * pipeline (docs/pipeline.md), as a process the coordinator started on a cloud. Not for
 * users to run by hand: the coordinator gives it the run's own copy of the experiment,
 * the seed and the address book of the run's endpoints. */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "experiment.h"
#include "graph_ops.h"
#include "pipeline_seq.h"

int bv_cli_role(int argc, char **argv)
{
    const char *experiment = NULL, *role = NULL, *book = NULL, *member = NULL;
    long long index = 0, seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (i + 1 >= argc)
            return bv_cli_fail(BV_EXIT_USAGE, "role: %s needs a value", flag);
        const char *value = argv[++i];
        int rc = 0;
        if (!strcmp(flag, "--experiment"))
            experiment = value;
        else if (!strcmp(flag, "--role"))
            role = value;
        else if (!strcmp(flag, "--book"))
            book = value;
        else if (!strcmp(flag, "--member")) /* its key in etcd (cluster.membership) */
            member = value;
        else if (!strcmp(flag, "--index"))
            rc = bv_cli_int_arg(flag, value, 0, 1 << 20, &index);
        else if (!strcmp(flag, "--seed"))
            rc = bv_cli_int_arg(flag, value, 0, 1LL << 53, &seed);
        else
            return bv_cli_fail(BV_EXIT_USAGE, "role: unknown option '%s'", flag);
        if (rc)
            return rc;
    }
    if (!experiment || !role || !book)
        return bv_cli_fail(BV_EXIT_USAGE, "role needs --experiment, --role and --book (the "
                           "coordinator of a cluster run starts it)");
    /* Ctrl-C reaches the whole process group: the coordinator ends the roles itself */
    signal(SIGINT, SIG_IGN);
    /* A role allocates and frees buffers of megabytes for every task's message: glibc's
     * default hands each back to the kernel (mmap and munmap above 128 KiB) and the next
     * one faults in zeroed pages again (clear_page was 6 % of a graph server's time). */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    bv_registry *reg = bv_registry_new();
    bv_diag d;
    bv_diag_init(&d);
    bv_experiment *x = NULL;
    int code = BV_EXIT_OK;
    if (bv_experiment_load_for_role(experiment, reg, &x, &d) != BV_OK) {
        bv_cli_print_diag(&d);
        code = BV_EXIT_FAILED;
    }
    bv_diag_free(&d);
    /* the role loads the data it needs itself (a graph server of several: only its part) */
    void *data = code == BV_EXIT_OK ? bv_experiment_take_data(x) : NULL;
    bv_error err = {0};
    bv_status st = BV_OK;
    if (code == BV_EXIT_OK && strcmp(role, "stage") == 0) /* a pipeline's stage */
        st = bv_seq_serve_stage(x, data, (int)index, (uint64_t)seed, book, member, &err);
    else if (code == BV_EXIT_OK)
        st = bv_graph_serve_role(x, data, role, (int)index, (uint64_t)seed, book, member,
                                 &err);
    if (st != BV_OK)
        code = bv_cli_fail(BV_EXIT_FAILED, "%s", err.msg);
    if (x && x->engine_ops->free_data)
        x->engine_ops->free_data(data);
    bv_experiment_free(x);
    bv_registry_free(reg);
    return code;
}
