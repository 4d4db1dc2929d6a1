// Attention input projection: x [B, T, C] → packed q, k, v [B, T, 3C].
#pragma once

#include "ops/precision.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// qkv = x Wᵀ + b with W [3C, C] and b [3C].
tensor_handle qkv_projection_forward(const tensor_handle& x, const tensor_handle& w, const tensor_handle& b,
                                     precision p = precision::f32);
/// dx = dqkv W.
tensor_handle qkv_projection_backward_input(const tensor_handle& dqkv, const tensor_handle& w,
                                            precision p = precision::f32);
/// dW += dqkvᵀ x, db += Σ dqkv.
void qkv_projection_backward_weight(const tensor_handle& dqkv, const tensor_handle& x, tensor_handle& dw,
                                    tensor_handle& db, precision p = precision::f32);

} // namespace troupe::ops
