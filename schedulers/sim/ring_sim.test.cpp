// The data-parallel ring under the simulated clock (ring_sim.hpp): it costs the
// hand formula of its messages on a link, each member sends 2(n-1)/n of the
// gradients, buckets leave as the backward completes them (so their order
// changes the time), and ZeRO's shard steps its slice between scatter and gather.
#include "schedulers/sim/cluster_sim.hpp"

#include <cmath>

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace troupe::sched;

namespace {

/// `replicas` replicas of one stage of 2 layers, one microbatch, on one node
/// whose links take `latency` and `bandwidth`.
cluster_config one_stage(int replicas, double latency, double bandwidth) {
  auto c = equal_stage_cluster(1, replicas, 1, 2);
  c.costs.network = {1024, {latency, bandwidth}, {}};
  c.costs.device.optimizer_per_param = 0;
  return c;
}

double parameters(const cluster_config& c) {
  return std::round(stage_parameters(c.model, c.model.layers, true));
}

/// The stage's backward: when its last pass ends, it has written every gradient.
double backward_s(const cluster_config& c) {
  return costs_of(c.model, c.costs, c.model.layers, false, true).backward + c.costs.device.action_overhead;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

} // namespace

TEST_CASE("A ring of one bucket takes 2(n-1) hops of its chunk over the link, and each member sends 2(n-1)/n of it") {
  const double latency = 2e-5, bandwidth = 1e9;
  auto alone = simulate_cluster(one_stage(1, latency, bandwidth));
  REQUIRE(alone);
  for (int n : {2, 4, 32}) { // 32: run as a ring of 16 members, each hop standing for 31/15 of the real ones
    CAPTURE(n);
    auto c = one_stage(n, latency, bandwidth);
    c.ring.bucket_bytes = std::int64_t{1} << 40;
    auto r = simulate_cluster(c);
    REQUIRE_MESSAGE(r, r.error().message);
    // The loss rides in the bucket: one value more than the parameters.
    const auto chunk = ceil_div(static_cast<std::int64_t>(parameters(c)) + 1, n);
    const double ring = 2.0 * (n - 1) * (4.0 * static_cast<double>(chunk) / bandwidth + latency);
    CHECK(r->positions[0].allreduce_s == doctest::Approx(ring).epsilon(1e-9));
    CHECK(r->sync_wait_s == doctest::Approx(ring).epsilon(1e-9));
    // The step is longer by the ring, less the little of the step's messages it hides.
    CHECK(r->iteration_s - alone->iteration_s <= ring);
    CHECK(r->iteration_s - alone->iteration_s == doctest::Approx(ring).epsilon(1e-3));
    const double sent = r->ring_bytes_by_actor.at(fmt::format("r{}s0_ar", n - 1));
    CHECK(sent == doctest::Approx(2.0 * 2 * (n - 1) * 4 * static_cast<double>(chunk)).epsilon(1e-12)); // 2 steps
    CHECK(sent / 2 == doctest::Approx(2.0 * (n - 1) / n * 4 * parameters(c)).epsilon(1e-4));
    CHECK(r->allreduce_bytes == doctest::Approx(n * sent / 2).epsilon(1e-12));
  }
}

TEST_CASE("Buckets leave as the backward completes them: the first one's ring runs beside the rest of the pass") {
  // Two parameters of E values, a bucket each: the pass writes the second one
  // first, halfway through; its ring (2 hops of E/2 values) ends before the pass
  // does, and the step waits only for the last bucket's. Without overlap both
  // leave at the end and queue on the link.
  auto c = one_stage(2, 0, 1);
  const std::int64_t e = 100000;
  const double b = backward_s(c), a = 4.0 * e / 2 / (b / 8); // a hop's wire time is b/8
  c.costs.network.within_node = {b / 100, a};
  c.ring.tensors = {{{e, e}}};
  c.ring.bucket_bytes = 4 * e;
  auto r = simulate_cluster(c);
  REQUIRE_MESSAGE(r, r.error().message);
  const double first = 4.0 * e / 2 / a, last = 4.0 * static_cast<double>(ceil_div(e + 1, 2)) / a, l = b / 100;
  CHECK(r->sync_wait_s == doctest::Approx(2 * (last + l)).epsilon(1e-9));
  c.ring.overlap = false;
  auto after = simulate_cluster(c);
  REQUIRE(after);
  // Both leave at the pass's end: the last bucket's hops wait behind the first's on each link.
  CHECK(after->sync_wait_s == doctest::Approx(2 * first + 2 * last + l).epsilon(1e-9));
  CHECK(after->iteration_s - r->iteration_s == doctest::Approx(2 * first - l).epsilon(1e-6));
}

TEST_CASE("The order the backward completes the buckets in changes the step: the large one first overlaps it") {
  auto c = one_stage(2, 0, 1);
  const std::int64_t e = 100000;
  const double b = backward_s(c);
  c.costs.network.within_node = {b / 100, 4.0 * e / (b / 16)}; // the large bucket's ring fits in a quarter pass
  c.ring.bucket_bytes = 4 * e;
  c.ring.tensors = {{{e, 3 * e}}}; // the pass writes the large parameter first
  auto large_first = simulate_cluster(c);
  c.ring.tensors = {{{3 * e, e}}}; // ... or last
  auto large_last = simulate_cluster(c);
  REQUIRE(large_first);
  REQUIRE(large_last);
  CHECK(large_first->allreduce_bytes == doctest::Approx(large_last->allreduce_bytes).epsilon(1e-12));
  CHECK(large_last->sync_wait_s > 2 * large_first->sync_wait_s);
  CHECK(large_last->iteration_s > large_first->iteration_s);
}

TEST_CASE("ZeRO's shards reduce-scatter, step their slice and all-gather: the bytes of a ring, 1/n of the optimizer") {
  auto c = one_stage(2, 1e-5, 1e9);
  c.ring.bucket_bytes = std::int64_t{1} << 40;
  c.costs.device.optimizer_per_param = 1e-7; // the optimizer dominates the step
  auto ddp = simulate_cluster(c);
  c.ring.zero = 1;
  auto zero = simulate_cluster(c);
  REQUIRE(ddp);
  REQUIRE_MESSAGE(zero, zero.error().message);
  const auto p = static_cast<std::int64_t>(parameters(c));
  // The parameters' bucket, and the loss in a bucket of its own: (n-1) hops each way.
  const double per_step = 2.0 * 4 * static_cast<double>(ceil_div(p, 2)) + 2.0 * 4;
  CHECK(zero->ring_bytes_by_actor.at("r1s0_os") == doctest::Approx(2 * per_step).epsilon(1e-12));
  const double saved = 1e-7 * static_cast<double>(p - ceil_div(p, 2)); // each shard steps half the parameters
  CHECK(ddp->iteration_s - zero->iteration_s == doctest::Approx(saved).epsilon(0.01));
}
