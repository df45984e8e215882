/* The plot module (libbivouac_plot.so, beside libbivouac), opened on first use: drawing
 * needs cairo, training does not, so a machine without it still trains and says once
 * why it drew nothing (docs/plots.md). BIVOUAC_PLOT_MODULE names another file (tests). */
#include <dlfcn.h>
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
        void *h = bv_module_open("BIVOUAC_PLOT_MODULE", "libbivouac_plot.so.0");
        if (!h) {
            const char *e = dlerror();
            snprintf(why, sizeof why, "%s", e ? e : "libbivouac_plot.so.0 not found");
        } else {
            const bv_plot_module *m = dlsym(h, "bv_plot_module_v1");
            if (!m)
                snprintf(why, sizeof why, "the plot module has no bv_plot_module_v1");
            else if (m->version != BV_PLOT_MODULE_VERSION ||
                     m->struct_size < sizeof(bv_plot_module))
                snprintf(why, sizeof why, "the plot module is version %u, this bivouac "
                         "needs %d", m->version, BV_PLOT_MODULE_VERSION);
            else
                loaded = m;
            /* never closed: its functions are used until the process exits */
        }
    }
    if (!loaded && reason)
        *reason = why;
    return loaded;
}
