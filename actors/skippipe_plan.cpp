// SkipPipe's plan for a graph: the path problem from the cost model and the
// network, the placement, the paths of the planner skip.planner names
// (schedulers/planners/path_planner.hpp) and the baselines (#14).
#include "actors/skippipe_plan.hpp"

#include <algorithm>
#include <map>
#include <string>

#include <fmt/format.h>

#include "ops/gpt.hpp"
#include "ops/model_config.hpp"
#include "schedulers/planners/path_planner.hpp"
#include "schedulers/sim/cost_model.hpp"

namespace troupe {

namespace {

using namespace troupe::sched;

/// Random skipping's time is the mean over this many seeds.
constexpr int random_draws = 8;

/// The device a node computes on: `sim.device`, a preset or a `devices:` entry written out.
expected<device_spec> plan_device(const sim_spec& s) {
  auto entry = std::find_if(s.devices.begin(), s.devices.end(), [&](const auto& d) { return d.name == s.device; });
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

} // namespace

transformer_shape transformer_shape_of(const graph_spec& g) {
  transformer_shape m{g.model.layers, g.model.d_model, g.model.heads, g.model.context, g.model.vocab, g.data.batch};
  if (g.model.family == "llama") {
    auto c = ops::model_config(g);
    m.kv_hidden = g.model.d_model / g.model.heads * ops::kv_heads_of(c), m.ffn = ops::ffn_hidden_of(c);
    m.gated = true, m.tied = g.model.tie_embeddings;
  }
  return m;
}

std::optional<diagnostic> skippipe_not_runnable(const graph_spec& g) {
  if (!g.skip.present || g.skip_runs())
    return std::nullopt;
  return diagnostic{g.where("network.nodes"), "network.nodes",
                    fmt::format("a run places one stage actor on each network node, so SkipPipe runs need "
                                "pipeline.stages × data_parallel.replicas = {} nodes, not {} (`troupe plan paths` "
                                "plans any number)",
                                g.pipeline.stages * std::max(g.data_parallel.replicas, 1), g.network.nodes())};
}

std::optional<diagnostic> skippipe_schedule_problem(const graph_spec& g) {
  const auto& schedule = g.pipeline.schedule;
  std::string why;
  if (schedule == "interleaved_1f1b")
    why = "SkipPipe's paths cannot run interleaved_1f1b: its chunks are virtual stages in the pipeline's "
          "round-robin order, while a path visits L stages of its own choosing and ends at the head on stage 0 "
          "(use 1f1b or gpipe)";
  else if (schedule == "zb_h1")
    why = "SkipPipe's paths cannot run zb_h1: it defers at most r + 1 weight passes by a rank's place r in one "
          "chain, which paths that skip and reorder stages do not give (use 1f1b or gpipe)";
  else if (schedule != "gpipe" && schedule != "1f1b")
    why = fmt::format("SkipPipe's paths run the schedule gpipe or 1f1b (stage 0 holds the embedding and the head "
                      "as two chunks, reached in any order), not '{}'",
                      schedule);
  if (why.empty())
    return std::nullopt;
  return diagnostic{g.where("pipeline.schedule"), "pipeline.schedule", std::move(why)};
}

expected<path_problem> skippipe_problem(const graph_spec& g) {
  auto device = plan_device(g.sim);
  if (!device)
    return device.error();
  cost_settings cs;
  cs.device = *device;
  cs.dtype = g.model.precision == dtype::bf16 ? "bf16" : "f32";
  const int layers = std::max(g.model.layers / g.pipeline.stages, 1);
  const double forward = costs_of(transformer_shape_of(g), cs, layers, false).forward;
  const double bytes =
    double(g.model.d_model) * g.model.context * g.data.batch * (g.model.precision == dtype::bf16 ? 2 : 4);
  path_problem pr;
  pr.stages = g.pipeline.stages;
  pr.memory = g.skip.memory; // what a node holds at once, whatever the plan
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

expected<skippipe_plan> plan_skippipe_graph(const graph_spec& g, bool baselines, const skippipe_watch& watch) {
  if (!g.skip.present)
    return make_sched_error("the graph has no `skip:` section to plan (and `network:` to plan it over)");
  auto pr = skippipe_problem(g);
  if (!pr)
    return pr.error();
  skippipe_plan rep;
  const auto& skip = g.skip;
  if (!skip.placement.empty()) {
    rep.where = skip.placement;
  } else {
    // DT-FM's weight of the data-parallel cost against the pipeline's: a position's
    // gradient bytes over the activation bytes its microbatches send (SkipPipe's FACTOR).
    double grads =
      4 * stage_parameters(transformer_shape_of(g), std::max(g.model.layers / g.pipeline.stages, 1), false);
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
  rules.max_per_stage = skip.max_per_stage > 0 ? skip.max_per_stage : skip.memory * static_cast<int>(smallest);
  rep.agents = make_agents(*pr, rep.where, g.pipeline.microbatches);
  const auto* planner = find_path_planner(skip.planner);
  if (!planner)
    return make_sched_error(fmt::format("unknown skip.planner '{}'", skip.planner));
  auto random_plan = [&](int k) {
    return plan_random(*pr, rep.where, rules, rep.agents, skip.seed + static_cast<std::uint64_t>(k));
  };
  std::map<std::string, expected<path_plan>, std::less<>> searched; // by name: a baseline reuses the planner's
  auto search = [&](const char* name, const path_rules& r, bool aware) -> expected<path_plan> {
    if (auto it = searched.find(name); it != searched.end())
      return it->second;
    search_limits limits;
    limits.deadline = watch.deadline;
    if (watch.progress)
      limits.progress = [&watch, name](const search_progress& p) { watch.progress(name, p); };
    auto found = plan_skippipe(*pr, rep.where, r, rep.agents, aware, 4000, limits);
    rep.cut_short = rep.cut_short || (found && found->cut_short);
    if (found && aware && &r == &rules) // the collision-aware search over the graph's own rules
      rep.expansions = found->expansions;
    searched.emplace(name, found);
    return found;
  };
  // The plan the graph runs first, so a deadline cuts the baselines before it.
  auto chosen = planner->plan({*pr, rep.where, rules, rep.agents, skip.seed, skip.planner_options, search});
  if (!chosen)
    return chosen.error();
  rep.paths = chosen->paths, rep.planned = chosen->planned_s;
  if (!baselines)
    return rep;
  // The full pipeline at its best (chains chosen by the same search), and
  // SkipPipe's paths, unless the planner's own search found them already.
  auto full = search("the full pipeline", whole_pipeline_rules(rules, g.pipeline.stages, rep.agents.size()), true);
  if (!full)
    return full.error();
  rep.full = full->planned_s;
  if (auto aware = search("SkipPipe's paths", rules, true); !aware)
    return aware.error();
  auto blind = search("the plan without collision awareness", rules, false);
  if (!blind)
    return blind.error();
  rep.blind = blind->planned_s;
  rep.fixed_chains = simulate_iteration(*pr, rep.agents, plan_full(rep.where, rep.agents)).time;
  auto dtfm = plan_dtfm(*pr, rep.where, rep.agents.size());
  rep.dtfm = simulate_iteration(*pr, dtfm.agents, dtfm.paths).time;
  rep.random_draws = random_draws;
  for (int k = 0; k < random_draws; ++k) {
    auto random = random_plan(k);
    if (!random)
      return random.error();
    rep.random += simulate_iteration(*pr, rep.agents, *random).time / random_draws;
  }
  return rep;
}

int skippipe_path_stages(const graph_spec& g) {
  const auto* planner = sched::find_path_planner(g.skip.planner);
  return planner && planner->whole_pipeline ? g.pipeline.stages : g.skip.path_length;
}

std::vector<int> path_stages(const skippipe_plan& plan, const planned_path& p, int nodes) {
  auto stage = stage_of(plan.where, nodes);
  std::vector<int> out;
  for (int n : p.nodes)
    out.push_back(stage[static_cast<std::size_t>(n)]);
  return out;
}

std::string grid_stage_name(const graph_spec& g, int replica, int position) {
  return g.data_parallel.replicas > 1 ? fmt::format("r{}s{}", replica, position) : fmt::format("s{}", position);
}

std::vector<std::vector<std::string>> skippipe_route_names(const graph_spec& g, const skippipe_plan& plan) {
  const int replicas = std::max(g.data_parallel.replicas, 1), m = g.pipeline.microbatches;
  // node -> (position, index among the position's nodes: the replica it is)
  std::vector<std::pair<int, int>> grid(static_cast<std::size_t>(g.network.nodes()), {-1, -1});
  for (std::size_t s = 0; s < plan.where.size(); ++s)
    for (std::size_t i = 0; i < plan.where[s].size(); ++i)
      grid[static_cast<std::size_t>(plan.where[s][i])] = {static_cast<int>(s), static_cast<int>(i)};
  std::vector<std::vector<std::string>> routes;
  for (int k = 0; k < replicas * m; ++k) {
    int agent = (k % replicas) * m + k / replicas;
    auto p = std::find_if(plan.paths.begin(), plan.paths.end(), [&](const auto& q) { return q.agent == agent; });
    std::vector<std::string> names;
    if (p != plan.paths.end()) {
      for (int node : p->nodes) {
        auto [s, i] = grid[static_cast<std::size_t>(node)];
        names.push_back(grid_stage_name(g, i, s));
      }
      names.push_back(names.front() + ".1"); // back to the start, for the head and the loss
      names.front() += ".0";
    }
    routes.push_back(std::move(names));
  }
  return routes;
}

} // namespace troupe
