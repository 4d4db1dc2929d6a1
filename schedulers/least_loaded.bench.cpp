// Report: routing around a straggler under the simulated clock. 4 replicas of a
// pipeline, one replica's stage 2x slower; throughput of `own` and
// `least_loaded` routing as a share of the unslowed run, per policy and shape.
//
//   bench_least_loaded [STEPS]
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "schedulers/cluster_sim.hpp"

using namespace troupe::sched;

namespace {

cluster_config shape(int stages, int microbatches, int steps, const char* policy, const char* route) {
  cluster_config c;
  c.model = {2 * stages, 256, 4, 128, 256, 1};
  c.costs.device = *device_preset("a100_80gb");
  c.costs.network = {8, {}, {}};
  c.costs.count_head = false;
  c.replicas = 4;
  c.microbatches = microbatches;
  c.steps = steps;
  c.policy = policy;
  c.route = route;
  for (int s = 0; s < stages; ++s)
    c.stages.push_back({0, "s" + std::to_string(s), {{2 * s, 2 * s + 2}}});
  return c;
}

} // namespace

int main(int argc, char** argv) {
  int steps = argc > 1 ? std::atoi(argv[1]) : 4;
  fmt::print("4 replicas, one stage actor 2x slower (the ideal keeps 3.5/4 = 87.5%), {} steps, free links\n\n", steps);
  fmt::print("{:<6} {:>2} {:>3} {:<6} {:>12} {:>12} {:>12} {:>12}\n", "policy", "p", "m", "slow", "own", "own slowed",
             "least_loaded", "ll slowed");
  for (const char* policy : {"gpipe", "1f1b"})
    for (int p : {2, 4})
      for (int m : {4, 8, 16})
        for (int slow_at : {0, p - 1}) {
          std::string slow = fmt::format("r1s{}", slow_at);
          double tps[4];
          int i = 0;
          for (const char* route : {"own", "least_loaded"})
            for (bool slowed : {false, true}) {
              auto c = shape(p, m, steps, policy, route);
              if (slowed)
                c.slowdown[slow] = 2.0;
              auto r = simulate_cluster(c);
              if (!r) {
                fmt::print(stderr, "{}\n", r.error().message);
                return 1;
              }
              tps[i++] = r->tokens_per_s();
            }
          fmt::print("{:<6} {:>2} {:>3} {:<6} {:>11.1f}% {:>11.1f}% {:>11.1f}% {:>11.1f}%\n", policy, p, m, slow, 100.0,
                     100 * tps[1] / tps[0], 100 * tps[2] / tps[0], 100 * tps[3] / tps[0]);
        }
  return 0;
}
