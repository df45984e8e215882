/* Sparse times dense (spmm) for the CPU plugin: rows are split across threads by their
 * nonzero count, and each output row is summed by one thread in edge order, so the result
 * is bit-identical for every thread count. */
#include <string.h>

#include "cpu_internal.h"
#include "cpu_vec.h"

typedef struct spmm_ctx {
    const bv_csr *a;
    int64_t row_begin, row_end;
    const float *x;
    int64_t f;
    float *y;
} spmm_ctx;

static void row_axpy(int64_t f, float w, const float *restrict xr, float *restrict yr)
{
    for (int64_t j = 0; j < f; j++)
        yr[j] += w * xr[j];
}

static void row_add(int64_t f, const float *restrict xr, float *restrict yr)
{
    for (int64_t j = 0; j < f; j++)
        yr[j] += xr[j];
}

/* Rows of x are gathered at random, so memory latency bounds the product: the rows this
 * many nonzeros ahead (across row ends) are requested early, about 8 KiB in flight. */
static inline int64_t spmm_prefetch_distance(int64_t f)
{
    int64_t d = 2048 / (f > 0 ? f : 1);
    return d < CPU_GATHER_PREFETCH ? CPU_GATHER_PREFETCH : d;
}

/* Any width: each output row is accumulated in memory. */
static void spmm_rows_any(const spmm_ctx *s, int64_t b, int64_t e)
{
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    const float *values = s->a->values;
    int64_t f = s->f, ahead = spmm_prefetch_distance(f), k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        float *yr = s->y + (i - s->row_begin) * f;
        memset(yr, 0, (size_t)f * sizeof *yr);
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            if (k + ahead < k_end)
                cpu_prefetch_row(s->x + (int64_t)colidx[k + ahead] * f, f);
            if (values)
                row_axpy(f, values[k], s->x + (int64_t)colidx[k] * f, yr);
            else
                row_add(f, s->x + (int64_t)colidx[k] * f, yr);
        }
    }
}

/* Widths of nv x 8 floats: the output row stays in nv vector registers while its edges
 * are summed, and is stored once. Per element the same operations in the same order as
 * spmm_rows_any (a weight of 1 where there are no values multiplies exactly), so both
 * give the same bits. */
CPU_VEC_INLINE void spmm_rows_vec_body(const spmm_ctx *s, int64_t b, int64_t e, int nv)
{
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    const float *values = s->a->values;
    const float *x = s->x;
    int64_t f = 8 * (int64_t)nv, ahead = spmm_prefetch_distance(f), k_end = rowptr[e];
    for (int64_t i = b; i < e; i++) {
        vec8f acc[8];
        for (int v = 0; v < nv; v++)
            acc[v] = vec8_splat(0.0f);
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            if (k + ahead < k_end)
                cpu_prefetch_row(x + (int64_t)colidx[k + ahead] * f, f);
            const float *xr = x + (int64_t)colidx[k] * f;
            vec8f w = vec8_splat(values ? values[k] : 1.0f);
            for (int v = 0; v < nv; v++)
                acc[v] += w * vec8_load(xr + 8 * v, 8);
        }
        float *yr = s->y + (i - s->row_begin) * f;
        for (int v = 0; v < nv; v++)
            vec8_store(yr + 8 * v, acc[v], 8);
    }
}

CPU_VEC_INLINE void spmm_rows_body(const spmm_ctx *s, int64_t b, int64_t e)
{
    switch (s->f) {
    case 8: spmm_rows_vec_body(s, b, e, 1); break;
    case 16: spmm_rows_vec_body(s, b, e, 2); break;
    case 32: spmm_rows_vec_body(s, b, e, 4); break;
    case 64: spmm_rows_vec_body(s, b, e, 8); break;
    default: spmm_rows_any(s, b, e); break;
    }
}
CPU_DEFINE_DISPATCH(spmm_rows, (const spmm_ctx *s, int64_t b, int64_t e), (s, b, e))

static void spmm_task(void *arg, int tid, int ntasks)
{
    const spmm_ctx *s = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(s->a->rowptr, s->row_begin, s->row_end, tid, ntasks, &b, &e);
    if (b < e)
        spmm_rows(s, b, e);
}

void cpu_spmm(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
              const float *x, int64_t f, float *y)
{
    if (row_end <= row_begin || f <= 0)
        return;
    spmm_ctx s = {.a = a, .row_begin = row_begin, .row_end = row_end, .x = x, .f = f, .y = y};
    int64_t rows = row_end - row_begin;
    int64_t nnz = a->rowptr[row_end] - a->rowptr[row_begin];
    int ntasks = cpu_tasks_for(c, (nnz + rows) * f, CPU_GRAIN);
    if (ntasks > rows)
        ntasks = (int)rows;
    cpu_run(c, CPU_TIME_SPMM, ntasks, spmm_task, &s);
}

/* ---- spmm with dropout on the sparse values (a sparse first layer) ------------------ */

/* Up to this many heads' columns (heads x f floats, f a multiple of 8) stay in registers. */
#define SPMM_HEADS_VEC 8

typedef struct spmm_dropout_ctx {
    const bv_csr *a;
    float p, scale;
    uint64_t key, offset, head_stride, threshold;
    int64_t row_stride;
    int heads;
    const float *x;
    int64_t ldx, f;
    float *y;
    int64_t ldy;
    const float *dense; /* dense_dropout_heads: the rows x cols input (ld_dense), a NULL */
    int64_t ld_dense, rows, cols;
} spmm_dropout_ctx;

/* The dropped-out value of edge k of row i for head h: the mask dropout_forward would give
 * the dense element (i, col) of head h's input, so the sparse and dense paths train the
 * same model. The keep test is u >= p in its exact integer form, and selects the kept
 * value's bits or +0 without a branch: taken at random (p = 0.5: half the time), one
 * mispredicted most nonzeros (perf: a fifth of the forward's cycles on the PubMed-sized
 * graph). */
static inline float kept_value_at(const spmm_dropout_ctx *s, int64_t i, int64_t col, float v,
                                  int h)
{
    if (s->p <= 0.0f)
        return v;
    uint64_t index = s->offset + (uint64_t)h * s->head_stride + (uint64_t)(i * s->row_stride + col);
    uint64_t z = cpu_mix64(s->key + (index + 1) * CPU_GOLDEN_GAMMA);
    float kept = v * s->scale;
    uint32_t bits;
    memcpy(&bits, &kept, sizeof bits);
    bits &= 0u - (uint32_t)((z >> 40) >= s->threshold);
    memcpy(&kept, &bits, sizeof kept);
    return kept;
}

static inline float kept_value(const spmm_dropout_ctx *s, int64_t i, int64_t k, int h)
{
    return kept_value_at(s, i, s->a->colidx[k], s->a->values[k], h);
}

/* Every head's dropped-out value of edge k of row i, the hashes of 4 heads at a time in
 * 64-bit lanes: the same masks as kept_value, by the exact integer form of u >= p. */
static inline __attribute__((always_inline)) void kept_values_at(const spmm_dropout_ctx *s,
                                                                 int64_t i, int64_t col,
                                                                 float v, float *w)
{
    int h = 0;
    if (s->p > 0.0f) {
        uint64_t first = s->offset + (uint64_t)(i * s->row_stride + col) + 1;
        uint64_t hs = s->head_stride;
        float kept = v * s->scale;
        int32_t bits;
        memcpy(&bits, &kept, sizeof bits);
        for (; h + 4 <= s->heads; h += 4) {
            uint64_t at = first + (uint64_t)h * hs;
            cpu_u64x4 z = (cpu_u64x4){at, at + hs, at + 2 * hs, at + 3 * hs} * CPU_GOLDEN_GAMMA +
                          s->key;
            cpu_mix64x4(&z);
            /* the lanes' keep masks, narrowed to 32 bits, select kept's bits or +0 */
            cpu_i64x4 keep64 = (cpu_i64x4)((z >> 40) >= s->threshold);
            cpu_i32x4 keep = __builtin_convertvector(keep64, cpu_i32x4);
            cpu_i32x4 wv = (cpu_i32x4){bits, bits, bits, bits} & keep;
            memcpy(w + h, &wv, sizeof wv);
        }
    }
    for (; h < s->heads; h++)
        w[h] = kept_value_at(s, i, col, v, h);
}

static inline __attribute__((always_inline)) void kept_values(const spmm_dropout_ctx *s,
                                                              int64_t i, int64_t k, float *w)
{
    kept_values_at(s, i, s->a->colidx[k], s->a->values[k], w);
}

/* A dropped value adds w x = 0 x (or -0) to its output row instead of being skipped: the
 * row starts at +0 and a float sum that starts at +0 is never -0, so adding a zero leaves
 * it exactly as it was, and the kept/dropped branch, taken at random with p = 0.6, no
 * longer mispredicts. All heads' columns of a row (nv x 8 floats, each vector inside one
 * head) stay in registers while its nonzeros go by once, each head's mask drawn per
 * nonzero; every element adds in the same order as the any-width loop, so every path and
 * any number of heads per call give the same bits. */
CPU_VEC_INLINE void spmm_dropout_rows_vec(const spmm_dropout_ctx *s, int64_t b, int64_t e,
                                          int nv, bool one_head)
{
    int64_t per_head = one_head ? nv : s->f / 8; /* vectors of one head */
    for (int64_t i = b; i < e; i++) {
        vec8f acc[SPMM_HEADS_VEC];
        for (int v = 0; v < nv; v++)
            acc[v] = vec8_splat(0.0f);
        for (int64_t k = s->a->rowptr[i]; k < s->a->rowptr[i + 1]; k++) {
            const float *xr = s->x + (int64_t)s->a->colidx[k] * s->ldx;
            float w[SPMM_HEADS_VEC];
            if (one_head) /* a constant here: one weight for every vector */
                w[0] = kept_value(s, i, k, 0);
            else
                kept_values(s, i, k, w);
            for (int v = 0; v < nv; v++)
                acc[v] += vec8_splat(w[one_head ? 0 : v / per_head]) * vec8_load(xr + 8 * v, 8);
        }
        float *yr = s->y + i * s->ldy;
        for (int v = 0; v < nv; v++)
            vec8_store(yr + 8 * v, acc[v], 8);
    }
}

CPU_VEC_INLINE void spmm_dropout_rows_body(const spmm_dropout_ctx *s, int64_t b, int64_t e)
{
    int64_t width = s->f * s->heads;
    if (s->f % 8 == 0 && width <= 8 * SPMM_HEADS_VEC) {
        bool one = s->heads == 1; /* GCN's first layer */
        switch (width / 8) { /* a constant trip count, so the vector loops unroll */
        case 1: spmm_dropout_rows_vec(s, b, e, 1, true); return;
        case 2: one ? spmm_dropout_rows_vec(s, b, e, 2, true)
                    : spmm_dropout_rows_vec(s, b, e, 2, false); return;
        case 4: one ? spmm_dropout_rows_vec(s, b, e, 4, true)
                    : spmm_dropout_rows_vec(s, b, e, 4, false); return;
        case 8: one ? spmm_dropout_rows_vec(s, b, e, 8, true)
                    : spmm_dropout_rows_vec(s, b, e, 8, false); return;
        default: break;
        }
    }
    for (int64_t i = b; i < e; i++) {
        float *yr = s->y + i * s->ldy;
        for (int h = 0; h < s->heads; h++)
            memset(yr + h * s->f, 0, (size_t)s->f * sizeof *yr);
        for (int64_t k = s->a->rowptr[i]; k < s->a->rowptr[i + 1]; k++)
            for (int h = 0; h < s->heads; h++)
                row_axpy(s->f, kept_value(s, i, k, h),
                         s->x + (int64_t)s->a->colidx[k] * s->ldx + h * s->f, yr + h * s->f);
    }
}
CPU_DEFINE_DISPATCH(spmm_dropout_rows, (const spmm_dropout_ctx *s, int64_t b, int64_t e),
                    (s, b, e))

static void spmm_dropout_task(void *arg, int tid, int ntasks)
{
    const spmm_dropout_ctx *s = arg;
    int64_t b, e;
    cpu_split_rows_by_nnz(s->a->rowptr, 0, s->a->nrows, tid, ntasks, &b, &e);
    if (b < e)
        spmm_dropout_rows(s, b, e);
}

static spmm_dropout_ctx spmm_dropout_setup(const bv_csr *a, float p, uint64_t seed,
                                           uint64_t stream, uint64_t offset,
                                           uint64_t head_stride, int64_t row_stride, int heads)
{
    spmm_dropout_ctx s = {.a = a, .p = p >= 1.0f ? 1.0f : p, .offset = offset,
                          .head_stride = head_stride, .row_stride = row_stride,
                          .heads = heads};
    s.scale = p > 0.0f && p < 1.0f ? 1.0f / (1.0f - p) : 1.0f;
    s.key = cpu_dropout_key(seed, stream);
    s.threshold = cpu_dropout_threshold(s.p);
    return s;
}

void cpu_spmm_dropout_heads(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                            uint64_t stream, uint64_t offset, uint64_t head_stride,
                            int64_t row_stride, int heads, const float *x, int64_t ldx,
                            int64_t f, float *y, int64_t ldy)
{
    if (a->nrows <= 0 || f <= 0 || heads <= 0)
        return;
    if (heads > SPMM_HEADS_VEC) { /* the weights of one nonzero's heads fit a small array */
        for (int h = 0; h < heads; h += SPMM_HEADS_VEC)
            cpu_spmm_dropout_heads(c, a, p, seed, stream, offset + (uint64_t)h * head_stride,
                                   head_stride, row_stride,
                                   heads - h < SPMM_HEADS_VEC ? heads - h : SPMM_HEADS_VEC,
                                   x + h * f, ldx, f, y + h * f, ldy);
        return;
    }
    spmm_dropout_ctx s = spmm_dropout_setup(a, p, seed, stream, offset, head_stride,
                                            row_stride, heads);
    s.x = x;
    s.ldx = ldx;
    s.f = f;
    s.y = y;
    s.ldy = ldy;
    int ntasks = cpu_tasks_for(c, (a->nnz + a->nrows) * f * heads, CPU_GRAIN);
    if (ntasks > a->nrows)
        ntasks = (int)a->nrows;
    cpu_run(c, CPU_TIME_SPMM, ntasks, spmm_dropout_task, &s);
}

void cpu_spmm_dropout(bv_compute *c, const bv_csr *a, float p, uint64_t seed, uint64_t stream,
                      uint64_t offset, int64_t row_stride, const float *x, int64_t ldx,
                      int64_t f, float *y, int64_t ldy)
{
    cpu_spmm_dropout_heads(c, a, p, seed, stream, offset, 0, row_stride, 1, x, ldx, f, y, ldy);
}

/* The weight gradient scatters into rows of dx named by columns. Each task owns a range of
 * dx rows and scans every nonzero in edge order, hashing and adding only those whose
 * column it owns (edge_scores_backward's dsrc scheme): each dx row receives its terms in
 * the serial loop's order, so the bits do not depend on the thread count. A dropped value
 * adds a zero or nothing (the same: dx starts at +0 or at a sum, never at -0). Each head's
 * columns of dx and dy are its own, so every element gets the same terms in the same
 * order as with one head per call. */
CPU_VEC_INLINE void spmm_dropout_backward_x_cols(const spmm_dropout_ctx *s,
                                                 int64_t col_begin, int64_t col_end, int nv,
                                                 bool one_head)
{
    /* the context's fields in locals: stores into dx could alias them otherwise */
    const int64_t *rowptr = s->a->rowptr;
    const int32_t *colidx = s->a->colidx;
    const float *dy = s->x;
    float *dx = s->y;
    int64_t lddy = s->ldx, lddx = s->ldy, f = s->f, nrows = s->a->nrows;
    int heads = one_head ? 1 : s->heads; /* a constant with one head (GCN's first layer) */
    for (int64_t i = 0; i < nrows; i++)
        for (int64_t k = rowptr[i]; k < rowptr[i + 1]; k++) {
            int64_t col = colidx[k];
            if (col < col_begin || col >= col_end)
                continue;
            float wh[SPMM_HEADS_VEC];
            if (one_head)
                wh[0] = kept_value(s, i, k, 0);
            else
                kept_values(s, i, k, wh);
            for (int h = 0; h < heads; h++) {
                const float *xr = dy + i * lddy + h * f;
                float *yr = dx + col * lddx + h * f;
                if (nv == 0) {
                    if (wh[h] != 0.0f)
                        row_axpy(f, wh[h], xr, yr);
                    continue;
                }
                /* a dropped value adds 0 x, as in the forward, instead of a branch taken
                 * at random: dx starts at +0 or at a sum, never at -0, so it stays as it
                 * was */
                vec8f wv = vec8_splat(wh[h]);
                for (int v = 0; v < nv; v++)
                    vec8_store(yr + 8 * v,
                               vec8_load(yr + 8 * v, 8) + wv * vec8_load(xr + 8 * v, 8), 8);
            }
        }
}

/* head-sized rows (nv x 8 floats) as vectors, the same multiply and add per element */
CPU_VEC_INLINE void spmm_dropout_backward_x_range_body(const spmm_dropout_ctx *s, int64_t col_begin,
                                                 int64_t col_end)
{
    bool one = s->heads == 1; /* GCN's first layer: its own constant-folded copy */
#define BACKWARD_X_COLS(nv)                                                                \
    (one ? spmm_dropout_backward_x_cols(s, col_begin, col_end, nv, true)                  \
         : spmm_dropout_backward_x_cols(s, col_begin, col_end, nv, false))
    switch (s->f) {
    case 8: BACKWARD_X_COLS(1); break;
    case 16: BACKWARD_X_COLS(2); break;
    case 32: BACKWARD_X_COLS(4); break;
    case 64: BACKWARD_X_COLS(8); break;
    default: spmm_dropout_backward_x_cols(s, col_begin, col_end, 0, false); break;
    }
#undef BACKWARD_X_COLS
}
CPU_DEFINE_DISPATCH(spmm_dropout_backward_x_range,
                    (const spmm_dropout_ctx *s, int64_t col_begin, int64_t col_end),
                    (s, col_begin, col_end))

static void spmm_dropout_backward_x_task(void *arg, int tid, int ntasks)
{
    const spmm_dropout_ctx *s = arg;
    int64_t col_begin, col_end;
    cpu_split(s->a->ncols, tid, ntasks, &col_begin, &col_end);
    spmm_dropout_backward_x_range(s, col_begin, col_end);
}

void cpu_spmm_dropout_heads_backward_x(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                                       uint64_t stream, uint64_t offset, uint64_t head_stride,
                                       int64_t row_stride, int heads, const float *dy,
                                       int64_t lddy, int64_t f, float *dx, int64_t lddx)
{
    if (a->nrows <= 0 || f <= 0 || heads <= 0)
        return;
    if (heads > SPMM_HEADS_VEC) { /* as the forward: 8 heads per sweep */
        for (int h = 0; h < heads; h += SPMM_HEADS_VEC)
            cpu_spmm_dropout_heads_backward_x(
                c, a, p, seed, stream, offset + (uint64_t)h * head_stride, head_stride,
                row_stride, heads - h < SPMM_HEADS_VEC ? heads - h : SPMM_HEADS_VEC, dy + h * f,
                lddy, f, dx + h * f, lddx);
        return;
    }
    spmm_dropout_ctx s = spmm_dropout_setup(a, p, seed, stream, offset, head_stride,
                                            row_stride, heads);
    s.x = dy;
    s.ldx = lddy;
    s.f = f;
    s.y = dx;
    s.ldy = lddx;
    int ntasks = cpu_tasks_for(c, (a->nnz + a->nrows) * f * heads, CPU_GRAIN);
    if (ntasks > a->ncols)
        ntasks = (int)a->ncols;
    cpu_run(c, CPU_TIME_SPMM, ntasks, spmm_dropout_backward_x_task, &s);
}

void cpu_spmm_dropout_backward_x(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                                 uint64_t stream, uint64_t offset, int64_t row_stride,
                                 const float *dy, int64_t lddy, int64_t f, float *dx,
                                 int64_t lddx)
{
    cpu_spmm_dropout_heads_backward_x(c, a, p, seed, stream, offset, 0, row_stride, 1, dy,
                                      lddy, f, dx, lddx);
}

/* ---- the same products on a dense input (GAT's first layers on dense features) ------- */

/* What spmm_dropout_heads gives, to the bit, for a CSR that holds every element of the
 * dense rows x cols input in column order: each head's mask drawn per element, each row's
 * columns added in order. One sweep over the input where the heads' projections were, per
 * head, a dropout pass writing the dropped input and a gemm reading it back (perf on the
 * 1M-vertex GAT: those passes and OpenBLAS's packing of a product 8 columns wide were a
 * quarter of the epoch's cycles). */
/* Eight heads' kept values of one element in one vector: the hashes' inputs of element
 * (i, col) of heads 0..7 are at + GAMMA x (0, hs, .., 7 hs), where `at` = key + (offset + i
 * row_stride + col + 1) GAMMA, so that a row's next column adds GAMMA: the masks of
 * kept_values_at, in 8 lanes of 64 bits (one AVX-512 multiply each). */
typedef cpu_u64x8 u64x8;
typedef int64_t i64x8 __attribute__((vector_size(64)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

CPU_VEC_INLINE vec8f kept8(const spmm_dropout_ctx *s, u64x8 at, float v)
{
    float kept = v * s->scale;
    int32_t bits;
    memcpy(&bits, &kept, sizeof bits);
    if (!(s->p > 0.0f))
        return vec8_splat(kept);
    u64x8 z = at;
    cpu_mix64x8(&z);
    i32x8 keep = __builtin_convertvector((i64x8)((z >> 40) >= s->threshold), i32x8);
    return (vec8f)(keep & bits);
}

/* The 8 lanes' offsets GAMMA x h hs, and a row's first `at` */
CPU_VEC_INLINE u64x8 heads_at(const spmm_dropout_ctx *s)
{
    uint64_t hs = s->head_stride;
    return (u64x8){0, hs, 2 * hs, 3 * hs, 4 * hs, 5 * hs, 6 * hs, 7 * hs} * CPU_GOLDEN_GAMMA;
}

CPU_VEC_INLINE u64x8 row_at(const spmm_dropout_ctx *s, u64x8 heads, int64_t i, int64_t col)
{
    uint64_t first = s->offset + (uint64_t)(i * s->row_stride + col) + 1;
    return heads + (first * CPU_GOLDEN_GAMMA + s->key);
}

/* GAT's 8 heads of 8 units: a row's 64 columns as 4 vectors of 16 lanes (two heads each,
 * one AVX-512 register), each head's kept value spread over its 8 lanes. The same multiply
 * and add per element as 8 lanes at a time: the same bits. */
typedef float vec16f __attribute__((vector_size(64)));

CPU_VEC_INLINE vec16f vec16_load(const float *p)
{
    vec16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

CPU_VEC_INLINE void heads_8x8_add(vec16f acc[4], vec8f w, const float *xr)
{
    acc[0] += __builtin_shufflevector(w, w, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1) *
              vec16_load(xr);
    acc[1] += __builtin_shufflevector(w, w, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3) *
              vec16_load(xr + 16);
    acc[2] += __builtin_shufflevector(w, w, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5) *
              vec16_load(xr + 32);
    acc[3] += __builtin_shufflevector(w, w, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7) *
              vec16_load(xr + 48);
}

CPU_VEC_INLINE void dense_dropout_rows_8x8(const spmm_dropout_ctx *s, int64_t b, int64_t e)
{
    u64x8 heads = heads_at(s);
    for (int64_t i = b; i < e; i++) {
        const float *ar = s->dense + i * s->ld_dense;
        vec16f acc[4] = {{0}, {0}, {0}, {0}};
        u64x8 at = row_at(s, heads, i, 0);
        for (int64_t col = 0; col < s->cols; col++, at += CPU_GOLDEN_GAMMA)
            heads_8x8_add(acc, kept8(s, at, ar[col]), s->x + col * s->ldx);
        memcpy(s->y + i * s->ldy, acc, sizeof acc);
    }
}

/* Fewer heads of 8 units (2 or 4): nv vectors of 8 per row, one per head, each head's
 * kept value from kept_values_at. */
CPU_VEC_INLINE void dense_dropout_rows_vec(const spmm_dropout_ctx *s, int64_t b, int64_t e,
                                           int nv)
{
    for (int64_t i = b; i < e; i++) {
        const float *ar = s->dense + i * s->ld_dense;
        vec8f acc[SPMM_HEADS_VEC];
        for (int v = 0; v < nv; v++)
            acc[v] = vec8_splat(0.0f);
        for (int64_t col = 0; col < s->cols; col++) {
            const float *xr = s->x + col * s->ldx;
            float w[SPMM_HEADS_VEC];
            kept_values_at(s, i, col, ar[col], w);
            for (int v = 0; v < nv; v++)
                acc[v] += vec8_splat(w[v]) * vec8_load(xr + 8 * v, 8);
        }
        float *yr = s->y + i * s->ldy;
        for (int v = 0; v < nv; v++)
            vec8_store(yr + 8 * v, acc[v], 8);
    }
}

CPU_VEC_INLINE void dense_dropout_rows_body(const spmm_dropout_ctx *s, int64_t b, int64_t e)
{
    int64_t width = s->f * s->heads;
    if (s->f == 8 && width <= 8 * SPMM_HEADS_VEC) { /* heads of 8 units (GAT's) */
        switch (s->heads) { /* constant trip counts, so the vector loops unroll */
        case 2: dense_dropout_rows_vec(s, b, e, 2); return;
        case 4: dense_dropout_rows_vec(s, b, e, 4); return;
        case 8: dense_dropout_rows_8x8(s, b, e); return;
        default: break;
        }
    }
    for (int64_t i = b; i < e; i++) {
        float *yr = s->y + i * s->ldy;
        const float *ar = s->dense + i * s->ld_dense;
        for (int h = 0; h < s->heads; h++)
            memset(yr + h * s->f, 0, (size_t)s->f * sizeof *yr);
        for (int64_t col = 0; col < s->cols; col++)
            for (int h = 0; h < s->heads; h++)
                row_axpy(s->f, kept_value_at(s, i, col, ar[col], h),
                         s->x + col * s->ldx + h * s->f, yr + h * s->f);
    }
}
/* built for AVX-512 too: the hashes are most of the work */
CPU_DEFINE_DISPATCH_AVX512(dense_dropout_rows,
                           (const spmm_dropout_ctx *s, int64_t b, int64_t e), (s, b, e))

/* The gradient with respect to x (the weights), a task per range of their rows (the
 * input's columns), as spmm_dropout_backward_x_cols: every dx row gets its terms in the
 * input's row order. Rows go by in blocks whose dy rows stay in the cache while the
 * task's columns each sum theirs in registers. */
#define DENSE_ROW_BLOCK 128

CPU_VEC_INLINE void dense_dropout_backward_x_vec(const spmm_dropout_ctx *s, int64_t col_begin,
                                                 int64_t col_end, int nv)
{
    for (int64_t i0 = 0; i0 < s->rows; i0 += DENSE_ROW_BLOCK) {
        int64_t i1 = i0 + DENSE_ROW_BLOCK < s->rows ? i0 + DENSE_ROW_BLOCK : s->rows;
        for (int64_t col = col_begin; col < col_end; col++) {
            float *yr = s->y + col * s->ldy;
            vec8f acc[SPMM_HEADS_VEC];
            for (int v = 0; v < nv; v++)
                acc[v] = vec8_load(yr + 8 * v, 8);
            for (int64_t i = i0; i < i1; i++) {
                float w[SPMM_HEADS_VEC];
                kept_values_at(s, i, col, s->dense[i * s->ld_dense + col], w);
                const float *xr = s->x + i * s->ldx;
                for (int v = 0; v < nv; v++)
                    acc[v] += vec8_splat(w[v]) * vec8_load(xr + 8 * v, 8);
            }
            for (int v = 0; v < nv; v++)
                vec8_store(yr + 8 * v, acc[v], 8);
        }
    }
}

CPU_VEC_INLINE void dense_dropout_backward_x_8x8(const spmm_dropout_ctx *s, int64_t col_begin,
                                                 int64_t col_end)
{
    u64x8 heads = heads_at(s);
    const u64x8 row_step = (u64x8){0} + (uint64_t)s->row_stride * CPU_GOLDEN_GAMMA;
    for (int64_t i0 = 0; i0 < s->rows; i0 += DENSE_ROW_BLOCK) {
        int64_t i1 = i0 + DENSE_ROW_BLOCK < s->rows ? i0 + DENSE_ROW_BLOCK : s->rows;
        for (int64_t col = col_begin; col < col_end; col++) {
            float *yr = s->y + col * s->ldy;
            vec16f acc[4];
            memcpy(acc, yr, sizeof acc);
            u64x8 at = row_at(s, heads, i0, col);
            for (int64_t i = i0; i < i1; i++, at += row_step)
                heads_8x8_add(acc, kept8(s, at, s->dense[i * s->ld_dense + col]),
                              s->x + i * s->ldx);
            memcpy(yr, acc, sizeof acc);
        }
    }
}

CPU_VEC_INLINE void dense_dropout_backward_x_body(const spmm_dropout_ctx *s, int64_t col_begin,
                                                  int64_t col_end)
{
    int64_t width = s->f * s->heads;
    if (s->f == 8 && width <= 8 * SPMM_HEADS_VEC) {
        switch (s->heads) {
        case 2: dense_dropout_backward_x_vec(s, col_begin, col_end, 2); return;
        case 4: dense_dropout_backward_x_vec(s, col_begin, col_end, 4); return;
        case 8: dense_dropout_backward_x_8x8(s, col_begin, col_end); return;
        default: break;
        }
    }
    for (int64_t i = 0; i < s->rows; i++)
        for (int64_t col = col_begin; col < col_end; col++)
            for (int h = 0; h < s->heads; h++) {
                float w = kept_value_at(s, i, col, s->dense[i * s->ld_dense + col], h);
                if (w != 0.0f)
                    row_axpy(s->f, w, s->x + i * s->ldx + h * s->f,
                             s->y + col * s->ldy + h * s->f);
            }
}
CPU_DEFINE_DISPATCH_AVX512(dense_dropout_backward_x,
                           (const spmm_dropout_ctx *s, int64_t col_begin, int64_t col_end),
                           (s, col_begin, col_end))

static void dense_dropout_task(void *arg, int tid, int ntasks)
{
    const spmm_dropout_ctx *s = arg;
    int64_t b, e;
    cpu_split(s->rows, tid, ntasks, &b, &e);
    if (b < e)
        dense_dropout_rows(s, b, e);
}

static void dense_dropout_backward_x_task(void *arg, int tid, int ntasks)
{
    const spmm_dropout_ctx *s = arg;
    int64_t b, e;
    cpu_split(s->cols, tid, ntasks, &b, &e);
    if (b < e)
        dense_dropout_backward_x(s, b, e);
}

/* The context of either direction: heads of at most SPMM_HEADS_VEC (the callers split). */
static spmm_dropout_ctx dense_dropout_setup(int64_t rows, int64_t cols, const float *a,
                                            int64_t lda, float p, uint64_t seed,
                                            uint64_t stream, uint64_t offset,
                                            uint64_t head_stride, int64_t row_stride,
                                            int heads, const float *x, int64_t ldx, int64_t f,
                                            float *y, int64_t ldy)
{
    spmm_dropout_ctx s = spmm_dropout_setup(NULL, p, seed, stream, offset, head_stride,
                                            row_stride, heads);
    s.dense = a;
    s.ld_dense = lda;
    s.rows = rows;
    s.cols = cols;
    s.x = x;
    s.ldx = ldx;
    s.f = f;
    s.y = y;
    s.ldy = ldy;
    return s;
}

void cpu_dense_dropout_heads(bv_compute *c, int64_t rows, int64_t cols, const float *a,
                             int64_t lda, float p, uint64_t seed, uint64_t stream,
                             uint64_t offset, uint64_t head_stride, int64_t row_stride,
                             int heads, const float *x, int64_t ldx, int64_t f, float *y,
                             int64_t ldy)
{
    if (rows <= 0 || f <= 0 || heads <= 0)
        return;
    if (heads > SPMM_HEADS_VEC) {
        for (int h = 0; h < heads; h += SPMM_HEADS_VEC)
            cpu_dense_dropout_heads(c, rows, cols, a, lda, p, seed, stream,
                                    offset + (uint64_t)h * head_stride, head_stride,
                                    row_stride,
                                    heads - h < SPMM_HEADS_VEC ? heads - h : SPMM_HEADS_VEC,
                                    x + h * f, ldx, f, y + h * f, ldy);
        return;
    }
    spmm_dropout_ctx s = dense_dropout_setup(rows, cols, a, lda, p, seed, stream, offset,
                                             head_stride, row_stride, heads, x, ldx, f, y, ldy);
    int ntasks = cpu_tasks_for(c, rows * (cols + 1) * f * heads, CPU_GRAIN);
    if (ntasks > rows)
        ntasks = (int)rows;
    cpu_run(c, CPU_TIME_GEMM, ntasks, dense_dropout_task, &s);
}

void cpu_dense_dropout_heads_backward_x(bv_compute *c, int64_t rows, int64_t cols,
                                        const float *a, int64_t lda, float p, uint64_t seed,
                                        uint64_t stream, uint64_t offset, uint64_t head_stride,
                                        int64_t row_stride, int heads, const float *dy,
                                        int64_t lddy, int64_t f, float *dx, int64_t lddx)
{
    if (rows <= 0 || cols <= 0 || f <= 0 || heads <= 0)
        return;
    if (heads > SPMM_HEADS_VEC) {
        for (int h = 0; h < heads; h += SPMM_HEADS_VEC)
            cpu_dense_dropout_heads_backward_x(
                c, rows, cols, a, lda, p, seed, stream, offset + (uint64_t)h * head_stride,
                head_stride, row_stride, heads - h < SPMM_HEADS_VEC ? heads - h : SPMM_HEADS_VEC,
                dy + h * f, lddy, f, dx + h * f, lddx);
        return;
    }
    spmm_dropout_ctx s = dense_dropout_setup(rows, cols, a, lda, p, seed, stream, offset,
                                             head_stride, row_stride, heads, dy, lddy, f, dx,
                                             lddx);
    int ntasks = cpu_tasks_for(c, rows * (cols + 1) * f * heads, CPU_GRAIN);
    if (ntasks > cols)
        ntasks = (int)cols;
    cpu_run(c, CPU_TIME_GEMM, ntasks, dense_dropout_backward_x_task, &s);
}
