/* An example compute plugin built out of tree against the installed SDK: the kernels of
 * plugin ABI 1.0 as plain single-threaded C loops, enough to train GCN (and the example
 * mlp). A starting point to copy (docs/plugins.md), and a reference to test a fast back
 * end against: each kernel is its contract in compute.h written out.
 *
 * bv_compute_ops grows with each ABI minor (1.1: GAT's edge kernels, 1.2: the
 * transformer's, 1.3: a sparse first layer). A plugin fills at least the 1.0 slots,
 * create .. sum_squares; the ones it leaves out are NULL. GCN looks for spmm_dropout
 * (1.3) and without it uses dropout + gemm; a model that needs a later kernel (GAT: 1.1,
 * the transformer: 1.2) needs a back end that fills it.
 *
 * Build: cmake or make in this directory (CMakeLists.txt, Makefile); then
 *   BIVOUAC_PLUGIN_PATH=<dir with compute_naive.so> bivouac run gcn-quickstart.yaml \
 *       -s 'compute={plugin: naive}' */
#include <bivouac.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One back-end instance. The engine creates one per role thread and uses each from one
 * thread at a time; a real back end keeps its thread pool and scratch space here. */
struct bv_compute {
    int threads;
};

static bv_compute *naive_create(const bv_opts *opts, bv_error *err)
{
    bv_compute *c = calloc(1, sizeof *c);
    if (!c) {
        bv_error_set(err, BV_ERR_NOMEM, "naive: out of memory");
        return NULL;
    }
    c->threads = 1;
    return c;
}

static void naive_destroy(bv_compute *c)
{
    free(c); /* no threads to join */
}

static int naive_num_threads(const bv_compute *c)
{
    return c->threads;
}

/* C[m x n] = alpha * op(A) * op(B) + beta * C, row-major: op(A)[i][p] is a[i*lda + p], or
 * a[p*lda + i] when transposed, and likewise for B. As in BLAS, beta == 0 overwrites C
 * without reading it (it may hold garbage). The loops run i, p, j so that the inner one
 * walks a row of C and of B (unless B is transposed), which the compiler vectorises. */
static void naive_gemm(bv_compute *c, bool trans_a, bool trans_b, int64_t m, int64_t n,
                       int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                       int64_t ldb, float beta, float *cm, int64_t ldc)
{
    /* element [r][s] of op(A) is a[r * a_row + s * a_col]; of op(B), b[r * b_row + s * b_col] */
    int64_t a_row = trans_a ? 1 : lda, a_col = trans_a ? lda : 1;
    int64_t b_row = trans_b ? 1 : ldb, b_col = trans_b ? ldb : 1;
    for (int64_t i = 0; i < m; i++) {
        float *crow = cm + i * ldc;
        for (int64_t j = 0; j < n; j++)
            crow[j] = beta == 0.0f ? 0.0f : beta * crow[j];
        for (int64_t p = 0; p < k; p++) {
            float aip = alpha * a[i * a_row + p * a_col];
            const float *brow = b + p * b_row;
            for (int64_t j = 0; j < n; j++)
                crow[j] += aip * brow[j * b_col];
        }
    }
}

/* y[(i - row_begin) * f + j] = sum over row i's entries e of a.values[e] * x[col(e) * f + j]
 * (values NULL: every weight is 1). */
static void naive_spmm(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                       const float *x, int64_t f, float *y)
{
    for (int64_t i = row_begin; i < row_end; i++) {
        float *yrow = y + (i - row_begin) * f;
        for (int64_t j = 0; j < f; j++)
            yrow[j] = 0.0f;
        for (int64_t e = a->rowptr[i]; e < a->rowptr[i + 1]; e++) {
            float w = a->values ? a->values[e] : 1.0f;
            const float *xrow = x + (int64_t)a->colidx[e] * f;
            for (int64_t j = 0; j < f; j++)
                yrow[j] += w * xrow[j];
        }
    }
}

static void naive_relu_forward(bv_compute *c, int64_t n, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void naive_relu_backward(bv_compute *c, int64_t n, const float *y, const float *dy,
                                float *dx)
{
    for (int64_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

/* ---- dropout ------------------------------------------------------------------------
 * The mask is a pure function of (seed, stream, global element index), so it needs no
 * storage, backward recomputes it, and any split of the rows gives the same mask. The hash
 * is the cpu plugin's (SplitMix64's finaliser, Steele et al. 2014), so a run draws the same
 * masks on either back end. */

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The mask of element `index` of (seed, stream) is u >= p, with u uniform in [0, 1)
 * (24 bits) drawn from key = dropout_key(seed, stream). */
static uint64_t dropout_key(uint64_t seed, uint64_t stream)
{
    return mix64(seed ^ mix64(stream + GOLDEN_GAMMA));
}

static float dropout_uniform(uint64_t key, uint64_t index)
{
    return (float)(mix64(key + (index + 1) * GOLDEN_GAMMA) >> 40) * 0x1.0p-24f;
}

/* out = in * keep / (1 - p). Forward and backward apply the same mask. */
static void dropout_apply(int64_t n, float p, uint64_t seed, uint64_t stream, uint64_t offset,
                          const float *in, float *out)
{
    uint64_t key = dropout_key(seed, stream);
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; /* p >= 1 keeps nothing */
    for (int64_t i = 0; i < n; i++) {
        bool keep = p <= 0.0f || dropout_uniform(key, offset + (uint64_t)i) >= p;
        out[i] = keep ? in[i] * scale : 0.0f;
    }
}

static void naive_dropout_forward(bv_compute *c, int64_t n, float p, uint64_t seed,
                                  uint64_t stream, uint64_t offset, const float *x, float *y)
{
    dropout_apply(n, p, seed, stream, offset, x, y);
}

static void naive_dropout_backward(bv_compute *c, int64_t n, float p, uint64_t seed,
                                   uint64_t stream, uint64_t offset, const float *dy, float *dx)
{
    dropout_apply(n, p, seed, stream, offset, dy, dx);
}

/* ---- loss and optimiser ------------------------------------------------------------ */

/* Per counted row: loss = -log softmax(l)[y] = log(sum_j exp(l_j - max)) - (l_y - max),
 * stable because every exponent is <= 0; dlogits = grad_scale * (softmax - onehot(y)).
 * dlogits may alias logits, so a row is read completely before it is written. */
static void naive_softmax_xent(bv_compute *c, int64_t n, int64_t k, const float *logits,
                               const int32_t *labels, const uint8_t *mask, float grad_scale,
                               float *dlogits, bv_xent_result *out)
{
    *out = (bv_xent_result){0};
    for (int64_t i = 0; i < n; i++) {
        const float *l = logits + i * k;
        float *d = dlogits ? dlogits + i * k : NULL;
        int32_t y = labels[i];
        if ((mask && !mask[i]) || y < 0 || y >= k) { /* not counted */
            if (d)
                memset(d, 0, (size_t)k * sizeof *d);
            continue;
        }
        int64_t argmax = 0;
        for (int64_t j = 1; j < k; j++)
            if (l[j] > l[argmax])
                argmax = j;
        float max = l[argmax];
        float label_logit = l[y];
        double sum = 0.0;
        for (int64_t j = 0; j < k; j++)
            sum += exp((double)(l[j] - max));
        if (d) {
            for (int64_t j = 0; j < k; j++)
                d[j] = grad_scale * (float)(exp((double)(l[j] - max)) / sum);
            d[y] -= grad_scale;
        }
        out->loss_sum += log(sum) - (double)(label_logit - max);
        out->count++;
        out->correct += argmax == y;
    }
}

/* Adam (Kingma & Ba 2015, Algorithm 1) in PyTorch's form,
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps),
 * with weight decay folded into the gradient (L2, as Kipf & Welling's GCN) or applied to
 * the parameter first (decoupled, AdamW). */
static void naive_adam_step(bv_compute *c, int64_t n, float *param, const float *grad,
                            float *m, float *v, const bv_adam_params *p)
{
    double t = p->step < 1 ? 1.0 : (double)p->step;
    float step_size = (float)((double)p->lr / (1.0 - pow((double)p->beta1, t)));
    float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow((double)p->beta2, t)));
    float l2 = p->decoupled ? 0.0f : p->weight_decay;
    float decay = p->decoupled ? 1.0f - p->lr * p->weight_decay : 1.0f;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] + l2 * param[i];
        m[i] = p->beta1 * m[i] + (1.0f - p->beta1) * g;
        v[i] = p->beta2 * v[i] + (1.0f - p->beta2) * g * g;
        param[i] = param[i] * decay - step_size * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + p->eps);
    }
}

/* ---- small dense helpers ----------------------------------------------------------- */

static void naive_add_bias(bv_compute *c, int64_t rows, int64_t cols, const float *bias,
                           float *y)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] += bias[j];
}

/* dbias[j] = (dbias[j] +) sum over rows of dy[r][j], summed in double. */
static void naive_bias_backward(bv_compute *c, int64_t rows, int64_t cols, const float *dy,
                                float *dbias, bool accumulate)
{
    for (int64_t j = 0; j < cols; j++) {
        double sum = accumulate ? (double)dbias[j] : 0.0;
        for (int64_t r = 0; r < rows; r++)
            sum += (double)dy[r * cols + j];
        dbias[j] = (float)sum;
    }
}

static void naive_axpy(bv_compute *c, int64_t n, float alpha, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += alpha * x[i];
}

static double naive_sum_squares(bv_compute *c, int64_t n, const float *x)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i] * (double)x[i];
    return sum;
}

/* The ABI 1.0 slots, create .. sum_squares. Designated initialisers leave every later slot
 * NULL, and keep this compiling when a new minor appends more. */
static const bv_compute_ops naive_ops = {
    .create = naive_create,
    .destroy = naive_destroy,
    .num_threads = naive_num_threads,
    .gemm = naive_gemm,
    .spmm = naive_spmm,
    .relu_forward = naive_relu_forward,
    .relu_backward = naive_relu_backward,
    .dropout_forward = naive_dropout_forward,
    .dropout_backward = naive_dropout_backward,
    .softmax_xent = naive_softmax_xent,
    .adam_step = naive_adam_step,
    .add_bias = naive_add_bias,
    .bias_backward = naive_bias_backward,
    .axpy = naive_axpy,
    .sum_squares = naive_sum_squares,
};

static const bv_plugin naive_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_COMPUTE, "naive", "0.1.0",
                     "the ABI 1.0 kernels as plain single-threaded loops (example plugin)"),
    .options = NULL, /* no options: `compute: {plugin: naive}` */
    .ops = &naive_ops,
    .ops_size = sizeof naive_ops,
};

/* The one exported symbol: bv_compute_naive_plugin, in compute_naive.so. */
BV_PLUGIN_ENTRY(compute, naive, naive_plugin)
