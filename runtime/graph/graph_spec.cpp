// graph_spec helpers: built-in names, look-ups, and printing the expanded
// graph as YAML that loads back to the same graph.
#include "runtime/graph/graph_spec.hpp"

#include "runtime/graph/graph_parse.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace troupe {

namespace {

/// Counts nodes under `n` down from `budget`; false when it runs out (aliases
/// can make a short file describe an exponentially large value).
bool fits(const YAML::Node& n, int& budget) {
  if (--budget < 0)
    return false;
  if (n.IsSequence() || n.IsMap())
    for (auto it = n.begin(); it != n.end(); ++it)
      if (!fits(n.IsMap() ? it->second : *it, budget))
        return false;
  return true;
}

std::string flow(const YAML::Node& n) {
  int budget = 10000;
  if (!fits(n, budget))
    return "\"<a value of more than 10000 nodes>\"";
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << n;
  return e.c_str();
}

/// A scalar as YAML: plain when that reads back the same, else double-quoted.
std::string scalar(const std::string& s) {
  YAML::Emitter e;
  e << s;
  return e.c_str();
}

std::string layers_text(const std::vector<layer_range>& ls) {
  auto one = [](layer_range r) { return fmt::format("[{}, {}]", r.begin, r.end); };
  if (ls.size() == 1)
    return one(ls[0]);
  std::string out = "[";
  for (std::size_t i = 0; i < ls.size(); ++i)
    out += (i ? ", " : "") + one(ls[i]);
  return out + "]";
}

} // namespace

const std::vector<std::string>& builtin_schedule_names() {
  static const std::vector<std::string> names{"gpipe",  "1f1b",  "interleaved_1f1b", "zb_h1", "zbv",
                                              "v_half", "v_min", "dualpipev",        "table"};
  return names;
}

struct graph_spec::directory {
  std::unordered_map<std::string, int> index; ///< name -> position in actors
  std::size_t size = 0;                       ///< actors indexed: actors[0, size)
  std::string last; ///< actors[size - 1].name when indexed (a check that they are still those)
  std::unordered_multimap<std::string, int> from; ///< a channel's `from` -> its position in channels
  std::size_t channels = 0;                       ///< channels indexed: channels[0, channels)
  std::string last_channel;                       ///< from + ' ' + to of the last one indexed
};

namespace {
std::mutex directory_mutex; // lookups may come from several threads (a node's actors as they spawn)
}

const graph_spec::directory& graph_spec::indexed() const {
  auto& d = directory_;
  bool still = d && d->size <= actors.size() && (d->size == 0 || actors[d->size - 1].name == d->last);
  if (!still)
    d = std::make_shared<directory>();
  for (auto i = d->size; i < actors.size(); ++i)
    d->index.emplace(actors[i].name, static_cast<int>(i));
  d->size = actors.size();
  d->last = actors.empty() ? std::string{} : actors.back().name;
  auto key = [](const channel_spec& c) { return c.from + ' ' + c.to; };
  if (d->channels > channels.size() || (d->channels > 0 && key(channels[d->channels - 1]) != d->last_channel))
    d->from.clear(), d->channels = 0;
  for (auto i = d->channels; i < channels.size(); ++i)
    d->from.emplace(channels[i].from, static_cast<int>(i));
  d->channels = channels.size();
  d->last_channel = channels.empty() ? std::string{} : key(channels.back());
  return *d;
}

std::vector<int> graph_spec::channels_from(std::string_view name) const {
  std::vector<int> out;
  {
    std::lock_guard guard{directory_mutex};
    auto [first, end] = indexed().from.equal_range(std::string{name});
    for (auto it = first; it != end; ++it)
      if (channels[static_cast<std::size_t>(it->second)].from == name)
        out.push_back(it->second);
  }
  std::sort(out.begin(), out.end()); // in the file's order, as a scan would find them
  return out;
}

const actor_spec* graph_spec::find_actor(std::string_view name) const noexcept {
  auto i = index_of(name);
  return i < 0 ? nullptr : &actors[static_cast<std::size_t>(i)];
}

int graph_spec::index_of(std::string_view name) const noexcept {
  {
    std::lock_guard guard{directory_mutex};
    const auto& d = indexed();
    if (auto it = d.index.find(std::string{name});
        it != d.index.end() && actors[static_cast<std::size_t>(it->second)].name == name)
      return it->second;
  }
  for (std::size_t i = 0; i < actors.size(); ++i) // renamed in place since it was indexed: a scan is always right
    if (actors[i].name == name)
      return static_cast<int>(i);
  return -1;
}

const actor_spec* graph_spec::channel_target(const actor_spec& from, std::string_view type) const {
  for (int c : channels_from(from.name))
    if (const auto* to = find_actor(channels[static_cast<std::size_t>(c)].to); to && to->type == type)
      return to;
  return nullptr;
}

const actor_spec* graph_spec::served_stage(const actor_spec& helper) const {
  auto s = helper.params.find("stage");
  if (s == helper.params.end() || !s->second.IsScalar())
    return nullptr;
  const auto* a = find_actor(s->second.Scalar());
  return a && a->role.holds_layers ? a : nullptr;
}

source_pos graph_spec::where(std::string_view path) const {
  for (;;) {
    if (auto it = key_positions.find(path); it != key_positions.end())
      return it->second;
    auto cut = path.find_last_of(".[");
    if (cut == std::string_view::npos)
      return source_pos{file.string(), 0, 0, {}};
    path = path.substr(0, cut);
  }
}

std::int64_t graph_spec::tokens_per_step() const noexcept {
  return static_cast<std::int64_t>(data_parallel.replicas) * data.batch * pipeline.microbatches * model.context;
}

int graph_spec::sync_group_size() const noexcept {
  int replicas = std::max(data_parallel.replicas, 1);
  if (!local_update.present)
    return replicas;
  int groups = local_update.replica_groups > 0 ? local_update.replica_groups : replicas;
  return groups <= replicas && replicas % groups == 0 ? replicas / groups : 1;
}

bool graph_spec::skip_runs() const noexcept {
  return skip.present && network.present && pipeline.stages > 0 &&
         network.nodes() == pipeline.stages * std::max(data_parallel.replicas, 1);
}

bool graph_spec::routes_across_replicas() const noexcept {
  return data_parallel.replicas > 1 &&
         (data_parallel.route == "least_loaded" || (local_update.present && local_update.routes_across_replicas));
}

std::string to_yaml(const graph_spec& g) {
  std::string out = fmt::format("# {}, expanded\n", g.file.string());
  const auto& m = g.model;
  out += fmt::format("model: {{family: {}, layers: {}, d_model: {}, heads: {}, context: {}, vocab: {}, precision: {}",
                     m.family, m.layers, m.d_model, m.heads, m.context, m.vocab, to_string(m.precision));
  if (m.family == "llama") { // ffn_hidden 0: Llama's width rule, left unwritten
    out += fmt::format(", kv_heads: {}, rope_theta: {}, tie_embeddings: {}, norm_eps: {}",
                       m.kv_heads > 0 ? m.kv_heads : m.heads, m.rope_theta, m.tie_embeddings, m.norm_eps);
    if (m.ffn_hidden > 0)
      out += fmt::format(", ffn_hidden: {}", m.ffn_hidden);
  }
  out += "}\n";
  const auto& d = g.data;
  out += fmt::format("data: {{{}: {}", d.source_key, scalar(d.corpus));
  for (const auto& [key, value] : d.options) // the source's own settings (nested ones by their dotted path)
    out += fmt::format(", {}: {}", key, scalar(value));
  out += fmt::format(", batch: {}, seed: {}, val_fraction: {}", d.batch, d.seed, d.val_fraction);
  out += d.documents == "none" ? "}" : fmt::format(", documents: {}}}", d.documents);
  out += d.corpus_path.empty() ? "\n" : fmt::format("  # {}\n", d.corpus_path.string());
  const auto& t = g.train;
  out += fmt::format("train: {{steps: {}, lr: {}, weight_decay: {}, warmup: {}, eval_every: {}, "
                     "eval_batches: {}, grad_clip: {}, clip: {}{}}}\n",
                     t.steps, t.lr, t.weight_decay, t.warmup, t.eval_every, t.eval_batches, t.grad_clip, t.clip,
                     t.init.empty() ? std::string{}
                                    : ", init: " + scalar(t.init_path.empty() ? t.init : t.init_path.string()));
  const auto& p = g.pipeline;
  out += fmt::format("pipeline: {{stages: {}, microbatches: {}, schedule: {}, virtual: {}, device: {}", p.stages,
                     p.microbatches, scalar(p.schedule), p.virtual_stages, scalar(p.device));
  if (!p.table.empty())
    out += fmt::format(", table: {}", scalar(p.table));
  if (!p.policy.empty()) {
    std::string options;
    for (const auto& [k, v] : p.policy)
      options += fmt::format("{}{}: {}", options.empty() ? "" : ", ", k, scalar(v));
    out += fmt::format(", policy: {{{}}}", options);
  }
  std::string settings;
  for (const auto& [k, v] : p.routing_options)
    settings += fmt::format(", {}: {}", k, scalar(v));
  if (!p.paths.empty() || !settings.empty()) {
    std::string paths;
    for (const auto& path : p.paths)
      paths += fmt::format("{}[{}]", paths.empty() ? "" : ", ", fmt::join(path, ", "));
    out += fmt::format(", routing: {{policy: {}{}{}}}", scalar(p.routing), settings,
                       paths.empty() ? "" : fmt::format(", paths: [{}]", paths));
  } else if (p.routing != "chain") {
    out += fmt::format(", routing: {}", scalar(p.routing));
  }
  out += "}\n";
  if (g.data_parallel.present)
    out += fmt::format("data_parallel: {{replicas: {}, bucket: {}, zero: {}, overlap: {}}}\n", g.data_parallel.replicas,
                       g.data_parallel.bucket, g.data_parallel.zero, g.data_parallel.overlap);
  out += detail::local_update_yaml(g.local_update);
  if (!g.trace.file.empty())
    out += fmt::format("trace: {{file: {}}}\n", scalar(g.trace.file));
  out += cluster_yaml(g.cluster);
  out += detail::checkpoint_yaml(g.checkpoint);
  if (!g.plugins.empty()) {
    out += "plugins:\n";
    for (const auto& pl : g.plugins)
      out += fmt::format("  - {}\n", scalar(pl.path));
  }
  out += "actors:\n";
  for (const auto& a : g.actors) {
    out += fmt::format("  - {{name: {}, type: {}", scalar(a.name), scalar(a.type));
    if (!a.node.empty())
      out += fmt::format(", node: {}", scalar(a.node));
    else if (g.cluster.present)
      out += fmt::format(", node: {}", g.node_of(a));
    if (!a.layers.empty())
      out += fmt::format(", layers: {}", layers_text(a.layers));
    if (!a.device.empty())
      out += fmt::format(", device: {}", scalar(a.device));
    for (const auto& [k, v] : a.params)
      out += fmt::format(", {}: {}", k, flow(v));
    out += "}";
    if (a.rank >= 0)
      out += fmt::format("  # rank {}", a.rank);
    out += "\n";
  }
  out += g.channels.empty() ? "channels: []\n" : "channels:\n";
  for (const auto& c : g.channels) {
    out += fmt::format("  - {{from: {}, to: {}", scalar(c.from), scalar(c.to));
    if (c.credits > 0)
      out += fmt::format(", credits: {}", c.credits);
    if (c.bandwidth > 0)
      out += fmt::format(", bandwidth: {}MB/s", c.bandwidth / 1e6);
    if (c.latency > 0)
      out += fmt::format(", latency: {}ms", c.latency * 1e3);
    out += "}\n";
  }
  return out;
}

} // namespace troupe
