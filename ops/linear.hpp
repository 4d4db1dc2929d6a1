// Linear layer y = x Wᵀ + b (W is [out, in] as in PyTorch) with split backward.
#pragma once

#include "ops/precision.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// y[..., out] = x[..., in] Wᵀ + b; `b` may be undefined (no bias).
tensor_handle linear_forward(const tensor_handle& x, const tensor_handle& w, const tensor_handle& b);

/// y = x Wᵀ + b + residual (residual shaped like y, or undefined), the residual add
/// fused into the product, whose arithmetic is `p`.
tensor_handle linear_forward(const tensor_handle& x, const tensor_handle& w, const tensor_handle& b,
                             const tensor_handle& residual, precision p = precision::f32);

/// dx = dy W.
tensor_handle linear_backward_input(const tensor_handle& dy, const tensor_handle& w, precision p = precision::f32);

/// dW += dyᵀ x and db += Σ dy over rows (`db` may be undefined); `scale` multiplies dy.
void linear_backward_weight(const tensor_handle& dy, const tensor_handle& x, tensor_handle& dw, tensor_handle& db,
                            float scale = 1.0f, precision p = precision::f32);

/// Both halves: returns dx and accumulates dW, db.
tensor_handle linear_backward(const tensor_handle& dy, const tensor_handle& x, const tensor_handle& w,
                              tensor_handle& dw, tensor_handle& db, precision p = precision::f32);

} // namespace troupe::ops
