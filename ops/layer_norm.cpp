// Layer norm op: argument checks and dispatch to the kernels.
#include "ops/layer_norm.hpp"

#include "kernels/cpu/layer_norm.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace kc = kernels::cpu;

tensor_handle layer_norm_forward(const tensor_handle& x, const tensor_handle& gamma, const tensor_handle& beta,
                                 layer_norm_saved& saved, float eps) {
  constexpr auto op = "layer_norm_forward";
  require_f32(x, op, "x");
  const long cols = x.dim(x.rank() - 1), rows = rows_of(x);
  require_f32(gamma, op, "gamma", cols);
  require_f32(beta, op, "beta", cols);
  auto y = tensor_handle::empty(x.shape(), dtype::f32, x.device());
  saved.mean = tensor_handle::empty({rows}, dtype::f32, x.device());
  saved.rstd = tensor_handle::empty({rows}, dtype::f32, x.device());
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kc::layer_norm_forward(x.data<float>(), gamma.data<float>(), beta.data<float>(), y.data<float>(),
                           saved.mean.data<float>(), saved.rstd.data<float>(), rows, cols, eps);
    return y;
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, x.device());
}

tensor_handle layer_norm_backward_input(const tensor_handle& dy, const tensor_handle& x, const layer_norm_saved& saved,
                                        const tensor_handle& gamma, const tensor_handle& add) {
  constexpr auto op = "layer_norm_backward_input";
  require_f32(x, op, "x");
  const long cols = x.dim(x.rank() - 1), rows = rows_of(x);
  require_f32(dy, op, "dy", cols);
  require(dy.numel() == x.numel(), op, "dy and x must have the same shape");
  require(saved.mean.defined() && saved.mean.numel() == rows, op, "saved statistics do not match x");
  require_f32(gamma, op, "gamma", cols);
  if (add.defined()) {
    require_f32(add, op, "add", cols);
    require(add.numel() == x.numel(), op, "add and x must have the same shape");
  }
  auto dx = tensor_handle::empty(x.shape(), dtype::f32, x.device());
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kc::layer_norm_backward_input(dy.data<float>(), x.data<float>(), saved.mean.data<float>(), saved.rstd.data<float>(),
                                  gamma.data<float>(), dx.data<float>(), rows, cols,
                                  add.defined() ? add.data<float>() : nullptr);
    return dx;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, x.device());
}

void layer_norm_backward_weight(const tensor_handle& dy, const tensor_handle& x, const layer_norm_saved& saved,
                                tensor_handle& dgamma, tensor_handle& dbeta) {
  constexpr auto op = "layer_norm_backward_weight";
  require_f32(x, op, "x");
  const long cols = x.dim(x.rank() - 1), rows = rows_of(x);
  require_f32(dy, op, "dy", cols);
  require(dy.numel() == x.numel(), op, "dy and x must have the same shape");
  require(saved.mean.defined() && saved.mean.numel() == rows, op, "saved statistics do not match x");
  require_f32(dgamma, op, "dgamma", cols);
  require_f32(dbeta, op, "dbeta", cols);
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kc::layer_norm_backward_weight(dy.data<float>(), x.data<float>(), saved.mean.data<float>(),
                                   saved.rstd.data<float>(), dgamma.data<float>(), dbeta.data<float>(), rows, cols);
    return;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, x.device());
}

tensor_handle layer_norm_backward(const tensor_handle& dy, const tensor_handle& x, const layer_norm_saved& saved,
                                  const tensor_handle& gamma, tensor_handle& dgamma, tensor_handle& dbeta) {
  auto dx = layer_norm_backward_input(dy, x, saved, gamma);
  layer_norm_backward_weight(dy, x, saved, dgamma, dbeta);
  return dx;
}

} // namespace troupe::ops
