/* model_noengine.so: an ABI 1.4 model that does not say which engine drives it. */
#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static const bv_plugin noengine_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "noengine", "0.0.1", "test: no .engine"),
    .ops = &ops,
    .ops_size = sizeof ops,
};

BV_PLUGIN_ENTRY(model, noengine, noengine_plugin)
