// GELU activation (tanh approximation, as GPT-2) with its backward.
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// y = gelu(x), same shape.
tensor_handle gelu_forward(const tensor_handle& x);

/// dx = dy · gelu'(x).
tensor_handle gelu_backward(const tensor_handle& dy, const tensor_handle& x);

} // namespace troupe::ops
