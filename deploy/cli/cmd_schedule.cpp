// `troupe schedule`: runs a stage policy in the deterministic pipeline harness
// and prints each rank's action order, the makespan and the bubble fraction,
// as text or (`--json`) as one JSON object.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <memory>
#include <ranges>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/graph/limits.hpp"
#include "runtime/actor/plugin.hpp"
#include "schedulers/sim/harness.hpp"
#include "schedulers/sim/straggler.hpp"

namespace troupe::cli {

namespace {

using namespace troupe::sched;

constexpr const char* schedule_description =
  R"(Simulates one training step of a pipeline under a deterministic clock, with
the same policy objects the pipeline-stage actors use, and prints each rank's
action order (`0F0 0F1 0B0 ...`), the makespan and the bubble fraction
(idle time / (stages x makespan)).)";

constexpr const char* schedule_footer = R"(--stages x --stages x --virtual x --microbatches is at most 2^25; with
--compare, SEEDS times that is at most 2^22.
Exit codes: 0 success, 1 the schedule failed to run, 2 bad input.
)";

/// What `troupe schedule`'s command line asked for.
struct schedule_cli {
  sim_config c;
  std::string policy;
  policy_params params;
  std::vector<std::string> plugins, slow, slow_mb, options;
  std::string costs = "1,2,1", save_table, compare;
  double activation_bytes = 1 << 20; ///< one microbatch's activation (or gradient) between ranks
  bool timeline = false, json = false, comparing = false, virtual_given = false;
};

int bad(const std::string& message) {
  fmt::print(stderr, "troupe schedule: {}\n(see `troupe schedule --help`)\n", message);
  return bad_input;
}

template <class T>
bool parse_number(std::string_view text, T& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc{} && ptr == text.data() + text.size();
}

// Parses `INDEX:FACTOR` into a slot of `factors`, growing it with 1s.
bool parse_slowdown(std::string_view text, std::vector<double>& factors, int count) {
  auto colon = text.find(':');
  int index = 0;
  double factor = 0;
  if (colon == std::string_view::npos || !parse_number(text.substr(0, colon), index) ||
      !parse_number(text.substr(colon + 1), factor) || index < 0 || index >= count || !(factor > 0) ||
      !std::isfinite(factor))
    return false;
  factors.resize(static_cast<std::size_t>(count), 1.0);
  factors[static_cast<std::size_t>(index)] = factor;
  return true;
}

/// `F,B,W[,FB]`: three or four finite numbers, F and B positive, W not
/// negative, FB (an F&B action, dualpipev's; default F + B) positive.
bool parse_costs(std::string_view value, sim_config& c) {
  auto a = value.find(','), b = value.find(',', a == value.npos ? a : a + 1);
  auto d = b == value.npos ? b : value.find(',', b + 1);
  bool fb = d == value.npos ||
            (parse_number(value.substr(d + 1), c.overlap_cost) && c.overlap_cost > 0 && std::isfinite(c.overlap_cost));
  return a != value.npos && b != value.npos && fb && parse_number(value.substr(0, a), c.forward_cost) &&
         parse_number(value.substr(a + 1, b - a - 1), c.backward_cost) &&
         parse_number(value.substr(b + 1, d == value.npos ? d : d - b - 1), c.weight_cost) && c.forward_cost > 0 &&
         c.backward_cost > 0 && c.weight_cost >= 0 && std::isfinite(c.forward_cost + c.backward_cost + c.weight_cost);
}

/// Each rank's peak activations in microbatches' worth: a chunk holds 1/v of a rank's layers.
std::vector<double> peak_activations(const sim_config& c, const sim_result& r) {
  std::vector<double> out;
  for (int n : r.peak_in_flight)
    out.push_back(static_cast<double>(n) / c.chunks);
  return out;
}

double pipeline_bytes(const sim_result& r, double activation_bytes) {
  return static_cast<double>(r.pipeline_messages) * activation_bytes;
}

void print_run(const sim_config& c, std::string_view policy, const sim_result& r, bool timeline, double bytes) {
  fmt::print("schedule: {}, {} stages x {} chunk{}, {} microbatches, costs F={} B={} W={} F&B={}, latency {}\n", policy,
             c.ranks, c.chunks, c.chunks == 1 ? "" : "s", c.microbatches, c.forward_cost, c.backward_cost,
             c.weight_cost, c.overlap_cost > 0 ? c.overlap_cost : c.forward_cost + c.backward_cost, c.latency);
  for (int rank = 0; rank < c.ranks; ++rank)
    fmt::print("rank {}: {}\n", rank, to_string(std::span<const action>(r.orders[rank])));
  if (timeline)
    for (int rank = 0; rank < c.ranks; ++rank) {
      fmt::print("rank {} timeline:", rank);
      for (const auto& t : r.timeline[rank])
        fmt::print(" {}[{:g},{:g}]", to_string(t.what), t.start, t.end);
      fmt::print("\n");
    }
  fmt::print("makespan: {:g}\n", r.makespan);
  fmt::print("bubble fraction: {:.4f} (idle / (stages x makespan))", r.bubble_fraction);
  if (policy == "gpipe" || policy == "1f1b" || policy == "interleaved_1f1b")
    fmt::print("; theory without latency or stragglers (p-1)/(v*m+p-1) = {:.4f}",
               theoretical_bubble(c.ranks, c.microbatches, c.chunks));
  fmt::print("\nbubble rate: {:.4f} (longest rank span / work per rank - 1, as Qi et al. count it)", r.bubble_rate);
  fmt::print("\npeak activations per rank: {} microbatches", fmt::join(peak_activations(c, r), " "));
  fmt::print("\npipeline traffic per step: {} messages between ranks, {:g} bytes", r.pipeline_messages,
             pipeline_bytes(r, bytes));
  fmt::print("\npeak in flight per rank: {}", fmt::join(r.peak_in_flight, " "));
  fmt::print(" (bounds: {})\n", fmt::join(r.in_flight_limit, " "));
  bool split = false;
  for (int w : r.peak_deferred_weight)
    split |= w > 0;
  if (split)
    fmt::print("peak deferred W per rank: {}\n", fmt::join(r.peak_deferred_weight, " "));
}

nlohmann::json shape_json(const sim_config& c) {
  return {{"stages", c.ranks},
          {"microbatches", c.microbatches},
          {"chunks", c.chunks},
          {"latency", c.latency},
          {"costs",
           {{"forward", c.forward_cost},
            {"backward", c.backward_cost},
            {"weight", c.weight_cost},
            {"forward_backward", c.overlap_cost > 0 ? c.overlap_cost : c.forward_cost + c.backward_cost}}}};
}

/// The trade-offs of one run: bubble, memory and traffic.
nlohmann::json tradeoffs_json(const sim_config& c, const sim_result& r, double bytes) {
  return {{"bubble", r.bubble_fraction},
          {"bubble_rate", r.bubble_rate},
          {"peak_activations", peak_activations(c, r)},
          {"pipeline_messages", r.pipeline_messages},
          {"pipeline_bytes", pipeline_bytes(r, bytes)}};
}

nlohmann::json run_json(const sim_config& c, std::string_view policy, const sim_result& r, bool timeline,
                        double bytes) {
  nlohmann::json orders = nlohmann::json::object(), times = nlohmann::json::object();
  for (int rank = 0; rank < c.ranks; ++rank) {
    auto& row = orders[std::to_string(rank)] = nlohmann::json::array();
    for (const auto& a : r.orders[rank])
      row.push_back(to_string(a));
    if (timeline) {
      auto& t = times[std::to_string(rank)] = nlohmann::json::array();
      for (const auto& x : r.timeline[rank])
        t.push_back({{"action", to_string(x.what)}, {"start", x.start}, {"end", x.end}});
    }
  }
  nlohmann::json out = tradeoffs_json(c, r, bytes);
  out.update({{"policy", policy},
              {"shape", shape_json(c)},
              {"orders", orders},
              {"makespan", r.makespan},
              {"peak_in_flight", r.peak_in_flight},
              {"in_flight_limit", r.in_flight_limit},
              {"peak_deferred_weight", r.peak_deferred_weight}});
  if (timeline)
    out["timeline"] = times;
  return out;
}

int compare(const sim_config& c, std::string_view policy, const policy_params& params, int seeds, bool json) {
  nlohmann::json records = nlohmann::json::array();
  if (!json) {
    fmt::print("{} against `table` replaying its canonical order, {} stages x {} chunks, {} microbatches, "
               "latency {}, {} seeds, median makespans\n",
               policy, c.ranks, c.chunks, c.microbatches, c.latency, seeds);
    fmt::print("{:<26} {:>12} {:>12} {:>8} {:>14}\n", "scenario", "emergent", "replayed", "gain", "win/tie/loss");
  }
  for (const auto& scenario : standard_scenarios()) {
    auto r = compare_with_replay(c, policy, scenario, seeds, params);
    if (!r) {
      fmt::print(stderr, "troupe schedule: {}\n", r.error().message);
      return runtime_failure;
    }
    if (!std::isfinite(r->policy_median) || !std::isfinite(r->replay_median)) {
      fmt::print(stderr, "troupe schedule: the simulated makespan is not finite: the costs and --latency are too "
                         "large to add up; scale them down\n");
      return bad_input;
    }
    if (json)
      records.push_back({{"scenario", r->scenario},
                         {"policy", r->policy},
                         {"emergent", r->policy_median},
                         {"replayed", r->replay_median},
                         {"wins", r->wins},
                         {"ties", r->ties},
                         {"losses", r->losses}});
    else
      fmt::print("{:<26} {:>12.3f} {:>12.3f} {:>7.2f}% {:>6}/{}/{}\n", r->scenario, r->policy_median, r->replay_median,
                 100 * r->gain(), r->wins, r->ties, r->losses);
  }
  if (json)
    fmt::print(
      "{}\n",
      nlohmann::json{{"policy", policy}, {"shape", shape_json(c)}, {"seeds", seeds}, {"records", records}}.dump(2));
  return ok;
}

/// The first of `counts` chunks per rank that policy `name` runs at `params`' shape, or why none.
expected<int> runnable_chunks(const std::string& name, policy_params params, std::initializer_list<int> counts) {
  expected<policy_ptr> made = make_sched_error("no chunk count to try");
  for (int v : counts) {
    params.chunks = v;
    if ((made = make_policy(name, params)))
      return v;
  }
  return made.error();
}

/// `--policy all`: every registered policy at this shape, side by side. One that
/// cannot run --virtual chunks runs the first count it can of 2 (the V shapes) and 1.
int compare_policies(const sim_config& c, const policy_params& params, bool json, double bytes) {
  nlohmann::json rows = nlohmann::json::array();
  if (!json)
    fmt::print("every policy at {} stages x {} microbatches, costs F={} B={} W={}, latency {}\n"
               "{:<18} {:>6} {:>8} {:>8}  {:<30} {:>8} {:>12}\n",
               c.ranks, c.microbatches, c.forward_cost, c.backward_cost, c.weight_cost, c.latency, "policy", "chunks",
               "bubble", "rate", "peak activations (microbatches)", "messages", "bytes");
  for (const auto& name : policy_names()) {
    sim_config run = c;
    policy_params p = params;
    auto chunks = runnable_chunks(name, p, {c.chunks, 2, 1});
    run.chunks = p.chunks = chunks ? *chunks : c.chunks;
    auto r = chunks ? simulate(run, name, p) : expected<sim_result>{chunks.error()};
    if (!r) {
      if (json)
        rows.push_back({{"policy", name}, {"skipped", r.error().message}});
      else
        fmt::print("{:<18} skipped: {}\n", name, r.error().message);
      continue;
    }
    if (json) {
      auto row = tradeoffs_json(run, *r, bytes);
      row.update({{"policy", name}, {"chunks", run.chunks}, {"makespan", r->makespan}});
      rows.push_back(std::move(row));
    } else {
      fmt::print("{:<18} {:>6} {:>8.4f} {:>8.4f}  {:<30} {:>8} {:>12.4g}\n", name, run.chunks, r->bubble_fraction,
                 r->bubble_rate, fmt::format("{}", fmt::join(peak_activations(run, *r), " ")), r->pipeline_messages,
                 pipeline_bytes(*r, bytes));
    }
  }
  if (json)
    fmt::print("{}\n", nlohmann::json{{"shape", shape_json(c)}, {"policies", rows}}.dump(2));
  return ok;
}

int run_schedule(schedule_cli& a) {
  auto& c = a.c;
  auto& params = a.params;
  const auto& policy = a.policy;
  const auto& save_table = a.save_table;
  bool timeline = a.timeline, json = a.json;
  int seeds = !a.comparing ? 0 : a.compare.empty() ? 100 : std::stoi(a.compare);
  for (const auto& lib : a.plugins)
    if (auto err = load_plugin(lib))
      return bad(fmt::format("--plugin: {}", error_message(err)));
  if (!parse_costs(a.costs, c))
    return bad(fmt::format("--costs: expected three or four finite numbers F,B,W[,FB], F, B and FB positive, got "
                           "'{}'",
                           a.costs));
  for (const auto& o : a.options) {
    auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0)
      return bad(fmt::format("--option: expected KEY=VALUE, got '{}'", o));
    params.options[o.substr(0, eq)] = o.substr(eq + 1);
  }
  // Each flag is bounded like a graph file's; their product is what the harness holds.
  auto size = std::int64_t{c.ranks} * c.ranks * c.chunks * c.microbatches;
  if (size > limits::max_schedule_size)
    return bad(fmt::format("{} stages x {} microbatches x {} chunks is too big to simulate: stages^2 x virtual x "
                           "microbatches = {} is over the limit of {}",
                           c.ranks, c.microbatches, c.chunks, size, limits::max_schedule_size));
  if (seeds > 0 && seeds * size > limits::max_compare_work)
    return bad(fmt::format("--compare {}: {} seeds x a size of {} (stages^2 x virtual x microbatches) is over the "
                           "limit of {}; use at most {} seeds for this shape",
                           seeds, seeds, size, limits::max_compare_work,
                           std::max<std::int64_t>(1, limits::max_compare_work / size)));
  for (const auto& s : a.slow)
    if (!parse_slowdown(s, c.rank_slowdown, c.ranks))
      return bad(fmt::format("--slow: '{}' is not RANK:FACTOR with RANK in 0..{} and FACTOR a finite number > 0", s,
                             c.ranks - 1));
  for (const auto& s : a.slow_mb)
    if (!parse_slowdown(s, c.microbatch_slowdown, c.microbatches))
      return bad(fmt::format("--slow-microbatch: '{}' is not MICROBATCH:FACTOR with MICROBATCH in 0..{} and "
                             "FACTOR a finite number > 0",
                             s, c.microbatches - 1));
  // Policy names and parameters are checked before anything runs, so they count as bad input.
  params.ranks = c.ranks;
  if (!a.virtual_given) // the V shapes run two chunks without being told
    if (auto v = runnable_chunks(policy, params, {1, 2}))
      c.chunks = *v;
  params.chunks = c.chunks;
  if (policy == "all" && (seeds > 0 || !save_table.empty()))
    return bad("--policy all runs every policy side by side; --compare and --save-table need one policy");
  if (policy == "all")
    return compare_policies(c, params, json, a.activation_bytes);
  if (auto probe = make_policy(policy, params); !probe)
    return bad(probe.error().message);
  if (!outputs_writable("schedule", {save_table}))
    return bad_input; // before the simulation, not after it
  if (seeds > 0)
    return compare(c, policy, params, seeds, json);
  auto r = simulate(c, policy, params);
  if (!r) {
    fmt::print(stderr, "troupe schedule: {}\n", r.error().message);
    return bad_input;
  }
  // Each input finite, their sum need not be: 1e308 twice is inf, and inf - inf a NaN bubble.
  if (!std::isfinite(r->makespan) || !std::isfinite(r->bubble_fraction))
    return bad(fmt::format("the simulated times overflow (makespan {:g}): the costs, --latency and --slow factors "
                           "are too large to add up; scale them down",
                           r->makespan));
  if (json)
    fmt::print("{}\n", run_json(c, policy, *r, timeline, a.activation_bytes).dump(2));
  else
    print_run(c, policy, *r, timeline, a.activation_bytes);
  if (!save_table.empty()) {
    std::FILE* out = std::fopen(save_table.c_str(), "w");
    if (!out) {
      fmt::print(stderr, "troupe schedule: cannot write {}\n", save_table);
      return runtime_failure;
    }
    fmt::print(out, "# troupe schedule --policy {} --stages {} --microbatches {} --virtual {}: one rank per line\n",
               policy, c.ranks, c.microbatches, c.chunks);
    for (const auto& row : r->orders)
      fmt::print(out, "{}\n",
                 fmt::join(row | std::views::transform([](const action& a) { return to_string(a); }), ","));
    std::fclose(out);
  }
  return ok;
}

} // namespace

command_action define_schedule(CLI::App& app) {
  auto a = std::make_shared<schedule_cli>();
  a->c.ranks = 0;
  a->c.microbatches = 0;
  describe(app, schedule_description, schedule_footer);
  app
    .add_option("--policy", a->policy,
                "gpipe, 1f1b, interleaved_1f1b, zb_h1, zbv, v_half, v_min, table\n"
                "(or a plugin's); `all`: each one's bubble, peak activations\n"
                "and pipeline traffic side by side")
    ->option_text("P")
    ->required();
  app.add_option("--plugin", a->plugins, "load a plugin first, so its policies can be named (repeatable)")
    ->option_text("LIB.so")
    ->allow_extra_args(false)
    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add_count(app, "--stages", a->c.ranks, 1, limits::max_stages, "pipeline ranks p (as in a graph file)")
    ->option_text("S")
    ->required();
  add_count(app, "--microbatches", a->c.microbatches, 1, limits::max_microbatches,
            "microbatches per step m (as in a graph file)")
    ->option_text("M")
    ->required();
  auto* virt = add_count(app, "--virtual", a->c.chunks, 1, limits::max_virtual,
                         "model chunks per rank (interleaved_1f1b; zbv, v_half and\n"
                         "v_min run 2), default 1, or 2 for a policy that runs only 2")
                 ->option_text("V");
  app
    .add_option("--costs", a->costs,
                "a rank's forward, backward (= I + W) and weight-gradient cost\n"
                "for one microbatch, and optionally an F&B's (dualpipev's fused\n"
                "forward and backward, default F + B); default 1,2,1 (a chunk\n"
                "costs 1/V of it)")
    ->option_text("F,B,W[,FB]");
  add_number(app, "--activation-bytes", a->activation_bytes, 0, HUGE_VAL, false,
             "bytes of one microbatch's activation (and gradient) sent\n"
             "between ranks, for the pipeline traffic; default 1048576")
    ->option_text("B");
  add_number(app, "--latency", a->c.latency, 0, HUGE_VAL, false, "time a message takes between ranks, default 0")
    ->option_text("L");
  auto repeatable = [&](const char* name, std::vector<std::string>& out, const char* text, const char* help) {
    app.add_option(name, out, help)
      ->option_text(text)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  };
  repeatable("--slow", a->slow, "R:F", "rank R runs F times slower (repeatable)");
  repeatable("--slow-microbatch", a->slow_mb, "MB:F", "microbatch MB runs F times slower everywhere (repeatable)");
  add_number(app, "--jitter", a->c.jitter, 0, 1, true, "every operation's cost times a uniform factor in [1-J, 1+J]")
    ->option_text("J");
  add_count(app, "--seed", a->c.seed, 0, std::numeric_limits<std::int64_t>::max(), "the jitter's seed, default 0")
    ->option_text("S");
  app.add_option("--table", a->params.table_file, "the action lists `table` replays, one line per rank")
    ->option_text("FILE");
  repeatable("--option", a->options, "KEY=VALUE", "a policy option (repeatable), e.g. max_in_flight=3");
  app.add_flag("--timeline", a->timeline, "also print each action's simulated start and end");
  app.add_option("--save-table", a->save_table, "write the run's per-rank orders as a table `table` can replay")
    ->option_text("FILE");
  auto* compare = app
                    .add_option_function<std::string>(
                      "--compare",
                      [a](const std::string& seeds) {
                        a->comparing = true;
                        a->compare = seeds;
                      },
                      fmt::format("compare the policy with `table` replaying its own canonical\n"
                                  "order under jitter 30%, one rank 1.5x slower, one microbatch\n"
                                  "4x slower and microbatch costs drawn from 1-3x: median\n"
                                  "makespans over SEEDS seeds (default 100); 1 to {}",
                                  limits::max_compare_seeds))
                    ->option_text("SEEDS")
                    ->expected(0, 1);
  check_count(*compare, 1, limits::max_compare_seeds);
  app.add_flag("--json", a->json,
               "print one JSON object instead of text: {\"orders\": {\"0\": [\"0F0\",\n"
               "...]}, \"makespan\", \"bubble\", \"peak_in_flight\", ...}, or with\n"
               "--compare {\"shape\", \"seeds\", \"records\": [{\"scenario\",\n"
               "\"policy\", \"emergent\", \"replayed\", ...}]}");
  return [a, virt] {
    a->virtual_given = virt->count() > 0;
    return run_schedule(*a);
  };
}

} // namespace troupe::cli
