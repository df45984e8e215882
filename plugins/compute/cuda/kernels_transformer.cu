/* Transformer kernels of the CUDA plugin (ABI 1.2): LayerNorm, GELU, causal attention and
 * token embeddings, forward and backward, with the cpu plugin's formulas.
 * Thread mapping: LayerNorm's rows and attention's softmax rows take one warp per row;
 * dgamma/dbeta one block per 8 columns (128 row lanes, reduced in a fixed order); GELU one
 * thread per element; attention's products one 256-thread block per 64x64 output tile of
 * one (batch, head) pair, 4x4 outputs per thread; embeddings one block per token (dwpe:
 * per position), threads across the width. Only dwte's scatter uses atomics. */
#include <math.h>
#include <stdint.h>

#include "cuda_internal.h"

#define WARP 32
#define ROWS_PER_BLOCK 8 /* warps of a row kernel's block, one row each */
#define ROW_THREADS (ROWS_PER_BLOCK * WARP)
#define ELEM_THREADS 256
#define EMB_THREADS 128
/* Loops stride over the grid, so capping it only bounds the launch, never the sizes. */
#define GRID_CAP 65536

static unsigned grid_for(int64_t units, int64_t per_block)
{
    int64_t g = (units + per_block - 1) / per_block;
    return (unsigned)(g < GRID_CAP ? g : GRID_CAP);
}

/* xor shuffles leave the same sum in every lane: each pairwise add is commutative. */
__device__ static float warp_sum(float v)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ static float warp_max(float v)
{
    for (int o = WARP / 2; o > 0; o /= 2)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The first row of this warp and the step between its rows (row kernels). */
__device__ static int64_t warp_row(void)
{
    return (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
}

__device__ static int64_t warp_row_step(void)
{
    return (int64_t)gridDim.x * ROWS_PER_BLOCK;
}

/* ---- layernorm ----------------------------------------------------------------------- */

/* Each lane reads and writes only its own columns, so y may be x. */
static __global__ void __launch_bounds__(ROW_THREADS)
layernorm_forward_kernel(int64_t rows, int64_t n, float eps, const float *x,
                         const float *gamma, const float *beta, float *y, float *mean_out,
                         float *rstd_out)
{
    int lane = threadIdx.x % WARP;
    for (int64_t r = warp_row(); r < rows; r += warp_row_step()) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        float s = 0.0f;
        for (int64_t j = lane; j < n; j += WARP)
            s += xr[j];
        float mean = warp_sum(s) / (float)n;
        float v = 0.0f;
        for (int64_t j = lane; j < n; j += WARP) {
            float d = xr[j] - mean;
            v += d * d;
        }
        float rstd = 1.0f / sqrtf(warp_sum(v) / (float)n + eps);
        for (int64_t j = lane; j < n; j += WARP) {
            float o = (xr[j] - mean) * rstd * gamma[j];
            yr[j] = beta ? o + beta[j] : o;
        }
        if (lane == 0) {
            mean_out[r] = mean;
            rstd_out[r] = rstd;
        }
    }
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma. */
static __global__ void __launch_bounds__(ROW_THREADS)
layernorm_backward_dx_kernel(int64_t rows, int64_t n, const float *x, const float *gamma,
                             const float *mean, const float *rstd, const float *dy, float *dx,
                             bool accumulate)
{
    int lane = threadIdx.x % WARP;
    for (int64_t r = warp_row(); r < rows; r += warp_row_step()) {
        const float *xr = x + r * n, *dyr = dy + r * n;
        float *dxr = dx + r * n;
        float m = mean[r], rs = rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t j = lane; j < n; j += WARP) {
            float g = dyr[j] * gamma[j];
            sg += g;
            sgx += g * (xr[j] - m) * rs;
        }
        sg = warp_sum(sg) / (float)n;
        sgx = warp_sum(sgx) / (float)n;
        for (int64_t j = lane; j < n; j += WARP) {
            float d = rs * (dyr[j] * gamma[j] - sg - (xr[j] - m) * rs * sgx);
            dxr[j] = accumulate ? dxr[j] + d : d;
        }
    }
}

/* dgamma and dbeta: a block owns PARAM_COLS columns; its warps read 4 rows x 8 columns
 * (whole 32-byte sectors) and each thread sums every PARAM_ROWS-th row, so the order of
 * the sums, and the bits, are fixed by rows and cols alone. */
#define PARAM_COLS 8
#define PARAM_ROWS 128

static __global__ void __launch_bounds__(PARAM_COLS * PARAM_ROWS)
layernorm_params_kernel(int64_t rows, int64_t n, const float *x, const float *mean,
                        const float *rstd, const float *dy, float *dgamma, float *dbeta)
{
    __shared__ float sg[PARAM_ROWS][PARAM_COLS], sb[PARAM_ROWS][PARAM_COLS];
    int cx = threadIdx.x, ry = threadIdx.y;
    int64_t c = (int64_t)blockIdx.x * PARAM_COLS + cx;
    float ag = 0.0f, ab = 0.0f;
    if (c < n)
        for (int64_t r = ry; r < rows; r += PARAM_ROWS) {
            float d = dy[r * n + c];
            ag += d * (x[r * n + c] - mean[r]) * rstd[r];
            ab += d;
        }
    sg[ry][cx] = ag;
    sb[ry][cx] = ab;
    __syncthreads();
    for (int half = PARAM_ROWS / 2; half > 0; half /= 2) {
        if (ry < half) {
            sg[ry][cx] += sg[ry + half][cx];
            sb[ry][cx] += sb[ry + half][cx];
        }
        __syncthreads();
    }
    if (ry == 0 && c < n) {
        dgamma[c] += sg[0][cx];
        if (dbeta)
            dbeta[c] += sb[0][cx];
    }
}

void cu_layernorm_forward(cudaStream_t s, int64_t rows, int64_t cols, float eps,
                          const float *x, const float *gamma, const float *beta, float *y,
                          float *mean, float *rstd)
{
    if (rows <= 0 || cols <= 0)
        return;
    layernorm_forward_kernel<<<grid_for(rows, ROWS_PER_BLOCK), ROW_THREADS, 0, s>>>(
        rows, cols, eps, x, gamma, beta, y, mean, rstd);
}

/* dx before the parameters, as the cpu plugin orders them; dbeta goes with dgamma (the
 * cpu plugin skips both when dgamma is NULL). */
void cu_layernorm_backward(cudaStream_t s, int64_t rows, int64_t cols, const float *x,
                           const float *gamma, const float *mean, const float *rstd,
                           const float *dy, float *dx, bool accumulate, float *dgamma,
                           float *dbeta)
{
    if (rows <= 0 || cols <= 0)
        return;
    if (dx)
        layernorm_backward_dx_kernel<<<grid_for(rows, ROWS_PER_BLOCK), ROW_THREADS, 0, s>>>(
            rows, cols, x, gamma, mean, rstd, dy, dx, accumulate);
    if (dgamma) {
        unsigned blocks = (unsigned)((cols + PARAM_COLS - 1) / PARAM_COLS);
        layernorm_params_kernel<<<blocks, dim3(PARAM_COLS, PARAM_ROWS), 0, s>>>(
            rows, cols, x, mean, rstd, dy, dgamma, dbeta);
    }
}

/* ---- gelu ---------------------------------------------------------------------------- */

#define GELU_INV_SQRT_2 0.70710678118654752f
#define GELU_INV_SQRT_2PI 0.39894228040143268f

/* Phi(x) = erfc(-x / sqrt 2) / 2: the same function as (1 + erf(x / sqrt 2)) / 2, but
 * without the cancellation that leaves few correct bits of Phi for x below about -4. */
__device__ static float gelu_cdf(float x)
{
    return 0.5f * erfcf(-x * GELU_INV_SQRT_2);
}

/* Elementwise, so y may be x (and dx may be dy). */
static __global__ void __launch_bounds__(ELEM_THREADS)
gelu_forward_kernel(int64_t n, const float *x, float *y)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        y[i] = x[i] * gelu_cdf(x[i]);
}

/* d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). */
static __global__ void __launch_bounds__(ELEM_THREADS)
gelu_backward_kernel(int64_t n, const float *x, const float *dy, float *dx)
{
    int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        float v = x[i];
        float pdf = GELU_INV_SQRT_2PI * expf(-0.5f * v * v);
        dx[i] = dy[i] * (gelu_cdf(v) + v * pdf);
    }
}

void cu_gelu_forward(cudaStream_t s, int64_t n, const float *x, float *y)
{
    if (n <= 0)
        return;
    gelu_forward_kernel<<<grid_for(n, ELEM_THREADS), ELEM_THREADS, 0, s>>>(n, x, y);
}

void cu_gelu_backward(cudaStream_t s, int64_t n, const float *x, const float *dy, float *dx)
{
    if (n <= 0)
        return;
    gelu_backward_kernel<<<grid_for(n, ELEM_THREADS), ELEM_THREADS, 0, s>>>(n, x, dy, dx);
}

/* ---- causal attention ---------------------------------------------------------------- */

/* Attention is the cpu plugin's sequence of per-(batch, head) products and row passes:
 *   forward:  att = scale Q K^T; causal softmax of att's rows; out = att V
 *   backward: ds = dO V^T and dV = att^T dO; ds = att * (ds - rowsum(att * ds));
 *             dQ = scale ds K and dK = scale ds^T Q.
 * Every product runs through one tiled kernel that reads its operands through strides
 * (a transpose is a swap of strides) and uses the causal zeros to skip work. */
#define TILE 64
#define TILE_K 16
#define TILE_PAD 4 /* keeps float4 reads aligned and column-wise stores 2-way conflicted */
#define GEMM_THREADS 256

/* Element (r, c) of pair u = (b, h) is p[b * batch + h * head + r * row + c * col]. */
template <typename T> struct attn_view {
    T *p;
    int64_t row, col, batch, head;

    __device__ T *pair(int64_t u, int heads) const
    {
        return p + (u / heads) * batch + (u % heads) * head;
    }
};

/* Which causal zeros a product may skip:
 * CAUSAL_TILES: the output is only read at (m, n), n <= m: tiles wholly above the diagonal
 *               are not computed (the row pass writes those zeros).
 * K_PREFIX:     A is lower triangular (A[m, k] = 0 for k > m): sum k <= the tile's last m.
 * K_SUFFIX:     A is upper triangular (an att^T): sum k >= the tile's first m. */
enum attn_causal { CAUSAL_TILES, K_PREFIX, K_SUFFIX };

/* C (m x n) = alpha * A (m x k) B (k x n) for every (batch, head) pair. */
struct attn_gemm {
    int64_t m, n, k;
    int heads;
    float alpha;
    attn_causal causal;
    attn_view<const float> a, b;
    attn_view<float> c;
};

typedef float attn_tile[TILE_K][TILE + TILE_PAD];

#define TILE_LOADS (TILE * TILE_K / GEMM_THREADS) /* a tile's elements per thread */

/* Element e of this thread's share of a tile is (o, kk); consecutive threads walk whichever
 * index is contiguous in memory. */
__device__ static void tile_slot(int e, bool o_contiguous, int &o, int &kk)
{
    int idx = threadIdx.x + e * GEMM_THREADS;
    o = o_contiguous ? idx % TILE : idx / TILE_K;
    kk = o_contiguous ? idx / TILE : idx % TILE_K;
}

/* This thread's share of p[(o0 + o) * so + (k0 + kk) * sk], 0 outside [.., olim) x
 * [.., klim), into registers: the next tile's loads are in flight during this one's
 * products. */
__device__ static void fetch_tile(float (&r)[TILE_LOADS], const float *p, int64_t so,
                                  int64_t sk, int64_t o0, int64_t olim, int64_t k0,
                                  int64_t klim)
{
#pragma unroll
    for (int e = 0; e < TILE_LOADS; e++) {
        int o, kk;
        tile_slot(e, so == 1, o, kk);
        int64_t go = o0 + o, gk = k0 + kk;
        r[e] = go < olim && gk < klim ? p[go * so + gk * sk] : 0.0f;
    }
}

__device__ static void stash_tile(attn_tile &dst, const float (&r)[TILE_LOADS], int64_t so)
{
#pragma unroll
    for (int e = 0; e < TILE_LOADS; e++) {
        int o, kk;
        tile_slot(e, so == 1, o, kk);
        dst[kk][o] = r[e];
    }
}

/* Thread (ty, tx) of the 16 x 16 grid accumulates rows ty*4.. and columns tx*4.. of the
 * tile: two float4 shared-memory reads feed 16 multiply-adds. */
__device__ static void tile_multiply(const attn_tile &as, const attn_tile &bs, int ty, int tx,
                                     float acc[4][4])
{
#pragma unroll
    for (int kk = 0; kk < TILE_K; kk++) {
        float4 av = *reinterpret_cast<const float4 *>(&as[kk][ty * 4]);
        float4 bv = *reinterpret_cast<const float4 *>(&bs[kk][tx * 4]);
        float ar[4] = {av.x, av.y, av.z, av.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                acc[i][j] += ar[i] * br[j];
    }
}

/* Writes alpha * acc. A row's 4 outputs go as one float4 where they are contiguous and
 * aligned (att's and out's rows usually are): whole 32-byte sectors, not 4-byte pieces. */
__device__ static void store_tile(const attn_gemm &g, int64_t u, int64_t m0, int64_t n0,
                                  int ty, int tx, const float (&acc)[4][4])
{
    float *c = g.c.pair(u, g.heads);
    int64_t col0 = n0 + tx * 4;
    for (int i = 0; i < 4; i++) {
        int64_t r = m0 + ty * 4 + i;
        if (r >= g.m)
            break;
        float *dst = c + r * g.c.row + col0 * g.c.col;
        if (g.c.col == 1 && col0 + 4 <= g.n && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {
            *reinterpret_cast<float4 *>(dst) =
                make_float4(g.alpha * acc[i][0], g.alpha * acc[i][1], g.alpha * acc[i][2],
                            g.alpha * acc[i][3]);
            continue;
        }
        for (int j = 0; j < 4 && col0 + j < g.n; j++)
            dst[j * g.c.col] = g.alpha * acc[i][j];
    }
}

/* Block (u, mt, nt): tile (mt, nt) of pair u's product. */
static __global__ void __launch_bounds__(GEMM_THREADS) attn_gemm_kernel(attn_gemm g)
{
    __shared__ __align__(16) attn_tile as, bs;
    int64_t u = blockIdx.x, m0 = (int64_t)blockIdx.y * TILE, n0 = (int64_t)blockIdx.z * TILE;
    if (g.causal == CAUSAL_TILES && n0 > m0)
        return;
    int64_t kb = g.causal == K_SUFFIX ? m0 : 0;
    int64_t ke = g.causal == K_PREFIX && m0 + TILE < g.k ? m0 + TILE : g.k;
    const float *a = g.a.pair(u, g.heads), *b = g.b.pair(u, g.heads);
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {}, ra[TILE_LOADS], rb[TILE_LOADS];
    fetch_tile(ra, a, g.a.row, g.a.col, m0, g.m, kb, ke);
    fetch_tile(rb, b, g.b.col, g.b.row, n0, g.n, kb, ke);
    for (int64_t k0 = kb; k0 < ke; k0 += TILE_K) {
        stash_tile(as, ra, g.a.row);
        stash_tile(bs, rb, g.b.col);
        __syncthreads();
        if (k0 + TILE_K < ke) {
            fetch_tile(ra, a, g.a.row, g.a.col, m0, g.m, k0 + TILE_K, ke);
            fetch_tile(rb, b, g.b.col, g.b.row, n0, g.n, k0 + TILE_K, ke);
        }
        tile_multiply(as, bs, ty, tx, acc);
        __syncthreads();
    }
    store_tile(g, u, m0, n0, ty, tx, acc);
}

/* Grid: x over pairs, y and z over tiles (at most 65535 each: seq and head_dim up to
 * 4 194 240, far beyond what att's seq^2 per pair lets fit in memory). */
static void attn_gemm_launch(cudaStream_t s, int64_t pairs, const attn_gemm &g)
{
    dim3 grid((unsigned)pairs, (unsigned)((g.m + TILE - 1) / TILE),
              (unsigned)((g.n + TILE - 1) / TILE));
    attn_gemm_kernel<<<grid, GEMM_THREADS, 0, s>>>(g);
}

/* Row r of att (pair r / seq, query i = r % seq): softmax over j <= i, 0 above. Each lane
 * rereads only the entries it wrote. */
static __global__ void __launch_bounds__(ROW_THREADS)
attn_softmax_kernel(int64_t rows, int64_t seq, float *att)
{
    int lane = threadIdx.x % WARP;
    for (int64_t r = warp_row(); r < rows; r += warp_row_step()) {
        int64_t i = r % seq;
        float *p = att + r * seq;
        float mx = p[0];
        for (int64_t j = lane; j <= i; j += WARP)
            mx = fmaxf(mx, p[j]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int64_t j = lane; j <= i; j += WARP) {
            float e = expf(p[j] - mx);
            p[j] = e;
            sum += e;
        }
        float inv = 1.0f / warp_sum(sum);
        for (int64_t j = lane; j < seq; j += WARP)
            p[j] = j <= i ? p[j] * inv : 0.0f;
    }
}

/* Row r of ds (holding dP = dO V^T on entry): ds = att * (dP - sum_j att * dP), 0 above
 * the diagonal. */
static __global__ void __launch_bounds__(ROW_THREADS)
attn_softmax_backward_kernel(int64_t rows, int64_t seq, const float *att, float *ds)
{
    int lane = threadIdx.x % WARP;
    for (int64_t r = warp_row(); r < rows; r += warp_row_step()) {
        int64_t i = r % seq;
        const float *pr = att + r * seq;
        float *dr = ds + r * seq;
        float dot = 0.0f;
        for (int64_t j = lane; j <= i; j += WARP)
            dot += pr[j] * dr[j];
        dot = warp_sum(dot);
        for (int64_t j = lane; j < seq; j += WARP)
            dr[j] = j <= i ? pr[j] * (dr[j] - dot) : 0.0f;
    }
}

/* The strided views of one problem's operands (qkv's Q, K, V; att or ds; out or dout). */
struct attn_layout {
    int64_t seq, d, c, ld, ss;
    int heads;
};

static attn_layout attn_layout_of(int64_t seq, int heads, int64_t head_dim)
{
    int64_t c = (int64_t)heads * head_dim;
    return {seq, head_dim, c, 3 * c, seq * seq, heads};
}

/* Q, K or V (part 0, 1, 2 of qkv) as rows x head_dim, or transposed. */
template <typename T>
static attn_view<T> qkv_view(const attn_layout &l, T *qkv, int part, bool transposed)
{
    T *p = qkv + part * l.c;
    return transposed ? attn_view<T>{p, 1, l.ld, l.seq * l.ld, l.d}
                      : attn_view<T>{p, l.ld, 1, l.seq * l.ld, l.d};
}

template <typename T>
static attn_view<T> square_view(const attn_layout &l, T *att, bool transposed)
{
    return transposed ? attn_view<T>{att, 1, l.seq, l.heads * l.ss, l.ss}
                      : attn_view<T>{att, l.seq, 1, l.heads * l.ss, l.ss};
}

template <typename T> static attn_view<T> token_view(const attn_layout &l, T *out)
{
    return {out, l.c, 1, l.seq * l.c, l.d};
}

/* head_dim 0 counts as empty: out and dqkv have no columns (the cpu plugin would still
 * write att as 0/0 scores' softmax; nothing sensible asks for it). */
void cu_attention_forward(cudaStream_t s, int64_t batch, int64_t seq, int heads,
                          int64_t head_dim, const float *qkv, float *att, float *out)
{
    if (batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0)
        return;
    attn_layout l = attn_layout_of(seq, heads, head_dim);
    int64_t pairs = batch * heads;
    float scale = 1.0f / sqrtf((float)head_dim);
    attn_gemm scores = {seq, seq, head_dim, heads, scale, CAUSAL_TILES,
                        qkv_view(l, qkv, 0, false), qkv_view(l, qkv, 1, true),
                        square_view(l, att, false)};
    attn_gemm_launch(s, pairs, scores);
    attn_softmax_kernel<<<grid_for(pairs * seq, ROWS_PER_BLOCK), ROW_THREADS, 0, s>>>(
        pairs * seq, seq, att);
    attn_gemm values = {seq, head_dim, seq, heads, 1.0f, K_PREFIX,
                        square_view(l, (const float *)att, false), qkv_view(l, qkv, 2, false),
                        token_view(l, out)};
    attn_gemm_launch(s, pairs, values);
}

void cu_attention_backward(cudaStream_t s, int64_t batch, int64_t seq, int heads,
                           int64_t head_dim, const float *qkv, const float *att,
                           const float *dout, float *scratch, float *dqkv)
{
    if (batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0)
        return;
    attn_layout l = attn_layout_of(seq, heads, head_dim);
    int64_t pairs = batch * heads;
    float scale = 1.0f / sqrtf((float)head_dim);
    attn_gemm dp = {seq, seq, head_dim, heads, 1.0f, CAUSAL_TILES, token_view(l, dout),
                    qkv_view(l, qkv, 2, true), square_view(l, scratch, false)};
    attn_gemm_launch(s, pairs, dp);
    attn_gemm dv = {seq, head_dim, seq, heads, 1.0f, K_SUFFIX, square_view(l, att, true),
                    token_view(l, dout), qkv_view(l, dqkv, 2, false)};
    attn_gemm_launch(s, pairs, dv);
    attn_softmax_backward_kernel<<<grid_for(pairs * seq, ROWS_PER_BLOCK), ROW_THREADS, 0, s>>>(
        pairs * seq, seq, att, scratch);
    const float *ds = scratch;
    attn_gemm dq = {seq, head_dim, seq, heads, scale, K_PREFIX, square_view(l, ds, false),
                    qkv_view(l, qkv, 1, false), qkv_view(l, dqkv, 0, false)};
    attn_gemm_launch(s, pairs, dq);
    attn_gemm dk = {seq, head_dim, seq, heads, scale, K_SUFFIX, square_view(l, ds, true),
                    qkv_view(l, qkv, 0, false), qkv_view(l, dqkv, 1, false)};
    attn_gemm_launch(s, pairs, dk);
}

/* ---- embeddings ---------------------------------------------------------------------- */

static __global__ void __launch_bounds__(EMB_THREADS)
embedding_forward_kernel(int64_t tokens_n, int64_t seq, int64_t dim, const int32_t *tokens,
                         const float *wte, const float *wpe, float *out)
{
    for (int64_t t = blockIdx.x; t < tokens_n; t += gridDim.x) {
        const float *w = wte + (int64_t)tokens[t] * dim;
        const float *pe = wpe ? wpe + (t % seq) * dim : NULL;
        float *o = out + t * dim;
        for (int64_t j = threadIdx.x; j < dim; j += EMB_THREADS)
            o[j] = pe ? w[j] + pe[j] : w[j];
    }
}

/* Tokens repeat, so rows of dwte are hit by many blocks at once: atomicAdd, and the order
 * of the adds (the cpu plugin's is token order) is not fixed, nor are the low bits. */
static __global__ void __launch_bounds__(EMB_THREADS)
embedding_backward_wte_kernel(int64_t tokens_n, int64_t dim, const int32_t *tokens,
                              const float *dout, float *dwte)
{
    for (int64_t t = blockIdx.x; t < tokens_n; t += gridDim.x) {
        const float *d = dout + t * dim;
        float *g = dwte + (int64_t)tokens[t] * dim;
        for (int64_t j = threadIdx.x; j < dim; j += EMB_THREADS)
            atomicAdd(&g[j], d[j]);
    }
}

/* Each dwpe element belongs to one thread, which adds the batch in order: the cpu
 * plugin's sums, to the bit. */
static __global__ void __launch_bounds__(EMB_THREADS)
embedding_backward_wpe_kernel(int64_t batch, int64_t seq, int64_t dim, const float *dout,
                              float *dwpe)
{
    for (int64_t p = blockIdx.x; p < seq; p += gridDim.x)
        for (int64_t j = threadIdx.x; j < dim; j += EMB_THREADS) {
            float g = dwpe[p * dim + j];
            for (int64_t b = 0; b < batch; b++)
                g += dout[(b * seq + p) * dim + j];
            dwpe[p * dim + j] = g;
        }
}

void cu_embedding_forward(cudaStream_t s, int64_t batch, int64_t seq, int64_t dim,
                          const int32_t *tokens, const float *wte, const float *wpe,
                          float *out)
{
    if (batch <= 0 || seq <= 0 || dim <= 0)
        return;
    int64_t n = batch * seq;
    embedding_forward_kernel<<<grid_for(n, 1), EMB_THREADS, 0, s>>>(n, seq, dim, tokens, wte,
                                                                    wpe, out);
}

void cu_embedding_backward(cudaStream_t s, int64_t batch, int64_t seq, int64_t dim,
                           const int32_t *tokens, const float *dout, float *dwte, float *dwpe)
{
    if (batch <= 0 || seq <= 0 || dim <= 0)
        return;
    int64_t n = batch * seq;
    embedding_backward_wte_kernel<<<grid_for(n, 1), EMB_THREADS, 0, s>>>(n, dim, tokens, dout,
                                                                         dwte);
    if (dwpe)
        embedding_backward_wpe_kernel<<<grid_for(seq, 1), EMB_THREADS, 0, s>>>(batch, seq, dim,
                                                                               dout, dwpe);
}
