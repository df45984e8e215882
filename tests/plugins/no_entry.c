/* model_noentry.so: a valid descriptor behind a misspelt entry symbol
 * (bv_model_noentri_plugin), so the core finds no bv_model_noentry_plugin. */
#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static const bv_plugin noentry_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "noentry", "0.0.1", "test: misspelt entry symbol"),
    .engine = "graph",
    .ops = &ops,
    .ops_size = sizeof ops,
};

BV_PLUGIN_ENTRY(model, noentri, noentry_plugin)
