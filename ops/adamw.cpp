// AdamW step: one kernel pass per parameter, on the parameters' device.
#include "ops/adamw.hpp"

#include <cmath>

#include "kernels/cpu/optimizer.hpp"

namespace troupe::ops {

const std::vector<std::string>& adamw::kinds() {
  static const std::vector<std::string> names{"exp_avg", "exp_avg_sq"};
  return names;
}

adamw::adamw(const std::vector<named_tensor>& params, adamw_options opt, device_stream stream)
    : optimizer(params, kinds(), stream, "adamw"), opt_(opt) {}

void adamw::update(std::size_t i, const tensor_handle& p, const tensor_handle& g, float lr) {
  float decay = shape(i).rank() >= 2 ? opt_.weight_decay : 0.0f;
  float* m = buffer(i, 0).data<float>();
  float* v = buffer(i, 1).data<float>();
  if (!device().is_cpu()) {
    device_kernels().adamw(
      {p.data<float>(), g.data<float>(), m, v, p.numel(), lr, opt_.beta1, opt_.beta2, opt_.eps, decay, steps()},
      device(), stream());
    return;
  }
  auto t = double(steps());
  kernels::cpu::adamw_args a{lr,
                             opt_.beta1,
                             opt_.beta2,
                             opt_.eps,
                             decay,
                             float(1.0 - std::pow(double(opt_.beta1), t)),
                             float(1.0 - std::pow(double(opt_.beta2), t))};
  kernels::cpu::adamw_update(p.data<float>(), g.data<float>(), m, v, p.numel(), a);
}

} // namespace troupe::ops
