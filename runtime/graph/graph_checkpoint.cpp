// The graph file's `checkpoint:` section: where a run saves its state, how
// often, and how many complete checkpoints it keeps.
#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

namespace {

const std::vector<std::string> checkpoint_keys{"dir", "every", "keep"};

} // namespace

void parse_checkpoint(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& c = pg.graph.checkpoint;
  c.present = true;
  if (!r.check_map(n, "checkpoint", checkpoint_keys))
    return;
  r.require(n, "checkpoint", "dir");
  r.get_int(n, "checkpoint", "every", c.every, 0, 1'000'000'000'000);
  r.get_int(n, "checkpoint", "keep", c.keep, 1, 1'000'000);
  if (!r.get_string(n, "checkpoint", "dir", c.dir) || c.dir.empty())
    return;
  c.dir_path = pg.resolve(c.dir);
  std::error_code ec;
  if (std::filesystem::exists(c.dir_path, ec) && !std::filesystem::is_directory(c.dir_path, ec))
    r.error(n["dir"], "checkpoint.dir",
            fmt::format("'{}' is a file, not a folder (a path is relative to the graph file's folder)", c.dir));
}

std::string checkpoint_yaml(const checkpoint_spec& c) {
  if (!c.present)
    return {};
  YAML::Emitter dir;
  dir << c.dir;
  return fmt::format("checkpoint: {{dir: {}, every: {}, keep: {}}}\n", dir.c_str(), c.every, c.keep);
}

} // namespace troupe::detail
