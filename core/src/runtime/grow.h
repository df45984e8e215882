/* Growing an array by doubling: the one loop-free helper every growable list of the core
 * uses (diagnostics, plugin records, training records, pending gradients, schedules). */
#ifndef BIVOUAC_GROW_H
#define BIVOUAC_GROW_H

#include <stdbool.h>
#include <stdlib.h>

/* Makes room for one more element after `count` in *items (elements of elem bytes, *cap
 * of them allocated): doubles *cap (first: its first size) when count has reached it.
 * false, with *items and *cap unchanged, when memory runs out. */
static inline bool bv_grow(void **items, size_t *cap, size_t count, size_t elem, size_t first)
{
    if (count < *cap)
        return true;
    size_t next = *cap ? *cap * 2 : first;
    void *p = realloc(*items, next * elem);
    if (!p)
        return false;
    *items = p;
    *cap = next;
    return true;
}

#endif
