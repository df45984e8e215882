/* Opening a module of bivouac's own: a shared library installed beside libbivouac, which
 * a run opens only when it needs what the module links (cairo for plots, libcurl for
 * etcd), so that a process without that need does not load it. */
#ifndef BIVOUAC_MODULE_OPEN_H
#define BIVOUAC_MODULE_OPEN_H

#include <stddef.h>

/* dlopen()s the file that the environment variable env names where it is set (tests),
 * else soname in libbivouac's own folder (the build tree and an install both put it
 * there), else soname on the loader's path. NULL: dlerror() says why. */
void *bv_module_open(const char *env, const char *soname);

/* How every module's table begins (bv_plot_module, bv_member_module). */
typedef struct bv_module_header {
    unsigned version;
    size_t struct_size;
} bv_module_header;

/* The module's table: bv_module_open(env, soname), then `symbol` in it, whose header must
 * say `version` and at least `size` bytes. NULL and why[] (naming the module as `what`)
 * where it cannot be had. The module is never closed. */
const void *bv_module_load(const char *env, const char *soname, const char *symbol,
                           const char *what, unsigned version, size_t size, char *why,
                           size_t why_len);

#endif
