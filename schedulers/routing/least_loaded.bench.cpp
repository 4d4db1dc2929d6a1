// Report: routing around a straggler under the simulated clock. 4 replicas of a
// pipeline, one replica's stage 2x slower; throughput of `own` and
// `least_loaded` routing as a share of the unslowed run, per policy and shape.
// A slow first stage (r1s0) is not routed around: the loader sends each
// replica's tokens to its own first stage.
//
//   bench_least_loaded [STEPS]
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "schedulers/sim/cluster_sim.hpp"

using namespace troupe::sched;

namespace {

cluster_config shape(int stages, int microbatches, int steps, const char* policy, const char* route, int bound0) {
  auto c = equal_stage_cluster(stages, 4, microbatches, steps);
  c.policy = policy;
  c.route = route;
  if (bound0 > 0)
    c.stage_policy_options[0]["max_in_flight"] = std::to_string(bound0);
  return c;
}

} // namespace

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 4;
  fmt::print("4 replicas, one stage actor 2x slower (the ideal keeps 3.5/4 = 87.5%), {} steps, free links\n\n", steps);
  fmt::print("bound0: the first position's max_in_flight (-: the policy's own)\n\n");
  fmt::print("{:<6} {:>2} {:>3} {:>6} {:<6} {:>12} {:>12} {:>12} {:>12}\n", "policy", "p", "m", "bound0", "slow", "own",
             "own slowed", "least_loaded", "ll slowed");
  for (const char* policy : {"gpipe", "1f1b"})
    for (int p : {2, 4})
      for (int m : {8, 32})
        for (int bound0 : {0, 4})
          for (int slow_at : p > 2 ? std::vector<int>{0, p / 2, p - 1} : std::vector<int>{0, p - 1}) {
            std::string slow = fmt::format("r1s{}", slow_at);
            double tps[4];
            int i = 0;
            for (const char* route : {"own", "least_loaded"})
              for (bool slowed : {false, true}) {
                auto c = shape(p, m, steps, policy, route, bound0);
                if (slowed)
                  c.slowdown[slow] = 2.0;
                auto r = simulate_cluster(c);
                if (!r) {
                  fmt::print(stderr, "{}\n", r.error().message);
                  return 1;
                }
                tps[i++] = r->tokens_per_s();
              }
            fmt::print("{:<6} {:>2} {:>3} {:>6} {:<6} {:>11.1f}% {:>11.1f}% {:>11.1f}% {:>11.1f}%\n", policy, p, m,
                       bound0 ? std::to_string(bound0) : "-", slow, 100.0, 100 * tps[1] / tps[0], 100 * tps[2] / tps[0],
                       100 * tps[3] / tps[0]);
          }
  return 0;
}
