// Integration-test support: a graph given as YAML text, validated and run to the
// end in this process (a fresh actor system), its result required.
#pragma once

#include <string>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>

#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/graph/graph_loader.hpp"

namespace troupe::testing {

/// Loads `text` (named `name` in errors) with troupe's vocabulary and runs it;
/// a load error or a failed run fails the test, with what went wrong.
inline run_result run_graph_text(const std::string& text, const std::string& name) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(text, name, opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *loaded.graph);
  INFO((r ? std::string{} : sys.render(r.error())));
  REQUIRE(r);
  return *r;
}

} // namespace troupe::testing
