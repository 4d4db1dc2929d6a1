// Troupe's caf::error category and the text of graph diagnostics.
#include "runtime/actor/errors.hpp"

#include <fmt/format.h>

namespace troupe {

const char* to_string(errc e) noexcept {
  switch (e) {
  case errc::none:
    return "none";
  case errc::invalid_graph:
    return "invalid_graph";
  case errc::plugin_load_failed:
    return "plugin_load_failed";
  case errc::unknown_actor_type:
    return "unknown_actor_type";
  case errc::spawn_failed:
    return "spawn_failed";
  case errc::actor_failed:
    return "actor_failed";
  case errc::io_failed:
    return "io_failed";
  case errc::invalid_argument:
    return "invalid_argument";
  case errc::interrupted:
    return "interrupted";
  case errc::malformed_frame:
    return "malformed_frame";
  case errc::node_lost:
    return "node_lost";
  }
  return "unknown";
}

caf::error make_error(errc e, std::string what) {
  return caf::error{static_cast<std::uint8_t>(e), troupe_error_category, caf::make_message(std::move(what))};
}

std::string error_message(const caf::error& e) {
  if (!e)
    return "no error";
  if (e.category() == troupe_error_category && e.context().match_elements<std::string>())
    return e.context().get_as<std::string>(0);
  return caf::to_string(e);
}

std::string render_error(std::uint8_t code, caf::atom_value, const caf::message& ctx) {
  std::string out = to_string(static_cast<errc>(code));
  if (ctx.match_elements<std::string>())
    out += ": " + ctx.get_as<std::string>(0);
  return out;
}

std::string to_string(const source_pos& p) {
  if (!p.origin.empty())
    return p.origin;
  if (p.line <= 0)
    return p.file;
  return fmt::format("{}:{}:{}", p.file, p.line, p.col);
}

std::string to_string(const diagnostic& d) {
  std::string out = to_string(d.pos);
  if (!d.path.empty())
    out += (out.empty() ? "" : ": ") + d.path;
  out += (out.empty() ? "" : ": ") + d.message;
  return out;
}

std::string plain_json_error(const std::string& what) {
  std::string s = what;
  if (s.starts_with("[json.exception.")) // the library's error id is no help to a user
    if (auto end = s.find("] "); end != std::string::npos)
      s.erase(0, end + 2);
  if (s.starts_with("key '") && s.ends_with("' not found"))
    return fmt::format("the field \"{}\" is missing", s.substr(5, s.size() - 5 - 11));
  // "parse error at line 1, column 1: syntax error while parsing value - invalid literal; last read: 'x'"
  if (s.starts_with("parse error at ")) {
    auto colon = s.find(": ");
    auto where = s.substr(15, colon == std::string::npos ? std::string::npos : colon - 15);
    std::string reason;
    if (auto dash = s.find(" - "); dash != std::string::npos)
      reason = s.substr(dash + 3, s.find("; last read") == std::string::npos ? std::string::npos
                                                                             : s.find("; last read") - dash - 3);
    return reason.empty() ? "syntax error at " + where : fmt::format("syntax error at {}: {}", where, reason);
  }
  return s;
}

std::string to_string(const diagnostics& ds) {
  // 400,000 duplicate channels printed 400,001 lines: the first ones say what is wrong.
  constexpr std::size_t shown = 50;
  std::string out;
  for (std::size_t i = 0; i < ds.size() && i < shown; ++i)
    out += to_string(ds[i]) + "\n";
  if (ds.size() > shown)
    out += fmt::format("... and {} more errors\n", ds.size() - shown);
  return out;
}

} // namespace troupe
