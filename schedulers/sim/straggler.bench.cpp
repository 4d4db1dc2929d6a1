// Report: each rule policy against `table` replaying its own canonical order
// (the policy's run under equal costs) on the straggler grid, median makespans
// over SEEDS seeds per row (default 100).
//
//   bench_straggler [SEEDS]
#include <cstdlib>

#include <fmt/format.h>

#include "schedulers/sim/straggler.hpp"

using namespace troupe::sched;

int main(int argc, char** argv) {
  int seeds = argc > 1 ? std::atoi(argv[1]) : 100;
  struct shape {
    const char* policy;
    int p, m, v;
  };
  const shape shapes[] = {
    {"gpipe", 4, 8, 1},
    {"gpipe", 4, 16, 1},
    {"gpipe", 8, 16, 1},
    {"1f1b", 4, 8, 1},
    {"1f1b", 4, 16, 1},
    {"1f1b", 8, 16, 1},
    {"zb_h1", 4, 8, 1},
    {"zb_h1", 4, 16, 1},
    {"zb_h1", 8, 16, 1},
    {"interleaved_1f1b", 4, 8, 2},
    {"interleaved_1f1b", 4, 16, 2},
    {"interleaved_1f1b", 8, 16, 2},
  };
  fmt::print("costs F=1 B=2 (I=1 W=1), no latency, {} seeds; medians; gain = 1 - emergent / replayed\n\n", seeds);
  fmt::print("{:<17} {:>2} {:>3} {:>2}  {:<25} {:>9} {:>9} {:>8} {:>12}\n", "policy", "p", "m", "v", "scenario",
             "emergent", "replayed", "gain", "win/tie/loss");
  for (const auto& s : shapes) {
    sim_config base;
    base.ranks = s.p;
    base.microbatches = s.m;
    base.chunks = s.v;
    for (const auto& scenario : standard_scenarios()) {
      auto r = compare_with_replay(base, s.policy, scenario, seeds);
      if (!r) {
        fmt::print(stderr, "{}: {}\n", s.policy, r.error().message);
        return 1;
      }
      fmt::print("{:<17} {:>2} {:>3} {:>2}  {:<25} {:>9.3f} {:>9.3f} {:>7.2f}% {:>5}/{:>3}/{:>3}\n", s.policy, s.p, s.m,
                 s.v, scenario.name, r->policy_median, r->replay_median, 100 * r->gain(), r->wins, r->ties, r->losses);
    }
  }
  return 0;
}
