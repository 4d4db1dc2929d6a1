// DiLoCo and Streaming DiLoCo as a per-replica sync policy (#13).
#include "schedulers/sync/streaming_diloco.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace troupe::sched {

std::vector<fragment_event> fragment_schedule::after_inner_step() {
  std::vector<fragment_event> out;
  int f = static_cast<int>(exchanges_ % fragments_);
  ++local_step_;
  if (local_step_ == cadence_ - delay_)
    out.push_back({fragment_event::kind::prepare, f});
  if (local_step_ == cadence_) {
    out.push_back({fragment_event::kind::perform, f});
    local_step_ = 0;
    ++exchanges_;
  }
  return out;
}

fragment_schedule make_fragment_schedule(const local_update_spec& spec) {
  int p = spec.algorithm == "streaming_diloco" ? spec.fragments : 1;
  if (spec.sync_every < p || spec.sync_every % p != 0 || spec.delay < 0 || spec.delay >= spec.sync_every / p)
    throw std::invalid_argument(fmt::format("streaming_diloco: sync_every {}, {} fragments, delay {} break the "
                                            "rules (local_update_problems)",
                                            spec.sync_every, p, spec.delay));
  return {p, spec.sync_every / p, spec.algorithm == "streaming_diloco" ? spec.delay : 0};
}

streaming_diloco::streaming_diloco(const local_update_spec& spec, std::vector<std::vector<float>> start)
    : spec_(spec), schedule_(make_fragment_schedule(spec)), global_(std::move(start)) {
  int p = spec.algorithm == "streaming_diloco" ? spec.fragments : 1;
  if (static_cast<int>(global_.size()) != p)
    throw std::invalid_argument(
      fmt::format("streaming_diloco: {} fragments of values for {} fragments", global_.size(), p));
  if (spec.algorithm != "streaming_diloco")
    spec_.delay = 0, spec_.alpha = 0; // plain DiLoCo: the whole model at once
  for (const auto& g : global_)
    outer_.emplace_back(spec.outer, g.size());
}

std::vector<float> streaming_diloco::prepare(int f, std::span<const float> local) const {
  const auto& g = global(f);
  std::vector<float> out(g.size());
  pseudo_gradient(g, local, out);
  return out;
}

void streaming_diloco::perform(int f, std::span<const float> averaged, std::span<float> local) {
  auto& g = global_.at(static_cast<std::size_t>(f));
  if (local.size() != g.size())
    throw std::invalid_argument(
      fmt::format("streaming_diloco::perform: {} local values for a fragment of {}", local.size(), g.size()));
  outer_[static_cast<std::size_t>(f)].step(g, averaged); // from the saved global: the new global
  mix(local, g, 1.0 - spec_.alpha); // local + (1−α)(global − local) = global + α(local − global)
  ++exchanges_;
}

void streaming_diloco::save(sync_state& s) const {
  for (std::size_t f = 0; f < global_.size(); ++f) {
    s.values[fmt::format("global.{}", f)] = global_[f];
    s.values[fmt::format("momentum.{}", f)] = outer_[f].momentum();
    s.counts[fmt::format("outer_steps.{}", f)] = outer_[f].steps();
  }
  s.counts["exchanges"] = exchanges_;
}

void streaming_diloco::restore(const sync_state& s) {
  auto global = global_; // everything checked before anything changes
  std::vector<outer_sgd> outer;
  for (std::size_t f = 0; f < global_.size(); ++f) {
    global[f] = s.take(fmt::format("global.{}", f), global_[f].size());
    outer.emplace_back(spec_.outer, global_[f].size());
    outer.back().load(s.take(fmt::format("momentum.{}", f), global_[f].size()),
                      static_cast<long>(s.count(fmt::format("outer_steps.{}", f))));
  }
  exchanges_ = static_cast<long>(s.count("exchanges"));
  global_ = std::move(global), outer_ = std::move(outer);
}

} // namespace troupe::sched
