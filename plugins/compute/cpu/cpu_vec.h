/* Eight-lane float helpers in GCC vector extensions for the CPU plugin's elementwise
 * kernels (GELU, ELU, edge softmax). A kernel body that uses them is built twice, generic
 * (two SSE halves) and target("avx2") (one AVX register), and picked by cpu_has_avx2; both
 * perform the same IEEE operations per lane (ISO C contracts nothing into FMAs), so they
 * give the same bits. Everything here is static and always inlined into those bodies, so
 * the vector-argument ABI, which differs between the two builds, never matters
 * (-Wno-psabi for the files that include this). */
#ifndef BV_CPU_VEC_H
#define BV_CPU_VEC_H

#include <stdint.h>
#include <string.h>

typedef float vec8f __attribute__((vector_size(32)));
typedef int32_t vec8i __attribute__((vector_size(32)));

#define CPU_VEC_INLINE static inline __attribute__((always_inline))

/* lanes of yes where mask is all ones, of no where it is zero */
CPU_VEC_INLINE vec8f vec8_select(vec8i mask, vec8f yes, vec8f no)
{
    return (vec8f)((mask & (vec8i)yes) | (~mask & (vec8i)no));
}

CPU_VEC_INLINE vec8f vec8_splat(float v)
{
    vec8f r = {0};
    return r + v;
}

/* k <= 8 floats from p; the other lanes are 0 */
CPU_VEC_INLINE vec8f vec8_load(const float *p, int64_t k)
{
    vec8f v = {0};
    memcpy(&v, p, (size_t)k * sizeof(float));
    return v;
}

CPU_VEC_INLINE void vec8_store(float *p, vec8f v, int64_t k)
{
    memcpy(p, &v, (size_t)k * sizeof(float));
}

/* exp(a) for a <= 0 (NaN stays NaN): Cephes' expf, a = n ln2 + r with |r| <= ln2/2, a
 * degree-6 polynomial for e^r, 2^n built in the exponent bits; 0 below -87 (never a
 * denormal) and for -inf. About 1 ulp. */
CPU_VEC_INLINE vec8f vec8_exp_nonpos(vec8f a)
{
    vec8i tiny = a < -87.0f;
    a = vec8_select(tiny, vec8_splat(-87.0f), a);
    vec8i n = __builtin_convertvector(a * 1.44269504088896341f - 0.5f, vec8i); /* rounds */
    vec8f fn = __builtin_convertvector(n, vec8f);
    vec8f r = a - fn * 0.693359375f + fn * 2.12194440e-4f;
    vec8f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    vec8f e = p * (vec8f)((n + 127) << 23);
    return (vec8f)((vec8i)e & ~tiny);
}

/* exp(a) - 1 for a <= 0 without the cancellation near 0: a degree-9 Taylor polynomial
 * for a > -0.5 (truncation error below 3e-10), exp(a) - 1 below. */
CPU_VEC_INLINE vec8f vec8_expm1_nonpos(vec8f a)
{
    vec8f t = a * (1.0f / 362880.0f) + 1.0f / 40320.0f;
    t = t * a + 1.0f / 5040.0f;
    t = t * a + 1.0f / 720.0f;
    t = t * a + 1.0f / 120.0f;
    t = t * a + 1.0f / 24.0f;
    t = t * a + 1.0f / 6.0f;
    t = t * a + 0.5f;
    t = t * a * a + a;
    return vec8_select(a > -0.5f, t, vec8_exp_nonpos(a) - 1.0f);
}

/* Defines `name(x, dy, out, b, e)`: vec8(x, dy, out, k) over [b, e), 8 lanes at a time and
 * the tail last (dy NULL for a forward pass). Full blocks pass k = 8 as a constant, so their
 * loads and stores compile to plain vector moves. */
#define CPU_VEC8_RANGE_BODY(name, vec8)                                                     \
    CPU_VEC_INLINE void name(const float *x, const float *dy, float *out, int64_t b,        \
                             int64_t e)                                                      \
    {                                                                                        \
        int64_t i = b;                                                                       \
        if (dy) {                                                                            \
            for (; i + 8 <= e; i += 8)                                                       \
                vec8(x + i, dy + i, out + i, 8);                                             \
        } else {                                                                             \
            for (; i + 8 <= e; i += 8)                                                       \
                vec8(x + i, NULL, out + i, 8);                                               \
        }                                                                                    \
        if (i < e)                                                                           \
            vec8(x + i, dy ? dy + i : NULL, out + i, e - i);                                 \
    }

#endif
