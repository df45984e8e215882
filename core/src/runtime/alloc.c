/* Allocation with a failure count and a fault-injection hook for tests (alloc.h). */
#include "alloc.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static atomic_bool hook_read;         /* BIVOUAC_FAULT_ALLOC_FAIL_AFTER looked at */
static atomic_long fail_after = -1;   /* successes left before every allocation fails */
static atomic_ulong failures;

void bv_alloc_fail_after(long after)
{
    atomic_store(&fail_after, after);
    atomic_store(&hook_read, true);
}

unsigned long bv_alloc_failures(void)
{
    return atomic_load(&failures);
}

/* Whether this allocation is to fail on purpose. */
static bool injected_failure(void)
{
    if (!atomic_load(&hook_read)) {
        const char *v = getenv("BIVOUAC_FAULT_ALLOC_FAIL_AFTER");
        char *end = NULL;
        long n = v && *v ? strtol(v, &end, 10) : -1;
        atomic_store(&fail_after, end && *end == '\0' && n >= 0 ? n : -1);
        atomic_store(&hook_read, true);
    }
    if (atomic_load(&fail_after) < 0)
        return false;
    return atomic_fetch_sub(&fail_after, 1) <= 0 ? (atomic_store(&fail_after, 0), true)
                                                 : false;
}

static void *counted(void *p)
{
    if (!p)
        atomic_fetch_add(&failures, 1);
    return p;
}

void *bv_malloc(size_t size)
{
    return counted(injected_failure() ? NULL : malloc(size));
}

void *bv_calloc(size_t n, size_t size)
{
    return counted(injected_failure() ? NULL : calloc(n, size));
}

void *bv_realloc(void *p, size_t size)
{
    return counted(injected_failure() ? NULL : realloc(p, size));
}

char *bv_strdup(const char *s)
{
    return counted(injected_failure() ? NULL : strdup(s));
}

char *bv_strndup(const char *s, size_t n)
{
    return counted(injected_failure() ? NULL : strndup(s, n));
}
