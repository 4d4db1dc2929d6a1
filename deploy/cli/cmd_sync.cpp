// `troupe sync`: runs a local-update sync policy deterministically on a toy
// model (replicas of fragments of weights, a fixed gradient) and prints each
// replica's weights before every inner step, as `troupe schedule` does for
// stage policies (#13). Its default toy is torchft's mocked DiLoCo regression setup.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "schedulers/sim/sync_sim.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe::cli {

namespace {

constexpr const char* sync_description = R"(Runs a local-update sync policy under a deterministic driver on a toy model:
every replica holds fragments of weights starting at 1, each inner step is
plain SGD (w -= inner-lr x grad), and the policy exchanges pseudo-gradients
between the replicas as the `local_update:` section of a graph would. Prints
each replica's weights before every inner step and the saved global after each
exchange.)";

constexpr const char* sync_footer = R"(torchft's regression setup (2 replicas, 2 fragments, sync_every 6, grad 2,
outer lr 2, no momentum):
  troupe sync --algorithm streaming_diloco --replicas 2 --fragments 2 \
    --sync-every 6 --delay 1 --alpha 0.5 --inner-lr 1 --grad 2 --outer-lr 2 \
    --outer-momentum 0 --steps 16
A method's own settings are --set KEY=VALUE (its `local_update:` keys, checked
against the keys it registers); --fragments, --delay, --alpha and --group are
short for --set of those keys.
Exit codes: 0 success, 1 the policy failed to run, 2 bad input.
)";

/// The flags that are short for `--set KEY=VALUE`, and the key each sets.
constexpr std::pair<const char*, const char*> setting_flags[] = {
  {"--fragments", "fragments"}, {"--delay", "delay"}, {"--alpha", "alpha"}, {"--group", "group"}};

/// What `troupe sync`'s command line asked for.
struct sync_cli {
  sched::sync_sim_config c;
  double inner_lr = 1, grad = 2, spread = 0;
  bool json = false, no_nesterov = false;
  std::string quantize = "none";
  /// The method's settings as given: (flag, key, value), in command-line order.
  std::vector<std::tuple<std::string, std::string, std::string>> settings;
  std::vector<std::string> set;                   ///< --set KEY=VALUE
  std::map<std::string, std::string> short_flags; ///< --fragments ... as given
};

/// The flag each key of local_update_problems is written as.
std::string flag_of(const std::string& key) {
  if (key == "outer.lr")
    return "--outer-lr";
  if (key == "outer.momentum")
    return "--outer-momentum";
  if (key == "sync_every")
    return "--sync-every";
  for (const auto& [flag, k] : setting_flags)
    if (key == k)
      return flag;
  return key.empty() ? "--algorithm" : "--set " + key;
}

int bad(const std::string& message) {
  fmt::print(stderr, "troupe sync: {}\n(see `troupe sync --help`)\n", message);
  return bad_input;
}

void print_text(const sched::sync_sim_config& c, const sched::sync_sim_result& r) {
  const auto& s = c.spec;
  auto p = static_cast<int>(r.global.front().begin()->second.size()); // the fragments' globals at step 0
  fmt::print("sync: {}, {} replica{}, {} fragment{} of {} weight{}, sync_every {} (a fragment every {} steps)",
             s.algorithm, c.replicas, c.replicas == 1 ? "" : "s", p, p == 1 ? "" : "s", c.values,
             c.values == 1 ? "" : "s", s.sync_every, s.sync_every / std::max(p, 1));
  for (const auto& [key, value] : s.options) // the method's own settings; the shared ones follow
    if (key != "sync_every" && key != "quantize" && !key.starts_with("outer."))
      fmt::print(", {} {}", key, value);
  fmt::print("\nouter: sgd lr {} momentum {}{}; inner: w -= {} x {}; quantize {}\n", s.outer.lr, s.outer.momentum,
             s.outer.nesterov && s.outer.momentum > 0 ? " nesterov" : "", c.inner_lr, c.grad, s.quantize);
  for (std::size_t rep = 0; rep < r.history.size(); ++rep) {
    fmt::print("replica {}: weights before each inner step (one per fragment)\n", rep);
    for (std::size_t step = 0; step < r.history[rep].size(); ++step)
      fmt::print("  step {}: {}\n", step, fmt::join(r.history[rep][step], " "));
    std::vector<std::string> globals;
    for (const auto& [step, g] : r.global[rep])
      globals.push_back(fmt::format("{}: {}", step, fmt::join(g, " ")));
    fmt::print("replica {}: saved global by step: {}\n", rep, fmt::join(globals, "; "));
  }
  for (const auto& [step, groups] : r.groups) {
    std::vector<std::string> gs;
    for (const auto& g : groups)
      gs.push_back(fmt::format("[{}]", fmt::join(g, " ")));
    fmt::print("groups after step {}: {}\n", step, fmt::join(gs, " "));
  }
  fmt::print("exchanges: {}; bytes sent per replica: {}\n", r.exchanges, fmt::join(r.bytes_sent, " "));
}

nlohmann::json result_json(const sched::sync_sim_result& r) {
  nlohmann::json global = nlohmann::json::array();
  for (const auto& per : r.global) {
    nlohmann::json g = nlohmann::json::object();
    for (const auto& [step, w] : per)
      g[std::to_string(step)] = w;
    global.push_back(std::move(g));
  }
  nlohmann::json out{
    {"history", r.history}, {"global", std::move(global)}, {"exchanges", r.exchanges}, {"bytes_sent", r.bytes_sent}};
  if (!r.groups.empty()) {
    nlohmann::json groups = nlohmann::json::object();
    for (const auto& [step, g] : r.groups)
      groups[std::to_string(step)] = g;
    out["groups"] = std::move(groups);
  }
  return out;
}

/// The settings of `a` written into the method's options, each checked against
/// the key the method registered; what is wrong, or nullopt.
std::optional<std::string> write_settings(sync_cli& a, const sched::sync_method& m) {
  auto& spec = a.c.spec;
  auto find = [&](const std::string& key) -> const option_spec* {
    for (const auto& o : m.settings.options)
      if (o.key == key)
        return &o;
    return nullptr;
  };
  std::vector<std::tuple<std::string, std::string, std::string>> all{
    {"--sync-every", "sync_every", std::to_string(spec.sync_every)},
    {"--outer-lr", "outer.lr", fmt::format("{}", spec.outer.lr)},
    {"--outer-momentum", "outer.momentum", fmt::format("{}", spec.outer.momentum)},
    {"--no-nesterov", "outer.nesterov", a.no_nesterov ? "false" : "true"},
    {"--quantize", "quantize", a.quantize}};
  for (const auto& [flag, key] : setting_flags)
    if (auto it = a.short_flags.find(flag); it != a.short_flags.end())
      all.emplace_back(flag, key, it->second);
  for (const auto& kv : a.set) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return fmt::format("--set: expected KEY=VALUE, got '{}'", kv);
    all.emplace_back("--set " + kv.substr(0, eq), kv.substr(0, eq), kv.substr(eq + 1));
  }
  std::size_t shared = 5; // the toy's own defaults: written where the method takes the key
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& [flag, key, value] = all[i];
    const auto* o = find(key);
    if (!o && i < shared)
      continue;
    if (!o) {
      std::vector<std::string> keys;
      for (const auto& x : m.settings.options)
        keys.push_back(x.key);
      return fmt::format("{}: '{}' is not a setting of {} (its settings: {})", flag, key, spec.algorithm,
                         fmt::join(keys, ", "));
    }
    if (auto why = option_value_problem(*o, value))
      return fmt::format("{}: {}", flag, *why);
    spec.options[key] = value;
  }
  return std::nullopt;
}

int run_sync(sync_cli& a) {
  auto& c = a.c;
  c.spec.present = true;
  c.inner_lr = static_cast<float>(a.inner_lr);
  c.grad = static_cast<float>(a.grad);
  c.grad_spread = static_cast<float>(a.spread);
  const auto* m = sched::find_sync_method(c.spec.algorithm);
  if (!m || !m->toy)
    return bad(fmt::format("--algorithm: '{}' has no toy run yet (troupe sync runs {})", c.spec.algorithm,
                           fmt::join(sched::toy_method_names(), ", ")));
  if (auto why = write_settings(a, *m))
    return bad(*why);
  sched::settle_method_options(c.spec);
  // Each flag within its limit, their product not: 2^20 values x 4096 replicas died of bad_alloc at 7.8 GB.
  // 256 replicas x 2 fragments x 65,536 values (2^25 weights) take 1.8 s and 470 MB.
  constexpr std::int64_t max_weights = std::int64_t{1} << 25;
  auto fragments = static_cast<std::int64_t>(m->fragments(c.spec).size());
  if (auto weights = std::int64_t{c.replicas} * fragments * c.values; weights > max_weights)
    return bad(fmt::format("--replicas {} x {} fragment{} x --values {} = {} weights, over the limit of {}: "
                           "use fewer values or replicas",
                           c.replicas, fragments, fragments == 1 ? "" : "s", c.values, weights, max_weights));
  auto problems = sched::local_update_problems(c.spec, {.replicas = c.replicas});
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems)
      all += fmt::format("{}{}: {}", all.empty() ? "" : "\ntroupe sync: ", flag_of(p.key), p.message);
    return bad(all);
  }
  try {
    auto r = sched::run_sync_sim(c);
    if (a.json)
      fmt::print("{}\n", result_json(r).dump(2));
    else
      print_text(c, r);
  } catch (const std::exception& e) {
    fmt::print(stderr, "troupe sync: {}\n", e.what());
    return runtime_failure;
  }
  return ok;
}

} // namespace

command_action define_sync(CLI::App& app) {
  auto a = std::make_shared<sync_cli>();
  auto& s = a->c.spec;
  s.sync_every = 6;
  s.outer = {.lr = 2, .momentum = 0, .nesterov = true};
  describe(app, sync_description, sync_footer);
  app
    .add_option("--algorithm", s.algorithm,
                fmt::format("{}, default {}", fmt::join(sched::toy_method_names(), ", "), s.algorithm))
    ->option_text("A")
    ->check(CLI::IsMember(sched::sync_method_names()));
  add_count(app, "--replicas", a->c.replicas, 1, 4096, "replicas, default 2")->option_text("R");
  add_count(app, "--sync-every", s.sync_every, 1, 1'000'000'000, "H inner steps per round of fragments, default 6")
    ->option_text("H");
  for (const auto& [flag, key] : setting_flags)
    app
      .add_option_function<std::string>(
        flag, [a, flag = std::string{flag}](const std::string& v) { a->short_flags[flag] = v; },
        fmt::format("--set {}=V", key))
      ->option_text("V");
  app.add_option("--set", a->set, "KEY=VALUE: a setting of the method (its local_update: key), repeatable")
    ->option_text("KEY=VALUE");
  add_number(app, "--inner-lr", a->inner_lr, -1e6, 1e6, false, "the inner SGD's rate, default 1")->option_text("LR");
  add_number(app, "--grad", a->grad, -1e6, 1e6, false, "the fixed gradient of every weight, default 2")
    ->option_text("G");
  add_number(app, "--outer-lr", s.outer.lr, -1e6, 1e6, false, "the outer SGD's rate, default 2")->option_text("LR");
  add_number(app, "--outer-momentum", s.outer.momentum, -1e6, 1e6, false, "the outer SGD's momentum, default 0")
    ->option_text("M");
  app.add_flag("--no-nesterov", a->no_nesterov, "heavy-ball momentum instead of Nesterov's");
  add_number(app, "--grad-spread", a->spread, -1e6, 1e6, false, "replica r's gradient is grad + r x spread, default 0")
    ->option_text("S");
  add_count(app, "--seed", a->c.seed, 0, std::numeric_limits<std::int64_t>::max(),
            "seeds the method's random choices (NoLoCo's groups), default 1")
    ->option_text("S");
  app.add_option("--quantize", a->quantize, "none, bf16, int8 or fp8: how pseudo-gradients travel, default none")
    ->option_text("Q")
    ->check(CLI::IsMember({"none", "bf16", "int8", "fp8"}));
  add_count(app, "--values", a->c.values, 1, 1 << 20, "weights per fragment, default 1")->option_text("N");
  add_count(app, "--steps", a->c.steps, 0, 1'000'000, "inner steps, default 16")->option_text("N");
  app.add_flag("--json", a->json,
               "print {\"history\": [[[w per fragment] per inner step] per replica],\n"
               "\"global\": [{STEP: [w per fragment]} per replica], \"exchanges\",\n\"bytes_sent\"}");
  return [a] { return run_sync(*a); };
}

} // namespace troupe::cli
