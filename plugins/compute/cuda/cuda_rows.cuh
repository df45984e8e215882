/* Device helpers shared by the row kernels of kernels_sparse.cu and kernels_edge.cu: the
 * launch grid, a lane group's shuffle mask, one unit (a float, or a float4 where the row
 * allows) loaded or stored, and the split-row gather both use for narrow rows. C++ only:
 * included by those .cu files. */
#ifndef BV_CUDA_ROWS_CUH
#define BV_CUDA_ROWS_CUH

#include <stdint.h>

#include <type_traits>

namespace cu_rows {

constexpr int64_t kMaxGrid = 1 << 20;

/* Blocks for `items` of `per_block` each; kernels stride over the rest, so a capped grid
 * still covers them all. */
inline unsigned grid_for(int64_t items, int64_t per_block)
{
    int64_t blocks = (items + per_block - 1) / per_block;
    return (unsigned)(blocks < kMaxGrid ? blocks : kMaxGrid);
}

/* The lanes of this thread's group of G, for the group's shuffles. */
template <int G> __device__ unsigned group_mask()
{
    if constexpr (G == 32)
        return 0xffffffffu;
    else
        return ((1u << G) - 1) << (threadIdx.x % 32 / G * G);
}

template <int V> __device__ void load_unit(const float *p, float *r)
{
    if constexpr (V == 4) {
        float4 q = *reinterpret_cast<const float4 *>(p);
        r[0] = q.x, r[1] = q.y, r[2] = q.z, r[3] = q.w;
    } else {
        r[0] = *p;
    }
}

template <int V> __device__ void store_unit(float *p, const float *r)
{
    if constexpr (V == 4)
        *reinterpret_cast<float4 *>(p) = make_float4(r[0], r[1], r[2], r[3]);
    else
        *p = r[0];
}

/* ---- split rows: one row's edges spread over the lanes of its group ----------------------
 *
 * A group of G lanes owns one output row at a time. Each edge's row of `in` (width floats,
 * in float4 units) is read by L lanes (the units, rounded up to a power of two), so the
 * group takes S = G / L edges at once: sub-group s takes edges k0 + s, k0 + s + S, ..., the
 * loads of U of them issued before their multiply-adds, and the sub-groups' sums are then
 * added by an xor butterfly (each add is commutative, so every lane of a column gets the
 * same bits). Narrow rows keep all lanes busy this way, where the ordered kernels give each
 * column to one lane that walks the edges in order. The sums' order is not the CPU's edge
 * order: the bits differ from the cpu plugin's (by rounding: the tests' TOL_SUM), but not
 * from run to run. Needs width % 4 == 0 (units inside one weight's columns: the caller's
 * rule), width <= 32 * 4, and 16-byte aligned rows of in and out (split_fits). */

constexpr int kSplitBlock = 256;
constexpr int kSplitAhead = 4; /* U: edges whose loads a lane issues before its adds */

inline bool split_fits(int64_t width, const void *in, int64_t ld_in, const void *out,
                       int64_t ld_out)
{
    return width > 0 && width % 4 == 0 && width <= 128 && ld_in % 4 == 0 && ld_out % 4 == 0 &&
           (uintptr_t)in % 16 == 0 && (uintptr_t)out % 16 == 0;
}

/* out[r * ld_out + c] (+)= sum over row (row_begin + r)'s edges k of
 *   e.weight(k, e.key(c)) * in[colidx[k] * ld_in + c],    c < width
 * E gives the CSR (rowptr, colidx), key(c) (an E::lane_key: what a lane's weights depend on
 * besides the edge, computed once) and weight(k, key). */
template <int G, int L, typename E>
__global__ void __launch_bounds__(kSplitBlock)
    split_rows(const E e, int64_t row_begin, int64_t rows, int64_t width, const float *in,
               int64_t ld_in, float *out, int64_t ld_out, bool accumulate)
{
    constexpr int S = G / L, U = kSplitAhead, per_block = kSplitBlock / G;
    const int lane = threadIdx.x % G, sub = lane / L;
    const int64_t c = (int64_t)(lane % L) * 4;
    const bool on = c < width;
    typename E::lane_key key{};
    if (on)
        key = e.key(c);
    const unsigned mask = group_mask<G>();
    for (int64_t r = (int64_t)blockIdx.x * per_block + threadIdx.x / G; r < rows;
         r += (int64_t)gridDim.x * per_block) {
        const int64_t i = row_begin + r, k1 = e.rowptr[i + 1];
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int64_t kb = e.rowptr[i] + sub; on && kb < k1; kb += (int64_t)S * U) {
            float w[U];
            float4 x[U];
#pragma unroll
            for (int q = 0; q < U; q++) {
                const int64_t k = kb + (int64_t)q * S;
                w[q] = 0.0f;
                x[q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (k < k1) {
                    w[q] = e.weight(k, key);
                    x[q] = *reinterpret_cast<const float4 *>(in + (int64_t)e.colidx[k] * ld_in +
                                                             c);
                }
            }
#pragma unroll
            for (int q = 0; q < U; q++) {
                a.x = fmaf(w[q], x[q].x, a.x);
                a.y = fmaf(w[q], x[q].y, a.y);
                a.z = fmaf(w[q], x[q].z, a.z);
                a.w = fmaf(w[q], x[q].w, a.w);
            }
        }
#pragma unroll
        for (int m = L; m < G; m *= 2) {
            a.x += __shfl_xor_sync(mask, a.x, m, G);
            a.y += __shfl_xor_sync(mask, a.y, m, G);
            a.z += __shfl_xor_sync(mask, a.z, m, G);
            a.w += __shfl_xor_sync(mask, a.w, m, G);
        }
        if (on && sub == 0) {
            float4 *y = reinterpret_cast<float4 *>(out + r * ld_out + c);
            if (accumulate) {
                const float4 o = *y;
                a = make_float4(o.x + a.x, o.y + a.y, o.z + a.z, o.w + a.w);
            }
            *y = a;
        }
    }
}

/* The split rows' lane layout for a row of `width` floats: L = its float4 units rounded up
 * to a power of two, G = 8 L (S = 8 edges at once) up to a warp. Calls
 * launch(std::integral_constant<int, G>, std::integral_constant<int, L>), which launches
 * the kernel of that layout (split_rows, or split_dots of kernels_edge.cu). */
template <typename Launch> void split_layout(int64_t width, Launch launch)
{
    using std::integral_constant;
    const int64_t units = width / 4;
    if (units <= 1)
        launch(integral_constant<int, 8>{}, integral_constant<int, 1>{});
    else if (units <= 2)
        launch(integral_constant<int, 16>{}, integral_constant<int, 2>{});
    else if (units <= 4)
        launch(integral_constant<int, 32>{}, integral_constant<int, 4>{});
    else if (units <= 8)
        launch(integral_constant<int, 32>{}, integral_constant<int, 8>{});
    else if (units <= 16)
        launch(integral_constant<int, 32>{}, integral_constant<int, 16>{});
    else
        launch(integral_constant<int, 32>{}, integral_constant<int, 32>{});
}

/* split_rows over rows [row_begin, row_begin + rows); the caller checked split_fits. */
template <typename E>
void split_launch(cudaStream_t st, const E &e, int64_t row_begin, int64_t rows, int64_t width,
                  const float *in, int64_t ld_in, float *out, int64_t ld_out, bool accumulate)
{
    split_layout(width, [&](auto g, auto l) {
        constexpr int G = decltype(g)::value, L = decltype(l)::value;
        split_rows<G, L, E><<<grid_for(rows, kSplitBlock / G), kSplitBlock, 0, st>>>(
            e, row_begin, rows, width, in, ld_in, out, ld_out, accumulate);
    });
}

} // namespace cu_rows

#endif
