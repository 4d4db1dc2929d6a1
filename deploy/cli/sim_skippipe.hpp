// `troupe sim` on a graph with a `skip:` section (#16, #14): SkipPipe's
// placement and paths as `troupe plan paths` makes them, then the microbatches
// following those paths over the network's links under the simulated clock.
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/graph_spec.hpp"
#include "schedulers/sim/cluster_sim.hpp"
#include "schedulers/planners/skippipe_planner.hpp"

namespace troupe::cli {

/// `base` (the graph's model, device and costs, as `troupe sim` reads them)
/// turned into SkipPipe's nodes following `paths` (skippipe_plan.hpp's numbering:
/// microbatch k of a step is agent (k mod R)·M + k div R, R stage-0 nodes).
sched::expected<sched::cluster_config> skippipe_cluster(const graph_spec& g, const sched::placement& where,
                                                        const std::vector<sched::planned_path>& paths, int path_length,
                                                        sched::cluster_config base);

/// Plans (skip.planner, and the full pipeline planned alike), simulates both and
/// prints their iteration times against the plan's estimates: the exit code.
int simulate_skippipe(const std::string& file, const graph_spec& g, const sched::cluster_config& base, bool json);

} // namespace troupe::cli
