// Writes recorded spans and counters as Chrome Trace Event JSON, which opens in
// Perfetto and chrome://tracing: a process per node, a thread per actor.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/trace/trace.hpp"

namespace troupe {

/// Everything one trace file holds.
struct trace_snapshot {
  std::vector<actor_info> actors;
  std::vector<span> spans;
  std::vector<counter_sample> counters;
  std::uint64_t dropped = 0;
};

/// Collects everything the global recorder holds now.
trace_snapshot snapshot_trace();

/// The snapshot as Chrome Trace Event JSON (object form, `traceEvents` sorted
/// by thread and time, with flow arrows from each send to its receive).
std::string to_chrome_json(const trace_snapshot& t);

/// Writes `to_chrome_json(t)` to `path` atomically (temporary file, then rename).
/// Returns an empty string on success, else what went wrong and where; a failed
/// write leaves no temporary file.
std::string write_chrome_trace(const std::filesystem::path& path, const trace_snapshot& t);

} // namespace troupe
