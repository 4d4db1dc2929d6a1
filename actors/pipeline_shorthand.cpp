// The `pipeline:` shorthand's expander: a data_loader, pipeline_stage actors
// and their chain of channels (registered in actors/builtin.cpp).
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/skippipe_plan.hpp"
#include "schedulers/policies/stage_policy.hpp"

namespace troupe {

namespace {

/// Splits `layers` blocks into `chunks` contiguous ranges, as even as possible.
std::vector<layer_range> split_layers(int layers, int chunks) {
  std::vector<layer_range> out;
  int begin = 0;
  for (int c = 0; c < chunks; ++c) {
    int size = layers / chunks + (c < layers % chunks ? 1 : 0);
    out.push_back({begin, begin + size});
    begin += size;
  }
  return out;
}

/// SkipPipe's run (#14): every stage actor is a network node, so each channel
/// between two of them (or between their all-reduce peers) emulates the link
/// between their nodes, as a channel's `network: [from, to]` would; a channel that
/// sets its own `bandwidth:` or `latency:` keeps it.
void emulate_network_links(graph_spec& g, const sched::placement& where) {
  std::map<std::string, int> node;
  for (std::size_t s = 0; s < where.size(); ++s)
    for (std::size_t i = 0; i < where[s].size(); ++i)
      node[grid_stage_name(g, static_cast<int>(i), static_cast<int>(s))] = where[s][i];
  for (const auto& a : g.actors) // an all-reduce peer sits on its stage's node
    if (auto st = a.params.find("stage");
        st != a.params.end() && st->second.IsScalar() && node.contains(st->second.Scalar()))
      node[a.name] = node[st->second.Scalar()];
  for (auto& c : g.channels) {
    auto from = node.find(c.from), to = node.find(c.to);
    if (from == node.end() || to == node.end() || from->second == to->second || c.bandwidth > 0 || c.latency > 0)
      continue;
    auto l = g.network.link(from->second, to->second);
    c.latency = l.latency + g.network.overhead;
    c.bandwidth = l.bandwidth;
  }
}

/// SkipPipe's run (#14): stage 0 holds the head as a second chunk, [layers,
/// layers), so every path ends where it began; the channels are the planned
/// paths' hops and replica 0's chain (validation of the full model), emulating
/// the network's links. A plan that cannot be made adds no channels: the data
/// loader's check reports why, at `skip:`.
std::optional<sched::placement> expand_skip_paths(graph_spec& g, int replicas,
                                                  const std::function<void(std::string, std::string)>& edge) {
  for (auto& a : g.actors)
    if (a.expanded && a.type == "pipeline_stage" && !a.layers.empty() && a.layers.front().begin == 0)
      a.layers.push_back({g.model.layers, g.model.layers});
  std::set<std::pair<std::string, std::string>> edges;
  for (int r = 0; r < replicas; ++r)
    edges.insert({"loader", grid_stage_name(g, r, 0)});
  for (int s = 0; s < g.pipeline.stages; ++s)
    edges.insert({grid_stage_name(g, 0, s), grid_stage_name(g, 0, (s + 1) % g.pipeline.stages)});
  auto plan = plan_skippipe_graph(g, /*baselines=*/false);
  if (plan)
    for (const auto& route : skippipe_route_names(g, *plan))
      for (std::size_t h = 0; h + 1 < route.size(); ++h)
        edges.insert({route[h].substr(0, route[h].find('.')), route[h + 1].substr(0, route[h + 1].find('.'))});
  for (const auto& [from, to] : edges)
    if (from != to)
      edge(from, to);
  return plan ? std::optional{plan->where} : std::nullopt;
}

} // namespace

void expand_pipeline(section_expansion& e) {
  auto& g = e.graph;
  const auto& p = g.pipeline;
  actor_spec loader;
  loader.name = "loader";
  loader.type = "data_loader";
  loader.expanded = true;
  loader.pos = e.where;
  g.actors.push_back(loader);
  int chunks = p.stages * p.virtual_stages;
  if (g.model.layers > 0 && g.model.layers < chunks) {
    e.error("stages", p.virtual_stages == 1
                        ? fmt::format("{} stages need at least {} layers, but model.layers is {}", p.stages, chunks,
                                      g.model.layers)
                        : fmt::format("{} stages x {} virtual chunks need at least {} layers, but model.layers is {}",
                                      p.stages, p.virtual_stages, chunks, g.model.layers));
    return;
  }
  auto ranges = split_layers(std::max(g.model.layers, chunks), chunks);
  // The schedule says where each rank's chunks sit (round-robin, or V-shaped so
  // that the last chunk, which computes the loss, is back on stage 0).
  sched::policy_params shape;
  shape.ranks = p.stages, shape.chunks = p.virtual_stages, shape.options = p.policy;
  const auto placement =
    p.virtual_stages > 1 ? sched::policy_placement(p.schedule, shape) : sched::chunk_placement::round_robin;
  const bool v_shape = placement == sched::chunk_placement::v_shape && p.stages > 1;
  const int loss_rank = sched::rank_of_stage(chunks - 1, p.stages, placement);
  // The grid: R replicas of the S positions, `r1s0` (plain `s0` with one replica).
  int replicas = std::max(g.data_parallel.replicas, 1);
  auto stage = [&](int r, int s) { return grid_stage_name(g, r, s); };
  for (int r = 0; r < replicas; ++r)
    for (int s = 0; s < p.stages; ++s) {
      actor_spec st;
      st.name = stage(r, s);
      st.type = "pipeline_stage";
      st.replica = r;
      st.expanded = true;
      st.pos = e.where;
      for (int c = 0; c < p.virtual_stages; ++c)
        st.layers.push_back(ranges[static_cast<std::size_t>(sched::virtual_stage(s, p.stages, c, placement))]);
      g.actors.push_back(std::move(st));
    }
  auto edge = [&](std::string from, std::string to) {
    channel_spec c;
    c.from = std::move(from);
    c.to = std::move(to);
    c.expanded = true;
    c.pos = e.where;
    g.channels.push_back(std::move(c));
  };
  const bool skip = g.skip_runs();
  std::optional<sched::placement> skip_nodes;
  if (skip)
    skip_nodes = expand_skip_paths(g, replicas, edge);
  for (int r = 0; r < replicas && !skip; ++r) {
    auto last = stage(r, p.stages - 1);
    edge("loader", stage(r, 0));
    if (loss_rank != 0)
      edge("loader", stage(r, loss_rank)); // the targets go to the stage that computes the loss
    for (int s = 0; s + 1 < p.stages; ++s)
      edge(stage(r, s), stage(r, s + 1));
    for (int s = p.stages - 1; v_shape && s > 0; --s)
      edge(stage(r, s), stage(r, s - 1)); // V-shaped chunks come back down the ranks
    if (p.virtual_stages > 1 && p.stages > 1 && !v_shape)
      edge(last, stage(r, 0)); // interleaved chunks wrap around
    else if (g.model.tie_embeddings && loss_rank != 0)
      edge(stage(r, loss_rank), stage(r, 0)); // the head's stage and the embedding's add each other's gradient
  }
  // A method that routes across replicas (NoLoCo's random routes) and least_loaded
  // routing: any replica to any replica at each boundary (the channels a launched
  // run sends over). Interleaved, the last position's chunks wrap to the first of
  // any replica too.
  bool wraps = p.virtual_stages > 1 && p.stages > 1;
  if (g.routes_across_replicas())
    for (int s = 0; s + 1 < p.stages || (wraps && s + 1 == p.stages); ++s)
      for (int r = 0; r < replicas; ++r)
        for (int to = 0; to < replicas; ++to)
          if (to != r)
            edge(stage(r, s), stage(to, (s + 1) % p.stages));
  // Replicas that sync every step: all of them, or each local-update replica group
  // (consecutive replicas); their rings (all-reduce peers or ZeRO's shards) stay
  // inside a group, and local-update training joins the groups' replicas of the
  // same place in their group (actors/outer_sync.cpp).
  int group = g.sync_group_size(), groups = replicas / group;
  for (int first = 0; group > 1 && first < replicas; first += group) {
    auto member = [&, first](int r, int s) { return stage(first + r, s); };
    if (e.graph.data_parallel.zero > 0)
      expand_zero_shards(e, group, member);
    else
      expand_allreduce_ring(e, group, member);
  }
  for (int k = 0; g.local_update.present && k < group; ++k)
    expand_outer_sync(e, groups, [&, k](int gi, int s) { return stage(gi * group + k, s); });
  if (skip_nodes) // the paths' channels and the rings'
    emulate_network_links(g, *skip_nodes);
  for (int i = 0; i < g.attention.servers; ++i) { // separate attention servers (#15)
    actor_spec a;
    a.name = fmt::format("attention{}", i);
    a.type = "attention_server";
    a.expanded = true;
    a.pos = g.attention.pos;
    g.actors.push_back(std::move(a));
  }
  for (const auto& path : p.paths) // routes that skip or reorder stages need their own channels
    for (std::size_t i = 0; i + 1 < path.size(); ++i) {
      auto from = path[i].substr(0, path[i].find('.')), to = path[i + 1].substr(0, path[i + 1].find('.'));
      bool known = from == to;
      for (const auto& c : e.graph.channels)
        known |= c.from == from && c.to == to;
      if (!known)
        edge(from, to);
    }
}

} // namespace troupe
