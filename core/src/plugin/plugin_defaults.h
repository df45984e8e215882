/* The core's defaults for NULL optional slots of an ops table ("optional slots may be
 * NULL and the core supplies the default", STYLE.md), applied by bv_ops_copy. */
#ifndef BIVOUAC_PLUGIN_DEFAULTS_H
#define BIVOUAC_PLUGIN_DEFAULTS_H

#include <stddef.h>

#include "bivouac/plugin.h"

/* Fills the NULL optional slots of ops (a table of this build's layout, ops_size bytes,
 * of the plugin p) that its kind has a default for. Model and compute tables are left
 * as they are: their optional slots have no generic default. */
void bv_ops_fill_defaults(void *ops, size_t ops_size, const bv_plugin *p);

#endif
