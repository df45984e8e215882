/* SpMM and the sparse first layer (spmm_dropout*, compute.h) for the CUDA plugin.
 *
 * Thread mapping: a group of G lanes (G = 4..32, by the row's width) owns one row of a at a
 * time. Each lane owns NC units of V consecutive columns (V = 4, float4 accesses, for rows
 * wider than a warp's 128 floats where the widths and pointers allow), units strided by G
 * so that a group's loads are coalesced. A row's edges are read G at a time, one per lane
 * (with the dropout hash of every head), the next batch requested before this one is used,
 * and broadcast to the group by shuffles. The forwards sum each output element in one lane
 * in edge order with the CPU's separate roundings, so they give the cpu plugin's bits; the
 * backwards scatter into dx rows named by columns with atomicAdd (there is no transpose).
 *
 * A plain SpMM of a narrow row (f <= 128, f % 4 == 0, aligned) takes cuda_rows.cuh's
 * split rows instead unless the instance keeps the ordered sums (its option ordered_sums):
 * the ordered walk leaves a row of 16 floats latency-bound (24 % of the copy bandwidth on
 * an H100, where 64 floats reach 81 %). */
#include "cuda_internal.h"
#include "cuda_rows.cuh"

namespace {

using namespace cu_rows;

constexpr int kBlock = 256;
constexpr int kMaxHeads = 32; /* heads per sweep: an edge's keep bits fill one word */

/* Gathers a lane issues before it adds them up. A row's edges are summed one after another,
 * so a power-law hub of thousands of edges is bound by memory latency unless many of its
 * rows of x are in flight at once; 16 floats a lane keep the registers, and so the
 * occupancy, moderate. At least 2, at most a batch. */
template <int G, int NC, int V> __host__ __device__ constexpr int in_flight()
{
    constexpr int u = 16 / (NC * V);
    return u < 2 ? 2 : u > G ? G : u;
}

/* One sweep over rows [row_begin, row_begin + rows) of a, columns c < heads * f, with
 * w(e, c) = e's value (1 without values) after the dropout mask of head c / f:
 *   gather:  out[(i - row_begin) * ld_out + c] = sum over row i's edges e of
 *            w(e, c) * in[col(e) * ld_in + c]
 *   scatter: out[col(e) * ld_out + c] += w(e, c) * in[i * ld_in + c] */
struct sweep {
    const int64_t *rowptr;
    const int32_t *colidx;
    const float *values;
    int64_t row_begin, rows;
    cu_dropout d;
    uint64_t offset, head_stride;
    int64_t row_stride;
    int heads;
    int64_t f;
    const float *in;
    int64_t ld_in;
    float *out;
    int64_t ld_out;
};

struct edge {
    int32_t col;
    float w;       /* the value, times the dropout scale where a mask applies */
    uint32_t kept; /* bit h: head h keeps the edge */
};

/* Edge k of row i, or a weight-0 stand-in past the row's end k1. The mask index of (i, col)
 * in head h is the one dropout_forward gives the dense input's element, so the sparse and
 * dense paths train the same model. */
__device__ edge load_edge(const sweep &s, int64_t i, int64_t k, int64_t k1)
{
    if (k >= k1)
        return edge{0, 0.0f, 0u};
    edge e;
    e.col = s.colidx[k];
    float v = s.values ? s.values[k] : 1.0f;
    if (s.d.threshold == 0) { /* p == 0: all kept, unscaled (the CPU skips the hash too) */
        e.w = v;
        e.kept = ~0u;
        return e;
    }
    e.w = v * s.d.scale;
    e.kept = 0;
    uint64_t index = s.offset + (uint64_t)(i * s.row_stride + e.col);
    for (int h = 0; h < s.heads; h++)
        if (cu_keep(s.d, index + (uint64_t)h * s.head_stride))
            e.kept |= 1u << h;
    return e;
}

template <int G> __device__ edge broadcast(unsigned mask, const edge &e, int from)
{
    return edge{__shfl_sync(mask, e.col, from, G), __shfl_sync(mask, e.w, from, G),
                __shfl_sync(mask, e.kept, from, G)};
}

/* p[v] += w * r[v], each element atomically (rounded as the CPU's y += w * x). */
template <int V> __device__ void atomic_add_unit(float *p, float w, const float *r)
{
#if __CUDA_ARCH__ >= 900
    if constexpr (V == 4) /* sm_90 adds a float4 in one atomic */
        atomicAdd(reinterpret_cast<float4 *>(p),
                  make_float4(__fmul_rn(w, r[0]), __fmul_rn(w, r[1]), __fmul_rn(w, r[2]),
                              __fmul_rn(w, r[3])));
    else
#endif
        for (int v = 0; v < V; v++)
            atomicAdd(p + v, __fmul_rn(w, r[v]));
}

/* Where this lane's units of the tile at column c0 lie, and the head of each. */
template <int G, int NC, int V> struct lane_units {
    bool on[NC];
    int head[NC];

    __device__ lane_units(const sweep &s, int lane, int64_t c0)
    {
        for (int n = 0; n < NC; n++) {
            int64_t c = c0 + (int64_t)(lane + n * G) * V;
            on[n] = c < s.heads * s.f;
            head[n] = on[n] ? (int)(c / s.f) : 0;
        }
    }

    __device__ bool takes(int n, uint32_t kept) const { return on[n] && (kept >> head[n] & 1); }
};

/* Row i's edges in batches of G, one edge per lane (the next batch's requested before
 * this one is used): body(mine, count) with the batch's size. */
template <int G, typename Body>
__device__ void for_each_batch(const sweep &s, int lane, int64_t i, Body body)
{
    const int64_t k0 = s.rowptr[i], k1 = s.rowptr[i + 1];
    edge next = load_edge(s, i, k0 + lane, k1);
    for (int64_t kb = k0; kb < k1; kb += G) {
        const edge mine = next;
        next = load_edge(s, i, kb + G + lane, k1);
        body(mine, k1 - kb < G ? (int)(k1 - kb) : G);
    }
}

/* One tile of G * NC * V columns of output row r (a's row i = row_begin + r). The CPU
 * build is ISO C, which contracts nothing into an FMA: separately rounded multiplies and
 * adds give its bits. Edges are taken U at a time: all their loads first, then the adds in
 * edge order. A dropped element adds w * 0 = +-0 to a sum that starts at +0 and so is never
 * -0: it changes nothing, and its row of x is not loaded. */
template <int G, int NC, int V>
__device__ void gather_tile(const sweep &s, unsigned mask, int lane, int64_t r, int64_t c0)
{
    constexpr int U = in_flight<G, NC, V>();
    const lane_units<G, NC, V> u(s, lane, c0);
    float acc[NC][V] = {};
    for_each_batch<G>(s, lane, s.row_begin + r, [&](const edge &mine, int count) {
        for (int t0 = 0; t0 < count; t0 += U) {
            const int here = count - t0 < U ? count - t0 : U; /* the same in the group */
            float w[U], x[U][NC][V];
#pragma unroll
            for (int q = 0; q < U && q < here; q++) {
                const edge e = broadcast<G>(mask, mine, t0 + q);
                const float *xr = s.in + (int64_t)e.col * s.ld_in + c0 + lane * V;
                w[q] = e.w;
#pragma unroll
                for (int n = 0; n < NC; n++) {
                    for (int v = 0; v < V; v++)
                        x[q][n][v] = 0.0f;
                    if (u.takes(n, e.kept))
                        load_unit<V>(xr + n * G * V, x[q][n]);
                }
            }
#pragma unroll
            for (int q = 0; q < U && q < here; q++)
                for (int n = 0; n < NC; n++)
                    for (int v = 0; v < V; v++)
                        acc[n][v] = __fadd_rn(acc[n][v], __fmul_rn(w[q], x[q][n][v]));
        }
    });
    float *yr = s.out + r * s.ld_out + c0 + lane * V;
    for (int n = 0; n < NC; n++)
        if (u.on[n])
            store_unit<V>(yr + n * G * V, acc[n]);
}

/* The transpose of gather_tile: row i of `in` (dy) is read once and added, weighted, into
 * the out (dx) rows named by the row's columns. Dropped elements add nothing (the CPU's
 * scalar path skips them too). */
template <int G, int NC, int V>
__device__ void scatter_tile(const sweep &s, unsigned mask, int lane, int64_t i, int64_t c0)
{
    const lane_units<G, NC, V> u(s, lane, c0);
    float dy[NC][V] = {};
    const float *dyr = s.in + i * s.ld_in + c0 + lane * V;
    for (int n = 0; n < NC; n++)
        if (u.on[n])
            load_unit<V>(dyr + n * G * V, dy[n]);
    for_each_batch<G>(s, lane, i, [&](const edge &mine, int count) {
        for (int t = 0; t < count; t++) {
            const edge e = broadcast<G>(mask, mine, t);
            float *dxr = s.out + (int64_t)e.col * s.ld_out + c0 + lane * V;
#pragma unroll
            for (int n = 0; n < NC; n++)
                if (u.takes(n, e.kept))
                    atomic_add_unit<V>(dxr + n * G * V, e.w, dy[n]);
        }
    });
}

template <int G, int NC, int V, bool SCATTER>
__global__ void __launch_bounds__(kBlock) sweep_rows(const sweep s)
{
    constexpr int per_block = kBlock / G;
    const int lane = threadIdx.x % G;
    const unsigned mask = group_mask<G>();
    const int64_t width = s.heads * s.f;
    for (int64_t r = (int64_t)blockIdx.x * per_block + threadIdx.x / G; r < s.rows;
         r += (int64_t)gridDim.x * per_block)
        for (int64_t c0 = 0; c0 < width; c0 += G * NC * V) {
            if constexpr (SCATTER)
                scatter_tile<G, NC, V>(s, mask, lane, s.row_begin + r, c0);
            else
                gather_tile<G, NC, V>(s, mask, lane, r, c0);
        }
}

template <int G, int NC, int V, bool SCATTER> void launch(cudaStream_t st, const sweep &s)
{
    sweep_rows<G, NC, V, SCATTER><<<grid_for(s.rows, kBlock / G), kBlock, 0, st>>>(s);
}

bool aligned16(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

/* The smallest group that covers the row, up to a warp; then up to 4 columns a lane, and
 * past 128 columns float4 units (which need 16-byte aligned row starts, and f % 4 == 0 to
 * keep a unit inside one head). Rows wider than a tile are swept a tile at a time. */
template <bool SCATTER> void run_sweep(cudaStream_t st, const sweep &s)
{
    int64_t width = s.heads * s.f;
    if (width <= 4)
        launch<4, 1, 1, SCATTER>(st, s);
    else if (width <= 8)
        launch<8, 1, 1, SCATTER>(st, s);
    else if (width <= 16)
        launch<16, 1, 1, SCATTER>(st, s);
    else if (width <= 32)
        launch<32, 1, 1, SCATTER>(st, s);
    else if (width <= 64)
        launch<32, 2, 1, SCATTER>(st, s);
    else if (width <= 128 || s.f % 4 != 0 || s.ld_in % 4 != 0 || s.ld_out % 4 != 0 ||
             !aligned16(s.in) || !aligned16(s.out))
        launch<32, 4, 1, SCATTER>(st, s);
    else
        launch<32, 4, 4, SCATTER>(st, s);
}

sweep sweep_of(const cu_csr *a)
{
    sweep s = {};
    s.rowptr = a->rowptr;
    s.colidx = a->colidx;
    s.values = a->values;
    s.d.scale = 1.0f;
    s.heads = 1;
    return s;
}

/* All rows of a, heads at most kMaxHeads per sweep: head h's mask offset and columns move
 * with it, as `heads` one-head calls would have them (compute.h). */
template <bool SCATTER>
void dropout_sweeps(cudaStream_t st, const cu_csr *a, cu_dropout d, uint64_t offset,
                    uint64_t head_stride, int64_t row_stride, int heads, const float *in,
                    int64_t ld_in, int64_t f, float *out, int64_t ld_out)
{
    sweep s = sweep_of(a);
    s.rows = a->nrows;
    s.d = d;
    s.head_stride = head_stride;
    s.row_stride = row_stride;
    s.f = f;
    s.ld_in = ld_in;
    s.ld_out = ld_out;
    for (int h = 0; h < heads; h += kMaxHeads) {
        s.heads = heads - h < kMaxHeads ? heads - h : kMaxHeads;
        s.offset = offset + (uint64_t)h * head_stride;
        s.in = in + h * f;
        s.out = out + h * f;
        run_sweep<SCATTER>(st, s);
    }
}

/* split_rows's edges for a plain SpMM: the CSR's value (1 without values). */
struct csr_edges {
    const int64_t *rowptr;
    const int32_t *colidx;
    const float *values;

    using lane_key = int;
    __device__ lane_key key(int64_t) const { return 0; }
    __device__ float weight(int64_t k, lane_key) const { return values ? values[k] : 1.0f; }
};

} // namespace

extern "C" void cu_spmm(cudaStream_t st, const cu_csr *a, int64_t row_begin, int64_t row_end,
                        const float *x, int64_t f, float *y, bool ordered)
{
    if (row_end <= row_begin || f <= 0)
        return;
    if (!ordered && split_fits(f, x, f, y, f)) {
        split_launch(st, csr_edges{a->rowptr, a->colidx, a->values}, row_begin,
                     row_end - row_begin, f, x, f, y, f, false);
        return;
    }
    sweep s = sweep_of(a);
    s.row_begin = row_begin;
    s.rows = row_end - row_begin;
    s.f = f;
    s.in = x;
    s.ld_in = f;
    s.out = y;
    s.ld_out = f;
    run_sweep<false>(st, s);
}

extern "C" void cu_spmm_dropout_heads(cudaStream_t st, const cu_csr *a, cu_dropout d,
                                      uint64_t offset, uint64_t head_stride,
                                      int64_t row_stride, int heads, const float *x,
                                      int64_t ldx, int64_t f, float *y, int64_t ldy)
{
    if (a->nrows <= 0 || f <= 0 || heads <= 0)
        return;
    dropout_sweeps<false>(st, a, d, offset, head_stride, row_stride, heads, x, ldx, f, y,
                          ldy);
}

extern "C" void cu_spmm_dropout_heads_backward_x(cudaStream_t st, const cu_csr *a,
                                                 cu_dropout d, uint64_t offset,
                                                 uint64_t head_stride, int64_t row_stride,
                                                 int heads, const float *dy, int64_t lddy,
                                                 int64_t f, float *dx, int64_t lddx)
{
    if (a->nrows <= 0 || a->nnz <= 0 || f <= 0 || heads <= 0)
        return;
    dropout_sweeps<true>(st, a, d, offset, head_stride, row_stride, heads, dy, lddy, f, dx,
                         lddx);
}

extern "C" void cu_spmm_dropout(cudaStream_t st, const cu_csr *a, cu_dropout d,
                                uint64_t offset, int64_t row_stride, const float *x,
                                int64_t ldx, int64_t f, float *y, int64_t ldy)
{
    cu_spmm_dropout_heads(st, a, d, offset, 0, row_stride, 1, x, ldx, f, y, ldy);
}

extern "C" void cu_spmm_dropout_backward_x(cudaStream_t st, const cu_csr *a, cu_dropout d,
                                           uint64_t offset, int64_t row_stride,
                                           const float *dy, int64_t lddy, int64_t f,
                                           float *dx, int64_t lddx)
{
    cu_spmm_dropout_heads_backward_x(st, a, d, offset, 0, row_stride, 1, dy, lddy, f, dx,
                                     lddx);
}
