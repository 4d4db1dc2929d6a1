// Element-wise GPU kernels: GELU (tanh approximation, as GPT-2) forward and
// backward, residual add, gradient accumulation and scaling, f32/bf16 conversion.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over n elements.
status gelu_forward(float* y, const float* x, std::int64_t n, cudaStream_t stream);
status gelu_forward(__nv_bfloat16* y, const __nv_bfloat16* x, std::int64_t n, cudaStream_t stream);

/// dx = dy * gelu'(x); dx may alias dy.
status gelu_backward(float* dx, const float* x, const float* dy, std::int64_t n, cudaStream_t stream);
status gelu_backward(__nv_bfloat16* dx, const __nv_bfloat16* x, const __nv_bfloat16* dy, std::int64_t n,
                     cudaStream_t stream);

/// out = a + b (the residual connection; its backward passes dy to both inputs
/// unchanged, and gradients meeting at a fork are summed with this or `accumulate`).
status residual_add(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);
status residual_add(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, std::int64_t n,
                    cudaStream_t stream);

/// dst += src (gradient accumulation; bf16 sources add into f32 buffers).
status accumulate(float* dst, const float* src, std::int64_t n, cudaStream_t stream);
status accumulate(float* dst, const __nv_bfloat16* src, std::int64_t n, cudaStream_t stream);
status accumulate(__nv_bfloat16* dst, const __nv_bfloat16* src, std::int64_t n, cudaStream_t stream);

/// x *= factor over n f32 elements (gradient clipping scales every gradient).
status scale(float* x, float factor, std::int64_t n, cudaStream_t stream);

/// dst = src converted (round to nearest even into bf16).
status convert(__nv_bfloat16* dst, const float* src, std::int64_t n, cudaStream_t stream);
status convert(float* dst, const __nv_bfloat16* src, std::int64_t n, cudaStream_t stream);

/// Sets n f32 or bf16 elements to `value` (zeroing gradients, poisoning test buffers).
status fill(float* dst, float value, std::int64_t n, cudaStream_t stream);
status fill(__nv_bfloat16* dst, float value, std::int64_t n, cudaStream_t stream);

} // namespace troupe::gpu
