// SGD with Nesterov momentum: one kernel pass per parameter.
#include "ops/sgd_nesterov.hpp"

#include "kernels/cpu/optimizer.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

void sgd_nesterov::step(const std::vector<named_tensor>& params, const std::vector<named_tensor>& grads, float lr) {
  constexpr auto op = "sgd_nesterov::step";
  require(params.size() == grads.size(), op, "params and grads differ in length");
  if (buf_.empty())
    for (const auto& p : params)
      buf_.push_back(tensor_handle::zeros(p.value.shape(), dtype::f32, p.value.device()));
  require(buf_.size() == params.size(), op, "the parameter list changed since the first step");
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i].value;
    require(p.numel() == grads[i].value.numel(), op, "gradient of " + params[i].name + " has the wrong size");
    switch (p.device().kind) {
      case device::kind_t::cpu:
        kernels::cpu::sgd_nesterov_update(p.data<float>(), grads[i].value.data<float>(), buf_[i].data<float>(),
                                          p.numel(), lr, momentum_, weight_decay_);
        continue;
      case device::kind_t::cuda: break; // kernels/cuda launchers go here
    }
    unsupported_device(op, p.device());
  }
}

} // namespace troupe::ops
