// `troupe schedule`: runs a stage policy in the deterministic pipeline harness
// and prints each rank's action order, the makespan and the bubble fraction,
// as text or (`--json`) as one JSON object.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ranges>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/commands.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/graph/limits.hpp"
#include "runtime/actor/plugin.hpp"
#include "schedulers/harness.hpp"
#include "schedulers/straggler.hpp"

namespace troupe::cli {

namespace {

using namespace troupe::sched;

constexpr std::string_view usage =
  "usage: troupe schedule --policy P --stages S --microbatches M [options]\n"
  "\n"
  "Simulates one training step of a pipeline under a deterministic clock, with\n"
  "the same policy objects the pipeline-stage actors use, and prints each rank's\n"
  "action order (`0F0 0F1 0B0 ...`), the makespan and the bubble fraction\n"
  "(idle time / (stages x makespan)).\n"
  "\n"
  "options:\n"
  "  --policy P            gpipe, 1f1b, interleaved_1f1b, zb_h1, table (or a plugin's)\n"
  "  --plugin LIB.so       load a plugin first, so its policies can be named (repeatable)\n"
  "  --stages S            pipeline ranks p, 1 to 4096 (as in a graph file)\n"
  "  --microbatches M      microbatches per step m, 1 to 65536 (as in a graph file)\n"
  "  --virtual V           model chunks per rank (interleaved_1f1b), 1 to 64, default 1;\n"
  "                        S x S x V x M is at most 2^25\n"
  "  --costs F,B,W         a rank's forward, backward (= I + W) and weight-gradient cost\n"
  "                        for one microbatch, default 1,2,1 (a chunk costs 1/V of it)\n"
  "  --latency L           time a message takes between ranks, default 0\n"
  "  --slow R:F            rank R runs F times slower (repeatable)\n"
  "  --slow-microbatch MB:F  microbatch MB runs F times slower everywhere (repeatable)\n"
  "  --jitter J            every operation's cost times a uniform factor in [1-J, 1+J]\n"
  "  --seed S              the jitter's seed, default 0\n"
  "  --table FILE          the action lists `table` replays, one line per rank\n"
  "  --option KEY=VALUE    a policy option (repeatable), e.g. max_in_flight=3\n"
  "  --timeline            also print each action's simulated start and end\n"
  "  --save-table FILE     write the run's per-rank orders as a table `table` can replay\n"
  "  --compare [SEEDS]     compare the policy with `table` replaying its own canonical\n"
  "                        order under jitter 30%, one rank 1.5x slower, one microbatch\n"
  "                        4x slower and microbatch costs drawn from 1-3x: median\n"
  "                        makespans over SEEDS seeds (default 100, at most 100000,\n"
  "                        and SEEDS x S x S x V x M at most 2^22)\n"
  "  --json                print one JSON object instead of text: {\"orders\": {\"0\": [\"0F0\",\n"
  "                        ...]}, \"makespan\", \"bubble\", \"peak_in_flight\", ...}, or with\n"
  "                        --compare {\"shape\", \"seeds\", \"records\": [{\"scenario\",\n"
  "                        \"policy\", \"emergent\", \"replayed\", ...}]}\n"
  "\n"
  "exit codes: 0 success, 1 the schedule failed to run, 2 bad input\n";

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
      !parse_number(text.substr(colon + 1), factor) || index < 0 || index >= count || factor <= 0)
    return false;
  factors.resize(static_cast<std::size_t>(count), 1.0);
  factors[static_cast<std::size_t>(index)] = factor;
  return true;
}

void print_run(const sim_config& c, std::string_view policy, const sim_result& r, bool timeline) {
  fmt::print("schedule: {}, {} stages x {} chunk{}, {} microbatches, costs F={} B={} W={}, latency {}\n", policy,
             c.ranks, c.chunks, c.chunks == 1 ? "" : "s", c.microbatches, c.forward_cost, c.backward_cost,
             c.weight_cost, c.latency);
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
  fmt::print("\npeak in flight per rank: {}", fmt::join(r.peak_in_flight, " "));
  fmt::print(" (bounds: {})\n", fmt::join(r.in_flight_limit, " "));
  bool split = false;
  for (int w : r.peak_deferred_weight)
    split |= w > 0;
  if (split)
    fmt::print("peak deferred W per rank: {}\n", fmt::join(r.peak_deferred_weight, " "));
}

nlohmann::json shape_json(const sim_config& c) {
  return {{"stages", c.ranks}, {"microbatches", c.microbatches}, {"chunks", c.chunks}, {"latency", c.latency},
          {"costs", {{"forward", c.forward_cost}, {"backward", c.backward_cost}, {"weight", c.weight_cost}}}};
}

nlohmann::json run_json(const sim_config& c, std::string_view policy, const sim_result& r, bool timeline) {
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
  nlohmann::json out{{"policy", policy},
                     {"shape", shape_json(c)},
                     {"orders", orders},
                     {"makespan", r.makespan},
                     {"bubble", r.bubble_fraction},
                     {"peak_in_flight", r.peak_in_flight},
                     {"in_flight_limit", r.in_flight_limit},
                     {"peak_deferred_weight", r.peak_deferred_weight}};
  if (timeline)
    out["timeline"] = times;
  return out;
}

int compare(const sim_config& c, std::string_view policy, const policy_params& params, int seeds, bool json) {
  nlohmann::json records = nlohmann::json::array();
  if (!json) {
    fmt::print("{} against `table` replaying its canonical order, {} stages x {} chunks, {} microbatches, "
               "latency {}, {} seeds, median makespans\n", policy, c.ranks, c.chunks, c.microbatches, c.latency,
               seeds);
    fmt::print("{:<26} {:>12} {:>12} {:>8} {:>14}\n", "scenario", "emergent", "replayed", "gain", "win/tie/loss");
  }
  for (const auto& scenario : standard_scenarios()) {
    auto r = compare_with_replay(c, policy, scenario, seeds, params);
    if (!r) {
      fmt::print(stderr, "troupe schedule: {}\n", r.error().message);
      return runtime_failure;
    }
    if (json)
      records.push_back({{"scenario", r->scenario}, {"policy", r->policy}, {"emergent", r->policy_median},
                         {"replayed", r->replay_median}, {"wins", r->wins}, {"ties", r->ties},
                         {"losses", r->losses}});
    else
      fmt::print("{:<26} {:>12.3f} {:>12.3f} {:>7.2f}% {:>6}/{}/{}\n", r->scenario, r->policy_median,
                 r->replay_median, 100 * r->gain(), r->wins, r->ties, r->losses);
  }
  if (json)
    fmt::print("{}\n", nlohmann::json{{"policy", policy}, {"shape", shape_json(c)}, {"seeds", seeds},
                                       {"records", records}}.dump(2));
  return ok;
}

int run_schedule(std::span<char*> args) {
  sim_config c;
  c.ranks = 0;
  c.microbatches = 0;
  std::string policy;
  policy_params params;
  std::vector<std::string> slow, slow_mb;
  std::string save_table;
  bool timeline = false, json = false;
  int seeds = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (flag == "--help" || flag == "-h") {
      fmt::print("{}", usage);
      return ok;
    }
    if (flag == "--timeline" || flag == "--json") {
      (flag == "--json" ? json : timeline) = true;
      continue;
    }
    if (flag == "--compare") {
      seeds = 100;
      if (i + 1 < args.size() && std::string_view{args[i + 1]}.substr(0, 2) != "--") {
        if (!parse_number(std::string_view{args[++i]}, seeds) || seeds < 1 || seeds > limits::max_compare_seeds)
          return bad(fmt::format("--compare: '{}' is not a number of seeds from 1 to {}", args[i],
                                 limits::max_compare_seeds));
      }
      continue;
    }
    if (i + 1 >= args.size())
      return bad(fmt::format("{} needs a value", flag));
    std::string_view value = args[++i];
    std::string range; // the allowed values, when a count is out of them
    // A count outside [low, high] is named with its range, as the graph loader does.
    auto count = [&](int& out, int low, int high) {
      if (parse_number(value, out) && out >= low && out <= high)
        return true;
      range = fmt::format("an integer from {} to {}", low, high);
      return false;
    };
    auto number = [&](double& out) {
      return parse_number(value, out) && std::isfinite(out) && out >= 0;
    };
    bool good = true;
    if (flag == "--policy") {
      policy = value;
    } else if (flag == "--plugin") {
      if (auto err = load_plugin(std::string{value}))
        return bad(fmt::format("--plugin: {}", error_message(err)));
    } else if (flag == "--stages") {
      good = count(c.ranks, 1, limits::max_stages);
    } else if (flag == "--microbatches") {
      good = count(c.microbatches, 1, limits::max_microbatches);
    } else if (flag == "--virtual") {
      good = count(c.chunks, 1, limits::max_virtual);
    } else if (flag == "--latency") {
      good = number(c.latency);
    } else if (flag == "--jitter") {
      good = number(c.jitter) && c.jitter < 1;
    } else if (flag == "--seed") {
      good = parse_number(value, c.seed);
    } else if (flag == "--table") {
      params.table_file = value;
    } else if (flag == "--save-table") {
      save_table = value;
    } else if (flag == "--slow") {
      slow.emplace_back(value);
    } else if (flag == "--slow-microbatch") {
      slow_mb.emplace_back(value);
    } else if (flag == "--option") {
      auto eq = value.find('=');
      good = eq != std::string_view::npos && eq > 0;
      if (good)
        params.options[std::string{value.substr(0, eq)}] = std::string{value.substr(eq + 1)};
    } else if (flag == "--costs") {
      auto a = value.find(','), b = value.find(',', a == value.npos ? a : a + 1);
      good = a != value.npos && b != value.npos && parse_number(value.substr(0, a), c.forward_cost) &&
             parse_number(value.substr(a + 1, b - a - 1), c.backward_cost) &&
             parse_number(value.substr(b + 1), c.weight_cost) && c.forward_cost > 0 && c.backward_cost > 0 &&
             c.weight_cost >= 0 && std::isfinite(c.forward_cost + c.backward_cost + c.weight_cost);
    } else {
      return bad(fmt::format("unknown option '{}'", flag));
    }
    if (!good)
      return bad(fmt::format("{}: bad value '{}' (expected {})", flag, value,
                             !range.empty()       ? range
                             : flag == "--costs"   ? "three finite numbers F,B,W, F and B positive"
                             : flag == "--option" ? "KEY=VALUE"
                             : flag == "--jitter" ? "a number in [0, 1)"
                                                  : "a finite non-negative number"));
  }
  if (policy.empty() || c.ranks == 0 || c.microbatches == 0)
    return bad("--policy, --stages and --microbatches are required");
  // Each flag is bounded like a graph file's; their product is what the harness holds.
  auto size = std::int64_t{c.ranks} * c.ranks * c.chunks * c.microbatches;
  if (size > limits::max_schedule_size)
    return bad(fmt::format("{} stages x {} microbatches x {} chunks is too big to simulate: stages^2 x virtual x "
                           "microbatches = {} is over the limit of {}", c.ranks, c.microbatches, c.chunks, size,
                           limits::max_schedule_size));
  if (seeds > 0 && seeds * size > limits::max_compare_work)
    return bad(fmt::format("--compare {}: {} seeds x a size of {} (stages^2 x virtual x microbatches) is over the "
                           "limit of {}; use at most {} seeds for this shape", seeds, seeds, size,
                           limits::max_compare_work, std::max<std::int64_t>(1, limits::max_compare_work / size)));
  for (const auto& s : slow)
    if (!parse_slowdown(s, c.rank_slowdown, c.ranks))
      return bad(fmt::format("--slow: '{}' is not RANK:FACTOR with RANK in 0..{} and FACTOR > 0", s, c.ranks - 1));
  for (const auto& s : slow_mb)
    if (!parse_slowdown(s, c.microbatch_slowdown, c.microbatches))
      return bad(fmt::format("--slow-microbatch: '{}' is not MICROBATCH:FACTOR with MICROBATCH in 0..{} and "
                             "FACTOR > 0", s, c.microbatches - 1));
  // Policy names and parameters are checked before anything runs, so they count as bad input.
  params.ranks = c.ranks;
  params.chunks = c.chunks;
  if (auto probe = make_policy(policy, params); !probe)
    return bad(probe.error().message);
  if (!outputs_writable("schedule", {save_table}))
    return bad_input;  // before the simulation, not after it
  if (seeds > 0)
    return compare(c, policy, params, seeds, json);
  auto r = simulate(c, policy, params);
  if (!r) {
    fmt::print(stderr, "troupe schedule: {}\n", r.error().message);
    return bad_input;
  }
  if (json)
    fmt::print("{}\n", run_json(c, policy, *r, timeline).dump(2));
  else
    print_run(c, policy, *r, timeline);
  if (!save_table.empty()) {
    std::FILE* out = std::fopen(save_table.c_str(), "w");
    if (!out) {
      fmt::print(stderr, "troupe schedule: cannot write {}\n", save_table);
      return runtime_failure;
    }
    fmt::print(out, "# troupe schedule --policy {} --stages {} --microbatches {} --virtual {}: one rank per line\n",
               policy, c.ranks, c.microbatches, c.chunks);
    for (const auto& row : r->orders)
      fmt::print(out, "{}\n", fmt::join(row | std::views::transform([](const action& a) { return to_string(a); }),
                                       ","));
    std::fclose(out);
  }
  return ok;
}

} // namespace

/// The `schedule` subcommand's entry point, listed in deploy/commands.cpp.
int schedule_command(std::span<char*> args) {
  return run_schedule(args);
}

} // namespace troupe::cli
