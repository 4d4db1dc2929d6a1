// Integration-test support: the trace of a run in this process, its spans and
// its actors' trace ids by name, read from the process-wide recorder; and a
// graph run here under it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>

#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/trace/trace.hpp"

namespace troupe::testing {

/// What one traced run recorded.
struct run_trace {
  std::vector<span> spans;
  std::vector<counter_sample> counters;
  std::map<std::string, std::uint16_t> ids; ///< trace id of each actor, by name

  /// The name of each actor, by trace id.
  std::map<std::uint16_t, std::string> names() const {
    std::map<std::uint16_t, std::string> out;
    for (const auto& [n, id] : ids)
      out[id] = n;
    return out;
  }
};

/// Calls `run` (which runs a graph here) with the recorder reset and enabled
/// around it, and returns what it recorded.
template <class Run>
run_trace record_trace(Run&& run) {
  auto& tr = trace_recorder::global();
  tr.reset();
  tr.enable(1 << 18);
  run();
  tr.disable();
  trace_recorder::cursor cur;
  run_trace out;
  tr.collect(cur, out.spans, &out.counters);
  for (const auto& a : tr.actors())
    out.ids[a.name] = a.id;
  return out;
}

/// What a graph run in this process gave, and its trace.
struct graph_run_traced {
  run_result result;
  run_trace trace;
};

/// Runs `g` in this process (the runtime options from the environment) under the
/// recorder; fails the test, with the error, if the run fails.
inline graph_run_traced run_traced(const graph_spec& g) {
  graph_run_traced out;
  out.trace = record_trace([&] {
    auto o = runtime_options_from_env();
    troupe_config cfg{o};
    caf::actor_system sys{cfg};
    auto r = run_graph(sys, g);
    INFO((r ? std::string{} : sys.render(r.error())));
    REQUIRE(r);
    out.result = *r;
  });
  return out;
}

} // namespace troupe::testing
