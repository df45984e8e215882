/* GAT's edge kernels (compute.h, ABI 1.1) for the CUDA plugin: per-edge logits, their
 * softmax over each destination row's edges, the multi-head weighted aggregation, and
 * their backwards. Only the CSR's structure is read; the weights are the edge arrays.
 *
 * Thread mapping:
 * - edge_scores(_backward), edge_softmax(_backward): one warp per row; lane l takes head
 *   l % n of edge l / n of each step of 32 / n edges (n = the heads, 32 at a time), so
 *   consecutive lanes touch consecutive floats of the [edge][head] arrays. A per-(row,
 *   head) sum is added up in edge order by shuffles, as the CPU's loop adds it, and every
 *   lane of the head holds it. A lane loads kSteps steps' elements before using the first,
 *   so that a hub row is not walked one memory latency per step. dsrc is a scatter:
 *   atomicAdd.
 * - gather_heads and its backward_x: a group of G lanes (4..32, by the row's width) per
 *   row, each lane NC units of V columns (float4 where allowed); edges are loaded G at a
 *   time, one per lane, and broadcast. Each output element is summed by one lane in edge
 *   order (backward_x runs over the transpose, so it needs no atomics).
 * - gather_heads_backward_w: one warp per row, eight lanes per (edge, head) dot product,
 *   added in the CPU's head_dot order, kSteps pairs at a time.
 * - Unless the instance keeps the ordered sums (its option ordered_sums), rows of at most
 *   128 floats with head_dim a multiple of 4 take cuda_rows.cuh's split rows instead, in
 *   gather_heads and its backward_x, and split_dots (the same lane layout, dy's row held in
 *   registers, a head's products added by an xor butterfly) in backward_w: their sums are
 *   not in the CPU's order, but they are the same from run to run.
 * The CPU build is ISO C, which contracts nothing into an FMA: the sums use separately
 * rounded multiplies and adds (__fmul_rn, __fadd_rn) to give its bits. */
#include "cuda_internal.h"
#include "cuda_rows.cuh"

namespace {

using namespace cu_rows;

constexpr int kBlock = 256;
constexpr int kWarpsPerBlock = kBlock / 32;
constexpr unsigned kFullWarp = 0xffffffffu;
/* Steps (or pairs) whose loads a lane issues before it uses the first: a row's steps are
 * taken one after another, and a power-law hub has thousands. */
constexpr int kSteps = 8;

/* Rows [row_begin, row_begin + rows) of a CSR over destination rows. */
struct row_range {
    const int64_t *rowptr;
    const int32_t *colidx;
    int64_t row_begin, rows;
    int heads;
};

row_range range_of(const cu_csr *a, int64_t row_begin, int64_t row_end, int heads)
{
    return row_range{a->rowptr, a->colidx, row_begin, row_end - row_begin, heads};
}

/* Calls body(r) for the range's rows r (i = row_begin + r) owned by this warp. */
template <typename Body> __device__ void for_each_warp_row(const row_range &rg, Body body)
{
    for (int64_t r = (int64_t)blockIdx.x * kWarpsPerBlock + threadIdx.x / 32; r < rg.rows;
         r += (int64_t)gridDim.x * kWarpsPerBlock)
        body(r);
}

/* A warp's lanes over a row's (edge, head) pairs for heads [h0, h0 + n), n <= 32: lane l
 * takes head h0 + l % n of edge l / n of each step of `per` = 32 / n edges. */
struct pair_lanes {
    int n, per;
    int eo; /* the lane's edge within a step */
    int hl; /* its head within [h0, h0 + n) */
    int h;  /* h0 + hl */

    __device__ pair_lanes(int heads, int h0)
    {
        int lane = threadIdx.x % 32;
        n = heads - h0 < 32 ? heads - h0 : 32;
        per = 32 / n;
        eo = lane / n;
        hl = lane % n;
        h = h0 + hl;
    }

    /* The step's edges, at most per: the lanes with eo < count hold one. */
    __device__ int count(int64_t kb, int64_t k1) const
    {
        return k1 - kb < per ? (int)(k1 - kb) : per;
    }

    /* s plus the step's values of this lane's head, in edge order (the CPU's sequential
     * sum; each lane of the head computes the same). */
    __device__ float add_step(float s, float v, int count) const
    {
        for (int t = 0; t < count; t++)
            s = __fadd_rn(s, __shfl_sync(kFullWarp, v, t * n + hl));
        return s;
    }

    /* The CPU's running max (x > m ? x : m) over the step's values, in edge order. */
    __device__ float max_step(float m, float v, int count) const
    {
        for (int t = 0; t < count; t++) {
            float x = __shfl_sync(kFullWarp, v, t * n + hl);
            m = x > m ? x : m;
        }
        return m;
    }
};

/* Row [k0, k1)'s steps over the pairs of p, kSteps at a time: load(k) for this lane's edge
 * k of each (T{} where the lane holds none), all issued before any is used, then
 * use(k, count, value) for each step in edge order, count being the step's number of edges
 * (the lane holds one iff p.eo < count). Loads come before stores, so an array a step
 * writes may alias one it reads, element for element. */
template <typename T, typename Load, typename Use>
__device__ void for_each_step(const pair_lanes &p, int64_t k0, int64_t k1, Load load, Use use)
{
    for (int64_t kb = k0; kb < k1; kb += kSteps * p.per) {
        T v[kSteps];
#pragma unroll
        for (int q = 0; q < kSteps && kb + q * p.per < k1; q++)
            v[q] = p.eo < p.count(kb + q * p.per, k1) ? load(kb + q * p.per + p.eo) : T{};
#pragma unroll
        for (int q = 0; q < kSteps && kb + q * p.per < k1; q++)
            use(kb + q * p.per + p.eo, p.count(kb + q * p.per, k1), v[q]);
    }
}

/* ---- edge_scores ----------------------------------------------------------------------- */

__global__ void __launch_bounds__(kBlock)
    edge_scores_rows(const row_range rg, const float *src, int64_t src_stride,
                     const float *dst, int64_t dst_stride, float *out)
{
    const int64_t base = rg.rowptr[rg.row_begin];
    const int heads = rg.heads;
    for_each_warp_row(rg, [&](int64_t r) {
        const int64_t k0 = rg.rowptr[rg.row_begin + r], k1 = rg.rowptr[rg.row_begin + r + 1];
        for (int h0 = 0; h0 < heads; h0 += 32) {
            const pair_lanes p(heads, h0);
            const float d = dst[r * dst_stride + p.h];
            for_each_step<float>(
                p, k0, k1,
                [&](int64_t k) { return src[(int64_t)rg.colidx[k] * src_stride + p.h]; },
                [&](int64_t k, int count, float v) {
                    if (p.eo < count)
                        out[(k - base) * heads + p.h] = v + d;
                });
        }
    });
}

struct edge_grad {
    float v;
    int32_t col;
};

/* ddst's sums are per row, in edge order; dsrc's are a scatter over columns: atomicAdd,
 * so they differ from the CPU's edge-order sums by rounding only. */
__global__ void __launch_bounds__(kBlock)
    edge_scores_backward_rows(const row_range rg, const float *dout, float *dsrc,
                              int64_t src_stride, float *ddst, int64_t dst_stride,
                              bool accumulate)
{
    const int64_t base = rg.rowptr[rg.row_begin];
    const int heads = rg.heads;
    for_each_warp_row(rg, [&](int64_t r) {
        const int64_t k0 = rg.rowptr[rg.row_begin + r], k1 = rg.rowptr[rg.row_begin + r + 1];
        for (int h0 = 0; h0 < heads; h0 += 32) {
            const pair_lanes p(heads, h0);
            float sum = 0.0f;
            for_each_step<edge_grad>(
                p, k0, k1,
                [&](int64_t k) { return edge_grad{dout[(k - base) * heads + p.h], rg.colidx[k]}; },
                [&](int64_t, int count, edge_grad g) {
                    if (p.eo < count)
                        atomicAdd(&dsrc[(int64_t)g.col * src_stride + p.h], g.v);
                    sum = p.add_step(sum, g.v, count);
                });
            if (p.eo == 0) {
                float *dd = &ddst[r * dst_stride + p.h];
                *dd = accumulate ? *dd + sum : sum;
            }
        }
    });
}

/* ---- edge_softmax ---------------------------------------------------------------------- */

/* Three passes over each row: the max, the sum of exponentials, then each exponential
 * again over the sum (recomputed rather than stored: the same bits, one write less). Each
 * element is read and written by one lane, so z and alpha may alias. */
__global__ void __launch_bounds__(kBlock)
    edge_softmax_rows(const row_range rg, const float *z, float *alpha)
{
    const int64_t base = rg.rowptr[rg.row_begin];
    const int heads = rg.heads;
    for_each_warp_row(rg, [&](int64_t r) {
        const int64_t k0 = rg.rowptr[rg.row_begin + r], k1 = rg.rowptr[rg.row_begin + r + 1];
        if (k0 == k1)
            return; /* an empty row writes nothing */
        for (int h0 = 0; h0 < heads; h0 += 32) {
            const pair_lanes p(heads, h0);
            auto z_at = [&](int64_t k) { return z[(k - base) * heads + p.h]; };
            float mx = z_at(k0);
            for_each_step<float>(p, k0, k1, z_at, [&](int64_t, int count, float v) {
                mx = p.max_step(mx, v, count);
            });
            float sum = 0.0f;
            for_each_step<float>(
                p, k0, k1, [&](int64_t k) { return expf(z_at(k) - mx); },
                [&](int64_t, int count, float v) { sum = p.add_step(sum, v, count); });
            for_each_step<float>(p, k0, k1, z_at, [&](int64_t k, int count, float v) {
                if (p.eo < count)
                    alpha[(k - base) * heads + p.h] = expf(v - mx) / sum;
            });
        }
    });
}

/* dz = alpha * (dalpha - dot) with dot summed in edge order; as the forward, each element
 * belongs to one lane, so dalpha and dz may alias. */
__global__ void __launch_bounds__(kBlock)
    edge_softmax_backward_rows(const row_range rg, const float *alpha, const float *dalpha,
                               float *dz)
{
    const int64_t base = rg.rowptr[rg.row_begin];
    const int heads = rg.heads;
    for_each_warp_row(rg, [&](int64_t r) {
        const int64_t k0 = rg.rowptr[rg.row_begin + r], k1 = rg.rowptr[rg.row_begin + r + 1];
        for (int h0 = 0; h0 < heads; h0 += 32) {
            const pair_lanes p(heads, h0);
            auto at = [&](int64_t k) { return (k - base) * heads + p.h; };
            float dot = 0.0f;
            for_each_step<float>(
                p, k0, k1, [&](int64_t k) { return __fmul_rn(alpha[at(k)], dalpha[at(k)]); },
                [&](int64_t, int count, float v) { dot = p.add_step(dot, v, count); });
            for_each_step<float2>(
                p, k0, k1, [&](int64_t k) { return make_float2(alpha[at(k)], dalpha[at(k)]); },
                [&](int64_t k, int count, float2 v) {
                    if (p.eo < count)
                        dz[at(k)] = v.x * (v.y - dot);
                });
        }
    });
}

/* ---- gather_heads ---------------------------------------------------------------------- */

/* One sweep over rows [row_begin, row_begin + rows) of a CSR (a, or its transpose):
 *   out[r * ld_out + c] (+)= sum over row i's edges k of
 *                            w[we(k) * heads + c / head_dim] * in[col(k) * ld_in + c]
 * for c < heads * head_dim, r = i - row_begin, we(k) = perm ? perm[k] : k - rowptr[row_begin]
 * (accumulate starts each sum at out's value, as the CPU's backward does). */
struct gather {
    const int64_t *rowptr;
    const int32_t *colidx;
    const int64_t *perm;
    int64_t row_begin, rows;
    int heads;
    int64_t head_dim;
    const float *w;
    const float *in;
    int64_t ld_in;
    float *out;
    int64_t ld_out;
    bool accumulate;
};

/* Gathers a lane issues before it adds them up (as kSteps, for a hub's sake), at most 16
 * floats a lane, at least 2, at most a batch. */
template <int G, int NC, int V> __host__ __device__ constexpr int in_flight()
{
    constexpr int u = 16 / (NC * V);
    return u < 2 ? 2 : u > G ? G : u;
}

/* An edge of the sweep: its column and the row of w that weights it. */
struct gather_edge {
    int32_t col;
    long long we;
};

__device__ gather_edge load_gather_edge(const gather &g, int64_t base, int64_t k, int64_t k1)
{
    if (k >= k1)
        return gather_edge{0, 0};
    return gather_edge{g.colidx[k], g.perm ? g.perm[k] : k - base};
}

/* One tile of G * NC * V columns of output row r: lane `lane` owns units lane + n * G of V
 * columns each (n < NC), each unit inside one head. Row i's edges are loaded G at a time,
 * one per lane (the next batch requested before this one is used), and broadcast; U of
 * them at a time have all their loads issued, then are added in edge order. */
template <int G, int NC, int V>
__device__ void gather_tile(const gather &g, unsigned mask, int lane, int64_t r, int64_t c0)
{
    constexpr int U = in_flight<G, NC, V>();
    const int64_t width = g.heads * g.head_dim;
    const int64_t base = g.rowptr[g.row_begin];
    const int64_t i = g.row_begin + r, k0 = g.rowptr[i], k1 = g.rowptr[i + 1];
    float *yr = g.out + r * g.ld_out + c0 + lane * V;
    bool on[NC];
    int head[NC];
    float acc[NC][V] = {};
    for (int n = 0; n < NC; n++) {
        int64_t c = c0 + (int64_t)(lane + n * G) * V;
        on[n] = c < width;
        head[n] = on[n] ? (int)(c / g.head_dim) : 0;
        if (on[n] && g.accumulate)
            load_unit<V>(yr + n * G * V, acc[n]);
    }
    gather_edge next = load_gather_edge(g, base, k0 + lane, k1);
    for (int64_t kb = k0; kb < k1; kb += G) {
        const gather_edge mine = next;
        next = load_gather_edge(g, base, kb + G + lane, k1);
        const int count = k1 - kb < G ? (int)(k1 - kb) : G;
        for (int t0 = 0; t0 < count; t0 += U) {
            const int here = count - t0 < U ? count - t0 : U; /* the same in the group */
            float w[U][NC], x[U][NC][V];
#pragma unroll
            for (int q = 0; q < U && q < here; q++) {
                const float *xr = g.in +
                                  (int64_t)__shfl_sync(mask, mine.col, t0 + q, G) * g.ld_in +
                                  c0 + lane * V;
                const float *wr = g.w + __shfl_sync(mask, mine.we, t0 + q, G) * g.heads;
#pragma unroll
                for (int n = 0; n < NC; n++) {
                    w[q][n] = 0.0f;
                    for (int v = 0; v < V; v++)
                        x[q][n][v] = 0.0f;
                    if (on[n]) {
                        w[q][n] = wr[head[n]];
                        load_unit<V>(xr + n * G * V, x[q][n]);
                    }
                }
            }
#pragma unroll
            for (int q = 0; q < U && q < here; q++)
                for (int n = 0; n < NC; n++)
                    for (int v = 0; v < V; v++)
                        acc[n][v] = __fadd_rn(acc[n][v], __fmul_rn(w[q][n], x[q][n][v]));
        }
    }
    for (int n = 0; n < NC; n++)
        if (on[n])
            store_unit<V>(yr + n * G * V, acc[n]);
}

template <int G, int NC, int V>
__global__ void __launch_bounds__(kBlock) gather_rows(const gather g)
{
    constexpr int per_block = kBlock / G;
    const int lane = threadIdx.x % G;
    const unsigned mask = group_mask<G>();
    const int64_t width = g.heads * g.head_dim;
    for (int64_t r = (int64_t)blockIdx.x * per_block + threadIdx.x / G; r < g.rows;
         r += (int64_t)gridDim.x * per_block)
        for (int64_t c0 = 0; c0 < width; c0 += G * NC * V)
            gather_tile<G, NC, V>(g, mask, lane, r, c0);
}

template <int G, int NC, int V> void launch_gather(cudaStream_t st, const gather &g)
{
    gather_rows<G, NC, V><<<grid_for(g.rows, kBlock / G), kBlock, 0, st>>>(g);
}

bool aligned16(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

/* The smallest group that covers the row, up to a warp; then up to 4 columns a lane, and
 * past 128 columns float4 units (which need 16-byte aligned row starts, and head_dim % 4
 * == 0 to keep a unit inside one head). Rows wider than a tile are swept a tile at a time. */
void run_gather(cudaStream_t st, const gather &g)
{
    int64_t width = g.heads * g.head_dim;
    if (width <= 4)
        launch_gather<4, 1, 1>(st, g);
    else if (width <= 8)
        launch_gather<8, 1, 1>(st, g);
    else if (width <= 16)
        launch_gather<16, 1, 1>(st, g);
    else if (width <= 32)
        launch_gather<32, 1, 1>(st, g);
    else if (width <= 64)
        launch_gather<32, 2, 1>(st, g);
    else if (width <= 128 || g.head_dim % 4 != 0 || g.ld_in % 4 != 0 || g.ld_out % 4 != 0 ||
             !aligned16(g.in) || !aligned16(g.out))
        launch_gather<32, 4, 1>(st, g);
    else
        launch_gather<32, 4, 4>(st, g);
}

/* ---- gather_heads_backward_w ------------------------------------------------------------ */

/* The CPU's head_dot over n floats for up to kSteps pairs (a[q], b[q]), q < pairs, by the 8
 * lanes of `mask` (l = lane % 8): lane l sums terms l, l + 8, ... below the last multiple
 * of 8 (every pair's loads of a round issued before its adds), the xor butterfly adds the
 * lanes as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)) (each add is commutative, so
 * every lane gets those bits), and the tail adds on in order. */
__device__ void octet_dots(unsigned mask, int l, int64_t n, const float *const *a,
                           const float *const *b, int pairs, float *s)
{
    const int64_t n8 = n - n % 8;
#pragma unroll
    for (int q = 0; q < kSteps; q++)
        s[q] = 0.0f;
    for (int64_t j = l; j < n8; j += 8) {
        float av[kSteps], bv[kSteps];
#pragma unroll
        for (int q = 0; q < kSteps && q < pairs; q++)
            av[q] = a[q][j], bv[q] = b[q][j];
#pragma unroll
        for (int q = 0; q < kSteps && q < pairs; q++)
            s[q] = __fadd_rn(s[q], __fmul_rn(av[q], bv[q]));
    }
#pragma unroll
    for (int q = 0; q < kSteps && q < pairs; q++)
        for (int m = 1; m < 8; m *= 2)
            s[q] = __fadd_rn(s[q], __shfl_xor_sync(mask, s[q], m, 8));
    for (int64_t j = n8; j < n; j++)
#pragma unroll
        for (int q = 0; q < kSteps && q < pairs; q++)
            s[q] = __fadd_rn(s[q], __fmul_rn(a[q][j], b[q][j]));
}

/* The warp's four octets take the row's (edge, head) pairs in [edge][head] order, four
 * apart (octet o starts at pair o), kSteps pairs at a time. */
__global__ void __launch_bounds__(kBlock)
    gather_heads_backward_w_rows(const row_range rg, int64_t head_dim, const float *dy,
                                 const float *x, int64_t x_stride, float *dw)
{
    const int64_t base = rg.rowptr[rg.row_begin];
    const int heads = rg.heads;
    const int octet = threadIdx.x % 32 / 8, l = threadIdx.x % 8;
    const unsigned mask = 0xffu << (octet * 8);
    for_each_warp_row(rg, [&](int64_t r) {
        const int64_t k1 = rg.rowptr[rg.row_begin + r + 1];
        const float *dyr = dy + r * heads * head_dim;
        int64_t k = rg.rowptr[rg.row_begin + r];
        int h = octet;
        for (int pairs = kSteps; pairs == kSteps;) {
            int64_t e[kSteps];
            const float *a[kSteps], *b[kSteps];
            pairs = 0;
#pragma unroll
            for (int q = 0; q < kSteps; q++, h += 4) {
                for (; h >= heads; h -= heads)
                    k++;
                if (k >= k1)
                    break;
                e[q] = (k - base) * heads + h;
                a[q] = dyr + h * head_dim;
                b[q] = x + (int64_t)rg.colidx[k] * x_stride + h * head_dim;
                pairs++;
            }
            float s[kSteps];
            octet_dots(mask, l, head_dim, a, b, pairs, s);
#pragma unroll
            for (int q = 0; q < kSteps && q < pairs; q++)
                if (l == 0)
                    dw[e[q]] = s[q];
        }
    });
}

/* split_rows's edges for gather_heads: the weight of the lane's head, w[we(k) * heads +
 * c / head_dim]. */
struct head_edges {
    const int64_t *rowptr;
    const int32_t *colidx;
    const int64_t *perm;
    int64_t row_begin;
    const float *w;
    int heads;
    int64_t head_dim;

    struct lane_key {
        int head;
        int64_t base; /* w's first edge, without perm */
    };
    __device__ lane_key key(int64_t c) const
    {
        return lane_key{(int)(c / head_dim), perm ? 0 : rowptr[row_begin]};
    }
    __device__ float weight(int64_t k, const lane_key &l) const
    {
        return w[(perm ? perm[k] : k - l.base) * heads + l.head];
    }
};

/* The split rows where they fit (a float4 unit inside one head) and the instance does not
 * keep the ordered sums; else the ordered gather. */
void gather_any(cudaStream_t st, const gather &g, bool ordered)
{
    const int64_t width = g.heads * g.head_dim;
    if (!ordered && g.head_dim % 4 == 0 && split_fits(width, g.in, g.ld_in, g.out, g.ld_out)) {
        head_edges e = {g.rowptr, g.colidx, g.perm, g.row_begin, g.w, g.heads, g.head_dim};
        split_launch(st, e, g.row_begin, g.rows, width, g.in, g.ld_in, g.out, g.ld_out,
                     g.accumulate);
    } else {
        run_gather(st, g);
    }
}

/* gather_heads_backward_w by split rows (cuda_rows.cuh's lane layout): a group of G lanes
 * owns a row i, lane (s, u) holds float4 unit u of dy's row (loaded once), and sub-group s
 * takes edges k0 + s, k0 + s + S, ...: each lane multiplies its unit by x's row col(k),
 * and the H = head_dim / 4 lanes of a head add their four products by an xor butterfly
 * (H a power of two, so a head's lanes are an aligned block of the sub-group's). Every
 * lane of the group runs the same rounds of S * U edges, so that the shuffles see them
 * all; lanes past the row's end or width add zeros and write nothing. */
template <int G, int L>
__global__ void __launch_bounds__(kSplitBlock)
    split_dots(const row_range rg, int64_t head_dim, int lanes_per_head, const float *dy,
               const float *x, int64_t x_stride, float *dw)
{
    constexpr int S = G / L, U = kSplitAhead, per_block = kSplitBlock / G;
    const int lane = threadIdx.x % G, sub = lane / L;
    const int64_t width = rg.heads * head_dim, c = (int64_t)(lane % L) * 4;
    const bool on = c < width, writes = on && c % head_dim == 0;
    const int head = on ? (int)(c / head_dim) : 0;
    const unsigned mask = group_mask<G>();
    const int64_t base = rg.rowptr[rg.row_begin];
    for (int64_t r = (int64_t)blockIdx.x * per_block + threadIdx.x / G; r < rg.rows;
         r += (int64_t)gridDim.x * per_block) {
        const int64_t i = rg.row_begin + r, k0 = rg.rowptr[i], k1 = rg.rowptr[i + 1];
        float4 d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (on)
            d = *reinterpret_cast<const float4 *>(dy + r * width + c);
        for (int64_t kb = k0; kb < k1; kb += (int64_t)S * U) {
            float4 v[U];
#pragma unroll
            for (int q = 0; q < U; q++) {
                const int64_t k = kb + (int64_t)q * S + sub;
                v[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (on && k < k1)
                    v[q] = *reinterpret_cast<const float4 *>(
                        x + (int64_t)rg.colidx[k] * x_stride + c);
            }
#pragma unroll
            for (int q = 0; q < U; q++) {
                float dot = d.x * v[q].x + d.y * v[q].y + d.z * v[q].z + d.w * v[q].w;
                for (int m = 1; m < lanes_per_head; m *= 2)
                    dot += __shfl_xor_sync(mask, dot, m, G);
                const int64_t k = kb + (int64_t)q * S + sub;
                if (writes && k < k1)
                    dw[(k - base) * rg.heads + head] = dot;
            }
        }
    }
}

/* The split dots where they fit (head_dim a multiple of 4 whose units per head are a power
 * of two, rows of at most 128 floats, aligned) and the instance does not keep the ordered
 * sums; else the ordered kernel. */
void backward_w_any(cudaStream_t st, const row_range &rg, int64_t head_dim, const float *dy,
                    const float *x, int64_t x_stride, float *dw, bool ordered)
{
    const int64_t width = rg.heads * head_dim, per_head = head_dim / 4;
    if (!ordered && head_dim % 4 == 0 && (per_head & (per_head - 1)) == 0 &&
        split_fits(width, x, x_stride, dy, width)) {
        split_layout(width, [&](auto g, auto l) {
            constexpr int G = decltype(g)::value, L = decltype(l)::value;
            split_dots<G, L><<<grid_for(rg.rows, kSplitBlock / G), kSplitBlock, 0, st>>>(
                rg, head_dim, (int)per_head, dy, x, x_stride, dw);
        });
        return;
    }
    gather_heads_backward_w_rows<<<grid_for(rg.rows, kWarpsPerBlock), kBlock, 0, st>>>(
        rg, head_dim, dy, x, x_stride, dw);
}

} // namespace

extern "C" void cu_edge_scores(cudaStream_t st, const cu_csr *a, int64_t row_begin,
                               int64_t row_end, int heads, const float *src,
                               int64_t src_stride, const float *dst, int64_t dst_stride,
                               float *out)
{
    if (row_end <= row_begin || heads <= 0 || a->nnz <= 0)
        return;
    edge_scores_rows<<<grid_for(row_end - row_begin, kWarpsPerBlock), kBlock, 0, st>>>(
        range_of(a, row_begin, row_end, heads), src, src_stride, dst, dst_stride, out);
}

/* Runs for rows without edges too: ddst gets their zero sums. */
extern "C" void cu_edge_scores_backward(cudaStream_t st, const cu_csr *a, int64_t row_begin,
                                        int64_t row_end, int heads, const float *dout,
                                        float *dsrc, int64_t src_stride, float *ddst,
                                        int64_t dst_stride, bool accumulate)
{
    if (row_end <= row_begin || heads <= 0)
        return;
    edge_scores_backward_rows<<<grid_for(row_end - row_begin, kWarpsPerBlock), kBlock, 0,
                                st>>>(range_of(a, row_begin, row_end, heads), dout, dsrc,
                                      src_stride, ddst, dst_stride, accumulate);
}

extern "C" void cu_edge_softmax(cudaStream_t st, const cu_csr *a, int64_t row_begin,
                                int64_t row_end, int heads, const float *z, float *alpha)
{
    if (row_end <= row_begin || heads <= 0 || a->nnz <= 0)
        return;
    edge_softmax_rows<<<grid_for(row_end - row_begin, kWarpsPerBlock), kBlock, 0, st>>>(
        range_of(a, row_begin, row_end, heads), z, alpha);
}

extern "C" void cu_edge_softmax_backward(cudaStream_t st, const cu_csr *a, int64_t row_begin,
                                         int64_t row_end, int heads, const float *alpha,
                                         const float *dalpha, float *dz)
{
    if (row_end <= row_begin || heads <= 0 || a->nnz <= 0)
        return;
    edge_softmax_backward_rows<<<grid_for(row_end - row_begin, kWarpsPerBlock), kBlock, 0,
                                 st>>>(range_of(a, row_begin, row_end, heads), alpha, dalpha,
                                       dz);
}

/* Runs for rows without edges too: their outputs are zeros. */
extern "C" void cu_gather_heads(cudaStream_t st, const cu_csr *a, int64_t row_begin,
                                int64_t row_end, int heads, int64_t head_dim, const float *w,
                                const float *x, int64_t x_stride, float *y, bool ordered)
{
    if (row_end <= row_begin || heads <= 0 || head_dim <= 0)
        return;
    gather g = {a->rowptr, a->colidx, nullptr, row_begin, row_end - row_begin, heads, head_dim,
                w, x, x_stride, y, heads * head_dim, false};
    gather_any(st, g, ordered);
}

extern "C" void cu_gather_heads_backward_x(cudaStream_t st, const cu_csr *at,
                                           const int64_t *perm, int heads, int64_t head_dim,
                                           const float *w, const float *dy, float *dx,
                                           int64_t x_stride, bool ordered)
{
    if (at->nrows <= 0 || at->nnz <= 0 || heads <= 0 || head_dim <= 0)
        return;
    gather g = {at->rowptr, at->colidx, perm, 0, at->nrows, heads, head_dim,
                w, dy, heads * head_dim, dx, x_stride, true};
    gather_any(st, g, ordered);
}

/* head_dim 0 writes zeros, as the CPU's empty dot products do. */
extern "C" void cu_gather_heads_backward_w(cudaStream_t st, const cu_csr *a, int64_t row_begin,
                                           int64_t row_end, int heads, int64_t head_dim,
                                           const float *dy, const float *x, int64_t x_stride,
                                           float *dw, bool ordered)
{
    if (row_end <= row_begin || heads <= 0 || a->nnz <= 0)
        return;
    backward_w_any(st, range_of(a, row_begin, row_end, heads), head_dim, dy, x, x_stride, dw,
                   ordered);
}
