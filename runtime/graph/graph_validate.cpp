// Whole-graph checks: names against the vocabulary, the layer ranges of the
// actors whose role holds layers, channel ends, and the files a graph refers
// to (corpus, schedule table).
#include <algorithm>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

namespace {

const std::vector<std::string> common_actor_keys{"name", "type", "node", "layers"};

std::vector<std::string> actor_names(const graph_spec& g) {
  std::vector<std::string> out;
  for (const auto& a : g.actors)
    out.push_back(a.name);
  return out;
}

/// Where to point at an actor's `layers`: the explicit entry's key, else the entry.
std::pair<YAML::Node, std::string> layers_site(const parsed_graph& pg, const actor_spec& a) {
  for (const auto& pa : pg.actors)
    if (pa.spec.name == a.name)
      return {pa.layers_node ? pa.layers_node : pa.node, join_path(pa.path, "layers")};
  return {pg.pipeline_node ? pg.pipeline_node : pg.root, "pipeline"};
}

std::string range_text(layer_range r) {
  return fmt::format("[{}, {})", r.begin, r.end);
}

/// The types whose role holds layers, for messages: `a`, `a or b`.
std::string holder_types(const graph_vocabulary& vocab) {
  std::string out;
  for (const auto& [name, info] : vocab.actor_types)
    if (info.role.holds_layers)
      out += (out.empty() ? "" : " or ") + name;
  return out;
}

/// Every actor takes the role its type registered (unknown types are reported by check_names).
void assign_roles(parsed_graph& pg, const graph_vocabulary& vocab) {
  for (auto& a : pg.graph.actors)
    if (auto t = vocab.actor_types.find(a.type); t != vocab.actor_types.end())
      a.role = t->second.role;
}

/// Reports gaps, overlaps and ranges past model.layers among one replica's layer ranges.
template <class Held>
void check_coverage(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r, std::vector<Held> all,
                    int layers) {
  std::stable_sort(all.begin(), all.end(), [](const Held& a, const Held& b) { return a.range.begin < b.range.begin; });
  int covered = 0;
  const Held* prev = nullptr;
  for (const auto& h : all) {
    auto [n, path] = layers_site(pg, *h.actor);
    if (h.range.end > layers)
      r.error(n, path,
              fmt::format("layers {} of '{}' exceed model.layers {} (blocks are numbered 0 to {})", range_text(h.range),
                          h.actor->name, layers, layers - 1));
    if (prev && h.range.begin < prev->range.end)
      r.error(n, path,
              fmt::format("layers {} of '{}' overlap layers {} of '{}'", range_text(h.range), h.actor->name,
                          range_text(prev->range), prev->actor->name));
    else if (h.range.begin > covered && h.range.begin < layers)
      r.error(n, path,
              fmt::format("layers [{}, {}) are held by no {} (the gap ends where '{}' starts)", covered, h.range.begin,
                          holder_types(vocab), h.actor->name));
    covered = std::max(covered, h.range.end);
    prev = &h;
  }
  if (covered < layers) {
    auto [n, path] = layers_site(pg, *prev->actor);
    r.error(n, path,
            fmt::format("layers [{}, {}) are held by no {} (model.layers is {}; '{}' ends at {})", covered, layers,
                        holder_types(vocab), layers, prev->actor->name, covered));
  }
}

void check_stage_layers(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r) {
  auto& g = pg.graph;
  struct held {
    layer_range range;
    actor_spec* actor;
  };
  std::vector<held> all;
  std::vector<actor_spec*> stages;
  for (auto& a : g.actors) {
    if (!a.role.holds_layers)
      continue;
    stages.push_back(&a);
    if (a.layers.empty()) {
      bool written = std::any_of(pg.actors.begin(), pg.actors.end(),
                                 [&](const parsed_actor& pa) { return pa.spec.name == a.name && pa.layers_node; });
      if (written)
        continue; // its `layers:` is already reported as malformed
      auto [n, path] = layers_site(pg, a);
      r.error(n, path.substr(0, path.rfind('.')),
              fmt::format("{} '{}' needs 'layers: [first, end)' (the blocks it holds)", a.type, a.name));
      continue;
    }
    for (auto l : a.layers)
      all.push_back({l, &a});
  }
  int replicas = std::max(g.data_parallel.replicas, 1);
  if (g.pipeline.present && static_cast<int>(stages.size()) != g.pipeline.stages * replicas && !stages.empty()) {
    r.error(child(pg.pipeline_node, "stages") ? child(pg.pipeline_node, "stages") : pg.pipeline_node, "pipeline.stages",
            replicas == 1 ? fmt::format("pipeline.stages is {} but the graph has {} {} actors", g.pipeline.stages,
                                        stages.size(), holder_types(vocab))
                          : fmt::format("pipeline.stages is {} with {} replicas, so {} {} actors, but the graph has {}",
                                        g.pipeline.stages, replicas, g.pipeline.stages * replicas, holder_types(vocab),
                                        stages.size()));
  }
  if (!g.pipeline.present)
    g.pipeline.stages = std::max<int>(1, static_cast<int>(stages.size()) / replicas);
  int layers = g.model.layers;
  if (layers <= 0 || all.empty() || pg.duplicate_actors)
    return; // model.layers, or which stage holds what, is already in doubt
  // Tied embeddings need no check here: a head apart from the embedding keeps a
  // copy of the tied matrix, which the two stages keep equal by adding each
  // other's gradient of it, after the DDP ring's sum or before ZeRO's shards
  // take it (actors/boundary/tied_embeddings.cpp); under local_update the copy
  // stays out of its stage's outer exchange and takes the embedding's values
  // after each outer step (actors/boundary/tied_mirror.hpp); SkipPipe's paths
  // begin and end on one stage 0, which holds both copies and adds them in place.
  // Each replica holds the whole model once: the checks run per replica.
  for (int rep = 0; rep < replicas; ++rep) {
    std::vector<held> mine;
    for (const auto& h : all)
      if (h.actor->replica == rep)
        mine.push_back(h);
    if (!mine.empty())
      check_coverage(pg, vocab, r, std::move(mine), layers);
    // Ranks follow the first layer each stage holds, within its replica.
    std::vector<actor_spec*> own;
    for (auto* a : stages)
      if (a->replica == rep)
        own.push_back(a);
    std::stable_sort(own.begin(), own.end(), [](const actor_spec* a, const actor_spec* b) {
      auto first = [](const actor_spec* s) { return s->layers.empty() ? 1 << 30 : s->layers.front().begin; };
      return first(a) < first(b);
    });
    for (std::size_t i = 0; i < own.size(); ++i)
      own[i]->rank = static_cast<int>(i);
  }
}

/// Where to point at a layer holder's device: its own `device:`, else pipeline.device.
std::pair<YAML::Node, std::string> device_site(const parsed_graph& pg, const actor_spec& a) {
  for (const auto& pa : pg.actors)
    if (pa.spec.name == a.name && pa.device_node)
      return {pa.device_node, join_path(pa.path, "device")};
  auto n = child(pg.pipeline_node, "device");
  return {n ? n : pg.pipeline_node, "pipeline.device"};
}

/// Layer holders without a `device:` run on pipeline.device; other actors take none.
void check_devices(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r) {
  for (auto& a : pg.graph.actors) {
    if (a.role.holds_layers) {
      if (a.device.empty())
        a.device = pg.graph.pipeline.device;
      // The GPU model (ops/cuda/gpt_cuda) has GPT-2's blocks only; Llama's GPU kernels
      // (kernels/cuda/llama.cu) are not wired into it yet.
      if (pg.graph.model.family == "llama" && a.device.starts_with("cuda")) {
        auto [n, path] = device_site(pg, a);
        r.error(n, path, fmt::format("the llama family runs on the CPU only so far ('{}' is on {})", a.name, a.device));
        return; // once: the others would say the same
      }
      continue;
    }
    if (a.device.empty())
      continue;
    for (const auto& pa : pg.actors)
      if (pa.spec.name == a.name && pa.device_node)
        r.error(pa.device_node, join_path(pa.path, "device"),
                fmt::format("only {} actors run on a device ('{}' is a {})", holder_types(vocab), a.name, a.type));
  }
}

void check_channels(parsed_graph& pg, graph_reader& r) {
  auto names = actor_names(pg.graph);
  auto known = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  for (const auto& pc : pg.channels) {
    for (auto [name, node, key] :
         {std::tuple{pc.spec.from, pc.from_node, "from"}, std::tuple{pc.spec.to, pc.to_node, "to"}})
      if (!known(name))
        r.error(node, join_path(pc.path, key), fmt::format("no actor named '{}' {}", name, choices(name, names)));
    if (pc.spec.from == pc.spec.to)
      r.error(pc.to_node, join_path(pc.path, "to"), fmt::format("a channel from '{}' to itself", pc.spec.from));
  }
}

void check_schedule_files(parsed_graph& pg, graph_reader& r) {
  auto& p = pg.graph.pipeline;
  if (p.schedule == "table" && p.table.empty())
    r.error(pg.schedule_node, "pipeline.schedule",
            "schedule 'table' needs 'table: FILE.csv' (the per-rank action list, e.g. 0F0 0F1 0B0)");
  if (!p.table.empty() && p.schedule != "table")
    r.error(pg.table_node, "pipeline.table",
            fmt::format("a table file is only used with 'schedule: table' (the schedule is '{}')", p.schedule));
  if (!p.table.empty()) {
    p.table_path = pg.resolve(p.table);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p.table_path, ec))
      r.error(pg.table_node, "pipeline.table",
              fmt::format("schedule table '{}' does not exist (relative to the graph file's folder)", p.table));
  }
}

/// Why the schedule cannot run `virtual` chunks per stage (or, with
/// `microbatches`, that many per step), if it cannot; a table names its own chunks.
std::optional<std::string> schedule_shape_problem(const pipeline_spec& p, const graph_vocabulary& vocab,
                                                  int microbatches = 0) {
  if (p.schedule == "table")
    return std::nullopt;
  if (vocab.check_schedule_shape)
    return vocab.check_schedule_shape(p.schedule, p.stages, p.virtual_stages, microbatches);
  if (microbatches > 0)
    return std::nullopt;
  if (p.virtual_stages > 1 && p.schedule != "interleaved_1f1b")
    return fmt::format("only the interleaved_1f1b and table schedules run several chunks per stage (the schedule is "
                       "'{}')",
                       p.schedule);
  return std::nullopt;
}

} // namespace

void check_names(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r) {
  auto& p = pg.graph.pipeline;
  if (std::find(vocab.schedules.begin(), vocab.schedules.end(), p.schedule) == vocab.schedules.end())
    r.error(pg.schedule_node, "pipeline.schedule",
            fmt::format("unknown schedule '{}' {}", p.schedule, choices(p.schedule, vocab.schedules)));
  else if (auto why = schedule_shape_problem(p, vocab)) {
    auto at = child(pg.pipeline_node, "virtual");
    r.error(at ? at : pg.schedule_node, "pipeline.virtual", *why);
  } else if (auto few = schedule_shape_problem(p, vocab, p.microbatches)) { // dualpipev: at least 2 x stages
    auto at = child(pg.pipeline_node, "microbatches");
    r.error(at ? at : pg.schedule_node, "pipeline.microbatches", *few);
  }
  std::vector<std::string> types;
  for (const auto& [name, info] : vocab.actor_types)
    types.push_back(name);
  for (const auto& pa : pg.actors) {
    const auto* merged = pg.graph.find_actor(pa.spec.name);
    std::string type = merged ? merged->type : pa.spec.type;
    if (type.empty())
      continue; // reported as missing
    auto info = vocab.actor_types.find(type);
    if (info == vocab.actor_types.end()) {
      r.error(pa.type_node, join_path(pa.path, "type"),
              fmt::format("unknown actor type '{}' {}", type, choices(type, types)));
      continue;
    }
    auto keys = common_actor_keys;
    if (info->second.role.holds_layers)
      keys.push_back("device"); // typed like `layers`, but only layer holders run on a device
    keys.insert(keys.end(), info->second.keys.begin(), info->second.keys.end());
    for (const auto& [k, v] : pa.spec.params)
      if (std::find(keys.begin(), keys.end(), k) == keys.end())
        for (auto it = pa.node.begin(); it != pa.node.end(); ++it)
          if (it->first.IsScalar() && it->first.Scalar() == k)
            r.error(it->first, join_path(pa.path, k),
                    fmt::format("unknown key '{}' for actor type '{}' {}", k, type, choices(k, keys)));
  }
}

/// `train.init`: resolved against the graph file's folder (the checkpoint itself
/// is read and matched to the stages before a run starts: check_init).
void check_init_key(parsed_graph& pg, graph_reader& r) {
  auto& g = pg.graph;
  if (g.train.init.empty())
    return;
  g.train.init_path = pg.resolve(g.train.init);
}

/// `train.clip: post_validate` rolls a stage's optimizer step back; ZeRO's step
/// runs on optimizer shards, which keep nothing to roll back to.
void check_clip(parsed_graph& pg, graph_reader& r) {
  const auto& g = pg.graph;
  if (g.train.clip == "post_validate" && g.data_parallel.present && g.data_parallel.zero > 0)
    r.error_at(g.train.clip_pos, "train.clip",
               fmt::format("post_validate rolls a stage's optimizer step back when the global norm then exceeds "
                           "grad_clip, and with data_parallel.zero: {} that step runs on optimizer shards, which "
                           "keep no copy to roll back to: use clip: sync, or zero: 0",
                           g.data_parallel.zero));
}

void validate(parsed_graph& pg, const graph_vocabulary& vocab, const load_options& opts, graph_reader& r) {
  assign_roles(pg, vocab);
  check_stage_layers(pg, vocab, r);
  check_devices(pg, vocab, r);
  check_channels(pg, r);
  check_schedule_files(pg, r);
  check_cluster(pg, r);
  check_init_key(pg, r);
  check_clip(pg, r);
  if (opts.check_corpus)
    check_data(pg, r);
}

} // namespace troupe::detail
