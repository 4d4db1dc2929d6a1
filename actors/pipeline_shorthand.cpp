// The `pipeline:` shorthand's expander: a data_loader, pipeline_stage actors
// and their chain of channels (registered in actors/builtin.cpp).
#include <algorithm>

#include <fmt/format.h>

#include "actors/builtin.hpp"

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
    e.error("stages",
            p.virtual_stages == 1
                ? fmt::format("{} stages need at least {} layers, but model.layers is {}", p.stages, chunks,
                              g.model.layers)
                : fmt::format("{} stages x {} virtual chunks need at least {} layers, but model.layers is {}",
                              p.stages, p.virtual_stages, chunks, g.model.layers));
    return;
  }
  auto ranges = split_layers(std::max(g.model.layers, chunks), chunks);
  // The grid: R replicas of the S positions, `r1s0` (plain `s0` with one replica).
  int replicas = std::max(g.data_parallel.replicas, 1);
  auto stage = [&](int r, int s) { return replicas == 1 ? fmt::format("s{}", s) : fmt::format("r{}s{}", r, s); };
  for (int r = 0; r < replicas; ++r)
    for (int s = 0; s < p.stages; ++s) {
      actor_spec st;
      st.name = stage(r, s);
      st.type = "pipeline_stage";
      st.replica = r;
      st.expanded = true;
      st.pos = e.where;
      for (int c = s; c < chunks; c += p.stages)
        st.layers.push_back(ranges[static_cast<std::size_t>(c)]);
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
  for (int r = 0; r < replicas; ++r) {
    auto last = stage(r, p.stages - 1);
    edge("loader", stage(r, 0));
    if (p.stages > 1)
      edge("loader", last); // the targets go to the stage that computes the loss
    for (int s = 0; s + 1 < p.stages; ++s)
      edge(stage(r, s), stage(r, s + 1));
    if (p.virtual_stages > 1 && p.stages > 1)
      edge(last, stage(r, 0)); // interleaved chunks wrap around
  }
  const auto& lu = g.local_update;
  if (lu.present && lu.algorithm == "noloco" && lu.route == "random" && replicas > 1 && p.virtual_stages == 1)
    for (int s = 0; s + 1 < p.stages; ++s)  // NoLoCo's random routes: any replica to any replica at each boundary
      for (int r = 0; r < replicas; ++r)
        for (int to = 0; to < replicas; ++to)
          if (to != r)
            edge(stage(r, s), stage(to, s + 1));
  if (g.local_update.present)
    expand_outer_sync(e, replicas, stage);  // local-update training replaces the every-step all-reduce
  else if (replicas > 1 && e.graph.data_parallel.zero > 0)
    expand_zero_shards(e, replicas, stage);
  else if (replicas > 1)
    expand_allreduce_ring(e, replicas, stage);
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
