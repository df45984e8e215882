/* The CPU compute plugin: its descriptor and options, and the lifecycle of an instance
 * (thread pool plus reduction scratch). The kernels live in kernels_*.c. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "bivouac/plugin.h"
#include "cpu_internal.h"
#include "kernels_transformer.h"

#define CPU_MAX_THREADS 256

static const bv_option cpu_options[] = {
    BV_OPT_INT_RANGE("threads", "0", 0, CPU_MAX_THREADS,
                     "worker threads for kernels and OpenBLAS; 0 = every core this process "
                     "may run on"),
    BV_OPT_END,
};

/* Cores this process may run on (its affinity mask, so containers and taskset are
 * respected), falling back to the online count. */
static int available_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

atomic_int cpu_isa;

static int detect_isa(void)
{
    int isa = CPU_ISA_GENERIC;
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        isa = CPU_ISA_AVX2;
    if (isa == CPU_ISA_AVX2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        isa = CPU_ISA_AVX512;
#endif
    const char *cap = getenv("BIVOUAC_CPU_ISA");
    if (cap && strcmp(cap, "generic") == 0)
        isa = CPU_ISA_GENERIC;
    else if (cap && strcmp(cap, "avx2") == 0 && isa > CPU_ISA_AVX2)
        isa = CPU_ISA_AVX2;
    return isa;
}

/* ---- Exports (plugins.compute.cpu.*) ---- */

atomic_uint cpu_threads_generation;
static atomic_int threads_requested; /* by the last set_threads; 0: every core */
static atomic_int threads_current;   /* what the last instance created or applied runs */
atomic_bool cpu_timing_on;
_Atomic uint64_t cpu_time_ns[CPU_TIME_KINDS];

uint64_t cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Called by cpu_threads on the instance's own thread, between two pool runs (a pool run
 * is synchronous), so replacing the pool races with nothing. Tasks already sized for the
 * old count are clamped by cpu_pool_run, and every kernel splits by the count it gets. */
void cpu_apply_threads(bv_compute *c, unsigned generation)
{
    c->threads_seen = generation;
    int want = atomic_load(&threads_requested);
    if (want <= 0)
        want = available_cores();
    if (want > CPU_MAX_THREADS)
        want = CPU_MAX_THREADS;
    if (want == c->nthreads)
        return;
    bv_error err = {0};
    cpu_pool *pool = cpu_pool_create(want, &err);
    if (!pool) /* keep running on the old pool; threads() says which count is live */
        return;
    cpu_pool_destroy(c->pool);
    c->pool = pool;
    c->nthreads = want;
    atomic_store(&threads_current, want);
}

/* threads(): the thread count of the last instance created or changed; 0 before any. */
static int64_t export_threads(void)
{
    return atomic_load(&threads_current);
}

/* set_threads(n): every instance runs with n threads from its next kernel on. */
static void export_set_threads(int64_t n)
{
    if (n < 0 || n > CPU_MAX_THREADS) {
        bv_export_error("thread count %lld is out of range [0, %d] (0: every core)",
                        (long long)n, CPU_MAX_THREADS);
        return;
    }
    atomic_store(&threads_requested, (int)n);
    atomic_fetch_add(&cpu_threads_generation, 1);
    /* the count a policy reads back right away, before the instances apply it */
    atomic_store(&threads_current, n > 0 ? (int)n : available_cores());
}

static const char *const time_kind_names[CPU_TIME_KINDS] = {
    "gemm", "spmm", "elementwise", "edge", "attention", "loss"};

/* kernel_seconds(kind): seconds spent in that kind of kernel since the first call of this
 * export (counting starts then, so that nobody pays for it unasked); "all" sums them. */
static double export_kernel_seconds(const char *kind)
{
    bool all = strcmp(kind, "all") == 0;
    int which = -1;
    for (int k = 0; k < CPU_TIME_KINDS; k++)
        if (strcmp(kind, time_kind_names[k]) == 0)
            which = k;
    if (!all && which < 0) {
        bv_export_error("unknown kernel kind '%s' (gemm, spmm, elementwise, edge, attention, "
                        "loss or all)", kind);
        return 0.0;
    }
    if (!atomic_exchange(&cpu_timing_on, true))
        return 0.0; /* counting starts now */
    uint64_t ns = 0;
    for (int k = 0; k < CPU_TIME_KINDS; k++)
        if (all || k == which)
            ns += atomic_load_explicit(&cpu_time_ns[k], memory_order_relaxed);
    return (double)ns * 1e-9;
}

#define EXPORT_FN(f) ((void (*)(void))(void *)(f))

static const bv_export cpu_exports[] = {
    {"threads", "i:", EXPORT_FN(export_threads),
     "threads the compute instances run with (the last created or changed; 0 before any)"},
    {"set_threads", "!v:i", EXPORT_FN(export_set_threads),
     "run kernels on n threads (0: every core) from each instance's next kernel on"},
    {"kernel_seconds", "d:s", EXPORT_FN(export_kernel_seconds),
     "seconds in kernels of a kind (gemm, spmm, elementwise, edge, attention, loss, all) "
     "since the first call"},
    {NULL, NULL, NULL, NULL},
};

static bv_compute *cpu_create(const bv_opts *opts, bv_error *err)
{
    int threads = (int)bv_opts_int(opts, "threads");
    if (threads <= 0)
        threads = available_cores();
    if (threads > CPU_MAX_THREADS)
        threads = CPU_MAX_THREADS;

    bv_compute *c = calloc(1, sizeof *c);
    if (!c) {
        bv_error_set(err, BV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->nthreads = threads;
    c->threads_seen = atomic_load(&cpu_threads_generation); /* a new run starts as set */
    atomic_store(&threads_current, threads);
    c->pool = cpu_pool_create(threads, err);
    if (!c->pool) {
        free(c);
        return NULL;
    }
    /* OpenBLAS runs single-threaded inside our pool's tasks (cpu_gemm splits C into row
     * bands): one threading system, and no OpenBLAS threads spinning in sched_yield
     * between calls while our workers want the cores (measured: ~20% of a GCN epoch). */
    openblas_set_num_threads(1);
    atomic_store_explicit(&cpu_isa, detect_isa(), memory_order_relaxed);
    return c;
}

static void cpu_destroy(bv_compute *c)
{
    if (!c)
        return;
    cpu_pool_destroy(c->pool);
    free(c);
}

static int cpu_num_threads(const bv_compute *c)
{
    return c->nthreads;
}

static const bv_compute_ops cpu_ops = {
    .create = cpu_create,
    .destroy = cpu_destroy,
    .num_threads = cpu_num_threads,
    .gemm = cpu_gemm,
    .spmm = cpu_spmm,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .dropout_forward = cpu_dropout_forward,
    .dropout_backward = cpu_dropout_backward,
    .softmax_xent = cpu_softmax_xent,
    .adam_step = cpu_adam_step,
    .add_bias = cpu_add_bias,
    .bias_backward = cpu_bias_backward,
    .axpy = cpu_axpy,
    .sum_squares = cpu_sum_squares,
    .leaky_relu_forward = cpu_leaky_relu_forward,
    .leaky_relu_backward = cpu_leaky_relu_backward,
    .elu_forward = cpu_elu_forward,
    .elu_backward = cpu_elu_backward,
    .edge_scores = cpu_edge_scores,
    .edge_scores_backward = cpu_edge_scores_backward,
    .edge_softmax = cpu_edge_softmax,
    .edge_softmax_backward = cpu_edge_softmax_backward,
    .gather_heads = cpu_gather_heads,
    .gather_heads_backward_x = cpu_gather_heads_backward_x,
    .gather_heads_backward_w = cpu_gather_heads_backward_w,
    /* ABI 1.2: transformer kernels (kernels_transformer.c) */
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .gemm_batched = cpu_gemm_batched,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .scale = cpu_scale,
    .spmm_dropout = cpu_spmm_dropout,
    .spmm_dropout_backward_x = cpu_spmm_dropout_backward_x,
    .spmm_dropout_heads = cpu_spmm_dropout_heads,
    .spmm_dropout_heads_backward_x = cpu_spmm_dropout_heads_backward_x,
    .dense_dropout_heads = cpu_dense_dropout_heads,
    .dense_dropout_heads_backward_x = cpu_dense_dropout_heads_backward_x,
    /* ABI 1.20 */
    .adam_step_scaled = cpu_adam_step_scaled,
};

static const bv_plugin cpu_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_COMPUTE, "cpu", "0.1.0",
                     "host kernels: OpenBLAS gemm, pthread pool for sparse and elementwise "
                     "ops; deterministic for any thread count except gemm"),
    .options = cpu_options,
    .ops = &cpu_ops,
    .ops_size = sizeof cpu_ops,
    .exports = cpu_exports,
};

BV_PLUGIN_EXPORT const bv_plugin *bv_compute_cpu_plugin(void);

const bv_plugin *bv_compute_cpu_plugin(void)
{
    return &cpu_plugin;
}
