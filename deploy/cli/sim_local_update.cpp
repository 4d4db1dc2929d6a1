// What `troupe sim` takes from a local-update graph (sim_local_update.hpp).
#include "deploy/cli/sim_local_update.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "actors/boundary/step_boundary.hpp"
#include "actors/zero_shard_state.hpp"

namespace troupe::cli {

namespace {

/// The stage actor of replica `r` at position `s`, or null.
const actor_spec* stage_at(const graph_spec& g, int r, int s) {
  for (const auto& a : g.actors)
    if (a.role.holds_layers && a.replica == r && a.rank == s)
      return &a;
  return nullptr;
}

/// The emulated link a message from the helper (`suffix`: `_sync`, `_ar`,
/// `_os`) of stage (from, s) to that of (to, s) crosses: between node processes
/// one connection per (node, link) carries every such channel
/// (deploy/cluster/node_agent.cpp), within one a link actor each. Without
/// `bandwidth:` or `latency:` on the channel, the sim's network prices it.
sched::cluster_config::local_update::link helper_link(const graph_spec& g, const sched::cluster_config& c, int s,
                                                      int from, int to, const std::string& suffix) {
  const auto* a = stage_at(g, from, s);
  const auto* b = stage_at(g, to, s);
  const auto* sa = a ? g.find_actor(a->name + suffix) : nullptr;
  const auto* sb = b ? g.find_actor(b->name + suffix) : nullptr;
  if (sa && sb)
    for (const auto& ch : g.channels)
      if (ch.from == sa->name && ch.to == sb->name && (ch.bandwidth > 0 || ch.latency > 0)) {
        int na = g.node_of(*sa), nb = g.node_of(*sb);
        auto key = na != nb ? fmt::format("node {} > {} at {} B/s, {} s", na, nb, ch.bandwidth, ch.latency)
                            : fmt::format("{} > {}", ch.from, ch.to);
        return {key, {ch.latency, ch.bandwidth}};
      }
  // Devices as the simulator numbers them: tensor-parallel, then data-parallel, then pipeline.
  auto device = [&](int r) { return (static_cast<std::int64_t>(s) * c.replicas + r) * c.costs.tensor_parallel; };
  return {fmt::format("{} > {} at {}{}", from, to, s, suffix), c.costs.network.between(device(from), device(to))};
}

/// The data-parallel ring (#25): the stage's buckets as grad_buckets cuts them,
/// from its parameters chunk by chunk, over the ring channels' links.
void set_data_parallel(const graph_spec& g, sched::cluster_config& c) {
  const int p = static_cast<int>(c.stages.size());
  auto& d = c.ring;
  d.bucket_bytes = g.data_parallel.bucket;
  d.overlap = g.data_parallel.overlap;
  d.zero = g.data_parallel.zero;
  if (g.data_parallel.wire == "bf16" && d.zero == 0) // the all-reduce's chunks go as bf16 (shards send f32)
    c.gradient_bytes = 2;
  for (int s = 0; s < p; ++s) {
    auto& chunks = d.tensors.emplace_back();
    if (const auto* a = stage_at(g, 0, s))
      for (const auto& chunk : zero_params(g, *a)) {
        auto& sizes = chunks.emplace_back();
        for (const auto& t : chunk)
          sizes.push_back(t.elements);
      }
  }
  const std::string suffix = d.zero > 0 ? "_os" : "_ar";
  d.link_of = [&g, &c, suffix](int s, int from, int to) { return helper_link(g, c, s, from, to, suffix); };
}

} // namespace

void set_run_sections(const graph_spec& g, sched::cluster_config& c) {
  const int p = static_cast<int>(c.stages.size());
  if (g.cluster.present) {
    c.nodes.clear();
    for (int r = 0; r < c.replicas; ++r)
      for (int s = 0; s < p; ++s) {
        const auto* a = stage_at(g, r, s);
        c.nodes.push_back(a ? g.node_of(*a) : 0);
      }
  }
  // A stage's `slowdown:` (an emulated slow device): each action takes that many times its compute.
  for (int r = 0; r < c.replicas; ++r)
    for (int s = 0; s < p; ++s)
      if (const auto* a = stage_at(g, r, s))
        if (auto f = a->params.find("slowdown"); f != a->params.end() && f->second.IsScalar())
          c.slowdown[fmt::format("r{}s{}", r, s)] = f->second.as<double>();
  if (g.data_parallel.present)
    set_data_parallel(g, c);
  if (!g.local_update.present)
    return;
  auto& o = c.outer;
  o.present = true;
  o.spec = g.local_update;
  o.seed = g.data.seed;
  o.group = g.sync_group_size();
  for (int s = 0; s < p; ++s) {
    auto& sizes = o.tensors.emplace_back();
    if (const auto* a = stage_at(g, 0, s))
      sizes = outer_tensor_sizes(g, *a);
  }
  o.link_of = [&g, &c](int s, int from, int to) { return helper_link(g, c, s, from, to, "_sync"); };
}

} // namespace troupe::cli
