// Llama's elementwise and row kernels on the GPU (f32): RMSNorm, SwiGLU on the fused
// gate|up row, and rotary positions in Hugging Face's rotate-half layout. Each
// matches its CPU reference in kernels/cpu/ (rms_norm, swiglu, rope).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// y = x * rstd * w per row, rstd[row] = 1/√(mean(x²) + eps) saved for backward.
status rms_norm_forward(float* y, float* rstd, const float* x, const float* w, int rows, int cols, float eps,
                        cudaStream_t stream);

/// dx = rstd * (dy*w - x * rstd² * mean(dy*w*x)) (overwritten); dw += Σ dy * x * rstd.
status rms_norm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                         int rows, int cols, cudaStream_t stream);

/// y [rows, hidden] = silu(gate) * up with gu [rows, 2·hidden] (gate then up per row).
status swiglu_forward(float* y, const float* gu, std::int64_t rows, int hidden, cudaStream_t stream);

/// dgu [rows, 2·hidden] from dy [rows, hidden].
status swiglu_backward(float* dgu, const float* dy, const float* gu, std::int64_t rows, int hidden,
                       cudaStream_t stream);

/// Turns `heads` heads of `head_dim` at the start of each row of x (stride ld) by
/// pos[row], in place, with tables cos, sin [positions, head_dim/2]; `inverse`: backward.
status rope_rotate(float* x, std::int64_t rows, std::int64_t ld, int heads, int head_dim, const std::int32_t* pos,
                   const float* cos, const float* sin, bool inverse, cudaStream_t stream);

} // namespace troupe::gpu
