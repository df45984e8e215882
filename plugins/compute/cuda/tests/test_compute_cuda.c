/* The cuda compute plugin against the cpu plugin: every op of bv_compute_ops runs on both
 * with the same random inputs, and every element of every output is compared. Without a
 * usable GPU it prints "SKIP: <reason>" and exits 77 (ctest: skipped).
 *
 * One run reports everything: one line per case,
 *     op  variant  max_abs  max_rel  tol  PASS|FAIL
 * (indented lines below a FAIL say where and why), then "N cases, F failed"; exit 1 if any
 * failed. A crash (SIGSEGV, SIGBUS, the plugin's abort() on a CUDA error) or a hang (alarm,
 * BV_TEST_CASE_TIMEOUT seconds, default 60) fails that case and the run goes on; three
 * hangs in a row stop the cuda calls, and a heap an op corrupted stops the run with a line
 * saying so (the results above it stand).
 *
 * Every case runs in each memory pass: "host" (every buffer from malloc: the plugin stages
 * it), "mem_alloc" (every buffer of the cuda side, the graphs included, from the ops'
 * mem_alloc: used where it lies) and "mixed" (every other buffer from mem_alloc); the last
 * two only when the cuda ops table has a mem_alloc that gives memory. The cpu side always
 * uses malloc. Each case draws fresh inputs; outputs start with the same random values on
 * both sides (so accumulation is checked and an element the cuda op fails to write shows),
 * and every buffer has GUARD elements past its end that nobody may touch. The cuda side
 * runs twice: its inputs must come back unchanged, and the second run must give the same
 * bits (compute.h) except in the scatters the cuda plugin may sum with atomics
 * (edge_scores_backward, spmm_dropout(_heads)_backward_x, embedding_backward: k->scatter;
 * a difference there is shown as a note).
 *
 * Comparison, per output (a: cuda, b: cpu):
 *     max_abs = max |a - b|,   max_rel = max |a - b| / max(|b|, floor),
 *     floor   = max(1e-3, 0.1 * the largest |b| of that output).
 * The second term of the floor: where an output cancels to near zero (gemm, axpy, a
 * backward's sum of signed terms, GELU's slope near its root) what is left is the rounding
 * of the terms that cancelled, so such an element is judged on the output's scale rather
 * than on its own size (with 1e-3 alone, fma and a cuBLAS-like summation order failed 55 of
 * the 311 cases of a correct backend; with it, the worst case kept a 9x margin). A case
 * passes when max_rel <= tol for every output ("exact": every element has the same bits;
 * NaN matches NaN).
 *
 *   tolerance  ops                                            why
 *   exact      relu_forward/backward, dropout_forward/        a select, or one multiply
 *              backward, scale, embedding_forward,            or add of the same floats;
 *              softmax_xent's count and correct,              the dropout mask is the
 *              spmm_dropout_heads = its per-head              cpu's hash by design
 *              spmm_dropout calls (cuda against itself)
 *   1e-5       leaky_relu, elu, gelu (forward, backward),     fma contraction and libm
 *              adam_step, add_bias, axpy, edge_scores         (expm1f, erff, expf) differ
 *                                                             in the last bits
 *   1e-4       gemm (tf32 off), gemm_batched, spmm,           sums in another order
 *              spmm_dropout(_heads)(_backward_x),             (cuBLAS's blocking, warp
 *              bias_backward, softmax_xent's dlogits and      reductions, atomics)
 *              loss_sum, edge_scores_backward, edge_softmax
 *              (+backward), gather_heads (+backward_x, _w),
 *              layernorm (forward, backward), attention
 *              (forward, backward), embedding_backward,
 *              spmm_dropout_heads_backward_x = per-head
 *              (cuda against itself: a scatter)
 *   1e-9       sum_squares                                    both square and add in double
 *
 * Environment: BV_TEST_SEED (the data's seed, printed at the start), BV_TEST_CASE_TIMEOUT.
 */
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bivouac/compute.h"
#include "bivouac/options.h"
#include "bivouac/plugin.h"
#include "bivouac/tensor.h"

#define TEST_RNG_SEED 0x7C0FFEE5EEDull /* the data's seed unless BV_TEST_SEED says one */
#include "test_rng.h"

const bv_plugin *bv_compute_cpu_plugin(void);
const bv_plugin *bv_compute_cuda_plugin(void);

/* Sizes: none a multiple of 32 (a warp) or of 8 (a vector). */
#define ROWS 301     /* graph vertices, rows of dense ops */
#define FEAT 37      /* feature width */
#define HEADS 3
#define HEAD_DIM 7
#define BATCH 2
#define SEQ 19
#define VOCAB 50
#define BOW_COLS 203 /* columns of the sparse first layer's input */
#define N_ELEM ((int64_t)ROWS * FEAT)
#define N_LARGE ((int64_t)65536 * 256 + 1001) /* past one grid of the elementwise kernels */
#define SUB_BEGIN 17 /* a sub-range of rows: an interval */
#define SUB_END 283
#define GUARD 16     /* elements past every buffer's end that must stay as they were */

#define EXACT 0.0
#define TOL_ELEMENTWISE 1e-5
#define TOL_SUM 1e-4
#define TOL_SUMSQ 1e-9
#define REL_FLOOR 1e-3
#define REL_FLOOR_FRACTION 0.1

#define DEFAULT_TIMEOUT 60

/* Seconds a case's ops may take (BV_TEST_CASE_TIMEOUT; 15 after a first timeout), and the
 * test's own work in a case (making its data, comparing): twice the first. */
static unsigned case_timeout = DEFAULT_TIMEOUT;
static unsigned host_timeout = 2 * DEFAULT_TIMEOUT;

/* ---- random data ----------------------------------------------------------------------- */

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_compute_cuda: out of host memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}

static void fill(float *v, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = rng_float(lo, hi);
}

/* Zeros of both signs among the values: a kink, and a sign the ops must keep or drop as the
 * cpu does. */
static void sprinkle_zeros(float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i += 17)
        v[i] = 0.0f;
    for (int64_t i = 8; i < n; i += 19)
        v[i] = -0.0f;
}

/* ---- graphs ---------------------------------------------------------------------------- */

enum { G_A, G_A_NOVAL, G_AT, G_BOW, G_COUNT, G_NONE = -1 };
static const char *const graph_name[G_COUNT] = {"A", "A(no values)", "A^T", "B(301x203)"};

/* The graphs on the host: A is 301 x 301 with values, A(no values) the same pattern without,
 * A^T its transpose (with host_perm, bv_csr_transpose_perm's map), B a 301 x 203 bag of
 * words with values. They stay the same for the whole run. */
static bv_csr host_graph[G_COUNT];
static int64_t *host_perm;

/* Row i is empty when i % 11 == 5 or it is the last row; otherwise it has its self loop
 * (square graphs, unless i % 7 == 3), up to 12 random neighbours, and every 37th row 60 to
 * 119 of them: rows longer than a warp, and rows of one edge. Columns ascend. */
static void random_csr(bv_csr *m, int64_t nrows, int64_t ncols, bool with_values)
{
    bool *mark = xmalloc((size_t)ncols * sizeof *mark);
    m->nrows = nrows;
    m->ncols = ncols;
    m->owned = 0;
    m->rowptr = xmalloc((size_t)(nrows + 1) * sizeof *m->rowptr);
    m->colidx = xmalloc((size_t)(nrows * 120) * sizeof *m->colidx);
    m->rowptr[0] = 0;
    int64_t e = 0;
    for (int64_t i = 0; i < nrows; i++) {
        if (i % 11 != 5 && i != nrows - 1) {
            memset(mark, 0, (size_t)ncols * sizeof *mark);
            if (nrows == ncols && i % 7 != 3)
                mark[i] = true;
            int64_t deg = i % 37 == 10 ? 60 + (int64_t)(rng_next() % 60)
                                       : (int64_t)(rng_next() % 13);
            for (int64_t d = 0; d < deg; d++)
                mark[rng_next() % (uint64_t)ncols] = true;
            for (int64_t j = 0; j < ncols; j++)
                if (mark[j])
                    m->colidx[e++] = (int32_t)j;
        }
        m->rowptr[i + 1] = e;
    }
    m->nnz = e;
    m->values = NULL;
    if (with_values) {
        m->values = xmalloc((size_t)e * sizeof *m->values);
        fill(m->values, e, -2.0f, 2.0f);
    }
    free(mark);
}

static void copy_csr(bv_csr *dst, const bv_csr *src, bool with_values)
{
    *dst = *src;
    dst->rowptr = xmalloc((size_t)(src->nrows + 1) * sizeof *dst->rowptr);
    memcpy(dst->rowptr, src->rowptr, (size_t)(src->nrows + 1) * sizeof *dst->rowptr);
    dst->colidx = xmalloc((size_t)src->nnz * sizeof *dst->colidx);
    memcpy(dst->colidx, src->colidx, (size_t)src->nnz * sizeof *dst->colidx);
    dst->values = NULL;
    if (with_values && src->values) {
        dst->values = xmalloc((size_t)src->nnz * sizeof *dst->values);
        memcpy(dst->values, src->values, (size_t)src->nnz * sizeof *dst->values);
    }
}

static bool make_host_graphs(void)
{
    random_csr(&host_graph[G_A], ROWS, ROWS, true);
    copy_csr(&host_graph[G_A_NOVAL], &host_graph[G_A], false);
    bv_csr *at = bv_csr_transpose_perm(&host_graph[G_A], &host_perm);
    if (!at)
        return false;
    copy_csr(&host_graph[G_AT], at, false); /* the edge kernels never read values */
    bv_csr_free(at);
    random_csr(&host_graph[G_BOW], ROWS, BOW_COLS, true);
    return true;
}

static int64_t range_edges(const bv_csr *g, int64_t rb, int64_t re)
{
    return g->rowptr[re] - g->rowptr[rb];
}

/* ---- backends and memory ------------------------------------------------------------- */

enum { SIDE_REF, SIDE_TEST };
typedef enum { MEM_HOST, MEM_MANAGED, MEM_MIXED, MEM_PASSES } mem_kind;
static const char *const pass_name[MEM_PASSES] = {"host", "mem_alloc", "mixed"};

static const bv_compute_ops *cpu_ops, *cuda_ops;
static bv_compute *cpu_c, *cuda_c;
static void *(*mem_alloc_fn)(size_t bytes); /* the cuda ops' allocator, or NULL */
static void (*mem_free_fn)(void *p);
static mem_kind mem_pass = MEM_HOST;
static int64_t managed_fallbacks; /* mem_alloc said NULL: host memory used instead */
/* An op timed out: the device may still be busy, and mem_alloc and mem_free wait for it
 * outside the guard. From then on the cases use host memory and managed memory is kept. */
static bool cuda_stalled;

/* Memory for buffer `index` of a side in this pass; *managed says where it came from. */
static void *side_alloc(int side, size_t bytes, int index, bool *managed)
{
    *managed = false;
    bool want = side == SIDE_TEST && !cuda_stalled &&
                (mem_pass == MEM_MANAGED || (mem_pass == MEM_MIXED && index % 2 == 0));
    if (want) {
        void *p = mem_alloc_fn(bytes);
        if (p) {
            *managed = true;
            return p;
        }
        managed_fallbacks++;
    }
    return xmalloc(bytes);
}

static void side_free(void *p, bool managed)
{
    if (!managed)
        free(p);
    else if (!cuda_stalled)
        mem_free_fn(p);
}

/* A graph in one side's memory. Copies live to the end of the run, so that no address is
 * ever reused for other contents while the instances live (a backend may keep a graph it
 * saw on the device). */
typedef struct graph_copy {
    bv_csr csr;
    int64_t *perm;
    void *arrays[4];
    bool managed[4];
} graph_copy;

#define MAX_GRAPH_COPIES (G_COUNT * (MEM_PASSES + 1))
static graph_copy *graph_copies[MAX_GRAPH_COPIES];
static int n_graph_copies;
static graph_copy *side_graph[2][G_COUNT]; /* this pass's */

static void *copy_array(graph_copy *gc, int slot, int side, const void *src, size_t bytes)
{
    void *p = side_alloc(side, bytes, slot, &gc->managed[slot]);
    memcpy(p, src, bytes);
    gc->arrays[slot] = p;
    return p;
}

static graph_copy *make_graph_copy(int g, int side)
{
    const bv_csr *h = &host_graph[g];
    graph_copy *gc = calloc(1, sizeof *gc);
    if (!gc)
        abort();
    gc->csr = *h;
    gc->csr.rowptr = copy_array(gc, 0, side, h->rowptr, (size_t)(h->nrows + 1) * sizeof(int64_t));
    gc->csr.colidx = copy_array(gc, 1, side, h->colidx, (size_t)h->nnz * sizeof(int32_t));
    if (h->values)
        gc->csr.values = copy_array(gc, 2, side, h->values, (size_t)h->nnz * sizeof(float));
    if (g == G_AT)
        gc->perm = copy_array(gc, 3, side, host_perm, (size_t)h->nnz * sizeof(int64_t));
    graph_copies[n_graph_copies++] = gc;
    return gc;
}

/* Where a graph copy differs from the host's, or -1. */
static int graph_changed(const graph_copy *gc, int g)
{
    const bv_csr *h = &host_graph[g];
    if (memcmp(gc->csr.rowptr, h->rowptr, (size_t)(h->nrows + 1) * sizeof(int64_t)))
        return 0;
    if (memcmp(gc->csr.colidx, h->colidx, (size_t)h->nnz * sizeof(int32_t)))
        return 1;
    if (h->values && memcmp(gc->csr.values, h->values, (size_t)h->nnz * sizeof(float)))
        return 2;
    if (gc->perm && memcmp(gc->perm, host_perm, (size_t)h->nnz * sizeof(int64_t)))
        return 3;
    return -1;
}

/* ---- cases ----------------------------------------------------------------------------- */

typedef enum { T_F32, T_F64, T_I32, T_I64, T_U8 } elem_type;

static size_t elem_size(elem_type t)
{
    switch (t) {
    case T_F32: return sizeof(float);
    case T_F64: return sizeof(double);
    case T_I32: return sizeof(int32_t);
    case T_I64: return sizeof(int64_t);
    case T_U8: return 1;
    }
    return 1;
}

static double elem_value(const void *v, elem_type t, int64_t i)
{
    switch (t) {
    case T_F32: return ((const float *)v)[i];
    case T_F64: return ((const double *)v)[i];
    case T_I32: return ((const int32_t *)v)[i];
    case T_I64: return (double)((const int64_t *)v)[i];
    case T_U8: return ((const uint8_t *)v)[i];
    }
    return 0;
}

typedef enum {
    B_IN,      /* read by the op: must come back unchanged */
    B_OUT,     /* written or accumulated into: compared */
    B_SCRATCH, /* the op's workspace: not compared */
    B_NONE,    /* a NULL argument */
    B_RESULT   /* what the op hands back by value or through a struct: host memory */
} buf_role;

typedef struct buf {
    const char *name;
    elem_type type;
    buf_role role;
    int64_t n;         /* elements the op may touch; GUARD more follow */
    double tol;        /* B_OUT, B_RESULT */
    const char *group; /* reported on a line of its own (NULL: the case's line) */
    void *init;        /* the contents before the call */
    void *mem[2];      /* each side's copy */
    bool managed[2];
    void *run1;        /* the cuda side's contents after its first run */
} buf;

#define MAX_BUFS 10

/* Scalar arguments; each case sets the ones its op takes. */
typedef struct args {
    int64_t n, m, k, lda, ldb, ldc;
    bool ta, tb, accumulate;
    int64_t count, stride_a, stride_b, stride_c;
    float alpha, beta, p, slope, eps, grad_scale;
    uint64_t seed, stream, offset, head_stride;
    int64_t rows, cols, rb, re, f, ldx, ldy, row_stride;
    int heads;
    int64_t head_dim, src_stride, dst_stride, x_stride;
    int64_t batch, seq, dim;
    bv_adam_params adam;
} args;

typedef struct tcase tcase;
/* Runs the op on one side: p[i] is that side's copy of buffer i (NULL for B_NONE). */
typedef void (*call_fn)(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                        void *const *p);

struct tcase {
    const char *op;
    char variant[112];
    call_fn ref_call, test_call;
    bool ref_is_cuda; /* a consistency check of the cuda plugin against itself */
    bool scatter;     /* the cuda plugin may sum with atomics: runs may differ in the bits */
    double tol;       /* of outputs added without their own */
    int graph;
    args a;
    int nbuf;
    buf b[MAX_BUFS];
    char notes[1024]; /* indented lines under the case's line */
    bool note_fails;  /* a note that fails the case (crash, changed input, other bits) */
};

static tcase *case_new(const char *op, call_fn call, double tol, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static tcase *case_new(const char *op, call_fn call, double tol, const char *fmt, ...)
{
    alarm(host_timeout); /* until the end of run_case */
    tcase *k = calloc(1, sizeof *k);
    if (!k)
        abort();
    k->op = op;
    k->ref_call = k->test_call = call;
    k->tol = tol;
    k->graph = G_NONE;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->variant, sizeof k->variant, fmt, ap);
    va_end(ap);
    return k;
}

static void note(tcase *k, bool fails, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void note(tcase *k, bool fails, const char *fmt, ...)
{
    size_t used = strlen(k->notes);
    if (used + 8 >= sizeof k->notes)
        return;
    va_list ap;
    va_start(ap, fmt);
    snprintf(k->notes + used, sizeof k->notes - used, "    ");
    used += 4;
    vsnprintf(k->notes + used, sizeof k->notes - used, fmt, ap);
    va_end(ap);
    used = strlen(k->notes);
    if (used + 1 < sizeof k->notes)
        strcat(k->notes, "\n");
    k->note_fails |= fails;
}

static void *add_buf(tcase *k, const char *name, elem_type t, buf_role role, int64_t n,
                     double tol, const char *group)
{
    if (k->nbuf == MAX_BUFS) {
        fprintf(stderr, "test_compute_cuda: %s has more than %d buffers\n", k->op, MAX_BUFS);
        abort();
    }
    buf *b = &k->b[k->nbuf++];
    *b = (buf){.name = name, .type = t, .role = role, .n = n, .tol = tol, .group = group};
    if (role == B_NONE)
        return NULL;
    int64_t total = n + GUARD;
    b->init = xmalloc((size_t)total * elem_size(t));
    for (int64_t i = 0; i < total; i++) {
        switch (t) {
        case T_F32: ((float *)b->init)[i] = rng_float(-1, 1); break;
        case T_F64: ((double *)b->init)[i] = rng_float(-1, 1); break;
        case T_I32: ((int32_t *)b->init)[i] = (int32_t)(uint32_t)rng_next(); break;
        case T_I64: ((int64_t *)b->init)[i] = (int64_t)(rng_next() >> 1); break;
        case T_U8: ((uint8_t *)b->init)[i] = (uint8_t)rng_next(); break;
        }
    }
    return b->init;
}

static float *in_f32(tcase *k, const char *name, int64_t n, float lo, float hi)
{
    float *v = add_buf(k, name, T_F32, B_IN, n, 0, NULL);
    fill(v, n, lo, hi);
    return v;
}

/* An output, starting at random values in [-1, 1) (the same on both sides). */
static float *out_f32(tcase *k, const char *name, int64_t n)
{
    return add_buf(k, name, T_F32, B_OUT, n, k->tol, NULL);
}

static void none(tcase *k, const char *name)
{
    add_buf(k, name, T_F32, B_NONE, 0, 0, NULL);
}

/* ---- guarded runs: a crash or a hang fails one case, not the run ---------------------- */

static sigjmp_buf guard_jmp;
static volatile sig_atomic_t guard_active, guard_signal;
static const char *volatile guard_stage = "";
static int timeouts_in_a_row;
static bool cuda_hung; /* three cases in a row timed out: the cuda side is not called again */
static const tcase *volatile current_case;

/* Outside an op, a signal means the test itself cannot go on: most likely the heap was
 * corrupted by an op that crashed earlier (its case says so above), and a malloc hangs or
 * aborts. Say so (write: async-signal-safe) and end; the lines above are the results. */
static void on_fatal_signal(int sig)
{
    if (guard_active) {
        guard_active = 0;
        guard_signal = sig;
        siglongjmp(guard_jmp, 1);
    }
    static const char hung[] = "\ntest_compute_cuda: stopped: the test hung outside the cuda "
                               "ops (a heap corrupted by an op that failed above, or a device "
                               "that no longer answers?)\n";
    static const char died[] = "\ntest_compute_cuda: stopped: a signal outside the cuda ops "
                               "(a heap corrupted by an op that failed above?)\n";
    if (sig == SIGALRM) {
        ssize_t w = write(STDOUT_FILENO, hung, sizeof hung - 1);
        (void)w;
        _exit(1);
    }
    ssize_t w = write(STDOUT_FILENO, died, sizeof died - 1);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_signal_handlers(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/* Runs body(ctx) with the guard on and case_timeout seconds; false when a signal or the
 * alarm cut it short. Either way the alarm is then set to host_timeout: it stays armed
 * through a whole case (case_new to the end of run_case), so that a hang in the test's own
 * code after a crash (a heap the op corrupted) ends the run instead of stalling it. */
static bool run_guarded(void (*body)(void *), void *ctx)
{
    if (sigsetjmp(guard_jmp, 1)) {
        alarm(host_timeout);
        return false;
    }
    guard_signal = 0;
    guard_active = 1;
    alarm(case_timeout);
    body(ctx);
    guard_active = 0;
    alarm(host_timeout);
    return true;
}

static bool crashed_once; /* an op crashed: the instance is not destroyed at the end */

static const char *signal_words(int sig)
{
    switch (sig) {
    case SIGSEGV: return "crashed (SIGSEGV)";
    case SIGBUS: return "crashed (SIGBUS)";
    case SIGFPE: return "crashed (SIGFPE)";
    case SIGILL: return "crashed (SIGILL)";
    case SIGABRT: return "aborted (SIGABRT; the plugin's message is on stderr)";
    case SIGALRM: return "timed out";
    }
    return "stopped by a signal";
}

/* If a plugin calls exit() in the middle of a case, say where. */
static void at_exit_report(void)
{
    const tcase *k = current_case;
    if (k)
        printf("\nexit() was called during %s %s (%s): the run ended early\n", k->op,
               k->variant, guard_stage);
}

/* ---- reporting ------------------------------------------------------------------------- */

static int n_cases, n_failed;
static char failed_list[8192];

static void report_line(const char *op, const char *variant, bool numbers, double max_abs,
                        double max_rel, double tol, bool pass)
{
    char tolbuf[16], abuf[16], rbuf[16];
    if (tol == EXACT)
        snprintf(tolbuf, sizeof tolbuf, "exact");
    else
        snprintf(tolbuf, sizeof tolbuf, "%.0e", tol);
    snprintf(abuf, sizeof abuf, numbers ? "%.3g" : "-", max_abs);
    snprintf(rbuf, sizeof rbuf, numbers ? "%.3g" : "-", max_rel);
    printf("%-30s %-64s %9s %9s %6s %s\n", op, variant, abuf, rbuf, tolbuf,
           pass ? "PASS" : "FAIL");
    n_cases++;
    if (!pass) {
        n_failed++;
        size_t used = strlen(failed_list);
        if (used + 200 < sizeof failed_list)
            snprintf(failed_list + used, sizeof failed_list - used, "  %s %s\n", op, variant);
    }
}

typedef struct cmp {
    double max_abs, max_rel;
    int64_t bad, worst; /* elements out of tolerance (or other bits, when exact); the worst */
    double worst_err, worst_test, worst_ref;
    bool bad_only_zero_sign;
} cmp;

/* Compares n + GUARD elements of test against ref as b's tolerance says, into r. */
static void compare(const buf *b, const void *test, const void *ref, cmp *r)
{
    int64_t total = b->n + GUARD;
    size_t es = elem_size(b->type);
    double rel_floor = REL_FLOOR;
    if (b->type == T_F32 || b->type == T_F64) {
        double biggest = 0.0;
        for (int64_t i = 0; i < total; i++) {
            double y = elem_value(ref, b->type, i);
            if (isfinite(y) && fabs(y) > biggest)
                biggest = fabs(y);
        }
        rel_floor = fmax(rel_floor, REL_FLOOR_FRACTION * biggest);
    }
    for (int64_t i = 0; i < total; i++) {
        bool same_bits = memcmp((const char *)test + i * es, (const char *)ref + i * es, es) == 0;
        double x = elem_value(test, b->type, i), y = elem_value(ref, b->type, i);
        double abs_err = 0.0, rel = 0.0;
        bool both_nan = isnan(x) && isnan(y);
        if (!same_bits && !both_nan) {
            if (!isfinite(x) || !isfinite(y))
                abs_err = rel = x == y ? 0.0 : INFINITY;
            else {
                abs_err = fabs(x - y);
                rel = abs_err / fmax(fabs(y), rel_floor);
            }
        }
        if (abs_err > r->max_abs)
            r->max_abs = abs_err;
        if (rel > r->max_rel)
            r->max_rel = rel;
        bool bad = b->tol == EXACT ? !same_bits && !both_nan : !(rel <= b->tol);
        if (bad) {
            if (r->bad == 0 || rel > r->worst_err) {
                r->worst = i;
                r->worst_err = rel;
                r->worst_test = x;
                r->worst_ref = y;
            }
            if (r->bad == 0)
                r->bad_only_zero_sign = true;
            r->bad_only_zero_sign &= x == y;
            r->bad++;
        }
    }
}

/* First element where a and b differ in their bits, or -1. */
static int64_t first_difference(const buf *b, const void *x, const void *y)
{
    size_t es = elem_size(b->type);
    for (int64_t i = 0; i < b->n + GUARD; i++)
        if (memcmp((const char *)x + i * es, (const char *)y + i * es, es))
            return i;
    return -1;
}

static const char *where(const buf *b, int64_t i, char *s, size_t len)
{
    if (i >= b->n)
        snprintf(s, len, "guard element %lld past the end", (long long)(i - b->n));
    else
        snprintf(s, len, "element %lld", (long long)i);
    return s;
}

/* ---- running a case -------------------------------------------------------------------- */

typedef struct case_run {
    tcase *k;
    void *p[2][MAX_BUFS];
    int64_t changed_after_run1[MAX_BUFS]; /* the cuda side's inputs after run 1: first change */
} case_run;

static void load_inputs(tcase *k, int side)
{
    for (int i = 0; i < k->nbuf; i++)
        if (k->b[i].role != B_NONE)
            memcpy(k->b[i].mem[side], k->b[i].init,
                   (size_t)(k->b[i].n + GUARD) * elem_size(k->b[i].type));
}

static void case_body(void *ctx)
{
    case_run *r = ctx;
    tcase *k = r->k;
    const bv_compute_ops *ref_ops = k->ref_is_cuda ? cuda_ops : cpu_ops;
    bv_compute *ref_c = k->ref_is_cuda ? cuda_c : cpu_c;
    guard_stage = "loading the reference's inputs";
    load_inputs(k, SIDE_REF);
    guard_stage = k->ref_is_cuda ? "the reference calls (cuda)" : "the cpu op";
    k->ref_call(ref_ops, ref_c, k, SIDE_REF, r->p[SIDE_REF]);
    for (int run = 1; run <= 2; run++) {
        guard_stage = "loading the cuda op's inputs";
        load_inputs(k, SIDE_TEST);
        guard_stage = run == 1 ? "the cuda op (run 1)" : "the cuda op (run 2)";
        k->test_call(cuda_ops, cuda_c, k, SIDE_TEST, r->p[SIDE_TEST]);
        guard_stage = "reading the cuda op's outputs";
        for (int i = 0; i < k->nbuf && run == 1; i++) {
            buf *b = &k->b[i];
            size_t bytes = (size_t)(b->n + GUARD) * elem_size(b->type);
            if (b->role == B_OUT || b->role == B_RESULT) {
                b->run1 = xmalloc(bytes);
                memcpy(b->run1, b->mem[SIDE_TEST], bytes);
            }
            if (b->role == B_IN)
                r->changed_after_run1[i] = first_difference(b, b->mem[SIDE_TEST], b->init);
        }
    }
}

/* Checks and reports a case that ran to its end. */
static void judge(tcase *k, const case_run *r)
{
    char s[64];
    for (int i = 0; i < k->nbuf; i++) {
        buf *b = &k->b[i];
        if (b->role != B_IN)
            continue;
        int64_t d = r->changed_after_run1[i];
        if (d < 0)
            d = first_difference(b, b->mem[SIDE_TEST], b->init);
        if (d >= 0)
            note(k, true, "input %s was changed by the cuda op (%s)", b->name,
                 where(b, d, s, sizeof s));
        d = first_difference(b, b->mem[SIDE_REF], b->init);
        if (d >= 0)
            note(k, true, "input %s was changed by the %s op (%s)", b->name,
                 k->ref_is_cuda ? "reference" : "cpu", where(b, d, s, sizeof s));
    }
    for (int i = 0; i < k->nbuf; i++) {
        buf *b = &k->b[i];
        if ((b->role != B_OUT && b->role != B_RESULT) || !b->run1)
            continue;
        int64_t d = first_difference(b, b->run1, b->mem[SIDE_TEST]);
        if (d >= 0) {
            if (k->scatter)
                note(k, false, "note: %s differs between two cuda runs in its last bits (%s: "
                     "%.9g vs %.9g): atomics, allowed for this scatter", b->name,
                     where(b, d, s, sizeof s), elem_value(b->run1, b->type, d),
                     elem_value(b->mem[SIDE_TEST], b->type, d));
            else
                note(k, true, "%s: a second cuda run gave other bits (%s: %.9g, then %.9g)",
                     b->name, where(b, d, s, sizeof s), elem_value(b->run1, b->type, d),
                     elem_value(b->mem[SIDE_TEST], b->type, d));
        }
    }

    /* One line per group of outputs: the case's own, then each named group. */
    const char *groups[MAX_BUFS + 1];
    int ngroups = 0;
    groups[ngroups++] = NULL;
    for (int i = 0; i < k->nbuf; i++) {
        const char *g = k->b[i].group;
        bool seen = g == NULL;
        for (int j = 1; j < ngroups && !seen; j++)
            seen = strcmp(groups[j], g) == 0;
        if (!seen && (k->b[i].role == B_OUT || k->b[i].role == B_RESULT))
            groups[ngroups++] = g;
    }
    for (int gi = 0; gi < ngroups; gi++) {
        double max_abs = 0, max_rel = 0, tol = k->tol;
        bool pass = gi == 0 ? !k->note_fails : true, tol_set = false;
        char details[1024] = "";
        for (int i = 0; i < k->nbuf; i++) {
            buf *b = &k->b[i];
            if ((b->role != B_OUT && b->role != B_RESULT) || !b->run1)
                continue;
            if ((b->group == NULL) != (groups[gi] == NULL) ||
                (b->group && strcmp(b->group, groups[gi])))
                continue;
            if (!tol_set) {
                tol = b->tol;
                tol_set = true;
            }
            cmp c1 = {0}, c2 = {0};
            compare(b, b->run1, b->mem[SIDE_REF], &c1);
            compare(b, b->mem[SIDE_TEST], b->mem[SIDE_REF], &c2);
            const cmp *c = c2.bad > c1.bad || c2.max_rel > c1.max_rel ? &c2 : &c1;
            max_abs = fmax(max_abs, fmax(c1.max_abs, c2.max_abs));
            max_rel = fmax(max_rel, fmax(c1.max_rel, c2.max_rel));
            if (c->bad) {
                pass = false;
                size_t used = strlen(details);
                snprintf(details + used, sizeof details - used,
                         "    %s: %lld of %lld elements off; worst %s: cuda %.9g, %s %.9g%s\n",
                         b->name, (long long)c->bad, (long long)(b->n + GUARD),
                         where(b, c->worst, s, sizeof s), c->worst_test,
                         k->ref_is_cuda ? "reference" : "cpu", c->worst_ref,
                         c->bad_only_zero_sign ? " (only the sign of zero differs)" : "");
            }
        }
        char variant[160];
        if (groups[gi])
            snprintf(variant, sizeof variant, "%s: %s [%s]", pass_name[mem_pass], k->variant,
                     groups[gi]);
        else
            snprintf(variant, sizeof variant, "%s: %s", pass_name[mem_pass], k->variant);
        report_line(k->op, variant, true, max_abs, max_rel, tol, pass);
        fputs(details, stdout);
        if (gi == 0)
            fputs(k->notes, stdout);
    }
}

static void run_case(tcase *k)
{
    case_run r = {.k = k};
    for (int i = 0; i < k->nbuf; i++) {
        r.changed_after_run1[i] = -1;
        buf *b = &k->b[i];
        if (b->role == B_NONE)
            continue;
        size_t bytes = (size_t)(b->n + GUARD) * elem_size(b->type);
        b->mem[SIDE_REF] = xmalloc(bytes);
        if (b->role == B_RESULT)
            b->mem[SIDE_TEST] = xmalloc(bytes);
        else
            b->mem[SIDE_TEST] = side_alloc(SIDE_TEST, bytes, i, &b->managed[SIDE_TEST]);
        r.p[SIDE_REF][i] = b->mem[SIDE_REF];
        r.p[SIDE_TEST][i] = b->mem[SIDE_TEST];
    }
    if (cuda_hung) {
        char variant[160];
        snprintf(variant, sizeof variant, "%s: %s", pass_name[mem_pass], k->variant);
        report_line(k->op, variant, false, 0, 0, k->tol, false);
        printf("    not run: the cuda op timed out in three cases in a row\n");
    } else {
        current_case = k;
        bool finished = run_guarded(case_body, &r);
        current_case = NULL;
        if (finished) {
            timeouts_in_a_row = 0;
            judge(k, &r);
        } else {
            int sig = guard_signal;
            crashed_once = true;
            char variant[160];
            snprintf(variant, sizeof variant, "%s: %s", pass_name[mem_pass], k->variant);
            report_line(k->op, variant, false, 0, 0, k->tol, false);
            printf("    %s in %s\n", signal_words(sig), guard_stage);
            fputs(k->notes, stdout);
            if (sig == SIGALRM) {
                case_timeout = case_timeout > 15 ? 15 : case_timeout;
                cuda_stalled = true;
                cuda_hung = ++timeouts_in_a_row >= 3;
            }
        }
    }
    fflush(stdout);
    for (int i = 0; i < k->nbuf; i++) {
        buf *b = &k->b[i];
        free(b->init);
        free(b->run1);
        free(b->mem[SIDE_REF]);
        if (b->mem[SIDE_TEST])
            side_free(b->mem[SIDE_TEST], b->managed[SIDE_TEST]);
    }
    free(k);
    alarm(0);
}

static const bv_csr *graph_for(const tcase *k, int side)
{
    return &side_graph[side][k->graph]->csr;
}

/* ---- dense: gemm, gemm_batched ------------------------------------------------------- */

static void call_gemm(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                      void *const *p)
{
    const args *a = &k->a;
    o->gemm(c, a->ta, a->tb, a->m, a->n, a->k, a->alpha, p[0], a->lda, p[1], a->ldb, a->beta,
            p[2], a->ldc);
}

/* lda, ldb, ldc wider than the matrices by 3, 5 and 7. */
static void case_gemm(bool ta, bool tb, int64_t kdim, float beta, bool nan_c)
{
    tcase *k = case_new("gemm", call_gemm, TOL_SUM, "%c%c m=%d n=%d k=%lld beta=%g%s, ld +3/+5/+7",
                        ta ? 'T' : 'N', tb ? 'T' : 'N', ROWS, FEAT, (long long)kdim,
                        (double)beta, nan_c ? " (C holds NaN)" : "");
    args *a = &k->a;
    a->ta = ta;
    a->tb = tb;
    a->m = ROWS;
    a->n = FEAT;
    a->k = kdim;
    a->alpha = 1.3f;
    a->beta = beta;
    a->lda = (ta ? a->m : a->k) + 3;
    a->ldb = (tb ? a->k : a->n) + 5;
    a->ldc = a->n + 7;
    in_f32(k, "a", (ta ? a->k : a->m) * a->lda, -1, 1);
    in_f32(k, "b", (tb ? a->n : a->k) * a->ldb, -1, 1);
    float *cm = out_f32(k, "c", a->m * a->ldc);
    if (nan_c) /* beta 0 means C is not read: NaN * 0 must not reach it */
        for (int64_t i = 0; i < a->m * a->ldc; i++)
            cm[i] = NAN;
    run_case(k);
}

static void call_gemm_batched(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                              void *const *p)
{
    const args *a = &k->a;
    o->gemm_batched(c, a->count, a->ta, a->tb, a->m, a->n, a->k, a->alpha, p[0], a->lda,
                    a->stride_a, p[1], a->ldb, a->stride_b, a->beta, p[2], a->ldc, a->stride_c);
}

static void case_gemm_batched(bool ta, bool tb, float beta)
{
    tcase *k = case_new("gemm_batched", call_gemm_batched, TOL_SUM,
                        "%c%c 5 x (%d x %d x %d) beta=%g, ld and stride padded", ta ? 'T' : 'N',
                        tb ? 'T' : 'N', SEQ, HEAD_DIM + 6, FEAT, (double)beta);
    args *a = &k->a;
    a->count = 5;
    a->ta = ta;
    a->tb = tb;
    a->m = SEQ;
    a->n = HEAD_DIM + 6;
    a->k = FEAT;
    a->alpha = 0.8f;
    a->beta = beta;
    a->lda = (ta ? a->m : a->k) + 2;
    a->stride_a = (ta ? a->k : a->m) * a->lda + 5;
    a->ldb = (tb ? a->k : a->n) + 3;
    a->stride_b = (tb ? a->n : a->k) * a->ldb + 7;
    a->ldc = a->n + 4;
    a->stride_c = a->m * a->ldc + 3;
    in_f32(k, "a", a->count * a->stride_a, -1, 1);
    in_f32(k, "b", a->count * a->stride_b, -1, 1);
    out_f32(k, "c", a->count * a->stride_c);
    run_case(k);
}

/* ---- spmm ------------------------------------------------------------------------------ */

static void call_spmm(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                      void *const *p)
{
    o->spmm(c, graph_for(k, side), k->a.rb, k->a.re, p[0], k->a.f, p[1]);
}

static void case_spmm(int g, int64_t rb, int64_t re, int64_t f)
{
    tcase *k = case_new("spmm", call_spmm, TOL_SUM, "%s rows [%lld, %lld) f=%lld", graph_name[g],
                        (long long)rb, (long long)re, (long long)f);
    k->graph = g;
    k->a.rb = rb;
    k->a.re = re;
    k->a.f = f;
    in_f32(k, "x", host_graph[g].ncols * f, -1, 1);
    out_f32(k, "y", (re - rb) * f);
    run_case(k);
}

/* Widths for the sparse kernels, which pick a group of 4, 8, 16 or 32 lanes by the row's
 * width, 2 or 4 columns a lane past 32 and 64, float4 units past 128 when the widths and
 * strides are multiples of 4 (160, 600), and sweep rows wider than a tile (128 columns, 512
 * in float4 units) a tile at a time (161, 600). A plain spmm of a width that is a multiple
 * of 4 up to 128 takes the split rows (cuda_rows.cuh): 1, 2, 4, ... 32 lanes an edge, the
 * last with lanes past the row (12: 3 units on 4 lanes; 100: 25 on 32). */
static const int64_t sparse_widths[] = {3, 4, 7, 8, 12, 13, 16, 29, 32, 64, 100, 128, 160,
                                        161, 600};

/* ---- elementwise ----------------------------------------------------------------------- */

static void call_relu_forward(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                              void *const *p)
{
    o->relu_forward(c, k->a.n, p[0], p[1]);
}

static void call_relu_forward_in_place(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                       int side, void *const *p)
{
    o->relu_forward(c, k->a.n, p[0], p[0]);
}

static void call_relu_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                               int side, void *const *p)
{
    o->relu_backward(c, k->a.n, p[0], p[1], p[2]);
}

static void call_relu_backward_in_place(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                        int side, void *const *p)
{
    o->relu_backward(c, k->a.n, p[0], p[1], p[1]);
}

static void cases_relu(void)
{
    tcase *k = case_new("relu_forward", call_relu_forward, EXACT, "n=%lld, zeros of both signs",
                        (long long)N_ELEM);
    k->a.n = N_ELEM;
    sprinkle_zeros(in_f32(k, "x", N_ELEM, -1, 1), N_ELEM);
    out_f32(k, "y", N_ELEM);
    run_case(k);

    /* past 65536 blocks of 256: the kernels' grid-stride loop takes a second turn */
    k = case_new("relu_forward", call_relu_forward, EXACT, "n=%lld (past one grid)",
                 (long long)N_LARGE);
    k->a.n = N_LARGE;
    in_f32(k, "x", N_LARGE, -1, 1);
    out_f32(k, "y", N_LARGE);
    run_case(k);

    k = case_new("relu_forward", call_relu_forward_in_place, EXACT, "n=%lld, in place (y = x)",
                 (long long)N_ELEM);
    k->a.n = N_ELEM;
    sprinkle_zeros(out_f32(k, "x=y", N_ELEM), N_ELEM);
    run_case(k);

    for (int in_place = 0; in_place <= 1; in_place++) {
        k = case_new("relu_backward", in_place ? call_relu_backward_in_place : call_relu_backward,
                     EXACT, "n=%lld%s", (long long)N_ELEM, in_place ? ", in place (dx = dy)" : "");
        k->a.n = N_ELEM;
        float *y = in_f32(k, "y", N_ELEM, -1, 1);
        for (int64_t i = 0; i < N_ELEM; i++) /* a forward output: zeros where x <= 0 */
            y[i] = y[i] > 0 ? y[i] : 0.0f;
        if (in_place)
            out_f32(k, "dy=dx", N_ELEM);
        else {
            in_f32(k, "dy", N_ELEM, -1, 1);
            out_f32(k, "dx", N_ELEM);
        }
        run_case(k);
    }
}

static void call_dropout_forward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                 int side, void *const *p)
{
    const args *a = &k->a;
    o->dropout_forward(c, a->n, a->p, a->seed, a->stream, a->offset, p[0], p[1]);
}

static void call_dropout_forward_in_place(const bv_compute_ops *o, bv_compute *c,
                                          const tcase *k, int side, void *const *p)
{
    const args *a = &k->a;
    o->dropout_forward(c, a->n, a->p, a->seed, a->stream, a->offset, p[0], p[0]);
}

static void call_dropout_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                  int side, void *const *p)
{
    const args *a = &k->a;
    o->dropout_backward(c, a->n, a->p, a->seed, a->stream, a->offset, p[0], p[1]);
}

static void case_dropout(bool backward, float prob, uint64_t offset, bool in_place)
{
    call_fn call = backward   ? call_dropout_backward
                   : in_place ? call_dropout_forward_in_place
                              : call_dropout_forward;
    tcase *k = case_new(backward ? "dropout_backward" : "dropout_forward", call, EXACT,
                        "n=%lld p=%g offset=%llu%s", (long long)N_ELEM, (double)prob,
                        (unsigned long long)offset, in_place ? ", in place" : "");
    args *a = &k->a;
    a->n = N_ELEM;
    a->p = prob;
    a->seed = 42;
    a->stream = 7;
    a->offset = offset;
    if (in_place)
        sprinkle_zeros(out_f32(k, "x=y", N_ELEM), N_ELEM);
    else {
        sprinkle_zeros(in_f32(k, backward ? "dy" : "x", N_ELEM, -1, 1), N_ELEM);
        out_f32(k, backward ? "dx" : "y", N_ELEM);
    }
    run_case(k);
}

static void call_leaky_relu_forward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                    int side, void *const *p)
{
    o->leaky_relu_forward(c, k->a.n, k->a.slope, p[0], p[1]);
}

static void call_leaky_relu_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                     int side, void *const *p)
{
    o->leaky_relu_backward(c, k->a.n, k->a.slope, p[0], p[1], p[2]);
}

static void call_elu_forward(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                             void *const *p)
{
    o->elu_forward(c, k->a.n, p[0], p[1]);
}

static void call_elu_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                              void *const *p)
{
    o->elu_backward(c, k->a.n, p[0], p[1], p[2]);
}

static void call_gelu_forward(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                              void *const *p)
{
    o->gelu_forward(c, k->a.n, p[0], p[1]);
}

static void call_gelu_forward_in_place(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                       int side, void *const *p)
{
    o->gelu_forward(c, k->a.n, p[0], p[0]);
}

static void call_gelu_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                               int side, void *const *p)
{
    o->gelu_backward(c, k->a.n, p[0], p[1], p[2]);
}

static void call_gelu_backward_in_place(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                        int side, void *const *p)
{
    o->gelu_backward(c, k->a.n, p[0], p[1], p[1]);
}

/* An activation's forward (x -> y) or backward (x, dy -> dx), x in [lo, hi) with zeros. */
static void case_activation(const char *op, call_fn call, bool backward, bool in_place,
                            float lo, float hi)
{
    tcase *k = case_new(op, call, TOL_ELEMENTWISE, "n=%lld x in [%g, %g)%s", (long long)N_ELEM,
                        (double)lo, (double)hi, in_place ? ", in place" : "");
    k->a.n = N_ELEM;
    k->a.slope = 0.2f;
    if (!backward && in_place) {
        float *x = out_f32(k, "x=y", N_ELEM);
        fill(x, N_ELEM, lo, hi);
        sprinkle_zeros(x, N_ELEM);
    } else
        sprinkle_zeros(in_f32(k, "x", N_ELEM, lo, hi), N_ELEM);
    if (backward && in_place)
        out_f32(k, "dy=dx", N_ELEM);
    else if (backward) {
        in_f32(k, "dy", N_ELEM, -1, 1);
        out_f32(k, "dx", N_ELEM);
    } else if (!in_place)
        out_f32(k, "y", N_ELEM);
    run_case(k);
}

static void call_scale(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                       void *const *p)
{
    o->scale(c, k->a.n, k->a.alpha, p[0]);
}

/* zero (ABI 1.17) is the cuda plugin's alone: the reference is the host's memset */
static void call_zero(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                      void *const *p)
{
    if (o->zero)
        o->zero(c, k->a.n, p[0]);
    else
        memset(p[0], 0, (size_t)k->a.n * sizeof(float));
}

/* copy_rows (ABI 1.17): the reference is compute.h's host loop (the cpu plugin has none) */
static void call_copy_rows(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                           void *const *p)
{
    bv_copy_rows(o, c, k->a.rows, k->a.cols, p[0], k->a.ldx, p[1], k->a.ldy, k->a.accumulate);
}

static void call_axpy(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                      void *const *p)
{
    o->axpy(c, k->a.n, k->a.alpha, p[0], p[1]);
}

static void call_add_bias(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                          void *const *p)
{
    o->add_bias(c, k->a.rows, k->a.cols, p[0], p[1]);
}

static void call_bias_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                               int side, void *const *p)
{
    o->bias_backward(c, k->a.rows, k->a.cols, p[0], p[1], k->a.accumulate);
}

static void call_sum_squares(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                             void *const *p)
{
    *(double *)p[1] = o->sum_squares(c, k->a.n, p[0]);
}

static void cases_vector_ops(void)
{
    tcase *k = case_new("scale", call_scale, EXACT, "n=%lld alpha=-1.7", (long long)N_ELEM);
    k->a.n = N_ELEM;
    k->a.alpha = -1.7f;
    sprinkle_zeros(out_f32(k, "x", N_ELEM), N_ELEM);
    run_case(k);

    k = case_new("zero", call_zero, EXACT, "n=%lld", (long long)N_ELEM);
    k->a.n = N_ELEM;
    fill(out_f32(k, "x", N_ELEM), N_ELEM, -1, 1);
    run_case(k);

    for (int add = 0; add <= 1; add++) {
        k = case_new("copy_rows", call_copy_rows, EXACT, "%d x %d of ld %d into ld %d add=%d",
                     ROWS, FEAT - 5, FEAT, FEAT + 3, add);
        k->a.rows = ROWS;
        k->a.cols = FEAT - 5;
        k->a.ldx = FEAT;
        k->a.ldy = FEAT + 3;
        k->a.accumulate = add;
        in_f32(k, "x", (int64_t)ROWS * FEAT, -1, 1);
        fill(out_f32(k, "y", (int64_t)ROWS * (FEAT + 3)), (int64_t)ROWS * (FEAT + 3), -1, 1);
        run_case(k);
    }

    k = case_new("axpy", call_axpy, TOL_ELEMENTWISE, "n=%lld alpha=-0.75", (long long)N_ELEM);
    k->a.n = N_ELEM;
    k->a.alpha = -0.75f;
    in_f32(k, "x", N_ELEM, -1, 1);
    out_f32(k, "y", N_ELEM);
    run_case(k);

    k = case_new("add_bias", call_add_bias, TOL_ELEMENTWISE, "%d x %d", ROWS, FEAT);
    k->a.rows = ROWS;
    k->a.cols = FEAT;
    in_f32(k, "bias", FEAT, -1, 1);
    out_f32(k, "y", N_ELEM);
    run_case(k);

    for (int acc = 0; acc <= 1; acc++) {
        k = case_new("bias_backward", call_bias_backward, TOL_SUM, "%d x %d accumulate=%s", ROWS,
                     FEAT, acc ? "true" : "false");
        k->a.rows = ROWS;
        k->a.cols = FEAT;
        k->a.accumulate = acc;
        in_f32(k, "dy", N_ELEM, -1, 1);
        out_f32(k, "dbias", FEAT);
        run_case(k);
    }

    const int64_t lengths[] = {N_ELEM, 37, 1, N_LARGE};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        k = case_new("sum_squares", call_sum_squares, TOL_SUMSQ, "n=%lld x in [-3, 3)",
                     (long long)lengths[i]);
        k->a.n = lengths[i];
        in_f32(k, "x", lengths[i], -3, 3);
        add_buf(k, "sum", T_F64, B_RESULT, 1, TOL_SUMSQ, NULL);
        run_case(k);
    }
}

/* ---- softmax cross-entropy and Adam ---------------------------------------------------- */

static void call_softmax_xent(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                              void *const *p)
{
    const args *a = &k->a;
    bv_xent_result r = {0};
    o->softmax_xent(c, a->rows, a->cols, p[0], p[1], p[2], a->grad_scale, p[3], &r);
    double *loss = p[4];
    int64_t *counts = p[5];
    loss[0] = r.loss_sum;
    counts[0] = r.count;
    counts[1] = r.correct;
}

/* 301 rows of 37 logits in [-4, 4): label -1 on every 11th row, the mask off on every 4th,
 * every 13th row's label logit raised to 9 (counted right), and one logit of 1000. */
static void case_softmax_xent(bool use_mask, bool with_grad)
{
    tcase *k = case_new("softmax_xent", call_softmax_xent, TOL_SUM,
                        "%d x %d, mask %s, dlogits %s", ROWS, FEAT,
                        use_mask ? "set" : "NULL", with_grad ? "set" : "NULL");
    args *a = &k->a;
    a->rows = ROWS;
    a->cols = FEAT;
    a->grad_scale = 1.0f / 64.0f;
    float *logits = in_f32(k, "logits", N_ELEM, -4, 4);
    int32_t *labels = add_buf(k, "labels", T_I32, B_IN, ROWS, 0, NULL);
    uint8_t *mask = NULL;
    if (use_mask)
        mask = add_buf(k, "mask", T_U8, B_IN, ROWS, 0, NULL);
    else
        none(k, "mask");
    for (int64_t i = 0; i < ROWS; i++) {
        labels[i] = i % 11 == 3 ? -1 : (int32_t)(rng_next() % FEAT);
        if (mask)
            mask[i] = i % 4 != 1;
        if (i % 13 == 0) /* rows the argmax gets right, so `correct` counts something */
            logits[i * FEAT + (labels[i] < 0 ? 0 : labels[i])] = 9.0f;
    }
    logits[2 * FEAT + 1] = 1000.0f; /* must stay finite: the row max is subtracted */
    if (with_grad)
        out_f32(k, "dlogits", N_ELEM);
    else
        none(k, "dlogits");
    add_buf(k, "loss_sum", T_F64, B_RESULT, 1, TOL_SUM, NULL);
    add_buf(k, "count,correct", T_I64, B_RESULT, 2, EXACT, "count,correct");
    run_case(k);
}

static void call_adam(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                      void *const *p)
{
    o->adam_step(c, k->a.n, p[0], p[1], p[2], p[3], &k->a.adam);
}

static void case_adam(bool decoupled)
{
    tcase *k = case_new("adam_step", call_adam, TOL_ELEMENTWISE, "n=%lld %s step 5",
                        (long long)N_ELEM, decoupled ? "decoupled (AdamW) wd=0.01" : "L2 wd=5e-4");
    k->a.n = N_ELEM;
    k->a.adam = (bv_adam_params){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                 .weight_decay = decoupled ? 0.01f : 5e-4f,
                                 .decoupled = decoupled, .step = 5};
    out_f32(k, "param", N_ELEM);
    in_f32(k, "grad", N_ELEM, -1, 1);
    fill(out_f32(k, "m", N_ELEM), N_ELEM, -0.1f, 0.1f);
    fill(out_f32(k, "v", N_ELEM), N_ELEM, 0.0f, 0.01f);
    run_case(k);
}

/* ---- GAT edge kernels ------------------------------------------------------------------ */

static void call_edge_scores(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                             void *const *p)
{
    const args *a = &k->a;
    o->edge_scores(c, graph_for(k, side), a->rb, a->re, a->heads, p[0], a->src_stride, p[1],
                   a->dst_stride, p[2]);
}

static void call_edge_scores_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                      int side, void *const *p)
{
    const args *a = &k->a;
    o->edge_scores_backward(c, graph_for(k, side), a->rb, a->re, a->heads, p[0], p[1],
                            a->src_stride, p[2], a->dst_stride, a->accumulate);
}

static void call_edge_softmax(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                              void *const *p)
{
    o->edge_softmax(c, graph_for(k, side), k->a.rb, k->a.re, k->a.heads, p[0], p[1]);
}

static void call_edge_softmax_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                       int side, void *const *p)
{
    o->edge_softmax_backward(c, graph_for(k, side), k->a.rb, k->a.re, k->a.heads, p[0], p[1],
                             p[2]);
}

static void call_gather_heads(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                              void *const *p)
{
    const args *a = &k->a;
    o->gather_heads(c, graph_for(k, side), a->rb, a->re, a->heads, a->head_dim, p[0], p[1],
                    a->x_stride, p[2]);
}

static void call_gather_heads_backward_x(const bv_compute_ops *o, bv_compute *c,
                                         const tcase *k, int side, void *const *p)
{
    const args *a = &k->a;
    const graph_copy *gc = side_graph[side][G_AT];
    o->gather_heads_backward_x(c, &gc->csr, gc->perm, a->heads, a->head_dim, p[0], p[1], p[2],
                               a->x_stride);
}

static void call_gather_heads_backward_w(const bv_compute_ops *o, bv_compute *c,
                                         const tcase *k, int side, void *const *p)
{
    const args *a = &k->a;
    o->gather_heads_backward_w(c, graph_for(k, side), a->rb, a->re, a->heads, a->head_dim,
                               p[0], p[1], a->x_stride, p[2]);
}

/* A GAT case over rows [rb, re) of A, strides wider than the rows they hold: x_stride a
 * multiple of 4 where head_dim is (the kernels' float4 path needs both), odd otherwise. */
static tcase *edge_case(const char *op, call_fn call, double tol, int64_t rb, int64_t re,
                        int heads, int64_t head_dim)
{
    tcase *k = case_new(op, call, tol, "A rows [%lld, %lld) heads=%d", (long long)rb,
                        (long long)re, heads);
    k->graph = G_A;
    args *a = &k->a;
    a->rb = rb;
    a->re = re;
    a->heads = heads;
    a->head_dim = head_dim;
    a->src_stride = heads + 2;
    a->dst_stride = heads + 1;
    a->x_stride = heads * head_dim + (head_dim % 4 == 0 ? 4 : 5);
    return k;
}

/* Appends to a case's variant. */
static void variant_add(tcase *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void variant_add(tcase *k, const char *fmt, ...)
{
    size_t used = strlen(k->variant);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->variant + used, sizeof k->variant - used, fmt, ap);
    va_end(ap);
}

/* edge_scores, its backward (accumulate both ways, ddst strided or packed), edge_softmax and
 * its backward over rows [rb, re). */
static void cases_edge_scores_softmax(int64_t rb, int64_t re, int heads)
{
    const bv_csr *g = &host_graph[G_A];
    int64_t rows = re - rb, ne = range_edges(g, rb, re);

    tcase *k = edge_case("edge_scores", call_edge_scores, TOL_ELEMENTWISE, rb, re, heads, 1);
    in_f32(k, "src", g->ncols * k->a.src_stride, -1, 1);
    in_f32(k, "dst", rows * k->a.dst_stride, -1, 1);
    out_f32(k, "out", ne * heads);
    run_case(k);

    for (int acc = 0; acc <= 1; acc++)
        for (int packed = 0; packed <= 1; packed++) {
            k = edge_case("edge_scores_backward", call_edge_scores_backward, TOL_SUM, rb, re,
                          heads, 1);
            k->scatter = true;
            k->a.accumulate = acc;
            if (packed)
                k->a.dst_stride = heads;
            variant_add(k, "%s dst_stride=heads%s", acc ? " accumulate," : "",
                        packed ? "" : "+1");
            in_f32(k, "dout", ne * heads, -1, 1);
            out_f32(k, "dsrc", g->ncols * k->a.src_stride);
            out_f32(k, "ddst", rows * k->a.dst_stride);
            run_case(k);
        }

    k = edge_case("edge_softmax", call_edge_softmax, TOL_SUM, rb, re, heads, 1);
    variant_add(k, ", one logit 1000");
    float *z = in_f32(k, "z", ne * heads, -5, 5);
    z[heads * (ne / 2)] = 1000.0f;
    out_f32(k, "alpha", ne * heads);
    run_case(k);

    k = edge_case("edge_softmax_backward", call_edge_softmax_backward, TOL_SUM, rb, re, heads, 1);
    in_f32(k, "alpha", ne * heads, 0, 1);
    in_f32(k, "dalpha", ne * heads, -1, 1);
    out_f32(k, "dz", ne * heads);
    run_case(k);
}

/* gather_heads and its backward with respect to w over rows [rb, re). */
static void cases_gather(int64_t rb, int64_t re, int heads, int64_t head_dim)
{
    const bv_csr *g = &host_graph[G_A];
    int64_t rows = re - rb, ne = range_edges(g, rb, re);

    tcase *k = edge_case("gather_heads", call_gather_heads, TOL_SUM, rb, re, heads, head_dim);
    variant_add(k, " head_dim=%lld x_stride=%lld", (long long)head_dim,
                (long long)k->a.x_stride);
    in_f32(k, "w", ne * heads, -1, 1);
    in_f32(k, "x", g->ncols * k->a.x_stride, -1, 1);
    out_f32(k, "y", rows * heads * head_dim);
    run_case(k);

    k = edge_case("gather_heads_backward_w", call_gather_heads_backward_w, TOL_SUM, rb, re, heads,
                  head_dim);
    variant_add(k, " head_dim=%lld x_stride=%lld", (long long)head_dim,
                (long long)k->a.x_stride);
    in_f32(k, "dy", rows * heads * head_dim, -1, 1);
    in_f32(k, "x", g->ncols * k->a.x_stride, -1, 1);
    out_f32(k, "dw", ne * heads);
    run_case(k);
}

/* dx over all of A^T, with bv_csr_transpose_perm's map. */
static void case_gather_backward_x(int heads, int64_t head_dim)
{
    const bv_csr *gt = &host_graph[G_AT];
    tcase *k = edge_case("gather_heads_backward_x", call_gather_heads_backward_x, TOL_SUM, 0,
                         ROWS, heads, head_dim);
    snprintf(k->variant, sizeof k->variant,
             "A^T (all rows) with its perm, heads=%d head_dim=%lld x_stride=%lld", heads,
             (long long)head_dim, (long long)k->a.x_stride);
    k->graph = G_AT;
    in_f32(k, "w", gt->nnz * heads, -1, 1);
    in_f32(k, "dy", gt->ncols * heads * head_dim, -1, 1);
    out_f32(k, "dx", gt->nrows * k->a.x_stride);
    run_case(k);
}

/* Heads x head_dim shapes for the gathers: the kernels pick a group of 4, 8, 16 or 32 lanes
 * by the row's width, 2 or 4 columns a lane past 32 and 64, and float4 units past 128 when
 * head_dim and the strides are multiples of 4 (4 x 40); 2 x 50 is past 128 without. Up
 * to 128 columns with head_dim a multiple of 4 they take the split rows (1 x 8, 8 x 8 as
 * GAT's hidden layer, 2 x 4, 4 x 32, 3 x 4 with a lane past the row). */
static const int gather_shapes[][2] = {{HEADS, HEAD_DIM}, {1, 3}, {1, 7}, {2, 7}, {2, 25},
                                       {2, 50}, {4, 40}, {1, 8}, {8, 8}, {2, 4}, {4, 32},
                                       {3, 4}};

static void cases_edge(void)
{
    cases_edge_scores_softmax(0, ROWS, HEADS);
    cases_edge_scores_softmax(SUB_BEGIN, SUB_END, HEADS);
    cases_edge_scores_softmax(0, ROWS, 16); /* heads spread over lanes differently */
    cases_gather(0, ROWS, HEADS, HEAD_DIM);
    cases_gather(SUB_BEGIN, SUB_END, HEADS, HEAD_DIM);
    for (size_t i = 0; i < sizeof gather_shapes / sizeof gather_shapes[0]; i++) {
        if (i > 0)
            cases_gather(0, ROWS, gather_shapes[i][0], gather_shapes[i][1]);
        case_gather_backward_x(gather_shapes[i][0], gather_shapes[i][1]);
    }
}

/* ---- transformer kernels --------------------------------------------------------------- */

static void call_layernorm_forward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                   int side, void *const *p)
{
    const args *a = &k->a;
    o->layernorm_forward(c, a->rows, a->cols, a->eps, p[0], p[1], p[2], p[3], p[4], p[5]);
}

static void call_layernorm_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                    int side, void *const *p)
{
    const args *a = &k->a;
    o->layernorm_backward(c, a->rows, a->cols, p[0], p[1], p[2], p[3], p[4], p[5],
                          a->accumulate, p[6], p[7]);
}

static void cases_layernorm(void)
{
    for (int with_beta = 0; with_beta <= 1; with_beta++) {
        tcase *k = case_new("layernorm_forward", call_layernorm_forward, TOL_SUM,
                            "%d x %d beta %s", ROWS, FEAT, with_beta ? "set" : "NULL");
        k->a.rows = ROWS;
        k->a.cols = FEAT;
        k->a.eps = 1e-5f;
        in_f32(k, "x", N_ELEM, -2, 2);
        in_f32(k, "gamma", FEAT, 0.5f, 1.5f);
        if (with_beta)
            in_f32(k, "beta", FEAT, -0.5f, 0.5f);
        else
            none(k, "beta");
        out_f32(k, "y", N_ELEM);
        out_f32(k, "mean", ROWS);
        out_f32(k, "rstd", ROWS);
        run_case(k);
    }
    for (int with_beta = 0; with_beta <= 1; with_beta++)
        for (int acc = 0; acc <= 1; acc++) {
            tcase *k = case_new("layernorm_backward", call_layernorm_backward, TOL_SUM,
                                "%d x %d dbeta %s accumulate=%s", ROWS, FEAT,
                                with_beta ? "set" : "NULL", acc ? "true" : "false");
            k->a.rows = ROWS;
            k->a.cols = FEAT;
            k->a.accumulate = acc;
            float *x = in_f32(k, "x", N_ELEM, -2, 2);
            float *gamma = in_f32(k, "gamma", FEAT, 0.5f, 1.5f);
            float *mean = in_f32(k, "mean", ROWS, 0, 0);
            float *rstd = in_f32(k, "rstd", ROWS, 0, 0);
            float *y = xmalloc((size_t)N_ELEM * sizeof *y); /* the forward's, for mean, rstd */
            cpu_ops->layernorm_forward(cpu_c, ROWS, FEAT, 1e-5f, x, gamma, NULL, y, mean, rstd);
            free(y);
            in_f32(k, "dy", N_ELEM, -1, 1);
            out_f32(k, "dx", N_ELEM);
            out_f32(k, "dgamma", FEAT);
            if (with_beta)
                out_f32(k, "dbeta", FEAT);
            else
                none(k, "dbeta");
            run_case(k);
        }
}

static void call_attention_forward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                   int side, void *const *p)
{
    const args *a = &k->a;
    o->attention_forward(c, a->batch, a->seq, a->heads, a->head_dim, p[0], p[1], p[2]);
}

static void call_attention_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                    int side, void *const *p)
{
    const args *a = &k->a;
    o->attention_backward(c, a->batch, a->seq, a->heads, a->head_dim, p[0], p[1], p[2], p[3],
                          p[4]);
}

/* Attention of one shape, forward and backward (att from the cpu's forward). */
static void cases_attention_shape(int64_t batch, int64_t seq, int heads, int64_t head_dim)
{
    const int64_t t = batch * seq, width = heads * head_dim, att = batch * heads * seq * seq;
    for (int backward = 0; backward <= 1; backward++) {
        tcase *k = case_new(backward ? "attention_backward" : "attention_forward",
                            backward ? call_attention_backward : call_attention_forward, TOL_SUM,
                            "batch=%lld seq=%lld heads=%d head_dim=%lld", (long long)batch,
                            (long long)seq, heads, (long long)head_dim);
        args *a = &k->a;
        a->batch = batch;
        a->seq = seq;
        a->heads = heads;
        a->head_dim = head_dim;
        float *qkv = in_f32(k, "qkv", t * 3 * width, -1.5f, 1.5f);
        if (!backward) {
            out_f32(k, "att", att);
            out_f32(k, "out", t * width);
        } else {
            float *probs = in_f32(k, "att", att, 0, 0);
            float *out = xmalloc((size_t)(t * width) * sizeof *out);
            cpu_ops->attention_forward(cpu_c, batch, seq, heads, head_dim, qkv, probs, out);
            free(out);
            in_f32(k, "dout", t * width, -1, 1);
            add_buf(k, "scratch", T_F32, B_SCRATCH, att, 0, NULL);
            out_f32(k, "dqkv", t * 3 * width);
        }
        run_case(k);
    }
}

/* 19 x 7 fits one of the kernels' 64 x 64 tiles (and one 16-deep k step); 70 x 20 takes
 * several, with tiles above the diagonal skipped and partial tiles at the edges. */
static void cases_attention(void)
{
    cases_attention_shape(BATCH, SEQ, HEADS, HEAD_DIM);
    cases_attention_shape(BATCH, 70, 2, 20);
}

static void call_embedding_forward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                   int side, void *const *p)
{
    const args *a = &k->a;
    o->embedding_forward(c, a->batch, a->seq, a->dim, p[0], p[1], p[2], p[3]);
}

static void call_embedding_backward(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                    int side, void *const *p)
{
    const args *a = &k->a;
    o->embedding_backward(c, a->batch, a->seq, a->dim, p[0], p[1], p[2], p[3]);
}

static void cases_embedding(void)
{
    const int64_t t = BATCH * SEQ;
    for (int backward = 0; backward <= 1; backward++)
        for (int with_wpe = 0; with_wpe <= 1; with_wpe++) {
            tcase *k = case_new(backward ? "embedding_backward" : "embedding_forward",
                                backward ? call_embedding_backward : call_embedding_forward,
                                backward ? TOL_SUM : EXACT,
                                "%d x %d x %d, vocab %d, repeated tokens, %s %s", BATCH, SEQ,
                                FEAT, VOCAB, backward ? "dwpe" : "wpe",
                                with_wpe ? "set" : "NULL");
            k->scatter = backward;
            k->a.batch = BATCH;
            k->a.seq = SEQ;
            k->a.dim = FEAT;
            int32_t *tokens = add_buf(k, "tokens", T_I32, B_IN, t, 0, NULL);
            for (int64_t i = 0; i < t; i++)
                tokens[i] = i % 5 == 0 ? 3 : (int32_t)(rng_next() % VOCAB);
            tokens[t - 1] = VOCAB - 1;
            if (!backward) {
                in_f32(k, "wte", VOCAB * FEAT, -1, 1);
                if (with_wpe)
                    in_f32(k, "wpe", SEQ * FEAT, -1, 1);
                else
                    none(k, "wpe");
                out_f32(k, "out", t * FEAT);
            } else {
                in_f32(k, "dout", t * FEAT, -1, 1);
                out_f32(k, "dwte", VOCAB * FEAT);
                if (with_wpe)
                    out_f32(k, "dwpe", SEQ * FEAT);
                else
                    none(k, "dwpe");
            }
            run_case(k);
        }
}

/* ---- the sparse first layer ------------------------------------------------------------ */

static void call_spmm_dropout(const bv_compute_ops *o, bv_compute *c, const tcase *k, int side,
                              void *const *p)
{
    const args *a = &k->a;
    o->spmm_dropout(c, graph_for(k, side), a->p, a->seed, a->stream, a->offset, a->row_stride,
                    p[0], a->ldx, a->f, p[1], a->ldy);
}

static void call_spmm_dropout_backward_x(const bv_compute_ops *o, bv_compute *c,
                                         const tcase *k, int side, void *const *p)
{
    const args *a = &k->a;
    o->spmm_dropout_backward_x(c, graph_for(k, side), a->p, a->seed, a->stream, a->offset,
                               a->row_stride, p[0], a->ldy, a->f, p[1], a->ldx);
}

static void call_spmm_dropout_heads(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                    int side, void *const *p)
{
    const args *a = &k->a;
    o->spmm_dropout_heads(c, graph_for(k, side), a->p, a->seed, a->stream, a->offset,
                          a->head_stride, a->row_stride, a->heads, p[0], a->ldx, a->f, p[1],
                          a->ldy);
}

static void call_spmm_dropout_heads_backward_x(const bv_compute_ops *o, bv_compute *c,
                                               const tcase *k, int side, void *const *p)
{
    const args *a = &k->a;
    o->spmm_dropout_heads_backward_x(c, graph_for(k, side), a->p, a->seed, a->stream, a->offset,
                                     a->head_stride, a->row_stride, a->heads, p[0], a->ldy, a->f,
                                     p[1], a->ldx);
}

/* spmm_dropout_heads as compute.h defines it: one spmm_dropout per head. */
static void call_spmm_dropout_per_head(const bv_compute_ops *o, bv_compute *c, const tcase *k,
                                       int side, void *const *p)
{
    const args *a = &k->a;
    const float *x = p[0];
    float *y = p[1];
    for (int h = 0; h < a->heads; h++)
        o->spmm_dropout(c, graph_for(k, side), a->p, a->seed, a->stream,
                        a->offset + (uint64_t)h * a->head_stride, a->row_stride, x + h * a->f,
                        a->ldx, a->f, y + h * a->f, a->ldy);
}

static void call_spmm_dropout_backward_x_per_head(const bv_compute_ops *o, bv_compute *c,
                                                  const tcase *k, int side, void *const *p)
{
    const args *a = &k->a;
    const float *dy = p[0];
    float *dx = p[1];
    for (int h = 0; h < a->heads; h++)
        o->spmm_dropout_backward_x(c, graph_for(k, side), a->p, a->seed, a->stream,
                                   a->offset + (uint64_t)h * a->head_stride, a->row_stride,
                                   dy + h * a->f, a->ldy, a->f, dx + h * a->f, a->ldx);
}

/* A first-layer case on B (301 x 203, values): row_stride = B's columns, head_stride
 * 1000003; x (dx) rows heads * f + ldx_pad floats apart, y (dy) rows heads * f + ldy_pad. */
static tcase *bow_case(const char *op, call_fn call, double tol, float prob, uint64_t offset,
                       int heads, int64_t f, int64_t ldx_pad, int64_t ldy_pad)
{
    char heads_words[24] = "";
    if (heads > 1)
        snprintf(heads_words, sizeof heads_words, " heads=%d", heads);
    tcase *k = case_new(op, call, tol, "B p=%g offset=%llu%s f=%lld ldx=+%lld ldy=+%lld",
                        (double)prob, (unsigned long long)offset, heads_words, (long long)f,
                        (long long)ldx_pad, (long long)ldy_pad);
    k->graph = G_BOW;
    args *a = &k->a;
    a->p = prob;
    a->seed = 7;
    a->stream = 3;
    a->offset = offset;
    a->head_stride = 1000003;
    a->row_stride = BOW_COLS;
    a->heads = heads;
    a->f = f;
    a->ldx = heads * f + ldx_pad;
    a->ldy = heads * f + ldy_pad;
    return k;
}

/* The forward (y written) or the gradient (dx accumulated) of one shape. */
static void case_bow(bool backward, float prob, uint64_t offset, int heads, int64_t f,
                     int64_t ldx_pad, int64_t ldy_pad)
{
    static const char *const names[2][2] = {
        {"spmm_dropout", "spmm_dropout_backward_x"},
        {"spmm_dropout_heads", "spmm_dropout_heads_backward_x"}};
    static const call_fn calls[2][2] = {
        {call_spmm_dropout, call_spmm_dropout_backward_x},
        {call_spmm_dropout_heads, call_spmm_dropout_heads_backward_x}};
    bool h = heads > 1;
    const bv_csr *g = &host_graph[G_BOW];
    tcase *k = bow_case(names[h][backward], calls[h][backward], TOL_SUM, prob, offset, heads, f,
                        ldx_pad, ldy_pad);
    if (backward) {
        k->scatter = true;
        in_f32(k, "dy", g->nrows * k->a.ldy, -1, 1);
        out_f32(k, "dx", g->ncols * k->a.ldx);
    } else {
        in_f32(k, "x", g->ncols * k->a.ldx, -1, 1);
        out_f32(k, "y", g->nrows * k->a.ldy);
    }
    run_case(k);
}

static void cases_spmm_dropout(void)
{
    const uint64_t past_2_32 = (1ull << 32) - 20000; /* mask indices cross 2^32 */
    for (int backward = 0; backward <= 1; backward++) {
        /* one head; a packed and a padded y (a staged y with gaps is read in first) */
        case_bow(backward, 0.5f, 12345, 1, FEAT, 3, 0);
        case_bow(backward, 0.5f, 12345, 1, FEAT, 3, 5);
        case_bow(backward, 0.0f, 12345, 1, FEAT, 3, 5);
        case_bow(backward, 0.5f, past_2_32, 1, FEAT, 3, 5);
        for (size_t i = 0; i < sizeof sparse_widths / sizeof sparse_widths[0]; i++) {
            int64_t f = sparse_widths[i], pad = f % 4 == 0 ? 4 : 3;
            case_bow(backward, 0.5f, 12345, 1, f, pad, pad);
        }
        /* heads: 3 x 7, 4 x 40 (float4 units past 128), 34 x 2 (two sweeps of at most 32) */
        case_bow(backward, 0.5f, 12345, HEADS, HEAD_DIM, 3, 0);
        case_bow(backward, 0.5f, 12345, HEADS, HEAD_DIM, 3, 4);
        case_bow(backward, 0.0f, 12345, HEADS, HEAD_DIM, 3, 4);
        case_bow(backward, 0.5f, past_2_32, HEADS, HEAD_DIM, 3, 4);
        case_bow(backward, 0.5f, 12345, 4, 40, 4, 8);
        case_bow(backward, 0.5f, 12345, 34, 2, 3, 5);
    }

    /* compute.h: the heads ops give, to the bit, what one call per head gives (cuda alone;
     * the gradient is a scatter, which the cuda plugin may sum with atomics) */
    const bv_csr *g = &host_graph[G_BOW];
    static const int per_head_shapes[][2] = {{HEADS, HEAD_DIM}, {4, 40}, {34, 2}};
    for (size_t i = 0; i < sizeof per_head_shapes / sizeof per_head_shapes[0]; i++) {
        int heads = per_head_shapes[i][0];
        int64_t f = per_head_shapes[i][1], pad = f % 4 == 0 ? 4 : 3;
        tcase *k = bow_case("spmm_dropout_heads", call_spmm_dropout_per_head, EXACT, 0.5f, 12345,
                            heads, f, pad, pad);
        snprintf(k->variant, sizeof k->variant,
                 "= its per-head spmm_dropout calls (cuda alone), %d x %lld", heads,
                 (long long)f);
        k->ref_is_cuda = true;
        k->test_call = call_spmm_dropout_heads;
        in_f32(k, "x", g->ncols * k->a.ldx, -1, 1);
        out_f32(k, "y", g->nrows * k->a.ldy);
        run_case(k);

        k = bow_case("spmm_dropout_heads_backward_x", call_spmm_dropout_backward_x_per_head,
                     TOL_SUM, 0.5f, 12345, heads, f, pad, pad);
        snprintf(k->variant, sizeof k->variant, "= its per-head calls (cuda alone), %d x %lld",
                 heads, (long long)f);
        k->ref_is_cuda = true;
        k->scatter = true;
        k->test_call = call_spmm_dropout_heads_backward_x;
        in_f32(k, "dy", g->nrows * k->a.ldy, -1, 1);
        out_f32(k, "dx", g->ncols * k->a.ldx);
        run_case(k);
    }
}

/* ---- one pass over every op ------------------------------------------------------------ */

static void run_all_cases(void)
{
    for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++) {
            case_gemm(ta, tb, FEAT + 4, 0.0f, false);
            case_gemm(ta, tb, FEAT + 4, 0.7f, false);
        }
    case_gemm(false, false, FEAT + 4, 0.0f, true);
    case_gemm(true, false, 0, 0.5f, false); /* k = 0: C = beta C */
    /* a small C over a long k: the cuda plugin splits k (compute_cuda.c, gemm_split_k) */
    for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++)
            case_gemm(ta, tb, 9001, ta == tb ? 0.0f : 0.7f, false);
    case_gemm(true, false, 9001, 0.0f, true);
    for (int ta = 0; ta <= 1; ta++)
        for (int tb = 0; tb <= 1; tb++)
            case_gemm_batched(ta, tb, 0.5f);
    case_gemm_batched(false, true, 0.0f);

    case_spmm(G_A, 0, ROWS, FEAT);
    case_spmm(G_A, SUB_BEGIN, SUB_END, FEAT);
    case_spmm(G_A_NOVAL, SUB_BEGIN, SUB_END, FEAT);
    case_spmm(G_A, 5, 6, FEAT); /* one empty row */
    case_spmm(G_BOW, 0, ROWS, FEAT);
    for (size_t i = 0; i < sizeof sparse_widths / sizeof sparse_widths[0]; i++)
        case_spmm(G_A, SUB_BEGIN, SUB_END, sparse_widths[i]);

    cases_relu();
    case_dropout(false, 0.5f, 12345, false);
    case_dropout(false, 0.0f, 12345, false);
    case_dropout(false, 0.5f, 0, false);
    case_dropout(false, 0.5f, 777, true);
    case_dropout(false, 0.5f, (1ull << 32) - 5000, false); /* indices cross 2^32 */
    case_dropout(true, 0.5f, 12345, false);
    case_dropout(true, 0.0f, 12345, false);
    case_dropout(true, 0.3f, 99991, false);

    for (int use_mask = 1; use_mask >= 0; use_mask--)
        for (int with_grad = 1; with_grad >= 0; with_grad--)
            case_softmax_xent(use_mask, with_grad);
    case_adam(true);
    case_adam(false);
    cases_vector_ops();

    case_activation("leaky_relu_forward", call_leaky_relu_forward, false, false, -1, 1);
    case_activation("leaky_relu_backward", call_leaky_relu_backward, true, false, -1, 1);
    case_activation("elu_forward", call_elu_forward, false, false, -6, 3);
    case_activation("elu_backward", call_elu_backward, true, false, -6, 3);
    case_activation("gelu_forward", call_gelu_forward, false, false, -6, 6);
    case_activation("gelu_forward", call_gelu_forward_in_place, false, true, -6, 6);
    case_activation("gelu_backward", call_gelu_backward, true, false, -6, 6);
    case_activation("gelu_backward", call_gelu_backward_in_place, true, true, -6, 6);

    cases_edge();
    cases_layernorm();
    cases_attention();
    cases_embedding();
    cases_spmm_dropout();
}

/* Graph copies for this pass's cuda side; a check at its end that no op changed them. */
static void make_pass_graphs(void)
{
    for (int g = 0; g < G_COUNT; g++)
        side_graph[SIDE_TEST][g] = make_graph_copy(g, SIDE_TEST);
}

static void check_pass_graphs(void)
{
    static const char *const array_name[] = {"rowptr", "colidx", "values", "perm"};
    bool pass_ok = true;
    char details[512] = "";
    for (int side = 0; side < 2; side++)
        for (int g = 0; g < G_COUNT; g++) {
            int d = graph_changed(side_graph[side][g], g);
            if (d >= 0) {
                pass_ok = false;
                size_t used = strlen(details);
                snprintf(details + used, sizeof details - used, "    %s's %s changed (%s side)\n",
                         graph_name[g], array_name[d], side == SIDE_REF ? "cpu" : "cuda");
            }
        }
    char variant[96];
    snprintf(variant, sizeof variant, "%s: every CSR array as it was", pass_name[mem_pass]);
    report_line("graphs", variant, true, 0, 0, EXACT, pass_ok);
    fputs(details, stdout);
}

/* ---- set-up ---------------------------------------------------------------------------- */

/* An instance with the plugin's default options, tf32 off where the plugin has it. */
static bv_compute *create_instance(const bv_plugin *pl, char *why, size_t why_len)
{
    bv_opts o;
    bv_error err = {0};
    if (bv_opts_defaults(&o, "compute", pl->options, &err) != BV_OK) {
        snprintf(why, why_len, "default options: %s", err.msg);
        return NULL;
    }
    if (pl->options && bv_schema_find(pl->options, "tf32") &&
        bv_opts_set(&o, "tf32", "false", &err) != BV_OK) {
        snprintf(why, why_len, "tf32 = false: %s", err.msg);
        bv_opts_free(&o);
        return NULL;
    }
    bv_compute *c = ((const bv_compute_ops *)pl->ops)->create(&o, &err);
    bv_opts_free(&o);
    if (!c)
        snprintf(why, why_len, "%s", err.msg);
    return c;
}

/* The descriptor: its header, every slot up to the ABI 1.10 ones, its options. */
static void check_descriptor(const bv_plugin *pl)
{
    int problems = 0;
    char details[1024] = "";
#define PROBLEM(...)                                                                         \
    do {                                                                                     \
        size_t used_ = strlen(details);                                                      \
        snprintf(details + used_, sizeof details - used_, "    " __VA_ARGS__);               \
        strncat(details, "\n", sizeof details - strlen(details) - 1);                        \
        problems++;                                                                          \
    } while (0)
    if (pl->magic != BV_PLUGIN_MAGIC || pl->abi_major != BV_ABI_MAJOR ||
        pl->struct_size != sizeof(bv_plugin))
        PROBLEM("header: magic %#x, ABI %u.%u, struct_size %u", pl->magic, pl->abi_major,
                pl->abi_minor, pl->struct_size);
    if (pl->kind != BV_KIND_COMPUTE || !pl->name || strcmp(pl->name, "cuda") != 0)
        PROBLEM("kind %u, name %s (want compute, cuda)", pl->kind, pl->name ? pl->name : "NULL");
    size_t required = offsetof(bv_compute_ops, mem_alloc);
    if (pl->ops_size < required)
        PROBLEM("ops_size %zu is short of the %zu bytes of the required slots", pl->ops_size,
                required);
    void (*const *slot)(void) = (void (*const *)(void))pl->ops;
    size_t nslots = (pl->ops_size < required ? pl->ops_size : required) / sizeof *slot;
    for (size_t i = 0; i < nslots; i++)
        if (!slot[i])
            PROBLEM("slot %zu of bv_compute_ops is NULL", i);
    const bv_option *tf32 = pl->options ? bv_schema_find(pl->options, "tf32") : NULL;
    const bv_option *dev = pl->options ? bv_schema_find(pl->options, "device") : NULL;
    if (!tf32 || tf32->type != BV_OPT_BOOL || !tf32->default_value ||
        strcmp(tf32->default_value, "false") != 0)
        PROBLEM("option tf32: want a bool, default false");
    if (!dev || dev->type != BV_OPT_INT || !dev->default_value ||
        strcmp(dev->default_value, "0") != 0)
        PROBLEM("option device: want an int, default 0");
#undef PROBLEM
    report_line("descriptor", "cuda: header, name, every required slot, options", true,
                problems, 0, EXACT, problems == 0);
    fputs(details, stdout);
}

/* Managed memory the host can write and read back (compute.h: visible to the host). */
static void probe_managed_body(void *ctx)
{
    volatile float *p = ctx;
    for (int i = 0; i < 1024; i++)
        p[i] = (float)i;
    for (int i = 0; i < 1024; i++)
        if (p[i] != (float)i)
            abort();
}

static bool managed_usable(void)
{
    void *p = mem_alloc_fn(1024 * sizeof(float));
    if (!p) {
        printf("note: the cuda plugin's mem_alloc gives no memory here: the mem_alloc and "
               "mixed passes are skipped\n");
        return false;
    }
    guard_stage = "writing and reading mem_alloc memory on the host";
    bool ok = run_guarded(probe_managed_body, p);
    alarm(0);
    if (ok)
        mem_free_fn(p);
    report_line("mem_alloc", "memory the host can write and read back", false, 0, 0, EXACT,
                ok);
    if (!ok)
        printf("    %s while the host used it: the mem_alloc and mixed passes are skipped\n",
               signal_words(guard_signal));
    return ok;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const bv_plugin *cuda = bv_compute_cuda_plugin();
    char why[BV_ERROR_MSG_MAX + 64] = "";
    if (cuda->probe && !cuda->probe(why, sizeof why)) {
        printf("SKIP: %s\n", why[0] ? why : "the cuda plugin's probe found no usable GPU");
        return 77;
    }

    const char *seed = getenv("BV_TEST_SEED");
    if (seed && *seed)
        rng_state = strtoull(seed, NULL, 0);
    if (rng_state == 0)
        rng_state = TEST_RNG_SEED;
    const char *timeout = getenv("BV_TEST_CASE_TIMEOUT");
    if (timeout && atoi(timeout) > 0) {
        case_timeout = (unsigned)atoi(timeout);
        host_timeout = 2 * case_timeout;
    }
    printf("test_compute_cuda: seed %#llx (BV_TEST_SEED), %u s per case\n",
           (unsigned long long)rng_state, case_timeout);
    install_signal_handlers();
    atexit(at_exit_report);

    const bv_plugin *cpu = bv_compute_cpu_plugin();
    cpu_ops = cpu->ops;
    cuda_ops = cuda->ops;
    if (!(cpu_c = create_instance(cpu, why, sizeof why))) {
        printf("FAIL: cannot create the cpu instance: %s\n", why);
        return 1;
    }
    if (!(cuda_c = create_instance(cuda, why, sizeof why))) {
        printf("FAIL: the cuda probe found a GPU, but create failed: %s\n", why);
        cpu_ops->destroy(cpu_c);
        return 1;
    }
    if (cuda->ops_size >= offsetof(bv_compute_ops, mem_free) + sizeof cuda_ops->mem_free &&
        cuda_ops->mem_alloc && cuda_ops->mem_free) {
        mem_alloc_fn = cuda_ops->mem_alloc;
        mem_free_fn = cuda_ops->mem_free;
    }
    if (!make_host_graphs()) {
        printf("FAIL: bv_csr_transpose_perm failed\n");
        return 1;
    }
    for (int g = 0; g < G_COUNT; g++)
        side_graph[SIDE_REF][g] = make_graph_copy(g, SIDE_REF);
    printf("graph A: %d x %d, %lld edges; B: %d x %d, %lld nonzeros\n\n", ROWS, ROWS,
           (long long)host_graph[G_A].nnz, ROWS, BOW_COLS, (long long)host_graph[G_BOW].nnz);
    printf("%-30s %-64s %9s %9s %6s %s\n", "op", "variant", "max_abs", "max_rel", "tol",
           "result");

    check_descriptor(cuda);
    bool managed = mem_alloc_fn && managed_usable();
    if (!mem_alloc_fn)
        printf("note: the cuda ops table has no mem_alloc: only the host pass runs\n");
    for (int k = MEM_HOST; k < MEM_PASSES; k++) {
        if (k != MEM_HOST && !managed)
            break;
        mem_pass = (mem_kind)k;
        managed_fallbacks = 0;
        make_pass_graphs();
        run_all_cases();
        check_pass_graphs();
        if (managed_fallbacks)
            printf("note: %s pass: mem_alloc said NULL %lld times (host memory used there)\n",
                   pass_name[mem_pass], (long long)managed_fallbacks);
    }

    /* After a crash in an op the device may be in an error state: no mem_free, no destroy
     * (and no exit handlers of the CUDA runtime), just the report. */
    if (!crashed_once && !cuda_hung) {
        alarm(host_timeout);
        for (int i = 0; i < n_graph_copies; i++) {
            graph_copy *gc = graph_copies[i];
            for (int s = 0; s < 4; s++)
                if (gc->arrays[s])
                    side_free(gc->arrays[s], gc->managed[s]);
            free(gc);
        }
        cuda_ops->destroy(cuda_c);
        cpu_ops->destroy(cpu_c);
        alarm(0);
    }
    for (int g = 0; g < G_COUNT; g++) {
        free(host_graph[g].rowptr);
        free(host_graph[g].colidx);
        free(host_graph[g].values);
    }
    bv_free_aligned(host_perm);

    if (n_failed)
        printf("\nfailed:\n%s", failed_list);
    printf("\n%d cases, %d failed\n", n_cases, n_failed);
    fflush(stdout);
    if (crashed_once || cuda_hung)
        _exit(1);
    return n_failed ? 1 : 0;
}
