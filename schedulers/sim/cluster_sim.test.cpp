// The cluster driver: equal stages reproduce the schedules' bubble formulas,
// and replicas scale (the data-parallel ring: ring_sim.test.cpp).
#include "schedulers/sim/cluster_sim.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace troupe::sched;

namespace {

/// p stages of `per` layers each (v chunks of per/v layers, interleaved), no
/// head, free links: every stage costs the same.
cluster_config equal_stages(int p, int m, int v = 1, const char* policy = "1f1b", int per = 2) {
  cluster_config c;
  c.model = {p * per, 256, 4, 128, 256, 1};
  c.costs.device = *device_preset("a100_80gb");
  c.costs.network = {8, {}, {}};
  c.costs.count_head = false;
  c.microbatches = m;
  c.policy = policy;
  const int chunk = per / v;
  for (int s = 0; s < p; ++s) {
    route_stage st{0, fmt::format("s{}", s), {}};
    for (int k = 0; k < v; ++k) {
      int first = (k * p + s) * chunk;
      st.chunks.emplace_back(first, first + chunk);
    }
    c.stages.push_back(std::move(st));
  }
  return c;
}

} // namespace

TEST_CASE("Equal stages give 1F1B's bubble (p-1)/(m+p-1) exactly") {
  for (auto [p, m] : {std::pair{4, 8}, {2, 4}, {8, 16}, {4, 4}}) {
    auto r = simulate_cluster(equal_stages(p, m));
    REQUIRE_MESSAGE(r, r.error().message);
    CHECK(r->bubble_fraction == doctest::Approx(double(p - 1) / (m + p - 1)).epsilon(1e-12));
  }
}

TEST_CASE("Equal stages give the interleaved bubble ((p-1)/v)/(m+(p-1)/v) exactly") {
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, {4, 16, 2}, {8, 16, 2}, {4, 8, 4}}) {
    auto r = simulate_cluster(equal_stages(p, m, v, "interleaved_1f1b", 4));
    REQUIRE_MESSAGE(r, r.error().message);
    double q = double(p - 1) / v;
    CHECK(r->bubble_fraction == doctest::Approx(q / (m + q)).epsilon(1e-12));
  }
}

TEST_CASE("Equal stages give ZB-H1's bubble (p-1)/(3m+p-1) exactly (F = I = W)") {
  for (auto [p, m] : {std::pair{4, 8}, {2, 4}, {8, 16}}) {
    auto r = simulate_cluster(equal_stages(p, m, 1, "zb_h1"));
    REQUIRE_MESSAGE(r, r.error().message);
    CHECK(r->bubble_fraction == doctest::Approx(double(p - 1) / (3 * m + p - 1)).epsilon(1e-12));
  }
}

TEST_CASE("Replicas run the same schedule in parallel: steps, devices and FLOP/s scale, the bubble stays") {
  auto c = equal_stages(4, 8);
  c.steps = 3;
  auto one = simulate_cluster(c);
  c.replicas = 16;
  c.costs.network = {8, {}, {}};
  auto many = simulate_cluster(c);
  REQUIRE(one);
  REQUIRE(many);
  CHECK(many->devices == 64);
  CHECK(many->iteration_s == doctest::Approx(one->iteration_s));
  CHECK(many->bubble_fraction == doctest::Approx(3.0 / 11));
  CHECK(many->tflops_per_device() == doctest::Approx(one->tflops_per_device()));
  CHECK(many->tokens_per_s() == doctest::Approx(16 * one->tokens_per_s()));
}

TEST_CASE("ZB-H1's stages wait for the global norm before their optimizer step; post-validation steps in that wait") {
  // With a vocabulary head on the last stage that stage finishes its step after
  // stage 0, which reduces: stage 0 waits for its norm before it may step.
  auto c = equal_stages(4, 8, 1, "zb_h1");
  c.steps = 4;
  c.model.vocab = 50304, c.costs.count_head = true;
  c.costs.device.optimizer_per_param = 2e-10;
  auto time = [&](bool reduce, bool post) {
    c.reduce_norm = reduce, c.post_validate = post;
    auto r = simulate_cluster(c);
    if (!r)
      FAIL(r.error().message);
    return r->iteration_s;
  };
  double none = time(false, false), sync = time(true, false), post = time(true, true);
  CHECK(sync > none * (1 + 1e-3)); // the reduction is on the critical path
  CHECK(post == doctest::Approx(none).epsilon(1e-12));
  c.ring.zero = 1;
  c.post_validate = true;
  CHECK(!simulate_cluster(c)); // ZeRO's shards keep nothing to roll back to
}
