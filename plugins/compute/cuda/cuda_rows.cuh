/* Device helpers shared by the row kernels of kernels_sparse.cu and kernels_edge.cu: the
 * launch grid, a lane group's shuffle mask, and one unit (a float, or a float4 where the
 * row allows) loaded or stored. C++ only: included by those .cu files. */
#ifndef BV_CUDA_ROWS_CUH
#define BV_CUDA_ROWS_CUH

#include <stdint.h>

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

} // namespace cu_rows

#endif
