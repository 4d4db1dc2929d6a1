// Stage actors sharing a host's cores (device.cores > 0, processor sharing):
// closed forms for equal costs, and no change at all while cores are unlimited.
#include "schedulers/sim/cluster_sim.hpp"

#include <doctest/doctest.h>

using namespace troupe::sched;

namespace {

/// What one microbatch costs a stage of equal_stage_cluster: F + B.
double microbatch_work(const cluster_config& c) {
  auto k = costs_of(c.model, c.costs, 2, false);
  return k.forward + k.backward;
}

double iteration(const cluster_config& c) {
  auto r = simulate_cluster(c);
  REQUIRE_MESSAGE(r, r.error().message);
  return r->iteration_s;
}

} // namespace

TEST_CASE("On one core a pipeline takes the sum of its work: S stages x m microbatches x (F + B)") {
  // One core is never idle while work is left (some stage can always run, and
  // messages are free here), and it does one second of work per second however
  // the stages share it: the step is all of its work, whatever the schedule.
  for (const char* policy : {"1f1b", "gpipe"})
    for (auto [s, m] : {std::pair{2, 4}, {4, 8}, {3, 5}}) {
      auto c = equal_stage_cluster(s, 1, m, 2);
      c.policy = policy;
      c.costs.device.cores = 1;
      CHECK(iteration(c) == doctest::Approx(s * m * microbatch_work(c)).epsilon(1e-9));
    }
}

TEST_CASE("d one-stage replicas on C < d cores each run at C/d: a step takes m (F + B) d / C") {
  // Every replica starts its step at once and needs the same work, so all d
  // stay busy together at C/d of their speed and end together; with d <= C
  // each has a core of its own. Free links: the all-reduce costs nothing.
  for (auto [d, cores] : {std::pair{4, 2}, {3, 2}, {5, 1}, {2, 2}, {3, 4}}) {
    const int m = 4;
    auto c = equal_stage_cluster(1, d, m, 3);
    c.costs.device.cores = cores;
    double slowdown = std::max(1.0, double(d) / cores);
    CHECK(iteration(c) == doctest::Approx(m * microbatch_work(c) * slowdown).epsilon(1e-9));
  }
}

TEST_CASE("Cores that slow each other when all are busy stretch a shared step by that much") {
  // d >= C replicas keep every core busy the whole step: each job runs at C/d
  // of its speed, over 1 + shared_slowdown.
  for (auto [d, cores] : {std::pair{4, 2}, {2, 2}, {6, 3}}) {
    const int m = 4;
    auto c = equal_stage_cluster(1, d, m, 2);
    c.costs.device.cores = cores;
    c.costs.device.shared_slowdown = 0.1;
    CHECK(iteration(c) == doctest::Approx(m * microbatch_work(c) * d / cores * 1.1).epsilon(1e-9));
  }
  // One replica alone on two cores computes at full speed.
  auto alone = equal_stage_cluster(1, 1, 4, 2);
  alone.costs.device.cores = 2;
  alone.costs.device.shared_slowdown = 0.1;
  CHECK(iteration(alone) == doctest::Approx(4 * microbatch_work(alone)).epsilon(1e-9));
}

TEST_CASE("4 stages on 2 cores lie between the unlimited pipeline and all the work over 2 cores") {
  auto c = equal_stage_cluster(4, 1, 8, 2);
  const double unlimited = iteration(c);
  c.costs.device.cores = 2;
  const double shared = iteration(c);
  CHECK(shared >= unlimited);
  CHECK(shared >= 4 * 8 * microbatch_work(c) / 2 * (1 - 1e-12));
  CHECK(shared <= unlimited * 2);
}

TEST_CASE("Cores enough for every stage actor change nothing: the bubble formula still holds") {
  for (auto [p, m] : {std::pair{4, 8}, {8, 16}}) {
    auto c = equal_stage_cluster(p, 1, m, 1);
    auto own = simulate_cluster(c);
    c.costs.device.cores = p;
    auto shared = simulate_cluster(c);
    REQUIRE(own);
    REQUIRE(shared);
    CHECK(shared->iteration_s == doctest::Approx(own->iteration_s).epsilon(1e-12));
    CHECK(shared->bubble_fraction == doctest::Approx(double(p - 1) / (m + p - 1)).epsilon(1e-9));
  }
}

TEST_CASE("The optimizer step holds a stage for parameters x its cost per parameter, once a step") {
  auto c = equal_stage_cluster(1, 1, 4, 3);
  const double without = iteration(c);
  c.costs.device.optimizer_per_param = 1e-9;
  const double params = stage_parameters(c.model, 2, true);
  CHECK(iteration(c) == doctest::Approx(without + params * 1e-9).epsilon(1e-9));
}

TEST_CASE("Each action pays the device's action overhead") {
  auto c = equal_stage_cluster(1, 1, 4, 2);
  const double without = iteration(c);
  c.costs.device.action_overhead = 1e-4;
  CHECK(iteration(c) == doctest::Approx(without + 2 * 4 * 1e-4).epsilon(1e-9));
}
