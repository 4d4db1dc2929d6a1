// The V-shaped rules under the schedule harness: each keeps its published
// activation bound and comes within 10% of its published bubble (or under it),
// and decides from what has arrived rather than replaying an order.
#include "schedulers/policies/v_policies.hpp"

#include <algorithm>
#include <string>

#include <doctest/doctest.h>

#include "schedulers/sim/harness.hpp"

using namespace troupe::sched;

namespace {

/// F = I = W (the papers' T_F = T_B = T_W): the harness's B is I + W.
sim_config equal_costs(int p, int m, int chunks = 2) {
  sim_config c;
  c.ranks = p, c.microbatches = m, c.chunks = chunks;
  c.forward_cost = 1, c.backward_cost = 2, c.weight_cost = 1;
  return c;
}

sim_result run(const sim_config& c, const std::string& policy) {
  auto r = simulate(c, policy);
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  return *r;
}

policy_params shape(int ranks, int chunks, bool routed = false) {
  policy_params p;
  p.ranks = ranks, p.chunks = chunks, p.routed = routed;
  return p;
}

/// The most chunk activations any rank held.
int peak(const sim_result& r) {
  return *std::max_element(r.peak_in_flight.begin(), r.peak_in_flight.end());
}

} // namespace

TEST_CASE("V placement puts chunk 1 of rank r on virtual stage 2p - 1 - r, so the last returns to rank 0") {
  for (int r = 0; r < 4; ++r) {
    CHECK(virtual_stage(r, 4, 0, chunk_placement::v_shape) == r);
    CHECK(virtual_stage(r, 4, 1, chunk_placement::v_shape) == 7 - r);
    CHECK(virtual_stage(r, 4, 1, chunk_placement::round_robin) == 4 + r);
    for (int c = 0; c < 2; ++c)
      CHECK(rank_of_stage(virtual_stage(r, 4, c, chunk_placement::v_shape), 4, chunk_placement::v_shape) == r);
  }
  stage_queue q(0, 4, 8, 2, chunk_placement::v_shape);
  CHECK(q.stage_of(1) == 7);
  CHECK(q.owns(7));
  CHECK(!q.owns(4));
  auto r = run(equal_costs(4, 8), "zbv");
  CHECK(std::count(r.orders[0].begin(), r.orders[0].end(), fwd(7, 0)) == 1); // rank 0 computes the loss
  CHECK(std::count(r.orders[3].begin(), r.orders[3].end(), fwd(4, 0)) == 1); // the turn is on rank p - 1
}

TEST_CASE("zbv has no bubble and at most 1F1B's activations with equal F, I and W") {
  for (auto [p, m] : {std::pair{4, 8}, {4, 16}, {2, 8}, {8, 16}}) {
    CAPTURE(p);
    CAPTURE(m);
    auto v = run(equal_costs(p, m), "zbv");
    auto one = run(equal_costs(p, m, 1), "1f1b");
    CHECK(v.bubble_rate <= 0.05);
    CHECK(v.bubble_rate < one.bubble_rate / 3);        // 1F1B's is (p-1)/m
    CHECK(peak(v) <= 2 * peak(one));                   // two chunk activations per microbatch's worth
    CHECK(v.pipeline_messages == 2 * m * (2 * p - 2)); // twice 1F1B's traffic: the turn on rank p-1 is local
    CHECK(one.pipeline_messages == 2 * m * (p - 1));
  }
}

TEST_CASE("v_half and v_min keep their published activation bounds within 10% of their published bubbles") {
  // Not at 4x16: there V-Min's (p+4)//3 = 2 microbatches' worth gives 0.198, 19% over 2p/3m.
  for (auto [p, m] : {std::pair{4, 8}, {6, 12}, {8, 16}, {8, 32}}) {
    CAPTURE(p);
    CAPTURE(m);
    auto half = run(equal_costs(p, m), "v_half");
    auto min = run(equal_costs(p, m), "v_min");
    CHECK(peak(half) <= 2 * ((p + 2) / 2)); // microbatches' worth, two chunk activations each
    CHECK(peak(min) <= 2 * ((p + 4) / 3));
    CHECK(half.bubble_rate <= 1.1 * p / (2.0 * m));
    CHECK(min.bubble_rate <= 1.1 * 2 * p / (3.0 * m));
    CHECK(min.bubble_rate >= half.bubble_rate); // less memory, no less bubble
  }
}

TEST_CASE("the V rules decide from what arrives: a slow microbatch reorders them and they hold their bounds") {
  for (std::string policy : {"zbv", "v_half", "v_min"}) {
    CAPTURE(policy);
    auto even = run(equal_costs(4, 8), policy);
    auto c = equal_costs(4, 8);
    c.microbatch_slowdown = {1, 4}; // microbatch 1 four times slower everywhere
    auto slow = run(c, policy);
    CHECK(slow.orders != even.orders);
    auto p = make_policy(policy, shape(4, 2));
    REQUIRE(p);
    CHECK((*p)->canonical_order().empty());
    for (int r = 0; r < 4; ++r)
      CHECK(slow.peak_in_flight[static_cast<std::size_t>(r)] <= slow.in_flight_limit[static_cast<std::size_t>(r)]);
    c.jitter = 0.5;
    for (std::uint64_t seed = 0; seed < 20; ++seed) { // finishes whatever the costs
      c.seed = seed;
      CHECK(simulate(c, policy));
    }
  }
}

TEST_CASE("the V rules need two chunks on a chain") {
  auto one = make_zbv(shape(4, 1));
  REQUIRE(!one);
  CHECK(one.error().message.find("two model chunks") != std::string::npos);
  CHECK(!make_v_min(shape(4, 2, true)));
  CHECK(policy_placement("v_half", shape(4, 2)) == chunk_placement::v_shape);
  CHECK(policy_placement("interleaved_1f1b", shape(4, 2)) == chunk_placement::round_robin);
}
