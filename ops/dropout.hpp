// Dropout (inverted, as PyTorch's): off by default, p = 0 returns its input as is.
// The GPT does not use it yet (gpt_config has no dropout rate).
#pragma once

#include <cstdint>

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// What the forward keeps for backward: the keep mask (u8, undefined when p = 0).
struct dropout_saved {
  tensor_handle mask;
  float p = 0.0f;
};

/// y = x · keep / (1 - p) with keep ~ Bernoulli(1 - p) drawn from `seed`; p in [0, 1).
tensor_handle dropout_forward(const tensor_handle& x, float p, std::uint64_t seed, dropout_saved& saved);

/// dx = dy · keep / (1 - p) with the forward's mask.
tensor_handle dropout_backward(const tensor_handle& dy, const dropout_saved& saved);

} // namespace troupe::ops
