/* Prototypes of the CPU plugin's transformer kernels (ABI 1.2 slots; compute.h documents
 * what each computes). Implemented in kernels_transformer.c. */
#ifndef BV_CPU_KERNELS_TRANSFORMER_H
#define BV_CPU_KERNELS_TRANSFORMER_H

#include <stdbool.h>
#include <stdint.h>

#include "bivouac/compute.h"

void cpu_layernorm_forward(bv_compute *c, int64_t rows, int64_t cols, float eps,
                           const float *x, const float *gamma, const float *beta, float *y,
                           float *mean, float *rstd);
void cpu_layernorm_backward(bv_compute *c, int64_t rows, int64_t cols, const float *x,
                            const float *gamma, const float *mean, const float *rstd,
                            const float *dy, float *dx, bool accumulate, float *dgamma,
                            float *dbeta);
void cpu_gelu_forward(bv_compute *c, int64_t n, const float *x, float *y);
void cpu_gelu_backward(bv_compute *c, int64_t n, const float *x, const float *dy, float *dx);
void cpu_gemm_batched(bv_compute *c, int64_t count, bool trans_a, bool trans_b, int64_t m,
                      int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                      int64_t stride_a, const float *b, int64_t ldb, int64_t stride_b,
                      float beta, float *cm, int64_t ldc, int64_t stride_c);
void cpu_attention_forward(bv_compute *c, int64_t batch, int64_t seq, int heads,
                           int64_t head_dim, const float *qkv, float *att, float *out);
void cpu_attention_backward(bv_compute *c, int64_t batch, int64_t seq, int heads,
                            int64_t head_dim, const float *qkv, const float *att,
                            const float *dout, float *scratch, float *dqkv);
void cpu_embedding_forward(bv_compute *c, int64_t batch, int64_t seq, int64_t dim,
                           const int32_t *tokens, const float *wte, const float *wpe,
                           float *out);
void cpu_embedding_backward(bv_compute *c, int64_t batch, int64_t seq, int64_t dim,
                            const int32_t *tokens, const float *dout, float *dwte,
                            float *dwpe);
void cpu_scale(bv_compute *c, int64_t n, float alpha, float *x);

#endif
