/* Edge kernels of the CPU plugin for attention over graphs (GAT, Veličković et al. 2018 §2.1):
 * per-edge logits, their softmax over each destination's in-edges, and the multi-head
 * weighted aggregation, with their backwards. Rows are split across threads by edge count
 * (cpu_split_rows_by_nnz) and every output element is computed by one thread in edge order,
 * so each kernel returns the same bits for any thread count. Only the CSR's structure is
 * read: a->values is ignored (the weights are the per-edge arrays). */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_vec.h"

/* How many tasks for a row-parallel kernel over `rows` rows: by work, at most one per row. */
static int row_tasks(bv_compute *c, int64_t rows, int64_t work, int64_t grain)
{
    int ntasks = cpu_tasks_for(c, work, grain);
    return ntasks > rows ? (int)rows : ntasks;
}

/* ---- edge_scores --------------------------------------------------------------------- */

typedef struct scores_ctx {
    const bv_csr *a;
    int64_t row_begin, row_end;
    int64_t base; /* a->rowptr[row_begin]: edge e is element e - base of the edge arrays */
    int heads;
    const float *src;
    int64_t src_stride;
    const float *dst;
    int64_t dst_stride;
    float *out;
    /* backward */
    const float *dout;
    float *dsrc;
    float *ddst;
    bool accumulate;
} scores_ctx;

/* With a multiple of 8 heads, 8 at a time (cpu_vec.h): the same additions, in vectors.
 * The backward's ddst sums and dsrc adds, and the softmax backward's dot products, run
 * the same way, each lane doing what the scalar loop does for its head, in edge order. */
CPU_VEC_INLINE void edge_scores_rows_body(const scores_ctx *s, int64_t b, int64_t e)
{
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    int heads = s->heads;
    int64_t k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        const float *d = s->dst + (i - s->row_begin) * s->dst_stride;
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            if (k + CPU_GATHER_PREFETCH < k_end) {
                int64_t ahead = colidx[k + CPU_GATHER_PREFETCH];
                cpu_prefetch_row(s->src + ahead * s->src_stride, heads);
            }
            const float *sr = s->src + (int64_t)colidx[k] * s->src_stride;
            float *o = s->out + (k - s->base) * heads;
            for (int h = 0; h < heads; h += 8)
                vec8_store(o + h, vec8_load(sr + h, 8) + vec8_load(d + h, 8), 8);
        }
    }
}
CPU_DEFINE_DISPATCH(edge_scores_rows, (const scores_ctx *s, int64_t b, int64_t e), (s, b, e))

static void edge_scores_task(void *arg, int tid, int ntasks)
{
    const scores_ctx *s = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(s->a->rowptr, s->row_begin, s->row_end, tid, ntasks, &b, &e);
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    int heads = s->heads;
    if (heads % 8 == 0) {
        if (b < e)
            edge_scores_rows(s, b, e);
        return;
    }
    int64_t k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        const float *d = s->dst + (i - s->row_begin) * s->dst_stride;
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            /* the source rows are gathered at random: request them ahead (as spmm) */
            if (k + CPU_GATHER_PREFETCH < k_end) {
                int64_t ahead = colidx[k + CPU_GATHER_PREFETCH];
                cpu_prefetch_row(s->src + ahead * s->src_stride, heads);
            }
            const float *sr = s->src + (int64_t)colidx[k] * s->src_stride;
            float *o = s->out + (k - s->base) * heads;
            for (int h = 0; h < heads; h++)
                o[h] = sr[h] + d[h];
        }
    }
}

void cpu_edge_scores(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                     int heads, const float *src, int64_t src_stride, const float *dst,
                     int64_t dst_stride, float *out)
{
    if (row_end <= row_begin || heads <= 0)
        return;
    scores_ctx s = {.a = a, .row_begin = row_begin, .row_end = row_end,
                    .base = a->rowptr[row_begin], .heads = heads, .src = src,
                    .src_stride = src_stride, .dst = dst, .dst_stride = dst_stride, .out = out};
    int64_t rows = row_end - row_begin;
    int64_t nnz = a->rowptr[row_end] - s.base;
    cpu_run(c, CPU_TIME_EDGE, row_tasks(c, rows, (nnz + rows) * heads, CPU_GRAIN),
                 edge_scores_task, &s);
}

/* The d(src) row a task adds into CPU_GATHER_PREFETCH edges ahead, if it is the task's:
 * the sources are at random, and each add reads and writes its row. */
static inline __attribute__((always_inline)) void
prefetch_dsrc(const scores_ctx *s, int64_t k, int64_t k_end, int64_t col_begin, int64_t col_end)
{
    if (k + CPU_GATHER_PREFETCH >= k_end)
        return;
    int64_t ahead = s->a->colidx[k + CPU_GATHER_PREFETCH];
    if (ahead >= col_begin && ahead < col_end)
        __builtin_prefetch(s->dsrc + ahead * s->src_stride, 1, 0);
}

/* Two independent halves in one parallel-for. ddst: each task sums the edges of its rows
 * (split by nnz), in edge order. dsrc: a source vertex may be the column of edges in any
 * row, so instead of splitting rows, each task owns a contiguous range of source vertices
 * and scans every edge of the range, adding only those whose column it owns. Each dsrc
 * element thus receives its terms in edge order, exactly as the serial loop would, for any
 * thread count; the price is that every task reads all column indices. */
CPU_VEC_INLINE void edge_scores_backward_rows_body(const scores_ctx *s, int64_t b, int64_t e,
                                                  int64_t col_begin, int64_t col_end)
{
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    int heads = s->heads;
    for (int64_t i = b; i < e; i++) {
        float *dd = s->ddst + (i - s->row_begin) * s->dst_stride;
        for (int h = 0; h < heads; h += 8) {
            vec8f sum = vec8_splat(0.0f);
            for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++)
                sum += vec8_load(s->dout + (k - s->base) * heads + h, 8);
            vec8_store(dd + h, s->accumulate ? vec8_load(dd + h, 8) + sum : sum, 8);
        }
    }
    for (int64_t k = rowptr[s->row_begin], k_end = rowptr[s->row_end]; k < k_end; k++) {
        prefetch_dsrc(s, k, k_end, col_begin, col_end);
        int64_t col = colidx[k];
        if (col < col_begin || col >= col_end)
            continue;
        float *ds = s->dsrc + col * s->src_stride;
        const float *d = s->dout + (k - s->base) * heads;
        for (int h = 0; h < heads; h += 8)
            vec8_store(ds + h, vec8_load(ds + h, 8) + vec8_load(d + h, 8), 8);
    }
}
CPU_DEFINE_DISPATCH(edge_scores_backward_rows,
                    (const scores_ctx *s, int64_t b, int64_t e, int64_t col_begin,
                     int64_t col_end),
                    (s, b, e, col_begin, col_end))

static void edge_scores_backward_task(void *arg, int tid, int ntasks)
{
    const scores_ctx *s = arg;
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    int heads = s->heads;

    int64_t b, e;
    cpu_split_rows_by_nnz(rowptr, s->row_begin, s->row_end, tid, ntasks, &b, &e);
    if (heads % 8 == 0) {
        int64_t col_begin, col_end;
        cpu_split(s->a->ncols, tid, ntasks, &col_begin, &col_end);
        edge_scores_backward_rows(s, b, e, col_begin, col_end);
        return;
    }
    for (int64_t i = b; i < e; i++) {
        float *dd = s->ddst + (i - s->row_begin) * s->dst_stride;
        for (int h = 0; h < heads; h++) {
            float sum = 0.0f;
            for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++)
                sum += s->dout[(k - s->base) * heads + h];
            dd[h] = s->accumulate ? dd[h] + sum : sum;
        }
    }

    int64_t col_begin, col_end;
    cpu_split(s->a->ncols, tid, ntasks, &col_begin, &col_end);
    for (int64_t k = rowptr[s->row_begin], k_end = rowptr[s->row_end]; k < k_end; k++) {
        prefetch_dsrc(s, k, k_end, col_begin, col_end);
        int64_t col = colidx[k];
        if (col < col_begin || col >= col_end)
            continue;
        float *ds = s->dsrc + col * s->src_stride;
        const float *d = s->dout + (k - s->base) * heads;
        for (int h = 0; h < heads; h++)
            ds[h] += d[h];
    }
}

void cpu_edge_scores_backward(bv_compute *c, const bv_csr *a, int64_t row_begin,
                              int64_t row_end, int heads, const float *dout, float *dsrc,
                              int64_t src_stride, float *ddst, int64_t dst_stride,
                              bool accumulate)
{
    if (row_end <= row_begin || heads <= 0)
        return;
    scores_ctx s = {.a = a, .row_begin = row_begin, .row_end = row_end,
                    .base = a->rowptr[row_begin], .heads = heads, .src_stride = src_stride,
                    .dst_stride = dst_stride, .dout = dout, .dsrc = dsrc, .ddst = ddst,
                    .accumulate = accumulate};
    int64_t rows = row_end - row_begin;
    int64_t nnz = a->rowptr[row_end] - s.base;
    /* every task scans all nnz column indices for its dsrc share: the grain is per edge */
    int ntasks = cpu_tasks_for(c, (nnz + rows) * heads, CPU_GRAIN);
    if (ntasks > a->ncols && a->ncols > 0)
        ntasks = (int)a->ncols;
    cpu_run(c, CPU_TIME_EDGE, ntasks, edge_scores_backward_task, &s);
}

/* ---- edge_softmax -------------------------------------------------------------------- */

typedef struct softmax_ctx {
    const bv_csr *a;
    int64_t row_begin, row_end;
    int64_t base;
    int heads;
    const float *z;      /* forward: logits */
    const float *alpha;  /* backward: forward output */
    const float *dalpha; /* backward */
    float *out;          /* alpha, or dz */
} softmax_ctx;

/* Each (row, head) reads and writes only its own elements, each after reading them, so z
 * and alpha may alias (and dalpha and dz). */
/* With a multiple of 8 heads, 8 heads at a time (cpu_vec.h): an edge's scores for them are
 * contiguous, and every lane computes what the scalar loop below does for its head, in the
 * same order, with cpu_vec.h's exp for expf (libm's expf was 4 % of a 1M-vertex GAT epoch). */
CPU_VEC_INLINE void edge_softmax_rows_body(const softmax_ctx *s, int64_t b, int64_t e)
{
    const int64_t *rowptr = s->a->rowptr;
    int heads = s->heads;
    for (int64_t i = b; i < e; i++) {
        int64_t k0 = rowptr[i] - s->base, k1 = rowptr[i + 1] - s->base;
        for (int h = 0; k0 < k1 && h < heads; h += 8) {
            const float *z = s->z + h;
            float *alpha = s->out + h;
            vec8f mx = vec8_load(z + k0 * heads, 8);
            for (int64_t k = k0 + 1; k < k1; k++) {
                vec8f v = vec8_load(z + k * heads, 8);
                mx = vec8_select(v > mx, v, mx);
            }
            vec8f sum = vec8_splat(0.0f);
            for (int64_t k = k0; k < k1; k++) {
                vec8f ex = vec8_exp_nonpos(vec8_load(z + k * heads, 8) - mx);
                vec8_store(alpha + k * heads, ex, 8);
                sum += ex;
            }
            for (int64_t k = k0; k < k1; k++)
                vec8_store(alpha + k * heads, vec8_load(alpha + k * heads, 8) / sum, 8);
        }
    }
}

CPU_DEFINE_DISPATCH(edge_softmax_rows, (const softmax_ctx *s, int64_t b, int64_t e), (s, b, e))

static void edge_softmax_task(void *arg, int tid, int ntasks)
{
    const softmax_ctx *s = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(s->a->rowptr, s->row_begin, s->row_end, tid, ntasks, &b, &e);
    const int64_t *rowptr = s->a->rowptr;
    int heads = s->heads;
    if (heads % 8 == 0) {
        edge_softmax_rows(s, b, e);
        return;
    }
    for (int64_t i = b; i < e; i++) {
        int64_t k0 = rowptr[i] - s->base, k1 = rowptr[i + 1] - s->base;
        if (k0 == k1)
            continue;
        for (int h = 0; h < heads; h++) {
            const float *z = s->z + h;
            float *alpha = s->out + h;
            float mx = z[k0 * heads];
            for (int64_t k = k0 + 1; k < k1; k++)
                mx = z[k * heads] > mx ? z[k * heads] : mx;
            float sum = 0.0f;
            for (int64_t k = k0; k < k1; k++) {
                float ex = expf(z[k * heads] - mx);
                alpha[k * heads] = ex;
                sum += ex;
            }
            for (int64_t k = k0; k < k1; k++)
                alpha[k * heads] /= sum;
        }
    }
}

void cpu_edge_softmax(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                      int heads, const float *z, float *alpha)
{
    if (row_end <= row_begin || heads <= 0)
        return;
    softmax_ctx s = {.a = a, .row_begin = row_begin, .row_end = row_end,
                     .base = a->rowptr[row_begin], .heads = heads, .z = z, .out = alpha};
    int64_t rows = row_end - row_begin;
    int64_t nnz = a->rowptr[row_end] - s.base;
    /* an exp per element: finer than the plain elementwise grain */
    cpu_run(c, CPU_TIME_EDGE, row_tasks(c, rows, (nnz + rows) * heads, CPU_GRAIN / 4),
                 edge_softmax_task, &s);
}

CPU_VEC_INLINE void edge_softmax_backward_rows_body(const softmax_ctx *s, int64_t b, int64_t e)
{
    const int64_t *rowptr = s->a->rowptr;
    int heads = s->heads;
    for (int64_t i = b; i < e; i++) {
        int64_t k0 = rowptr[i] - s->base, k1 = rowptr[i + 1] - s->base;
        for (int h = 0; h < heads; h += 8) {
            const float *alpha = s->alpha + h, *dalpha = s->dalpha + h;
            float *dz = s->out + h;
            vec8f dot = vec8_splat(0.0f);
            for (int64_t k = k0; k < k1; k++)
                dot += vec8_load(alpha + k * heads, 8) * vec8_load(dalpha + k * heads, 8);
            for (int64_t k = k0; k < k1; k++)
                vec8_store(dz + k * heads,
                           vec8_load(alpha + k * heads, 8) *
                               (vec8_load(dalpha + k * heads, 8) - dot),
                           8);
        }
    }
}
CPU_DEFINE_DISPATCH(edge_softmax_backward_rows, (const softmax_ctx *s, int64_t b, int64_t e),
                    (s, b, e))

static void edge_softmax_backward_task(void *arg, int tid, int ntasks)
{
    const softmax_ctx *s = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(s->a->rowptr, s->row_begin, s->row_end, tid, ntasks, &b, &e);
    const int64_t *rowptr = s->a->rowptr;
    int heads = s->heads;
    if (heads % 8 == 0) {
        if (b < e)
            edge_softmax_backward_rows(s, b, e);
        return;
    }
    for (int64_t i = b; i < e; i++) {
        int64_t k0 = rowptr[i] - s->base, k1 = rowptr[i + 1] - s->base;
        for (int h = 0; h < heads; h++) {
            const float *alpha = s->alpha + h, *dalpha = s->dalpha + h;
            float *dz = s->out + h;
            float dot = 0.0f;
            for (int64_t k = k0; k < k1; k++)
                dot += alpha[k * heads] * dalpha[k * heads];
            for (int64_t k = k0; k < k1; k++)
                dz[k * heads] = alpha[k * heads] * (dalpha[k * heads] - dot);
        }
    }
}

void cpu_edge_softmax_backward(bv_compute *c, const bv_csr *a, int64_t row_begin,
                               int64_t row_end, int heads, const float *alpha,
                               const float *dalpha, float *dz)
{
    if (row_end <= row_begin || heads <= 0)
        return;
    softmax_ctx s = {.a = a, .row_begin = row_begin, .row_end = row_end,
                     .base = a->rowptr[row_begin], .heads = heads, .alpha = alpha,
                     .dalpha = dalpha, .out = dz};
    int64_t rows = row_end - row_begin;
    int64_t nnz = a->rowptr[row_end] - s.base;
    cpu_run(c, CPU_TIME_EDGE, row_tasks(c, rows, (nnz + rows) * heads, CPU_GRAIN),
                 edge_softmax_backward_task, &s);
}

/* ---- gather_heads -------------------------------------------------------------------- */

typedef struct gather_ctx {
    const bv_csr *a; /* a, or its transpose for backward_x */
    const int64_t *perm;
    int64_t row_begin, row_end;
    int64_t base;
    int heads;
    int64_t head_dim;
    const float *w;
    const float *x;
    int64_t x_stride;
    const float *dy;
    float *out; /* y, dx or dw */
} gather_ctx;

/* The head_dim loops: plain, restrict-qualified, so they vectorise. They are forced inline
 * into row loops that are instantiated for the common head sizes (HEAD_DIM_DISPATCH): with
 * a constant d of 8 a head is two SSE operations, and a loop over a runtime d would spend
 * more on its set-up than on the work. Every instance does the same float operations in
 * the same order, so the dispatch changes no result. */
#define CPU_ALWAYS_INLINE static inline __attribute__((always_inline))

CPU_ALWAYS_INLINE void head_axpy(int64_t n, float w, const float *restrict x,
                                 float *restrict y)
{
    for (int64_t j = 0; j < n; j++)
        y[j] += w * x[j];
}

/* Eight fixed lanes summed in a fixed order, so the compiler can vectorise without
 * reassociating and every vector width gives the same bits. */
CPU_ALWAYS_INLINE float head_dot(int64_t n, const float *restrict x, const float *restrict y)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++)
            acc[l] += x[j + l] * y[j + l];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; j < n; j++)
        s += x[j] * y[j];
    return s;
}

/* Calls ROWS(g, b, e, d) with d a compile-time constant for the usual head sizes. */
#define HEAD_DIM_DISPATCH(ROWS, g, b, e)                                                     \
    do {                                                                                     \
        switch ((g)->head_dim) {                                                             \
        case 4: ROWS(g, b, e, 4); break;                                                     \
        case 8: ROWS(g, b, e, 8); break;                                                     \
        case 16: ROWS(g, b, e, 16); break;                                                   \
        case 32: ROWS(g, b, e, 32); break;                                                   \
        case 64: ROWS(g, b, e, 64); break;                                                   \
        default: ROWS(g, b, e, (g)->head_dim); break;                                        \
        }                                                                                    \
    } while (0)

CPU_ALWAYS_INLINE void gather_heads_rows(const gather_ctx *g, int64_t b, int64_t e, int64_t d)
{
    const int64_t *rowptr = g->a->rowptr;
    const int32_t *colidx = g->a->colidx;
    int heads = g->heads;
    int64_t width = (int64_t)heads * d;
    int64_t k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        float *yr = g->out + (i - g->row_begin) * width;
        memset(yr, 0, (size_t)width * sizeof *yr);
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            if (k + CPU_GATHER_PREFETCH < k_end)
                cpu_prefetch_row(g->x + (int64_t)colidx[k + CPU_GATHER_PREFETCH] * g->x_stride,
                                 width);
            const float *xr = g->x + (int64_t)colidx[k] * g->x_stride;
            const float *wk = g->w + (k - g->base) * heads;
            for (int h = 0; h < heads; h++)
                head_axpy(d, wk[h], xr + h * d, yr + h * d);
        }
    }
}

/* Heads of a multiple of 8 units and rows of at most 64 floats (GAT's 8 x 8): the output
 * row stays in nv vector registers (vector v lies in head 8v / d) while the row's edges
 * are added, and is loaded and stored once. Per element the same operations in the same
 * order as gather_heads_rows (a row starts at +0, the backward's at what dx holds), so
 * both give the same bits. */
CPU_VEC_INLINE void gather_heads_rows_vec(const gather_ctx *g, int64_t b, int64_t e, int nv,
                                          bool backward)
{
    const int64_t *rowptr = g->a->rowptr;
    const int32_t *colidx = g->a->colidx;
    int heads = g->heads;
    int64_t d = g->head_dim, width = 8 * (int64_t)nv;
    const float *x = backward ? g->dy : g->x;
    int64_t x_stride = backward ? width : g->x_stride;
    int64_t k_end = rowptr[e];
    int head_of[8];
    for (int v = 0; v < nv; v++)
        head_of[v] = (int)(8 * v / d);
    for (int64_t i = b; i < e; i++) {
        float *yr = backward ? g->out + i * g->x_stride : g->out + (i - g->row_begin) * width;
        vec8f acc[8];
        for (int v = 0; v < nv; v++)
            acc[v] = backward ? vec8_load(yr + 8 * v, 8) : vec8_splat(0.0f);
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            if (k + CPU_GATHER_PREFETCH < k_end) {
                int64_t ahead = k + CPU_GATHER_PREFETCH;
                cpu_prefetch_row(x + (int64_t)colidx[ahead] * x_stride, width);
                if (backward)
                    __builtin_prefetch(g->w + g->perm[ahead] * heads, 0, 0);
            }
            const float *xr = x + (int64_t)colidx[k] * x_stride;
            const float *wk = g->w + (backward ? g->perm[k] : k - g->base) * heads;
            for (int v = 0; v < nv; v++)
                acc[v] += vec8_splat(wk[head_of[v]]) * vec8_load(xr + 8 * v, 8);
        }
        for (int v = 0; v < nv; v++)
            vec8_store(yr + 8 * v, acc[v], 8);
    }
}

CPU_VEC_INLINE void gather_heads_vec_body(const gather_ctx *g, int64_t b, int64_t e,
                                          bool backward)
{
    switch (g->heads * g->head_dim) {
    case 8: gather_heads_rows_vec(g, b, e, 1, backward); break;
    case 16: gather_heads_rows_vec(g, b, e, 2, backward); break;
    case 32: gather_heads_rows_vec(g, b, e, 4, backward); break;
    case 64: gather_heads_rows_vec(g, b, e, 8, backward); break;
    default: break;
    }
}
CPU_DEFINE_DISPATCH(gather_heads_vec, (const gather_ctx *g, int64_t b, int64_t e, bool backward),
                    (g, b, e, backward))

static bool gather_heads_vec_fits(const gather_ctx *g)
{
    int64_t width = g->heads * g->head_dim;
    return g->head_dim % 8 == 0 && (width == 8 || width == 16 || width == 32 || width == 64);
}

static void gather_heads_task(void *arg, int tid, int ntasks)
{
    const gather_ctx *g = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(g->a->rowptr, g->row_begin, g->row_end, tid, ntasks, &b, &e);
    if (gather_heads_vec_fits(g)) {
        if (b < e)
            gather_heads_vec(g, b, e, false);
        return;
    }
    HEAD_DIM_DISPATCH(gather_heads_rows, g, b, e);
}

void cpu_gather_heads(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                      int heads, int64_t head_dim, const float *w, const float *x,
                      int64_t x_stride, float *y)
{
    if (row_end <= row_begin || heads <= 0 || head_dim <= 0)
        return;
    gather_ctx g = {.a = a, .row_begin = row_begin, .row_end = row_end,
                    .base = a->rowptr[row_begin], .heads = heads, .head_dim = head_dim,
                    .w = w, .x = x, .x_stride = x_stride, .out = y};
    int64_t rows = row_end - row_begin;
    int64_t nnz = a->rowptr[row_end] - g.base;
    cpu_run(c, CPU_TIME_EDGE, row_tasks(c, rows, (nnz + rows) * heads * head_dim, CPU_GRAIN),
                 gather_heads_task, &g);
}

/* dx row u is the gather over the transpose's row u, weighted by w read through perm;
 * each row is owned by one task and summed in the transpose's edge order. */
CPU_ALWAYS_INLINE void gather_heads_backward_x_rows(const gather_ctx *g, int64_t b, int64_t e,
                                                  int64_t d)
{
    const int64_t *rowptr = g->a->rowptr;
    const int32_t *colidx = g->a->colidx;
    int heads = g->heads;
    int64_t width = (int64_t)heads * d;
    int64_t t_end = rowptr[e];
    for (int64_t u = b; u < e; u++) {
        float *dxr = g->out + u * g->x_stride;
        for (int64_t t = rowptr[u]; t < rowptr[u + 1]; t++) {
            if (t + CPU_GATHER_PREFETCH < t_end) {
                int64_t ahead = t + CPU_GATHER_PREFETCH;
                cpu_prefetch_row(g->dy + (int64_t)colidx[ahead] * width, width);
                __builtin_prefetch(g->w + g->perm[ahead] * heads, 0, 0);
            }
            const float *dyr = g->dy + (int64_t)colidx[t] * width;
            const float *wt = g->w + g->perm[t] * heads;
            for (int h = 0; h < heads; h++)
                head_axpy(d, wt[h], dyr + h * d, dxr + h * d);
        }
    }
}

static void gather_heads_backward_x_task(void *arg, int tid, int ntasks)
{
    const gather_ctx *g = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(g->a->rowptr, 0, g->a->nrows, tid, ntasks, &b, &e);
    if (gather_heads_vec_fits(g)) {
        if (b < e)
            gather_heads_vec(g, b, e, true);
        return;
    }
    HEAD_DIM_DISPATCH(gather_heads_backward_x_rows, g, b, e);
}

void cpu_gather_heads_backward_x(bv_compute *c, const bv_csr *at, const int64_t *perm,
                                 int heads, int64_t head_dim, const float *w, const float *dy,
                                 float *dx, int64_t x_stride)
{
    if (at->nrows <= 0 || heads <= 0 || head_dim <= 0)
        return;
    gather_ctx g = {.a = at, .perm = perm, .row_begin = 0, .row_end = at->nrows,
                    .heads = heads, .head_dim = head_dim, .w = w, .dy = dy, .out = dx,
                    .x_stride = x_stride};
    int64_t rows = at->nrows;
    int64_t nnz = at->rowptr[rows] - at->rowptr[0];
    cpu_run(c, CPU_TIME_EDGE, row_tasks(c, rows, (nnz + rows) * heads * head_dim, CPU_GRAIN),
                 gather_heads_backward_x_task, &g);
}

CPU_ALWAYS_INLINE void gather_heads_backward_w_rows(const gather_ctx *g, int64_t b, int64_t e,
                                                  int64_t d)
{
    const int64_t *rowptr = g->a->rowptr;
    const int32_t *colidx = g->a->colidx;
    int heads = g->heads;
    int64_t width = (int64_t)heads * d, k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        const float *dyr = g->dy + (i - g->row_begin) * width;
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            if (k + CPU_GATHER_PREFETCH < k_end) /* the source rows are read at random */
                cpu_prefetch_row(g->x + (int64_t)colidx[k + CPU_GATHER_PREFETCH] * g->x_stride,
                                 width);
            const float *xr = g->x + (int64_t)colidx[k] * g->x_stride;
            float *dw = g->out + (k - g->base) * heads;
            for (int h = 0; h < heads; h++)
                dw[h] = head_dot(d, dyr + h * d, xr + h * d);
        }
    }
}

/* Heads of 8 units, 8 heads at a time: the row's dy stays in registers, and the eight dot
 * products of an edge are reduced together. Lane l of p_h is 0 + dy_h[l] x_h[l] (head_dot's
 * acc[l]); two levels of pairwise sums (hadd's shuffles) and a last add of the halves give
 * each head ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), head_dot's order: the same
 * bits. */
CPU_VEC_INLINE vec8f pair_sums(vec8f a, vec8f b) /* hadd: a01 a23 b01 b23 a45 a67 b45 b67 */
{
    vec8i even = {0, 2, 8, 10, 4, 6, 12, 14}, odd = {1, 3, 9, 11, 5, 7, 13, 15};
    return __builtin_shuffle(a, b, even) + __builtin_shuffle(a, b, odd);
}

CPU_VEC_INLINE vec8f head8_dots(const vec8f p[8])
{
    vec8f q0123 = pair_sums(pair_sums(p[0], p[1]), pair_sums(p[2], p[3]));
    vec8f q4567 = pair_sums(pair_sums(p[4], p[5]), pair_sums(p[6], p[7]));
    vec8i lo = {0, 1, 2, 3, 8, 9, 10, 11}, hi = {4, 5, 6, 7, 12, 13, 14, 15};
    return __builtin_shuffle(q0123, q4567, lo) + __builtin_shuffle(q0123, q4567, hi);
}

CPU_VEC_INLINE void gather_heads_backward_w8_body(const gather_ctx *g, int64_t b, int64_t e)
{
    const int64_t *rowptr = g->a->rowptr;
    const int32_t *colidx = g->a->colidx;
    int heads = g->heads;
    int64_t width = (int64_t)heads * 8, k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        const float *dyr = g->dy + (i - g->row_begin) * width;
        for (int h0 = 0; h0 < heads; h0 += 8) {
            vec8f dy[8];
            for (int h = 0; h < 8; h++)
                dy[h] = vec8_load(dyr + (h0 + h) * 8, 8);
            for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
                if (k + CPU_GATHER_PREFETCH < k_end)
                    cpu_prefetch_row(g->x + (int64_t)colidx[k + CPU_GATHER_PREFETCH] *
                                                g->x_stride + h0 * 8,
                                     64);
                const float *xr = g->x + (int64_t)colidx[k] * g->x_stride + h0 * 8;
                vec8f p[8];
                for (int h = 0; h < 8; h++)
                    p[h] = vec8_splat(0.0f) + dy[h] * vec8_load(xr + h * 8, 8);
                vec8_store(g->out + (k - g->base) * heads + h0, head8_dots(p), 8);
            }
        }
    }
}
CPU_DEFINE_DISPATCH(gather_heads_backward_w8, (const gather_ctx *g, int64_t b, int64_t e),
                    (g, b, e))

static void gather_heads_backward_w_task(void *arg, int tid, int ntasks)
{
    const gather_ctx *g = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(g->a->rowptr, g->row_begin, g->row_end, tid, ntasks, &b, &e);
    if (g->head_dim == 8 && g->heads % 8 == 0) {
        if (b < e)
            gather_heads_backward_w8(g, b, e);
        return;
    }
    HEAD_DIM_DISPATCH(gather_heads_backward_w_rows, g, b, e);
}

void cpu_gather_heads_backward_w(bv_compute *c, const bv_csr *a, int64_t row_begin,
                                 int64_t row_end, int heads, int64_t head_dim,
                                 const float *dy, const float *x, int64_t x_stride,
                                 float *dw)
{
    if (row_end <= row_begin || heads <= 0)
        return;
    gather_ctx g = {.a = a, .row_begin = row_begin, .row_end = row_end,
                    .base = a->rowptr[row_begin], .heads = heads, .head_dim = head_dim,
                    .x = x, .x_stride = x_stride, .dy = dy, .out = dw};
    int64_t rows = row_end - row_begin;
    int64_t nnz = a->rowptr[row_end] - g.base;
    int64_t d = head_dim > 0 ? head_dim : 1;
    cpu_run(c, CPU_TIME_EDGE, row_tasks(c, rows, (nnz + rows) * heads * d, CPU_GRAIN),
                 gather_heads_backward_w_task, &g);
}
