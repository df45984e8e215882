/* Dense kernels of the CUDA plugin: the elementwise ops (one thread per element, a
 * grid-stride loop), the bias ops, Adam, and the two reductions (sum of squares, softmax
 * cross-entropy). The reductions sum in double in a fixed order for a given size (fixed
 * blocks, then one block over their partials), so they give the same bits every run. */
#include <math.h>

#include "cuda_internal.h"

#define CU_THREADS 256

/* Enough blocks to cover n with CU_THREADS threads each, capped (the loops stride). */
static unsigned grid_for(int64_t n)
{
    int64_t b = (n + CU_THREADS - 1) / CU_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

#define FOR_EACH(i, n)                                                                       \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                \
         i += (int64_t)gridDim.x * blockDim.x)

/* ---- activations --------------------------------------------------------------------- */

__global__ void relu_fwd(int64_t n, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_bwd(int64_t n, const float *y, const float *dy, float *dx)
{
    FOR_EACH(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void leaky_fwd(int64_t n, float slope, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : slope * x[i];
}

__global__ void leaky_bwd(int64_t n, float slope, const float *x, const float *dy, float *dx)
{
    FOR_EACH(i, n) dx[i] = x[i] > 0.0f ? dy[i] : slope * dy[i];
}

__global__ void elu_fwd(int64_t n, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] = x[i] > 0.0f ? x[i] : expm1f(x[i]);
}

__global__ void elu_bwd(int64_t n, const float *x, const float *dy, float *dx)
{
    FOR_EACH(i, n) dx[i] = dy[i] * (x[i] > 0.0f ? 1.0f : expf(x[i]));
}

__global__ void dropout_k(int64_t n, cu_dropout d, uint64_t offset, const float *x, float *y)
{
    /* as the cpu: a dropped element is +0, and a zero input passes with its sign */
    FOR_EACH(i, n)
    {
        float v = x[i];
        y[i] = cu_keep(d, offset + (uint64_t)i) || v == 0.0f ? v * d.scale : 0.0f;
    }
}

extern "C" void cu_relu_forward(cudaStream_t s, int64_t n, const float *x, float *y)
{
    if (n > 0)
        relu_fwd<<<grid_for(n), CU_THREADS, 0, s>>>(n, x, y);
}

extern "C" void cu_relu_backward(cudaStream_t s, int64_t n, const float *y, const float *dy,
                                 float *dx)
{
    if (n > 0)
        relu_bwd<<<grid_for(n), CU_THREADS, 0, s>>>(n, y, dy, dx);
}

extern "C" void cu_leaky_relu_forward(cudaStream_t s, int64_t n, float slope, const float *x,
                                      float *y)
{
    if (n > 0)
        leaky_fwd<<<grid_for(n), CU_THREADS, 0, s>>>(n, slope, x, y);
}

extern "C" void cu_leaky_relu_backward(cudaStream_t s, int64_t n, float slope, const float *x,
                                       const float *dy, float *dx)
{
    if (n > 0)
        leaky_bwd<<<grid_for(n), CU_THREADS, 0, s>>>(n, slope, x, dy, dx);
}

extern "C" void cu_elu_forward(cudaStream_t s, int64_t n, const float *x, float *y)
{
    if (n > 0)
        elu_fwd<<<grid_for(n), CU_THREADS, 0, s>>>(n, x, y);
}

extern "C" void cu_elu_backward(cudaStream_t s, int64_t n, const float *x, const float *dy,
                                float *dx)
{
    if (n > 0)
        elu_bwd<<<grid_for(n), CU_THREADS, 0, s>>>(n, x, dy, dx);
}

extern "C" void cu_dropout_apply(cudaStream_t s, int64_t n, cu_dropout d, uint64_t offset,
                                 const float *x, float *y)
{
    if (n > 0)
        dropout_k<<<grid_for(n), CU_THREADS, 0, s>>>(n, d, offset, x, y);
}

/* ---- Adam, bias, axpy, scale, copy ----------------------------------------------------- */

__global__ void adam_k(int64_t n, float *param, const float *grad, float *m, float *v,
                       cu_adam a)
{
    FOR_EACH(i, n)
    {
        float p = param[i];
        float g = grad[i] + a.l2 * p;
        p *= a.decay;
        float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
        float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = p - a.step_size * mi / (sqrtf(vi) * a.inv_sqrt_bc2 + a.eps);
    }
}

__global__ void add_bias_k(int64_t rows, int64_t cols, const float *bias, float *y)
{
    FOR_EACH(i, rows * cols) y[i] += bias[i % cols];
}

/* One thread per column, summing its rows in row order in double (the cpu's order): the
 * reads of a warp are 32 neighbouring floats of one row, coalesced. */
/* dbias = column sums of dy in two passes: block p sums rows [p R, (p + 1) R) of every
 * column into partial[p cols + j], then each column adds its blocks' partials in order. A
 * thread per column walking every row left a 62,500 x 64 gradient to 64 threads (12 ms on
 * an H100). Sums in double, in a fixed order for a given size: the same bits every run. */
__global__ void bias_bwd_part_k(int64_t rows, int64_t cols, const float *dy, double *partial)
{
    int64_t r0 = (int64_t)blockIdx.x * CU_BIAS_ROWS;
    int64_t r1 = r0 + CU_BIAS_ROWS < rows ? r0 + CU_BIAS_ROWS : rows;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        double acc = 0.0;
        for (int64_t r = r0; r < r1; r++)
            acc += (double)dy[r * cols + j];
        partial[(int64_t)blockIdx.x * cols + j] = acc;
    }
}

__global__ void bias_bwd_sum_k(int64_t parts, int64_t cols, const double *partial,
                               float *dbias, bool accumulate)
{
    FOR_EACH(j, cols)
    {
        double acc = accumulate ? (double)dbias[j] : 0.0;
        for (int64_t p = 0; p < parts; p++)
            acc += partial[p * cols + j];
        dbias[j] = (float)acc;
    }
}

__global__ void copy_rows_k(int64_t rows, int64_t cols, const float *x, int64_t ldx, float *y,
                            int64_t ldy, bool add)
{
    FOR_EACH(i, rows * cols)
    {
        int64_t r = i / cols, j = i - r * cols;
        float v = x[r * ldx + j];
        y[r * ldy + j] = add ? y[r * ldy + j] + v : v;
    }
}

__global__ void sum_parts_k(int parts, int64_t m, int64_t n, const float *ws, float alpha,
                            float beta, float *c, int64_t ldc)
{
    FOR_EACH(i, m * n)
    {
        float s = 0.0f;
        for (int p = 0; p < parts; p++)
            s += ws[(int64_t)p * m * n + i];
        int64_t r = i / n, j = i - r * n;
        float *d = c + r * ldc + j;
        *d = beta == 0.0f ? alpha * s : alpha * s + beta * *d;
    }
}

__global__ void axpy_k(int64_t n, float alpha, const float *x, float *y)
{
    FOR_EACH(i, n) y[i] += alpha * x[i];
}

__global__ void scale_k(int64_t n, float alpha, float *x)
{
    FOR_EACH(i, n) x[i] *= alpha;
}

/* 16-byte loads and stores when both ends allow them: the bandwidth probe. */
__global__ void copy_k(int64_t n4, const float4 *x, float4 *y)
{
    FOR_EACH(i, n4) y[i] = x[i];
}

__global__ void copy_tail_k(int64_t from, int64_t n, const float *x, float *y)
{
    FOR_EACH(i, n - from) y[from + i] = x[from + i];
}

extern "C" void cu_adam_step(cudaStream_t s, int64_t n, float *param, const float *grad,
                             float *m, float *v, cu_adam a)
{
    if (n > 0)
        adam_k<<<grid_for(n), CU_THREADS, 0, s>>>(n, param, grad, m, v, a);
}

extern "C" void cu_add_bias(cudaStream_t s, int64_t rows, int64_t cols, const float *bias,
                            float *y)
{
    if (rows > 0 && cols > 0)
        add_bias_k<<<grid_for(rows * cols), CU_THREADS, 0, s>>>(rows, cols, bias, y);
}

extern "C" void cu_bias_backward(cudaStream_t s, int64_t rows, int64_t cols, const float *dy,
                                 double *partial, float *dbias, bool accumulate)
{
    if (cols <= 0)
        return;
    int64_t parts = (rows + CU_BIAS_ROWS - 1) / CU_BIAS_ROWS;
    if (parts > 0)
        bias_bwd_part_k<<<(unsigned)parts, cols < CU_THREADS ? (unsigned)((cols + 31) / 32 * 32)
                                                              : CU_THREADS,
                          0, s>>>(rows, cols, dy, partial);
    bias_bwd_sum_k<<<grid_for(cols), CU_THREADS, 0, s>>>(parts, cols, partial, dbias,
                                                          accumulate);
}

extern "C" void cu_copy_rows(cudaStream_t s, int64_t rows, int64_t cols, const float *x,
                             int64_t ldx, float *y, int64_t ldy, bool add)
{
    if (rows > 0 && cols > 0)
        copy_rows_k<<<grid_for(rows * cols), CU_THREADS, 0, s>>>(rows, cols, x, ldx, y, ldy,
                                                                 add);
}

extern "C" void cu_sum_parts(cudaStream_t s, int parts, int64_t m, int64_t n, const float *ws,
                             float alpha, float beta, float *c, int64_t ldc)
{
    if (m > 0 && n > 0)
        sum_parts_k<<<grid_for(m * n), CU_THREADS, 0, s>>>(parts, m, n, ws, alpha, beta, c,
                                                           ldc);
}

extern "C" void cu_axpy(cudaStream_t s, int64_t n, float alpha, const float *x, float *y)
{
    if (n > 0)
        axpy_k<<<grid_for(n), CU_THREADS, 0, s>>>(n, alpha, x, y);
}

extern "C" void cu_scale(cudaStream_t s, int64_t n, float alpha, float *x)
{
    if (n > 0)
        scale_k<<<grid_for(n), CU_THREADS, 0, s>>>(n, alpha, x);
}

extern "C" void cu_copy(cudaStream_t s, int64_t n, const float *x, float *y)
{
    if (n <= 0)
        return;
    int64_t n4 = ((uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0) ? n / 4 : 0;
    if (n4 > 0)
        copy_k<<<grid_for(n4), CU_THREADS, 0, s>>>(n4, (const float4 *)x, (float4 *)y);
    if (4 * n4 < n)
        copy_tail_k<<<grid_for(n - 4 * n4), CU_THREADS, 0, s>>>(4 * n4, n, x, y);
}

/* ---- reductions ---------------------------------------------------------------------- */

/* Sum of the block's threads' values, in a fixed tree order; the result in thread 0. */
__device__ static double block_sum(double v, double *shared)
{
    for (int off = 16; off > 0; off /= 2)
        v += __shfl_down_sync(0xffffffffu, v, off);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    v = 0.0;
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? shared[lane] : 0.0;
        for (int off = 16; off > 0; off /= 2)
            v += __shfl_down_sync(0xffffffffu, v, off);
    }
    __syncthreads(); /* shared is reused by the next call */
    return v;
}

/* Block b of nblocks sums elements [b * chunk, (b + 1) * chunk). */
__global__ void sumsq_partial(int64_t n, int64_t chunk, const float *x, double *partial)
{
    __shared__ double sh[CU_THREADS / 32];
    int64_t lo = (int64_t)blockIdx.x * chunk;
    int64_t hi = lo + chunk < n ? lo + chunk : n;
    double acc = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
        acc += (double)x[i] * (double)x[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0)
        partial[blockIdx.x] = acc;
}

/* One block adds `width` columns of nblocks partials (stride width), into out[0..width). */
__global__ void sum_partials(int nblocks, int width, const double *partial, double *out)
{
    __shared__ double sh[CU_THREADS / 32];
    for (int w = 0; w < width; w++) {
        double acc = 0.0;
        for (int b = threadIdx.x; b < nblocks; b += blockDim.x)
            acc += partial[(int64_t)b * width + w];
        acc = block_sum(acc, sh);
        if (threadIdx.x == 0)
            out[w] = acc;
    }
}

static int64_t reduce_chunk(int64_t n, int64_t min_chunk, int *nblocks)
{
    int64_t chunk = (n + CU_REDUCE_BLOCKS - 1) / CU_REDUCE_BLOCKS;
    if (chunk < min_chunk)
        chunk = min_chunk;
    *nblocks = (int)((n + chunk - 1) / chunk);
    return chunk;
}

extern "C" void cu_sum_squares(cudaStream_t s, int64_t n, const float *x, double *partial,
                               double *out)
{
    if (n <= 0) {
        cudaMemsetAsync(out, 0, sizeof *out, s);
        return;
    }
    int nblocks;
    int64_t chunk = reduce_chunk(n, 4096, &nblocks);
    sumsq_partial<<<nblocks, CU_THREADS, 0, s>>>(n, chunk, x, partial);
    sum_partials<<<1, CU_THREADS, 0, s>>>(nblocks, 1, partial, out);
}

/* Softmax cross-entropy: one warp per row, lanes over its columns; a block of
 * CU_THREADS / 32 warps walks its chunk of rows, and its {loss, count, correct} partials
 * are summed in a fixed order. dlogits may alias logits: each lane writes only the columns
 * it has read, after the row's max and sum are known. */
__global__ void xent_partial(int64_t n, int64_t k, int64_t chunk, const float *logits,
                             const int32_t *labels, const uint8_t *mask, float grad_scale,
                             float *dlogits, double *partial)
{
    __shared__ double sh[CU_THREADS / 32];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    int64_t lo = (int64_t)blockIdx.x * chunk;
    int64_t hi = lo + chunk < n ? lo + chunk : n;
    double loss = 0.0, count = 0.0, correct = 0.0;
    for (int64_t i = lo + warp; i < hi; i += warps) {
        const float *l = logits + i * k;
        int32_t label = labels[i];
        bool counted = (!mask || mask[i]) && label >= 0 && label < k;
        if (!counted) {
            if (dlogits)
                for (int64_t j = lane; j < k; j += 32)
                    dlogits[i * k + j] = 0.0f;
            continue;
        }
        float mx = -INFINITY;
        int64_t arg = k;
        for (int64_t j = lane; j < k; j += 32)
            if (l[j] > mx) {
                mx = l[j];
                arg = j;
            }
        for (int off = 16; off > 0; off /= 2) { /* the first maximum, as the cpu's argmax */
            float om = __shfl_down_sync(0xffffffffu, mx, off);
            int64_t oa = __shfl_down_sync(0xffffffffu, arg, off);
            if (om > mx || (om == mx && oa < arg)) {
                mx = om;
                arg = oa;
            }
        }
        mx = __shfl_sync(0xffffffffu, mx, 0);
        arg = __shfl_sync(0xffffffffu, arg, 0);
        float shifted_label = l[label] - mx;
        double sum = 0.0;
        for (int64_t j = lane; j < k; j += 32)
            sum += (double)expf(l[j] - mx);
        for (int off = 16; off > 0; off /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, off);
        __syncwarp();
        if (dlogits) {
            float scale = (float)((double)grad_scale / sum);
            for (int64_t j = lane; j < k; j += 32) {
                float d = expf(l[j] - mx) * scale;
                dlogits[i * k + j] = j == label ? d - grad_scale : d;
            }
        }
        if (lane == 0) {
            loss += log(sum) - (double)shifted_label;
            count += 1.0;
            correct += arg == label ? 1.0 : 0.0;
        }
    }
    loss = block_sum(loss, sh);
    count = block_sum(count, sh);
    correct = block_sum(correct, sh);
    if (threadIdx.x == 0) {
        partial[3 * (int64_t)blockIdx.x + 0] = loss;
        partial[3 * (int64_t)blockIdx.x + 1] = count;
        partial[3 * (int64_t)blockIdx.x + 2] = correct;
    }
}

extern "C" void cu_softmax_xent(cudaStream_t s, int64_t n, int64_t k, const float *logits,
                                const int32_t *labels, const uint8_t *mask, float grad_scale,
                                float *dlogits, double *partial, double *out)
{
    if (n <= 0 || k <= 0) {
        cudaMemsetAsync(out, 0, 3 * sizeof *out, s);
        return;
    }
    int nblocks;
    int64_t chunk = reduce_chunk(n, 64, &nblocks);
    xent_partial<<<nblocks, CU_THREADS, 0, s>>>(n, k, chunk, logits, labels, mask, grad_scale,
                                                 dlogits, partial);
    sum_partials<<<1, CU_THREADS, 0, s>>>(nblocks, 3, partial, out);
}
