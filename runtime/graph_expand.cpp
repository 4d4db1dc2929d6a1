// Expanding the shorthand (`pipeline:`) into a data_loader, pipeline_stage
// actors and their channels, then merging the explicit entries over them.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/graph_parse.hpp"

namespace troupe::detail {

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

void expand_pipeline(parsed_graph& pg, graph_reader& r) {
  auto& g = pg.graph;
  const auto& p = g.pipeline;
  auto where = p.present ? r.pos(pg.pipeline_node, "pipeline") : r.pos(pg.root, "");
  actor_spec loader;
  loader.name = "loader";
  loader.type = "data_loader";
  loader.expanded = true;
  loader.pos = where;
  g.actors.push_back(loader);
  int chunks = p.stages * p.virtual_stages;
  if (g.model.layers > 0 && g.model.layers < chunks) {
    r.error(child(pg.pipeline_node, "stages") ? child(pg.pipeline_node, "stages") : pg.pipeline_node, "pipeline.stages",
            p.virtual_stages == 1
              ? fmt::format("{} stages need at least {} layers, but model.layers is {}", p.stages, chunks,
                            g.model.layers)
              : fmt::format("{} stages x {} virtual chunks need at least {} layers, but model.layers is {}",
                            p.stages, p.virtual_stages, chunks, g.model.layers));
    return;
  }
  auto ranges = split_layers(std::max(g.model.layers, chunks), chunks);
  for (int s = 0; s < p.stages; ++s) {
    actor_spec st;
    st.name = fmt::format("s{}", s);
    st.type = "pipeline_stage";
    st.expanded = true;
    st.pos = where;
    for (int c = s; c < chunks; c += p.stages)
      st.layers.push_back(ranges[static_cast<std::size_t>(c)]);
    g.actors.push_back(std::move(st));
  }
  auto edge = [&](std::string from, std::string to) {
    channel_spec c;
    c.from = std::move(from);
    c.to = std::move(to);
    c.expanded = true;
    c.pos = where;
    g.channels.push_back(std::move(c));
  };
  auto last = fmt::format("s{}", p.stages - 1);
  edge("loader", "s0");
  if (p.stages > 1)
    edge("loader", last);  // the targets go to the stage that computes the loss
  for (int s = 0; s + 1 < p.stages; ++s)
    edge(fmt::format("s{}", s), fmt::format("s{}", s + 1));
  if (p.virtual_stages > 1 && p.stages > 1)
    edge(last, "s0");  // interleaved chunks wrap around
  for (const auto& path : p.paths)  // routes that skip or reorder stages need their own channels
    for (std::size_t i = 0; i + 1 < path.size(); ++i) {
      auto from = path[i].substr(0, path[i].find('.')), to = path[i + 1].substr(0, path[i + 1].find('.'));
      bool known = from == to;
      for (const auto& c : g.channels)
        known |= c.from == from && c.to == to;
      if (!known)
        edge(from, to);
    }
}

} // namespace

void expand(parsed_graph& pg, graph_reader& r) {
  auto& g = pg.graph;
  if (g.pipeline.present || !pg.has_actors)
    expand_pipeline(pg, r);
  std::size_t expanded_count = g.actors.size();
  std::map<std::string, const parsed_actor*> explicit_by_name;
  for (const auto& pa : pg.actors) {
    if (pa.spec.name.empty())
      continue;  // already reported
    auto [first, fresh] = explicit_by_name.emplace(pa.spec.name, &pa);
    if (!fresh) {
      pg.duplicate_actors = true;
      r.error(pa.name_node, join_path(pa.path, "name"),
              fmt::format("duplicate actor name '{}' (first defined at {})", pa.spec.name,
                          to_string(first->second->spec.pos)));
      continue;
    }
    auto same = std::find_if(g.actors.begin(), g.actors.begin() + static_cast<std::ptrdiff_t>(expanded_count),
                             [&](const actor_spec& a) { return a.name == pa.spec.name; });
    if (same != g.actors.begin() + static_cast<std::ptrdiff_t>(expanded_count)) {
      actor_spec merged = pa.spec;  // explicit keys win, the rest comes from the shorthand
      if (!pa.has_type)
        merged.type = same->type;
      if (!pa.layers_node)
        merged.layers = same->layers;
      if (!pa.device_node)
        merged.device = same->device;
      *same = std::move(merged);
      continue;
    }
    if (!pa.type_node)
      r.error(pa.node, pa.path, fmt::format("missing required key 'type' in actor '{}'", pa.spec.name));
    g.actors.push_back(pa.spec);
  }
  for (const auto& pc : pg.channels) {
    auto same = std::find_if(g.channels.begin(), g.channels.end(), [&](const channel_spec& c) {
      return c.from == pc.spec.from && c.to == pc.spec.to;
    });
    if (same == g.channels.end()) {
      g.channels.push_back(pc.spec);
    } else if (same->expanded) {
      *same = pc.spec;
    } else {
      r.error(pc.from_node, pc.path,
              fmt::format("duplicate channel from '{}' to '{}' (first defined at {})", pc.spec.from,
                          pc.spec.to, to_string(same->pos)));
    }
  }
}

} // namespace troupe::detail
