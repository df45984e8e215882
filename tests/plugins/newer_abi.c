/* model_newabi.so: the same major ABI but a newer minor than this bivouac speaks. It may
 * rely on slots this core would not read, so the core must refuse it. */
#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static const bv_plugin newabi_plugin = {
    .magic = BV_PLUGIN_MAGIC,
    .abi_major = BV_ABI_MAJOR,
    .abi_minor = BV_ABI_MINOR + 1,
    .struct_size = sizeof(bv_plugin),
    .kind = BV_KIND_MODEL,
    .name = "newabi",
    .version = "0.0.1",
    .description = "test: built for a newer minor ABI",
    .option_size = sizeof(bv_option),
    .engine = "graph",
    .ops = &ops,
    .ops_size = sizeof ops,
};

BV_PLUGIN_ENTRY(model, newabi, newabi_plugin)
