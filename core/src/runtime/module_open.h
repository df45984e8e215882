/* Opening a module of bivouac's own: a shared library installed beside libbivouac, which
 * a run opens only when it needs what the module links (cairo for plots, libcurl for
 * etcd), so that a process without that need does not load it. */
#ifndef BIVOUAC_MODULE_OPEN_H
#define BIVOUAC_MODULE_OPEN_H

/* dlopen()s the file that the environment variable env names where it is set (tests),
 * else soname in libbivouac's own folder (the build tree and an install both put it
 * there), else soname on the loader's path. NULL: dlerror() says why. */
void *bv_module_open(const char *env, const char *soname);

#endif
