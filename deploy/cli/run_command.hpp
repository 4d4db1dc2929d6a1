// What `troupe run` and `troupe launch` share on the command line: loading the
// graph with its flags (and a --resume checkpoint), and reporting how the run went.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <caf/expected.hpp>

#include "deploy/cli/flags.hpp"
#include "deploy/run/run_graph.hpp"

namespace troupe::cli {

/// What load_run_graph gives a command: the graph to run, or the exit code to end with at once.
struct run_graph_load {
  std::optional<graph_spec> graph;
  /// Without a graph: bad_input after the reasons went to stderr, or ok when a
  /// resumed run has nothing left to do (its checkpoint is after train.steps).
  int exit_code = 0;
};

/// Loads the graph with the `--set` and `--steps` values (sets `timeout` from
/// --timeout) and opens the --resume checkpoint into its checkpoint section,
/// every part checked against the graph (printing where it resumes). A resumed
/// run keeps saving as the run it came from (checkpoint.dir, .every and .keep,
/// each unless a `--set` says otherwise): those are added to `a.graph.sets`.
run_graph_load load_run_graph(const char* cmd, run_args& a, std::chrono::milliseconds& timeout);

/// Prints how the run of `file` (the graph `g`) went (one summary line, or the
/// error on stderr), writes `summary_path` as summary_json when given, and
/// returns the exit code of `troupe CMD` (deploy/cli/run_report.cpp).
int report_run(const char* cmd, const graph_spec& g, const std::string& file, const caf::expected<run_result>& result,
               const std::string& summary_path);

} // namespace troupe::cli
