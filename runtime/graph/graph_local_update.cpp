// The graph file's `local_update:` section (#13): which local-update method
// replaces the every-step all-reduce, each key checked at its position against
// the keys the chosen method registered (local_update_method_info).
#include <algorithm>
#include <map>
#include <set>

#include "runtime/graph/local_update_spec.hpp"

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe {

namespace {

std::function<std::vector<local_update_method_info>()>& methods_source() {
  static std::function<std::vector<local_update_method_info>()> source;
  return source;
}

} // namespace

std::vector<local_update_method_info> local_update_methods() {
  if (const auto& source = methods_source())
    return source();
  return {};
}

void set_local_update_methods(std::function<std::vector<local_update_method_info>()> source) {
  methods_source() = std::move(source);
}

namespace detail {

namespace {

/// The keys of the section itself; every other key is a method's.
const std::vector<std::string> section_keys{"algorithm", "replica_groups"};

/// `periods` of `periods.params`.
std::string_view head_of(std::string_view key) {
  return key.substr(0, key.find('.'));
}

/// The options of `m` whose key is `top` or under it (`periods` -> `periods.params`, ...).
std::vector<const option_spec*> under(const local_update_method_info& m, std::string_view top) {
  std::vector<const option_spec*> out;
  for (const auto& o : m.options)
    if (head_of(o.key) == top)
      out.push_back(&o);
  return out;
}

/// Reads the key `top` of the section `n`, whose value is `v`, with the options
/// `opts` of one method: a value, or a mapping of `top.sub` options.
bool read_key(const YAML::Node& n, const std::string& path, const std::string& top, const YAML::Node& v,
              const std::vector<const option_spec*>& opts, std::map<std::string, std::string>& out, graph_reader& r) {
  if (opts.size() == 1 && opts.front()->key == top)
    return read_option(n, path, top, *opts.front(), out, r);
  auto sub = join_path(path, top);
  std::vector<std::string> keys;
  for (const auto* o : opts)
    keys.emplace_back(std::string_view{o->key}.substr(top.size() + 1));
  if (!r.check_map(v, sub, keys))
    return false;
  bool good = true;
  for (std::size_t i = 0; i < opts.size(); ++i)
    good &= read_option(v, sub, keys[i], *opts[i], out, r);
  return good;
}

/// The methods that take key `top`, by name.
std::vector<std::string> owners_of(const std::vector<local_update_method_info>& methods, std::string_view top) {
  std::vector<std::string> out;
  for (const auto& m : methods)
    if (!under(m, top).empty())
      out.push_back(m.name);
  return out;
}

/// Reports each rule `l` breaks at the key it is about (the section when absent).
void report(const YAML::Node& n, const std::vector<local_update_problem>& problems, graph_reader& r) {
  for (const auto& p : problems) {
    YAML::Node at; // the key the rule is about, else the section (reset: yaml-cpp's `=` writes into the node)
    at.reset(n);
    for (std::string_view rest = p.key; !rest.empty();) {
      auto dot = rest.find('.');
      auto next = child(at, rest.substr(0, dot));
      if (!next)
        break;
      at.reset(next);
      rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    }
    r.error(at, p.key.empty() ? "local_update" : join_path("local_update", p.key), p.message);
  }
}

/// The section's rules beyond the method: replica groups, ZeRO and routes.
void check_groups(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  // Each group keeps its own optimizer state and its replicas' own chains of stages.
  const auto& l = pg.graph.local_update;
  const auto& dp = pg.graph.data_parallel;
  const std::string path = "local_update";
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
  if (dp.route == "least_loaded")
    r.error(n, path,
            "local-update training keeps each replica on its own stages; data_parallel.route: least_loaded would "
            "mix them: use route: own");
}

} // namespace

void parse_local_update(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& l = pg.graph.local_update;
  l.present = true;
  if (!n.IsMap()) {
    r.error(n, "local_update",
            fmt::format("expected a mapping such as {{algorithm: diloco, sync_every: 500}}, got {}", describe(n)));
    return;
  }
  pg.local_update_node.reset(n);
  const std::string path = "local_update";
  if (pg.graph.data.deal !=
      "in_order") // rounds of one microbatch per replica; local-update replicas run their own steps
    r.error(n, path,
            fmt::format("data.deal '{}' deals each round's sequences over the replicas; local-update replicas "
                        "each draw their own (use data.deal: in_order)",
                        pg.graph.data.deal));
  // Any name here: check_local_update says whether it is known, once plugins are loaded.
  if (auto a = child(n, "algorithm"))
    if (auto text = r.as_string(a, "local_update.algorithm")) {
      l.algorithm = *text;
      pg.algorithm_node.reset(a);
    }
  r.get_int(n, path, "replica_groups", l.replica_groups, 1, 1 << 20);
}

void check_local_update(parsed_graph& pg, graph_reader& r) {
  auto& l = pg.graph.local_update;
  const auto& n = pg.local_update_node;
  if (!l.present || !n)
    return;
  const std::string path = "local_update";
  auto methods = local_update_methods();
  auto chosen = std::find_if(methods.begin(), methods.end(), [&](const auto& m) { return m.name == l.algorithm; });
  if (chosen == methods.end()) {
    std::vector<std::string> names;
    for (const auto& m : methods)
      names.push_back(m.name);
    r.error(pg.algorithm_node, "local_update.algorithm",
            fmt::format("unknown algorithm '{}' {}", l.algorithm, choices(l.algorithm, names)));
  }
  // An unknown method's keys are each read as the first method that takes it reads it.
  std::vector<std::string> known = section_keys;
  if (chosen != methods.end())
    for (const auto& o : chosen->options)
      if (auto top = std::string{head_of(o.key)}; std::find(known.begin(), known.end(), top) == known.end())
        known.push_back(top);
  bool good = true;
  std::set<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar()) {
      r.error(it->first, path, fmt::format("expected a key name, got {}", describe(it->first)));
      continue;
    }
    const auto& key = it->first.Scalar();
    if (!seen.insert(key).second) {
      r.error(it->first, join_path(path, key), fmt::format("duplicate key '{}'", key));
      continue;
    }
    if (std::find(section_keys.begin(), section_keys.end(), key) != section_keys.end())
      continue;
    const local_update_method_info* reader = chosen != methods.end() ? &*chosen : nullptr;
    if (!reader)
      for (const auto& m : methods)
        if (!under(m, key).empty()) {
          reader = &m;
          break;
        }
    auto opts = reader ? under(*reader, key) : std::vector<const option_spec*>{};
    if (!opts.empty()) {
      good &= read_key(n, path, key, it->second, opts, l.options, r);
    } else if (auto owners = owners_of(methods, key); !owners.empty()) {
      r.error(it->second, join_path(path, key),
              fmt::format("'{}' is a setting of {}, not of algorithm '{}'", key, join(owners), l.algorithm));
    } else {
      r.error(it->first, join_path(path, key), fmt::format("unknown key '{}' {}", key, choices(key, known)));
    }
  }
  if (chosen == methods.end())
    return;
  settle_local_update(l, chosen->options, chosen->configure);
  if (l.routes_across_replicas && pg.graph.attention.present && pg.graph.data_parallel.replicas > 1) {
    auto route = child(n, "route");
    r.error(route ? route : n, route ? "local_update.route" : "local_update",
            fmt::format("attention servers plan each round over the replicas' own chains; {}'s routes cross "
                        "replicas (use route: chain)",
                        l.algorithm));
  }
  if (!good)
    return; // the rules between values need each value read
  const auto& g = pg.graph;
  if (chosen->problems)
    report(n, chosen->problems(l, {std::max(g.data_parallel.replicas, 1), g.data_parallel.zero}), r);
  check_groups(pg, n, r);
}

std::string local_update_yaml(const local_update_spec& l) {
  if (!l.present)
    return {};
  // The method's options in key order, a nested mapping's keys together: `outer: {lr: 0.7, ...}`.
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& [key, value] : l.options) {
    auto dot = key.find('.');
    auto top = key.substr(0, dot), item = dot == std::string::npos ? value : key.substr(dot + 1) + ": " + value;
    if (dot != std::string::npos && !items.empty() && items.back().first == top)
      items.back().second += ", " + item;
    else
      items.emplace_back(top, item);
  }
  auto out = fmt::format("local_update: {{algorithm: {}", l.algorithm);
  for (const auto& [key, value] : items)
    out += l.options.count(key) ? fmt::format(", {}: {}", key, value) : fmt::format(", {}: {{{}}}", key, value);
  if (l.replica_groups > 0)
    out += fmt::format(", replica_groups: {}", l.replica_groups);
  return out + "}\n";
}

} // namespace detail

} // namespace troupe
