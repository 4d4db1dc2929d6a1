// The cluster driver: equal stages reproduce the schedules' bubble formulas,
// the data-parallel ring costs what its algorithm sends, and replicas scale.
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

TEST_CASE("The data-parallel ring adds 2(n-1)/n gradient bytes/bandwidth + 2(n-1) latencies to a step") {
  auto c = equal_stages(1, 1);
  c.costs.network = {8, {5e-6, 300e9}, {1e-5, 25e9}};
  auto alone = simulate_cluster(c);
  REQUIRE(alone);
  for (int n : {2, 8, 32}) {
    c.replicas = n; // 8 replicas fill a node; 32 span four
    auto r = simulate_cluster(c);
    REQUIRE_MESSAGE(r, r.error().message);
    double bytes = 4 * stage_parameters(c.model, c.model.layers, true);
    link_spec slowest = n > 8 ? link_spec{1e-5, 25e9} : link_spec{5e-6, 300e9};
    double ring = 2.0 * (n - 1) / n * bytes / slowest.bandwidth + 2.0 * (n - 1) * slowest.latency;
    CHECK(r->positions[0].allreduce_s == doctest::Approx(ring).epsilon(1e-12));
    CHECK(r->iteration_s - alone->iteration_s == doctest::Approx(ring).epsilon(1e-9));
    CHECK(r->sync_wait_s == doctest::Approx(ring).epsilon(1e-9));
  }
}

TEST_CASE("The ring's slowest link is the widest boundary its replicas cross: node, then site (wide area)") {
  auto c = equal_stages(1, 1);
  const link_spec node{5e-6, 300e9}, nodes{1e-5, 25e9}, wide{30e-3, 1.25e9};
  c.costs.network = {8, node, nodes, wide};
  c.replicas = 32; // devices 0..31: four nodes of 8
  double bytes = 4 * stage_parameters(c.model, c.model.layers, true);
  auto ring = [&](const link_spec& l) { return 2.0 * 31 / 32 * bytes / l.bandwidth + 2.0 * 31 * l.latency; };
  for (auto [per_site, slowest] : {std::pair{0, nodes}, {4, nodes}, {2, wide}, {1, wide}}) {
    c.costs.network.nodes_per_site = per_site;
    auto r = simulate_cluster(c);
    REQUIRE_MESSAGE(r, r.error().message);
    CHECK_MESSAGE(r->positions[0].allreduce_s == doctest::Approx(ring(slowest)).epsilon(1e-12), per_site);
    CHECK(r->sync_wait_s == doctest::Approx(ring(slowest)).epsilon(1e-9));
  }
  c.replicas = 8; // one node, whatever the sites
  c.costs.network.nodes_per_site = 1;
  auto r = simulate_cluster(c);
  REQUIRE(r);
  CHECK(r->positions[0].allreduce_s == doctest::Approx(2.0 * 7 / 8 * bytes / node.bandwidth + 14 * node.latency));
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
