// The graph file's `checkpoint:` section: where a run saves its state, how
// often, and how many complete checkpoints it keeps.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

namespace {

const std::vector<std::string> checkpoint_keys{"dir", "every", "keep"};

/// Why the folder `dir` cannot be made, or nothing: its first missing folder
/// is made and removed again (`/proc/ck` fails here, not at the run's start).
std::optional<std::string> cannot_create(const std::filesystem::path& dir) {
  std::error_code ec;
  auto missing = std::filesystem::absolute(dir, ec).lexically_normal();
  if (ec || std::filesystem::exists(missing, ec))
    return std::nullopt;
  while (missing.has_parent_path() && missing.parent_path() != missing &&
         !std::filesystem::exists(missing.parent_path(), ec))
    missing = missing.parent_path();
  if (::mkdir(missing.c_str(), 0755) != 0)
    return std::strerror(errno);
  ::rmdir(missing.c_str());
  return std::nullopt;
}

} // namespace

void parse_checkpoint(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& c = pg.graph.checkpoint;
  c.present = true;
  if (!r.check_map(n, "checkpoint", checkpoint_keys))
    return;
  r.require(n, "checkpoint", "dir");
  if (n["every"])
    r.get_int(n, "checkpoint", "every", c.every, 0, 1'000'000'000'000);
  else // a folder and no period: the README's promise, the run's last step (saved nothing before)
    c.every = pg.graph.train.steps;
  r.get_int(n, "checkpoint", "keep", c.keep, 1, 1'000'000);
  if (!r.get_string(n, "checkpoint", "dir", c.dir) || c.dir.empty())
    return;
  c.dir_path = pg.resolve(c.dir);
  std::error_code ec;
  if (std::filesystem::exists(c.dir_path, ec) && !std::filesystem::is_directory(c.dir_path, ec))
    r.error(n["dir"], "checkpoint.dir",
            fmt::format("'{}' is a file, not a folder (a path is relative to the graph file's folder)", c.dir));
  else if (auto why = cannot_create(c.dir_path))
    r.error(n["dir"], "checkpoint.dir", fmt::format("cannot create '{}': {}", c.dir, *why));
}

std::string checkpoint_yaml(const checkpoint_spec& c) {
  if (!c.present)
    return {};
  YAML::Emitter dir;
  dir << c.dir;
  return fmt::format("checkpoint: {{dir: {}, every: {}, keep: {}}}\n", dir.c_str(), c.every, c.keep);
}

} // namespace troupe::detail
