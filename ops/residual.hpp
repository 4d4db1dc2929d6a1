// Residual connection y = a + b; its backward hands dy to both branches.
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// y = a + b (same shapes).
tensor_handle residual_forward(const tensor_handle& a, const tensor_handle& b);

/// acc += x in place: a residual add that reuses the branch's buffer, and how the
/// gradients of the two branches of a residual meet in backward.
void residual_add_inplace(tensor_handle& acc, const tensor_handle& x);

} // namespace troupe::ops
