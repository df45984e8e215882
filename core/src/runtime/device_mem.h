/* Where bv_alloc_aligned takes its memory from: plain host memory, or memory a compute
 * backend's kernels can use where it lies (compute.h, ABI 1.10 mem_alloc: CUDA's managed
 * memory), so that the buffers the engines allocate (weights, activations, the graph)
 * stay on the device between kernels instead of being copied in and out by every call. */
#ifndef BIVOUAC_DEVICE_MEM_H
#define BIVOUAC_DEVICE_MEM_H

#include <stdbool.h>
#include <stddef.h>

/* From now on, bv_alloc_aligned asks `alloc` first (zeroed memory, or NULL: then host
 * memory as before), and bv_free_aligned gives what alloc returned back to `release`.
 * Process-wide and permanent: the experiment installs it when its compute plugin has
 * mem_alloc, before any data is loaded. A second install with other functions is refused
 * (returns -1): one backend's memory per process. */
int bv_mem_install(void *(*alloc)(size_t bytes), void (*release)(void *p));

/* Whether the backend's memory has refused a large block (it is full): the buffers since
 * are host memory, which its kernels stage per call. */
bool bv_mem_fell_back(void);

#endif
