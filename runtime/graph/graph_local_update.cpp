// The graph file's `local_update:` section (#13): which local-update method
// replaces the every-step all-reduce, each key checked at its position.
#include <algorithm>
#include <map>

#include "runtime/graph/local_update_spec.hpp"

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe {

namespace {

const std::vector<std::string>& builtin_algorithms() {
  static const std::vector<std::string> names{"diloco", "streaming_diloco", "noloco", "desloc", "sparseloco"};
  return names;
}

std::function<std::vector<std::string>()>& algorithms_source() {
  static std::function<std::vector<std::string>()> source;
  return source;
}

} // namespace

std::vector<std::string> local_update_algorithms() {
  if (const auto& source = algorithms_source())
    return source();
  return builtin_algorithms();
}

void set_local_update_algorithms(std::function<std::vector<std::string>()> source) {
  algorithms_source() = std::move(source);
}

int local_update_default_sync_every(const std::string& algorithm) {
  if (algorithm == "streaming_diloco")
    return 100;  // Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): H = 100
  if (algorithm == "noloco" || algorithm == "sparseloco")
    return 50;   // NoLoCo paper (arXiv 2506.10911): H = 50; SparseLoCo: the example
  if (algorithm == "desloc")
    return 16;   // DES-LOC: the parameter period
  return 500;    // DiLoCo paper (arXiv 2311.08105): H = 500
}

std::vector<local_update_problem> local_update_problems(const local_update_spec& l, int replicas) {
  std::vector<local_update_problem> out;
  auto add = [&](std::string key, std::string message) { out.push_back({std::move(key), std::move(message)}); };
  if (!(l.outer.lr > 0))
    add("outer.lr", fmt::format("must be above 0, got {}", l.outer.lr));
  if (!(l.outer.momentum >= 0 && l.outer.momentum < 1))
    add("outer.momentum", fmt::format("must be from 0 to below 1, got {}", l.outer.momentum));
  if (l.sync_every < 1)
    add("sync_every", fmt::format("must be at least 1, got {}", l.sync_every));
  if (l.algorithm == "streaming_diloco" && l.sync_every >= 1) {
    // torchft/local_sgd.py, DiLoCo.__init__: the same three refusals, in this order.
    if (l.fragments < 1 || l.sync_every < l.fragments)
      add("fragments", fmt::format("{} fragments need sync_every of at least {} (one fragment is exchanged at a "
                                   "time), got sync_every {}",
                                   l.fragments, std::max(l.fragments, 1), l.sync_every));
    else if (l.sync_every % l.fragments != 0)
      add("sync_every", fmt::format("sync_every ({}) must divide by fragments ({}): one fragment every H/P steps",
                                    l.sync_every, l.fragments));
    else if (int cadence = l.sync_every / l.fragments; l.delay < 0 || l.delay >= cadence)
      add("delay", fmt::format("delay ({}) must be from 0 to below sync_every / fragments ({}): a fragment's "
                               "exchange is applied before the next one begins",
                               l.delay, cadence));
    if (!(l.alpha >= 0 && l.alpha <= 1))
      add("alpha", fmt::format("must be from 0 to 1 (0: the new global, 1: the local parameters), got {}", l.alpha));
  }
  if (l.algorithm == "noloco" && (l.group < 2 || l.group > replicas || replicas % l.group != 0))
    add("group", fmt::format("groups of {} must partition the {} replica{} (data_parallel.replicas), at least 2 "
                             "to a group",
                             l.group, replicas, replicas == 1 ? "" : "s"));
  if (l.algorithm == "sparseloco" && !(l.density > 0 && l.density <= 1))
    add("density", fmt::format("must be above 0 and at most 1 (the share of each chunk sent), got {}", l.density));
  return out;
}

namespace detail {

namespace {

const std::vector<std::string> local_update_keys{"algorithm", "sync_every", "outer", "fragments", "delay", "alpha",
                                                 "quantize",  "group",      "route", "periods",   "density",
                                                 "replica_groups"};
const std::vector<std::string> outer_keys{"lr", "momentum", "nesterov"};
const std::vector<std::string> period_keys{"params", "momentum", "variance"};
const std::vector<std::string> quantize_kinds{"none", "bf16", "int8", "fp8"};
const std::vector<std::string> route_kinds{"random", "chain"};
constexpr int max_period = 1'000'000'000;

/// The algorithms each algorithm-specific key belongs to.
const std::map<std::string, std::vector<std::string>>& key_owners() {
  static const std::map<std::string, std::vector<std::string>> owners{
    {"fragments", {"streaming_diloco"}}, {"delay", {"streaming_diloco"}}, {"alpha", {"streaming_diloco"}},
    {"group", {"noloco"}},               {"route", {"noloco"}},           {"periods", {"desloc"}},
    {"density", {"sparseloco"}},         {"sync_every", {"diloco", "streaming_diloco", "noloco", "sparseloco"}},
    {"outer", {"diloco", "streaming_diloco", "noloco", "sparseloco"}},
    {"quantize", {"diloco", "streaming_diloco", "noloco", "desloc"}}};
  return owners;
}

/// Reads a name from `known` at `map[key]` when present.
void get_choice(const YAML::Node& map, const std::string& path, std::string_view key,
                const std::vector<std::string>& known, std::string& out, graph_reader& r) {
  auto n = child(map, key);
  if (!n)
    return;
  auto kpath = join_path(path, key);
  auto text = r.as_string(n, kpath);
  if (text && std::find(known.begin(), known.end(), *text) == known.end())
    r.error(n, kpath, fmt::format("unknown {} '{}' {}", key, *text, choices(*text, known)));
  else if (text)
    out = *text;
}

void parse_outer(const YAML::Node& n, outer_optimizer_spec& o, graph_reader& r) {
  if (!r.check_map(n, "local_update.outer", outer_keys))
    return;
  const std::string path = "local_update.outer";
  r.get_double(n, path, "lr", o.lr, -1e9, 1e9);  // local_update_problems says what is allowed
  r.get_double(n, path, "momentum", o.momentum, -1e9, 1e9);
  r.get_bool(n, path, "nesterov", o.nesterov);
}

} // namespace

void parse_local_update(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& l = pg.graph.local_update;
  l.present = true;
  if (!r.check_map(n, "local_update", local_update_keys))
    return;
  const std::string path = "local_update";
  if (pg.graph.data.deal != "in_order") // rounds of one microbatch per replica; local-update replicas run their own steps
    r.error(n, path, fmt::format("data.deal '{}' deals each round's sequences over the replicas; local-update replicas "
                                 "each draw their own (use data.deal: in_order)",
                                 pg.graph.data.deal));
  // Any name here: check_names says whether it is known, once plugins are loaded.
  if (auto a = child(n, "algorithm"))
    if (auto text = r.as_string(a, "local_update.algorithm")) {
      l.algorithm = *text;
      pg.algorithm_node.reset(a);
    }
  const auto& builtin = builtin_algorithms();
  bool plugin = std::find(builtin.begin(), builtin.end(), l.algorithm) == builtin.end();
  for (const auto& [key, owners] : key_owners())
    if (auto k = child(n, key); k && std::find(owners.begin(), owners.end(), l.algorithm) == owners.end() &&
                                !(plugin && (key == "sync_every" || key == "quantize" || key == "outer")))
      r.error(k, join_path(path, key),
              fmt::format("'{}' is a setting of {}, not of algorithm '{}'", key, join(owners), l.algorithm));
  l.sync_every = local_update_default_sync_every(l.algorithm);
  if (l.algorithm == "sparseloco")
    l.outer = sparseloco_outer_defaults();
  else if (l.algorithm == "noloco")
    l.outer = noloco_outer_defaults();
  bool good = r.get_int(n, path, "sync_every", l.sync_every, 1, max_period);
  if (auto o = child(n, "outer"))
    parse_outer(o, l.outer, r);
  good &= r.get_int(n, path, "fragments", l.fragments, 1, 1 << 20);
  good &= r.get_int(n, path, "delay", l.delay, 0, max_period);
  good &= r.get_double(n, path, "alpha", l.alpha, -1e9, 1e9);
  get_choice(n, path, "quantize", quantize_kinds, l.quantize, r);
  get_choice(n, path, "route", route_kinds, l.route, r);
  good &= r.get_int(n, path, "group", l.group, 1, 1 << 20);
  if (auto p = child(n, "periods"); p && r.check_map(p, "local_update.periods", period_keys)) {
    if (r.get_int(p, "local_update.periods", "params", l.period_params, 1, max_period)) {
      l.period_momentum = 3 * l.period_params;  // DES-LOC (arXiv 2505.22549): K_u = 3·K_x, K_v = 6·K_x
      l.period_variance = 6 * l.period_params;
    }
    r.get_int(p, "local_update.periods", "momentum", l.period_momentum, 1, max_period);
    r.get_int(p, "local_update.periods", "variance", l.period_variance, 1, max_period);
  }
  good &= r.get_double(n, path, "density", l.density, -1e9, 1e9);
  good &= r.get_int(n, path, "replica_groups", l.replica_groups, 1, 1 << 20);
  if (!good)
    return;  // the rules between values need each value read
  for (const auto& p : local_update_problems(l, std::max(pg.graph.data_parallel.replicas, 1))) {
    YAML::Node at;  // the key the rule is about, else the section (reset: yaml-cpp's `=` writes into the node)
    at.reset(n);
    for (std::string_view rest = p.key; !rest.empty();) {
      auto dot = rest.find('.');
      auto next = child(at, rest.substr(0, dot));
      if (!next)
        break;
      at.reset(next);
      rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    }
    r.error(at, join_path(path, p.key), p.message);
  }
  // Each group keeps its own optimizer state and its replicas' own chains of stages.
  const auto& dp = pg.graph.data_parallel;
  int replicas = std::max(dp.replicas, 1), groups = l.replica_groups > 0 ? l.replica_groups : replicas;
  auto groups_at = child(n, "replica_groups") ? child(n, "replica_groups") : n;
  if (groups > replicas || replicas % groups != 0)
    r.error(groups_at, join_path(path, "replica_groups"),
            fmt::format("{} groups do not cut data_parallel.replicas ({}) into equal groups", groups, replicas));
  else if (dp.zero > 0 && groups == replicas)
    r.error(n, path,
            fmt::format("each replica is its own group here, and ZeRO shards a group's optimizer state over its "
                        "replicas (data_parallel.zero: {}): set local_update.replica_groups below "
                        "data_parallel.replicas ({}), or zero: 0",
                        dp.zero, replicas));
  else if (dp.zero > 0 && l.algorithm == "desloc")
    r.error(groups_at, join_path(path, "replica_groups"),
            "DES-LOC averages Adam's moments, which ZeRO's shards hold in slices: use data_parallel.zero: 0");
  if (groups < replicas && l.algorithm == "noloco")
    r.error(groups_at, join_path(path, "replica_groups"),
            "NoLoCo's groups and random routes are its own (local_update.group): leave replica_groups out");
  if (l.algorithm == "noloco" && l.route == "random" && pg.graph.pipeline.virtual_stages > 1)
    r.error(n, path,
            fmt::format("NoLoCo's random routes take stages of one model chunk each (pipeline.virtual_stages is "
                        "{}): use route: chain",
                        pg.graph.pipeline.virtual_stages));
  if (dp.route == "least_loaded")
    r.error(n, path,
            "local-update training keeps each replica on its own stages; data_parallel.route: least_loaded would "
            "mix them: use route: own");
}

std::string local_update_yaml(const local_update_spec& l) {
  if (!l.present)
    return {};
  auto out = fmt::format("local_update: {{algorithm: {}", l.algorithm);
  if (l.algorithm == "desloc")
    out += fmt::format(", periods: {{params: {}, momentum: {}, variance: {}}}", l.period_params, l.period_momentum,
                       l.period_variance);
  else
    out += fmt::format(", sync_every: {}", l.sync_every);
  out += fmt::format(", outer: {{lr: {}, momentum: {}, nesterov: {}}}", l.outer.lr, l.outer.momentum, l.outer.nesterov);
  if (l.algorithm == "streaming_diloco")
    out += fmt::format(", fragments: {}, delay: {}, alpha: {}", l.fragments, l.delay, l.alpha);
  if (l.algorithm == "noloco")
    out += fmt::format(", group: {}, route: {}", l.group, l.route);
  if (l.algorithm == "sparseloco")
    out += fmt::format(", density: {}", l.density);
  else
    out += fmt::format(", quantize: {}", l.quantize);
  if (l.replica_groups > 0)
    out += fmt::format(", replica_groups: {}", l.replica_groups);
  return out + "}\n";
}

} // namespace detail

} // namespace troupe
