// Fused layer norm over the last dimension on the GPU, forward and backward.
// Statistics are kept in f32 whatever the element type.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// y[i,:] = (x[i,:] - mean_i) * rstd_i * gamma + beta for x of `rows` x `cols`;
/// writes mean[rows] and rstd[rows] (f32) for the backward pass.
status layer_norm_forward(float* y, float* mean, float* rstd, const float* x, const float* gamma, const float* beta,
                          int rows, int cols, float eps, cudaStream_t stream);
status layer_norm_forward(__nv_bfloat16* y, float* mean, float* rstd, const __nv_bfloat16* x,
                          const __nv_bfloat16* gamma, const __nv_bfloat16* beta, int rows, int cols, float eps,
                          cudaStream_t stream);

/// dx = d/dx of the layer norm given dy (overwritten); dgamma and dbeta (f32,
/// `cols` each) are accumulated (+=), so zero them first for a fresh gradient.
status layer_norm_backward(float* dx, float* dgamma, float* dbeta, const float* dy, const float* x, const float* gamma,
                           const float* mean, const float* rstd, int rows, int cols, cudaStream_t stream);
status layer_norm_backward(__nv_bfloat16* dx, float* dgamma, float* dbeta, const __nv_bfloat16* dy,
                           const __nv_bfloat16* x, const __nv_bfloat16* gamma, const float* mean, const float* rstd,
                           int rows, int cols, cudaStream_t stream);

} // namespace troupe::gpu
