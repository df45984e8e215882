/* model_incomplete.so: says its ops table is one pointer long, far short of a model's. */
#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static const bv_plugin incomplete_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "incomplete", "0.0.1", "test: ops table too short"),
    .engine = "graph",
    .ops = &ops,
    .ops_size = sizeof(void *),
};

BV_PLUGIN_ENTRY(model, incomplete, incomplete_plugin)
