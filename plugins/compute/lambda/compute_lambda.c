/* The `lambda` compute plugin (Dorylus §6): the cpu plugin's kernels, and the word that the
 * graph engine runs a model's tensor tasks on serverless function workers instead of its
 * own tensor workers (task_placement). The controller that invokes the workers lives on
 * each graph server (core/src/engine/graph/lambda_pool.c), the workers' limits and faults
 * in the cloud plugin; this plugin is what an experiment names to ask for all of it:
 *
 *   compute: {plugin: lambda, lambdas: 8}
 *   cloud: {plugin: local, lambda_cpu: 0.25, lambda_memory_mb: 192} */
#include <string.h>

#include "bivouac/compute.h"
#include "bivouac/plugin.h"

#define LAMBDA_MAX 64 /* BV_MAX_TENSOR_WORKERS: one address per worker slot */

/* The cpu plugin's descriptor: its objects are linked into this one. */
const bv_plugin *bv_compute_cpu_plugin(void);

static const bv_option lambda_options[] = {
    BV_OPT_INT_RANGE("threads", "0", 0, 256,
                     "kernel threads of the graph server's own work (gathers): as the cpu "
                     "plugin's; 0 = every core"),
    BV_OPT_INT_RANGE("worker_threads", "1", 1, 256,
                     "kernel threads in each function worker (a Lambda has a fraction of a "
                     "core)"),
    BV_OPT_INT_RANGE("lambdas", "0", 0, LAMBDA_MAX,
                     "function workers each graph server keeps at most (a knob: "
                     "compute.lambdas); 0 = min(intervals, max_lambdas)"),
    BV_OPT_INT_RANGE("max_lambdas", "32", 1, LAMBDA_MAX,
                     "the most workers the `lambdas` knob may ask for (each has an address)"),
    BV_OPT_BOOLEAN("remat", "false",
                   "tensor rematerialisation (Dorylus §6): a backward task carries no forward "
                   "output; the worker computes it again from the input"),
    BV_OPT_BOOLEAN("fuse", "false",
                   "task fusion (Dorylus §6): the last layer's AV, the loss and the next ∇AV "
                   "in one invocation (a model that ends with a tensor stage: gcn's order: "
                   "gather_first)"),
    BV_OPT_BOOLEAN("stream", "false",
                   "worker-internal streaming (Dorylus §6): a forward task is computed in two "
                   "halves, the first while the second half of its input arrives"),
    BV_OPT_END,
};

static bv_compute_ops lambda_ops;

static const bv_plugin lambda_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_COMPUTE, "lambda", "0.1.0",
                     "the graph engine's tensor tasks on serverless function workers "
                     "(cpu kernels), invoked through the run's cloud"),
    .options = lambda_options,
    .ops = &lambda_ops,
    .ops_size = sizeof lambda_ops,
};

BV_PLUGIN_EXPORT const bv_plugin *bv_compute_lambda_plugin(void);

/* The cpu plugin's ops, then where tasks run. Called once, when the registry loads the
 * plugin (before any instance exists). */
const bv_plugin *bv_compute_lambda_plugin(void)
{
    const bv_plugin *cpu = bv_compute_cpu_plugin();
    size_t n = cpu->ops_size < sizeof lambda_ops ? cpu->ops_size : sizeof lambda_ops;
    memcpy(&lambda_ops, cpu->ops, n);
    lambda_ops.task_placement = BV_TASKS_ON_FUNCTIONS;
    return &lambda_plugin;
}
