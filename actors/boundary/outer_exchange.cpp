// Local-update training at a stage's step boundary (#13): after each inner
// update the stage follows its method's schedule (schedulers/sync/sync_policy.hpp),
// hands the due fragment's values to its outer_sync actor and, when the
// exchange is applied, loads the values that come back before its next step.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/stage/stage_engine.hpp"
#include "actors/boundary/step_boundary.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe {

namespace {

class outer_exchange final : public step_boundary {
public:
  outer_exchange(stage_host& host, const boundary_choice& c)
      : host_(host), sync_(c.peer), spec_(std::any_cast<local_update_spec>(c.options)) {}

  std::string_view type() const override { return "outer_exchange"; }

  void start() override {
    const auto& name = host_.config().name;
    const auto* method = sched::find_sync_method(spec_.algorithm);
    if (!method)
      throw std::runtime_error(fmt::format("{}: no local-update method '{}'", name, spec_.algorithm));
    for (const auto& m : host_.models())
      for (const auto& t : m->params())
        if (!t.value.device().is_cpu())
          throw std::runtime_error(fmt::format("{}: local_update runs on CPU stages only so far ({} is on {})", name,
                                               t.name, to_string(t.value.device())));
    schedule_ = method->schedule(spec_);
    for (step_t s = 0; s < resumed_; ++s)
      schedule_
        ->after_inner_step(); // a resumed run: the schedule's counts as they were (exchanges are the sync actor's)
    fragments_ = method->fragments(spec_);
    outer_local_msg start{0, -1, outer_local_msg::start, {}};
    for (int f = 0; f < static_cast<int>(fragments_.size()); ++f)
      start.values.push_back(fragment_values(f));
    host_.send(sync_, caf::make_message(outer_atom::value, std::move(start)));
  }

  bool after_update(step_t steps_done) override {
    bool wait = false;
    for (auto e : schedule_->after_inner_step()) {
      bool perform = e.what == sched::fragment_event::kind::perform;
      outer_local_msg m{steps_done,
                        e.fragment,
                        perform ? outer_local_msg::perform : outer_local_msg::prepare,
                        {fragment_values(e.fragment)}};
      host_.send(sync_, caf::make_message(outer_atom::value, std::move(m)));
      if (perform)
        ++waiting_, wait = true;
    }
    // After this step's performs, so its sync actor saves the state they leave.
    if (checkpoint_due(steps_done, host_.config().checkpoint_every, host_.config().steps))
      host_.send(sync_,
                 caf::make_message(outer_atom::value, outer_local_msg{steps_done, -1, outer_local_msg::save, {}}));
    return !wait;
  }

  void resume_at(step_t steps_done) override { resumed_ = steps_done; }

  bool receive(const caf::message& msg) override {
    if (!msg.match_elements<outer_done_atom, outer_result_msg>())
      return false;
    const auto& m = msg.get_as<outer_result_msg>(1);
    const auto& name = host_.config().name;
    if (m.fragment < 0 || m.fragment >= static_cast<int>(fragments_.size()) || waiting_ == 0)
      throw std::runtime_error(
        fmt::format("{}: an exchange result for fragment {} of step {} it did not ask for", name, m.fragment, m.step));
    const float* src = m.values.data();
    std::size_t left = m.values.size();
    for (auto& t : fragment_tensors(m.fragment)) {
      auto n = static_cast<std::size_t>(t.numel());
      if (n > left)
        throw std::runtime_error(
          fmt::format("{}: fragment {} came back with {} values, too few", name, m.fragment, m.values.size()));
      std::memcpy(t.data<float>(), src, n * sizeof(float));
      src += n, left -= n;
    }
    for (const auto& model : host_.models())
      model->params_updated();
    if (--waiting_ == 0)
      host_.exchanged();
    return true;
  }

private:
  /// The tensors fragment `f` holds: a contiguous run of the stage's parameters
  /// of about equal size (torchft's fragments are model pieces; here each stage
  /// cuts its own), or the optimizer's moments (DES-LOC), live.
  std::vector<tensor_handle> fragment_tensors(int f) const {
    const auto& plan = fragments_.at(static_cast<std::size_t>(f));
    if (plan.content != sched::fragment_content::params)
      return host_.optimizer_state(plan.content == sched::fragment_content::exp_avg ? "exp_avg" : "exp_avg_sq");
    std::vector<tensor_handle> params;
    for (const auto& m : host_.models())
      for (const auto& t : m->params())
        params.push_back(t.value);
    std::int64_t total = 0, before = 0;
    for (const auto& t : params)
      total += t.numel();
    std::vector<tensor_handle> out;
    for (const auto& t : params) {
      if (sched::piece_of(before, total, plan.pieces) == plan.piece)
        out.push_back(t);
      before += t.numel();
    }
    return out;
  }

  std::vector<float> fragment_values(int f) const {
    std::vector<float> flat;
    for (const auto& t : fragment_tensors(f))
      flat.insert(flat.end(), t.data<float>(), t.data<float>() + t.numel());
    return flat;
  }

  stage_host& host_;
  int sync_; ///< the outer_sync actor that serves this stage
  local_update_spec spec_;
  std::unique_ptr<sched::sync_schedule> schedule_;
  std::vector<sched::fragment_plan> fragments_; ///< what each fragment holds (the method's plan)
  int waiting_ = 0;                             ///< performs sent, results not yet back
  step_t resumed_ = 0;                          ///< the step a resumed run starts at
};

} // namespace

step_boundary_type outer_exchange_boundary() {
  return {"outer_exchange",
          [](const graph_spec& g, const actor_spec& stage) -> std::optional<boundary_choice> {
            int sync = helper_of(g, "outer_sync", stage.name);
            if (sync < 0)
              return std::nullopt;
            return boundary_choice{{}, sync, g.local_update};
          },
          [](stage_host& host, const boundary_choice& c) -> std::unique_ptr<step_boundary> {
            return std::make_unique<outer_exchange>(host, c);
          }};
}

} // namespace troupe
