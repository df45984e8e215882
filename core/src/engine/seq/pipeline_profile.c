/* The profiling pass behind `partition: balanced` (pipeline_seq.h): the whole model in
 * this process on one microbatch, each layer timed on its own (PipeDream's profiler,
 * Bamboo's layer costs), and the blocks cut into stages by those times. */
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "layer_engine.h"
#include "pipeline_plan.h"
#include "pipeline_seq.h"

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bv_status bv_seq_pipe_profile(const bv_seq_pipe_cfg *c, int reps, bv_seq_layer_cost *cost,
                              size_t layers, bv_error *err)
{
    const bv_experiment *x = c->x;
    int64_t rows = c->batch / (c->pipelines * c->microbatches);
    bv_seq_shape shape = {c->corpus->vocab_size, c->block, rows};
    bv_seq_model *model = c->mops->create(&x->model.opts, &shape, err);
    bv_compute *comp = model ? bv_seq_stage_compute(x, c->stages * c->pipelines, err) : NULL;
    bv_layer_engine *e = NULL;
    bv_layer_span span = {0, layers, 1};
    bv_status st = comp ? bv_layer_engine_create_span(c->mops, model, &x->compute_ops, comp,
                                                      rows, c->block, &span, &e, err)
                        : err->status ? err->status : BV_ERR_PLUGIN;
    int32_t *tokens = malloc((size_t)(rows * c->block) * sizeof *tokens);
    int32_t *targets = malloc((size_t)(rows * c->block) * sizeof *targets);
    double *t = malloc(3 * layers * (size_t)(reps + 1) * sizeof *t);
    if (st == BV_OK && (!tokens || !targets || !t))
        st = bv_error_set(err, BV_ERR_NOMEM, "out of memory for the profiling pass");
    if (st == BV_OK) {
        bv_layer_engine_init(e, c->seed);
        bv_text_corpus_batch(c->corpus, c->seed, BV_SEQ_STREAM_TRAIN(0), false, c->batch,
                             c->block, 0, rows, tokens, targets);
        bv_seq_ctx ctx = {.k = &x->compute_ops, .compute = comp, .batch = rows,
                          .seq = c->block, .tokens = tokens, .training = true,
                          .seed = c->seed};
        /* pass r's times at t[(kind * (reps + 1) + r) * layers + l]; pass 0 warms up */
        for (int r = 0; st == BV_OK && r <= reps; r++)
            st = bv_layer_engine_profile(e, &ctx, targets, t + r * layers,
                                         t + ((size_t)(reps + 1) + r) * layers,
                                         t + (2 * (size_t)(reps + 1) + r) * layers, err);
    }
    for (size_t l = 0; st == BV_OK && l < layers; l++) {
        double v[2][64];
        int n = reps < 64 ? reps : 64;
        for (int kind = 0; kind < 2; kind++) {
            for (int r = 0; r < n; r++)
                v[kind][r] = t[((size_t)kind * (reps + 1) + 1 + r) * layers + l];
            qsort(v[kind], (size_t)n, sizeof v[kind][0], by_value);
        }
        double bytes = t[2 * (size_t)(reps + 1) * layers + l];
        cost[l] = (bv_seq_layer_cost){v[0][n / 2], v[1][n / 2], bytes};
    }
    free(t);
    free(tokens);
    free(targets);
    bv_layer_engine_free(e);
    if (comp)
        x->compute_ops.destroy(comp);
    if (model)
        c->mops->destroy(model);
    return st;
}

bv_status bv_seq_pipe_balance(bv_seq_pipe_cfg *c, bv_seq_layer_cost *stage_cost,
                              bv_error *err)
{
    size_t layers = c->span_end[c->stages - 1];
    int blocks = (int)layers - 2; /* embed, the blocks, head */
    bv_seq_layer_cost *cost = calloc(layers, sizeof *cost);
    double *block = calloc(layers, sizeof *block);
    int first[BV_PIPELINE_MAX_STAGES + 1];
    bv_status st = cost && block ? BV_OK : bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    if (st == BV_OK)
        st = bv_seq_pipe_profile(c, 5, cost, layers, err);
    for (int b = 0; st == BV_OK && b < blocks; b++) /* the embeddings go with the first */
        block[b] = cost[1 + b].forward + cost[1 + b].backward +
                   (b == 0 ? cost[0].forward + cost[0].backward : 0) +
                   (b == blocks - 1 ? cost[layers - 1].forward + cost[layers - 1].backward : 0);
    if (st == BV_OK)
        st = bv_pipeline_balance(block, blocks, c->stages, first, err);
    for (int s = 0; st == BV_OK && s < c->stages; s++) {
        c->span_first[s] = s == 0 ? 0 : 1 + (size_t)first[s];
        c->span_end[s] = s == c->stages - 1 ? layers : 1 + (size_t)first[s + 1];
        bv_seq_layer_cost sc = {0};
        for (size_t l = c->span_first[s]; l < c->span_end[s]; l++) {
            sc.forward += cost[l].forward;
            sc.backward += cost[l].backward;
            sc.bytes += cost[l].bytes;
        }
        if (stage_cost) { /* the caller shows them */
            stage_cost[s] = sc;
            continue;
        }
        bv_log(BV_LOG_INFO, "balanced: stage %d runs layers [%zu, %zu): forward %.2f ms, "
               "backward %.2f ms, %.1f MB a microbatch", s, c->span_first[s], c->span_end[s],
               1e3 * sc.forward, 1e3 * sc.backward, sc.bytes / 1e6);
    }
    free(cost);
    free(block);
    return st;
}
