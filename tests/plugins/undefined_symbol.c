/* model_undefined.so: needs a function nothing defines, so dlopen(RTLD_NOW) fails and
 * the core must pass on dlerror()'s "undefined symbol" text. */
#include "bivouac/model.h"
#include "bivouac/plugin.h"

extern int bv_test_symbol_nobody_defines(void);

static bv_model *create(const bv_opts *opts, const bv_graph_shape *shape, bv_error *err)
{
    return bv_test_symbol_nobody_defines() ? NULL : NULL;
}

static const bv_model_ops ops = {.create = create};

static const bv_plugin undefined_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "undefined", "0.0.1", "test: undefined symbol"),
    .engine = "graph",
    .ops = &ops,
    .ops_size = sizeof ops,
};

BV_PLUGIN_ENTRY(model, undefined, undefined_plugin)
