/* cloud_nullops.so: a cloud descriptor with no ops table at all. The loader must say so,
 * not read through the NULL pointer. */
#include "bivouac/cloud.h"
#include "bivouac/plugin.h"

static const bv_plugin nullops_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_CLOUD, "nullops", "0.0.1", "test: ops is NULL"),
    .ops = NULL,
    .ops_size = sizeof(bv_cloud_ops),
};

BV_PLUGIN_ENTRY(cloud, nullops, nullops_plugin)
