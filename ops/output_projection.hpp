// Attention output projection: heads' outputs [B, T, C] → residual branch [B, T, C].
#pragma once

#include "ops/precision.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// y = a Wᵀ + b (+ residual, fused, when given) with W [C, C] and b [C].
tensor_handle output_projection_forward(const tensor_handle& a, const tensor_handle& w, const tensor_handle& b,
                                        const tensor_handle& residual = {}, precision p = precision::f32);
/// da = dy W.
tensor_handle output_projection_backward_input(const tensor_handle& dy, const tensor_handle& w,
                                               precision p = precision::f32);
/// dW += dyᵀ a, db += Σ dy.
void output_projection_backward_weight(const tensor_handle& dy, const tensor_handle& a, tensor_handle& dw,
                                       tensor_handle& db, precision p = precision::f32);

} // namespace troupe::ops
