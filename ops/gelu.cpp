// GELU op: dispatch to the vectorised kernel.
#include "ops/gelu.hpp"

#include "kernels/cpu/gelu.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

tensor_handle gelu_forward(const tensor_handle& x) {
  constexpr auto op = "gelu_forward";
  require_f32(x, op, "x");
  auto y = tensor_handle::empty(x.shape(), dtype::f32, x.device());
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::gelu_forward(x.data<float>(), y.data<float>(), x.numel());
    return y;
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, x.device());
}

tensor_handle gelu_backward(const tensor_handle& dy, const tensor_handle& x) {
  constexpr auto op = "gelu_backward";
  require_f32(x, op, "x");
  require_f32(dy, op, "dy");
  require(dy.numel() == x.numel(), op, "dy and x must have the same shape");
  auto dx = tensor_handle::empty(x.shape(), dtype::f32, x.device());
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::gelu_backward(dy.data<float>(), x.data<float>(), dx.data<float>(), x.numel());
    return dx;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, x.device());
}

} // namespace troupe::ops
