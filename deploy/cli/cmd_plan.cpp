// `troupe plan paths FILE`: SkipPipe's plan for a graph file's `network:` and
// `skip:` sections (schedulers/skippipe_planner.hpp): the placement of network
// nodes on stage positions, each microbatch's path, and the iteration time under
// the cost model against the full pipeline and random skipping.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/builtin.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/cli/run_graph.hpp"
#include "schedulers/cost_model.hpp"
#include "schedulers/skippipe_planner.hpp"

namespace troupe::cli {

namespace {

using namespace troupe::sched;

/// Random skipping's time is the mean over this many seeds.
constexpr int random_draws = 8;

/// The device a node computes on: `sim.device`, a preset or a `devices:` entry written out.
expected<device_spec> plan_device(const sim_spec& s) {
  auto entry =
      std::find_if(s.devices.begin(), s.devices.end(), [&](const auto& d) { return d.name == s.device; });
  if (entry == s.devices.end() || !entry->base.empty())
    return device_preset(entry == s.devices.end() ? s.device : entry->base);
  device_spec d;
  d.name = entry->name;
  d.peak_f32 = entry->peak_f32, d.peak_tf32 = entry->peak_tf32, d.peak_bf16 = entry->peak_bf16;
  d.memory_bandwidth = entry->memory_bandwidth, d.memory_bytes = entry->memory_bytes;
  for (auto [out, in] : {std::pair{&d.efficiency.matmul, entry->matmul},
                         {&d.efficiency.attention, entry->attention},
                         {&d.efficiency.elementwise, entry->elementwise}})
    *out = in > 0 ? in : 1.0;
  return d;
}

/// What SkipPipe plans on, from the graph: a node's forward from the cost model
/// (model.layers / pipeline.stages layers of the model on sim.device), and each hop's
/// delay as REFERENCES.md's SkipPipe delay model: latency + activation bytes /
/// bandwidth + the network's per-hop overhead, activations d_model·context·batch values.
expected<path_problem> make_problem(const graph_spec& g) {
  auto device = plan_device(g.sim);
  if (!device)
    return device.error();
  cost_settings cs;
  cs.device = *device;
  cs.dtype = g.model.precision == dtype::bf16 ? "bf16" : "f32";
  transformer_shape m{g.model.layers,  g.model.d_model, g.model.heads,
                      g.model.context, g.model.vocab,   g.data.batch};
  const int layers = std::max(g.model.layers / g.pipeline.stages, 1);
  const double forward = costs_of(m, cs, layers, false).forward;
  const double bytes =
      double(g.model.d_model) * g.model.context * g.data.batch * (g.model.precision == dtype::bf16 ? 2 : 4);
  path_problem pr;
  pr.stages = g.pipeline.stages;
  const int n = g.network.nodes();
  pr.forward.assign(static_cast<std::size_t>(n), forward);
  pr.delay.assign(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(n), 0.0));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) {
        auto l = g.network.link(a, b);
        pr.delay[a][b] = l.latency + (l.bandwidth > 0 ? bytes / l.bandwidth : 0.0) + g.network.overhead;
      }
  return pr;
}

/// Everything `plan paths` prints.
struct plan_report {
  placement where;
  std::vector<path_agent> agents;
  std::vector<planned_path> paths;
  double planned = 0, full = 0, fixed_chains = 0, random = 0, blind = 0;
  int expansions = 0;
};

expected<plan_report> plan_graph(const graph_spec& g) {
  if (!g.skip.present)
    return make_sched_error("the graph has no `skip:` section to plan (and `network:` to plan it over)");
  auto pr = make_problem(g);
  if (!pr)
    return pr.error();
  plan_report rep;
  const auto& skip = g.skip;
  if (!skip.placement.empty()) {
    rep.where = skip.placement;
  } else {
    // DT-FM's weight of the data-parallel cost against the pipeline's: a position's
    // gradient bytes over the activation bytes its microbatches send (SkipPipe's FACTOR).
    transformer_shape m{g.model.layers,  g.model.d_model, g.model.heads,
                        g.model.context, g.model.vocab,   g.data.batch};
    double grads = 4 * stage_parameters(m, std::max(g.model.layers / g.pipeline.stages, 1), false);
    double acts = 4.0 * g.model.d_model * g.model.context * g.data.batch * g.pipeline.microbatches;
    rep.where = search_placement(*pr, grads / acts, skip.seed);
  }
  path_rules rules;
  rules.path_length = skip.path_length;
  rules.memory = skip.memory;
  rules.swaps = skip.swaps;
  rules.swap_distance = skip.swap_distance;
  rules.max_jump = skip.max_jump;
  std::size_t smallest = rep.where.size() > 1 ? rep.where[1].size() : 1;
  for (std::size_t s = 1; s < rep.where.size(); ++s)
    smallest = std::min(smallest, rep.where[s].size());
  rules.max_per_stage =
      skip.max_per_stage > 0 ? skip.max_per_stage : skip.memory * static_cast<int>(smallest);
  rep.agents = make_agents(*pr, rep.where, g.pipeline.microbatches);
  auto aware = plan_skippipe(*pr, rep.where, rules, rep.agents, true);
  if (!aware)
    return aware.error();
  auto blind = plan_skippipe(*pr, rep.where, rules, rep.agents, false);
  if (!blind)
    return blind.error();
  // The full pipeline at its best: every stage in order, chains chosen by the same
  // search with no skipping, no swaps and no memory or capacity bound (every stage
  // serves every microbatch); and DT-FM's fixed chains (chain i: node i mod size).
  path_rules all = rules;
  all.path_length = g.pipeline.stages;
  all.swaps = 0;
  all.max_jump = 1;
  all.memory = all.max_per_stage = static_cast<int>(rep.agents.size());
  auto full = plan_skippipe(*pr, rep.where, all, rep.agents, true);
  if (!full)
    return full.error();
  rep.planned = aware->planned_s;
  rep.blind = blind->planned_s;
  rep.expansions = aware->expansions;
  rep.full = full->planned_s;
  rep.fixed_chains = simulate_iteration(*pr, rep.agents, plan_full(rep.where, rep.agents)).time;
  std::vector<planned_path> first_random;
  for (int k = 0; k < random_draws; ++k) {
    auto random = plan_random(*pr, rep.where, rules, rep.agents, skip.seed + static_cast<std::uint64_t>(k));
    if (!random)
      return random.error();
    rep.random += simulate_iteration(*pr, rep.agents, *random).time / random_draws;
    if (k == 0)
      first_random = *random;
  }
  if (skip.planner == "full")
    rep.paths = full->paths, rep.planned = rep.full;
  else if (skip.planner == "random")
    rep.paths = first_random, rep.planned = simulate_iteration(*pr, rep.agents, first_random).time;
  else
    rep.paths = aware->paths;
  return rep;
}

std::vector<int> stages_of(const plan_report& rep, const planned_path& p, int nodes) {
  auto stage = stage_of(rep.where, nodes);
  std::vector<int> out;
  for (int n : p.nodes)
    out.push_back(stage[n]);
  return out;
}

void print_text(const std::string& file, const graph_spec& g, const plan_report& rep) {
  const auto& net = g.network;
  const int n = net.nodes();
  fmt::print(
      "troupe plan paths: {}: {} network nodes on {} stage positions, {} microbatches, paths of {} stages "
      "(skip ratio {:.2f}), planner {}\n",
      file, n, g.pipeline.stages, rep.agents.size(), g.skip.path_length,
      1.0 - double(g.skip.path_length) / g.pipeline.stages, g.skip.planner);
  fmt::print("placement:\n");
  for (std::size_t s = 0; s < rep.where.size(); ++s) {
    std::vector<std::string> names;
    for (int v : rep.where[s])
      names.push_back(
          fmt::format("{} ({})", v, net.locations[static_cast<std::size_t>(net.node_locations[v])]));
    fmt::print("  stage {}: {}\n", s, fmt::join(names, ", "));
  }
  fmt::print("paths (nodes | stages; each returns to its first node for the loss):\n");
  for (const auto& p : rep.paths)
    fmt::print("  microbatch {:>3}: {:<24} | {}\n", p.agent, fmt::format("{}", fmt::join(p.nodes, " ")),
               fmt::join(stages_of(rep, p, n), " "));
  auto vs = [&](double t) { return fmt::format("{:.4g} s ({:+.1f}%)", t, 100.0 * (rep.planned / t - 1)); };
  fmt::print(
      "iteration time under the cost model: planned {:.4g} s\n  against the full pipeline {} (its chains "
      "planned alike; on fixed chains {})\n  random skipping {} (mean of {} draws)\n  the plan without "
      "collision awareness {}\n",
      rep.planned, vs(rep.full), vs(rep.fixed_chains), vs(rep.random), random_draws, vs(rep.blind));
}

nlohmann::json to_json(const graph_spec& g, const plan_report& rep) {
  nlohmann::json paths = nlohmann::json::array();
  for (const auto& p : rep.paths)
    paths.push_back(
        {{"agent", p.agent}, {"nodes", p.nodes}, {"stages", stages_of(rep, p, g.network.nodes())}});
  std::vector<std::string> locations;
  for (int l : g.network.node_locations)
    locations.push_back(g.network.locations[static_cast<std::size_t>(l)]);
  return {{"placement", rep.where},
          {"locations", locations},
          {"paths", paths},
          {"time",
           {{"planned", rep.planned},
            {"full", rep.full},
            {"full_fixed_chains", rep.fixed_chains},
            {"random", rep.random},
            {"no_collision_awareness", rep.blind}}},
          {"expansions", rep.expansions}};
}

int plan_paths(const std::string& file, const std::vector<std::string>& overrides, bool json) {
  auto loaded = load_graph_for_cli(file, overrides, /*check_corpus=*/false); // nothing is read
  if (!loaded.ok()) {
    for (const auto& d : loaded.errors)
      fmt::print(stderr, "{}\n", to_string(d));
    return bad_input;
  }
  auto rep = plan_graph(*loaded.graph);
  if (!rep) {
    fmt::print(stderr, "troupe plan paths: {}: {}\n", file, rep.error().message);
    return bad_input;
  }
  if (json)
    fmt::print("{}\n", to_json(*loaded.graph, *rep).dump(2));
  else
    print_text(file, *loaded.graph, *rep);
  return ok;
}

} // namespace

/// The `plan` subcommand, listed in deploy/cli/commands.cpp.
command_action define_plan(CLI::App& app) {
  struct plan_args {
    std::string file;
    std::vector<std::string> overrides;
    bool json = false;
  };
  auto a = std::make_shared<plan_args>();
  const std::string footer = std::string{"Exit codes: 0 success, 2 bad input or no plan.\n"} + paths_help;
  describe(app, "Plans what a graph file's sections describe.", footer);
  auto* sub = &add_command(app, "paths", "SkipPipe: placement, each microbatch's path, iteration time");
  describe(
      *sub,
      "Places the `network:` section's nodes on stage positions (skip.placement, or a search over DT-FM's "
      "score), plans each microbatch's path under `skip:` (SkipPipe: A* per microbatch, conflict-based "
      "search "
      "over node memory, stage capacity and time collisions) and prints the iteration time under the cost "
      "model against the full pipeline, random skipping and the plan without collision awareness.",
      footer);
  sub->add_option("FILE", a->file, "the graph file (YAML)")->required();
  sub->add_option("--set", a->overrides, "override a key, e.g. --set skip.path_length=3 (repeatable)")
      ->option_text("KEY.PATH=VALUE")
      ->allow_extra_args(false);
  sub->add_flag("--json", a->json,
                "print one JSON object: placement, paths (nodes, stages), time (planned, full, "
                "random, no_collision_awareness)");
  return [&app, sub, a] {
    if (sub->parsed())
      return plan_paths(a->file, a->overrides, a->json);
    fmt::print(stderr, "{}", app.help("troupe"));
    return static_cast<int>(bad_input);
  };
}

} // namespace troupe::cli
