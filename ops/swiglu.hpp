// SwiGLU gate (Llama's MLP activation) on the fused gate|up projection.
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// gu [..., 2H] (gate then up, one product of the fused weight) → silu(gate) · up [..., H].
tensor_handle swiglu_forward(const tensor_handle& gu);

/// d gu [..., 2H] from dy [..., H].
tensor_handle swiglu_backward(const tensor_handle& dy, const tensor_handle& gu);

} // namespace troupe::ops
