/* The plot module (libbivouac_plot.so, beside libbivouac), opened on first use: drawing
 * needs cairo, training does not, so a machine without it still trains and says once
 * why it drew nothing (docs/plots.md). BIVOUAC_PLOT_MODULE names another file (tests). */
#include <stdio.h>

#include "bivouac/log.h"
#include "cli.h"
#include "module_open.h"
#include "plot.h"

static const bv_plot_module *loaded;
static char why[1024];
static int tried;

const bv_plot_module *bv_cli_plot_module(const char **reason)
{
    if (!tried) {
        tried = 1;
        loaded = bv_module_load("BIVOUAC_PLOT_MODULE", "libbivouac_plot.so.0",
                                "bv_plot_module_v1", "plot module", BV_PLOT_MODULE_VERSION,
                                sizeof(bv_plot_module), why, sizeof why);
    }
    if (!loaded && reason)
        *reason = why;
    return loaded;
}
