// A schedule's options in a graph file: `pipeline: {policy: {max_in_flight: 3}}`
// and a stage's own `policy:`, checked against the keys the schedule declares.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

void parse_policy_options(const YAML::Node& n, const std::string& path, std::map<std::string, std::string>& out,
                          graph_reader& r) {
  if (!n.IsMap()) {
    r.error(
      n, path,
      fmt::format("expected a mapping of the schedule's options such as {{max_in_flight: 3}}, got {}", describe(n)));
    return;
  }
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar())
      continue;
    const auto& key = it->first.Scalar();
    if (!it->second.IsScalar()) {
      r.error(it->second, join_path(path, key), fmt::format("expected a single value, got {}", describe(it->second)));
      continue;
    }
    out[key] = it->second.Scalar();
  }
}

bool read_option(const YAML::Node& map, const std::string& path, std::string_view key, const option_spec& o,
                 std::map<std::string, std::string>& out, graph_reader& r) {
  auto n = child(map, key);
  if (!n)
    return true;
  auto kpath = join_path(path, key);
  switch (o.type) {
  case option_spec::kind::integer: {
    std::int64_t v = 0;
    if (!r.get_int(map, path, key, v, static_cast<std::int64_t>(o.low), static_cast<std::int64_t>(o.high)))
      return false;
    out[o.key] = std::to_string(v);
    return true;
  }
  case option_spec::kind::number: {
    double v = 0;
    if (!r.get_double(map, path, key, v, o.low, o.high))
      return false;
    out[o.key] = fmt::format("{}", v);
    return true;
  }
  case option_spec::kind::boolean: {
    bool v = false;
    if (!r.get_bool(map, path, key, v))
      return false;
    out[o.key] = v ? "true" : "false";
    return true;
  }
  case option_spec::kind::choice:
    if (auto text = r.as_string(n, kpath)) {
      if (std::find(o.choices.begin(), o.choices.end(), *text) == o.choices.end())
        r.error(n, kpath, fmt::format("unknown {} '{}' {}", key, *text, choices(*text, o.choices)));
      else
        out[o.key] = *text;
    }
    return true; // a bad name leaves the default: the rules between values still hold
  case option_spec::kind::text:
    if (auto text = r.as_string(n, kpath)) {
      out[o.key] = *text;
      return true;
    }
    return false;
  }
  return true;
}

namespace {

// Reports unknown keys and unacceptable values of `options` (read from the mapping `n` at `path`).
void check_options(const YAML::Node& n, const std::string& path, const std::string& schedule,
                   const graph_vocabulary& vocab, graph_reader& r) {
  auto known_it = vocab.schedule_options.find(schedule);
  const std::vector<std::string> none;
  const auto& known = known_it == vocab.schedule_options.end() ? none : known_it->second;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar() || !it->second.IsScalar())
      continue;
    const auto& key = it->first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      r.error(it->first, join_path(path, key),
              known.empty()
                ? fmt::format("unknown option '{}': schedule '{}' takes no options", key, schedule)
                : fmt::format("unknown option '{}' for schedule '{}' {}", key, schedule, choices(key, known)));
      continue;
    }
    if (vocab.check_schedule_option)
      if (auto expected = vocab.check_schedule_option(schedule, key, it->second.Scalar()))
        r.error(it->second, join_path(path, key),
                fmt::format("expected {} for schedule '{}', got '{}'", *expected, schedule, it->second.Scalar()));
  }
}

} // namespace

void check_policy_options(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r) {
  const auto& schedule = pg.graph.pipeline.schedule;
  if (std::find(vocab.schedules.begin(), vocab.schedules.end(), schedule) == vocab.schedules.end())
    return; // reported as an unknown schedule
  if (pg.policy_node && pg.policy_node.IsMap())
    check_options(pg.policy_node, "pipeline.policy", schedule, vocab, r);
  for (const auto& pa : pg.actors) {
    auto n = child(pa.node, "policy");
    if (!n)
      continue;
    auto path = join_path(pa.path, "policy");
    std::map<std::string, std::string> ignored;
    parse_policy_options(n, path, ignored, r);
    if (n.IsMap())
      check_options(n, path, schedule, vocab, r);
  }
}

void check_routing_options(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r) {
  auto& p = pg.graph.pipeline;
  const std::string path = "pipeline.routing";
  auto known = vocab.routing_options.find(p.routing);
  if (known == vocab.routing_options.end()) { // an unknown policy is reported by the router's check
    if (pg.routing_node)
      r.check_map(pg.routing_node, path, {"policy", "paths"});
    return;
  }
  std::vector<std::string> keys{"policy", "paths"};
  for (const auto& o : known->second)
    keys.push_back(o.key);
  for (auto it = pg.routing_node.begin(); pg.routing_node && it != pg.routing_node.end(); ++it) {
    const auto& key = it->first.Scalar();
    if (key == "policy" || key == "paths")
      continue;
    auto o = std::find_if(known->second.begin(), known->second.end(), [&](const auto& x) { return x.key == key; });
    if (o == known->second.end())
      r.error(it->first, join_path(path, key), fmt::format("unknown key '{}' {}", key, choices(key, keys)));
    else
      read_option(pg.routing_node, path, key, *o, p.routing_options, r);
  }
  for (const auto& o : known->second)
    if (!o.fallback.empty())
      p.routing_options.emplace(o.key, o.fallback); // keeps what was written
}

} // namespace troupe::detail
