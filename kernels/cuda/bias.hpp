// Bias for linear layers on the GPU: add a row vector to every row, and its
// gradient as column sums accumulated in f32.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// y[i, j] += b[j] for a row-major y[m, n].
status bias_add(float* y, const float* b, int m, int n, cudaStream_t stream);
status bias_add(__nv_bfloat16* y, const __nv_bfloat16* b, int m, int n, cudaStream_t stream);

/// db[j] += sum_i dy[i, j] (accumulates: zero db first for a fresh gradient).
status bias_grad(float* db, const float* dy, int m, int n, cudaStream_t stream);
status bias_grad(float* db, const __nv_bfloat16* dy, int m, int n, cudaStream_t stream);

} // namespace troupe::gpu
