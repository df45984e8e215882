/* Transformer kernels of the CPU plugin: LayerNorm, GELU, batched gemm, fused causal
 * attention and token embeddings, forward and backward, split statically over the pool.
 * Every split is over independent units (rows, column chunks, (batch, head) pairs) that one
 * thread computes in a fixed order, so the bits do not depend on the thread count. */
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "cpu_internal.h"
#include "cpu_vec.h"
#include "kernels_transformer.h"

/* Reductions over rows (dgamma, dwte) give each task whole chunks of columns. */
#define COL_CHUNK 32

static int tasks_for_units(bv_compute *c, int64_t units, int64_t work_per_unit)
{
    int t = cpu_tasks_for(c, units * work_per_unit, CPU_GRAIN);
    return t > units ? (int)(units > 0 ? units : 1) : t;
}

/* ---- layernorm ----------------------------------------------------------------------- */

typedef struct ln_ctx {
    int64_t rows, cols;
    float eps;
    const float *x, *gamma, *beta, *dy;
    const float *mean, *rstd;
    float *y, *mean_out, *rstd_out, *dx, *dgamma, *dbeta;
    bool accumulate;
} ln_ctx;

static void ln_forward_task(void *arg, int tid, int ntasks)
{
    const ln_ctx *l = arg;
    int64_t b, e, n = l->cols;
    cpu_split(l->rows, tid, ntasks, &b, &e);
    for (int64_t r = b; r < e; r++) {
        const float *x = l->x + r * n;
        float *y = l->y + r * n;
        float s = 0.0f;
        for (int64_t j = 0; j < n; j++)
            s += x[j];
        float mean = s / (float)n;
        float v = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            float d = x[j] - mean;
            v += d * d;
        }
        float rstd = 1.0f / sqrtf(v / (float)n + l->eps);
        if (l->beta)
            for (int64_t j = 0; j < n; j++)
                y[j] = (x[j] - mean) * rstd * l->gamma[j] + l->beta[j];
        else
            for (int64_t j = 0; j < n; j++)
                y[j] = (x[j] - mean) * rstd * l->gamma[j];
        l->mean_out[r] = mean;
        l->rstd_out[r] = rstd;
    }
}

void cpu_layernorm_forward(bv_compute *c, int64_t rows, int64_t cols, float eps,
                           const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *rstd)
{
    if (rows <= 0 || cols <= 0)
        return;
    ln_ctx l = {.rows = rows, .cols = cols, .eps = eps, .x = x, .gamma = gamma,
                .beta = beta, .y = y, .mean_out = mean, .rstd_out = rstd};
    cpu_run(c, CPU_TIME_ELEMENTWISE, tasks_for_units(c, rows, cols * 4), ln_forward_task, &l);
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma. */
static void ln_backward_dx_task(void *arg, int tid, int ntasks)
{
    const ln_ctx *l = arg;
    int64_t b, e, n = l->cols;
    cpu_split(l->rows, tid, ntasks, &b, &e);
    for (int64_t r = b; r < e; r++) {
        const float *x = l->x + r * n, *dy = l->dy + r * n;
        float *dx = l->dx + r * n;
        float mean = l->mean[r], rstd = l->rstd[r];
        float sg = 0.0f, sgx = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            float g = dy[j] * l->gamma[j];
            sg += g;
            sgx += g * (x[j] - mean) * rstd;
        }
        sg /= (float)n;
        sgx /= (float)n;
        if (l->accumulate)
            for (int64_t j = 0; j < n; j++)
                dx[j] += rstd * (dy[j] * l->gamma[j] - sg - (x[j] - mean) * rstd * sgx);
        else
            for (int64_t j = 0; j < n; j++)
                dx[j] = rstd * (dy[j] * l->gamma[j] - sg - (x[j] - mean) * rstd * sgx);
    }
}

static void ln_backward_params_task(void *arg, int tid, int ntasks)
{
    const ln_ctx *l = arg;
    int64_t nchunks = (l->cols + COL_CHUNK - 1) / COL_CHUNK;
    int64_t b, e;
    cpu_split(nchunks, tid, ntasks, &b, &e);
    for (int64_t ch = b; ch < e; ch++) {
        int64_t c0 = ch * COL_CHUNK;
        int64_t w = l->cols - c0 < COL_CHUNK ? l->cols - c0 : COL_CHUNK;
        float ag[COL_CHUNK] = {0}, ab[COL_CHUNK] = {0};
        for (int64_t r = 0; r < l->rows; r++) {
            const float *x = l->x + r * l->cols + c0, *dy = l->dy + r * l->cols + c0;
            float mean = l->mean[r], rstd = l->rstd[r];
            for (int64_t j = 0; j < w; j++) {
                ag[j] += dy[j] * (x[j] - mean) * rstd;
                ab[j] += dy[j];
            }
        }
        for (int64_t j = 0; j < w; j++) {
            l->dgamma[c0 + j] += ag[j];
            if (l->dbeta)
                l->dbeta[c0 + j] += ab[j];
        }
    }
}

void cpu_layernorm_backward(bv_compute *c, int64_t rows, int64_t cols, const float *x,
                            const float *gamma, const float *mean, const float *rstd,
                            const float *dy, float *dx, bool accumulate, float *dgamma,
                            float *dbeta)
{
    if (rows <= 0 || cols <= 0)
        return;
    ln_ctx l = {.rows = rows, .cols = cols, .x = x, .gamma = gamma, .mean = mean,
                .rstd = rstd, .dy = dy, .dx = dx, .accumulate = accumulate,
                .dgamma = dgamma, .dbeta = dbeta};
    if (dx)
        cpu_run(c, CPU_TIME_ELEMENTWISE, tasks_for_units(c, rows, cols * 4), ln_backward_dx_task, &l);
    if (dgamma)
        cpu_run(c, CPU_TIME_ELEMENTWISE, tasks_for_units(c, (cols + COL_CHUNK - 1) / COL_CHUNK,
                                              rows * COL_CHUNK * 2),
                     ln_backward_params_task, &l);
}

/* ---- gelu ---------------------------------------------------------------------------- */

typedef struct gelu_ctx {
    int64_t n;
    const float *x, *dy;
    float *out;
} gelu_ctx;

#define GELU_INV_SQRT_2PI 0.39894228040143268f

/* GELU 8 lanes at a time (cpu_vec.h); libm's erff and expf were a fifth of a training step
 * of the transformer. Backward when dy is given; k <= 8 inputs.
 * Phi(-|x|) = erfc(|x|/sqrt2)/2 by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7 in erf,
 * the approximation PyTorch's vectorised GELU uses), phi(x) = exp(-x^2/2)/sqrt(2 pi), both
 * from one exponential (0 where x^2/2 > 87 or overflows). */
CPU_VEC_INLINE void gelu_vec8(const float *xp, const float *dyp, float *out, int64_t k)
{
    vec8f x = vec8_load(xp, k);
    vec8f e = vec8_exp_nonpos(-0.5f * x * x);
    vec8f ax = (vec8f)((vec8i)x & 0x7fffffff);
    vec8f t = 1.0f / (1.0f + (0.3275911f * 0.70710678118654752f) * ax);
    vec8f poly = t * 1.061405429f - 1.453152027f;
    poly = poly * t + 1.421413741f;
    poly = poly * t - 0.284496736f;
    poly = poly * t + 0.254829592f;
    vec8f tail = 0.5f * poly * t * e; /* Phi(-|x|) */
    vec8f cdf = vec8_select(x < 0.0f, tail, 1.0f - tail);
    vec8f y = dyp ? vec8_load(dyp, k) * (cdf + x * (GELU_INV_SQRT_2PI * e)) : x * cdf;
    vec8_store(out, y, k);
}

CPU_VEC8_RANGE_BODY(gelu_range_body, gelu_vec8)

CPU_DEFINE_DISPATCH(gelu_range,
                    (const float *x, const float *dy, float *out, int64_t b, int64_t e),
                    (x, dy, out, b, e))

static void gelu_forward_task(void *arg, int tid, int ntasks)
{
    const gelu_ctx *g = arg;
    int64_t b, e;
    cpu_split(g->n, tid, ntasks, &b, &e);
    gelu_range(g->x, NULL, g->out, b, e);
}

static void gelu_backward_task(void *arg, int tid, int ntasks)
{
    const gelu_ctx *g = arg;
    int64_t b, e;
    cpu_split(g->n, tid, ntasks, &b, &e);
    gelu_range(g->x, g->dy, g->out, b, e);
}

void cpu_gelu_forward(bv_compute *c, int64_t n, const float *x, float *y)
{
    if (n <= 0)
        return;
    gelu_ctx g = {.n = n, .x = x, .out = y};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN / 8), gelu_forward_task, &g);
}

void cpu_gelu_backward(bv_compute *c, int64_t n, const float *x, const float *dy, float *dx)
{
    if (n <= 0)
        return;
    gelu_ctx g = {.n = n, .x = x, .dy = dy, .out = dx};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN / 8), gelu_backward_task, &g);
}

/* ---- batched gemm -------------------------------------------------------------------- */

typedef struct bgemm_ctx {
    int64_t count;
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
    int64_t sa, sb, sc;
    float alpha, beta;
    const float *a, *b;
    float *cm;
} bgemm_ctx;

static void bgemm_task(void *arg, int tid, int ntasks)
{
    const bgemm_ctx *g = arg;
    int64_t b, e;
    cpu_split(g->count, tid, ntasks, &b, &e);
    for (int64_t i = b; i < e; i++)
        cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans,
                    g->tb ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, g->alpha,
                    g->a + i * g->sa, g->lda, g->b + i * g->sb, g->ldb, g->beta,
                    g->cm + i * g->sc, g->ldc);
}

static int small_int(int64_t v)
{
    return v < 0 ? 0 : (v > INT_MAX ? INT_MAX : (int)v);
}

void cpu_gemm_batched(bv_compute *c, int64_t count, bool trans_a, bool trans_b, int64_t m,
                      int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                      float beta, float *cm, int64_t ldc, int64_t stride_c)
{
    if (count <= 0 || m <= 0 || n <= 0)
        return;
    bgemm_ctx g = {.count = count, .ta = trans_a, .tb = trans_b, .m = small_int(m),
                   .n = small_int(n), .k = small_int(k), .lda = small_int(lda),
                   .ldb = small_int(ldb), .ldc = small_int(ldc), .sa = stride_a,
                   .sb = stride_b, .sc = stride_c, .alpha = alpha, .beta = beta, .a = a,
                   .b = b, .cm = cm};
    cpu_run(c, CPU_TIME_GEMM, tasks_for_units(c, count, m * n * (k > 0 ? k : 1) / 64 + 1),
                 bgemm_task, &g);
}

/* ---- causal attention ---------------------------------------------------------------- */

typedef struct attn_ctx {
    int64_t batch, seq, head_dim;
    int heads;
    float scale;
    const float *qkv, *att_in, *dout;
    float *att, *out, *scratch, *dqkv;
} attn_ctx;

/* One (batch, head) pair per unit: scores by one gemm, then a causal softmax that only
 * looks at j <= i, then att V by a second gemm. The scores above the diagonal are computed
 * by the gemm (a 64x64 block is cheaper whole) but never read; att holds 0 there. */
static void attn_forward_task(void *arg, int tid, int ntasks)
{
    const attn_ctx *a = arg;
    int64_t S = a->seq, D = a->head_dim, C = (int64_t)a->heads * D, ld = 3 * C;
    int64_t b, e;
    cpu_split(a->batch * a->heads, tid, ntasks, &b, &e);
    for (int64_t u = b; u < e; u++) {
        int64_t bi = u / a->heads, h = u % a->heads;
        const float *q = a->qkv + bi * S * ld + h * D;
        const float *k = q + C, *v = q + 2 * C;
        float *p = a->att + u * S * S;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)S, (int)S, (int)D, a->scale,
                    q, (int)ld, k, (int)ld, 0.0f, p, (int)S);
        for (int64_t i = 0; i < S; i++) {
            float *row = p + i * S;
            float mx = row[0];
            for (int64_t j = 1; j <= i; j++)
                mx = row[j] > mx ? row[j] : mx;
            float sum = 0.0f;
            for (int64_t j = 0; j <= i; j++) {
                row[j] = expf(row[j] - mx);
                sum += row[j];
            }
            float inv = 1.0f / sum;
            for (int64_t j = 0; j <= i; j++)
                row[j] *= inv;
            for (int64_t j = i + 1; j < S; j++)
                row[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)S, (int)D, (int)S, 1.0f, p,
                    (int)S, v, (int)ld, 0.0f, a->out + bi * S * C + h * D, (int)C);
    }
}

void cpu_attention_forward(bv_compute *c, int64_t batch, int64_t seq, int heads,
                           int64_t head_dim, const float *qkv, float *att, float *out)
{
    if (batch <= 0 || seq <= 0 || heads <= 0)
        return;
    attn_ctx a = {.batch = batch, .seq = seq, .head_dim = head_dim, .heads = heads,
                  .scale = 1.0f / sqrtf((float)head_dim), .qkv = qkv, .att = att,
                  .out = out};
    cpu_run(c, CPU_TIME_ATTENTION, tasks_for_units(c, batch * heads, seq * seq * head_dim / 8 + 1),
                 attn_forward_task, &a);
}

/* With P = att, dO = dout:  dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(P * dP));
 * dQ = scale dS K;  dK = scale dS^T Q. P is 0 above the diagonal, so dS is too. */
static void attn_backward_task(void *arg, int tid, int ntasks)
{
    const attn_ctx *a = arg;
    int64_t S = a->seq, D = a->head_dim, C = (int64_t)a->heads * D, ld = 3 * C;
    int64_t b, e;
    cpu_split(a->batch * a->heads, tid, ntasks, &b, &e);
    for (int64_t u = b; u < e; u++) {
        int64_t bi = u / a->heads, h = u % a->heads;
        const float *q = a->qkv + bi * S * ld + h * D;
        const float *k = q + C, *v = q + 2 * C;
        const float *p = a->att_in + u * S * S;
        const float *dout = a->dout + bi * S * C + h * D;
        float *dq = a->dqkv + bi * S * ld + h * D;
        float *dk = dq + C, *dv = dq + 2 * C;
        float *ds = a->scratch + u * S * S;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)S, (int)S, (int)D, 1.0f,
                    dout, (int)C, v, (int)ld, 0.0f, ds, (int)S);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)S, (int)D, (int)S, 1.0f, p,
                    (int)S, dout, (int)C, 0.0f, dv, (int)ld);
        for (int64_t i = 0; i < S; i++) {
            const float *pr = p + i * S;
            float *dr = ds + i * S;
            float dot = 0.0f;
            for (int64_t j = 0; j <= i; j++)
                dot += pr[j] * dr[j];
            for (int64_t j = 0; j <= i; j++)
                dr[j] = pr[j] * (dr[j] - dot);
            for (int64_t j = i + 1; j < S; j++)
                dr[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)S, (int)D, (int)S,
                    a->scale, ds, (int)S, k, (int)ld, 0.0f, dq, (int)ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)S, (int)D, (int)S, a->scale,
                    ds, (int)S, q, (int)ld, 0.0f, dk, (int)ld);
    }
}

void cpu_attention_backward(bv_compute *c, int64_t batch, int64_t seq, int heads,
                            int64_t head_dim, const float *qkv, const float *att,
                            const float *dout, float *scratch, float *dqkv)
{
    if (batch <= 0 || seq <= 0 || heads <= 0)
        return;
    attn_ctx a = {.batch = batch, .seq = seq, .head_dim = head_dim, .heads = heads,
                  .scale = 1.0f / sqrtf((float)head_dim), .qkv = qkv, .att_in = att,
                  .dout = dout, .scratch = scratch, .dqkv = dqkv};
    cpu_run(c, CPU_TIME_ATTENTION, tasks_for_units(c, batch * heads, seq * seq * head_dim / 4 + 1),
                 attn_backward_task, &a);
}

/* ---- embeddings ---------------------------------------------------------------------- */

typedef struct emb_ctx {
    int64_t batch, seq, dim;
    const int32_t *tokens;
    const float *wte, *wpe, *dout;
    float *out, *dwte, *dwpe;
} emb_ctx;

static void emb_forward_task(void *arg, int tid, int ntasks)
{
    const emb_ctx *m = arg;
    int64_t b, e, D = m->dim;
    cpu_split(m->batch * m->seq, tid, ntasks, &b, &e);
    for (int64_t t = b; t < e; t++) {
        const float *w = m->wte + (int64_t)m->tokens[t] * D;
        float *o = m->out + t * D;
        if (m->wpe) {
            const float *pe = m->wpe + (t % m->seq) * D;
            for (int64_t j = 0; j < D; j++)
                o[j] = w[j] + pe[j];
        } else {
            memcpy(o, w, (size_t)D * sizeof *o);
        }
    }
}

void cpu_embedding_forward(bv_compute *c, int64_t batch, int64_t seq, int64_t dim,
                           const int32_t *tokens, const float *wte, const float *wpe,
                           float *out)
{
    if (batch <= 0 || seq <= 0 || dim <= 0)
        return;
    emb_ctx m = {.batch = batch, .seq = seq, .dim = dim, .tokens = tokens, .wte = wte,
                 .wpe = wpe, .out = out};
    cpu_run(c, CPU_TIME_ELEMENTWISE, tasks_for_units(c, batch * seq, dim), emb_forward_task, &m);
}

/* Each task owns a chunk of columns of both tables and walks every token in order. */
static void emb_backward_task(void *arg, int tid, int ntasks)
{
    const emb_ctx *m = arg;
    int64_t D = m->dim, T = m->batch * m->seq;
    int64_t nchunks = (D + COL_CHUNK - 1) / COL_CHUNK;
    int64_t b, e;
    cpu_split(nchunks, tid, ntasks, &b, &e);
    for (int64_t ch = b; ch < e; ch++) {
        int64_t c0 = ch * COL_CHUNK;
        int64_t w = D - c0 < COL_CHUNK ? D - c0 : COL_CHUNK;
        for (int64_t t = 0; t < T; t++) {
            const float *d = m->dout + t * D + c0;
            float *g = m->dwte + (int64_t)m->tokens[t] * D + c0;
            for (int64_t j = 0; j < w; j++)
                g[j] += d[j];
        }
        if (!m->dwpe)
            continue;
        for (int64_t s = 0; s < m->seq; s++) {
            float *g = m->dwpe + s * D + c0;
            for (int64_t bi = 0; bi < m->batch; bi++) {
                const float *d = m->dout + (bi * m->seq + s) * D + c0;
                for (int64_t j = 0; j < w; j++)
                    g[j] += d[j];
            }
        }
    }
}

void cpu_embedding_backward(bv_compute *c, int64_t batch, int64_t seq, int64_t dim,
                            const int32_t *tokens, const float *dout, float *dwte,
                            float *dwpe)
{
    if (batch <= 0 || seq <= 0 || dim <= 0)
        return;
    emb_ctx m = {.batch = batch, .seq = seq, .dim = dim, .tokens = tokens, .dout = dout,
                 .dwte = dwte, .dwpe = dwpe};
    int64_t nchunks = (dim + COL_CHUNK - 1) / COL_CHUNK;
    cpu_run(c, CPU_TIME_ELEMENTWISE, tasks_for_units(c, nchunks, batch * seq * COL_CHUNK * 2),
                 emb_backward_task, &m);
}

/* ---- scale --------------------------------------------------------------------------- */

typedef struct scale_ctx {
    int64_t n;
    float alpha;
    float *x;
} scale_ctx;

static void scale_task(void *arg, int tid, int ntasks)
{
    const scale_ctx *s = arg;
    int64_t b, e;
    cpu_split(s->n, tid, ntasks, &b, &e);
    for (int64_t i = b; i < e; i++)
        s->x[i] *= s->alpha;
}

void cpu_scale(bv_compute *c, int64_t n, float alpha, float *x)
{
    if (n <= 0)
        return;
    scale_ctx s = {.n = n, .alpha = alpha, .x = x};
    cpu_run(c, CPU_TIME_ELEMENTWISE, cpu_tasks_for(c, n, CPU_GRAIN), scale_task, &s);
}
