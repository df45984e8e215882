/* Shared between the CPU compute plugin's files: the instance struct, the work-splitting
 * rules and the kernels' prototypes (compute.h documents what each kernel computes). */
#ifndef BV_CPU_INTERNAL_H
#define BV_CPU_INTERNAL_H

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "bivouac/compute.h"
#include "threadpool.h"

/* Reductions (sum_squares, the loss of softmax_xent) are summed in fixed blocks whose size
 * depends only on n, each block by one thread, and the block partials are added in block
 * order by the caller. So the result is bit-identical for every thread count, and the
 * partials fit in a buffer allocated once in create. */
#define CPU_MAX_BLOCKS 4096

/* Below this many elements per task, waking another thread costs more than it saves. */
#define CPU_GRAIN 16384

struct bv_compute {
    cpu_pool *pool;
    int nthreads;          /* the pool's size: tasks per kernel at most */
    unsigned threads_seen; /* cpu_threads_generation when nthreads was last applied */
    double partial_sum[CPU_MAX_BLOCKS];
    int64_t partial_count[CPU_MAX_BLOCKS];
    int64_t partial_correct[CPU_MAX_BLOCKS];
};

/* The thread count a policy set through the compute.cpu.set_threads export: process-wide,
 * since the export reaches no instance. Each instance applies it at its next kernel
 * (cpu_threads), on the thread that runs its kernels, between two pool runs; the cost when
 * nobody sets it is one relaxed atomic load per kernel. */
extern atomic_uint cpu_threads_generation;
void cpu_apply_threads(bv_compute *c, unsigned generation);

static inline int cpu_threads(bv_compute *c)
{
    unsigned g = atomic_load_explicit(&cpu_threads_generation, memory_order_acquire);
    if (g != c->threads_seen)
        cpu_apply_threads(c, g);
    return c->nthreads;
}

/* How many tasks to split `work` units into: one per `grain` units, at most nthreads. */
static inline int cpu_tasks_for(bv_compute *c, int64_t work, int64_t grain)
{
    int64_t t = (work + grain - 1) / grain;
    if (t < 1)
        t = 1;
    int n = cpu_threads(c);
    return t > n ? n : (int)t;
}

/* Kernel time by kind, for the compute.cpu.kernel_seconds export. Counting starts the
 * first time someone reads it, so a run that never asks pays one relaxed load per kernel. */
enum cpu_time_kind {
    CPU_TIME_GEMM,
    CPU_TIME_SPMM,
    CPU_TIME_ELEMENTWISE,
    CPU_TIME_EDGE,
    CPU_TIME_ATTENTION,
    CPU_TIME_LOSS,
    CPU_TIME_KINDS
};
extern atomic_bool cpu_timing_on;
extern _Atomic uint64_t cpu_time_ns[CPU_TIME_KINDS];
uint64_t cpu_now_ns(void);

/* cpu_pool_run, timed by kind once timing is on. */
static inline void cpu_run(bv_compute *c, enum cpu_time_kind kind, int ntasks, cpu_task_fn fn,
                           void *ctx)
{
    if (!atomic_load_explicit(&cpu_timing_on, memory_order_relaxed)) {
        cpu_pool_run(c->pool, ntasks, fn, ctx);
        return;
    }
    uint64_t t0 = cpu_now_ns();
    cpu_pool_run(c->pool, ntasks, fn, ctx);
    atomic_fetch_add_explicit(&cpu_time_ns[kind], cpu_now_ns() - t0, memory_order_relaxed);
}

/* Block size for a reduction over n items with at least min_block items per block. */
static inline int64_t cpu_block_size(int64_t n, int64_t min_block)
{
    int64_t b = (n + CPU_MAX_BLOCKS - 1) / CPU_MAX_BLOCKS;
    return b < min_block ? min_block : b;
}

/* Row-parallel sparse kernels split rows [row_begin, row_end) of a CSR by their edge count,
 * each row weighing nnz + 1 so empty rows (which may still need zeroing) count for something:
 * W(i) = edges in [row_begin, i) + (i - row_begin), strictly increasing in i. Task tid of
 * ntasks gets rows [*begin, *end); the split depends only on the CSR and ntasks, and each
 * row goes to exactly one task. */
static inline int64_t cpu_rows_work_before(const int64_t *rowptr, int64_t row_begin, int64_t i)
{
    return (rowptr[i] - rowptr[row_begin]) + (i - row_begin);
}

/* First row i in [row_begin, row_end] with W(i) >= target. */
static inline int64_t cpu_row_at_work(const int64_t *rowptr, int64_t row_begin,
                                      int64_t row_end, int64_t target)
{
    int64_t lo = row_begin, hi = row_end;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cpu_rows_work_before(rowptr, row_begin, mid) < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static inline void cpu_split_rows_by_nnz(const int64_t *rowptr, int64_t row_begin,
                                         int64_t row_end, int tid, int ntasks, int64_t *begin,
                                         int64_t *end)
{
    int64_t total = cpu_rows_work_before(rowptr, row_begin, row_end);
    *begin = cpu_row_at_work(rowptr, row_begin, row_end, total * tid / ntasks);
    *end = cpu_row_at_work(rowptr, row_begin, row_end, total * (tid + 1) / ntasks);
}

/* Dropout's counter-based uniform: the (index+1)-th output of splitmix64 (Steele et al.,
 * "Fast splittable pseudorandom number generators", OOPSLA 2014) started at
 *     key = mix64(seed ^ mix64(stream + 0x9E3779B97F4A7C15)),
 * i.e. mix64(key + (index + 1) * 0x9E3779B97F4A7C15), whose top 24 bits give u in [0, 1).
 * Other backends must compute the same u to produce the same mask. */
#define CPU_GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

/* Kernels that gather rows at random (spmm, gather_heads) are bound by memory latency;
 * they request the row needed this many edges ahead (spmm: at least this many, more for
 * narrow rows). 32 beat 4, 8, 16 and 64 for spmm on a 1M-vertex power-law graph with 64
 * features (3.6x over none). */
#define CPU_GATHER_PREFETCH 32

/* Asks for every 64-byte line of an f-float row (no effect on results), into every cache
 * level: in a power-law graph the rows of hubs are gathered again and again, and a
 * non-temporal request would not keep them (spmm at 16 features on the 1M-vertex graph:
 * 0.050 -> 0.023 s). */
static inline void cpu_prefetch_row(const float *row, int64_t f)
{
    for (int64_t j = 0; j < f; j += 16)
        __builtin_prefetch(row + j, 0, 3);
}

static inline uint64_t cpu_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* cpu_mix64 on 4 lanes at once, in place (GCC vector extensions: AVX-512DQ multiplies
 * 64-bit lanes in one instruction, AVX2 in three and a shuffle), the same bits per lane.
 * By pointer: a 32-byte vector passed by value changes the ABI between the builds. */
typedef uint64_t cpu_u64x4 __attribute__((vector_size(32)));
typedef int64_t cpu_i64x4 __attribute__((vector_size(32)));
typedef int32_t cpu_i32x4 __attribute__((vector_size(16)));
static inline __attribute__((always_inline)) void cpu_mix64x4(cpu_u64x4 *z)
{
    *z = (*z ^ (*z >> 30)) * 0xBF58476D1CE4E5B9ull;
    *z = (*z ^ (*z >> 27)) * 0x94D049BB133111EBull;
    *z = *z ^ (*z >> 31);
}

/* The same on 8 lanes (one AVX-512 register, two AVX2 ones). */
typedef uint64_t cpu_u64x8 __attribute__((vector_size(64)));
static inline __attribute__((always_inline)) void cpu_mix64x8(cpu_u64x8 *z)
{
    *z = (*z ^ (*z >> 30)) * 0xBF58476D1CE4E5B9ull;
    *z = (*z ^ (*z >> 27)) * 0x94D049BB133111EBull;
    *z = *z ^ (*z >> 31);
}

/* u >= p exactly as an integer test on the hash: u = (h >> 40) 2^-24, so u >= p iff
 * (h >> 40) >= ceil(p 2^24) (p >= 1: never). */
static inline uint64_t cpu_dropout_threshold(float p)
{
    return (uint64_t)ceil((double)p * 16777216.0);
}

static inline uint64_t cpu_dropout_key(uint64_t seed, uint64_t stream)
{
    return cpu_mix64(seed ^ cpu_mix64(stream + CPU_GOLDEN_GAMMA));
}

static inline float cpu_dropout_uniform(uint64_t key, uint64_t index)
{
    uint64_t h = cpu_mix64(key + (index + 1) * CPU_GOLDEN_GAMMA);
    return (float)(h >> 40) * 0x1.0p-24f;
}

/* The instruction sets the vectorised kernels may use: kernels with a vectorised body build
 * it more than once (generic, target("avx2"), and for the dropout hashes target("avx512dq"):
 * CPU_DEFINE_DISPATCH_AVX512), with
 * the same IEEE or integer operations and bits in every build, and pick by these levels,
 * not by an ifunc (resolvers run before the sanitizers' runtimes are up). Set by create
 * from the CPU, capped by BIVOUAC_CPU_ISA=generic|avx2 (the tests run each build that way). */
enum { CPU_ISA_GENERIC = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 };
extern atomic_int cpu_isa;

static inline bool cpu_has_avx2(void)
{
    return atomic_load_explicit(&cpu_isa, memory_order_relaxed) >= CPU_ISA_AVX2;
}

static inline bool cpu_has_avx512(void)
{
    return atomic_load_explicit(&cpu_isa, memory_order_relaxed) >= CPU_ISA_AVX512;
}

/* Defines `static void name params`, which runs name##_body (an always-inline function,
 * called with args) from its AVX2 build where cpu_has_avx2(), else from its generic one. */
#if defined(__GNUC__) && defined(__x86_64__)
#define CPU_BUILD_GENERIC_AVX2(name, params, args)                                           \
    static void name##_generic params { name##_body args; }                                 \
    __attribute__((target("avx2"))) static void name##_avx2 params { name##_body args; }
#define CPU_DEFINE_DISPATCH(name, params, args)                                              \
    CPU_BUILD_GENERIC_AVX2(name, params, args)                                               \
    static void name params                                                                  \
    {                                                                                        \
        if (cpu_has_avx2())                                                                  \
            name##_avx2 args;                                                                \
        else                                                                                 \
            name##_generic args;                                                             \
    }
/* The same with an AVX-512 build too (avx512f, dq, vl), where cpu_has_avx512(): for the
 * kernels whose cost is dropout's hash, whose 64-bit multiplies AVX-512DQ does in one
 * instruction (AVX2 needs three and a shuffle). No fused multiply-add in any build: ISO
 * C's fp-contract=off keeps their bits equal. */
#define CPU_DEFINE_DISPATCH_AVX512(name, params, args)                                       \
    CPU_BUILD_GENERIC_AVX2(name, params, args)                                               \
    __attribute__((target("avx512f,avx512dq,avx512vl"))) static void name##_avx512 params    \
    {                                                                                        \
        name##_body args;                                                                    \
    }                                                                                        \
    static void name params                                                                  \
    {                                                                                        \
        if (cpu_has_avx512())                                                                \
            name##_avx512 args;                                                              \
        else if (cpu_has_avx2())                                                             \
            name##_avx2 args;                                                                \
        else                                                                                 \
            name##_generic args;                                                             \
    }
#else
#define CPU_DEFINE_DISPATCH(name, params, args)                                              \
    static void name params { name##_body args; }
#define CPU_DEFINE_DISPATCH_AVX512(name, params, args) CPU_DEFINE_DISPATCH(name, params, args)
#endif

/* kernels_dense.c */
void cpu_gemm(bv_compute *c, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
              float beta, float *cm, int64_t ldc);
void cpu_relu_forward(bv_compute *c, int64_t n, const float *x, float *y);
void cpu_relu_backward(bv_compute *c, int64_t n, const float *y, const float *dy, float *dx);
void cpu_leaky_relu_forward(bv_compute *c, int64_t n, float slope, const float *x, float *y);
void cpu_leaky_relu_backward(bv_compute *c, int64_t n, float slope, const float *x,
                             const float *dy, float *dx);
void cpu_elu_forward(bv_compute *c, int64_t n, const float *x, float *y);
void cpu_elu_backward(bv_compute *c, int64_t n, const float *x, const float *dy, float *dx);
void cpu_dropout_forward(bv_compute *c, int64_t n, float p, uint64_t seed, uint64_t stream,
                         uint64_t offset, const float *x, float *y);
void cpu_dropout_backward(bv_compute *c, int64_t n, float p, uint64_t seed, uint64_t stream,
                          uint64_t offset, const float *dy, float *dx);
void cpu_adam_step(bv_compute *c, int64_t n, float *param, const float *grad, float *m,
                   float *v, const bv_adam_params *p);
void cpu_adam_step_scaled(bv_compute *c, int64_t n, float grad_scale, float *param,
                          const float *grad, float *m, float *v, const bv_adam_params *p);
void cpu_add_bias(bv_compute *c, int64_t rows, int64_t cols, const float *bias, float *y);
void cpu_bias_backward(bv_compute *c, int64_t rows, int64_t cols, const float *dy,
                       float *dbias, bool accumulate);
void cpu_axpy(bv_compute *c, int64_t n, float alpha, const float *x, float *y);
double cpu_sum_squares(bv_compute *c, int64_t n, const float *x);

/* kernels_sparse.c */
void cpu_spmm_dropout(bv_compute *c, const bv_csr *a, float p, uint64_t seed, uint64_t stream,
                      uint64_t offset, int64_t row_stride, const float *x, int64_t ldx,
                      int64_t f, float *y, int64_t ldy);
void cpu_spmm_dropout_backward_x(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                                 uint64_t stream, uint64_t offset, int64_t row_stride,
                                 const float *dy, int64_t lddy, int64_t f, float *dx,
                                 int64_t lddx);
void cpu_spmm_dropout_heads(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                            uint64_t stream, uint64_t offset, uint64_t head_stride,
                            int64_t row_stride, int heads, const float *x, int64_t ldx,
                            int64_t f, float *y, int64_t ldy);
void cpu_spmm_dropout_heads_backward_x(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                                       uint64_t stream, uint64_t offset, uint64_t head_stride,
                                       int64_t row_stride, int heads, const float *dy,
                                       int64_t lddy, int64_t f, float *dx, int64_t lddx);
void cpu_dense_dropout_heads(bv_compute *c, int64_t rows, int64_t cols, const float *a,
                             int64_t lda, float p, uint64_t seed, uint64_t stream,
                             uint64_t offset, uint64_t head_stride, int64_t row_stride,
                             int heads, const float *x, int64_t ldx, int64_t f, float *y,
                             int64_t ldy);
void cpu_dense_dropout_heads_backward_x(bv_compute *c, int64_t rows, int64_t cols,
                                        const float *a, int64_t lda, float p, uint64_t seed,
                                        uint64_t stream, uint64_t offset, uint64_t head_stride,
                                        int64_t row_stride, int heads, const float *dy,
                                        int64_t lddy, int64_t f, float *dx, int64_t lddx);
void cpu_spmm(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
              const float *x, int64_t f, float *y);

/* kernels_edge.c */
void cpu_edge_scores(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                     int heads, const float *src, int64_t src_stride, const float *dst,
                     int64_t dst_stride, float *out);
void cpu_edge_scores_backward(bv_compute *c, const bv_csr *a, int64_t row_begin,
                              int64_t row_end, int heads, const float *dout, float *dsrc,
                              int64_t src_stride, float *ddst, int64_t dst_stride,
                              bool accumulate);
void cpu_edge_softmax(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                      int heads, const float *z, float *alpha);
void cpu_edge_softmax_backward(bv_compute *c, const bv_csr *a, int64_t row_begin,
                               int64_t row_end, int heads, const float *alpha,
                               const float *dalpha, float *dz);
void cpu_gather_heads(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                      int heads, int64_t head_dim, const float *w, const float *x,
                      int64_t x_stride, float *y);
void cpu_gather_heads_backward_x(bv_compute *c, const bv_csr *at, const int64_t *perm,
                                 int heads, int64_t head_dim, const float *w, const float *dy,
                                 float *dx, int64_t x_stride);
void cpu_gather_heads_backward_w(bv_compute *c, const bv_csr *a, int64_t row_begin,
                                 int64_t row_end, int heads, int64_t head_dim,
                                 const float *dy, const float *x, int64_t x_stride,
                                 float *dw);

/* kernels_xent.c */
void cpu_softmax_xent(bv_compute *c, int64_t n, int64_t k, const float *logits,
                      const int32_t *labels, const uint8_t *mask, float grad_scale,
                      float *dlogits, bv_xent_result *out);

#endif
