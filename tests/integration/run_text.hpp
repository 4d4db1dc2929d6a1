// Integration-test support: a graph given as YAML text, validated and run to the
// end in this process (a fresh actor system), its result required.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>

#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/graph/graph_loader.hpp"

namespace troupe::testing {

/// Loads `text` (named `name` in errors) with troupe's vocabulary; a load error fails the test.
inline graph_spec load_graph_or_fail(const std::string& text, const std::string& name) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(text, name, opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  return *loaded.graph;
}

/// Runs `g` in a fresh actor system; a failed run fails the test, with what went wrong.
inline run_result run_graph_or_fail(const graph_spec& g) {
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, g);
  INFO((r ? std::string{} : sys.render(r.error())));
  REQUIRE(r);
  return *r;
}

/// The largest relative difference between two loss curves of the same length.
inline double largest_difference(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::fabs(want[i]));
  return worst;
}

/// Loads `text` (named `name` in errors) and runs it.
inline run_result run_graph_text(const std::string& text, const std::string& name) {
  return run_graph_or_fail(load_graph_or_fail(text, name));
}

} // namespace troupe::testing
