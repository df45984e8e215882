/* The cuda compute plugin: the ops table of compute.h on an NVIDIA GPU, with cuBLAS for
 * the matrix products and the plugin's own kernels for the rest (kernels_*.cu).
 *
 * Memory. The plugin gives the core managed memory (mem_alloc), which bv_alloc_aligned then
 * hands out for the weights, the activations and the graph: the kernels use it where it
 * lies, and it stays on the device between kernels until the host touches it. A buffer from
 * anywhere else (plain host memory: a message, a test's malloc) is staged: copied into the
 * instance's scratch memory before the kernel and back after it. Every staged byte is
 * counted (exports bytes_to_device, bytes_to_host) and the totals are logged when the
 * instance ends, so a run shows whether anything crosses the bus per call.
 *
 * Each op waits for its kernels before it returns (the caller may read the output on the
 * host next), and a CUDA error ends the process with the op's name and CUDA's words: the
 * ops return nothing, and a device in an error state runs nothing more. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "bivouac/compute.h"
#include "bivouac/log.h"
#include "bivouac/plugin.h"
#include "cuda_internal.h"

static const bv_option cuda_options[] = {
    BV_OPT_INT_RANGE("device", "0", 0, 63, "the CUDA device to run on"),
    BV_OPT_BOOLEAN("tf32", "false",
                   "let cuBLAS multiply float32 matrices with TF32 tensor cores (faster, about "
                   "1e-3 relative error instead of 1e-6)"),
    BV_OPT_BOOLEAN("ordered_sums", "false",
                   "sum SpMM, the attention gathers and the attention weights' gradients "
                   "in the cpu plugin's order (its bits for those ops; slower on rows of 128 "
                   "floats or fewer, which otherwise spread a row's edges over lanes)"),
    BV_OPT_END,
};

/* ---- the process's GPU ----------------------------------------------------------------- */

static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static int gpu_count;          /* devices CUDA sees; 0 when none or no driver */
static char gpu_why[160];      /* why not, for probe and create */
static size_t managed_budget;  /* managed bytes mem_alloc may still hand out */
static cudaStream_t alloc_stream; /* mem_alloc zeroes its blocks there */
static pthread_mutex_t managed_lock = PTHREAD_MUTEX_INITIALIZER;

static void gpu_init(void)
{
    cudaError_t e = cudaGetDeviceCount(&gpu_count);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
        snprintf(gpu_why, sizeof gpu_why, "no GPU (%s)",
                 e == cudaErrorNoDevice ? "CUDA sees no device"
                                        : "no NVIDIA driver, or one older than CUDA 13");
        gpu_count = 0;
        (void)cudaGetLastError();
        return;
    }
    if (e != cudaSuccess) {
        snprintf(gpu_why, sizeof gpu_why, "no GPU (%s)", cudaGetErrorString(e));
        gpu_count = 0;
        (void)cudaGetLastError();
        return;
    }
    if (gpu_count == 0) {
        snprintf(gpu_why, sizeof gpu_why, "no GPU (CUDA sees no device)");
        return;
    }
    /* Managed memory only where the host may touch it while kernels run (the engines'
     * threads do; elsewhere that access faults), and never beyond what device 0 has free,
     * less a reserve for cuBLAS and the scratch memory: asking for more can stall the whole
     * GPU (docs/cuda.md). Without it every buffer is staged, which is correct but slower. */
    int concurrent = 0;
    size_t free_b = 0, total_b = 0;
    if (cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0) !=
            cudaSuccess ||
        !concurrent) {
        (void)cudaGetLastError();
        bv_log(BV_LOG_INFO, "compute cuda: the host cannot use managed memory while kernels "
               "run here; every buffer is staged per call");
    } else if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b > ((size_t)2 << 30) &&
               cudaStreamCreateWithFlags(&alloc_stream, cudaStreamNonBlocking) == cudaSuccess) {
        managed_budget = free_b - ((size_t)2 << 30);
    }
    (void)cudaGetLastError();
}

static bool cuda_probe(char *why, size_t why_len)
{
    pthread_once(&gpu_once, gpu_init);
    if (gpu_count > 0)
        return true;
    snprintf(why, why_len, "%s", gpu_why);
    return false;
}

/* Each managed buffer starts MANAGED_HEAD bytes into its allocation, after its size (for
 * the budget at free); the head keeps the buffer 256-byte aligned. */
#define MANAGED_HEAD 256
/* Smaller buffers stay in host memory (staged when a kernel uses them: a bias, a LayerNorm
 * gain): managed memory is handed out in pages, and each allocation costs a driver call. */
#define MANAGED_MIN 4096

static void *cuda_mem_alloc(size_t bytes)
{
    pthread_once(&gpu_once, gpu_init);
    if (gpu_count == 0 || bytes < MANAGED_MIN || getenv("BIVOUAC_CUDA_NO_MANAGED"))
        return NULL;
    size_t total = bytes + MANAGED_HEAD;
    pthread_mutex_lock(&managed_lock);
    bool fits = total <= managed_budget;
    if (fits)
        managed_budget -= total;
    pthread_mutex_unlock(&managed_lock);
    if (!fits)
        return NULL; /* host memory then: staged per call, and counted */
    char *p = NULL;
    if (cudaMallocManaged((void **)&p, total, cudaMemAttachGlobal) != cudaSuccess) {
        (void)cudaGetLastError();
        pthread_mutex_lock(&managed_lock);
        managed_budget += total;
        pthread_mutex_unlock(&managed_lock);
        return NULL;
    }
    /* Zeroed by the GPU, so that the pages start there: most buffers are written by
     * kernels first (activations, gradients, a task's temporaries), and a host memset
     * would fault every page in on the host for the first kernel to move back. The wait
     * is this stream's alone, not the device's. Data the host fills next (the graph, the
     * features) moves to the host once and back at its first kernel. */
    if (cudaMemsetAsync(p, 0, total, alloc_stream) != cudaSuccess ||
        cudaStreamSynchronize(alloc_stream) != cudaSuccess) {
        (void)cudaGetLastError();
        memset(p, 0, total);
    }
    *(size_t *)p = total;
    return p + MANAGED_HEAD;
}

static void cuda_mem_free(void *p)
{
    char *base = (char *)p - MANAGED_HEAD;
    size_t total = *(size_t *)base;
    cudaFree(base);
    pthread_mutex_lock(&managed_lock);
    managed_budget += total;
    pthread_mutex_unlock(&managed_lock);
}

/* ---- the instance ------------------------------------------------------------------------ */

#define SCRATCH_CHUNKS 24
#define MAX_STAGED 8

/* bytes staged by every instance of the process, for the exports */
static _Atomic uint64_t staged_to_device, staged_to_host;

struct bv_compute {
    int device;
    bool ordered_sums; /* the option: SpMM, the gathers and their weights' gradient in the
                        * cpu plugin's order */
    cudaStream_t stream;
    cublasHandle_t blas;
    /* scratch for staged buffers: chunks of device memory, taken in order within one op
     * and all free again when it ends; kept between ops, so steady state allocates none */
    void *chunk[SCRATCH_CHUNKS];
    size_t chunk_size[SCRATCH_CHUNKS];
    int cur;
    size_t used;
    double *reduce; /* 3 * CU_REDUCE_BLOCKS partials, then 3 results */
    double *result_host; /* pinned, 3 doubles */
    uint64_t to_device, to_host, copies;
    /* BIVOUAC_CUDA_PROFILE set: each op's calls, seconds (from its start to the end of its
     * wait), GPU seconds (its stream's events around its copies to the device and kernels)
     * and staged bytes, and the time between ops, logged when the instance ends */
    bool profile;
    cudaEvent_t prof_ev[2];
    double prof_created, prof_last_end, prof_between;
    int prof_n;
    struct {
        const char *op;
        uint64_t calls, staged;
        double seconds, gpu_seconds;
    } prof[64];
};

/* One op in progress: its name for errors, the staged outputs to copy back at its end. */
typedef struct cu_call {
    bv_compute *c;
    const char *op;
    double t0;          /* the op's start, when profiling */
    uint64_t staged0;   /* bytes staged before it, when profiling */
    int npend;
    struct {
        void *host;
        void *dev;
        size_t bytes;
    } pend[MAX_STAGED];
} cu_call;

static void die(const cu_call *k, const char *what, const char *msg)
{
    fprintf(stderr, "bivouac: compute_cuda: %s: %s: %s\n", k->op, what, msg);
    abort();
}

static void check(const cu_call *k, cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        die(k, what, cudaGetErrorString(e));
}

static void check_blas(const cu_call *k, cublasStatus_t st)
{
    if (st != CUBLAS_STATUS_SUCCESS)
        die(k, "cuBLAS", cublasGetStatusString(st));
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static cu_call call_begin(bv_compute *c, const char *op)
{
    cu_call k = {.c = c, .op = op};
    if (c->profile) {
        k.t0 = now_seconds();
        k.staged0 = c->to_device + c->to_host;
        if (c->prof_last_end > 0)
            c->prof_between += k.t0 - c->prof_last_end;
    }
    if (c->device != 0)
        check(&k, cudaSetDevice(c->device), "cudaSetDevice");
    if (c->profile)
        check(&k, cudaEventRecord(c->prof_ev[0], c->stream), "profile event");
    c->cur = 0;
    c->used = 0;
    return k;
}

/* Device memory for `bytes` of staging, from the scratch chunks. */
static void *scratch(cu_call *k, size_t bytes)
{
    bv_compute *c = k->c;
    bytes = (bytes + 255) & ~(size_t)255;
    while (c->cur < SCRATCH_CHUNKS) {
        if (c->chunk[c->cur] && c->chunk_size[c->cur] - c->used >= bytes) {
            void *p = (char *)c->chunk[c->cur] + c->used;
            c->used += bytes;
            return p;
        }
        if (!c->chunk[c->cur]) {
            size_t size = bytes > ((size_t)64 << 20) ? bytes : ((size_t)64 << 20);
            cudaError_t e = cudaMalloc(&c->chunk[c->cur], size);
            if (e != cudaSuccess) {
                c->chunk[c->cur] = NULL;
                size_t free_b = 0, total_b = 0;
                (void)cudaGetLastError();
                cudaMemGetInfo(&free_b, &total_b);
                char msg[200];
                snprintf(msg, sizeof msg, "staging host buffers needs %zu more bytes of device "
                         "memory; the device has %zu of %zu free", size, free_b, total_b);
                die(k, "out of device memory", msg);
            }
            c->chunk_size[c->cur] = size;
            c->used = 0;
            continue;
        }
        c->cur++; /* this chunk is too full: the next one */
        c->used = 0;
    }
    die(k, "scratch", "too many staged buffers in one op");
    return NULL;
}

static bool on_device(const void *p)
{
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return attr.type == cudaMemoryTypeManaged || attr.type == cudaMemoryTypeDevice;
}

/* The device address of an input of `bytes` (NULL stays NULL). */
static const void *in(cu_call *k, const void *host, size_t bytes)
{
    if (!host || bytes == 0 || on_device(host))
        return host;
    void *d = scratch(k, bytes);
    check(k, cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, k->c->stream),
          "copy to the device");
    k->c->to_device += bytes;
    k->c->copies++;
    return d;
}

/* The device address of an output; `read`: the op also reads it (accumulates). */
static void *out(cu_call *k, void *host, size_t bytes, bool read)
{
    if (!host || bytes == 0 || on_device(host))
        return host;
    void *d = read ? (void *)in(k, host, bytes) : scratch(k, bytes);
    if (k->npend == MAX_STAGED)
        die(k, "staging", "too many staged outputs");
    k->pend[k->npend].host = host;
    k->pend[k->npend].dev = d;
    k->pend[k->npend].bytes = bytes;
    k->npend++;
    return d;
}

static void profile_op(const cu_call *k)
{
    bv_compute *c = k->c;
    double t = now_seconds();
    int i = 0;
    while (i < c->prof_n && c->prof[i].op != k->op)
        i++;
    if (i == c->prof_n) {
        if (c->prof_n == (int)(sizeof c->prof / sizeof c->prof[0]))
            return;
        c->prof[c->prof_n++].op = k->op;
    }
    float gpu_ms = 0;
    if (cudaEventElapsedTime(&gpu_ms, c->prof_ev[0], c->prof_ev[1]) == cudaSuccess)
        c->prof[i].gpu_seconds += gpu_ms / 1e3;
    (void)cudaGetLastError();
    c->prof[i].calls++;
    c->prof[i].seconds += t - k->t0;
    c->prof[i].staged += c->to_device + c->to_host - k->staged0;
    c->prof_last_end = t;
}

static void profile_log(bv_compute *c)
{
    double total = now_seconds() - c->prof_created, ops = 0;
    for (int i = 0; i < c->prof_n; i++)
        ops += c->prof[i].seconds;
    bv_log(BV_LOG_INFO, "compute cuda profile: %.3f s alive, %.3f s in ops, %.3f s between "
           "ops", total, ops, c->prof_between);
    for (int pass = 0; pass < c->prof_n; pass++) { /* largest first */
        int best = -1;
        for (int i = 0; i < c->prof_n; i++)
            if (c->prof[i].calls && (best < 0 || c->prof[i].seconds > c->prof[best].seconds))
                best = i;
        if (best < 0)
            break;
        bv_log(BV_LOG_INFO, "compute cuda profile: %-30s %8llu calls %9.4f s %8.1f us/call "
               "(GPU %8.1f us) %9.1f MB staged", c->prof[best].op,
               (unsigned long long)c->prof[best].calls, c->prof[best].seconds,
               1e6 * c->prof[best].seconds / (double)c->prof[best].calls,
               1e6 * c->prof[best].gpu_seconds / (double)c->prof[best].calls,
               (double)c->prof[best].staged / 1e6);
        c->prof[best].calls = 0;
    }
}

/* Ends an op: launch errors, staged outputs back, and the wait. */
static void call_end(cu_call *k)
{
    bv_compute *c = k->c;
    check(k, cudaGetLastError(), "kernel launch");
    if (c->profile)
        check(k, cudaEventRecord(c->prof_ev[1], c->stream), "profile event");
    for (int i = 0; i < k->npend; i++) {
        check(k, cudaMemcpyAsync(k->pend[i].host, k->pend[i].dev, k->pend[i].bytes,
                                 cudaMemcpyDeviceToHost, c->stream),
              "copy to the host");
        c->to_host += k->pend[i].bytes;
        c->copies++;
    }
    check(k, cudaStreamSynchronize(c->stream), "kernel");
    if (c->profile)
        profile_op(k);
}

#define FLOATS(n) ((size_t)(n) * sizeof(float))
/* Floats spanned by `rows` rows of `cols` at a stride of `ld`. */
static size_t span(int64_t rows, int64_t cols, int64_t ld)
{
    return rows <= 0 || cols <= 0 ? 0 : FLOATS((rows - 1) * ld + cols);
}

/* A CSR's arrays on the device (the whole of each: the graph is normally managed memory,
 * so this copies nothing). */
static cu_csr csr_in(cu_call *k, const bv_csr *a)
{
    cu_csr d = {.nrows = a->nrows, .ncols = a->ncols, .nnz = a->nnz};
    d.rowptr = in(k, a->rowptr, (size_t)(a->nrows + 1) * sizeof *a->rowptr);
    d.colidx = in(k, a->colidx, (size_t)a->nnz * sizeof *a->colidx);
    d.values = a->values ? in(k, a->values, FLOATS(a->nnz)) : NULL;
    return d;
}

static bv_compute *cuda_create(const bv_opts *opts, bv_error *err)
{
    char why[160];
    if (!cuda_probe(why, sizeof why)) {
        bv_error_set(err, BV_ERR_PLUGIN, "compute cuda: %s", why);
        return NULL;
    }
    int device = (int)bv_opts_int(opts, "device");
    if (device >= gpu_count) {
        bv_error_set(err, BV_ERR_INVALID, "compute cuda: device %d does not exist (CUDA sees "
                     "%d)", device, gpu_count);
        return NULL;
    }
    bv_compute *c = calloc(1, sizeof *c);
    if (!c) {
        bv_error_set(err, BV_ERR_NOMEM, "compute cuda: out of memory");
        return NULL;
    }
    c->device = device;
    c->ordered_sums = bv_opts_bool(opts, "ordered_sums");
    if ((c->profile = getenv("BIVOUAC_CUDA_PROFILE") != NULL))
        c->prof_created = now_seconds();
    const char *failed = NULL;
    if (cudaSetDevice(device) != cudaSuccess)
        failed = "cudaSetDevice";
    else if (cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess)
        failed = "cudaStreamCreate";
    else if (cudaMalloc((void **)&c->reduce, (3 * CU_REDUCE_BLOCKS + 3) * sizeof(double)) !=
             cudaSuccess)
        failed = "cudaMalloc";
    else if (cudaMallocHost((void **)&c->result_host, 3 * sizeof(double)) != cudaSuccess)
        failed = "cudaMallocHost";
    else if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS)
        failed = "cublasCreate";
    if (!failed && c->profile &&
        (cudaEventCreate(&c->prof_ev[0]) != cudaSuccess ||
         cudaEventCreate(&c->prof_ev[1]) != cudaSuccess))
        failed = "cudaEventCreate";
    if (!failed) {
        cublasSetStream(c->blas, c->stream);
        cublasSetMathMode(c->blas, bv_opts_bool(opts, "tf32") ? CUBLAS_TF32_TENSOR_OP_MATH
                                                              : CUBLAS_DEFAULT_MATH);
        return c;
    }
    bv_error_set(err, BV_ERR_PLUGIN, "compute cuda: %s failed on device %d: %s", failed,
                 device, cudaGetErrorString(cudaGetLastError()));
    for (int i = 0; i < 2; i++)
        if (c->prof_ev[i])
            cudaEventDestroy(c->prof_ev[i]);
    if (c->blas)
        cublasDestroy(c->blas);
    if (c->reduce)
        cudaFree(c->reduce);
    if (c->result_host)
        cudaFreeHost(c->result_host);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
    return NULL;
}

static void cuda_destroy(bv_compute *c)
{
    if (!c)
        return;
    cudaStreamSynchronize(c->stream);
    if (c->profile) {
        profile_log(c);
        cudaEventDestroy(c->prof_ev[0]);
        cudaEventDestroy(c->prof_ev[1]);
    }
    if (c->copies)
        bv_log(BV_LOG_INFO, "compute cuda: %llu host buffers staged: %.1f MB to the device, "
               "%.1f MB back", (unsigned long long)c->copies, (double)c->to_device / 1e6,
               (double)c->to_host / 1e6);
    atomic_fetch_add(&staged_to_device, c->to_device);
    atomic_fetch_add(&staged_to_host, c->to_host);
    for (int i = 0; i < SCRATCH_CHUNKS; i++)
        if (c->chunk[i])
            cudaFree(c->chunk[i]);
    cublasDestroy(c->blas);
    cudaFree(c->reduce);
    cudaFreeHost(c->result_host);
    cudaStreamDestroy(c->stream);
    free(c);
}

static int cuda_num_threads(const bv_compute *c)
{
    return 1; /* one stream: a caller splits no work for it */
}

/* ---- matrix products ---------------------------------------------------------------------- */

static int blas_int(const cu_call *k, int64_t v)
{
    if (v < 0 || v > 2147483647)
        die(k, "cuBLAS", "a matrix dimension is out of int range");
    return (int)v;
}

/* A small C over a long k (a weight's gradient over an interval's rows: 64 x 16 over
 * 62,500) gets few blocks from cuBLAS, each walking all of k: 290 us where the bytes take
 * 10 (H100, GCN on the 1M-vertex graph). Such a product is split along k into parts of
 * SPLIT_K_ROWS or more, multiplied as one batch into scratch memory, and the parts are
 * added in order (cu_sum_parts): the same bits every run. */
#define SPLIT_K_MAX_OUT (64 * 1024)
#define SPLIT_K_MIN_K 4096
#define SPLIT_K_ROWS 1024
#define SPLIT_K_MAX_PARTS 128

static void gemm_split_k(cu_call *kc, bool trans_a, bool trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float *da, int64_t lda, const float *db,
                         int64_t ldb, float beta, float *dc, int64_t ldc)
{
    int64_t parts = k / SPLIT_K_ROWS < SPLIT_K_MAX_PARTS ? k / SPLIT_K_ROWS : SPLIT_K_MAX_PARTS;
    int64_t chunk = (k + parts - 1) / parts, last = k - (parts - 1) * chunk;
    /* where part p starts along k in A (m x k, or k x m transposed) and B (k x n, or n x k) */
    int64_t step_a = trans_a ? chunk * lda : chunk, step_b = trans_b ? chunk : chunk * ldb;
    float *ws = scratch(kc, FLOATS(parts * m * n));
    const float one = 1.0f, zero = 0.0f;
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int bn = blas_int(kc, n), bm = blas_int(kc, m);
    int bldb = blas_int(kc, ldb > 0 ? ldb : 1), blda = blas_int(kc, lda > 0 ? lda : 1);
    if (parts > 1) /* parts - 1 of `chunk`, then the last of what is left */
        check_blas(kc, cublasSgemmStridedBatched(kc->c->blas, op_b, op_a, bn, bm,
                                                 blas_int(kc, chunk), &one, db, bldb, step_b,
                                                 da, blda, step_a, &zero, ws, bn, m * n,
                                                 blas_int(kc, parts - 1)));
    check_blas(kc, cublasSgemm(kc->c->blas, op_b, op_a, bn, bm, blas_int(kc, last), &one,
                               db + (parts - 1) * step_b, bldb, da + (parts - 1) * step_a, blda,
                               &zero, ws + (parts - 1) * m * n, bn));
    cu_sum_parts(kc->c->stream, (int)parts, m, n, ws, alpha, beta, dc, ldc);
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets B first. */
static void cuda_gemm(bv_compute *c, bool trans_a, bool trans_b, int64_t m, int64_t n,
                      int64_t k, float alpha, const float *a, int64_t lda, const float *b,
                      int64_t ldb, float beta, float *cm, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    bool split = m * n <= SPLIT_K_MAX_OUT && k >= SPLIT_K_MIN_K;
    cu_call kc = call_begin(c, split ? "gemm_split_k" : "gemm"); /* apart in the profile */
    const float *da = in(&kc, a, trans_a ? span(k, m, lda) : span(m, k, lda));
    const float *db = in(&kc, b, trans_b ? span(n, k, ldb) : span(k, n, ldb));
    /* C is read when beta says so, and staged with its gaps when ldc leaves some */
    float *dc = out(&kc, cm, span(m, n, ldc), beta != 0.0f || ldc != n);
    if (split) {
        gemm_split_k(&kc, trans_a, trans_b, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc);
        call_end(&kc);
        return;
    }
    check_blas(&kc, cublasSgemm(c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, blas_int(&kc, n),
                                blas_int(&kc, m), blas_int(&kc, k), &alpha, db,
                                blas_int(&kc, ldb > 0 ? ldb : 1), da,
                                blas_int(&kc, lda > 0 ? lda : 1), &beta, dc,
                                blas_int(&kc, ldc)));
    call_end(&kc);
}

static void cuda_gemm_batched(bv_compute *c, int64_t count, bool trans_a, bool trans_b,
                              int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                              int64_t lda, int64_t stride_a, const float *b, int64_t ldb,
                              int64_t stride_b, float beta, float *cm, int64_t ldc,
                              int64_t stride_c)
{
    if (count <= 0 || m <= 0 || n <= 0)
        return;
    cu_call kc = call_begin(c, "gemm_batched");
    size_t last_a = trans_a ? span(k, m, lda) : span(m, k, lda);
    size_t last_b = trans_b ? span(n, k, ldb) : span(k, n, ldb);
    const float *da = in(&kc, a, last_a ? FLOATS((count - 1) * stride_a) + last_a : 0);
    const float *db = in(&kc, b, last_b ? FLOATS((count - 1) * stride_b) + last_b : 0);
    float *dc = out(&kc, cm, FLOATS((count - 1) * stride_c) + span(m, n, ldc),
                    beta != 0.0f || ldc != n || stride_c != m * ldc);
    check_blas(&kc, cublasSgemmStridedBatched(
                        c->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, blas_int(&kc, n), blas_int(&kc, m),
                        blas_int(&kc, k), &alpha, db, blas_int(&kc, ldb > 0 ? ldb : 1),
                        stride_b, da, blas_int(&kc, lda > 0 ? lda : 1), stride_a, &beta, dc,
                        blas_int(&kc, ldc), stride_c, blas_int(&kc, count)));
    call_end(&kc);
}

/* ---- elementwise ------------------------------------------------------------------------ */

/* y = f(x) ops: x may alias y (then staged apart and copied back: the same result). */
#define UNARY(name, op, launch)                                                              \
    static void name(bv_compute *c, int64_t n, const float *x, float *y)                     \
    {                                                                                        \
        if (n <= 0)                                                                          \
            return;                                                                          \
        cu_call k = call_begin(c, op);                                                       \
        const float *dx_ = in(&k, x, FLOATS(n));                                             \
        launch(c->stream, n, dx_, out(&k, y, FLOATS(n), false));                             \
        call_end(&k);                                                                        \
    }

/* dx = f(a, dy) ops (a: the forward's input or output). */
#define BINARY(name, op, launch)                                                             \
    static void name(bv_compute *c, int64_t n, const float *a, const float *dy, float *dx)   \
    {                                                                                        \
        if (n <= 0)                                                                          \
            return;                                                                          \
        cu_call k = call_begin(c, op);                                                       \
        const float *da_ = in(&k, a, FLOATS(n));                                             \
        const float *ddy_ = in(&k, dy, FLOATS(n));                                           \
        launch(c->stream, n, da_, ddy_, out(&k, dx, FLOATS(n), false));                      \
        call_end(&k);                                                                        \
    }

UNARY(cuda_relu_forward, "relu_forward", cu_relu_forward)
BINARY(cuda_relu_backward, "relu_backward", cu_relu_backward)
UNARY(cuda_elu_forward, "elu_forward", cu_elu_forward)
BINARY(cuda_elu_backward, "elu_backward", cu_elu_backward)
UNARY(cuda_gelu_forward, "gelu_forward", cu_gelu_forward)
BINARY(cuda_gelu_backward, "gelu_backward", cu_gelu_backward)

static void cuda_leaky_relu_forward(bv_compute *c, int64_t n, float slope, const float *x,
                                    float *y)
{
    if (n <= 0)
        return;
    cu_call k = call_begin(c, "leaky_relu_forward");
    const float *dx = in(&k, x, FLOATS(n));
    cu_leaky_relu_forward(c->stream, n, slope, dx, out(&k, y, FLOATS(n), false));
    call_end(&k);
}

static void cuda_leaky_relu_backward(bv_compute *c, int64_t n, float slope, const float *x,
                                     const float *dy, float *dx)
{
    if (n <= 0)
        return;
    cu_call k = call_begin(c, "leaky_relu_backward");
    const float *d_x = in(&k, x, FLOATS(n));
    const float *d_dy = in(&k, dy, FLOATS(n));
    cu_leaky_relu_backward(c->stream, n, slope, d_x, d_dy, out(&k, dx, FLOATS(n), false));
    call_end(&k);
}

static cu_dropout dropout_of(float p, uint64_t seed, uint64_t stream)
{
    cu_dropout d = {.key = cu_dropout_key(seed, stream), .threshold = 0, .scale = 1.0f};
    if (p > 0.0f) {
        d.threshold = (uint64_t)ceil((double)p * 16777216.0);
        d.scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    }
    return d;
}

static void dropout(bv_compute *c, const char *op, int64_t n, float p, uint64_t seed,
                    uint64_t stream, uint64_t offset, const float *x, float *y)
{
    if (n <= 0)
        return;
    cu_call k = call_begin(c, op);
    const float *dx = in(&k, x, FLOATS(n));
    cu_dropout_apply(c->stream, n, dropout_of(p, seed, stream), offset, dx,
                     out(&k, y, FLOATS(n), false));
    call_end(&k);
}

static void cuda_dropout_forward(bv_compute *c, int64_t n, float p, uint64_t seed,
                                 uint64_t stream, uint64_t offset, const float *x, float *y)
{
    dropout(c, "dropout_forward", n, p, seed, stream, offset, x, y);
}

static void cuda_dropout_backward(bv_compute *c, int64_t n, float p, uint64_t seed,
                                  uint64_t stream, uint64_t offset, const float *dy, float *dx)
{
    dropout(c, "dropout_backward", n, p, seed, stream, offset, dy, dx);
}

static void cuda_adam_step(bv_compute *c, int64_t n, float *param, const float *grad,
                           float *m, float *v, const bv_adam_params *p)
{
    if (n <= 0)
        return;
    double t = p->step < 1 ? 1.0 : (double)p->step;
    double bc1 = 1.0 - pow((double)p->beta1, t);
    double bc2 = 1.0 - pow((double)p->beta2, t);
    cu_adam a = {
        .beta1 = p->beta1, .beta2 = p->beta2, .eps = p->eps,
        .l2 = p->decoupled ? 0.0f : p->weight_decay,
        .decay = p->decoupled ? 1.0f - p->lr * p->weight_decay : 1.0f,
        .step_size = (float)((double)p->lr / bc1),
        .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
    };
    cu_call k = call_begin(c, "adam_step");
    const float *dg = in(&k, grad, FLOATS(n));
    float *dp = out(&k, param, FLOATS(n), true);
    float *dm = out(&k, m, FLOATS(n), true);
    float *dv = out(&k, v, FLOATS(n), true);
    cu_adam_step(c->stream, n, dp, dg, dm, dv, a);
    call_end(&k);
}

static void cuda_add_bias(bv_compute *c, int64_t rows, int64_t cols, const float *bias,
                          float *y)
{
    if (rows <= 0 || cols <= 0)
        return;
    cu_call k = call_begin(c, "add_bias");
    const float *db = in(&k, bias, FLOATS(cols));
    cu_add_bias(c->stream, rows, cols, db, out(&k, y, FLOATS(rows * cols), true));
    call_end(&k);
}

static void cuda_bias_backward(bv_compute *c, int64_t rows, int64_t cols, const float *dy,
                               float *dbias, bool accumulate)
{
    if (cols <= 0)
        return;
    cu_call k = call_begin(c, "bias_backward");
    const float *ddy = in(&k, dy, FLOATS(rows > 0 ? rows * cols : 0));
    int64_t parts = rows > 0 ? (rows + CU_BIAS_ROWS - 1) / CU_BIAS_ROWS : 0;
    double *partial = parts ? scratch(&k, (size_t)(parts * cols) * sizeof(double)) : NULL;
    cu_bias_backward(c->stream, rows, cols, ddy, partial,
                     out(&k, dbias, FLOATS(cols), accumulate), accumulate);
    call_end(&k);
}

static void cuda_axpy(bv_compute *c, int64_t n, float alpha, const float *x, float *y)
{
    if (n <= 0)
        return;
    cu_call k = call_begin(c, "axpy");
    const float *dx = in(&k, x, FLOATS(n));
    cu_axpy(c->stream, n, alpha, dx, out(&k, y, FLOATS(n), true));
    call_end(&k);
}

/* ABI 1.17: zeroes on the device where x is the plugin's memory (a host memset of managed
 * memory would move its pages to the host, and the next kernel would move them back). */
static void cuda_zero(bv_compute *c, int64_t n, float *x)
{
    if (n <= 0)
        return;
    cu_call k = call_begin(c, "zero");
    check(&k, cudaMemsetAsync(out(&k, x, FLOATS(n), false), 0, FLOATS(n), c->stream),
          "cudaMemsetAsync");
    call_end(&k);
}

static void cuda_copy_rows(bv_compute *c, int64_t rows, int64_t cols, const float *x,
                           int64_t ldx, float *y, int64_t ldy, bool add)
{
    if (rows <= 0 || cols <= 0)
        return;
    cu_call k = call_begin(c, "copy_rows");
    const float *dx = in(&k, x, span(rows, cols, ldx));
    /* y is read to add to it, and to keep its gaps between rows when staged */
    float *dy = out(&k, y, span(rows, cols, ldy), add || (rows > 1 && ldy != cols));
    cu_copy_rows(c->stream, rows, cols, dx, ldx, dy, ldy, add);
    call_end(&k);
}

static void cuda_scale(bv_compute *c, int64_t n, float alpha, float *x)
{
    if (n <= 0)
        return;
    cu_call k = call_begin(c, "scale");
    cu_scale(c->stream, n, alpha, out(&k, x, FLOATS(n), true));
    call_end(&k);
}

/* ---- reductions ------------------------------------------------------------------------- */

static double cuda_sum_squares(bv_compute *c, int64_t n, const float *x)
{
    if (n <= 0)
        return 0.0;
    cu_call k = call_begin(c, "sum_squares");
    double *res = c->reduce + 3 * CU_REDUCE_BLOCKS;
    cu_sum_squares(c->stream, n, in(&k, x, FLOATS(n)), c->reduce, res);
    check(&k, cudaMemcpyAsync(c->result_host, res, sizeof(double), cudaMemcpyDeviceToHost,
                              c->stream),
          "copy the sum");
    call_end(&k);
    return c->result_host[0];
}

static void cuda_softmax_xent(bv_compute *c, int64_t n, int64_t k, const float *logits,
                              const int32_t *labels, const uint8_t *mask, float grad_scale,
                              float *dlogits, bv_xent_result *res)
{
    res->loss_sum = 0.0;
    res->count = 0;
    res->correct = 0;
    if (n <= 0 || k <= 0)
        return;
    cu_call kc = call_begin(c, "softmax_xent");
    const float *dl = in(&kc, logits, FLOATS(n * k));
    const int32_t *dlab = in(&kc, labels, (size_t)n * sizeof *labels);
    const uint8_t *dmask = in(&kc, mask, mask ? (size_t)n : 0);
    /* dlogits may alias logits: staged, it gets its own copy of them first */
    float *dd = dlogits ? out(&kc, dlogits, FLOATS(n * k), dlogits == logits) : NULL;
    if (dlogits == logits && dd != dl && dd)
        dl = dd;
    double *r = c->reduce + 3 * CU_REDUCE_BLOCKS;
    cu_softmax_xent(c->stream, n, k, dl, dlab, dmask, grad_scale, dd, c->reduce, r);
    check(&kc, cudaMemcpyAsync(c->result_host, r, 3 * sizeof(double), cudaMemcpyDeviceToHost,
                               c->stream),
          "copy the loss");
    call_end(&kc);
    res->loss_sum = c->result_host[0];
    res->count = (int64_t)c->result_host[1];
    res->correct = (int64_t)c->result_host[2];
}

/* ---- sparse ------------------------------------------------------------------------------ */

static void cuda_spmm(bv_compute *c, const bv_csr *a, int64_t row_begin, int64_t row_end,
                      const float *x, int64_t f, float *y)
{
    if (row_end <= row_begin || f <= 0)
        return;
    cu_call k = call_begin(c, "spmm");
    cu_csr da = csr_in(&k, a);
    const float *dx = in(&k, x, FLOATS(a->ncols * f));
    cu_spmm(c->stream, &da, row_begin, row_end, dx, f,
            out(&k, y, FLOATS((row_end - row_begin) * f), false), c->ordered_sums);
    call_end(&k);
}

/* A strided output keeps the floats between its rows: staged, it is read in first. */
static void cuda_spmm_dropout(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                              uint64_t stream, uint64_t offset, int64_t row_stride,
                              const float *x, int64_t ldx, int64_t f, float *y, int64_t ldy)
{
    if (a->nrows <= 0 || f <= 0)
        return;
    cu_call k = call_begin(c, "spmm_dropout");
    cu_csr da = csr_in(&k, a);
    const float *dx = in(&k, x, span(a->ncols, f, ldx));
    cu_spmm_dropout(c->stream, &da, dropout_of(p, seed, stream), offset, row_stride, dx, ldx,
                    f, out(&k, y, span(a->nrows, f, ldy), ldy != f), ldy);
    call_end(&k);
}

static void cuda_spmm_dropout_backward_x(bv_compute *c, const bv_csr *a, float p,
                                         uint64_t seed, uint64_t stream, uint64_t offset,
                                         int64_t row_stride, const float *dy, int64_t lddy,
                                         int64_t f, float *dx, int64_t lddx)
{
    if (a->nrows <= 0 || f <= 0)
        return;
    cu_call k = call_begin(c, "spmm_dropout_backward_x");
    cu_csr da = csr_in(&k, a);
    const float *ddy = in(&k, dy, span(a->nrows, f, lddy));
    cu_spmm_dropout_backward_x(c->stream, &da, dropout_of(p, seed, stream), offset,
                               row_stride, ddy, lddy, f,
                               out(&k, dx, span(a->ncols, f, lddx), true), lddx);
    call_end(&k);
}

static void cuda_spmm_dropout_heads(bv_compute *c, const bv_csr *a, float p, uint64_t seed,
                                    uint64_t stream, uint64_t offset, uint64_t head_stride,
                                    int64_t row_stride, int heads, const float *x, int64_t ldx,
                                    int64_t f, float *y, int64_t ldy)
{
    if (a->nrows <= 0 || f <= 0 || heads <= 0)
        return;
    cu_call k = call_begin(c, "spmm_dropout_heads");
    cu_csr da = csr_in(&k, a);
    const float *dx = in(&k, x, span(a->ncols, heads * f, ldx));
    cu_spmm_dropout_heads(c->stream, &da, dropout_of(p, seed, stream), offset, head_stride,
                          row_stride, heads, dx, ldx, f,
                          out(&k, y, span(a->nrows, heads * f, ldy), ldy != heads * f), ldy);
    call_end(&k);
}

static void cuda_spmm_dropout_heads_backward_x(bv_compute *c, const bv_csr *a, float p,
                                               uint64_t seed, uint64_t stream, uint64_t offset,
                                               uint64_t head_stride, int64_t row_stride,
                                               int heads, const float *dy, int64_t lddy,
                                               int64_t f, float *dx, int64_t lddx)
{
    if (a->nrows <= 0 || f <= 0 || heads <= 0)
        return;
    cu_call k = call_begin(c, "spmm_dropout_heads_backward_x");
    cu_csr da = csr_in(&k, a);
    const float *ddy = in(&k, dy, span(a->nrows, heads * f, lddy));
    cu_spmm_dropout_heads_backward_x(c->stream, &da, dropout_of(p, seed, stream), offset,
                                     head_stride, row_stride, heads, ddy, lddy, f,
                                     out(&k, dx, span(a->ncols, heads * f, lddx), true), lddx);
    call_end(&k);
}

/* ---- edge kernels (GAT) -------------------------------------------------------------------- */

/* Bytes of a per-edge array of `heads` floats per edge over rows [b, e) of a, for staging
 * it; 0 (nothing to stage) when p is device memory already, so that the host does not read
 * the managed rowptr (which would pull its pages back from the GPU) on every call. */
static size_t edge_bytes(const bv_csr *a, int64_t b, int64_t e, int heads, const void *p)
{
    if (!p || on_device(p))
        return 0;
    return FLOATS((a->rowptr[e] - a->rowptr[b]) * heads);
}

static void cuda_edge_scores(bv_compute *c, const bv_csr *a, int64_t row_begin,
                             int64_t row_end, int heads, const float *src, int64_t src_stride,
                             const float *dst, int64_t dst_stride, float *o)
{
    if (row_end <= row_begin)
        return;
    cu_call k = call_begin(c, "edge_scores");
    cu_csr da = csr_in(&k, a);
    const float *ds = in(&k, src, span(a->ncols, heads, src_stride));
    const float *dd = in(&k, dst, span(row_end - row_begin, heads, dst_stride));
    cu_edge_scores(c->stream, &da, row_begin, row_end, heads, ds, src_stride, dd, dst_stride,
                   out(&k, o, edge_bytes(a, row_begin, row_end, heads, o), false));
    call_end(&k);
}

static void cuda_edge_scores_backward(bv_compute *c, const bv_csr *a, int64_t row_begin,
                                      int64_t row_end, int heads, const float *dout,
                                      float *dsrc, int64_t src_stride, float *ddst,
                                      int64_t dst_stride, bool accumulate)
{
    if (row_end <= row_begin)
        return;
    cu_call k = call_begin(c, "edge_scores_backward");
    cu_csr da = csr_in(&k, a);
    const float *dd = in(&k, dout, edge_bytes(a, row_begin, row_end, heads, dout));
    float *ds = out(&k, dsrc, span(a->ncols, heads, src_stride), true);
    /* a strided ddst keeps the floats between its rows: staged, they are read too */
    float *dt = out(&k, ddst, span(row_end - row_begin, heads, dst_stride),
                    accumulate || dst_stride != heads);
    cu_edge_scores_backward(c->stream, &da, row_begin, row_end, heads, dd, ds, src_stride, dt,
                            dst_stride, accumulate);
    call_end(&k);
}

static void cuda_edge_softmax(bv_compute *c, const bv_csr *a, int64_t row_begin,
                              int64_t row_end, int heads, const float *z, float *alpha)
{
    if (row_end <= row_begin)
        return;
    cu_call k = call_begin(c, "edge_softmax");
    cu_csr da = csr_in(&k, a);
    const float *dz = in(&k, z, edge_bytes(a, row_begin, row_end, heads, z));
    cu_edge_softmax(c->stream, &da, row_begin, row_end, heads, dz,
                    out(&k, alpha, edge_bytes(a, row_begin, row_end, heads, alpha), false));
    call_end(&k);
}

static void cuda_edge_softmax_backward(bv_compute *c, const bv_csr *a, int64_t row_begin,
                                       int64_t row_end, int heads, const float *alpha,
                                       const float *dalpha, float *dz)
{
    if (row_end <= row_begin)
        return;
    cu_call k = call_begin(c, "edge_softmax_backward");
    cu_csr da = csr_in(&k, a);
    const float *dal = in(&k, alpha, edge_bytes(a, row_begin, row_end, heads, alpha));
    const float *ddal = in(&k, dalpha, edge_bytes(a, row_begin, row_end, heads, dalpha));
    cu_edge_softmax_backward(c->stream, &da, row_begin, row_end, heads, dal, ddal,
                             out(&k, dz, edge_bytes(a, row_begin, row_end, heads, dz), false));
    call_end(&k);
}

static void cuda_gather_heads(bv_compute *c, const bv_csr *a, int64_t row_begin,
                              int64_t row_end, int heads, int64_t head_dim, const float *w,
                              const float *x, int64_t x_stride, float *y)
{
    if (row_end <= row_begin)
        return;
    cu_call k = call_begin(c, "gather_heads");
    cu_csr da = csr_in(&k, a);
    const float *dw = in(&k, w, edge_bytes(a, row_begin, row_end, heads, w));
    const float *dx = in(&k, x, span(a->ncols, heads * head_dim, x_stride));
    cu_gather_heads(c->stream, &da, row_begin, row_end, heads, head_dim, dw, dx, x_stride,
                    out(&k, y, FLOATS((row_end - row_begin) * heads * head_dim), false),
                    c->ordered_sums);
    call_end(&k);
}

static void cuda_gather_heads_backward_x(bv_compute *c, const bv_csr *at, const int64_t *perm,
                                         int heads, int64_t head_dim, const float *w,
                                         const float *dy, float *dx, int64_t x_stride)
{
    if (at->nrows <= 0)
        return;
    cu_call k = call_begin(c, "gather_heads_backward_x");
    cu_csr dat = csr_in(&k, at);
    const int64_t *dperm = in(&k, perm, (size_t)at->nnz * sizeof *perm);
    const float *dw = in(&k, w, FLOATS(at->nnz * heads));
    const float *ddy = in(&k, dy, FLOATS(at->ncols * heads * head_dim));
    cu_gather_heads_backward_x(c->stream, &dat, dperm, heads, head_dim, dw, ddy,
                               out(&k, dx, span(at->nrows, heads * head_dim, x_stride), true),
                               x_stride, c->ordered_sums);
    call_end(&k);
}

static void cuda_gather_heads_backward_w(bv_compute *c, const bv_csr *a, int64_t row_begin,
                                         int64_t row_end, int heads, int64_t head_dim,
                                         const float *dy, const float *x, int64_t x_stride,
                                         float *dw)
{
    if (row_end <= row_begin)
        return;
    cu_call k = call_begin(c, "gather_heads_backward_w");
    cu_csr da = csr_in(&k, a);
    const float *ddy = in(&k, dy, FLOATS((row_end - row_begin) * heads * head_dim));
    const float *dx = in(&k, x, span(a->ncols, heads * head_dim, x_stride));
    cu_gather_heads_backward_w(c->stream, &da, row_begin, row_end, heads, head_dim, ddy, dx,
                               x_stride,
                               out(&k, dw, edge_bytes(a, row_begin, row_end, heads, dw), false),
                               c->ordered_sums);
    call_end(&k);
}

/* ---- transformer ------------------------------------------------------------------------- */

static void cuda_layernorm_forward(bv_compute *c, int64_t rows, int64_t cols, float eps,
                                   const float *x, const float *gamma, const float *beta,
                                   float *y, float *mean, float *rstd)
{
    if (rows <= 0 || cols <= 0)
        return;
    cu_call k = call_begin(c, "layernorm_forward");
    const float *dx = in(&k, x, FLOATS(rows * cols));
    const float *dg = in(&k, gamma, FLOATS(cols));
    const float *db = in(&k, beta, beta ? FLOATS(cols) : 0);
    float *dy = out(&k, y, FLOATS(rows * cols), false);
    float *dm = out(&k, mean, FLOATS(rows), false);
    float *dr = out(&k, rstd, FLOATS(rows), false);
    cu_layernorm_forward(c->stream, rows, cols, eps, dx, dg, db, dy, dm, dr);
    call_end(&k);
}

static void cuda_layernorm_backward(bv_compute *c, int64_t rows, int64_t cols, const float *x,
                                    const float *gamma, const float *mean, const float *rstd,
                                    const float *dy, float *dx, bool accumulate,
                                    float *dgamma, float *dbeta)
{
    if (rows <= 0 || cols <= 0)
        return;
    cu_call k = call_begin(c, "layernorm_backward");
    const float *d_x = in(&k, x, FLOATS(rows * cols));
    const float *dg = in(&k, gamma, FLOATS(cols));
    const float *dm = in(&k, mean, FLOATS(rows));
    const float *dr = in(&k, rstd, FLOATS(rows));
    const float *d_dy = in(&k, dy, FLOATS(rows * cols));
    float *d_dx = out(&k, dx, FLOATS(rows * cols), accumulate);
    float *d_dg = out(&k, dgamma, FLOATS(cols), true);
    float *d_db = out(&k, dbeta, dbeta ? FLOATS(cols) : 0, true);
    cu_layernorm_backward(c->stream, rows, cols, d_x, dg, dm, dr, d_dy, d_dx, accumulate, d_dg,
                          d_db);
    call_end(&k);
}

static void cuda_attention_forward(bv_compute *c, int64_t batch, int64_t seq, int heads,
                                   int64_t head_dim, const float *qkv, float *att, float *o)
{
    if (batch <= 0 || seq <= 0 || heads <= 0)
        return;
    int64_t t = batch * seq, width = heads * head_dim;
    cu_call k = call_begin(c, "attention_forward");
    const float *dq = in(&k, qkv, FLOATS(t * 3 * width));
    float *da = out(&k, att, FLOATS(batch * heads * seq * seq), false);
    cu_attention_forward(c->stream, batch, seq, heads, head_dim, dq, da,
                         out(&k, o, FLOATS(t * width), false));
    call_end(&k);
}

static void cuda_attention_backward(bv_compute *c, int64_t batch, int64_t seq, int heads,
                                    int64_t head_dim, const float *qkv, const float *att,
                                    const float *dout, float *scr, float *dqkv)
{
    if (batch <= 0 || seq <= 0 || heads <= 0)
        return;
    int64_t t = batch * seq, width = heads * head_dim;
    size_t att_bytes = FLOATS(batch * heads * seq * seq);
    cu_call k = call_begin(c, "attention_backward");
    const float *dq = in(&k, qkv, FLOATS(t * 3 * width));
    const float *da = in(&k, att, att_bytes);
    const float *ddo = in(&k, dout, FLOATS(t * width));
    /* scratch is the kernel's own: staged, it need not come back */
    float *ds = on_device(scr) ? scr : scratch(&k, att_bytes);
    cu_attention_backward(c->stream, batch, seq, heads, head_dim, dq, da, ddo, ds,
                          out(&k, dqkv, FLOATS(t * 3 * width), false));
    call_end(&k);
}

/* The vocabulary is not an argument of the embedding ops; a staged wte needs its size, so
 * it is one more than the largest token (what the kernel can read). */
static int64_t vocab_of(int64_t n, const int32_t *tokens)
{
    int64_t v = 0;
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] + 1 > v)
            v = tokens[i] + 1;
    return v;
}

static void cuda_embedding_forward(bv_compute *c, int64_t batch, int64_t seq, int64_t dim,
                                   const int32_t *tokens, const float *wte, const float *wpe,
                                   float *o)
{
    if (batch <= 0 || seq <= 0 || dim <= 0)
        return;
    int64_t vocab = on_device(wte) ? 0 : vocab_of(batch * seq, tokens);
    cu_call k = call_begin(c, "embedding_forward");
    const int32_t *dt = in(&k, tokens, (size_t)(batch * seq) * sizeof *tokens);
    const float *dwte = in(&k, wte, FLOATS(vocab * dim));
    const float *dwpe = in(&k, wpe, wpe ? FLOATS(seq * dim) : 0);
    cu_embedding_forward(c->stream, batch, seq, dim, dt, dwte, dwpe,
                         out(&k, o, FLOATS(batch * seq * dim), false));
    call_end(&k);
}

static void cuda_embedding_backward(bv_compute *c, int64_t batch, int64_t seq, int64_t dim,
                                    const int32_t *tokens, const float *dout, float *dwte,
                                    float *dwpe)
{
    if (batch <= 0 || seq <= 0 || dim <= 0)
        return;
    int64_t vocab = on_device(dwte) ? 0 : vocab_of(batch * seq, tokens);
    cu_call k = call_begin(c, "embedding_backward");
    const int32_t *dt = in(&k, tokens, (size_t)(batch * seq) * sizeof *tokens);
    const float *ddo = in(&k, dout, FLOATS(batch * seq * dim));
    float *dwte_d = out(&k, dwte, FLOATS(vocab * dim), true);
    float *dwpe_d = out(&k, dwpe, dwpe ? FLOATS(seq * dim) : 0, true);
    cu_embedding_backward(c->stream, batch, seq, dim, dt, ddo, dwte_d, dwpe_d);
    call_end(&k);
}

/* ---- the plugin ------------------------------------------------------------------------- */

static int64_t export_bytes_to_device(void)
{
    return (int64_t)atomic_load(&staged_to_device);
}

static int64_t export_bytes_to_host(void)
{
    return (int64_t)atomic_load(&staged_to_host);
}

#define EXPORT_FN(f) ((void (*)(void))(void *)(f))

static const bv_export cuda_exports[] = {
    {"bytes_to_device", "i:", EXPORT_FN(export_bytes_to_device),
     "bytes of host buffers the ended instances copied to the GPU (0: all in device memory)"},
    {"bytes_to_host", "i:", EXPORT_FN(export_bytes_to_host),
     "bytes the ended instances copied back to host buffers"},
    {NULL, NULL, NULL, NULL},
};

static const bv_compute_ops cuda_ops = {
    .create = cuda_create,
    .destroy = cuda_destroy,
    .num_threads = cuda_num_threads,
    .gemm = cuda_gemm,
    .spmm = cuda_spmm,
    .relu_forward = cuda_relu_forward,
    .relu_backward = cuda_relu_backward,
    .dropout_forward = cuda_dropout_forward,
    .dropout_backward = cuda_dropout_backward,
    .softmax_xent = cuda_softmax_xent,
    .adam_step = cuda_adam_step,
    .add_bias = cuda_add_bias,
    .bias_backward = cuda_bias_backward,
    .axpy = cuda_axpy,
    .sum_squares = cuda_sum_squares,
    .leaky_relu_forward = cuda_leaky_relu_forward,
    .leaky_relu_backward = cuda_leaky_relu_backward,
    .elu_forward = cuda_elu_forward,
    .elu_backward = cuda_elu_backward,
    .edge_scores = cuda_edge_scores,
    .edge_scores_backward = cuda_edge_scores_backward,
    .edge_softmax = cuda_edge_softmax,
    .edge_softmax_backward = cuda_edge_softmax_backward,
    .gather_heads = cuda_gather_heads,
    .gather_heads_backward_x = cuda_gather_heads_backward_x,
    .gather_heads_backward_w = cuda_gather_heads_backward_w,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .gemm_batched = cuda_gemm_batched,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .scale = cuda_scale,
    .spmm_dropout = cuda_spmm_dropout,
    .spmm_dropout_backward_x = cuda_spmm_dropout_backward_x,
    .spmm_dropout_heads = cuda_spmm_dropout_heads,
    .spmm_dropout_heads_backward_x = cuda_spmm_dropout_heads_backward_x,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .zero = cuda_zero,
    .copy_rows = cuda_copy_rows,
};

static const bv_plugin cuda_plugin = {
    BV_PLUGIN_HEADER(BV_KIND_COMPUTE, "cuda", "0.1.0",
                     "NVIDIA GPU kernels: cuBLAS gemm, own SpMM, edge, attention and "
                     "elementwise kernels; buffers in managed memory"),
    .options = cuda_options,
    .ops = &cuda_ops,
    .ops_size = sizeof cuda_ops,
    .probe = cuda_probe,
    .exports = cuda_exports,
};

BV_PLUGIN_EXPORT const bv_plugin *bv_compute_cuda_plugin(void);

const bv_plugin *bv_compute_cuda_plugin(void)
{
    return &cuda_plugin;
}
