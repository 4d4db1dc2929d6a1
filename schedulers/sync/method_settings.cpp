// The settings most local-update methods share (sync_every, the outer
// optimizer, quantize) and the built-in methods' own, each beside its rules.
#include "schedulers/sync/method_settings.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/sync/sync_policy.hpp"

namespace troupe::sched {

namespace {

constexpr int max_period = 1'000'000'000;
constexpr int max_count = 1 << 20;
constexpr double unbounded = 1e9; // the finer rules say what is allowed (problems)

/// The options of the DiLoCo family: sync_every, the outer optimizer and quantize.
std::vector<option_spec> local_sgd_options(int sync_every, const outer_optimizer_spec& outer) {
  std::vector<option_spec> out{sync_every_option(sync_every)};
  auto o = outer_options(outer);
  out.insert(out.end(), o.begin(), o.end());
  out.push_back(quantize_option());
  return out;
}

} // namespace

option_spec sync_every_option(int fallback) {
  return int_setting_spec("sync_every", "H: inner steps each replica takes between exchanges", fallback, 1, max_period);
}

std::vector<option_spec> outer_options(const outer_optimizer_spec& fallback) {
  return {
    number_setting_spec("outer.lr", "the outer step's learning rate (above 0)", fallback.lr, -unbounded, unbounded),
    number_setting_spec("outer.momentum", "the outer step's momentum (from 0 to below 1)", fallback.momentum,
                        -unbounded, unbounded),
    bool_setting_spec("outer.nesterov", "Nesterov momentum in the outer step", fallback.nesterov)};
}

option_spec quantize_option() {
  return choice_setting_spec("quantize", "how the outer exchange travels (per-row scales, reduced in f32)",
                             {"none", "bf16", "int8", "fp8"});
}

std::vector<local_update_problem> outer_problems(const local_update_spec& l) {
  std::vector<local_update_problem> out;
  if (!(l.outer.lr > 0))
    out.push_back({"outer.lr", fmt::format("must be above 0, got {}", l.outer.lr)});
  if (!(l.outer.momentum >= 0 && l.outer.momentum < 1))
    out.push_back({"outer.momentum", fmt::format("must be from 0 to below 1, got {}", l.outer.momentum)});
  if (l.sync_every < 1)
    out.push_back({"sync_every", fmt::format("must be at least 1, got {}", l.sync_every)});
  return out;
}

const std::string& option_text(const local_update_spec& spec, const std::string& key) {
  auto it = spec.options.find(key);
  if (it == spec.options.end())
    throw std::invalid_argument(fmt::format("local_update.{}: no value for algorithm '{}'", key, spec.algorithm));
  return it->second;
}

int option_int(const local_update_spec& spec, const std::string& key) {
  return std::stoi(option_text(spec, key));
}

double option_number(const local_update_spec& spec, const std::string& key) {
  return std::stod(option_text(spec, key));
}

method_settings diloco_settings() {
  // DiLoCo paper (arXiv 2311.08105): H = 500, outer Nesterov lr 0.7, momentum 0.9.
  return {local_sgd_options(500, {}), nullptr,
          [](const local_update_spec& l, const local_update_context&) { return outer_problems(l); }};
}

method_settings streaming_diloco_settings() {
  // Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): H = 100.
  auto options = local_sgd_options(100, {});
  options.push_back(
    int_setting_spec("fragments", "P: fragments, one exchanged every H/P steps round robin", 1, 1, max_count));
  options.push_back(
    int_setting_spec("delay", "τ: steps a fragment's exchange overlaps before it is applied", 0, 0, max_period));
  options.push_back(number_setting_spec(
    "alpha", "α: the new global is mixed toward the local parameters (0: the new global)", 0, -unbounded, unbounded));
  auto configure = [](local_update_spec& l) {
    l.fragments = option_int(l, "fragments"), l.delay = option_int(l, "delay"), l.alpha = option_number(l, "alpha");
  };
  auto problems = [](const local_update_spec& l, const local_update_context&) {
    auto out = outer_problems(l);
    auto add = [&](std::string key, std::string message) { out.push_back({std::move(key), std::move(message)}); };
    if (l.sync_every < 1)
      return out;
    // torchft/local_sgd.py, DiLoCo.__init__: the same three refusals, in this order.
    if (l.fragments < 1 || l.sync_every < l.fragments)
      add("fragments", fmt::format("{} fragments need sync_every of at least {} (one fragment is exchanged at a "
                                   "time), got sync_every {}",
                                   l.fragments, std::max(l.fragments, 1), l.sync_every));
    else if (l.sync_every % l.fragments != 0)
      add("sync_every", fmt::format("sync_every ({}) must divide by fragments ({}): one fragment every H/P steps",
                                    l.sync_every, l.fragments));
    else if (int cadence = l.sync_every / l.fragments; l.delay < 0 || l.delay >= cadence)
      add("delay", fmt::format("delay ({}) must be from 0 to below sync_every / fragments ({}): a fragment's "
                               "exchange is applied before the next one begins",
                               l.delay, cadence));
    if (!(l.alpha >= 0 && l.alpha <= 1))
      add("alpha", fmt::format("must be from 0 to 1 (0: the new global, 1: the local parameters), got {}", l.alpha));
    return out;
  };
  return {std::move(options), configure, problems};
}

method_settings noloco_settings() {
  // NoLoCo (Kolehmainen et al. 2025, arXiv 2506.10911, and jkolehm/noloco's
  // outer_lr/outer_momentum): H = 50, lr 0.7, momentum 0.5; its step is its own.
  auto options = local_sgd_options(50, {0.7, 0.5, false});
  options.push_back(
    int_setting_spec("group", "replicas averaged together at each exchange (paper: 2)", 2, 1, max_count));
  options.push_back(choice_setting_spec(
    "route", "random: each microbatch goes on to a random replica of the next stage; chain: it stays",
    {"random", "chain"}));
  auto configure = [](local_update_spec& l) {
    l.group = option_int(l, "group"), l.route = option_text(l, "route");
    l.routes_across_replicas = l.route == "random";
  };
  auto problems = [](const local_update_spec& l, const local_update_context& c) {
    auto out = outer_problems(l);
    if (l.group < 2 || l.group > c.replicas || c.replicas % l.group != 0)
      out.push_back({"group", fmt::format("groups of {} must partition the {} replica{} (data_parallel.replicas), "
                                          "at least 2 to a group",
                                          l.group, c.replicas, c.replicas == 1 ? "" : "s")});
    if (l.replica_groups > 0 && l.replica_groups < c.replicas)
      out.push_back({"replica_groups", "NoLoCo's groups and random routes are its own (local_update.group): leave "
                                       "replica_groups out"});
    if (l.routes_across_replicas && c.virtual_stages > 1)
      out.push_back({"", fmt::format("NoLoCo's random routes take stages of one model chunk each "
                                     "(pipeline.virtual_stages is {}): use route: chain",
                                     c.virtual_stages)});
    return out;
  };
  return {std::move(options), configure, problems};
}

method_settings desloc_settings() {
  // DES-LOC (arXiv 2505.22549): K_u = 3·K_x, K_v = 6·K_x when not written.
  std::vector<option_spec> options{
    int_setting_spec("periods.params", "K_x: inner steps between averages of the parameters", 16, 1, max_period),
    int_setting_spec("periods.momentum", "K_u: between averages of Adam's first moment (default 3·K_x)", 0, 1,
                     max_period),
    int_setting_spec("periods.variance", "K_v: between averages of Adam's second moment (default 6·K_x)", 0, 1,
                     max_period),
    quantize_option()};
  options[1].fallback.clear(), options[2].fallback.clear(); // they follow K_x
  auto configure = [](local_update_spec& l) {
    l.period_params = option_int(l, "periods.params");
    l.options.emplace("periods.momentum", std::to_string(3 * l.period_params));
    l.options.emplace("periods.variance", std::to_string(6 * l.period_params));
    l.period_momentum = option_int(l, "periods.momentum"), l.period_variance = option_int(l, "periods.variance");
    l.sync_every = l.period_params; // the parameter period is its H
  };
  auto problems = [](const local_update_spec&, const local_update_context& c) {
    std::vector<local_update_problem> out;
    if (c.zero > 0)
      out.push_back({"replica_groups", "DES-LOC averages Adam's moments, which ZeRO's shards hold in slices: use "
                                       "data_parallel.zero: 0"});
    return out;
  };
  return {std::move(options), configure, problems};
}

method_settings sparseloco_settings() {
  // SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706): α = 1 (`lr`) and the
  // error-feedback decay β = 0.95 (`momentum`); H = 50, the example.
  auto options = local_sgd_options(50, {1.0, 0.95, false});
  options.pop_back(); // its values travel as top-k in 2 bits, not quantized rows
  options.push_back(number_setting_spec("density", "the share of each chunk's entries sent (paper: 1–3%)", 0.02,
                                        -unbounded, unbounded));
  auto configure = [](local_update_spec& l) { l.density = option_number(l, "density"); };
  auto problems = [](const local_update_spec& l, const local_update_context&) {
    auto out = outer_problems(l);
    if (!(l.density > 0 && l.density <= 1))
      out.push_back(
        {"density", fmt::format("must be above 0 and at most 1 (the share of each chunk sent), got {}", l.density)});
    return out;
  };
  return {std::move(options), configure, problems};
}

std::vector<local_update_problem> local_update_problems(const local_update_spec& spec,
                                                        const local_update_context& context) {
  const auto* m = find_sync_method(spec.algorithm);
  return m && m->settings.problems ? m->settings.problems(spec, context) : std::vector<local_update_problem>{};
}

} // namespace troupe::sched
