/* Element-size normalisation of what plugins hand the core (plugin_arrays.h). */
#include "plugin_arrays.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void bv_struct_copy(void *out, size_t out_size, const void *src, size_t declared,
                    size_t size_1_3)
{
    size_t n = declared ? declared : size_1_3;
    if (n > out_size)
        n = out_size;
    memcpy(out, src, n);
    memset((char *)out + n, 0, out_size - n);
}

bv_option *bv_options_normalise(const bv_option *src, size_t option_size)
{
    if (!src)
        return NULL;
    size_t stride = option_size ? option_size : BV_OPTION_SIZE_1_3;
    const char *base = (const char *)src;
    size_t count = 0; /* `name` leads every layout, so the terminator is found by stride */
    while (((const bv_option *)(const void *)(base + count * stride))->name)
        count++;
    bv_option *out = calloc(count + 1, sizeof *out); /* the last stays BV_OPT_END */
    if (!out)
        return NULL;
    for (size_t i = 0; i < count; i++)
        bv_struct_copy(&out[i], sizeof out[i], base + i * stride, stride, BV_OPTION_SIZE_1_3);
    return out;
}

void bv_stage_copy(const bv_model_ops *ops, const bv_stage *src, bv_stage *out)
{
    bv_struct_copy(out, sizeof *out, src, ops->stage_size, BV_STAGE_SIZE_1_3);
}

bv_status bv_seq_layer_copy(const bv_seq_model_ops *ops, const bv_seq_layer *src,
                            bv_seq_layer *out, bv_error *err)
{
    bv_struct_copy(out, sizeof *out, src, ops->layer_size, BV_SEQ_LAYER_SIZE_1_3);
    const char *params = (const char *)out->params; /* the plugin's array */
    out->params = NULL;
    if (out->nparams == 0)
        return BV_OK;
    bv_seq_param *copy = calloc(out->nparams, sizeof *copy);
    if (!copy) {
        out->nparams = 0;
        return bv_error_set(err, BV_ERR_NOMEM, "out of memory copying layer %s's params",
                            out->name ? out->name : "?");
    }
    size_t stride = ops->param_size ? ops->param_size : BV_SEQ_PARAM_SIZE_1_3;
    for (size_t i = 0; i < out->nparams; i++)
        bv_struct_copy(&copy[i], sizeof copy[i], params + i * stride, stride,
                       BV_SEQ_PARAM_SIZE_1_3);
    out->params = copy;
    return BV_OK;
}

void bv_seq_layer_copy_free(bv_seq_layer *l)
{
    free((void *)(uintptr_t)l->params); /* ours: bv_seq_layer_copy allocated it */
    l->params = NULL;
    l->nparams = 0;
}
