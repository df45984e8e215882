/* model_noprobe.so: loads fine, but its probe says it cannot run on this machine. */
#include <stdio.h>

#include "bivouac/model.h"
#include "bivouac/plugin.h"

static const bv_model_ops ops;

static bool probe(char *why, size_t why_len)
{
    snprintf(why, why_len, "no test accelerator here");
    return false;
}

static const bv_plugin noprobe_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_MODEL, "noprobe", "0.0.1", "test: probe always fails"),
    .engine = "graph",
    .ops = &ops,
    .ops_size = sizeof ops,
    .probe = probe,
};

BV_PLUGIN_ENTRY(model, noprobe, noprobe_plugin)
