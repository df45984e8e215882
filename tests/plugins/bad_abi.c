/* model_badabi.so: a descriptor from a future bivouac (plugin ABI 9.0). The core must
 * refuse it from the header alone. */
#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static const bv_plugin badabi_plugin = {
    .magic = BV_PLUGIN_MAGIC,
    .abi_major = 9,
    .abi_minor = 0,
    .struct_size = sizeof(bv_plugin),
    .kind = BV_KIND_MODEL,
    .name = "badabi",
    .version = "9.0.0",
    .description = "test: built for plugin ABI 9",
    .ops = &ops,
    .ops_size = sizeof ops,
};

BV_PLUGIN_ENTRY(model, badabi, badabi_plugin)
