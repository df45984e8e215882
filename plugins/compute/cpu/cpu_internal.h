/* Shared between the CPU compute plugin's files: the instance struct, the work-splitting
 * rules and the kernels' prototypes (compute.h documents what each kernel computes). */
#ifndef BV_CPU_INTERNAL_H
#define BV_CPU_INTERNAL_H

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
    int nthreads;
    double partial_sum[CPU_MAX_BLOCKS];
    int64_t partial_count[CPU_MAX_BLOCKS];
    int64_t partial_correct[CPU_MAX_BLOCKS];
};

/* How many tasks to split `work` units into: one per `grain` units, at most nthreads. */
static inline int cpu_tasks_for(const bv_compute *c, int64_t work, int64_t grain)
{
    int64_t t = (work + grain - 1) / grain;
    if (t < 1)
        t = 1;
    return t > c->nthreads ? c->nthreads : (int)t;
}

/* Block size for a reduction over n items with at least min_block items per block. */
static inline int64_t cpu_block_size(int64_t n, int64_t min_block)
{
    int64_t b = (n + CPU_MAX_BLOCKS - 1) / CPU_MAX_BLOCKS;
    return b < min_block ? min_block : b;
}

/* Dropout's counter-based uniform: the (index+1)-th output of splitmix64 (Steele et al.,
 * "Fast splittable pseudorandom number generators", OOPSLA 2014) started at
 *     key = mix64(seed ^ mix64(stream + 0x9E3779B97F4A7C15)),
 * i.e. mix64(key + (index + 1) * 0x9E3779B97F4A7C15), whose top 24 bits give u in [0, 1).
 * Other backends must compute the same u to produce the same mask. */
#define CPU_GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

static inline uint64_t cpu_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
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

/* kernels_dense.c */
void cpu_gemm(bv_compute *c, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
              float beta, float *cm, int64_t ldc);
void cpu_relu_forward(bv_compute *c, int64_t n, const float *x, float *y);
void cpu_relu_backward(bv_compute *c, int64_t n, const float *y, const float *dy, float *dx);
void cpu_dropout_forward(bv_compute *c, int64_t n, float p, uint64_t seed, uint64_t stream,
                         uint64_t offset, const float *x, float *y);
void cpu_dropout_backward(bv_compute *c, int64_t n, float p, uint64_t seed, uint64_t stream,
                          uint64_t offset, const float *dy, float *dx);
void cpu_adam_step(bv_compute *c, int64_t n, float *param, const float *grad, float *m,
                   float *v, const bv_adam_params *p);
void cpu_add_bias(bv_compute *c, int64_t rows, int64_t cols, const float *bias, float *y);
void cpu_bias_backward(bv_compute *c, int64_t rows, int64_t cols, const float *dy,
                       float *dbias, bool accumulate);
void cpu_axpy(bv_compute *c, int64_t n, float alpha, const float *x, float *y);
double cpu_sum_squares(bv_compute *c, int64_t n, const float *x);

/* kernels_sparse.c */
void cpu_spmm(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
              const float *x, int64_t f, float *y);

/* kernels_xent.c */
void cpu_softmax_xent(bv_compute *c, int64_t n, int64_t k, const float *logits,
                      const int32_t *labels, const uint8_t *mask, float grad_scale,
                      float *dlogits, bv_xent_result *out);

#endif
