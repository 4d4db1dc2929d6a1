// Inverted dropout with a counter-based random stream (reproducible from a seed).
#pragma once

#include <cstdint>

namespace troupe::kernels::cpu {

/// y = keep ? x / (1 - p) : 0 with keep drawn per element from (seed, index);
/// mask[i] records keep (1) or drop (0). p must be in [0, 1).
void dropout_forward(const float* x, float* y, std::uint8_t* mask, long n, float p, std::uint64_t seed);

/// dx = mask ? dy / (1 - p) : 0.
void dropout_backward(const float* dy, const std::uint8_t* mask, float* dx, long n, float p);

} // namespace troupe::kernels::cpu
