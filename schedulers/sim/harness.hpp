// A deterministic discrete-event simulation of a pipeline: the stage actors' own
// scheduling cores (stage_core: policies, routes, plans, credits) and router,
// p ranks under a simulated clock with a cost model instead of compute.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "schedulers/policies/action.hpp"
#include "schedulers/expected.hpp"
#include "schedulers/policies/stage_policy.hpp"

namespace troupe::sched {

/// The simulated pipeline and its costs. An operation's duration is its base
/// cost times its rank's slowdown, its microbatch's slowdown and a jitter
/// factor drawn uniformly from [1 - jitter, 1 + jitter]. The jitter is a hash
/// of (seed, stage, kind, microbatch), so an operation costs the same whatever
/// order a policy runs it in: two policies compared on one seed face the same work.
struct sim_config {
  int ranks = 4;        ///< p
  int microbatches = 8; ///< m
  int chunks = 1;       ///< v, model chunks per rank
  /// F, B = I + W and W: one microbatch through all of a rank's layers (the papers'
  /// convention: B = 2F, and I = W = F when split). With v chunks a chunk costs 1/v of it.
  double forward_cost = 1;
  double backward_cost = 2;
  double weight_cost = 1; ///< W when the policy splits backward (then I = B - W)
  /// An F&B action (a forward fused with another microbatch's backward) for one
  /// microbatch's worth, as F and B are; 0 means F + B (no gain from the overlap).
  double overlap_cost = 0;
  double latency = 0;                      ///< per message between ranks
  std::vector<double> rank_slowdown;       ///< factor per rank (missing entries are 1)
  std::vector<double> microbatch_slowdown; ///< factor per microbatch (missing entries are 1)
  double jitter = 0;                       ///< relative half-width of the uniform jitter
  std::uint64_t seed = 0;
};

/// One action with the simulated times it ran.
struct timed_action {
  action what;
  double start = 0;
  double end = 0;
};

/// What a simulated step did.
struct sim_result {
  std::vector<std::vector<action>> orders;         ///< per rank, in execution order
  std::vector<std::vector<timed_action>> timeline; ///< per rank
  double makespan = 0;                             ///< time the last action ended
  double busy = 0;                                 ///< summed durations over all ranks
  /// Idle share of the ranks' time: 1 - busy / (ranks * makespan). With no
  /// latency GPipe and 1F1B reach (p-1)/(m+p-1) for any F:B ratio.
  double bubble_fraction = 0;
  /// The papers' bubble rate (Qi et al. 2023 and 2024): the longest time a rank
  /// spends from its first action's start to its last's end, over the mean work
  /// per rank, minus 1. A step's start-up skew (rank r cannot start before its
  /// input passed r ranks) is not counted: steps tile it when the optimizer does
  /// not wait for them all. With equal costs 1F1B has (p-1)/m, ZB-H1 (p-1)/3m.
  double bubble_rate = 0;
  /// Activations and gradients sent between ranks (local hand-offs between a
  /// rank's own chunks not counted): the step's pipeline traffic in microbatch-sized messages.
  long pipeline_messages = 0;
  std::vector<int> peak_in_flight;       ///< most activations held at once, per rank
  std::vector<int> in_flight_limit;      ///< each rank's policy bound (0 = none)
  std::vector<int> peak_deferred_weight; ///< most deferred W passes at once, per rank
};

/// Makes rank r's policy.
using policy_maker = std::function<expected<policy_ptr>(int rank)>;

/// Runs one step. Fails if a policy picks work that is not ready, exceeds its
/// own in-flight bound, or the pipeline deadlocks (naming each stuck rank).
expected<sim_result> simulate(const sim_config& config, const policy_maker& make);

/// Runs one step with the registered policy `name`; `base` gives everything
/// but the rank, and its ranks/microbatches/chunks are taken from `config`.
expected<sim_result> simulate(const sim_config& config, std::string_view name, policy_params base = {});

/// The duration of `a` on rank `rank` under `config` (split: whether B is split into I and W).
double operation_cost(const sim_config& config, int rank, const action& a);

/// Bubble fraction theory: (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) interleaved.
double theoretical_bubble(int ranks, int microbatches, int chunks = 1);

} // namespace troupe::sched
