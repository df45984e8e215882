/* Dense tensors and CSR matrices: allocation, freeing, transpose (tensor.h). */
#include "bivouac/tensor.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bivouac/log.h"
#include "device_mem.h"
#include "grow.h"

/* Buffers of 4 MiB and more are aligned to 2 MiB and asked to be backed by transparent
 * huge pages (on kernels where THP is "madvise", the common default, nothing is otherwise):
 * SpMM and the gathers read rows of a large feature matrix at random, and with 4 KiB pages
 * nearly every row missed the TLB. Zeroing after the advice faults the huge pages in. */
#define BV_HUGE_MIN (4u << 20)
#define BV_HUGE_ALIGN (2u << 20)

/* The installed backend allocator and the buffers it gave out (sorted by address, so that
 * bv_free_aligned can tell them from host memory: a few hundred buffers per run). */
static struct {
    void *(*alloc)(size_t);
    void (*release)(void *);
    pthread_mutex_t lock;
    void **ptrs;
    size_t count, cap;
} dev = {.lock = PTHREAD_MUTEX_INITIALIZER};

int bv_mem_install(void *(*alloc)(size_t bytes), void (*release)(void *p))
{
    pthread_mutex_lock(&dev.lock);
    int rc = 0;
    if (dev.alloc && (dev.alloc != alloc || dev.release != release))
        rc = -1;
    else {
        dev.alloc = alloc;
        dev.release = release;
    }
    pthread_mutex_unlock(&dev.lock);
    return rc;
}

/* Index of the first entry >= p. Called with the lock held. */
static size_t dev_find(const void *p)
{
    size_t lo = 0, hi = dev.count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((const char *)dev.ptrs[mid] < (const char *)p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void *dev_alloc(size_t bytes)
{
    pthread_mutex_lock(&dev.lock);
    void *p = NULL;
    if (bv_grow((void **)&dev.ptrs, &dev.cap, dev.count, sizeof *dev.ptrs, 256) &&
        (p = dev.alloc(bytes))) {
        size_t i = dev_find(p);
        memmove(dev.ptrs + i + 1, dev.ptrs + i, (dev.count - i) * sizeof *dev.ptrs);
        dev.ptrs[i] = p;
        dev.count++;
    }
    pthread_mutex_unlock(&dev.lock);
    return p;
}

/* true if p came from the backend (and was given back to it) */
static int dev_free(void *p)
{
    pthread_mutex_lock(&dev.lock);
    size_t i = dev_find(p);
    int mine = i < dev.count && dev.ptrs[i] == p;
    if (mine) {
        memmove(dev.ptrs + i, dev.ptrs + i + 1, (dev.count - i - 1) * sizeof *dev.ptrs);
        dev.count--;
        dev.release(p);
    }
    pthread_mutex_unlock(&dev.lock);
    return mine;
}

/* A block of at least this many bytes that the backend could not give means its memory
 * is full (smaller ones it may keep in host memory by design: cuda's under 4 KiB). */
#define BV_DEV_FULL_MIN (1u << 20)
static atomic_bool dev_full;

bool bv_mem_fell_back(void)
{
    return atomic_load(&dev_full);
}

void *bv_alloc_aligned(size_t bytes)
{
    if (dev.alloc) { /* set once, before the threads that allocate exist */
        void *p = dev_alloc(bytes ? bytes : 1);
        if (p)
            return p;
        if (bytes >= BV_DEV_FULL_MIN && !atomic_exchange(&dev_full, true))
            bv_log(BV_LOG_INFO, "the compute back end's memory cannot hold a block of %.1f MB: "
                   "host memory from here on, which its kernels copy in and out per call",
                   (double)bytes / 1e6);
    }
    size_t align = bytes >= BV_HUGE_MIN ? BV_HUGE_ALIGN : 64;
    size_t rounded = (bytes + align - 1) & ~(size_t)(align - 1);
    if (!rounded)
        rounded = align;
    void *p = aligned_alloc(align, rounded);
    if (!p)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (align == BV_HUGE_ALIGN)
        (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only: failure changes nothing */
#endif
    memset(p, 0, rounded);
    return p;
}

void bv_free_aligned(void *p)
{
    if (p && dev.alloc && dev_free(p))
        return;
    free(p);
}

bv_tensor *bv_tensor_new(int ndim, const int64_t *shape)
{
    if (ndim < 1 || ndim > BV_TENSOR_MAX_DIMS)
        return NULL;
    bv_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        n *= shape[i];
    }
    t->data = bv_alloc_aligned((size_t)n * sizeof(float));
    if (!t->data) {
        free(t);
        return NULL;
    }
    return t;
}

bv_tensor *bv_tensor_new2(int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return bv_tensor_new(2, shape);
}

void bv_tensor_free(bv_tensor *t)
{
    if (!t)
        return;
    if (!t->view)
        bv_free_aligned(t->data);
    free(t);
}

int64_t bv_tensor_numel(const bv_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int64_t bv_tensor_rows(const bv_tensor *t)
{
    return t->shape[0];
}

int64_t bv_tensor_cols(const bv_tensor *t)
{
    int64_t n = 1;
    for (int i = 1; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

bv_csr *bv_csr_new(int64_t nrows, int64_t ncols, int64_t nnz)
{
    bv_csr *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->nrows = nrows;
    m->ncols = ncols;
    m->nnz = nnz;
    m->owned = 1;
    m->rowptr = bv_alloc_aligned(((size_t)nrows + 1) * sizeof *m->rowptr);
    m->colidx = bv_alloc_aligned((size_t)(nnz ? nnz : 1) * sizeof *m->colidx);
    m->values = bv_alloc_aligned((size_t)(nnz ? nnz : 1) * sizeof *m->values);
    if (!m->rowptr || !m->colidx || !m->values) {
        bv_csr_free(m);
        return NULL;
    }
    return m;
}

void bv_csr_set_dense(bv_csr *a, const float *x)
{
    int64_t k = 0, cols = a->ncols;
    for (int64_t i = 0; i < a->nrows; i++) {
        a->rowptr[i] = k;
        for (int64_t j = 0; j < cols; j++)
            if (x[i * cols + j] != 0.0f) {
                a->colidx[k] = (int32_t)j;
                a->values[k++] = x[i * cols + j];
            }
    }
    a->rowptr[a->nrows] = k;
}

void bv_csr_free(bv_csr *m)
{
    if (!m)
        return;
    if (m->owned) {
        bv_free_aligned(m->rowptr);
        bv_free_aligned(m->colidx);
        bv_free_aligned(m->values);
    }
    free(m);
}

bv_csr *bv_csr_transpose(const bv_csr *m)
{
    return bv_csr_transpose_perm(m, NULL);
}

bv_csr *bv_csr_transpose_perm(const bv_csr *m, int64_t **perm)
{
    bv_csr *t = bv_csr_new(m->ncols, m->nrows, m->nnz);
    if (!t)
        return NULL;
    int64_t *p = NULL;
    if (perm && !(p = bv_alloc_aligned((size_t)(m->nnz ? m->nnz : 1) * sizeof *p))) {
        bv_csr_free(t);
        return NULL;
    }
    for (int64_t e = 0; e < m->nnz; e++)
        t->rowptr[m->colidx[e] + 1]++;
    for (int64_t r = 0; r < t->nrows; r++)
        t->rowptr[r + 1] += t->rowptr[r];
    int64_t *next = malloc((size_t)(t->nrows + 1) * sizeof *next);
    if (!next) {
        bv_free_aligned(p);
        bv_csr_free(t);
        return NULL;
    }
    memcpy(next, t->rowptr, (size_t)(t->nrows + 1) * sizeof *next);
    /* Rows of m in ascending order, so each transposed row gets ascending columns. */
    for (int64_t r = 0; r < m->nrows; r++) {
        for (int64_t e = m->rowptr[r]; e < m->rowptr[r + 1]; e++) {
            int64_t dst = next[m->colidx[e]]++;
            t->colidx[dst] = (int32_t)r;
            t->values[dst] = m->values ? m->values[e] : 1.0f;
            if (p)
                p[dst] = e;
        }
    }
    free(next);
    if (perm)
        *perm = p;
    return t;
}
