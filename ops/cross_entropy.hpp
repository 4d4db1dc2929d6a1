// Cross-entropy of logits against integer targets: mean over counted tokens.
#pragma once

#include <cstdint>

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// Mean of -log softmax(logits)[target] over rows whose target != ignore_index.
/// logits [..., V] f32, targets i32 with one entry per row.
float cross_entropy_forward(const tensor_handle& logits, const tensor_handle& targets, std::int32_t ignore_index = -1);

/// dlogits for loss gradient `dloss`; returns the loss too (`loss` when non-null).
tensor_handle cross_entropy_backward(const tensor_handle& logits, const tensor_handle& targets, float dloss,
                                     std::int32_t ignore_index = -1, float* loss = nullptr);

} // namespace troupe::ops
