// Tracing for `troupe run`: the --trace, --trace-buffer, --no-trace and
// --dashboard options, recording on, the live dashboard, the file written as the run goes.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/trace/dashboard_server.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "runtime/trace/trace_writer.hpp"

namespace troupe::cli {

/// What the trace options asked for.
struct trace_cli_options {
  std::string file;             ///< --trace FILE (else the graph's trace.file)
  bool no_trace = false;        ///< --no-trace: ignore the graph's trace.file
  std::size_t buffer = 1 << 16; ///< --trace-buffer N: a thread's ring, in spans
  bool dashboard = false;       ///< --dashboard [ADDR]
  std::string dashboard_address = "127.0.0.1:8080";
};

/// Where the trace goes: --trace FILE as given (relative to the current
/// folder), nothing with --no-trace, else the graph's trace.file (relative to
/// the graph file's folder); empty for no file. The flags are in deploy/cli/flags.hpp.
std::string trace_file(const graph_spec& g, const trace_cli_options& o);

/// Node `node`'s trace file in a launched run: `runs/x.json` becomes `runs/x.node1.json`.
std::string node_trace_file(const std::string& file, int node);

/// Recording for one run: start() before the actors spawn, finish() after.
class run_tracing {
public:
  /// Turns the recorder on when a file or the dashboard is wanted, starts
  /// writing the file (trace_writer) and starts the dashboard. A trace file
  /// that cannot be written is an error here, before the run, not after it.
  static caf::expected<std::unique_ptr<run_tracing>> start(const graph_spec& g, trace_cli_options o);
  /// For `troupe launch`'s coordinator, which records nothing itself (each node
  /// writes its own file): starts the dashboard when asked, fed by the nodes
  /// through dashboard()->ingest.
  static caf::expected<std::unique_ptr<run_tracing>> start_coordinator(const graph_spec& g, trace_cli_options o);
  /// Writes the rest of the trace file (also after a failed run: what was
  /// recorded so far) and stops the dashboard. An error says what went wrong:
  /// the trace is lost or incomplete, and the command fails.
  caf::error finish();
  /// Where the trace goes (empty: no file).
  const std::string& file() const noexcept { return file_; }
  /// The live dashboard, or null when none was asked for.
  dashboard_server* dashboard() const noexcept { return dashboard_.get(); }

private:
  /// Starts the dashboard the options ask for (if any): live from this
  /// process's recorder, or fed by ingest.
  caf::error start_dashboard(const graph_spec& g, const trace_cli_options& o, bool from_recorder);

  std::string file_;
  std::int64_t tokens_per_step_ = 0;
  std::unique_ptr<trace_writer> writer_;
  std::unique_ptr<dashboard_server> dashboard_;
};

} // namespace troupe::cli
