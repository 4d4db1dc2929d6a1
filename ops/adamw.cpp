// AdamW step: checks the lists line up, then one kernel pass per parameter.
#include "ops/adamw.hpp"

#include <cmath>

#include "kernels/cpu/optimizer.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

void adamw::step(const std::vector<named_tensor>& params, const std::vector<named_tensor>& grads, float lr) {
  constexpr auto op = "adamw::step";
  require(params.size() == grads.size(), op, "params and grads differ in length");
  if (m_.empty())
    for (const auto& p : params) {
      m_.push_back(tensor_handle::zeros(p.value.shape(), dtype::f32, p.value.device()));
      v_.push_back(tensor_handle::zeros(p.value.shape(), dtype::f32, p.value.device()));
    }
  require(m_.size() == params.size(), op, "the parameter list changed since the first step");
  ++t_;
  kernels::cpu::adamw_args a{lr,
                             opt_.beta1,
                             opt_.beta2,
                             opt_.eps,
                             0.0f,
                             float(1.0 - std::pow(double(opt_.beta1), double(t_))),
                             float(1.0 - std::pow(double(opt_.beta2), double(t_)))};
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i].value;
    const auto& g = grads[i].value;
    require(p.numel() == g.numel(), op, "gradient of " + params[i].name + " has the wrong size");
    a.weight_decay = p.rank() >= 2 ? opt_.weight_decay : 0.0f;
    switch (p.device().kind) {
      case device::kind_t::cpu:
        kernels::cpu::adamw_update(p.data<float>(), g.data<float>(), m_[i].data<float>(), v_[i].data<float>(),
                                   p.numel(), a);
        continue;
      case device::kind_t::cuda: break; // kernels/cuda launchers go here
    }
    unsupported_device(op, p.device());
  }
}

void adamw::load_state(long steps, std::vector<tensor_handle> m, std::vector<tensor_handle> v) {
  constexpr auto op = "adamw::load_state";
  require(steps >= 0, op, "a negative step count");
  require(m.size() == v.size(), op, "first and second moments differ in number");
  for (std::size_t i = 0; i < m.size(); ++i) {
    require(m[i].defined() && v[i].defined() && m[i].shape() == v[i].shape(), op,
            "first and second moments differ in shape");
    require(m[i].type() == dtype::f32 && v[i].type() == dtype::f32, op, "moments must be f32");
  }
  t_ = steps;
  m_ = std::move(m);
  v_ = std::move(v);
}

} // namespace troupe::ops
