// GELU with the tanh approximation (GPT-2's): forward and backward.
#pragma once

namespace troupe::kernels::cpu {

/// y = 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))); y may alias x.
void gelu_forward(const float* x, float* y, long n);

/// dx = dy * gelu'(x); dx may alias dy.
void gelu_backward(const float* dy, const float* x, float* dx, long n);

/// Scalar reference versions (std::tanh) the vectorised kernels are checked against.
void gelu_forward_reference(const float* x, float* y, long n);
void gelu_backward_reference(const float* dy, const float* x, float* dx, long n);

} // namespace troupe::kernels::cpu
