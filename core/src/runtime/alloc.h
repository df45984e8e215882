/* Allocation for the code that reads user input (the config loader, the validator, the
 * experiment): malloc and friends, plus a test hook and a count of failures, so that every
 * failed allocation can be shown to end in a reported error (docs/limits.md). */
#ifndef BIVOUAC_ALLOC_H
#define BIVOUAC_ALLOC_H

#include <stddef.h>

void *bv_malloc(size_t size);
void *bv_calloc(size_t n, size_t size);
void *bv_realloc(void *p, size_t size);
char *bv_strdup(const char *s);
char *bv_strndup(const char *s, size_t n);

/* How many allocations made through these functions have failed in this process. A
 * loader compares it before and after to tell "out of memory" from "invalid input". */
unsigned long bv_alloc_failures(void);

/* The test hook: once `after` allocations through these functions have succeeded, every
 * later one fails (-1: never). Its start value is BIVOUAC_FAULT_ALLOC_FAIL_AFTER, read at
 * the first allocation; unset, nothing fails but real shortage. Not for concurrent use:
 * the code that uses these runs on one thread. */
void bv_alloc_fail_after(long after);

#endif
