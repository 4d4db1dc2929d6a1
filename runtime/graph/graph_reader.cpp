// Typed reads of YAML nodes with positioned diagnostics (see graph_reader.hpp).
#include "runtime/graph/graph_reader.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "runtime/actor/named_registry.hpp"

namespace troupe::detail {

YAML::Node child(const YAML::Node& map, std::string_view key) {
  if (map.IsMap()) {
    YAML::Node c = map[std::string{key}];
    if (c.IsDefined())
      return c;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::string join_path(std::string_view a, std::string_view b) {
  if (a.empty())
    return std::string{b};
  return fmt::format("{}.{}", a, b);
}

std::string index_path(std::string_view a, std::size_t i) {
  return fmt::format("{}[{}]", a, i);
}

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (const auto& x : xs)
    out += (out.empty() ? "" : ", ") + x;
  return out;
}

std::string choices(std::string_view word, const std::vector<std::string>& known) {
  if (auto near = nearest_name(word, known))
    return fmt::format("(did you mean '{}'? known: {})", *near, join(known));
  return fmt::format("(known: {})", join(known));
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
  case YAML::NodeType::Sequence:
    return "a list";
  case YAML::NodeType::Map:
    return "a mapping";
  case YAML::NodeType::Scalar:
    return fmt::format("'{}'", n.Scalar());
  default:
    return "nothing";
  }
}

source_pos graph_reader::pos(const YAML::Node& n, std::string_view path) const {
  // An override owns its path and everything below it.
  std::string p{path};
  while (!p.empty()) {
    if (auto i = overrides_.find(p); i != overrides_.end())
      return source_pos{file_, 0, 0, i->second};
    auto cut = p.find_last_of(".[");
    if (cut == std::string::npos)
      break;
    p.resize(cut);
  }
  source_pos out{file_, 0, 0, {}};
  if (n.IsDefined() && !n.Mark().is_null()) {
    out.line = n.Mark().line + 1;
    out.col = n.Mark().column + 1;
  }
  return out;
}

void graph_reader::error(const YAML::Node& n, std::string path, std::string message) {
  auto where = pos(n, path); // before `path` is moved from
  error_at(std::move(where), std::move(path), std::move(message));
}

void graph_reader::error_at(source_pos p, std::string path, std::string message) {
  out_.push_back(diagnostic{std::move(p), std::move(path), std::move(message)});
}

bool graph_reader::check_map(const YAML::Node& n, const std::string& path, const std::vector<std::string>& known) {
  if (!n.IsMap()) {
    error(n, path, fmt::format("expected a mapping with keys {}, got {}", join(known), describe(n)));
    return false;
  }
  std::map<std::string, YAML::Mark> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    YAML::Node key = it->first;
    if (!key.IsScalar()) {
      error(key, path, fmt::format("expected a key name, got {}", describe(key)));
      continue;
    }
    const std::string& k = key.Scalar();
    auto kpath = join_path(path, k);
    if (auto [at, fresh] = seen.emplace(k, key.Mark()); !fresh) {
      error(key, kpath, fmt::format("duplicate key '{}' (first at line {})", k, at->second.line + 1));
      continue;
    }
    if (std::find(known.begin(), known.end(), k) == known.end())
      error(key, kpath, fmt::format("unknown key '{}' {}", k, choices(k, known)));
  }
  return true;
}

bool graph_reader::require(const YAML::Node& n, const std::string& path, std::string_view key) {
  if (n.IsMap() && n[std::string{key}])
    return true;
  error(n, path, fmt::format("missing required key '{}'", key));
  return false;
}

void check_tags(const YAML::Node& n, const std::string& path, graph_reader& r) {
  if (!n.IsDefined())
    return;
  if (const auto& tag = n.Tag(); !tag.empty() && tag != "?" && tag != "!")
    r.error(n, path, fmt::format("unknown tag '{}': a graph file's values are plain YAML, without tags", tag));
  if (n.IsSequence())
    for (std::size_t i = 0; i < n.size(); ++i)
      check_tags(n[i], index_path(path, i), r);
  else if (n.IsMap())
    for (const auto& kv : n) {
      auto key = kv.first.IsScalar() ? kv.first.Scalar() : std::string{"?"};
      check_tags(kv.first, path, r);
      check_tags(kv.second, join_path(path, key), r);
    }
}

std::optional<std::int64_t> graph_reader::as_int(const YAML::Node& n, const std::string& path, std::int64_t lo,
                                                 std::int64_t hi) {
  long long v = 0;
  if (!n.IsScalar() || !YAML::convert<long long>::decode(n, v)) {
    error(n, path, fmt::format("expected an integer, got {}", describe(n)));
    return std::nullopt;
  }
  if (n.Tag() == "!") { // "2": the user wrote a string
    error(n, path,
          fmt::format("expected an integer, got the quoted string \"{}\" (write it without quotes)", n.Scalar()));
    return std::nullopt;
  }
  if (v < lo) {
    error(n, path, fmt::format("must be at least {}, got {}", lo, v));
    return std::nullopt;
  }
  if (v > hi) {
    error(n, path, fmt::format("must be at most {}, got {}", hi, v));
    return std::nullopt;
  }
  return v;
}

std::optional<std::string> graph_reader::as_string(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar() || n.Scalar().empty()) {
    error(n, path, fmt::format("expected a name, got {}", describe(n)));
    return std::nullopt;
  }
  // "t\0x.json" would open `t`: a name or path is printable text.
  for (std::size_t i = 0; i < n.Scalar().size(); ++i)
    if (auto c = static_cast<unsigned char>(n.Scalar()[i]); c < 0x20 || c == 0x7f) {
      error(n, path,
            fmt::format("holds a control character (byte 0x{:02x} at offset {}); names and paths are "
                        "printable text",
                        c, i));
      return std::nullopt;
    }
  return n.Scalar();
}

bool graph_reader::get_int(const YAML::Node& map, const std::string& path, std::string_view key, std::int64_t& out,
                           std::int64_t lo, std::int64_t hi) {
  YAML::Node n = map[std::string{key}];
  if (!n)
    return true;
  auto v = as_int(n, join_path(path, key), lo, hi);
  if (v)
    out = *v;
  return v.has_value();
}

bool graph_reader::get_int(const YAML::Node& map, const std::string& path, std::string_view key, int& out, int lo,
                           int hi) {
  std::int64_t v = out;
  if (!get_int(map, path, key, v, lo, hi))
    return false;
  out = static_cast<int>(v);
  return true;
}

bool graph_reader::get_double(const YAML::Node& map, const std::string& path, std::string_view key, double& out,
                              double lo, double hi) {
  YAML::Node n = map[std::string{key}];
  if (!n)
    return true;
  auto kpath = join_path(path, key);
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v)) {
    error(n, kpath, fmt::format("expected a number, got {}", describe(n)));
    return false;
  }
  if (n.Tag() == "!") { // "0.5": the user wrote a string
    error(n, kpath,
          fmt::format("expected a number, got the quoted string \"{}\" (write it without quotes)", n.Scalar()));
    return false;
  }
  if (v < lo || v > hi) {
    error(n, kpath, fmt::format("must be between {} and {}, got {}", lo, hi, n.Scalar()));
    return false;
  }
  out = v;
  return true;
}

bool graph_reader::get_string(const YAML::Node& map, const std::string& path, std::string_view key, std::string& out) {
  YAML::Node n = map[std::string{key}];
  if (!n)
    return true;
  auto v = as_string(n, join_path(path, key));
  if (v)
    out = *v;
  return v.has_value();
}

bool graph_reader::get_bool(const YAML::Node& map, const std::string& path, std::string_view key, bool& out) {
  YAML::Node n = map[std::string{key}];
  if (!n)
    return true;
  auto where = join_path(path, key);
  auto v = as_string(n, where);
  if (v && (*v == "true" || *v == "false")) {
    out = *v == "true";
    return true;
  }
  if (v)
    error(n, where, fmt::format("expected true or false, got '{}'", *v));
  return false;
}

} // namespace troupe::detail
