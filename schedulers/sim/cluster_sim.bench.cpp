// bench_cluster_sim: how the cluster driver scales with simulated devices
// (16 stages x R replicas, 10 steps): events/s, wall time and peak memory,
// which must grow linearly (no per-actor directory of every other actor).
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "schedulers/sim/cluster_sim.hpp"

using namespace troupe::sched;

namespace {

/// CPU seconds this process has used: on a shared machine, wall time also
/// counts the time others held the cores; events per CPU second does not.
double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

cluster_config grid(int stages, int replicas, int steps) {
  cluster_config c;
  c.model = {32, 2048, 16, 2048, 51200, 2}; // examples/sim/10k_devices.yaml
  c.costs.device = *device_preset("h100_sxm");
  c.costs.network = default_network("h100_sxm");
  c.replicas = replicas;
  c.microbatches = 16;
  c.steps = steps;
  int per = c.model.layers / stages;
  for (int s = 0; s < stages; ++s)
    c.stages.push_back({0, fmt::format("s{}", s), {{s * per, (s + 1) * per}}});
  return c;
}

} // namespace

int main(int argc, char** argv) {
  int max_replicas = argc > 1 ? std::atoi(argv[1]) : 625;
  int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  fmt::print("{:>8} {:>8} {:>12} {:>10} {:>14} {:>10} {:>16} {:>12} {:>14}\n", "devices", "steps", "events", "wall s",
             "events/s", "CPU s", "events/CPU s", "peak RSS MB", "iteration s");
  for (int replicas : {max_replicas / 8, max_replicas / 4, max_replicas / 2, max_replicas}) {
    if (replicas < 1)
      continue;
    double cpu = cpu_s();
    auto r = simulate_cluster(grid(16, replicas, steps));
    cpu = cpu_s() - cpu;
    if (!r) {
      fmt::print(stderr, "{}\n", r.error().message);
      return 1;
    }
    fmt::print("{:>8} {:>8} {:>12} {:>10.3f} {:>14.4g} {:>10.3f} {:>16.4g} {:>12.1f} {:>14.6g}\n", r->devices, steps,
               r->events, r->wall_s, r->events / r->wall_s, cpu, r->events / cpu, peak_rss_mb(), r->iteration_s);
    std::fflush(stdout);
  }
  return 0;
}
