// SGD with Nesterov momentum: one kernel pass per parameter.
#include "ops/sgd_nesterov.hpp"

#include "kernels/cpu/optimizer.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

sgd_nesterov::sgd_nesterov(const std::vector<named_tensor>& params, float momentum, float weight_decay)
    : optimizer(params, {"momentum_buffer"}, nullptr, "sgd_nesterov"), momentum_(momentum),
      weight_decay_(weight_decay) {
  if (!device().is_cpu())
    unsupported_device("sgd_nesterov", device()); // no device kernel yet
}

void sgd_nesterov::update(std::size_t i, const tensor_handle& p, const tensor_handle& g, float lr) {
  kernels::cpu::sgd_nesterov_update(p.data<float>(), g.data<float>(), buffer(i, 0).data<float>(), p.numel(), lr,
                                    momentum_, weight_decay_);
}

} // namespace troupe::ops
