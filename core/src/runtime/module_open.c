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
