// One pass of a stage's model: a forward (the loss on the loss hop), a
// backward, or a backward's halves (I and W), on the tensors a microbatch's hop holds here.
#include "actors/stage/stage_engine.hpp"
#include "actors/stage/stage_engine_detail.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/trace/trace.hpp"

namespace troupe {

using detail::loss_grad;
using detail::take;

stage_tensor stage_engine::run_pass(const sched::stage_task& t) {
  const auto& a = t.what;
  auto& w = slot(t.chunk, a.microbatch);
  auto& model = chunk(t.chunk);
  stage_tensor out;
  if (a.kind == sched::op_kind::forward) {
    auto input = take(w.input, "input", cfg_.name);
    if (t.loss) {
      auto loss = model.forward(a.microbatch, input, w.targets);
      record_loss(t, w, loss.value.data<float>()[0]);
    } else {
      out = model.forward(a.microbatch, input, {});
    }
  } else if (a.kind == sched::op_kind::weight_grad) {
    model.backward_weight(a.microbatch);
  } else {
    stage_tensor g;
    if (t.loss) { // d(step loss)/d(this microbatch's mean loss): its share of the step's tokens
      auto tokens = core_->step_tokens();
      if (tokens <= 0)
        throw std::runtime_error(fmt::format("{}: step {} has no tokens in its plan", cfg_.name, t.step));
      g.value = loss_grad(w.targets.numel(), tokens);
      w.targets = {};
    } else {
      g = take(w.grad, "gradient", cfg_.name);
    }
    out = a.kind == sched::op_kind::backward ? model.backward(a.microbatch, g) : model.backward_input(a.microbatch, g);
  }
  return out;
}

void stage_engine::record_loss(const sched::stage_task& t, const tensors& w, double v) {
  if (!std::isfinite(v))
    throw std::runtime_error(fmt::format("{}: the loss is {} at step {} microbatch {} (lr {:.3g}); lower "
                                         "train.lr or raise train.warmup",
                                         cfg_.name, v, t.step, t.what.microbatch, cfg_.lr.at(t.step)));
  loss_sum_ += v * static_cast<double>(w.targets.numel());
  own_loss_sum_ += v * static_cast<double>(w.targets.numel());
  own_tokens_ += w.targets.numel();
}

} // namespace troupe
