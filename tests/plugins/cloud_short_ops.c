/* cloud_short.so: says its cloud ops table is one pointer long (create only), short of
 * the slots every cloud must have. */
#include "bivouac/cloud.h"
#include "bivouac/plugin.h"

static const bv_cloud_ops ops;

static const bv_plugin short_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_CLOUD, "short", "0.0.1", "test: cloud ops table too short"),
    .ops = &ops,
    .ops_size = sizeof(void *),
};

BV_PLUGIN_ENTRY(cloud, short, short_plugin)
