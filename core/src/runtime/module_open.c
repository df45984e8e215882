/* Opening a module beside libbivouac (module_open.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module_open.h"

void *bv_module_open(const char *env, const char *soname)
{
    const char *file = env ? getenv(env) : NULL;
    if (file && *file)
        return dlopen(file, RTLD_NOW | RTLD_LOCAL);
    Dl_info info;
    if (dladdr((void *)bv_module_open, &info) && info.dli_fname) {
        char path[4200];
        snprintf(path, sizeof path, "%s", info.dli_fname);
        char *slash = strrchr(path, '/');
        if (slash) {
            snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "%s", soname);
            void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h)
                return h;
        }
    }
    return dlopen(soname, RTLD_NOW | RTLD_LOCAL);
}

const void *bv_module_load(const char *env, const char *soname, const char *symbol,
                           const char *what, unsigned version, size_t size, char *why,
                           size_t why_len)
{
    void *h = bv_module_open(env, soname);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, why_len, "%s", e ? e : "not found");
        return NULL;
    }
    const bv_module_header *m = dlsym(h, symbol);
    if (!m) {
        snprintf(why, why_len, "the %s has no %s", what, symbol);
        return NULL;
    }
    if (m->version != version || m->struct_size < size) {
        snprintf(why, why_len, "the %s is version %u, this bivouac needs %u", what,
                 m->version, version);
        return NULL;
    }
    return m; /* never closed: its functions are used until the process exits */
}
