// Σ x² of an f32 array on the GPU, accumulated in double: the global gradient
// norm for clipping, read back once per step.
#pragma once

#include <cstdint>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// *acc += Σ x[i]² over n elements, summed in double (several calls add into
/// one accumulator; zero it first). A NaN or infinite element makes *acc NaN
/// or infinite, as on the CPU. The order of the additions is not fixed.
status sum_squares(double* acc, const float* x, std::int64_t n, cudaStream_t stream);

} // namespace troupe::gpu
