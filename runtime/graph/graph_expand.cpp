// Expanding the shorthand sections through their registered expanders (the
// `pipeline:` one is in actors/), then merging the explicit entries over them.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"
#include "runtime/graph/limits.hpp"

namespace troupe::detail {

namespace {

/// Runs the expander of `section` when the section is present (or by default).
void expand_section(parsed_graph& pg, const std::string& section, const section_expander& ex, graph_reader& r) {
  auto node = child(pg.root, section);
  if (!node && !(ex.by_default && !pg.has_actors))
    return;
  section_expansion e{pg.graph, node ? r.pos(node, section) : r.pos(pg.root, ""),
                      [&](std::string_view key, std::string message) {
                        auto at = child(node, key);
                        r.error(at ? at : node, join_path(section, key), std::move(message));
                      }};
  ex.expand(e);
}

} // namespace

void expand(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r) {
  auto& g = pg.graph;
  // Bound the expanded graph before building it, as `troupe schedule` bounds its work.
  if (auto n = std::int64_t{g.pipeline.stages} * std::max(g.data_parallel.replicas, 1); n > limits::max_stage_actors) {
    auto at = child(child(pg.root, "data_parallel"), "replicas");
    r.error(at ? at : child(child(pg.root, "pipeline"), "stages"), at ? "data_parallel.replicas" : "pipeline.stages",
            fmt::format("pipeline.stages × data_parallel.replicas = {} × {} = {} stage actors, over the limit of {} "
                        "(checking a graph of 65,536 took 16 s; simulate larger ones with fewer, bigger stages)",
                        g.pipeline.stages, g.data_parallel.replicas, n, limits::max_stage_actors));
    return;
  }
  for (const auto& [section, ex] : vocab.expanders)
    expand_section(pg, section, ex, r);
  std::size_t expanded_count = g.actors.size();
  std::map<std::string, const parsed_actor*> explicit_by_name;
  for (const auto& pa : pg.actors) {
    if (pa.spec.name.empty())
      continue; // already reported
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
      actor_spec merged = pa.spec; // explicit keys win, the rest comes from the shorthand
      if (!pa.has_type)
        merged.type = same->type;
      if (!pa.layers_node)
        merged.layers = same->layers;
      if (!pa.device_node)
        merged.device = same->device;
      merged.replica = same->replica;
      // Keys the entry does not name keep the shorthand's values (a sync actor's `stage:`).
      for (const auto& [key, value] : same->params)
        merged.params.emplace(key, value);
      *same = std::move(merged);
      continue;
    }
    if (!pa.type_node)
      r.error(pa.node, pa.path, fmt::format("missing required key 'type' in actor '{}'", pa.spec.name));
    g.actors.push_back(pa.spec);
  }
  for (const auto& pc : pg.channels) {
    auto same = std::find_if(g.channels.begin(), g.channels.end(),
                             [&](const channel_spec& c) { return c.from == pc.spec.from && c.to == pc.spec.to; });
    if (same == g.channels.end()) {
      g.channels.push_back(pc.spec);
    } else if (same->expanded) {
      *same = pc.spec;
    } else {
      r.error(pc.from_node, pc.path,
              fmt::format("duplicate channel from '{}' to '{}' (first defined at {})", pc.spec.from, pc.spec.to,
                          to_string(same->pos)));
    }
  }
}

} // namespace troupe::detail
