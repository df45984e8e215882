/* bivouac's SpMM kernel (the cpu compute plugin's spmm, reached through its descriptor the
 * way the core reaches it) on the GCN-normalised adjacency of a synthetic power-law graph,
 * reported as effective bandwidth: the bytes the product moves with no cache reuse (the
 * CSR arrays, one row of X per nonzero, Y) over the time it takes. Compared with triad,
 * this says how close the kernel comes to streaming at memory speed.
 *   spmm --plugin-dir DIR [--plugin cpu|cuda] [--nodes 1e6] [--edges 1e7] [--features 64]
 *        [--threads 2] [--reps 5] [--seed 1] [--set OPTION=VALUE]
 *                                                    ->  one JSON line on stdout
 * (--set: one of the plugin's options, e.g. --set ordered_sums=true for cuda's ordered
 * SpMM; the JSON says it as "set") 
 * With a plugin that has its own memory (cuda's mem_alloc), X, Y and the CSR arrays are put
 * there first, as the core would: the product is timed on the device, not over the bus. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "bivouac.h"
#include "bivouac/plugin.h"

static const bv_plugin *load_compute(const char *dir, const char *name)
{
    char path[4096], symbol[128];
    snprintf(path, sizeof path, "%s/compute_%s.so", dir, name);
    snprintf(symbol, sizeof symbol, "bv_compute_%s_plugin", name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "spmm: %s\n", dlerror());
        return NULL;
    }
    bv_plugin_entry_fn entry = (bv_plugin_entry_fn)dlsym(h, symbol);
    if (!entry) {
        fprintf(stderr, "spmm: %s: no symbol %s\n", path, symbol);
        return NULL;
    }
    const bv_plugin *p = entry();
    if (p->magic != BV_PLUGIN_MAGIC || p->abi_major != BV_ABI_MAJOR ||
        p->kind != BV_KIND_COMPUTE || p->ops_size < offsetof(bv_compute_ops, spmm) + sizeof(void *)) {
        fprintf(stderr, "spmm: %s: not a compute plugin of ABI %d\n", path, BV_ABI_MAJOR);
        return NULL;
    }
    return p; /* the handle stays open for the life of the process, as in the core */
}

/* Options as the core would hand them: the schema's defaults, then threads, then `set`
 * (NAME=VALUE, or NULL). */
static bv_compute *create_compute(const bv_plugin *p, int threads, const char *set,
                                  bv_opts *opts)
{
    bv_error err = {0};
    if (bv_opts_defaults(opts, "compute", p->options, &err) != BV_OK) {
        fprintf(stderr, "spmm: %s\n", err.msg);
        return NULL;
    }
    for (size_t i = 0; i < opts->count; i++)
        if (strcmp(opts->values[i].decl->name, "threads") == 0)
            opts->values[i].v.i = threads;
    if (set) {
        char name[128];
        const char *eq = strchr(set, '=');
        if (!eq || eq == set || (size_t)(eq - set) >= sizeof name) {
            fprintf(stderr, "spmm: --set wants OPTION=VALUE, got '%s'\n", set);
            return NULL;
        }
        snprintf(name, sizeof name, "%.*s", (int)(eq - set), set);
        if (bv_opts_set(opts, name, eq + 1, &err) != BV_OK) {
            fprintf(stderr, "spmm: --set %s: %s\n", set, err.msg);
            return NULL;
        }
    }
    const bv_compute_ops *ops = p->ops;
    bv_compute *c = ops->create(opts, &err);
    if (!c)
        fprintf(stderr, "spmm: compute_%s create: %s\n", p->name, err.msg);
    return c;
}

/* bytes of the plugin's own memory (mem_alloc, ABI 1.10) holding a copy of src, or src
 * itself when the plugin has none */
static void *plugin_copy(const bv_compute_ops *ops, const void *src, size_t bytes)
{
    void *p = ops->mem_alloc ? ops->mem_alloc(bytes) : NULL;
    if (!p)
        return (void *)src;
    memcpy(p, src, bytes);
    return p;
}

int main(int argc, char **argv)
{
    const char *dir = bench_arg_str(argc, argv, "plugin-dir", NULL);
    const char *plugin = bench_arg_str(argc, argv, "plugin", "cpu");
    int64_t nodes = bench_arg_int(argc, argv, "nodes", 1000000);
    int64_t edges = bench_arg_int(argc, argv, "edges", 10000000);
    int64_t f = bench_arg_int(argc, argv, "features", 64);
    int threads = (int)bench_arg_int(argc, argv, "threads", 2);
    int reps = (int)bench_arg_int(argc, argv, "reps", 5);
    uint64_t seed = (uint64_t)bench_arg_int(argc, argv, "seed", 1);
    const char *set = bench_arg_str(argc, argv, "set", NULL);
    if (!dir || nodes < 2 || edges < 1 || f < 1 || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: spmm --plugin-dir DIR [--plugin NAME] [--nodes N] [--edges E] "
                        "[--features F] [--threads T] [--reps R] [--seed S] "
                        "[--set OPTION=VALUE]\n");
        return 2;
    }
    const bv_plugin *p = load_compute(dir, plugin);
    if (!p)
        return 1;
    bv_opts opts = {0};
    bv_compute *c = create_compute(p, threads, set, &opts);
    if (!c)
        return 1;
    const bv_compute_ops *ops = p->ops;

    /* The graph the GCN benchmark trains on: the same generator and parameters. Only the
     * adjacency is used; the generator's features are replaced by f columns below. */
    bv_synth_powerlaw sp = {.nodes = nodes, .edges = edges, .features = 1, .classes = 2,
                            .exponent = 2.1, .seed = seed};
    bv_graph_dataset *g = NULL;
    bv_error err = {0};
    if (bv_graph_synth_powerlaw(&sp, &g, &err) != BV_OK) {
        fprintf(stderr, "spmm: %s\n", err.msg);
        return 1;
    }
    bv_csr *a = bv_graph_gcn_norm_adj(g); /* D^-1/2 (A + I) D^-1/2, with values */
    if (!a) {
        fprintf(stderr, "spmm: out of memory normalising the adjacency\n");
        return 1;
    }
    float *xh = bv_alloc_aligned((size_t)(nodes * f) * sizeof(float));
    float *yh = bv_alloc_aligned((size_t)(nodes * f) * sizeof(float));
    double *times = calloc((size_t)reps, sizeof *times);
    if (!xh || !yh || !times) {
        fprintf(stderr, "spmm: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < nodes * f; i++)
        xh[i] = (float)((i * 2654435761u) % 1000) * 1e-3f;
    size_t xbytes = (size_t)(nodes * f) * sizeof(float);
    float *x = plugin_copy(ops, xh, xbytes), *y = plugin_copy(ops, yh, xbytes);
    bv_csr ad = {.nrows = a->nrows, .ncols = a->ncols, .nnz = a->nnz,
                 .rowptr = plugin_copy(ops, a->rowptr, (size_t)(nodes + 1) * sizeof(int64_t)),
                 .colidx = plugin_copy(ops, a->colidx, (size_t)a->nnz * sizeof(int32_t)),
                 .values = plugin_copy(ops, a->values, (size_t)a->nnz * sizeof(float))};
    ops->spmm(c, &ad, 0, nodes, x, f, y); /* warm-up: page faults, pool start */
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        ops->spmm(c, &ad, 0, nodes, x, f, y);
        times[r] = bench_now() - t0;
    }
    /* Effective bandwidth in the streaming model (docs/benchmarks.md): the CSR arrays once
     * (int64 rowptr, int32 colidx, float values), one row of X per nonzero, every row of
     * Y written once -- what the kernel must move if nothing is reused from cache. The
     * compulsory figure reads each row of X once instead (perfect reuse). */
    double nnz = (double)a->nnz;
    double csr = 8.0 * (double)(nodes + 1) + 8.0 * nnz;
    double logical = csr + 4.0 * nnz * (double)f + 4.0 * (double)nodes * (double)f;
    double compulsory = csr + 2.0 * 4.0 * (double)nodes * (double)f;
    double med = bench_median(times, reps);
    printf("{\"spmm_gbps\": %.3f, \"spmm_median_gbps\": %.3f, \"spmm_compulsory_gbps\": %.3f, "
           "\"spmm_best_s\": %.6f, \"spmm_median_s\": %.6f, \"nodes\": %lld, \"nnz\": %lld, "
           "\"features\": %lld, \"threads\": %d, \"reps\": %d, \"bytes\": %.0f, "
           "\"plugin\": \"%s\", \"set\": \"%s\", "
           "\"compulsory_bytes\": %.0f, \"gflops\": %.3f}\n",
           logical / times[0] / 1e9, logical / med / 1e9, compulsory / times[0] / 1e9, times[0],
           med, (long long)nodes, (long long)a->nnz, (long long)f, threads, reps, logical, plugin,
           set ? set : "", compulsory, 2.0 * nnz * (double)f / times[0] / 1e9);
    bv_free_aligned(xh);
    bv_free_aligned(yh); /* the plugin's copies end with the process */
    free(times);
    bv_csr_free(a);
    bv_graph_free(g);
    ops->destroy(c);
    bv_opts_free(&opts);
    return 0;
}
