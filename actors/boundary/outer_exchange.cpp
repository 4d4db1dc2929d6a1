// Local-update training at a stage's step boundary (#13): after each inner
// update the stage follows its method's schedule (schedulers/sync/sync_policy.hpp),
// hands the due fragment's values to its outer_sync actor and, when the
// exchange is applied, loads the values that come back before its next step.
// With tied embeddings apart, the head's copy of the tied matrix follows the
// embedding's outer steps instead of taking its own (tied_mirror.hpp).
#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/stage/stage_engine.hpp"
#include "actors/boundary/rejoin_donor.hpp"
#include "actors/boundary/step_boundary.hpp"
#include "actors/boundary/tied_mirror.hpp"
#include "actors/zero_shard_state.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe {

namespace {

/// What a stage's outer exchange is made from: the method's settings and, with
/// tied embeddings apart, the twin stage and the names of the copies held here.
struct outer_options {
  local_update_spec spec;
  int twin = -1;
  std::string embedding, copy;
};

/// The tied copies of `stage`: (embedding, head's copy), names or empty.
std::pair<std::string, std::string> tied_names(const graph_spec& g, const actor_spec& stage) {
  std::pair<std::string, std::string> out;
  for (const auto& t : tied_copies_on(g, stage))
    (t.counted ? out.first : out.second) = t.name;
  return out;
}

class outer_exchange final : public step_boundary {
public:
  outer_exchange(stage_host& host, const boundary_choice& c)
      : host_(host), sync_(c.peer), spec_(std::any_cast<const outer_options&>(c.options).spec) {
    const auto& o = std::any_cast<const outer_options&>(c.options);
    if (o.twin >= 0)
      mirror_.emplace(host_, o.twin, o.embedding, o.copy);
  }

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
    steps_ = steps_done;
    bool performed = false;
    tied_mirror::touched touched{};
    for (auto e : schedule_->after_inner_step()) {
      bool perform = e.what == sched::fragment_event::kind::perform;
      outer_local_msg m{steps_done,
                        e.fragment,
                        perform ? outer_local_msg::perform : outer_local_msg::prepare,
                        {fragment_values(e.fragment)}};
      host_.send(sync_, caf::make_message(outer_atom::value, std::move(m)));
      if (perform) {
        ++waiting_, performed = true;
        if (mirror_ && mirror_->embedding() >= 0)
          for (auto i : fragment_members(e.fragment))
            if (static_cast<int>(i) == mirror_->embedding())
              touched[static_cast<std::size_t>(fragments_[static_cast<std::size_t>(e.fragment)].content)] = true;
      }
    }
    if (performed && mirror_) {
      mirrored_ = {steps_done, touched};
      waiting_ += mirror_->expect(steps_done); // the head's stage: the embedding's values too
    }
    // After this step's performs, so its sync actor saves the state they leave.
    if (checkpoint_due(steps_done, host_.config().checkpoint_every, host_.config().steps))
      host_.send(sync_,
                 caf::make_message(outer_atom::value, outer_local_msg{steps_done, -1, outer_local_msg::save, {}}));
    if (!performed)
      maybe_donate();
    return !performed;
  }

  void resume_at(step_t steps_done) override { resumed_ = steps_ = steps_done; }

  bool receive(const caf::message& msg) override {
    if (msg.match_elements<rejoin_atom, rejoin_msg>()) { // this replica is the donor (#26)
      donor_.take(msg.get_as<rejoin_msg>(1), steps_, host_);
      maybe_donate(); // at that step already, with nothing awaited: its state now
      return true;
    }
    if (msg.match_elements<tied_atom, tied_value_msg>()) {
      if (!mirror_)
        throw std::runtime_error(fmt::format("{}: tied-matrix values, but no tied copy here", host_.config().name));
      if (mirror_->receive(msg.get_as<tied_value_msg>(1)))
        done_one();
      return true;
    }
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
    done_one();
    return true;
  }

private:
  /// The stage tensors (flat indices, in chunk and parameter order) that
  /// fragment `f` holds: a contiguous run of about equal size (torchft's
  /// fragments are model pieces; here each stage cuts its own), or, for a
  /// moment (DES-LOC), all. The head's tied copy is in none.
  std::vector<std::size_t> fragment_members(int f) const {
    const auto& plan = fragments_.at(static_cast<std::size_t>(f));
    std::vector<std::int64_t> sizes;
    for (const auto& m : host_.models())
      for (const auto& t : m->params())
        sizes.push_back(t.value.numel());
    const auto left_out = mirror_ ? mirror_->copy() : -1;
    std::int64_t total = 0, before = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i)
      total += static_cast<int>(i) == left_out ? 0 : sizes[i];
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      if (static_cast<int>(i) == left_out)
        continue;
      if (plan.content != sched::fragment_content::params || sched::piece_of(before, total, plan.pieces) == plan.piece)
        out.push_back(i);
      before += sizes[i];
    }
    return out;
  }

  /// The tensors fragment `f` holds, live: parameters, or the optimizer's moments
  /// (none before its first update).
  std::vector<tensor_handle> fragment_tensors(int f) const {
    const auto& plan = fragments_.at(static_cast<std::size_t>(f));
    std::vector<tensor_handle> all;
    if (plan.content == sched::fragment_content::params) {
      for (const auto& m : host_.models())
        for (const auto& t : m->params())
          all.push_back(t.value);
    } else {
      all = host_.optimizer_state(plan.content == sched::fragment_content::exp_avg ? "exp_avg" : "exp_avg_sq");
      if (all.empty())
        return {};
    }
    std::vector<tensor_handle> out;
    for (auto i : fragment_members(f))
      out.push_back(all.at(i));
    return out;
  }

  std::vector<float> fragment_values(int f) const {
    std::vector<float> flat;
    for (const auto& t : fragment_tensors(f))
      flat.insert(flat.end(), t.data<float>(), t.data<float>() + t.numel());
    return flat;
  }

  /// One awaited thing (a fragment's result, the embedding's values) is in.
  void done_one() {
    if (--waiting_ > 0)
      return;
    if (mirror_ && mirrored_.first >= 0) // the embedding's stage: the head's copy follows
      mirror_->send(mirrored_.first, mirrored_.second);
    mirrored_.first = -1;
    maybe_donate();
    host_.exchanged();
  }

  /// The rejoining replica's stage gets this one's state once it has done the
  /// steps the loader named and their exchanges are applied (before the next
  /// update: the gradients of the next step's first microbatches change nothing it holds).
  void maybe_donate() {
    if (waiting_ == 0)
      donor_.maybe_send(host_, steps_);
  }

  stage_host& host_;
  int sync_; ///< the outer_sync actor that serves this stage
  local_update_spec spec_;
  std::unique_ptr<sched::sync_schedule> schedule_;
  std::vector<sched::fragment_plan> fragments_; ///< what each fragment holds (the method's plan)
  int waiting_ = 0;                             ///< performs sent, results (and the embedding's values) not yet back
  std::optional<tied_mirror> mirror_;           ///< with tied embeddings apart
  std::pair<step_t, tied_mirror::touched> mirrored_{-1, {}}; ///< the step whose outer steps the head's copy follows
  step_t resumed_ = 0;                                       ///< the step a resumed run starts at
  step_t steps_ = 0;                                         ///< inner steps done (after_update's last)
  rejoin_donor donor_;                                       ///< a rejoining replica that takes this stage's state
};

} // namespace

std::vector<std::int64_t> outer_tensor_sizes(const graph_spec& g, const actor_spec& stage) {
  auto copy = tied_names(g, stage).second;
  std::vector<std::int64_t> out;
  for (const auto& chunk : zero_params(g, stage))
    for (const auto& p : chunk)
      if (p.name != copy)
        out.push_back(p.elements);
  return out;
}

step_boundary_type outer_exchange_boundary() {
  return {"outer_exchange",
          [](const graph_spec& g, const actor_spec& stage) -> std::optional<boundary_choice> {
            int sync = helper_of(g, "outer_sync", stage.name);
            if (sync < 0)
              return std::nullopt;
            auto [embedding, copy] = tied_names(g, stage);
            return boundary_choice{{}, sync, outer_options{g.local_update, tied_twin_of(g, stage), embedding, copy}};
          },
          [](stage_host& host, const boundary_choice& c) -> std::unique_ptr<step_boundary> {
            return std::make_unique<outer_exchange>(host, c);
          }};
}

} // namespace troupe
