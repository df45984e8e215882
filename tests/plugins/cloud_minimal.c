/* cloud_minimal.so: the smallest valid cloud: the required slots, no price_per_hour (the
 * core's default says 0). It launches nothing real; it only has to load and list. */
#include <stdlib.h>

#include "bivouac/cloud.h"
#include "bivouac/plugin.h"

struct bv_cloud {
    int64_t next_node;
};

static bv_cloud *minimal_create(const bv_opts *opts, const bv_run_info *info, bv_error *err)
{
    (void)opts, (void)info, (void)err;
    return calloc(1, sizeof(bv_cloud));
}

static void minimal_destroy(bv_cloud *c)
{
    free(c);
}

static int64_t minimal_launch(bv_cloud *c, const bv_node_request *req, char *address,
                              size_t address_len, bv_error *err)
{
    (void)req, (void)err;
    if (address_len)
        address[0] = '\0'; /* the node reports its address itself */
    return c->next_node++;
}

static bv_status minimal_terminate(bv_cloud *c, int64_t node, bv_error *err)
{
    (void)c, (void)node, (void)err;
    return BV_OK;
}

static int minimal_poll(bv_cloud *c, bv_cloud_event *events, int max, bv_error *err)
{
    (void)c, (void)events, (void)max, (void)err;
    return 0;
}

static const bv_cloud_ops minimal_ops = {
    .create = minimal_create,
    .destroy = minimal_destroy,
    .launch = minimal_launch,
    .terminate = minimal_terminate,
    .poll = minimal_poll,
};

static const bv_option minimal_options[] = {
    BV_OPT_INT_RANGE("nodes", "1", 1, 64, "most nodes at once"),
    BV_OPT_END,
};

static const bv_plugin minimal_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_CLOUD, "minimal", "0.0.1", "test: the smallest valid cloud"),
    .options = minimal_options,
    .ops = &minimal_ops,
    .ops_size = sizeof minimal_ops,
};

BV_PLUGIN_ENTRY(cloud, minimal, minimal_plugin)
