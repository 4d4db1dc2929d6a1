// The registry of `skip.planner` choices (#25 item 3): each planner registers
// its name, what it does, whether its paths visit every stage, the settings it
// reads under `skip:` beyond the shared ones and how it plans. The graph loader
// and plan_skippipe_graph ask the registry; neither names a planner.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/graph/option_spec.hpp"
#include "schedulers/planners/skippipe_planner.hpp"

namespace troupe::sched {

/// What a planner plans with: the path problem, the placement, the rules of
/// `skip:`, the microbatches to route, and the search of plan_skippipe under the
/// caller's deadline (its result kept by `name`, so a baseline that asks for the
/// same search again gets the same plan).
struct planner_input {
  const path_problem& problem;
  const placement& where;
  const path_rules& rules;
  const std::vector<path_agent>& agents;
  std::uint64_t seed = 1;
  std::map<std::string, std::string> options; ///< the planner's own settings, each written or its default
  std::function<expected<path_plan>(const char* name, const path_rules& rules, bool collision_aware)> search;
};

/// A `skip.planner` choice.
struct path_planner {
  std::string summary;
  /// Its paths visit every stage in order (the path length is pipeline.stages, not skip.path_length).
  bool whole_pipeline = false;
  /// Settings it reads under `skip:` beyond the shared ones, checked at their positions.
  std::vector<option_spec> options;
  std::function<expected<path_plan>(const planner_input&)> plan;
};

/// Adds (or replaces) a planner under `name`; plugins call this when loaded. Thread-safe.
void register_path_planner(std::string name, path_planner planner);
/// The planner registered as `name`, or null.
const path_planner* find_path_planner(std::string_view name);
/// Registered names: the built-in ones (skippipe, full, chains, random), then plugins'.
std::vector<std::string> path_planner_names();

/// `rules` for the full pipeline at its best: every stage in order, no
/// skipping, no swaps and no bound on what a stage serves in an iteration
/// (each serves every microbatch; a node still holds at most `memory` at once).
path_rules whole_pipeline_rules(const path_rules& rules, int stages, std::size_t agents);

} // namespace troupe::sched
