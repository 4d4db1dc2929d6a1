// Integration-test support: the trace of a run in this process, its spans and
// its actors' trace ids by name, read from the process-wide recorder.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/trace/trace.hpp"

namespace troupe::testing {

/// What one traced run recorded.
struct run_trace {
  std::vector<span> spans;
  std::map<std::string, std::uint16_t> ids; ///< trace id of each actor, by name
};

/// Calls `run` (which runs a graph here) with the recorder reset and enabled
/// around it, and returns what it recorded.
template <class Run> run_trace record_trace(Run&& run) {
  auto& tr = trace_recorder::global();
  tr.reset();
  tr.enable(1 << 18);
  run();
  tr.disable();
  trace_recorder::cursor cur;
  run_trace out;
  tr.collect(cur, out.spans);
  for (const auto& a : tr.actors())
    out.ids[a.name] = a.id;
  return out;
}

} // namespace troupe::testing
