// The loader's routing (actors/data_loader_routing.hpp).
#include "actors/data_loader_routing.hpp"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "actors/skippipe_plan.hpp"
#include "schedulers/routing/skippipe_routing.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe {

namespace {
constexpr std::string_view method_routing = "local_update."; // then the method's name
} // namespace

/// The local-update method sends microbatches across replicas (a property its
/// settings set, #13): its own routing (sync_method::routing) takes them.
bool method_routes_across(const graph_spec& g) {
  return g.local_update.present && g.local_update.routes_across_replicas && g.data_parallel.replicas > 1;
}

/// The routing policy the loader runs: the pipeline's, the local-update
/// method's (not a pipeline.routing choice) or SkipPipe's planned paths (`skip:`).
std::string routing_of(const graph_spec& g) {
  if (g.skip_runs())
    return skippipe_routing;
  return method_routes_across(g) ? std::string{method_routing} + g.local_update.algorithm : g.pipeline.routing;
}
sched::expected<sched::routing_ptr> make_loader_routing(const std::string& name, const sched::routing_params& p) {
  if (name == skippipe_routing)
    return sched::make_skippipe_routing(p);
  if (!name.starts_with(method_routing))
    return sched::make_routing(name, p);
  auto algorithm = name.substr(method_routing.size());
  const auto* m = sched::find_sync_method(algorithm);
  if (!m || !m->routing)
    return sched::make_sched_error(fmt::format(
      "local_update.algorithm '{}' sends microbatches across replicas but registers no routing", algorithm));
  return m->routing(p);
}

/// The stages a router routes over: every actor that holds layers.
sched::routing_params routing_params_of(const graph_spec& g) {
  sched::routing_params rp;
  rp.options = g.pipeline.routing_options; // the settings the policy registered
  rp.options["seed"] = std::to_string(g.data.seed);
  rp.layers = g.model.layers;
  rp.paths = g.pipeline.paths;
  // SkipPipe: the plan's paths (a plan that cannot be made leaves none: make_skippipe_routing says so).
  if (g.skip_runs()) {
    if (auto plan = plan_skippipe_graph(g, /*baselines=*/false))
      rp.paths = skippipe_route_names(g, *plan);
    rp.options["path_length"] = std::to_string(skippipe_path_stages(g));
  }
  rp.replicas = std::max(g.data_parallel.replicas, 1);
  for (std::size_t i = 0; i < g.actors.size(); ++i) {
    const auto& a = g.actors[i];
    if (!a.role.holds_layers)
      continue;
    sched::route_stage s{static_cast<int>(i), a.name, {}, a.replica};
    for (const auto& r : a.layers)
      s.chunks.emplace_back(r.begin, r.end);
    rp.stages.push_back(std::move(s));
  }
  return rp;
}

/// Checks the routing of `loader`'s graph: a known policy that accepts its
/// paths, and a channel for every hop (from the loader to each route's first
/// and last stage, and between consecutive stages), over the first steps'
/// routes. What is wrong, or nullopt.
std::optional<std::string> check_routes(const graph_spec& g, const actor_spec& loader) {
  auto policy = make_loader_routing(routing_of(g), routing_params_of(g));
  if (!policy)
    return policy.error().message;
  auto self = static_cast<int>(&loader - g.actors.data());
  std::set<std::pair<std::string_view, std::string_view>> channels; // one lookup per hop, not a scan
  for (const auto& c : g.channels)
    channels.emplace(c.from, c.to);
  auto has_channel = [&](int from, int to) {
    return channels.contains(
      {g.actors[static_cast<std::size_t>(from)].name, g.actors[static_cast<std::size_t>(to)].name});
  };
  int m = std::max(g.pipeline.microbatches, 1) * std::max(g.data_parallel.replicas, 1);
  for (int k = 0; k < 4 * m; ++k) {
    auto r = (*policy)->route(k / m, k % m, k);
    std::vector<std::pair<int, int>> edges{{self, r.front().actor}, {self, r.back().actor}};
    for (std::size_t h = 0; h + 1 < r.size(); ++h)
      edges.emplace_back(r[h].actor, r[h + 1].actor);
    for (auto [from, to] : edges)
      if (from != to && !has_channel(from, to))
        return fmt::format("the route of microbatch {} needs a channel from '{}' to '{}' (add it under channels:)", k,
                           g.actors[static_cast<std::size_t>(from)].name, g.actors[static_cast<std::size_t>(to)].name);
  }
  return std::nullopt;
}

/// A `skip:` graph that runs (graph_spec::skip_runs): its placement puts
/// data_parallel.replicas nodes on each position (replica i on the i-th), and its
/// plan can be made; false (with the reason in `out`) otherwise.
bool check_skip_run(const graph_spec& g, diagnostics& out) {
  const auto& where = g.skip.placement; // empty: searched, data_parallel.replicas nodes per position
  for (std::size_t s = 0; s < where.size(); ++s)
    if (static_cast<int>(where[s].size()) != std::max(g.data_parallel.replicas, 1)) {
      out.push_back({g.where("skip.placement"), "skip.placement",
                     fmt::format("a run places replica i of each position on its i-th node, so each position "
                                 "needs data_parallel.replicas = {} nodes; stage {} has {}",
                                 std::max(g.data_parallel.replicas, 1), s, where[s].size())});
      return false;
    }
  // Checked before the routes, whose chunks an unfit schedule changes (interleaved's virtual stages).
  auto schedule = skippipe_schedule_problem(g);
  if (schedule)
    out.push_back(*schedule);
  // SkipPipe's routes are its plan's: a plan that cannot be made is the `skip:` section's fault.
  if (auto plan = plan_skippipe_graph(g, /*baselines=*/false); !plan) {
    out.push_back({g.skip.pos, "skip", fmt::format("no plan for a run: {}", plan.error().message)});
    return false;
  }
  return !schedule;
}

} // namespace troupe
