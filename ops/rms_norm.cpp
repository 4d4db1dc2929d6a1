// RMSNorm op: argument checks and dispatch to the kernels.
#include "ops/rms_norm.hpp"

#include "kernels/cpu/rms_norm.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace kc = kernels::cpu;

namespace {
/// Checks x, dy (when defined) and the saved statistics; returns the row count.
long check_rows(const tensor_handle& x, const tensor_handle& dy, const rms_norm_saved& saved, const char* op) {
  require_f32(x, op, "x");
  const long cols = x.dim(x.rank() - 1), rows = rows_of(x);
  require_f32(dy, op, "dy", cols);
  require(dy.numel() == x.numel(), op, "dy and x must have the same shape");
  require(saved.rstd.defined() && saved.rstd.numel() == rows, op, "saved statistics do not match x");
  return rows;
}
} // namespace

tensor_handle rms_norm_forward(const tensor_handle& x, const tensor_handle& w, rms_norm_saved& saved, float eps) {
  constexpr auto op = "rms_norm_forward";
  require_f32(x, op, "x");
  const long cols = x.dim(x.rank() - 1), rows = rows_of(x);
  require_f32(w, op, "w", cols);
  auto y = tensor_handle::empty(x.shape(), dtype::f32, x.device());
  saved.rstd = tensor_handle::empty({rows}, dtype::f32, x.device());
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kc::rms_norm_forward(x.data<float>(), w.data<float>(), y.data<float>(), saved.rstd.data<float>(), rows, cols, eps);
    return y;
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, x.device());
}

tensor_handle rms_norm_backward_input(const tensor_handle& dy, const tensor_handle& x, const rms_norm_saved& saved,
                                      const tensor_handle& w, const tensor_handle& add) {
  constexpr auto op = "rms_norm_backward_input";
  const long rows = check_rows(x, dy, saved, op), cols = x.dim(x.rank() - 1);
  require_f32(w, op, "w", cols);
  if (add.defined()) {
    require_f32(add, op, "add", cols);
    require(add.numel() == x.numel(), op, "add and x must have the same shape");
  }
  auto dx = tensor_handle::empty(x.shape(), dtype::f32, x.device());
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kc::rms_norm_backward_input(dy.data<float>(), x.data<float>(), saved.rstd.data<float>(), w.data<float>(),
                                dx.data<float>(), rows, cols, add.defined() ? add.data<float>() : nullptr);
    return dx;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, x.device());
}

void rms_norm_backward_weight(const tensor_handle& dy, const tensor_handle& x, const rms_norm_saved& saved,
                              tensor_handle& dw) {
  constexpr auto op = "rms_norm_backward_weight";
  const long rows = check_rows(x, dy, saved, op), cols = x.dim(x.rank() - 1);
  require_f32(dw, op, "dw", cols);
  switch (x.device().kind) {
  case device::kind_t::cpu:
    kc::rms_norm_backward_weight(dy.data<float>(), x.data<float>(), saved.rstd.data<float>(), dw.data<float>(), rows,
                                 cols);
    return;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, x.device());
}

} // namespace troupe::ops
