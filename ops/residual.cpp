// Residual op: elementwise add kernels.
#include "ops/residual.hpp"

#include "kernels/cpu/elementwise.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

tensor_handle residual_forward(const tensor_handle& a, const tensor_handle& b) {
  constexpr auto op = "residual_forward";
  require_f32(a, op, "a");
  require_f32(b, op, "b");
  require(a.shape() == b.shape(), op, "a and b must have the same shape");
  auto y = tensor_handle::empty(a.shape(), dtype::f32, a.device());
  switch (a.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::add(a.data<float>(), b.data<float>(), y.data<float>(), a.numel());
    return y;
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, a.device());
}

void residual_add_inplace(tensor_handle& acc, const tensor_handle& x) {
  constexpr auto op = "residual_add_inplace";
  require_f32(acc, op, "acc");
  require_f32(x, op, "x");
  require(acc.numel() == x.numel(), op, "acc and x must have the same size");
  switch (acc.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::add_inplace(acc.data<float>(), x.data<float>(), x.numel());
    return;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, acc.device());
}

} // namespace troupe::ops
