/* Names of the plugin kinds, as they appear in file names and YAML. */
#include "bivouac/plugin.h"

const char *bv_plugin_kind_name(bv_plugin_kind kind)
{
    switch (kind) {
    case BV_KIND_MODEL: return "model";
    case BV_KIND_COMPUTE: return "compute";
    case BV_KIND_TRANSPORT: return "transport";
    case BV_KIND_RESILIENCE: return "resilience";
    case BV_KIND_CLOUD: return "cloud";
    }
    return "unknown";
}
