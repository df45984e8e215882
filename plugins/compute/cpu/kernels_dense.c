/* Dense kernels of the CPU plugin: gemm through OpenBLAS in row bands over the pool, and the
 * elementwise ops (ReLU, leaky ReLU, ELU, dropout), bias ops, Adam and sum_squares split
 * statically over the pool. Every kernel here but gemm gives the same bits for any thread
 * count. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cpu_internal.h"
#include "cpu_vec.h"

/* ---- gemm ---------------------------------------------------------------------------- */

/* OpenBLAS (LP64 build) takes 32-bit ints. A matrix dimension beyond that is a caller bug
 * the void signature cannot report, so fail loudly rather than truncate. */
static int blas_int(int64_t v, const char *what)
{
    if (v < 0 || v > INT_MAX) {
        fprintf(stderr, "bivouac: compute_cpu: gemm %s = %lld is out of OpenBLAS's int range\n",
                what, (long long)v);
        abort();
    }
    return (int)v;
}

static void scale_matrix(int64_t m, int64_t n, float beta, float *cm, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        float *row = cm + i * ldc;
        if (beta == 0.0f) /* BLAS semantics: C is not read, so NaNs in it do not survive */
            memset(row, 0, (size_t)n * sizeof *row);
        else if (beta != 1.0f)
            for (int64_t j = 0; j < n; j++)
                row[j] *= beta;
    }
}

typedef struct gemm_ctx {
    bool trans_a, trans_b;
    int64_t m;
    int n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *cm;
} gemm_ctx;

/* One band of rows of C per task; OpenBLAS itself runs single-threaded (see cpu_create),
 * so the pool is the only threading system and nothing spins between calls. */
static void gemm_task(void *arg, int tid, int ntasks)
{
    const gemm_ctx *g = arg;
    int64_t b, e;
    cpu_split(g->m, tid, ntasks, &b, &e);
    for (int64_t r = b; r < e; r += INT_MAX) {
        int rows = (int)(e - r < INT_MAX ? e - r : INT_MAX);
        const float *ar = g->trans_a ? g->a + r : g->a + r * g->lda;
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, rows, g->n, g->k, g->alpha, ar,
                    g->lda, g->b, g->ldb, g->beta, g->cm + r * g->ldc, g->ldc);
    }
}

void cpu_gemm(bv_compute *c, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
              float beta, float *cm, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0 || alpha == 0.0f) { /* A and B are not referenced */
        scale_matrix(m, n, beta, cm, ldc);
        return;
    }
    gemm_ctx g = {.trans_a = trans_a, .trans_b = trans_b, .m = m, .n = blas_int(n, "n"),
                  .k = blas_int(k, "k"), .lda = blas_int(lda, "lda"),
                  .ldb = blas_int(ldb, "ldb"), .ldc = blas_int(ldc, "ldc"), .alpha = alpha,
                  .beta = beta, .a = a, .b = b, .cm = cm};
    /* bands of at least 16 rows and ~1 MFLOP each, or it is not worth waking the pool */
    int64_t flops = m * n * k;
    int tasks = cpu_threads(c);
    while (tasks > 1 && (m / tasks < 16 || flops / tasks < (1 << 20)))
        tasks--;
    cpu_run(c, CPU_TIME_GEMM, tasks, gemm_task, &g);
}

/* ---- relu ---------------------------------------------------------------------------- */

typedef struct relu_ctx {
    int64_t n;
    const float *y;  /* forward input x, or backward's forward output y */
    const float *dy; /* backward only */
    float *out;
} relu_ctx;

static void relu_forward_task(void *arg, int tid, int ntasks)
{
    const relu_ctx *r = arg;
    int64_t b, e;
    cpu_split(r->n, tid, ntasks, &b, &e);
    const float *x = r->y;
    float *y = r->out;
    for (int64_t i = b; i < e; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void cpu_relu_forward(bv_compute *c, int64_t n, const float *x, float *y)
{
    relu_ctx r = {.n = n, .y = x, .out = y};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN), relu_forward_task, &r);
}

static void relu_backward_task(void *arg, int tid, int ntasks)
{
    const relu_ctx *r = arg;
    int64_t b, e;
    cpu_split(r->n, tid, ntasks, &b, &e);
    const float *y = r->y, *dy = r->dy;
    float *dx = r->out;
    for (int64_t i = b; i < e; i++) {
        float d = dy[i]; /* read unconditionally so the loop vectorises */
        dx[i] = y[i] > 0.0f ? d : 0.0f;
    }
}

void cpu_relu_backward(bv_compute *c, int64_t n, const float *y, const float *dy, float *dx)
{
    relu_ctx r = {.n = n, .y = y, .dy = dy, .out = dx};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN), relu_backward_task, &r);
}

/* ---- leaky ReLU and ELU (GAT: Veličković et al. 2018 §2.1 and its ELU hidden layer) ---- */

typedef struct act_ctx {
    int64_t n;
    float slope;     /* leaky ReLU only */
    const float *x;  /* the forward input, in both directions */
    const float *dy; /* backward only */
    float *out;
} act_ctx;

/* Branch-free, 8 lanes at a time: on attention logits the sign is a coin toss, and the
 * scalar loop's branch missed half the time (6 % of a 1M-vertex GAT epoch). Backward
 * (dy given): dy where x > 0, slope * dy elsewhere. */
CPU_VEC_INLINE void leaky_relu_vec8(const act_ctx *a, int64_t i, int64_t k)
{
    vec8f x = vec8_load(a->x + i, k);
    vec8f v = a->dy ? vec8_load(a->dy + i, k) : x;
    vec8_store(a->out + i, vec8_select(x > 0.0f, v, a->slope * v), k);
}

CPU_VEC_INLINE void leaky_relu_range_body(const act_ctx *a, int64_t b, int64_t e)
{
    int64_t i = b;
    for (; i + 8 <= e; i += 8)
        leaky_relu_vec8(a, i, 8);
    if (i < e)
        leaky_relu_vec8(a, i, e - i);
}

CPU_DEFINE_DISPATCH(leaky_relu_range, (const act_ctx *a, int64_t b, int64_t e), (a, b, e))

static void leaky_relu_forward_task(void *arg, int tid, int ntasks)
{
    const act_ctx *a = arg;
    int64_t b, e;
    cpu_split(a->n, tid, ntasks, &b, &e);
    leaky_relu_range(a, b, e);
}

void cpu_leaky_relu_forward(bv_compute *c, int64_t n, float slope, const float *x, float *y)
{
    act_ctx a = {.n = n, .slope = slope, .x = x, .out = y};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN), leaky_relu_forward_task, &a);
}

static void leaky_relu_backward_task(void *arg, int tid, int ntasks)
{
    const act_ctx *a = arg;
    int64_t b, e;
    cpu_split(a->n, tid, ntasks, &b, &e);
    leaky_relu_range(a, b, e);
}

void cpu_leaky_relu_backward(bv_compute *c, int64_t n, float slope, const float *x,
                             const float *dy, float *dx)
{
    act_ctx a = {.n = n, .slope = slope, .x = x, .dy = dy, .out = dx};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN), leaky_relu_backward_task, &a);
}

/* ELU 8 lanes at a time (cpu_vec.h): x > 0 ? x : expm1(x); backward (dy given)
 * dy * (x > 0 ? 1 : exp(x)). libm's expm1f and expf were 8 % of a 1M-vertex GAT epoch. */
CPU_VEC_INLINE void elu_vec8(const float *xp, const float *dyp, float *out, int64_t k)
{
    vec8f x = vec8_load(xp, k);
    vec8i pos = x > 0.0f;
    vec8f neg = vec8_select(pos, vec8_splat(0.0f), x);
    vec8f y = dyp ? vec8_load(dyp, k) * vec8_select(pos, vec8_splat(1.0f), vec8_exp_nonpos(neg))
                  : vec8_select(pos, x, vec8_expm1_nonpos(neg));
    vec8_store(out, y, k);
}

CPU_VEC8_RANGE_BODY(elu_range_body, elu_vec8)

CPU_DEFINE_DISPATCH(elu_range,
                    (const float *x, const float *dy, float *out, int64_t b, int64_t e),
                    (x, dy, out, b, e))

static void elu_forward_task(void *arg, int tid, int ntasks)
{
    const act_ctx *a = arg;
    int64_t b, e;
    cpu_split(a->n, tid, ntasks, &b, &e);
    elu_range(a->x, NULL, a->out, b, e);
}

void cpu_elu_forward(bv_compute *c, int64_t n, const float *x, float *y)
{
    act_ctx a = {.n = n, .x = x, .out = y};
    /* exp costs more than a compare: split finer than the elementwise grain */
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN / 4), elu_forward_task, &a);
}

static void elu_backward_task(void *arg, int tid, int ntasks)
{
    const act_ctx *a = arg;
    int64_t b, e;
    cpu_split(a->n, tid, ntasks, &b, &e);
    elu_range(a->x, a->dy, a->out, b, e);
}

void cpu_elu_backward(bv_compute *c, int64_t n, const float *x, const float *dy, float *dx)
{
    act_ctx a = {.n = n, .x = x, .dy = dy, .out = dx};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN / 4), elu_backward_task, &a);
}

/* ---- dropout ------------------------------------------------------------------------- */

typedef struct dropout_ctx {
    int64_t n;
    float p;
    float scale;
    uint64_t threshold; /* kept iff (hash >> 40) >= threshold, i.e. u >= p */
    uint64_t key;
    uint64_t offset;
    const float *in;
    float *out;
} dropout_ctx;

/* Dropout over 4 elements at a time in GCC vector extensions: the documented hash
 * (cpu_dropout_uniform) in 64-bit lanes, and u >= p as the exact integer test
 * (h >> 40) >= ceil(p * 2^24), since u = (h >> 40) * 2^-24 exactly. A zero input passes
 * through unchanged (sign included) whatever the mask says, as before. Branch-free: the
 * scalar loop with its zero test was a quarter of a 1M-vertex GCN epoch. */
typedef cpu_u64x4 vec4u64;
typedef int64_t vec4i64 __attribute__((vector_size(32)));
typedef float vec4f __attribute__((vector_size(16)));
typedef int32_t vec4i32 __attribute__((vector_size(16)));

/* at: the hash's input for elements i .. i+3, key + (offset + i + 1 + lane) GAMMA */
static inline __attribute__((always_inline)) void dropout_vec4(const dropout_ctx *d,
                                                               int64_t i, int64_t k,
                                                               const vec4u64 *at)
{
    vec4f x = {0};
    memcpy(&x, d->in + i, (size_t)k * sizeof(float));
    vec4u64 z = *at;
    cpu_mix64x4(&z);
    vec4i64 keep64 = (vec4i64)((z >> 40) >= d->threshold);
    vec4i32 keep = __builtin_convertvector(keep64, vec4i32) | (x == 0.0f);
    vec4f y = (vec4f)((vec4i32)(x * d->scale) & keep);
    memcpy(d->out + i, &y, (size_t)k * sizeof(float));
}

static inline __attribute__((always_inline)) void dropout_range_body(const dropout_ctx *d,
                                                                     int64_t b, int64_t e)
{
    /* the hash's input advances by GAMMA per element: an add per 4 lanes, not a multiply
     * (AVX2 has no 64-bit one), the same values modulo 2^64 */
    uint64_t first = d->offset + (uint64_t)b + 1;
    vec4u64 at = (vec4u64){first, first + 1, first + 2, first + 3} * CPU_GOLDEN_GAMMA + d->key;
    const vec4u64 step = (vec4u64){4, 4, 4, 4} * CPU_GOLDEN_GAMMA;
    int64_t i = b;
    for (; i + 4 <= e; i += 4, at += step)
        dropout_vec4(d, i, 4, &at);
    if (i < e)
        dropout_vec4(d, i, e - i, &at);
}

/* the hash is the whole cost of dropout, 10 % of a 1M-vertex GAT epoch */
CPU_DEFINE_DISPATCH_AVX512(dropout_range, (const dropout_ctx *d, int64_t b, int64_t e),
                           (d, b, e))

static void dropout_task(void *arg, int tid, int ntasks)
{
    const dropout_ctx *d = arg;
    int64_t b, e;
    cpu_split(d->n, tid, ntasks, &b, &e);
    dropout_range(d, b, e);
}

/* Forward and backward apply the same mask and scale: y = x * mask / (1 - p). */
static void dropout_apply(bv_compute *c, int64_t n, float p, uint64_t seed, uint64_t stream,
                          uint64_t offset, const float *in, float *out)
{
    if (n <= 0)
        return;
    if (!(p > 0.0f)) { /* p == 0: the identity */
        if (in != out)
            memmove(out, in, (size_t)n * sizeof *out);
        return;
    }
    if (p >= 1.0f) { /* u < 1 always: nothing is kept */
        memset(out, 0, (size_t)n * sizeof *out);
        return;
    }
    dropout_ctx d = {.n = n, .p = p, .scale = 1.0f / (1.0f - p),
                     .threshold = cpu_dropout_threshold(p),
                     .key = cpu_dropout_key(seed, stream), .offset = offset,
                     .in = in, .out = out};
    /* hashing costs more than a copy: split finer than the elementwise grain */
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN / 4), dropout_task, &d);
}

void cpu_dropout_forward(bv_compute *c, int64_t n, float p, uint64_t seed, uint64_t stream,
                         uint64_t offset, const float *x, float *y)
{
    dropout_apply(c, n, p, seed, stream, offset, x, y);
}

void cpu_dropout_backward(bv_compute *c, int64_t n, float p, uint64_t seed, uint64_t stream,
                          uint64_t offset, const float *dy, float *dx)
{
    dropout_apply(c, n, p, seed, stream, offset, dy, dx);
}

/* ---- adam ---------------------------------------------------------------------------- */

typedef struct adam_ctx {
    int64_t n;
    float *param;
    const float *grad;
    float *m;
    float *v;
    float grad_scale; /* g = grad * grad_scale (1 unless adam_step_scaled) */
    float beta1, beta2, eps;
    float l2;         /* g += l2 * p (0 unless L2 mode) */
    float decay;      /* p *= decay before the update (1 unless AdamW) */
    float step_size;  /* lr / (1 - beta1^t) */
    float inv_sqrt_bc2; /* 1 / sqrt(1 - beta2^t) */
} adam_ctx;

static void adam_task(void *arg, int tid, int ntasks)
{
    const adam_ctx *a = arg;
    int64_t b, e;
    cpu_split(a->n, tid, ntasks, &b, &e);
    float *param = a->param, *m = a->m, *v = a->v;
    const float *grad = a->grad;
    for (int64_t i = b; i < e; i++) {
        float p = param[i];
        float g = grad[i] * a->grad_scale + a->l2 * p; /* x 1: exact */
        p *= a->decay;
        float mi = a->beta1 * m[i] + (1.0f - a->beta1) * g;
        float vi = a->beta2 * v[i] + (1.0f - a->beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = p - a->step_size * mi / (sqrtf(vi) * a->inv_sqrt_bc2 + a->eps);
    }
}

/* Kingma & Ba, "Adam", Algorithm 1, in the form PyTorch uses:
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 * with weight decay either folded into the gradient (L2, as Kipf & Welling's GCN) or
 * applied to the parameter first, p *= 1 - lr*wd (Loshchilov & Hutter, "AdamW", Alg. 2). */
void cpu_adam_step_scaled(bv_compute *c, int64_t n, float grad_scale, float *param,
                          const float *grad, float *m, float *v, const bv_adam_params *p)
{
    double t = p->step < 1 ? 1.0 : (double)p->step;
    double bc1 = 1.0 - pow((double)p->beta1, t);
    double bc2 = 1.0 - pow((double)p->beta2, t);
    adam_ctx a = {
        .n = n, .param = param, .grad = grad, .m = m, .v = v, .grad_scale = grad_scale,
        .beta1 = p->beta1, .beta2 = p->beta2, .eps = p->eps,
        .l2 = p->decoupled ? 0.0f : p->weight_decay,
        .decay = p->decoupled ? 1.0f - p->lr * p->weight_decay : 1.0f,
        .step_size = (float)((double)p->lr / bc1),
        .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
    };
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN / 4), adam_task, &a);
}

void cpu_adam_step(bv_compute *c, int64_t n, float *param, const float *grad, float *m,
                   float *v, const bv_adam_params *p)
{
    cpu_adam_step_scaled(c, n, 1.0f, param, grad, m, v, p);
}

/* ---- bias ---------------------------------------------------------------------------- */

typedef struct bias_ctx {
    int64_t rows, cols;
    const float *bias; /* add_bias */
    const float *dy;   /* bias_backward */
    float *out;
    bool accumulate;
} bias_ctx;

static void add_bias_task(void *arg, int tid, int ntasks)
{
    const bias_ctx *bc = arg;
    int64_t b, e;
    cpu_split(bc->rows, tid, ntasks, &b, &e);
    const float *bias = bc->bias;
    for (int64_t r = b; r < e; r++) {
        float *row = bc->out + r * bc->cols;
        for (int64_t j = 0; j < bc->cols; j++)
            row[j] += bias[j];
    }
}

void cpu_add_bias(bv_compute *c, int64_t rows, int64_t cols, const float *bias, float *y)
{
    if (rows <= 0 || cols <= 0)
        return;
    bias_ctx bc = {.rows = rows, .cols = cols, .bias = bias, .out = y};
    int ntasks = cpu_tasks_for(c, rows * cols, CPU_GRAIN);
    if (ntasks > rows)
        ntasks = (int)rows;
    cpu_run(c, CPU_TIME_ELEMENTWISE, ntasks, add_bias_task, &bc);
}

/* bias_backward gives each task whole column chunks and sums every row of a column in row
 * order (in double), so no cross-thread reduction is needed and any thread count agrees. */
#define BIAS_CHUNK 64

static void bias_backward_task(void *arg, int tid, int ntasks)
{
    const bias_ctx *bc = arg;
    int64_t nchunks = (bc->cols + BIAS_CHUNK - 1) / BIAS_CHUNK;
    int64_t b, e;
    cpu_split(nchunks, tid, ntasks, &b, &e);
    for (int64_t ch = b; ch < e; ch++) {
        int64_t c0 = ch * BIAS_CHUNK;
        int64_t w = bc->cols - c0 < BIAS_CHUNK ? bc->cols - c0 : BIAS_CHUNK;
        double acc[BIAS_CHUNK];
        for (int64_t j = 0; j < w; j++)
            acc[j] = bc->accumulate ? (double)bc->out[c0 + j] : 0.0;
        for (int64_t r = 0; r < bc->rows; r++) {
            const float *row = bc->dy + r * bc->cols + c0;
            for (int64_t j = 0; j < w; j++)
                acc[j] += (double)row[j];
        }
        for (int64_t j = 0; j < w; j++)
            bc->out[c0 + j] = (float)acc[j];
    }
}

void cpu_bias_backward(bv_compute *c, int64_t rows, int64_t cols, const float *dy,
                       float *dbias, bool accumulate)
{
    if (cols <= 0)
        return;
    if (rows <= 0) {
        if (!accumulate)
            memset(dbias, 0, (size_t)cols * sizeof *dbias);
        return;
    }
    bias_ctx bc = {.rows = rows, .cols = cols, .dy = dy, .out = dbias,
                   .accumulate = accumulate};
    int64_t nchunks = (cols + BIAS_CHUNK - 1) / BIAS_CHUNK;
    int ntasks = cpu_tasks_for(c, rows * cols, CPU_GRAIN);
    if (ntasks > nchunks)
        ntasks = (int)nchunks;
    cpu_run(c, CPU_TIME_ELEMENTWISE, ntasks, bias_backward_task, &bc);
}

/* ---- axpy ---------------------------------------------------------------------------- */

typedef struct axpy_ctx {
    int64_t n;
    float alpha;
    const float *x;
    float *y;
} axpy_ctx;

static void axpy_task(void *arg, int tid, int ntasks)
{
    const axpy_ctx *a = arg;
    int64_t b, e;
    cpu_split(a->n, tid, ntasks, &b, &e);
    const float *x = a->x;
    float *y = a->y;
    float alpha = a->alpha;
    for (int64_t i = b; i < e; i++)
        y[i] += alpha * x[i];
}

void cpu_axpy(bv_compute *c, int64_t n, float alpha, const float *x, float *y)
{
    axpy_ctx a = {.n = n, .alpha = alpha, .x = x, .y = y};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN), axpy_task, &a);
}

/* ---- sum_squares --------------------------------------------------------------------- */

#define SUMSQ_MIN_BLOCK 8192

typedef struct sumsq_ctx {
    int64_t n;
    int64_t block;
    int64_t nblocks;
    const float *x;
    double *partial;
} sumsq_ctx;

/* Eight fixed lanes (so the compiler can vectorise without reassociating), summed in a
 * fixed order: the same bits whatever the vector width. */
static double block_sum_squares(const float *x, int64_t len)
{
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= len; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += (double)x[i + j] * (double)x[i + j];
    double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < len; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

static void sumsq_task(void *arg, int tid, int ntasks)
{
    const sumsq_ctx *s = arg;
    int64_t b, e;
    cpu_split(s->nblocks, tid, ntasks, &b, &e);
    for (int64_t blk = b; blk < e; blk++) {
        int64_t lo = blk * s->block;
        int64_t hi = lo + s->block < s->n ? lo + s->block : s->n;
        s->partial[blk] = block_sum_squares(s->x + lo, hi - lo);
    }
}

double cpu_sum_squares(bv_compute *c, int64_t n, const float *x)
{
    if (n <= 0)
        return 0.0;
    sumsq_ctx s = {.n = n, .block = cpu_block_size(n, SUMSQ_MIN_BLOCK), .x = x,
                   .partial = c->partial_sum};
    s.nblocks = (n + s.block - 1) / s.block;
    int ntasks = cpu_tasks_for(c, n, CPU_GRAIN);
    if (ntasks > s.nblocks)
        ntasks = (int)s.nblocks;
    cpu_run(c, CPU_TIME_ELEMENTWISE, ntasks, sumsq_task, &s);
    double total = 0.0;
    for (int64_t blk = 0; blk < s.nblocks; blk++)
        total += s.partial[blk];
    return total;
}
