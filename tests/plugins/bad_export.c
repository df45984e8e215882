/* model_badexport.so: an ABI 1.5 model whose export takes a pointer ('p'), which no
 * policy may be handed: the registry refuses the plugin at load. */
#include <stdint.h>

#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static int64_t peek(int64_t offset, void *where)
{
    return offset + (where != 0);
}

static const bv_export exports[] = {
    {"peek", "i:ip", (void (*)(void))peek, "test: reads memory"},
    {NULL, NULL, NULL, NULL},
};

static const bv_plugin badexport_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "badexport", "0.0.1", "test: an export with a pointer"),
    .engine = "graph",
    .ops = &ops,
    .ops_size = sizeof ops,
    .exports = exports,
};

BV_PLUGIN_ENTRY(model, badexport, badexport_plugin)
