// Reading a graph document's sections into typed specs: model, data, train,
// pipeline, trace, plugins and the explicit actors and channels.
#include "runtime/graph/graph_parse.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/tensor/device.hpp"
#include "runtime/graph/limits.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe::detail {

namespace {

using namespace troupe::limits;

const std::vector<std::string> model_keys{"family",     "layers",     "d_model",        "heads",
                                          "context",    "vocab",      "precision",      "kv_heads",
                                          "ffn_hidden", "rope_theta", "tie_embeddings", "norm_eps"};
/// Keys of `model:` that only the llama family reads.
const std::vector<std::string> llama_keys{"kv_heads", "ffn_hidden", "rope_theta", "tie_embeddings", "norm_eps"};

/// `family` and the llama family's own keys; a llama key given to gpt2 is an error at that key.
void parse_family(const YAML::Node& n, model_spec& m, graph_reader& r) {
  if (auto f = child(n, "family");
      f && r.get_string(n, "model", "family", m.family) && m.family != "gpt2" && m.family != "llama") {
    r.error(f, "model.family", fmt::format("unknown family '{}' {}", m.family, choices(m.family, {"gpt2", "llama"})));
    return;
  }
  if (m.family != "llama") {
    for (const auto& k : llama_keys)
      if (auto v = child(n, k))
        r.error(v, "model." + k,
                fmt::format("{} is a llama key; the {} family has none (write family: llama)", k, m.family));
    return;
  }
  r.get_int(n, "model", "kv_heads", m.kv_heads, 1, max_heads);
  r.get_int(n, "model", "ffn_hidden", m.ffn_hidden, 1, 4 * max_width);
  r.get_double(n, "model", "rope_theta", m.rope_theta, 1.0, 1e9);
  r.get_double(n, "model", "norm_eps", m.norm_eps, 1e-12, 1.0);
  r.get_bool(n, "model", "tie_embeddings", m.tie_embeddings);
  if (m.kv_heads > 0 && m.heads > 0 && m.heads % m.kv_heads != 0)
    r.error(n["kv_heads"], "model.kv_heads", fmt::format("kv_heads {} does not divide heads {}", m.kv_heads, m.heads));
  if (m.d_model > 0 && m.heads > 0 && m.d_model % m.heads == 0 && (m.d_model / m.heads) % 2 != 0)
    r.error(n["heads"], "model.heads",
            fmt::format("the head width d_model/heads = {} must be even for rotary positions", m.d_model / m.heads));
}
const std::vector<std::string> train_keys{"steps",        "lr",        "weight_decay", "warmup", "eval_every",
                                          "eval_batches", "grad_clip", "clip",         "init"};
const std::vector<std::string> clip_modes{"sync", "post_validate"};
const std::vector<std::string> pipeline_keys{"stages", "microbatches", "schedule", "virtual", "table",
                                             "policy", "device",       "routing",  "wire"};
const std::vector<std::string> trace_keys{"file", "hang_after"};
const std::vector<std::string> channel_keys{"from", "to", "credits", "bandwidth", "latency", "network"};

void parse_model(const YAML::Node& n, model_spec& m, graph_reader& r) {
  if (!r.check_map(n, "model", model_keys))
    return;
  for (const char* k : {"layers", "d_model", "heads", "context"})
    r.require(n, "model", k);
  r.get_int(n, "model", "layers", m.layers, 1, max_layers);
  r.get_int(n, "model", "d_model", m.d_model, 1, max_width);
  r.get_int(n, "model", "heads", m.heads, 1, max_heads);
  r.get_int(n, "model", "context", m.context, 1, max_context);
  r.get_int(n, "model", "vocab", m.vocab, 2, max_vocab);
  if (auto p = n["precision"]) {
    auto s = r.as_string(p, "model.precision");
    if (s && *s == "f32")
      m.precision = dtype::f32;
    else if (s && *s == "bf16")
      m.precision = dtype::bf16;
    else if (s)
      r.error(p, "model.precision", fmt::format("unknown precision '{}' {}", *s, choices(*s, {"f32", "bf16"})));
  }
  parse_family(n, m, r);
  if (m.d_model > 0 && m.heads > 0 && m.d_model % m.heads != 0) {
    int divisor = m.heads; // the largest head count not above `heads` that divides d_model
    while (divisor > 1 && m.d_model % divisor != 0)
      --divisor;
    r.error(n["d_model"], "model.d_model",
            fmt::format("d_model {} is not divisible by heads {} (try d_model {} or heads {})", m.d_model, m.heads,
                        (m.d_model / m.heads + 1) * m.heads, divisor));
  }
}

void parse_train(const YAML::Node& n, train_spec& t, graph_reader& r) {
  if (!r.check_map(n, "train", train_keys))
    return;
  r.require(n, "train", "steps");
  r.get_int(n, "train", "steps", t.steps, 1, max_steps);
  r.get_double(n, "train", "lr", t.lr, 0.0, 10.0);
  if (auto lr = n["lr"]; lr && t.lr == 0.0)
    r.error(lr, "train.lr", "must be greater than 0, got 0");
  r.get_double(n, "train", "weight_decay", t.weight_decay, 0.0, 10.0);
  r.get_int(n, "train", "warmup", t.warmup, 0, max_steps);
  r.get_int(n, "train", "eval_every", t.eval_every, 0, max_steps);
  r.get_int(n, "train", "eval_batches", t.eval_batches, 1, 1 << 20);
  r.get_double(n, "train", "grad_clip", t.grad_clip, 0.0, 1e6);
  if (auto c = child(n, "clip"); c && r.get_string(n, "train", "clip", t.clip)) {
    t.clip_pos = r.pos(c, "train.clip");
    if (std::find(clip_modes.begin(), clip_modes.end(), t.clip) == clip_modes.end())
      r.error(c, "train.clip", fmt::format("unknown clip '{}' {}", t.clip, choices(t.clip, clip_modes)));
    else if (t.clip == "post_validate" && t.grad_clip <= 0)
      r.error(c, "train.clip",
              fmt::format("post_validate checks the global gradient norm against train.grad_clip after the "
                          "optimizer step, and grad_clip is {} (off): set grad_clip above 0, or clip: sync",
                          t.grad_clip));
  }
  if (auto init = child(n, "init"); init && r.get_string(n, "train", "init", t.init))
    t.init_pos = r.pos(init, "train.init"); // as_string refuses an empty name
}

/// Reads `map.device` into `out` when present; reports a string that names no device.
void parse_device_key(const YAML::Node& map, const std::string& path, std::string& out, graph_reader& r) {
  auto n = child(map, "device");
  if (!n || !r.get_string(map, path, "device", out) || parse_device(out))
    return;
  const std::vector<std::string> known{"cpu", "cuda", "cuda:N"};
  auto hint = out.starts_with("gpu") ? fmt::format("(did you mean 'cuda'? known: {})", join(known)) // not 'cpu'
                                     : choices(out, known);
  r.error(n, join_path(path, "device"),
          fmt::format("unknown device '{}' {}; N is a device index (cuda:0, cuda:1, ...)", out, hint));
}

// `routing: NAME` or `routing: {policy: NAME, paths: [[a, b, ...], ...]}`.
void parse_routing(parsed_graph& pg, const YAML::Node& pipeline, graph_reader& r) {
  auto& p = pg.graph.pipeline;
  p.routing_pos = r.pos(pipeline, "pipeline");
  auto n = child(pipeline, "routing");
  if (!n)
    return;
  p.routing_pos = r.pos(n, "pipeline.routing");
  if (n.IsScalar()) {
    r.get_string(pipeline, "pipeline", "routing", p.routing);
    return;
  }
  if (!n.IsMap()) {
    r.error(n, "pipeline.routing",
            fmt::format("expected a routing policy's name or {{policy: NAME, ...its settings}}, got {}", describe(n)));
    return;
  }
  pg.routing_node.reset(n); // keys beside policy and paths are the policy's: checked once plugins are loaded
  r.get_string(n, "pipeline.routing", "policy", p.routing);
  auto paths = child(n, "paths");
  if (!paths)
    return;
  if (!paths.IsSequence() || paths.size() == 0) {
    r.error(paths, "pipeline.routing.paths",
            fmt::format("expected a list of paths (each a list of stage names), got {}", describe(paths)));
    return;
  }
  for (std::size_t i = 0; i < paths.size(); ++i) {
    auto path = index_path("pipeline.routing.paths", i);
    if (!paths[i].IsSequence() || paths[i].size() == 0) {
      r.error(paths[i], path,
              fmt::format("expected a list of stage names such as [s0, s2, s3], got {}", describe(paths[i])));
      continue;
    }
    std::vector<std::string> names;
    for (std::size_t k = 0; k < paths[i].size(); ++k)
      if (auto s = r.as_string(paths[i][k], index_path(path, k)))
        names.push_back(*s);
    p.paths.push_back(std::move(names));
  }
}

void parse_pipeline(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& p = pg.graph.pipeline;
  p.present = true;
  pg.pipeline_node.reset(n);
  if (!r.check_map(n, "pipeline", pipeline_keys))
    return;
  r.get_int(n, "pipeline", "stages", p.stages, 1, max_stages);
  r.get_int(n, "pipeline", "microbatches", p.microbatches, 1, max_microbatches);
  r.get_string(n, "pipeline", "schedule", p.schedule);
  pg.schedule_node.reset(child(n, "schedule"));
  r.get_int(n, "pipeline", "virtual", p.virtual_stages, 1, max_virtual);
  r.get_string(n, "pipeline", "table", p.table);
  pg.table_node.reset(child(n, "table"));
  pg.policy_node.reset(child(n, "policy"));
  if (pg.policy_node)
    parse_policy_options(pg.policy_node, "pipeline.policy", p.policy, r);
  parse_device_key(n, "pipeline", p.device, r);
  if (auto w = child(n, "wire");
      w && r.get_string(n, "pipeline", "wire", p.wire) && p.wire != "f32" && p.wire != "bf16")
    r.error(w, "pipeline.wire", fmt::format("expected f32 or bf16, got '{}'", p.wire));
  parse_routing(pg, n, r);
}

void parse_plugins(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  if (!n.IsSequence()) {
    r.error(n, "plugins", fmt::format("expected a list of shared-library paths, got {}", describe(n)));
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    auto path = index_path("plugins", i);
    if (auto s = r.as_string(n[i], path)) {
      plugin_spec p{*s, {}, r.pos(n[i], path)};
      p.resolved = pg.resolve(*s);
      pg.graph.plugins.push_back(std::move(p));
      pg.plugin_nodes.push_back(n[i]);
    }
  }
}

// `[a, b]` or `[[a, b], [c, d]]`.
bool parse_layers(const YAML::Node& n, const std::string& path, std::vector<layer_range>& out, graph_reader& r) {
  auto range = [&](const YAML::Node& x, const std::string& p) {
    if (!x.IsSequence() || x.size() != 2) {
      r.error(x, p, fmt::format("expected a layer range [first, end), got {}", describe(x)));
      return false;
    }
    auto a = r.as_int(x[0], p, 0, max_layers);
    auto b = r.as_int(x[1], p, 0, max_layers);
    if (!a || !b)
      return false;
    if (*a >= *b) {
      r.error(x, p, fmt::format("empty layer range [{}, {}): the end must be greater than the first layer", *a, *b));
      return false;
    }
    out.push_back({static_cast<int>(*a), static_cast<int>(*b)});
    return true;
  };
  if (n.IsSequence() && n.size() > 0 && n[0].IsSequence()) {
    bool ok = true;
    for (std::size_t i = 0; i < n.size(); ++i)
      ok = range(n[i], index_path(path, i)) && ok;
    return ok;
  }
  return range(n, path);
}

void parse_actors(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  pg.has_actors = true;
  if (!n.IsSequence()) {
    r.error(n, "actors", fmt::format("expected a list of actors ({{name, type, ...}}), got {}", describe(n)));
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& a = n[i];
    parsed_actor pa;
    pa.path = index_path("actors", i);
    pa.spec.pos = r.pos(a, pa.path);
    pa.node.reset(a);
    if (!a.IsMap()) {
      r.error(a, pa.path, fmt::format("expected an actor mapping {{name, type, ...}}, got {}", describe(a)));
      continue;
    }
    // Key names are checked against the type's keys once the vocabulary is known.
    if (r.require(a, pa.path, "name"))
      if (auto s = r.as_string(a["name"], join_path(pa.path, "name")))
        pa.spec.name = *s;
    pa.name_node.reset(child(a, "name"));
    pa.type_node.reset(child(a, "type"));
    if (pa.type_node)
      if (auto s = r.as_string(pa.type_node, join_path(pa.path, "type"))) {
        pa.spec.type = *s;
        pa.has_type = true;
      }
    r.get_string(a, pa.path, "node", pa.spec.node);
    pa.layers_node.reset(child(a, "layers"));
    if (pa.layers_node)
      parse_layers(pa.layers_node, join_path(pa.path, "layers"), pa.spec.layers, r);
    pa.device_node.reset(child(a, "device"));
    parse_device_key(a, pa.path, pa.spec.device, r);
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!it->first.IsScalar())
        continue;
      const auto& k = it->first.Scalar();
      if (k != "name" && k != "type" && k != "node" && k != "layers" && k != "device")
        pa.spec.params[k] = it->second;
    }
    pg.actors.push_back(std::move(pa));
  }
}

void parse_channels(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  if (!n.IsSequence()) {
    r.error(n, "channels", fmt::format("expected a list of channels ({{from, to}}), got {}", describe(n)));
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    const YAML::Node& c = n[i];
    parsed_channel pc;
    pc.path = index_path("channels", i);
    pc.spec.pos = r.pos(c, pc.path);
    if (!r.check_map(c, pc.path, channel_keys))
      continue;
    bool ok = r.require(c, pc.path, "from");
    ok = r.require(c, pc.path, "to") && ok;
    ok = r.get_string(c, pc.path, "from", pc.spec.from) && ok;
    ok = r.get_string(c, pc.path, "to", pc.spec.to) && ok;
    r.get_int(c, pc.path, "credits", pc.spec.credits, 0, 1 << 20);
    parse_link(c, pc.path, pc.spec, r);
    if (auto nodes = child(c, "network"))
      parse_channel_network(pg, c, nodes, pc.path, pc.spec, r);
    pc.from_node.reset(child(c, "from"));
    pc.to_node.reset(child(c, "to"));
    if (ok)
      pg.channels.push_back(std::move(pc));
  }
}

/// Records where every key under the mapping `n` (at `path`) was written, up
/// to `budget` keys (aliases can make a short file describe an exponentially large value).
void record_key_positions(const YAML::Node& n, const std::string& path, graph_spec& g, const graph_reader& r,
                          int& budget) {
  if (!n.IsMap())
    return;
  for (auto it = n.begin(); it != n.end() && budget > 0; ++it, --budget) {
    if (!it->first.IsScalar())
      continue;
    auto key = join_path(path, it->first.Scalar());
    g.key_positions.emplace(key, r.pos(it->second, key));
    record_key_positions(it->second, key, g, r, budget);
  }
}

} // namespace

const std::vector<std::string>& section_names() {
  static const std::vector<std::string> names{
    "model",  "data",     "train", "pipeline", "data_parallel", "trace",   "checkpoint", "cluster",  "plugins",
    "actors", "channels", "sim",   "devices",  "local_update",  "network", "skip",       "attention"};
  return names;
}

void parse_sections(parsed_graph& pg, graph_reader& r) {
  const YAML::Node& root = pg.root;
  r.check_map(root, "", section_names());
  for (const char* s : {"model", "data", "train"})
    if (!root[s])
      r.error(root, "", fmt::format("missing required section '{}'", s));
  if (auto n = root["model"])
    parse_model(n, pg.graph.model, r);
  if (auto n = root["data"])
    parse_data(pg, n, r);
  if (auto n = root["train"])
    parse_train(n, pg.graph.train, r);
  if (auto n = root["pipeline"])
    parse_pipeline(pg, n, r);
  if (auto n = root["data_parallel"])
    parse_data_parallel(pg, n, r);
  if (auto n = root["local_update"])
    parse_local_update(pg, n, r);
  if (auto n = root["trace"]; n && r.check_map(n, "trace", trace_keys)) {
    if (r.get_string(n, "trace", "file", pg.graph.trace.file) && !pg.graph.trace.file.empty())
      pg.graph.trace.file_path = pg.resolve(pg.graph.trace.file);
    if (auto h = child(n, "hang_after"))
      read_quantity(h, "trace.hang_after", pg.graph.trace.hang_after_s, net::parse_duration, r);
  }
  if (auto n = root["cluster"])
    parse_cluster(pg, n, r);
  if (auto n = root["checkpoint"])
    parse_checkpoint(pg, n, r);
  if (root["sim"] || root["devices"])
    parse_sim(pg, child(root, "sim"), child(root, "devices"), r);
  if (auto n = root["network"])
    parse_network(pg, n, r);
  if (auto n = root["skip"])
    parse_skip(pg, n, r);
  if (auto n = root["attention"])
    parse_attention(pg, n, r);
  if (auto n = root["plugins"])
    parse_plugins(pg, n, r);
  if (auto n = root["actors"])
    parse_actors(pg, n, r);
  if (auto n = root["channels"])
    parse_channels(pg, n, r);
  int budget = 100'000;
  record_key_positions(root, "", pg.graph, r, budget);
}

} // namespace troupe::detail
