/* Shared between the CUDA compute plugin's files: the instance, the device view of a CSR,
 * the counter-based dropout hash (the cpu plugin's, to the bit) and the kernel launchers.
 *
 * compute_cuda.c implements the ops table (compute.h): it turns each host-visible pointer
 * it is given into a device pointer (a buffer from the plugin's allocator is used where it
 * lies; any other is staged through the instance's scratch memory and counted), calls one
 * launcher below, copies staged outputs back and waits for the stream. The launchers take
 * device pointers only, enqueue their kernels on `s` and never synchronise or allocate. */
#ifndef BV_CUDA_INTERNAL_H
#define BV_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A CSR whose arrays are device pointers (rowptr: nrows + 1 entries, indexed by global row;
 * colidx, values: nnz entries, indexed by global edge; values NULL means weight 1). */
typedef struct cu_csr {
    int64_t nrows, ncols, nnz;
    const int64_t *rowptr;
    const int32_t *colidx;
    const float *values;
} cu_csr;

/* Dropout: keep element `index` iff (mix64(key + (index + 1) * GAMMA) >> 40) >= threshold,
 * with key = mix64(seed ^ mix64(stream + GAMMA)) and threshold = ceil(p * 2^24) (p >= 1
 * drops everything: threshold 2^24 + 1 > any 24-bit value). The cpu plugin's mask. */
#define CU_GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

static inline uint64_t cu_mix64_host(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t cu_dropout_key(uint64_t seed, uint64_t stream)
{
    return cu_mix64_host(seed ^ cu_mix64_host(stream + CU_GOLDEN_GAMMA));
}

/* What a kernel needs to apply dropout: keep iff hash >= threshold, then multiply by scale
 * (1 / (1 - p)). p == 0 is threshold 0 and scale 1 (every element kept, unscaled). */
typedef struct cu_dropout {
    uint64_t key;
    uint64_t threshold;
    float scale;
} cu_dropout;

#ifdef __CUDACC__
__device__ static inline uint64_t cu_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ static inline bool cu_keep(const cu_dropout d, uint64_t index)
{
    return (cu_mix64(d.key + (index + 1) * CU_GOLDEN_GAMMA) >> 40) >= d.threshold;
}
#endif

/* ---- kernels_dense.cu: elementwise, bias, Adam, reductions ---- */
void cu_relu_forward(cudaStream_t s, int64_t n, const float *x, float *y);
void cu_relu_backward(cudaStream_t s, int64_t n, const float *y, const float *dy, float *dx);
void cu_leaky_relu_forward(cudaStream_t s, int64_t n, float slope, const float *x, float *y);
void cu_leaky_relu_backward(cudaStream_t s, int64_t n, float slope, const float *x,
                            const float *dy, float *dx);
void cu_elu_forward(cudaStream_t s, int64_t n, const float *x, float *y);
void cu_elu_backward(cudaStream_t s, int64_t n, const float *x, const float *dy, float *dx);
/* y = keep(offset + i) ? x * scale : 0 (forward and backward are the same map) */
void cu_dropout_apply(cudaStream_t s, int64_t n, cu_dropout d, uint64_t offset, const float *x,
                      float *y);
/* Adam as the cpu plugin computes it: g = grad + l2 p; p *= decay; m, v updated;
 * p -= step_size m / (sqrt(v) inv_sqrt_bc2 + eps). */
typedef struct cu_adam {
    float beta1, beta2, eps, l2, decay, step_size, inv_sqrt_bc2;
} cu_adam;
void cu_adam_step(cudaStream_t s, int64_t n, float *param, const float *grad, float *m,
                  float *v, cu_adam a);
void cu_add_bias(cudaStream_t s, int64_t rows, int64_t cols, const float *bias, float *y);
/* partial: (rows + CU_BIAS_ROWS - 1) / CU_BIAS_ROWS * cols doubles of device memory, one
 * row of sums per block of CU_BIAS_ROWS rows */
#define CU_BIAS_ROWS 256
void cu_bias_backward(cudaStream_t s, int64_t rows, int64_t cols, const float *dy,
                      double *partial, float *dbias, bool accumulate);
void cu_axpy(cudaStream_t s, int64_t n, float alpha, const float *x, float *y);
/* y[r ldy + j] = x[r ldx + j] (add: +=) for r < rows, j < cols. */
void cu_copy_rows(cudaStream_t s, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                  float *y, int64_t ldy, bool add);
/* C (m x n, row-major, ldc) = alpha sum_p ws[p] + beta C (not read when beta is 0), the
 * parts (each m x n, contiguous) added in order p = 0, 1, ... */
void cu_sum_parts(cudaStream_t s, int parts, int64_t m, int64_t n, const float *ws,
                  float alpha, float beta, float *c, int64_t ldc);
void cu_scale(cudaStream_t s, int64_t n, float alpha, float *x);
/* Sum of squares in double into *out (device), in a fixed order for a given n. partial
 * holds CU_REDUCE_BLOCKS doubles. */
#define CU_REDUCE_BLOCKS 1024
void cu_sum_squares(cudaStream_t s, int64_t n, const float *x, double *partial, double *out);
/* Softmax cross-entropy; out (device) receives {loss_sum, count, correct} as doubles;
 * partial holds 3 * CU_REDUCE_BLOCKS doubles. */
void cu_softmax_xent(cudaStream_t s, int64_t n, int64_t k, const float *logits,
                     const int32_t *labels, const uint8_t *mask, float grad_scale,
                     float *dlogits, double *partial, double *out);
/* A device-to-device copy kernel (the bench's bandwidth probe): y = x, n floats. */
void cu_copy(cudaStream_t s, int64_t n, const float *x, float *y);

/* ---- kernels_sparse.cu: SpMM and the sparse first layer ---- */
/* ordered: sum each output element in edge order, as the cpu plugin (its bits); else
 * narrow rows take the faster split rows (kernels_sparse.cu). The same for the gathers. */
void cu_spmm(cudaStream_t s, const cu_csr *a, int64_t row_begin, int64_t row_end,
             const float *x, int64_t f, float *y, bool ordered);
/* spmm_dropout: the rows of a (all of them), element (i, col) kept by d at index
 * offset + i * row_stride + col. */
void cu_spmm_dropout(cudaStream_t s, const cu_csr *a, cu_dropout d, uint64_t offset,
                     int64_t row_stride, const float *x, int64_t ldx, int64_t f, float *y,
                     int64_t ldy);
void cu_spmm_dropout_backward_x(cudaStream_t s, const cu_csr *a, cu_dropout d,
                                uint64_t offset, int64_t row_stride, const float *dy,
                                int64_t lddy, int64_t f, float *dx, int64_t lddx);
void cu_spmm_dropout_heads(cudaStream_t s, const cu_csr *a, cu_dropout d, uint64_t offset,
                           uint64_t head_stride, int64_t row_stride, int heads,
                           const float *x, int64_t ldx, int64_t f, float *y, int64_t ldy);
void cu_spmm_dropout_heads_backward_x(cudaStream_t s, const cu_csr *a, cu_dropout d,
                                      uint64_t offset, uint64_t head_stride,
                                      int64_t row_stride, int heads, const float *dy,
                                      int64_t lddy, int64_t f, float *dx, int64_t lddx);

/* ---- kernels_edge.cu: GAT's edge kernels (compute.h documents each) ---- */
void cu_edge_scores(cudaStream_t s, const cu_csr *a, int64_t row_begin, int64_t row_end,
                    int heads, const float *src, int64_t src_stride, const float *dst,
                    int64_t dst_stride, float *out);
void cu_edge_scores_backward(cudaStream_t s, const cu_csr *a, int64_t row_begin,
                             int64_t row_end, int heads, const float *dout, float *dsrc,
                             int64_t src_stride, float *ddst, int64_t dst_stride,
                             bool accumulate);
void cu_edge_softmax(cudaStream_t s, const cu_csr *a, int64_t row_begin, int64_t row_end,
                     int heads, const float *z, float *alpha);
void cu_edge_softmax_backward(cudaStream_t s, const cu_csr *a, int64_t row_begin,
                              int64_t row_end, int heads, const float *alpha,
                              const float *dalpha, float *dz);
void cu_gather_heads(cudaStream_t s, const cu_csr *a, int64_t row_begin, int64_t row_end,
                     int heads, int64_t head_dim, const float *w, const float *x,
                     int64_t x_stride, float *y, bool ordered);
void cu_gather_heads_backward_x(cudaStream_t s, const cu_csr *at, const int64_t *perm,
                                int heads, int64_t head_dim, const float *w, const float *dy,
                                float *dx, int64_t x_stride, bool ordered);
void cu_gather_heads_backward_w(cudaStream_t s, const cu_csr *a, int64_t row_begin,
                                int64_t row_end, int heads, int64_t head_dim,
                                const float *dy, const float *x, int64_t x_stride, float *dw,
                                bool ordered);

/* ---- kernels_transformer.cu (gemm_batched is cuBLAS, in compute_cuda.c) ---- */
void cu_layernorm_forward(cudaStream_t s, int64_t rows, int64_t cols, float eps,
                          const float *x, const float *gamma, const float *beta, float *y,
                          float *mean, float *rstd);
void cu_layernorm_backward(cudaStream_t s, int64_t rows, int64_t cols, const float *x,
                           const float *gamma, const float *mean, const float *rstd,
                           const float *dy, float *dx, bool accumulate, float *dgamma,
                           float *dbeta);
void cu_gelu_forward(cudaStream_t s, int64_t n, const float *x, float *y);
void cu_gelu_backward(cudaStream_t s, int64_t n, const float *x, const float *dy, float *dx);
void cu_attention_forward(cudaStream_t s, int64_t batch, int64_t seq, int heads,
                          int64_t head_dim, const float *qkv, float *att, float *out);
void cu_attention_backward(cudaStream_t s, int64_t batch, int64_t seq, int heads,
                           int64_t head_dim, const float *qkv, const float *att,
                           const float *dout, float *scratch, float *dqkv);
void cu_embedding_forward(cudaStream_t s, int64_t batch, int64_t seq, int64_t dim,
                          const int32_t *tokens, const float *wte, const float *wpe,
                          float *out);
void cu_embedding_backward(cudaStream_t s, int64_t batch, int64_t seq, int64_t dim,
                           const int32_t *tokens, const float *dout, float *dwte, float *dwpe);

#ifdef __cplusplus
}
#endif
#endif
