// Internal to the graph loader: reading YAML nodes into typed values while
// collecting diagnostics with positions (file:line:col or the `--set` that made them).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "runtime/actor/errors.hpp"

namespace troupe::detail {

/// Reads nodes of one graph document and records what is wrong with them.
class graph_reader {
public:
  graph_reader(std::string file, diagnostics& out) : file_(std::move(file)), out_(out) {}

  /// Marks every node at `path` (and below) as coming from the override `origin`.
  void add_override(std::string path, std::string origin) { overrides_[std::move(path)] = std::move(origin); }

  /// Where `n` sits, or the override that produced `path`.
  source_pos pos(const YAML::Node& n, std::string_view path) const;

  /// Records `message` about the node `n` at `path`.
  void error(const YAML::Node& n, std::string path, std::string message);
  /// Records `message` at a known position.
  void error_at(source_pos p, std::string path, std::string message);

  /// True when `n` is a mapping; reports keys outside `known` (with a suggestion)
  /// and duplicate keys. `what` names the node in messages ("section", "actor").
  bool check_map(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known);

  /// Reports `key` as missing from the mapping `n` when it is absent.
  bool require(const YAML::Node& n, const std::string& path, std::string_view key);

  /// Reads an integer in [lo, hi] from `map[key]` when present; false (and a
  /// diagnostic) when present but wrong.
  bool get_int(const YAML::Node& map, const std::string& path, std::string_view key, std::int64_t& out, std::int64_t lo,
               std::int64_t hi);
  bool get_int(const YAML::Node& map, const std::string& path, std::string_view key, int& out, int lo, int hi);
  /// Reads a number in [lo, hi] from `map[key]` when present.
  bool get_double(const YAML::Node& map, const std::string& path, std::string_view key, double& out, double lo,
                  double hi);
  /// Reads a string (any scalar) from `map[key]` when present.
  bool get_string(const YAML::Node& map, const std::string& path, std::string_view key, std::string& out);
  /// Reads `true` or `false` from `map[key]` when present.
  bool get_bool(const YAML::Node& map, const std::string& path, std::string_view key, bool& out);

  /// Reads a scalar as an integer in [lo, hi].
  std::optional<std::int64_t> as_int(const YAML::Node& n, const std::string& path, std::int64_t lo, std::int64_t hi);
  /// Reads any scalar as a string (a non-empty one).
  std::optional<std::string> as_string(const YAML::Node& n, const std::string& path);

  const std::string& file() const noexcept { return file_; }
  diagnostics& out() noexcept { return out_; }

private:
  std::string file_;
  diagnostics& out_;
  std::map<std::string, std::string> overrides_;
};

/// Reads a duration (`5ms`) or a bandwidth (`1Gbit/s`) scalar into `out`
/// through `parse` (net::parse_duration, net::parse_bandwidth).
template <class Parse>
void read_quantity(const YAML::Node& n, const std::string& path, double& out, Parse parse, graph_reader& r) {
  auto text = r.as_string(n, path);
  if (!text)
    return;
  if (auto v = parse(*text))
    out = *v;
  else
    r.error(n, path, error_message(v.error()));
}

/// `map[key]` when present, else an undefined node that is safe to keep and
/// test (yaml-cpp's own missing-key nodes throw when copied into another node).
YAML::Node child(const YAML::Node& map, std::string_view key);

/// Refuses every explicit YAML tag under `n` (`!custom 2`, `!!str x`): a graph
/// file's values are plain, and a tag yaml-cpp keeps would be dropped unseen.
void check_tags(const YAML::Node& n, const std::string& path, graph_reader& r);

/// `a.b` (or `b` when `a` is empty).
std::string join_path(std::string_view a, std::string_view b);
/// `a[i]`.
std::string index_path(std::string_view a, std::size_t i);
/// "a list", "a mapping", "nothing" or the scalar quoted: for "got ..." texts.
std::string describe(const YAML::Node& n);
/// `(did you mean 'x'? known: a, b, c)` or `(known: a, b, c)`.
std::string choices(std::string_view word, const std::vector<std::string>& known);
/// Comma-separated list.
std::string join(const std::vector<std::string>& xs);

} // namespace troupe::detail
