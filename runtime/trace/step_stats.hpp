// Per-actor step times and the stragglers among them: min, median and max of
// each actor's busy time per step, and an EWMA of its ratio to its peers that
// tells a chronic straggler from a one-off stall (issue #26 item 4).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/trace/trace_export.hpp"

namespace troupe {

/// One actor's busy time in each step it worked in.
struct step_times {
  std::string actor;
  std::string role;  ///< its peers have the same role,
  int position = -1; ///< and the same position when any other has it (the replicas of a pipeline stage)
  std::map<std::int32_t, std::int64_t> busy; ///< step (0-based) -> ns of forward and backward actions
};

/// How a ratio to the peers becomes a verdict.
struct step_stats_options {
  double alpha = 0.3;         ///< EWMA weight of the newest step
  double chronic_above = 1.3; ///< the EWMA level that counts as slow
  double stall_above = 2.0;   ///< a step this many times the actor's EWMA before it is a stall
  std::size_t top_k = 5;      ///< how many of the slowest actors the report ranks
};

/// What one actor's steps say.
struct actor_step_stats {
  std::string actor;
  std::size_t steps = 0; ///< steps measured
  double min_ms = 0, median_ms = 0, max_ms = 0;
  double ewma = 1;                  ///< EWMA of step time / peers' median (from 1, stalls clipped), after the last step
  double peak_ratio = 1;            ///< the largest single-step ratio
  std::size_t above = 0;            ///< steps after which the EWMA was above chronic_above
  bool chronic = false;             ///< the EWMA stayed above chronic_above for at least half its steps
  std::vector<std::int32_t> stalls; ///< steps whose ratio passed stall_above × the EWMA before them
};

/// Every actor's stats (in input order) and the slowest ones.
struct straggler_report {
  std::vector<actor_step_stats> actors;
  std::vector<std::size_t> top; ///< indices into actors: chronic first, then by EWMA, at most top_k
  step_stats_options options;
};

/// Computes the report. An actor's peers at a step are the other actors of
/// its role and position that worked in that step (a stage's replicas), or
/// without such, those of its role (the other stages of a single pipeline,
/// whose work may differ: the first holds the embedding, the last the head);
/// a step with no peer gives ratio 1.
straggler_report analyze_step_times(const std::vector<step_times>& in, const step_stats_options& o = {});

/// Each actor's busy time per step from a trace's forward and backward spans
/// (those with a step), for the actors that have a role. `from_ns`/`to_ns`
/// (when not negative) keep the steps whose every action lies inside.
std::vector<step_times> step_times_of(const trace_snapshot& t, std::int64_t from_ns = -1, std::int64_t to_ns = -1);

/// `{"top": [names], "actors": {name: {steps, min_ms, median_ms, max_ms, ewma, peak_ratio, chronic, stalls}},
/// "chronic_above", "stall_above"}`.
nlohmann::json to_json(const straggler_report& r);

/// The table `troupe trace summarize` prints (empty when no actor has steps).
std::string to_text(const straggler_report& r);

} // namespace troupe
