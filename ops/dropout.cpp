// Dropout op: identity at p = 0, else the mask kernels.
#include "ops/dropout.hpp"

#include "kernels/cpu/dropout.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

tensor_handle dropout_forward(const tensor_handle& x, float p, std::uint64_t seed, dropout_saved& saved) {
  constexpr auto op = "dropout_forward";
  require_f32(x, op, "x");
  require(p >= 0.0f && p < 1.0f, op, "p must be in [0, 1)");
  saved.p = p;
  saved.mask = {};
  if (p == 0.0f)
    return x;
  auto y = tensor_handle::empty(x.shape(), dtype::f32, x.device());
  saved.mask = tensor_handle::empty(x.shape(), dtype::u8, x.device());
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::dropout_forward(x.data<float>(), y.data<float>(), saved.mask.data<std::uint8_t>(), x.numel(), p,
                                  seed);
    return y;
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, x.device());
}

tensor_handle dropout_backward(const tensor_handle& dy, const dropout_saved& saved) {
  constexpr auto op = "dropout_backward";
  require_f32(dy, op, "dy");
  if (saved.p == 0.0f)
    return dy;
  require(saved.mask.defined() && saved.mask.numel() == dy.numel(), op, "the saved mask does not match dy");
  auto dx = tensor_handle::empty(dy.shape(), dtype::f32, dy.device());
  switch (dy.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::dropout_backward(dy.data<float>(), saved.mask.data<std::uint8_t>(), dx.data<float>(), dy.numel(),
                                   saved.p);
    return dx;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, dy.device());
}

} // namespace troupe::ops
