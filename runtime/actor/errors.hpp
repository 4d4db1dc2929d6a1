// The runtime's error codes, as caf::error values in the `troupe` category,
// plus the diagnostics a graph file produces (file:line:col, key path, message).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>

namespace troupe {

/// Runtime error codes carried in caf::error with category `troupe_error_category`.
enum class errc : std::uint8_t {
  none = 0,
  invalid_graph,      ///< a graph file or `--set` override failed validation
  plugin_load_failed, ///< dlopen/dlsym of a plugin failed
  unknown_actor_type, ///< a graph names an actor type that is not registered
  spawn_failed,       ///< an actor factory returned an error
  actor_failed,       ///< an actor reported a failure or exited abnormally
  io_failed,          ///< a file could not be read or written
  invalid_argument,   ///< a bad value reached a runtime API
  interrupted,        ///< the user stopped the run (SIGINT, SIGTERM)
  malformed_frame,    ///< a frame from another process could not be decoded (runtime/transport/wire.hpp)
  node_lost,          ///< a launched run lost a node process it could not go on without
};

/// The category atom of troupe's caf::error values.
using troupe_error_atom = caf::atom_constant<caf::atom("troupe")>;
constexpr caf::atom_value troupe_error_category = troupe_error_atom::value;

/// A short name for `e` (`invalid_graph`, ...).
const char* to_string(errc e) noexcept;

/// Builds a caf::error in the troupe category; `what` says where and what.
caf::error make_error(errc e, std::string what);

/// Whether `e` is troupe's error `code`.
inline bool is_error(const caf::error& e, errc code) noexcept {
  return e.category() == troupe_error_category && e.code() == static_cast<std::uint8_t>(code);
}

/// The text for a user: `what` for troupe errors, CAF's rendering otherwise.
std::string error_message(const caf::error& e);

/// Renders a troupe error as "code: what" (the renderer registered in the config).
std::string render_error(std::uint8_t code, caf::atom_value category, const caf::message& ctx);

/// What a JSON library exception's text says, in words for a user: without
/// the `[json.exception.parse_error.101]` prefix; "key 'dtype' not found"
/// becomes "the field \"dtype\" is missing"; a parse error keeps its line,
/// column and reason ("syntax error at line 1, column 1: invalid literal").
std::string plain_json_error(const std::string& what);

/// A location in a graph file; line and column are 1-based. `origin`, when not
/// empty, names a command-line override (`--set pipeline.stages=3`) instead.
struct source_pos {
  std::string file;
  int line = 0;
  int col = 0;
  std::string origin;
};

/// `file:line:col`, `file`, or the override's text.
std::string to_string(const source_pos& p);

/// One problem in a graph: where, which key path, and what was expected.
struct diagnostic {
  source_pos pos;
  std::string path;    ///< `pipeline.schedule`, `actors[2].type`; empty for the whole file
  std::string message; ///< what is wrong and what to do
};

/// `tiny.yaml:4:11: pipeline.schedule: unknown schedule '1fb1' (...)`.
std::string to_string(const diagnostic& d);

/// All diagnostics of one load, in file order.
using diagnostics = std::vector<diagnostic>;

/// Each diagnostic on its own line, the first 50 of them, then
/// `... and N more errors` when there are more.
std::string to_string(const diagnostics& ds);

} // namespace troupe
