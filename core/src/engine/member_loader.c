/* The membership module (libbivouac_member.so, beside libbivouac; member.h), opened on
 * the first run that asks for etcd: libcurl is its alone. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "member.h"
#include "module_open.h"

static const bv_member_module *loaded;
static char why[1024];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    void *h = bv_module_open("BIVOUAC_MEMBER_MODULE", "libbivouac_member.so.0");
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "%s", e ? e : "libbivouac_member.so.0 not found");
        return;
    }
    const bv_member_module *m = dlsym(h, "bv_member_module_v1");
    if (!m)
        snprintf(why, sizeof why, "the membership module has no bv_member_module_v1");
    else if (m->version != BV_MEMBER_MODULE_VERSION ||
             m->struct_size < sizeof(bv_member_module))
        snprintf(why, sizeof why, "the membership module is version %u, this bivouac needs "
                 "%d", m->version, BV_MEMBER_MODULE_VERSION);
    else
        loaded = m;
    /* never closed: its threads run until the run leaves */
}

const bv_member_module *bv_member_module_get(const char **reason)
{
    pthread_once(&once, load);
    if (!loaded && reason)
        *reason = why;
    return loaded;
}
