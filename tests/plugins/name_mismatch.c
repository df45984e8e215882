/* model_mismatch.so: the entry symbol matches the file name, but the descriptor calls
 * the plugin 'other'. */
#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static const bv_plugin mismatch_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "other", "0.0.1", "test: descriptor name is not the file's"),
    .engine = "graph",
    .ops = &ops,
    .ops_size = sizeof ops,
};

BV_PLUGIN_ENTRY(model, mismatch, mismatch_plugin)
