/* The membership module (libbivouac_member.so, beside libbivouac; member.h), opened on
 * the first run that asks for etcd: libcurl is its alone. */
#include <pthread.h>

#include "member.h"
#include "module_open.h"

static const bv_member_module *loaded;
static char why[1024];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    loaded = bv_module_load("BIVOUAC_MEMBER_MODULE", "libbivouac_member.so.0",
                            "bv_member_module_v1", "membership module",
                            BV_MEMBER_MODULE_VERSION, sizeof(bv_member_module), why,
                            sizeof why);
}

const bv_member_module *bv_member_module_get(const char **reason)
{
    pthread_once(&once, load);
    if (!loaded && reason)
        *reason = why;
    return loaded;
}
