// A pipeline stage's side of local-update training (#13): after each inner
// update it follows its method's schedule (schedulers/sync_policy.hpp), hands
// the due fragment's values to its outer_sync actor and, when the exchange is
// applied, loads the values that come back before its next step.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/stage_engine.hpp"

namespace troupe {

void stage_engine::outer_setup() {
  const auto* method = sched::find_sync_method(cfg_.local_update.algorithm);
  if (!method)
    throw std::runtime_error(fmt::format("{}: no local-update method '{}'", cfg_.name, cfg_.local_update.algorithm));
  for (auto& m : models_)
    for (const auto& t : m->params())
      if (!t.value.device().is_cpu())
        throw std::runtime_error(fmt::format("{}: local_update runs on CPU stages only so far ({} is on {})",
                                             cfg_.name, t.name, to_string(t.value.device())));
  outer_schedule_ = method->schedule(cfg_.local_update);
  fragments_ = method->fragments(cfg_.local_update);
  outer_local_msg start{0, -1, outer_local_msg::start, {}};
  for (int f = 0; f < static_cast<int>(fragments_.size()); ++f)
    start.values.push_back(fragment_values(f).front());
  out_.outer(cfg_.outer_sync, start);
}

std::vector<tensor_handle> stage_engine::fragment_tensors(int f) const {
  const auto& plan = fragments_.at(static_cast<std::size_t>(f));
  std::vector<tensor_handle> params;
  if (plan.content == sched::fragment_content::params) {
    for (const auto& m : models_)
      for (const auto& t : m->params())
        params.push_back(t.value);
    // A piece is a contiguous run of the stage's tensors of about equal size
    // (torchft's fragments are model pieces; here each stage cuts its own).
    std::int64_t total = 0, before = 0;
    for (const auto& t : params)
      total += t.numel();
    std::vector<tensor_handle> out;
    for (const auto& t : params) {
      auto piece = std::min<std::int64_t>(plan.pieces - 1, before * plan.pieces / std::max<std::int64_t>(total, 1));
      if (piece == plan.piece)
        out.push_back(t);
      before += t.numel();
    }
    return out;
  }
  // AdamW's moments, live (empty until the first update: they start at zero).
  auto kind = plan.content == sched::fragment_content::exp_avg ? "exp_avg" : "exp_avg_sq";
  std::vector<tensor_handle> out;
  for (const auto& opt : optimizers_) {
    const auto& kinds = opt->state_kinds();
    auto k = std::find(kinds.begin(), kinds.end(), kind);
    if (k == kinds.end())
      throw std::runtime_error(fmt::format("{}: the optimizer keeps no '{}' to exchange", cfg_.name, kind));
    auto state = opt->state();
    for (std::size_t i = static_cast<std::size_t>(k - kinds.begin()); i < state.tensors.size(); i += kinds.size())
      out.push_back(state.tensors[i].value);
  }
  return out;
}

std::vector<std::vector<float>> stage_engine::fragment_values(int f) const {
  std::vector<float> flat;
  for (const auto& t : fragment_tensors(f))
    flat.insert(flat.end(), t.data<float>(), t.data<float>() + t.numel());
  return {std::move(flat)};
}

bool stage_engine::outer_exchange(step_t steps_done) {
  bool wait = false;
  for (auto e : outer_schedule_->after_inner_step()) {
    bool perform = e.what == sched::fragment_event::kind::perform;
    out_.outer(cfg_.outer_sync, outer_local_msg{steps_done, e.fragment,
                                                perform ? outer_local_msg::perform : outer_local_msg::prepare,
                                                fragment_values(e.fragment)});
    if (perform)
      ++outer_waiting_, wait = true;
  }
  return !wait;
}

void stage_engine::on_outer_result(const outer_result_msg& m) {
  if (m.fragment < 0 || m.fragment >= static_cast<int>(fragments_.size()) || outer_waiting_ == 0)
    throw std::runtime_error(fmt::format("{}: an exchange result for fragment {} of step {} it did not ask for",
                                         cfg_.name, m.fragment, m.step));
  const float* src = m.values.data();
  std::size_t left = m.values.size();
  for (auto& t : fragment_tensors(m.fragment)) {
    auto n = static_cast<std::size_t>(t.numel());
    if (n > left)
      throw std::runtime_error(fmt::format("{}: fragment {} came back with {} values, too few", cfg_.name,
                                           m.fragment, m.values.size()));
    std::memcpy(t.data<float>(), src, n * sizeof(float));
    src += n, left -= n;
  }
  for (auto& model : models_)
    model->params_updated();
  if (--outer_waiting_ == 0)
    core_->on_exchanged();
}

} // namespace troupe
