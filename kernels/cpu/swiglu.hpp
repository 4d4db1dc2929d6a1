// SwiGLU's gate (Llama's MLP): y = silu(gate) * up on the fused gate|up projection,
// and its backward.
#pragma once

namespace troupe::kernels::cpu {

/// gu is [rows, 2·hidden], each row gate (the first `hidden`) then up; y [rows, hidden]
/// = gate · sigmoid(gate) · up.
void swiglu_forward(const float* gu, float* y, long rows, long hidden);

/// dgu [rows, 2·hidden] from dy [rows, hidden]: d gate = dy · up · s · (1 + gate · (1 - s))
/// with s = sigmoid(gate), d up = dy · silu(gate).
void swiglu_backward(const float* dy, const float* gu, float* dgu, long rows, long hidden);

/// Scalar reference versions (std::exp, double) the vectorised kernels are checked against.
void swiglu_forward_reference(const float* gu, float* y, long rows, long hidden);
void swiglu_backward_reference(const float* dy, const float* gu, float* dgu, long rows, long hidden);

} // namespace troupe::kernels::cpu
