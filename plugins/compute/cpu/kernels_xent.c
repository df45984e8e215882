/* Masked softmax cross-entropy for the CPU plugin. Rows go to threads in fixed blocks; each
 * block's loss is a partial summed by the caller in block order, so the loss is
 * bit-identical for every thread count (and for the generic and AVX2 builds). */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"
#include "cpu_vec.h"

#define XENT_MIN_BLOCK 256 /* rows */
#define XENT_PREFETCH 16   /* rows */

typedef struct xent_ctx {
    int64_t n, k;
    const float *logits;
    const int32_t *labels;
    const uint8_t *mask;
    float grad_scale;
    float *dlogits;
    int64_t block, nblocks;
    double *loss;
    int64_t *count;
    int64_t *correct;
} xent_ctx;

/* exp(l_j - mx) for the up to 8 columns j0.. of a row (lanes past its end give 0). */
CPU_VEC_INLINE vec8f xent_exp8(const float *l, int64_t j0, int64_t k, float mx)
{
    if (j0 + 8 <= k) /* a constant size: a plain vector load */
        return vec8_exp_nonpos(vec8_load(l + j0, 8) - mx);
    int64_t n = k - j0;
    const vec8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
    vec8f v = vec8_load(l + j0, n) - mx;
    return vec8_exp_nonpos(vec8_select(lane < (int32_t)n, v, vec8_splat(-INFINITY)));
}

/* One row: the stable form -log softmax(l)[y] = log(sum_j exp(l_j - max)) - (l_y - max),
 * the exponentials 8 columns at a time (cpu_vec.h) and summed in column order in double.
 * Returns whether the row's argmax (first maximum) is the label. */
CPU_VEC_INLINE bool xent_row(const xent_ctx *x, int64_t i, int32_t label, double *loss)
{
    const float *l = x->logits + i * x->k;
    int64_t k = x->k;
    int64_t arg = 0;
    float mx = l[0];
    for (int64_t j = 1; j < k; j++)
        if (l[j] > mx) {
            mx = l[j];
            arg = j;
        }
    float shifted_label = l[label] - mx; /* read before dlogits, which may alias logits */
    double sum = 0.0;
    float *d = x->dlogits ? x->dlogits + i * k : NULL;
    for (int64_t j = 0; j < k; j += 8) {
        vec8f e = xent_exp8(l, j, k, mx);
        for (int64_t t = 0; t < 8 && j + t < k; t++)
            sum += (double)e[t];
        if (d && j + 8 <= k)
            vec8_store(d + j, e, 8);
        else if (d)
            vec8_store(d + j, e, k - j);
    }
    if (d) {
        float scale = (float)((double)x->grad_scale / sum);
        for (int64_t j = 0; j < k; j++)
            d[j] *= scale;
        d[label] -= x->grad_scale;
    }
    *loss = log(sum) - (double)shifted_label;
    return arg == label;
}

CPU_VEC_INLINE void xent_block_body(const xent_ctx *x, int64_t blk)
{
    int64_t lo = blk * x->block;
    int64_t hi = lo + x->block < x->n ? lo + x->block : x->n;
    double loss = 0.0;
    int64_t count = 0, correct = 0;
    for (int64_t i = lo; i < hi; i++) {
        /* A mask picks rows at random (a split), which defeats the hardware's prefetcher:
         * the rows ahead are requested whether they count or not. */
        if (i + XENT_PREFETCH < hi)
            __builtin_prefetch(x->logits + (i + XENT_PREFETCH) * x->k, 0, 0);
        int32_t label = x->labels[i];
        /* a label outside [0, k) is not counted (and never indexes past the row) */
        bool counted = (!x->mask || x->mask[i]) && label >= 0 && label < x->k;
        if (!counted) {
            if (x->dlogits)
                memset(x->dlogits + i * x->k, 0, (size_t)x->k * sizeof(float));
            continue;
        }
        double row_loss;
        correct += xent_row(x, i, label, &row_loss);
        loss += row_loss;
        count++;
    }
    x->loss[blk] = loss;
    x->count[blk] = count;
    x->correct[blk] = correct;
}
CPU_DEFINE_DISPATCH(xent_block, (const xent_ctx *x, int64_t blk), (x, blk))

static void xent_task(void *arg, int tid, int ntasks)
{
    const xent_ctx *x = arg;
    int64_t b, e;
    cpu_split(x->nblocks, tid, ntasks, &b, &e);
    for (int64_t blk = b; blk < e; blk++)
        xent_block(x, blk);
}

void cpu_softmax_xent(bv_compute *c, int64_t n, int64_t k, const float *logits,
                      const int32_t *labels, const uint8_t *mask, float grad_scale,
                      float *dlogits, bv_xent_result *out)
{
    out->loss_sum = 0.0;
    out->count = 0;
    out->correct = 0;
    if (n <= 0 || k <= 0)
        return;
    xent_ctx x = {.n = n, .k = k, .logits = logits, .labels = labels, .mask = mask,
                  .grad_scale = grad_scale, .dlogits = dlogits,
                  .block = cpu_block_size(n, XENT_MIN_BLOCK),
                  .loss = c->partial_sum, .count = c->partial_count,
                  .correct = c->partial_correct};
    x.nblocks = (n + x.block - 1) / x.block;
    int ntasks = cpu_tasks_for(c, n * k, CPU_GRAIN / 8);
    if (ntasks > x.nblocks)
        ntasks = (int)x.nblocks;
    cpu_run(c, CPU_TIME_LOSS, ntasks, xent_task, &x);
    for (int64_t blk = 0; blk < x.nblocks; blk++) {
        out->loss_sum += x.loss[blk];
        out->count += x.count[blk];
        out->correct += x.correct[blk];
    }
}
