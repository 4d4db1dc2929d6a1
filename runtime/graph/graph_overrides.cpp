// `--set key.path=value` overrides: parsed as YAML values and written into the
// document before validation, so they are checked exactly like the file.
#include <cctype>
#include <optional>
#include <variant>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

namespace {

/// One step of a key path: a mapping key or a list index.
using segment = std::variant<std::string, std::size_t>;

std::optional<std::vector<segment>> parse_key_path(std::string_view s) {
  std::vector<segment> out;
  std::size_t i = 0;
  auto ident = [&](std::size_t& j) {
    auto start = j;
    while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_' || s[j] == '-'))
      ++j;
    return s.substr(start, j - start);
  };
  while (i < s.size()) {
    auto name = ident(i);
    if (name.empty())
      return std::nullopt;
    out.emplace_back(std::string{name});
    while (i < s.size() && s[i] == '[') {
      auto close = s.find(']', i);
      if (close == std::string_view::npos || close == i + 1)
        return std::nullopt;
      std::size_t idx = 0;
      for (auto k = i + 1; k < close; ++k) {
        if (!std::isdigit(static_cast<unsigned char>(s[k])))
          return std::nullopt;
        idx = idx * 10 + static_cast<std::size_t>(s[k] - '0');
      }
      out.emplace_back(idx);
      i = close + 1;
    }
    if (i < s.size()) {
      if (s[i] != '.' || i + 1 == s.size())
        return std::nullopt;
      ++i;
    }
  }
  if (out.empty())
    return std::nullopt;
  return out;
}

std::string prefix_text(const std::vector<segment>& path, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (auto* k = std::get_if<std::string>(&path[i]))
      out = join_path(out, *k);
    else
      out = index_path(out, std::get<std::size_t>(path[i]));
  }
  return out;
}

void apply_one(YAML::Node root, const std::string& arg, graph_reader& r) {
  auto origin = fmt::format("--set {}", arg);
  auto fail = [&](std::string msg) { r.error_at(source_pos{r.file(), 0, 0, origin}, "", std::move(msg)); };
  auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) {
    fail("expected KEY.PATH=VALUE (for example --set pipeline.stages=2)");
    return;
  }
  auto key = std::string_view{arg}.substr(0, eq);
  auto text = arg.substr(eq + 1);
  auto path = parse_key_path(key);
  if (!path) {
    fail(fmt::format("'{}' is not a key path (expected names joined by dots, with [N] for list "
                     "entries, e.g. actors[1].layers)",
                     key));
    return;
  }
  if (text.empty()) {
    fail(fmt::format("missing value after '{}='", key));
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    fail(fmt::format("cannot parse value '{}': {}", text, e.msg));
    return;
  }
  YAML::Node cur;
  cur.reset(root);
  for (std::size_t i = 0; i < path->size(); ++i) {
    bool last = i + 1 == path->size();
    auto here = prefix_text(*path, i);
    if (auto* k = std::get_if<std::string>(&(*path)[i])) {
      if (!cur.IsMap() && !cur.IsNull()) {
        fail(fmt::format("cannot set '{}': '{}' is {}, not a mapping", key, here, describe(cur)));
        return;
      }
      if (last) {
        cur[*k] = value;
        break;
      }
      YAML::Node next = cur[*k];
      if (!next && std::holds_alternative<std::size_t>((*path)[i + 1])) {
        // A list entry of a list that is not there: say so, and leave no empty
        // mapping behind for the checks to report as if the user wrote it.
        fail(fmt::format("cannot set '{}': the graph has no '{}' list", key, join_path(here, *k)));
        return;
      }
      if (!next) {
        cur[*k] = YAML::Node(YAML::NodeType::Map);
        next.reset(cur[*k]);
      }
      cur.reset(next);
    } else {
      auto idx = std::get<std::size_t>((*path)[i]);
      if (!cur.IsSequence() || idx >= cur.size()) {
        fail(fmt::format("cannot set '{}': '{}' has no entry [{}]", key, here, idx));
        return;
      }
      if (last) {
        cur[idx] = value;
        break;
      }
      YAML::Node next = cur[idx];
      cur.reset(next);
    }
  }
  r.add_override(prefix_text(*path, path->size()), origin);
}

} // namespace

void apply_overrides(YAML::Node root, const std::vector<std::string>& overrides, graph_reader& r) {
  for (const auto& o : overrides)
    apply_one(root, o, r);
}

} // namespace troupe::detail
