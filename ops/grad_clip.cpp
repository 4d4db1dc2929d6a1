// Global-norm clipping: a sum of squares, then one scaling pass when needed.
#include "ops/grad_clip.hpp"

#include <cmath>

#include "kernels/cpu/elementwise.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

double grad_sq_norm(const std::vector<named_tensor>& grads) {
  double total = 0;
  for (const auto& g : grads) {
    switch (g.value.device().kind) {
    case device::kind_t::cpu:
      total += kernels::cpu::sum_squares(g.value.data<float>(), g.value.numel());
      continue;
    case device::kind_t::cuda:
      break; // kernels/cuda launchers go here
    }
    unsupported_device("grad_sq_norm", g.value.device());
  }
  return total;
}

void scale_grads(const std::vector<named_tensor>& grads, float factor) {
  for (const auto& g : grads) {
    switch (g.value.device().kind) {
    case device::kind_t::cpu:
      kernels::cpu::scale(g.value.data<float>(), factor, g.value.numel());
      continue;
    case device::kind_t::cuda:
      break;
    }
    unsupported_device("scale_grads", g.value.device());
  }
}

float clip_factor(double global_norm, double max_norm) {
  double f = max_norm / (global_norm + 1e-6);
  return f < 1.0 ? float(f) : 1.0f;
}

double clip_grad_norm(const std::vector<named_tensor>& grads, double max_norm) {
  double norm = std::sqrt(grad_sq_norm(grads));
  float f = clip_factor(norm, max_norm);
  if (f < 1.0f)
    scale_grads(grads, f);
  return norm;
}

} // namespace troupe::ops
