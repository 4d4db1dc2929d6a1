// A schedule's options in a graph file: `pipeline: {policy: {max_in_flight: 3}}`
// and a stage's own `policy:`, checked against the keys the schedule declares.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

void parse_policy_options(const YAML::Node& n, const std::string& path, std::map<std::string, std::string>& out,
                          graph_reader& r) {
  if (!n.IsMap()) {
    r.error(n, path, fmt::format("expected a mapping of the schedule's options such as {{max_in_flight: 3}}, got {}",
                                 describe(n)));
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
              known.empty() ? fmt::format("unknown option '{}': schedule '{}' takes no options", key, schedule)
                            : fmt::format("unknown option '{}' for schedule '{}' {}", key, schedule,
                                          choices(key, known)));
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
    return;  // reported as an unknown schedule
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

} // namespace troupe::detail
