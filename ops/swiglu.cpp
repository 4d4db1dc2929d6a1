// SwiGLU op: shape checks and dispatch to the vectorised kernel.
#include "ops/swiglu.hpp"

#include "kernels/cpu/swiglu.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

tensor_handle swiglu_forward(const tensor_handle& gu) {
  constexpr auto op = "swiglu_forward";
  require_f32(gu, op, "gu");
  const long width = gu.dim(gu.rank() - 1), rows = rows_of(gu);
  require(width % 2 == 0, op, "gu's last dimension must be even (gate then up)");
  shape_t s = gu.shape();
  s[s.rank() - 1] = width / 2;
  auto y = tensor_handle::empty(s, dtype::f32, gu.device());
  switch (gu.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::swiglu_forward(gu.data<float>(), y.data<float>(), rows, width / 2);
    return y;
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, gu.device());
}

tensor_handle swiglu_backward(const tensor_handle& dy, const tensor_handle& gu) {
  constexpr auto op = "swiglu_backward";
  require_f32(gu, op, "gu");
  const long width = gu.dim(gu.rank() - 1), rows = rows_of(gu);
  require_f32(dy, op, "dy", width / 2);
  require(2 * dy.numel() == gu.numel(), op, "dy must be gu's shape with half its last dimension");
  auto dgu = tensor_handle::empty(gu.shape(), dtype::f32, gu.device());
  switch (gu.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::swiglu_backward(dy.data<float>(), gu.data<float>(), dgu.data<float>(), rows, width / 2);
    return dgu;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, gu.device());
}

} // namespace troupe::ops
