/* Masked softmax cross-entropy for the CPU plugin. Rows go to threads in fixed blocks; each
 * block's loss is a partial summed by the caller in block order, so the loss is
 * bit-identical for every thread count. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

#define XENT_MIN_BLOCK 256 /* rows */

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

/* One row: the stable form -log softmax(l)[y] = log(sum_j exp(l_j - max)) - (l_y - max).
 * Returns whether the row's argmax (first maximum) is the label. */
static bool xent_row(const xent_ctx *x, int64_t i, int32_t label, double *loss)
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
    if (x->dlogits) {
        float *d = x->dlogits + i * k;
        for (int64_t j = 0; j < k; j++) {
            d[j] = expf(l[j] - mx);
            sum += (double)d[j];
        }
        float scale = (float)((double)x->grad_scale / sum);
        for (int64_t j = 0; j < k; j++)
            d[j] *= scale;
        d[label] -= x->grad_scale;
    } else {
        for (int64_t j = 0; j < k; j++)
            sum += (double)expf(l[j] - mx);
    }
    *loss = log(sum) - (double)shifted_label;
    return arg == label;
}

static void xent_task(void *arg, int tid, int ntasks)
{
    const xent_ctx *x = arg;
    int64_t b, e;
    cpu_split(x->nblocks, tid, ntasks, &b, &e);
    for (int64_t blk = b; blk < e; blk++) {
        int64_t lo = blk * x->block;
        int64_t hi = lo + x->block < x->n ? lo + x->block : x->n;
        double loss = 0.0;
        int64_t count = 0, correct = 0;
        for (int64_t i = lo; i < hi; i++) {
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
    cpu_pool_run(c->pool, ntasks, xent_task, &x);
    for (int64_t blk = 0; blk < x.nblocks; blk++) {
        out->loss_sum += x.loss[blk];
        out->count += x.count[blk];
        out->correct += x.correct[blk];
    }
}
