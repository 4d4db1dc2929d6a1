// Straggler scenarios and the policy-versus-replay comparison.
#include "schedulers/sim/straggler.hpp"

#include <algorithm>
#include <random>

#include "runtime/trace/median.hpp"

namespace troupe::sched {

std::vector<straggler_scenario> standard_scenarios() {
  return {
    {"jitter 30%",
     [](sim_config c, std::uint64_t seed) {
       c.jitter = 0.3;
       c.seed = seed;
       return c;
     }},
    {"one rank 1.5x slower",
     [](sim_config c, std::uint64_t seed) {
       c.rank_slowdown.assign(static_cast<std::size_t>(c.ranks), 1.0);
       c.rank_slowdown[seed % static_cast<std::uint64_t>(c.ranks)] = 1.5;
       return c;
     }},
    {"one microbatch 4x slower",
     [](sim_config c, std::uint64_t seed) {
       c.microbatch_slowdown.assign(static_cast<std::size_t>(c.microbatches), 1.0);
       c.microbatch_slowdown[seed % static_cast<std::uint64_t>(c.microbatches)] = 4.0;
       return c;
     }},
    {"microbatch costs 1-3x",
     [](sim_config c, std::uint64_t seed) {
       std::mt19937_64 rng(seed);
       std::uniform_real_distribution<double> factor(1.0, 3.0);
       c.microbatch_slowdown.resize(static_cast<std::size_t>(c.microbatches));
       for (auto& f : c.microbatch_slowdown)
         f = factor(rng);
       return c;
     }},
  };
}

expected<schedule_table> canonical_table(const sim_config& base, std::string_view policy, policy_params params) {
  sim_config plain = base;
  plain.rank_slowdown.clear();
  plain.microbatch_slowdown.clear();
  plain.jitter = 0;
  auto run = simulate(plain, policy, params);
  if (!run)
    return run.error();
  return std::move(run->orders);
}

expected<replay_comparison> compare_with_replay(const sim_config& base, std::string_view policy,
                                                const straggler_scenario& scenario, int seeds, policy_params params) {
  auto table = canonical_table(base, policy, params);
  if (!table)
    return table.error();
  policy_params replay;
  replay.table = std::move(*table);
  replay_comparison out{std::string{policy}, scenario.name, seeds};
  std::vector<double> mine_all, theirs_all;
  for (int s = 0; s < seeds; ++s) {
    sim_config c = scenario.apply(base, static_cast<std::uint64_t>(s));
    auto mine = simulate(c, policy, params);
    if (!mine)
      return mine.error();
    auto theirs = simulate(c, "table", replay);
    if (!theirs)
      return theirs.error();
    mine_all.push_back(mine->makespan);
    theirs_all.push_back(theirs->makespan);
    double rel = mine->makespan / theirs->makespan - 1.0;
    if (rel < -1e-12)
      ++out.wins;
    else if (rel > 1e-12)
      ++out.losses;
    else
      ++out.ties;
    out.worst = std::max(out.worst, rel);
  }
  out.policy_median = median(std::move(mine_all));
  out.replay_median = median(std::move(theirs_all));
  return out;
}

} // namespace troupe::sched
