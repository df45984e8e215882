/* model_badengine.so: a model for an engine this bivouac does not have. */
#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static const bv_plugin badengine_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "badengine", "0.0.1", "test: declares engine 'tpu'"),
    .engine = "tpu",
    .ops = &ops,
    .ops_size = sizeof ops,
};

BV_PLUGIN_ENTRY(model, badengine, badengine_plugin)
