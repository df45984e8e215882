/* The compute plugin kind: kernels on one kind of hardware. All buffers are float32,
 * row-major, owned by the caller, and visible to the host: plain host memory, or (ABI 1.10)
 * memory from the plugin's own mem_alloc. Kernels never allocate per call (STYLE.md). A
 * kernel given the same inputs, seed and thread count returns bit-identical outputs (the
 * cuda plugin states its exceptions: scatters summed with atomics). */
#ifndef BIVOUAC_COMPUTE_H
#define BIVOUAC_COMPUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bivouac/error.h"
#include "bivouac/options.h"
#include "bivouac/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bv_compute bv_compute; /* one backend instance (owns its thread pool) */

/* Result of a masked softmax cross-entropy. */
typedef struct bv_xent_result {
    double loss_sum; /* sum over counted rows of -log p[label] */
    int64_t count;   /* rows counted (mask set and label >= 0) */
    int64_t correct; /* counted rows whose argmax equals the label */
} bv_xent_result;

typedef struct bv_adam_params {
    float lr;
    float beta1;
    float beta2;
    float eps;
    float weight_decay; /* 0: none */
    bool decoupled;     /* true: AdamW (p -= lr*wd*p); false: L2 (g += wd*p) as Kipf's GCN */
    int64_t step;       /* 1-based step number t, for bias correction */
} bv_adam_params;

typedef struct bv_compute_ops {
    /* lifecycle: create reads the validated options (e.g. threads) and starts the pool;
     * destroy joins every thread. */
    bv_compute *(*create)(const bv_opts *opts, bv_error *err);
    void (*destroy)(bv_compute *c);
    int (*num_threads)(const bv_compute *c);

    /* C[m x n] = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) is k x n. */
    void (*gemm)(bv_compute *c, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                 float beta, float *cm, int64_t ldc);

    /* Sparse times dense over a range of rows (one vertex interval):
     *   y[(i - row_begin) * f + j] = sum_e a.values[e] * x[a.colidx[e] * f + j]
     * for row_begin <= i < row_end. values NULL means weight 1. Backward of
     * y = A x is dx = A^T dy: call spmm on the transpose (bv_csr_transpose). */
    void (*spmm)(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                 const float *x, int64_t f, float *y);

    /* y = max(x, 0). x and y may alias. */
    void (*relu_forward)(bv_compute *c, int64_t n, const float *x, float *y);
    /* dx = dy where y > 0 else 0, using the forward output y. dy and dx may alias. */
    void (*relu_backward)(bv_compute *c, int64_t n, const float *y, const float *dy, float *dx);

    /* Inverted dropout with a counter-based mask: element i (global index offset + i) is
     * kept iff hash(seed, stream, offset + i) >= p, and kept values are scaled by 1/(1-p).
     * The mask is recomputed in backward, never stored, so any split of the rows into
     * intervals, and any thread count, gives the same mask. x and y may alias. */
    void (*dropout_forward)(bv_compute *c, int64_t n, float p, uint64_t seed, uint64_t stream,
                            uint64_t offset, const float *x, float *y);
    void (*dropout_backward)(bv_compute *c, int64_t n, float p, uint64_t seed,
                             uint64_t stream, uint64_t offset, const float *dy, float *dx);

    /* Row-wise softmax cross-entropy over n rows of k logits. A row counts when
     * (mask == NULL || mask[i]) && labels[i] >= 0. If dlogits != NULL it receives
     * grad_scale * (softmax - onehot) for counted rows and 0 for the others. */
    void (*softmax_xent)(bv_compute *c, int64_t n, int64_t k, const float *logits,
                         const int32_t *labels, const uint8_t *mask, float grad_scale,
                         float *dlogits, bv_xent_result *out);

    /* One Adam step over n parameters; m and v are the moment buffers. */
    void (*adam_step)(bv_compute *c, int64_t n, float *param, const float *grad, float *m,
                      float *v, const bv_adam_params *p);

    /* y[r, :] += bias for each of rows rows of cols. */
    void (*add_bias)(bv_compute *c, int64_t rows, int64_t cols, const float *bias, float *y);
    /* dbias[j] (+)= sum_r dy[r, j]; accumulate selects += instead of =. */
    void (*bias_backward)(bv_compute *c, int64_t rows, int64_t cols, const float *dy,
                          float *dbias, bool accumulate);
    /* y += alpha * x */
    void (*axpy)(bv_compute *c, int64_t n, float alpha, const float *x, float *y);
    /* sum of x[i]^2, accumulated in double */
    double (*sum_squares)(bv_compute *c, int64_t n, const float *x);

    /* ---- ABI 1.1: activations and edge kernels for attention over graphs (GAT) ----
     * Edge arrays are laid out [edge][head]: value h of edge e is v[e * heads + h], where
     * e is the edge's position in `a` (a CSR over destination rows; self loops are
     * ordinary entries). A call over rows [row_begin, row_end) reads and writes the edge
     * arrays from index a->rowptr[row_begin] on: edge e of the range is element
     * (e - a->rowptr[row_begin]) of the array. Per-vertex arrays are row-major with an
     * explicit row stride (floats), so a kernel can read a window of wider rows. */

    /* y = x > 0 ? x : slope * x; backward uses the forward input x. */
    void (*leaky_relu_forward)(bv_compute *c, int64_t n, float slope, const float *x, float *y);
    void (*leaky_relu_backward)(bv_compute *c, int64_t n, float slope, const float *x,
                                const float *dy, float *dx);
    /* y = x > 0 ? x : exp(x) - 1; backward uses the forward input x. */
    void (*elu_forward)(bv_compute *c, int64_t n, const float *x, float *y);
    void (*elu_backward)(bv_compute *c, int64_t n, const float *x, const float *dy, float *dx);

    /* Attention logits: out[e, h] = src[col(e) * src_stride + h] + dst[row(e) * dst_stride + h]
     * for the edges of rows [row_begin, row_end). src is indexed by global vertex, dst by
     * row - row_begin (the interval's own rows). */
    void (*edge_scores)(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                        int heads, const float *src, int64_t src_stride, const float *dst,
                        int64_t dst_stride, float *out);
    /* Backward of edge_scores: ddst[(row - row_begin) * dst_stride + h] (+)= sum over the
     * row's edges of dout[e, h] (accumulate picks +=), and dsrc[col(e) * src_stride + h] +=
     * dout[e, h] for every edge (always accumulates; in edge order, so deterministic). */
    void (*edge_scores_backward)(bv_compute *c, const bv_csr *a, int64_t row_begin,
                                 int64_t row_end, int heads, const float *dout, float *dsrc,
                                 int64_t src_stride, float *ddst, int64_t dst_stride,
                                 bool accumulate);
    /* Per destination row and head, a numerically stable softmax over the row's edges
     * (max subtracted): alpha[e, h] = exp(z[e, h] - m) / sum. An empty row writes nothing. */
    void (*edge_softmax)(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                         int heads, const float *z, float *alpha);
    /* dz[e, h] = alpha[e, h] * (dalpha[e, h] - sum over the row's edges f of
     * alpha[f, h] * dalpha[f, h]). */
    void (*edge_softmax_backward)(bv_compute *c, const bv_csr *a, int64_t row_begin,
                                  int64_t row_end, int heads, const float *alpha,
                                  const float *dalpha, float *dz);
    /* Multi-head weighted aggregation (GA with attention): for each row v in the range,
     * head h and j < head_dim:
     *   y[(v - row_begin) * heads * head_dim + h * head_dim + j] =
     *       sum over v's edges e of w[e, h] * x[col(e) * x_stride + h * head_dim + j],
     * where w holds the range's edges only: w[e, h] is w[(e - rowptr[row_begin]) * heads +
     * h] (the same for dw below). */
    void (*gather_heads)(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                         int heads, int64_t head_dim, const float *w, const float *x,
                         int64_t x_stride, float *y);
    /* Its backward with respect to x, over ALL rows of at = transpose of a, where
     * perm[t] is the index in a of at's edge t (bv_csr_transpose_perm):
     *   dx[u * x_stride + h * head_dim + j] += sum over at's row u edges t of
     *       w[perm[t], h] * dy[col_at(t) * heads * head_dim + h * head_dim + j].
     * Each dx row is written by one thread: deterministic for any thread count. */
    void (*gather_heads_backward_x)(bv_compute *c, const bv_csr *at, const int64_t *perm,
                                    int heads, int64_t head_dim, const float *w,
                                    const float *dy, float *dx, int64_t x_stride);
    /* Its backward with respect to w (a sampled dense-dense product, SDDMM):
     *   dw[e, h] = sum_j dy[(v - row_begin) * heads * head_dim + h * head_dim + j] *
     *              x[col(e) * x_stride + h * head_dim + j]   for the edges of the range. */
    void (*gather_heads_backward_w)(bv_compute *c, const bv_csr *a, int64_t row_begin,
                                    int64_t row_end, int heads, int64_t head_dim,
                                    const float *dy, const float *x, int64_t x_stride,
                                    float *dw);

    /* ---- ABI 1.2: transformer kernels ----
     * Token rows are row-major T x width (T = batch * seq, sequence-major). Every kernel
     * here gives the same bits for any thread count (attention and gemm_batched run whole
     * (batch, head) products on one thread each). */

    /* Per row of cols: y = (x - mean) * rstd * gamma (+ beta; beta may be NULL), with
     * rstd = 1 / sqrt(var + eps) (biased variance); mean and rstd (rows each) are kept
     * for the backward. */
    void (*layernorm_forward)(bv_compute *c, int64_t rows, int64_t cols, float eps,
                              const float *x, const float *gamma, const float *beta,
                              float *y, float *mean, float *rstd);
    /* dx (+)= dL/dx (accumulate picks +=, for a residual stream); dgamma += sum over rows
     * of dy * xhat; dbeta += sum of dy (dbeta may be NULL). */
    void (*layernorm_backward)(bv_compute *c, int64_t rows, int64_t cols, const float *x,
                               const float *gamma, const float *mean, const float *rstd,
                               const float *dy, float *dx, bool accumulate, float *dgamma,
                               float *dbeta);
    /* Exact GELU, y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); backward uses the input x.
     * x and y (dy and dx) may alias. */
    void (*gelu_forward)(bv_compute *c, int64_t n, const float *x, float *y);
    void (*gelu_backward)(bv_compute *c, int64_t n, const float *x, const float *dy,
                          float *dx);
    /* count independent gemms (as gemm) on matrices stride_a/b/c floats apart. */
    void (*gemm_batched)(bv_compute *c, int64_t count, bool trans_a, bool trans_b, int64_t m,
                         int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                         int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                         float beta, float *cm, int64_t ldc, int64_t stride_c);
    /* Fused causal multi-head self-attention. qkv is T x 3C (C = heads * head_dim): Q in
     * columns [0, C), K in [C, 2C), V in [2C, 3C), head h in columns h*head_dim.. of each.
     * att (batch x heads x seq x seq) receives the probabilities softmax(Q K^T/sqrt(d))
     * with position i attending to j <= i only (0 above the diagonal: no mask is built);
     * out (T x C) = att V, head h in columns h*head_dim... */
    void (*attention_forward)(bv_compute *c, int64_t batch, int64_t seq, int heads,
                              int64_t head_dim, const float *qkv, float *att, float *out);
    /* Its backward: dqkv (T x 3C) is written (not accumulated). scratch holds
     * batch x heads x seq x seq floats. */
    void (*attention_backward)(bv_compute *c, int64_t batch, int64_t seq, int heads,
                               int64_t head_dim, const float *qkv, const float *att,
                               const float *dout, float *scratch, float *dqkv);
    /* out[b, s, :] = wte[tokens[b, s], :] + wpe[s, :] (wpe may be NULL). */
    void (*embedding_forward)(bv_compute *c, int64_t batch, int64_t seq, int64_t dim,
                              const int32_t *tokens, const float *wte, const float *wpe,
                              float *out);
    /* dwte[tokens[t], :] += dout[t, :] in token order; dwpe[s, :] += sum over the batch
     * (dwpe may be NULL). */
    void (*embedding_backward)(bv_compute *c, int64_t batch, int64_t seq, int64_t dim,
                               const int32_t *tokens, const float *dout, float *dwte,
                               float *dwpe);
    /* x *= alpha */
    void (*scale)(bv_compute *c, int64_t n, float alpha, float *x);

    /* ---- ABI 1.3: a sparse first layer (bag-of-words features are ~99 % zeros) ----
     * For the rows of a (a CSR with values), with inverted dropout on a's values using
     * the same mask as dropout_forward: element (i, col) has index
     * offset + i * row_stride + col. p == 0 means no dropout.
     *   y[i * ldy + j] = sum_e keep(e) * a.values[e] / (1 - p) * x[col(e) * ldx + j],
     * j < f. Each row by one thread, in edge order. */
    void (*spmm_dropout)(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                         uint64_t stream, uint64_t offset, int64_t row_stride, const float *x,
                         int64_t ldx, int64_t f, float *y, int64_t ldy);
    /* Its gradient with respect to x:
     *   dx[col(e) * lddx + j] += keep(e) * a.values[e] / (1 - p) * dy[i * lddy + j],
     * in edge order (deterministic for any thread count). */
    void (*spmm_dropout_backward_x)(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                                    uint64_t stream, uint64_t offset, int64_t row_stride,
                                    const float *dy, int64_t lddy, int64_t f, float *dx,
                                    int64_t lddx);

    /* ---- ABI 1.7: that first layer for a model with heads (GAT), all heads at once ----
     * What `heads` calls of spmm_dropout (and of its gradient) give, to the bit, for head
     * h = 0 .. heads-1 with offset + h * head_stride as the mask's offset and columns
     * [h * f, (h + 1) * f) of x and y (dy and dx): each element the same sum in edge
     * order. One sweep over a's nonzeros instead of one per head. */
    void (*spmm_dropout_heads)(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                               uint64_t stream, uint64_t offset, uint64_t head_stride,
                               int64_t row_stride, int heads, const float *x, int64_t ldx,
                               int64_t f, float *y, int64_t ldy);
    void (*spmm_dropout_heads_backward_x)(bv_compute *c, const bv_csr *a, float p,
                                          uint64_t seed, uint64_t stream, uint64_t offset,
                                          uint64_t head_stride, int64_t row_stride, int heads,
                                          const float *dy, int64_t lddy, int64_t f, float *dx,
                                          int64_t lddx);

    /* ---- ABI 1.10: memory the backend's kernels use where it lies (optional; NULL: none)
     * mem_alloc returns zeroed memory that the host and this backend's kernels may both
     * read and write (CUDA: managed memory), or NULL when it has none to give (the caller
     * then uses host memory, which every kernel still accepts). mem_free gives it back.
     * No instance: the core installs them for the whole process when an experiment names
     * the plugin, so that bv_alloc_aligned (weights, activations, the graph) takes its
     * memory there and the kernels find it in place instead of copying it per call. */
    void *(*mem_alloc)(size_t bytes);
    void (*mem_free)(void *p);

    /* ---- ABI 1.12: where the graph engine runs a model's tensor tasks (AV, AE, their
     * backward, the loss): 0 on its own tensor workers with this backend's kernels;
     * BV_TASKS_ON_FUNCTIONS on serverless function workers that a controller on each graph
     * server invokes through the run's cloud (the `lambda` plugin: its kernels are cpu's;
     * docs/lambda.md). */
    uint32_t task_placement;

    /* ---- ABI 1.17: moving floats where the backend's memory lies (optional; NULL: the
     * caller does it on the host, as bv_zero and bv_copy_rows below do). For memory of the
     * backend's own (mem_alloc): a host loop over CUDA's managed memory moves every page
     * it touches to the host, and the next kernel moves them back.
     * zero: x[0 .. n) = +0.0f. copy_rows: y[r ldy + j] = x[r ldx + j] (add: +=) for
     * r < rows, j < cols; x and y do not overlap. */
    void (*zero)(bv_compute *c, int64_t n, float *x);
    void (*copy_rows)(bv_compute *c, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                      float *y, int64_t ldy, bool add);

    /* ---- ABI 1.18: that product for a model with heads on a dense input (optional) ----
     * What spmm_dropout_heads (and its gradient) give, to the bit, for a CSR holding every
     * element of the dense rows x cols input a (row stride lda) in column order: each head
     * with its own mask over a, in one sweep over a instead of, per head, a dropout pass
     * and a gemm (GAT's per-head input dropout). */
    void (*dense_dropout_heads)(bv_compute *c, int64_t rows, int64_t cols, const float *a,
                                int64_t lda, float p, uint64_t seed, uint64_t stream,
                                uint64_t offset, uint64_t head_stride, int64_t row_stride,
                                int heads, const float *x, int64_t ldx, int64_t f, float *y,
                                int64_t ldy);
    void (*dense_dropout_heads_backward_x)(bv_compute *c, int64_t rows, int64_t cols,
                                           const float *a, int64_t lda, float p, uint64_t seed,
                                           uint64_t stream, uint64_t offset,
                                           uint64_t head_stride, int64_t row_stride, int heads,
                                           const float *dy, int64_t lddy, int64_t f, float *dx,
                                           int64_t lddx);

    /* ---- ABI 1.20: Adam on scaled gradients (optional; NULL: scale, then adam_step) ----
     * adam_step on grad[i] * grad_scale, rounded as scale() rounds it, to the bit; grad
     * itself is left as it is. Global-norm clipping's scale and the step in one pass over
     * the gradients instead of two. */
    void (*adam_step_scaled)(bv_compute *c, int64_t n, float grad_scale, float *param,
                             const float *grad, float *m, float *v, const bv_adam_params *p);
} bv_compute_ops;

/* zero, or a memset where the back end has none. */
static inline void bv_zero(const bv_compute_ops *k, bv_compute *c, int64_t n, float *x)
{
    if (k->zero)
        k->zero(c, n, x);
    else if (n > 0)
        memset(x, 0, (size_t)n * sizeof *x);
}

/* copy_rows, or the same on the host where the back end has none. */
static inline void bv_copy_rows(const bv_compute_ops *k, bv_compute *c, int64_t rows,
                                int64_t cols, const float *x, int64_t ldx, float *y,
                                int64_t ldy, bool add)
{
    if (k->copy_rows) {
        k->copy_rows(c, rows, cols, x, ldx, y, ldy, add);
        return;
    }
    for (int64_t r = 0; r < rows && cols > 0; r++) {
        if (!add) {
            memcpy(y + r * ldy, x + r * ldx, (size_t)cols * sizeof *y);
            continue;
        }
        for (int64_t j = 0; j < cols; j++)
            y[r * ldy + j] += x[r * ldx + j];
    }
}

enum { BV_TASKS_ON_FUNCTIONS = 1 };

#ifdef __cplusplus
}
#endif
#endif
