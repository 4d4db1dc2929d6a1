// `troupe sim` on a `skip:` graph: the plan of `troupe plan paths`, then the
// real router, stage cores and gpipe policy carrying each microbatch along its
// path, every hop delayed by its nodes' link (#16).
#include "deploy/cli/sim_skippipe.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/skippipe_plan.hpp"
#include "deploy/cli/commands.hpp"

namespace troupe::cli {

using namespace troupe::sched;

expected<cluster_config> skippipe_cluster(const graph_spec& g, const placement& where,
                                          const std::vector<planned_path>& paths, int path_length, cluster_config c) {
  const int p = g.pipeline.stages, layers = g.model.layers, m = g.pipeline.microbatches;
  if (where.size() != static_cast<std::size_t>(p) || layers % p != 0)
    return make_sched_error(fmt::format("SkipPipe is simulated on {} positions of model.layers / pipeline.stages "
                                        "blocks each ({} layers)",
                                        p, layers));
  std::size_t widest = 0;
  for (const auto& nodes : where)
    widest = std::max(widest, nodes.size());
  const int replicas = static_cast<int>(widest), starts = static_cast<int>(where[0].size());
  if (where[0].size() != widest)
    return make_sched_error(fmt::format("SkipPipe is simulated with stage 0 holding the most nodes (it has {}, "
                                        "another position {})",
                                        starts, widest));
  // Stage 0 holds the embedding's blocks and, as a chunk of no blocks, the head
  // (as a run's stage 0 does: ops::gpt_config::head_apart).
  const int k = layers / p;
  c.stages.clear();
  for (int s = 0; s < p; ++s) {
    route_stage st{0, fmt::format("s{}", s), {{s * k, (s + 1) * k}}};
    if (s == 0)
      st.chunks.emplace_back(layers, layers);
    c.stages.push_back(std::move(st));
  }
  c.replicas = replicas;
  c.microbatches = m;
  c.policy = "gpipe"; // stage 0 takes its two chunks in whatever order the paths bring them
  // A node past stage 0 holds at most skip.memory microbatches at once, as the
  // plan's cost model prices every plan (sched::path_problem::memory).
  for (int s = 1; s < p; ++s)
    c.stage_policy_options[s]["max_in_flight"] = std::to_string(std::max(g.skip.memory, 1));
  c.routing = "skippipe";
  c.paths.clear();
  std::vector<std::pair<int, int>> grid(static_cast<std::size_t>(g.network.nodes()), {-1, -1});
  for (int s = 0; s < p; ++s)
    for (std::size_t i = 0; i < where[static_cast<std::size_t>(s)].size(); ++i)
      grid[static_cast<std::size_t>(where[static_cast<std::size_t>(s)][i])] = {s, static_cast<int>(i)};
  for (int mb = 0; mb < starts * m; ++mb) {
    const int agent = (mb % starts) * m + mb / starts;
    auto path = std::find_if(paths.begin(), paths.end(), [&](const auto& q) { return q.agent == agent; });
    if (path == paths.end())
      return make_sched_error(fmt::format("the plan has no path for microbatch {}", agent));
    std::vector<std::string> names;
    for (int node : path->nodes) {
      auto [s, i] = grid[static_cast<std::size_t>(node)];
      names.push_back(fmt::format("r{}s{}", i, s));
    }
    names.push_back(names.front() + ".1"); // back to its start for the head and the loss
    names.front() += ".0";
    c.paths.push_back(std::move(names));
  }
  // Links between grid slots (replica · p + position): their nodes' locations'.
  const auto slots = static_cast<std::size_t>(replicas * p);
  c.skip.present = true;
  c.skip.path_length = path_length;
  c.skip.hop_overhead = g.network.overhead;
  c.skip.links.assign(slots, std::vector<link_spec>(slots));
  auto node_at = [&](std::size_t slot) {
    const auto& nodes = where[slot % static_cast<std::size_t>(p)];
    const auto i = slot / static_cast<std::size_t>(p);
    return i < nodes.size() ? nodes[i] : -1;
  };
  for (std::size_t a = 0; a < slots; ++a)
    for (std::size_t b = 0; b < slots; ++b)
      if (int na = node_at(a), nb = node_at(b); na >= 0 && nb >= 0 && na != nb) {
        auto l = g.network.link(na, nb);
        c.skip.links[a][b] = {std::max(l.latency, 0.0), l.bandwidth};
      }
  return c;
}

namespace {

/// One plan under the simulated clock.
struct skip_run {
  double planned = 0; ///< the plan's own estimate (its cost model's event simulation)
  cluster_result sim;
};

expected<skip_run> plan_and_simulate(const graph_spec& g, const cluster_config& base) {
  auto plan = plan_skippipe_graph(g, /*baselines=*/false);
  if (!plan)
    return plan.error();
  auto c = skippipe_cluster(g, plan->where, plan->paths, skippipe_path_stages(g), base);
  if (!c)
    return c.error();
  auto r = simulate_cluster(*c);
  if (!r)
    return r.error();
  return skip_run{plan->planned, std::move(*r)};
}

} // namespace

int simulate_skippipe(const std::string& file, const graph_spec& g, const cluster_config& base, bool json) {
  auto run = plan_and_simulate(g, base);
  if (!run) {
    fmt::print(stderr, "troupe sim: {}: {}\n", file, run.error().message);
    return bad_input;
  }
  // The full pipeline: every stage in order, on chains the same search picks.
  graph_spec full_graph = g;
  full_graph.skip.planner = "full";
  auto full = plan_and_simulate(full_graph, base);
  if (!full) {
    fmt::print(stderr, "troupe sim: {}: the full pipeline: {}\n", file, full.error().message);
    return bad_input;
  }
  const auto& sim = run->sim;
  const double speedup = full->sim.iteration_s / sim.iteration_s;
  if (json) {
    nlohmann::json positions = nlohmann::json::array();
    for (const auto& q : sim.positions)
      positions.push_back({{"name", q.name}, {"busy_s", q.busy / static_cast<double>(base.steps)}});
    nlohmann::json out{{"skip",
                        {{"planner", g.skip.planner},
                         {"nodes", g.network.nodes()},
                         {"stages", g.pipeline.stages},
                         {"path_length", skippipe_path_stages(g)},
                         {"microbatches", sim.tokens_per_step / (g.model.context * std::max(g.data.batch, 1))},
                         {"iteration_s", sim.iteration_s},
                         {"plan_estimate_s", run->planned},
                         {"full_iteration_s", full->sim.iteration_s},
                         {"full_plan_estimate_s", full->planned},
                         {"speedup_over_full", speedup},
                         {"positions", positions}}},
                       {"iteration_s", sim.iteration_s},
                       {"events", sim.events + full->sim.events},
                       {"wall_s", sim.wall_s + full->sim.wall_s}};
    fmt::print("{}\n", out.dump(2));
    return ok;
  }
  auto vs = [](double sim_s, double plan_s) {
    return fmt::format("{:.4g} s (the plan's estimate {:.4g} s, sim {:+.1f}%)", sim_s, plan_s,
                       100.0 * (sim_s / plan_s - 1));
  };
  fmt::print("troupe sim: {}: SkipPipe, {} network nodes on {} stage positions, {} microbatches of {} x {} tokens, "
             "paths of {} stages, planner {}; the real router, stage cores and gpipe under the simulated clock, "
             "hops over the network's links (+{:.3g} s overhead each), no data-parallel sync (as the plan)\n",
             file, g.network.nodes(), g.pipeline.stages, sim.tokens_per_step / (g.model.context * g.data.batch),
             g.data.batch, g.model.context, skippipe_path_stages(g), g.skip.planner, g.network.overhead);
  fmt::print("iteration: planned paths {}\n", vs(sim.iteration_s, run->planned));
  fmt::print("           full pipeline {}\n", vs(full->sim.iteration_s, full->planned));
  fmt::print("skipping is {:.2f}x the full pipeline's speed under the simulated clock ({:.2f}x under the plan's "
             "cost model)\n",
             speedup, full->planned / run->planned);
  fmt::print("{:<10} {:>10}\n", "position", "busy s");
  for (const auto& q : sim.positions)
    fmt::print("{:<10} {:>10.4g}\n", q.name, q.busy / static_cast<double>(base.steps));
  fmt::print("simulation: {} events in {:.3f} s\n", sim.events + full->sim.events, sim.wall_s + full->sim.wall_s);
  return ok;
}

} // namespace troupe::cli
