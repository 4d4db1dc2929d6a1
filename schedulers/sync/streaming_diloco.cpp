// Streaming DiLoCo (#13): the fragment schedule and outer step it shares with
// DiLoCo, its settings, its toy run and its registration.
#include "schedulers/sync/streaming_diloco.hpp"

#include <algorithm>
#include <map>
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

streaming_settings streaming_of(const local_update_spec& spec) {
  streaming_settings out;
  if (spec.options.contains("fragments"))
    out = {option_int(spec, "fragments"), option_int(spec, "delay"), option_number(spec, "alpha")};
  return out;
}

fragment_schedule make_fragment_schedule(const local_update_spec& spec) {
  auto [p, delay, alpha] = streaming_of(spec);
  if (p < 1 || spec.sync_every < p || spec.sync_every % p != 0 || delay < 0 || delay >= spec.sync_every / p)
    throw std::invalid_argument(fmt::format("streaming_diloco: sync_every {}, {} fragments, delay {} break the "
                                            "rules (local_update_problems)",
                                            spec.sync_every, p, delay));
  return {p, spec.sync_every / p, delay};
}

namespace {

/// torchft's fragment schedule behind the schedule interface.
class fragment_schedule_of : public sync_schedule {
public:
  explicit fragment_schedule_of(const local_update_spec& spec) : s_(make_fragment_schedule(spec)) {}
  std::vector<fragment_event> after_inner_step() override { return s_.after_inner_step(); }

private:
  fragment_schedule s_;
};

} // namespace

std::unique_ptr<sync_schedule> make_fragment_sync_schedule(const local_update_spec& spec) {
  return std::make_unique<fragment_schedule_of>(spec);
}

streaming_diloco::streaming_diloco(const local_update_spec& spec, std::vector<std::vector<float>> start)
    : spec_(spec), settings_(streaming_of(spec)), schedule_(make_fragment_schedule(spec)), global_(std::move(start)) {
  if (static_cast<int>(global_.size()) != settings_.fragments)
    throw std::invalid_argument(
      fmt::format("streaming_diloco: {} fragments of values for {} fragments", global_.size(), settings_.fragments));
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
  // From the global (mixing from local, local + (global − local), was off by
  // an ulp with α = 0, a different one on each replica).
  mix(g, local, settings_.alpha);
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

namespace {

method_settings settings() {
  // Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): H = 100.
  auto options = local_sgd_options(100, {});
  options.push_back(
    int_setting_spec("fragments", "P: fragments, one exchanged every H/P steps round robin", 1, 1, max_count));
  options.push_back(
    int_setting_spec("delay", "τ: steps a fragment's exchange overlaps before it is applied", 0, 0, max_period));
  options.push_back(number_setting_spec(
    "alpha", "α: the new global is mixed toward the local parameters (0: the new global)", 0, -unbounded, unbounded));
  auto problems = [](const local_update_spec& l, const local_update_context&) {
    auto out = outer_problems(l);
    auto [fragments, delay, alpha] = streaming_of(l);
    auto add = [&](std::string key, std::string message) { out.push_back({std::move(key), std::move(message)}); };
    if (l.sync_every < 1)
      return out;
    // torchft/local_sgd.py, DiLoCo.__init__: the same three refusals, in this order.
    if (fragments < 1 || l.sync_every < fragments)
      add("fragments", fmt::format("{} fragments need sync_every of at least {} (one fragment is exchanged at a "
                                   "time), got sync_every {}",
                                   fragments, std::max(fragments, 1), l.sync_every));
    else if (l.sync_every % fragments != 0)
      add("sync_every", fmt::format("sync_every ({}) must divide by fragments ({}): one fragment every H/P steps",
                                    l.sync_every, fragments));
    else if (int cadence = l.sync_every / fragments; delay < 0 || delay >= cadence)
      add("delay", fmt::format("delay ({}) must be from 0 to below sync_every / fragments ({}): a fragment's "
                               "exchange is applied before the next one begins",
                               delay, cadence));
    if (!(alpha >= 0 && alpha <= 1))
      add("alpha", fmt::format("must be from 0 to 1 (0: the new global, 1: the local parameters), got {}", alpha));
    return out;
  };
  return {std::move(options), nullptr, problems};
}

} // namespace

sync_sim_result run_diloco_toy(const sync_sim_config& c) {
  if (c.replicas < 1 || c.values < 1 || c.steps < 0)
    throw std::invalid_argument("run_sync_sim: replicas and values must be at least 1, steps at least 0");
  auto format = parse_wire_format(c.spec.quantize);
  if (!format)
    throw std::invalid_argument(fmt::format("run_sync_sim: unknown quantize '{}'", c.spec.quantize));
  int p = streaming_of(c.spec).fragments;
  auto r_count = static_cast<std::size_t>(c.replicas);
  std::vector<std::vector<std::vector<float>>> weights(
    r_count, std::vector<std::vector<float>>(static_cast<std::size_t>(p),
                                             std::vector<float>(static_cast<std::size_t>(c.values), c.start)));
  std::vector<streaming_diloco> policy;
  for (std::size_t r = 0; r < r_count; ++r)
    policy.emplace_back(c.spec, weights[r]);
  auto out = toy_result(r_count);
  auto record_global = [&](int step) {
    for (std::size_t r = 0; r < r_count; ++r)
      for (int f = 0; f < p; ++f)
        out.global[r][step].push_back(policy[r].global(f).front());
  };
  record_global(0);
  std::map<int, std::vector<float>> in_flight; // fragment -> the averaged pseudo-gradient on its way
  for (int step = 0; step < c.steps; ++step) {
    for (std::size_t r = 0; r < r_count; ++r) {
      auto& h = out.history[r].emplace_back();
      for (const auto& frag : weights[r])
        h.push_back(frag.front());
    }
    for (std::size_t r = 0; r < r_count; ++r)
      for (auto& frag : weights[r])
        for (auto& v : frag)
          v -= c.inner_lr * c.grad_for(static_cast<int>(r));
    std::vector<std::vector<fragment_event>> events;
    for (auto& pol : policy)
      events.push_back(pol.after_inner_step());
    bool performed = false;
    for (std::size_t k = 0; k < events.front().size(); ++k) {
      auto ev = events.front()[k]; // every replica keeps the same schedule
      auto f = static_cast<std::size_t>(ev.fragment);
      if (ev.what == fragment_event::kind::prepare) {
        std::vector<quantized_rows> parts;
        for (std::size_t r = 0; r < r_count; ++r) {
          parts.push_back(quantize_rows(policy[r].prepare(ev.fragment, weights[r][f]), c.values, *format));
          out.bytes_sent[r] += static_cast<std::int64_t>(parts.back().wire_bytes());
        }
        in_flight[ev.fragment] = reduce_mean(parts);
      } else {
        auto avg = in_flight.extract(ev.fragment);
        if (avg.empty())
          throw std::logic_error(fmt::format("fragment {} performed before it was prepared", ev.fragment));
        for (std::size_t r = 0; r < r_count; ++r)
          policy[r].perform(ev.fragment, avg.mapped(), weights[r][f]);
        performed = true;
      }
    }
    if (performed && step + 1 < c.steps)
      record_global(step + 1);
  }
  out.exchanges = policy.front().exchanges();
  return out;
}

void register_streaming_diloco(const sync_registrar& add) {
  add(
    "streaming_diloco",
    {"Streaming DiLoCo: P fragments round robin, exchanged τ steps early, mixed by α",
     [](const local_update_spec& s) { return param_fragments(streaming_of(s).fragments); }, make_fragment_sync_schedule,
     [](const sync_setup& s) { return make_averaging_policy(s, std::make_unique<streaming_diloco>(s.spec, s.start)); },
     settings(), nullptr, run_diloco_toy, /*rejoins=*/true});
}

} // namespace troupe::sched
