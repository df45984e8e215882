/* The plot module (libbivouac_plot.so, beside libbivouac), opened on first use: drawing
 * needs cairo, training does not, so a machine without it still trains and says once
 * why it drew nothing (docs/plots.md). BIVOUAC_PLOT_MODULE names another file (tests). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bivouac/log.h"
#include "cli.h"
#include "plot.h"
#include "registry.h"

static const bv_plot_module *loaded;
static char why[1024];
static int tried;

static void *open_module(void)
{
    const char *env = getenv("BIVOUAC_PLOT_MODULE");
    if (env && *env)
        return dlopen(env, RTLD_NOW | RTLD_LOCAL);
    /* beside libbivouac, which the build tree and an install both arrange */
    Dl_info info;
    if (dladdr((void *)bv_registry_new, &info) && info.dli_fname) {
        char path[4200];
        snprintf(path, sizeof path, "%s", info.dli_fname);
        char *slash = strrchr(path, '/');
        if (slash) {
            snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path),
                     "libbivouac_plot.so.0");
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h)
                return h;
        }
    }
    return dlopen("libbivouac_plot.so.0", RTLD_NOW | RTLD_LOCAL);
}

const bv_plot_module *bv_cli_plot_module(const char **reason)
{
    if (!tried) {
        tried = 1;
        void *h = open_module();
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
