/* A compute plugin for tests: the cpu plugin's kernels, with a memory of its own (ABI 1.10
 * mem_alloc) that is not the C heap, as the cuda plugin's managed memory is not. The core
 * then takes the engines' buffers from it, and any buffer that some code still gives to
 * free() (instead of bv_free_aligned), or reallocs, stops the run: glibc (or ASan) refuses
 * a pointer malloc did not make. tests/integration/device_memory.sh trains with it, so the
 * cuda plugin's way of holding memory is checked on machines without a GPU. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bivouac/compute.h"
#include "bivouac/plugin.h"

const bv_plugin *bv_compute_cpu_plugin(void);

/* Each block is mapped on its own; its first page holds its length. */
#define HEAD 4096

/* BIVOUAC_MEMCHECK_LIMIT_MB: the plugin's memory holds that much at most, as a GPU's
 * does; past it mem_alloc returns NULL and the core uses host memory. */
static _Atomic size_t given;

static void *memcheck_alloc(size_t bytes)
{
    size_t total = HEAD + bytes;
    const char *limit = getenv("BIVOUAC_MEMCHECK_LIMIT_MB");
    if (limit && *limit && atomic_load(&given) + total > (size_t)(atof(limit) * 1e6))
        return NULL;
    char *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    atomic_fetch_add(&given, total);
    *(size_t *)p = total; /* mmap's pages are zero already */
    return p + HEAD;
}

static void memcheck_free(void *q)
{
    char *p = (char *)q - HEAD;
    atomic_fetch_sub(&given, *(size_t *)p);
    munmap(p, *(size_t *)p);
}

/* ABI 1.17's zero and copy_rows, so that the engines' and models' paths for a back end
 * with memory of its own (a device's) run here too */
static void memcheck_zero(bv_compute *c, int64_t n, float *x)
{
    (void)c;
    memset(x, 0, (size_t)n * sizeof(float));
}

static void memcheck_copy_rows(bv_compute *c, int64_t rows, int64_t cols, const float *x,
                               int64_t ldx, float *y, int64_t ldy, bool add)
{
    static const bv_compute_ops host; /* no copy_rows: bv_copy_rows's host loop */
    bv_copy_rows(&host, c, rows, cols, x, ldx, y, ldy, add);
}

static bv_compute_ops memcheck_ops;

static bv_plugin memcheck_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_COMPUTE, "memcheck", "0.1.0",
                     "tests: the cpu kernels, buffers in mapped memory that free() refuses"),
    .ops = &memcheck_ops,
    .ops_size = sizeof memcheck_ops,
};

BV_PLUGIN_EXPORT const bv_plugin *bv_compute_memcheck_plugin(void);

const bv_plugin *bv_compute_memcheck_plugin(void)
{
    const bv_plugin *cpu = bv_compute_cpu_plugin();
    memcpy(&memcheck_ops, cpu->ops, sizeof memcheck_ops);
    memcheck_ops.mem_alloc = memcheck_alloc;
    memcheck_ops.mem_free = memcheck_free;
    memcheck_ops.zero = memcheck_zero;
    memcheck_ops.copy_rows = memcheck_copy_rows;
    memcheck_plugin.options = cpu->options;
    return &memcheck_plugin;
}
