/* A pipeline's plan from an experiment (pipeline_plan.h). */
#include "pipeline_plan.h"

#include <stdlib.h>
#include <string.h>

bv_status bv_pipeline_partition(int layers, int stages, const char *spec, int *first,
                                bv_error *err)
{
    if (stages < 1 || stages > BV_PIPELINE_MAX_STAGES)
        return bv_error_set(err, BV_ERR_INVALID, "%d stages: 1 to %d", stages,
                            BV_PIPELINE_MAX_STAGES);
    if (stages > layers)
        return bv_error_set(err, BV_ERR_INVALID, "%d stages for %d layers: a stage would "
                            "have no layer", stages, layers);
    first[0] = 0;
    /* balanced: uniform until a profiling pass measured the layers (bv_pipeline_balance) */
    if (strcmp(spec, "uniform") == 0 || strcmp(spec, "balanced") == 0) {
        for (int s = 1; s <= stages; s++)
            first[s] = (int)((long long)layers * s / stages);
        return BV_OK;
    }
    const char *p = spec;
    for (int s = 0; s < stages; s++) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 1 || n > layers || (*end && *end != ','))
            return bv_error_set(err, BV_ERR_INVALID, "'%s' is neither uniform, balanced nor "
                                "%d layer counts of 1 or more, comma-separated", spec, stages);
        first[s + 1] = first[s] + (int)n;
        p = *end ? end + 1 : end;
        if (!*end && s + 1 < stages)
            return bv_error_set(err, BV_ERR_INVALID, "'%s' gives %d stages their layers, not "
                                "%d", spec, s + 1, stages);
    }
    if (*p)
        return bv_error_set(err, BV_ERR_INVALID, "'%s' gives more than %d stages their "
                            "layers", spec, stages);
    if (first[stages] != layers)
        return bv_error_set(err, BV_ERR_INVALID, "'%s' adds up to %d layers; the model has %d",
                            spec, first[stages], layers);
    return BV_OK;
}

bv_status bv_pipeline_balance(const double *cost, int layers, int stages, int *first,
                              bv_error *err)
{
    if (stages < 1 || stages > layers || stages > BV_PIPELINE_MAX_STAGES)
        return bv_error_set(err, BV_ERR_INVALID, "%d stages for %d layers", stages, layers);
    /* best[s][j]: the cheapest costliest stage when s stages take layers [0, j) */
    size_t w = (size_t)layers + 1;
    double *best = malloc((size_t)(stages + 1) * w * sizeof *best);
    double *prefix = malloc(w * sizeof *prefix);
    int *cut = malloc((size_t)(stages + 1) * w * sizeof *cut);
    if (!best || !prefix || !cut) {
        free(best);
        free(prefix);
        free(cut);
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory");
    }
    prefix[0] = 0;
    for (int j = 0; j < layers; j++)
        prefix[j + 1] = prefix[j] + cost[j];
    for (int j = 0; j <= layers; j++)
        best[w + (size_t)j] = prefix[j];
    for (int s = 2; s <= stages; s++)
        for (int j = s; j <= layers; j++) {
            double *b = &best[(size_t)s * w + (size_t)j];
            *b = -1;
            for (int i = s - 1; i < j; i++) { /* stage s takes [i, j), at least one layer */
                double before = best[(size_t)(s - 1) * w + (size_t)i];
                double mine = prefix[j] - prefix[i];
                double worst = before > mine ? before : mine;
                if (*b < 0 || worst < *b) {
                    *b = worst;
                    cut[(size_t)s * w + (size_t)j] = i;
                }
            }
        }
    first[stages] = layers;
    for (int s = stages; s > 1; s--)
        first[s - 1] = cut[(size_t)s * w + (size_t)first[s]];
    first[0] = 0;
    free(best);
    free(prefix);
    free(cut);
    return BV_OK;
}

/* Where `pipeline.KEY` is written, or the section, or nothing. */
static const bv_pos *pos_of(const bv_experiment *x, const char *key)
{
    const bv_node *p = bv_node_get(x->root, "pipeline");
    const bv_node *v = p ? bv_node_get(p, key) : NULL;
    return v ? &v->pos : p ? &p->pos : NULL;
}

bv_status bv_pipeline_plan_make(const bv_experiment *x, bv_pipeline_plan *plan, bv_diag *diag)
{
    memset(plan, 0, sizeof *plan);
    const bv_opt_value *layers = bv_opts_find(&x->model.opts, "layers");
    if (!layers) {
        bv_diag_add(diag, pos_of(x, "stages"), "model %s has no 'layers' to split into "
                    "stages", x->model.plugin->name);
        return BV_ERR_INVALID;
    }
    plan->layers = (int)layers->v.i;
    plan->stages = (int)bv_opts_int(&x->pipeline, "stages");
    plan->microbatches = (int)bv_opts_int(&x->pipeline, "microbatches");
    bv_schedule_kind_parse(bv_opts_str(&x->pipeline, "schedule"), &plan->kind);
    bv_error err = {0};
    if (bv_pipeline_partition(plan->layers, plan->stages, bv_opts_str(&x->pipeline, "partition"),
                              plan->first, &err) != BV_OK) {
        bool stages = strstr(err.msg, "stages for") != NULL;
        bv_diag_add(diag, pos_of(x, stages ? "stages" : "partition"), "'%s': %s",
                    stages ? "stages" : "partition", err.msg);
        return BV_ERR_INVALID;
    }
    return BV_OK;
}
