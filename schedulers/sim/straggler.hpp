// Emergent versus replayed schedules under stragglers: runs a policy and the
// `table` replay of its own canonical order on the same perturbed costs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "schedulers/sim/harness.hpp"
#include "schedulers/policies/schedule_table.hpp"

namespace troupe::sched {

/// A way to perturb a pipeline's costs, drawn from a seed.
struct straggler_scenario {
  std::string name;
  std::function<sim_config(sim_config base, std::uint64_t seed)> apply;
};

/// The four the issue names, each a function of the seed: +-30% jitter on every
/// operation (`--jitter 0.3`); one rank 1.5x slower (rank = seed mod p,
/// `--slow R:1.5`); one microbatch 4x slower on every stage (microbatch = seed
/// mod m, `--slow-microbatch MB:4`); and every microbatch slower by a factor
/// drawn uniformly from [1, 3] (packed documents of varying length).
std::vector<straggler_scenario> standard_scenarios();

/// The policy's order under `base`'s costs with no perturbation: its canonical schedule.
expected<schedule_table> canonical_table(const sim_config& base, std::string_view policy, policy_params params = {});

/// Median makespans of a policy and of `table` replaying its canonical order, over seeds 0..seeds-1.
struct replay_comparison {
  std::string policy;
  std::string scenario;
  int seeds = 0;
  double policy_median = 0;           ///< median makespan of the policy (its emergent schedule)
  double replay_median = 0;           ///< median makespan of the static replay
  int wins = 0, ties = 0, losses = 0; ///< per seed, policy versus replay
  double worst = 0;                   ///< largest per-seed relative loss (policy/replay - 1), 0 if none
  /// Relative time saved by the policy: 1 - policy_median / replay_median.
  double gain() const { return replay_median > 0 ? 1.0 - policy_median / replay_median : 0.0; }
};

/// Compares `policy` with the replay of its canonical order under `scenario` for seeds 0..seeds-1.
expected<replay_comparison> compare_with_replay(const sim_config& base, std::string_view policy,
                                                const straggler_scenario& scenario, int seeds,
                                                policy_params params = {});

} // namespace troupe::sched
