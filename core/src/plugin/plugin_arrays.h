/* Element-size normalisation: structs and arrays a plugin hands the core (options, stages,
 * sequence layers and their params) read into this build's layout, whatever the size the
 * plugin was compiled with (docs/plugins.md, "ABI rules"). */
#ifndef BIVOUAC_PLUGIN_ARRAYS_H
#define BIVOUAC_PLUGIN_ARRAYS_H

#include <stddef.h>

#include "bivouac/error.h"
#include "bivouac/model.h"
#include "bivouac/options.h"
#include "bivouac/seqmodel.h"

/* sizeof each struct as of ABI 1.3, what a declared size of 0 means. Computed from the
 * last 1.3 field rounded up to the struct's alignment, so these stay right when fields
 * are appended. */
#define BV_SIZE_THROUGH(type, field)                                                       \
    ((offsetof(type, field) + sizeof(((type *)0)->field) + _Alignof(type) - 1) /           \
     _Alignof(type) * _Alignof(type))
#define BV_OPTION_SIZE_1_3 BV_SIZE_THROUGH(bv_option, doc)
#define BV_STAGE_SIZE_1_3 BV_SIZE_THROUGH(bv_stage, weights_stage)
#define BV_SEQ_LAYER_SIZE_1_3 BV_SIZE_THROUGH(bv_seq_layer, params)
#define BV_SEQ_PARAM_SIZE_1_3 BV_SIZE_THROUGH(bv_seq_param, tied_param)

/* Copies an element of `declared` bytes (0: `size_1_3`) into out (out_size bytes): the
 * common prefix, then zeros for the fields the plugin predates. */
void bv_struct_copy(void *out, size_t out_size, const void *src, size_t declared,
                    size_t size_1_3);

/* A BV_OPT_END-terminated option array of element size option_size (0: the 1.3 size)
 * copied into this build's bv_option layout; NULL for NULL or on out of memory. The
 * strings are the plugin's (static), only the array is new: free() it. */
bv_option *bv_options_normalise(const bv_option *src, size_t option_size);

/* One stage from ops->stage() into this build's layout. ops must be the core's
 * size-normalised copy of the model's table (bv_ops_copy), not the plugin's own, so
 * stage_size reads 0 for a plugin older than ABI 1.4. */
void bv_stage_copy(const bv_model_ops *ops, const bv_stage *src, bv_stage *out);

/* One layer from ops->layer() into this build's layout, with out->params pointing to a
 * normalised copy of the params array that out owns (free with bv_seq_layer_copy_free).
 * ops: the core's copy of the table (bv_ops_copy), as for bv_stage_copy. BV_ERR_NOMEM
 * leaves out empty. */
bv_status bv_seq_layer_copy(const bv_seq_model_ops *ops, const bv_seq_layer *src,
                            bv_seq_layer *out, bv_error *err);
void bv_seq_layer_copy_free(bv_seq_layer *l);

#endif
