// The simulated clock reproduces the published schedules: orders, bubble
// fractions and memory bounds, with the same policy objects the actors use.
#include "schedulers/sim/harness.hpp"

#include <algorithm>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "schedulers/policies/orders.hpp"

using namespace troupe::sched;

namespace {

sim_config shape(int p, int m, int v = 1, double f = 1, double b = 2, double w = 1) {
  sim_config c;
  c.ranks = p;
  c.microbatches = m;
  c.chunks = v;
  c.forward_cost = f;
  c.backward_cost = b;
  c.weight_cost = w;
  return c;
}

std::string order_text(const sim_result& r, int rank) {
  return to_string(std::span<const action>(r.orders[rank]));
}

// Activations held on each rank at every instant, recomputed from the timeline.
std::vector<int> peak_from_timeline(const sim_result& r) {
  std::vector<int> peaks;
  for (const auto& rank : r.timeline) {
    std::vector<std::pair<double, int>> events; // a release sorts before a take at one instant
    for (const auto& t : rank) {
      if (t.what.kind == op_kind::forward)
        events.push_back({t.start, +1});
      else if (is_backward_input(t.what.kind))
        events.push_back({t.end, -1});
    }
    std::sort(events.begin(), events.end());
    int now = 0, peak = 0;
    for (auto [time, d] : events)
      peak = std::max(peak, now += d);
    peaks.push_back(peak);
  }
  return peaks;
}

// Deferred W passes on each rank at every instant (an I's end adds one, a W's
// start takes it), recomputed from the timeline; at one instant the I's end counts first.
std::vector<int> deferred_peak_from_timeline(const sim_result& r) {
  std::vector<int> peaks;
  for (const auto& rank : r.timeline) {
    std::vector<std::pair<double, int>> events; // (time, -change): an addition sorts first
    for (const auto& t : rank) {
      if (t.what.kind == op_kind::input_grad)
        events.push_back({t.end, -1});
      else if (t.what.kind == op_kind::weight_grad)
        events.push_back({t.start, +1});
    }
    std::sort(events.begin(), events.end());
    int now = 0, peak = 0;
    for (auto [time, d] : events)
      peak = std::max(peak, now -= d);
    peaks.push_back(peak);
  }
  return peaks;
}

} // namespace

TEST_CASE("1F1B with 4 stages and 8 microbatches runs the canonical order on every rank") {
  for (double b : {1.0, 2.0}) { // equal F and B, and B = 2F as in the papers
    auto r = simulate(shape(4, 8, 1, 1, b), "1f1b");
    REQUIRE(r);
    CHECK(order_text(*r, 0) == "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7");
    CHECK(order_text(*r, 3) == "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7");
    CHECK(order_text(*r, 1) == "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1F6 1B4 1F7 1B5 1B6 1B7");
  }
}

TEST_CASE("GPipe runs all forwards and then all backwards in microbatch order") {
  auto r = simulate(shape(4, 8), "gpipe");
  REQUIRE(r);
  for (int rank = 0; rank < 4; ++rank) {
    std::string want;
    for (char k : {'F', 'B'})
      for (int mb = 0; mb < 8; ++mb)
        want += fmt::format("{}{}{}{}", want.empty() ? "" : " ", rank, k, mb);
    CHECK(order_text(*r, rank) == want);
  }
}

TEST_CASE("GPipe and 1F1B leave a bubble of exactly (p-1)/(m+p-1) without latency") {
  // bubble fraction = idle / (p * makespan); it does not depend on the F:B ratio.
  for (auto [p, m] : {std::pair{4, 8}, {2, 8}, {4, 16}, {8, 8}, {3, 5}})
    for (double b : {1.0, 2.0})
      for (const char* policy : {"gpipe", "1f1b"}) {
        auto r = simulate(shape(p, m, 1, 1, b), policy);
        REQUIRE(r);
        CAPTURE(policy);
        CAPTURE(p);
        CAPTURE(m);
        CHECK(r->bubble_fraction == doctest::Approx(double(p - 1) / (m + p - 1)).epsilon(1e-12));
        CHECK(r->makespan == doctest::Approx((m + p - 1) * (1 + b)));
      }
}

TEST_CASE("interleaving v chunks divides the bubble time by v") {
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, {4, 16, 2}, {4, 8, 4}, {8, 16, 2}}) {
    auto plain = simulate(shape(p, m), "1f1b");
    auto inter = simulate(shape(p, m, v), "interleaved_1f1b");
    REQUIRE(plain);
    REQUIRE(inter);
    CHECK(inter->bubble_fraction == doctest::Approx(theoretical_bubble(p, m, v)).epsilon(1e-12));
    double idle_plain = plain->makespan - m * 3.0, idle_inter = inter->makespan - m * 3.0;
    CHECK(idle_plain / idle_inter == doctest::Approx(v));
  }
}

TEST_CASE("ZB-H1 leaves a third of 1F1B's idle time when F, I and W cost the same") {
  for (auto [p, m] : {std::pair{4, 8}, {4, 16}, {8, 16}, {2, 4}}) {
    auto one = simulate(shape(p, m), "1f1b"); // B = I + W = 2
    auto zb = simulate(shape(p, m), "zb_h1");
    REQUIRE(one);
    REQUIRE(zb);
    double busy = m * 3.0;
    CHECK((zb->makespan - busy) * 3 == doctest::Approx(one->makespan - busy));
    CHECK(zb->makespan - busy == doctest::Approx(p - 1)); // (p-1)(F + I - W), Qi et al. 2023
    CHECK(zb->bubble_fraction < 0.45 * one->bubble_fraction);
  }
}

TEST_CASE("the rules reproduce the published GPipe and 1F1B orders under equal costs") {
  // 2x4, 4x8 and 8x16 are the shapes the issue names; the others are edges (m < p, m = p, odd m).
  for (auto [p, m] : {std::pair{2, 4}, {4, 8}, {8, 16}, {2, 6}, {4, 4}, {4, 3}}) {
    auto gp = simulate(shape(p, m), "gpipe");
    auto one = simulate(shape(p, m), "1f1b");
    REQUIRE(gp);
    REQUIRE(one);
    for (int r = 0; r < p; ++r) {
      CAPTURE(p);
      CAPTURE(m);
      CAPTURE(r);
      CHECK(gp->orders[r] == gpipe_order(r, p, m));
      CHECK(one->orders[r] == one_f_one_b_order(r, p, m));
      CHECK(one->peak_in_flight[r] <= p - r);
    }
    CHECK(gp->bubble_fraction == doctest::Approx(theoretical_bubble(p, m)).epsilon(1e-12));
    CHECK(one->bubble_fraction == doctest::Approx(theoretical_bubble(p, m)).epsilon(1e-12));
  }
}

TEST_CASE("the ZB-H1 rule reproduces the published order and its 0.1111 bubble within its bounds") {
  for (auto [p, m] : {std::pair{4, 8}, {2, 4}, {2, 6}, {4, 4}, {8, 16}}) {
    auto zb = simulate(shape(p, m), "zb_h1"); // F, I, W = 1, 1, 1
    REQUIRE(zb);
    for (int r = 0; r < p; ++r) {
      CAPTURE(p);
      CAPTURE(m);
      CAPTURE(r);
      CHECK(zb->orders[r] == zb_h1_order(r, p, m));
      CHECK(zb->peak_in_flight[r] <= p - r);
      CHECK(zb->peak_deferred_weight[r] <= r + 1);
    }
  }
  auto zb = simulate(shape(4, 8), "zb_h1");
  REQUIRE(zb);
  CHECK(zb->bubble_fraction == doctest::Approx(1.0 / 9)); // 0.1111: 3 idle units per rank in 27
  CHECK(zb->peak_in_flight == std::vector<int>{4, 3, 2, 1});
  CHECK(zb->peak_deferred_weight == std::vector<int>{1, 2, 3, 4});
  CHECK(deferred_peak_from_timeline(*zb) == std::vector<int>{1, 2, 3, 4});
}

TEST_CASE("the interleaved rule, deciding from what has arrived, runs Megatron-LM's order when all costs are equal") {
  // No sort key of Megatron's groups of p, yet the same actions in the same
  // order, at F = B and at B = 2F. At 4x16x2 and 8x16x2 rank 0 waits for a
  // later chunk as Megatron does: the next p microbatches enter only once the
  // last p started their last chunk. At m = p every forward runs first.
  for (double b : {1.0, 2.0})
    for (auto [p, m, v] : {std::tuple{2, 4, 2},
                           {2, 8, 2},
                           {3, 6, 2},
                           {4, 8, 2},
                           {4, 12, 2},
                           {4, 16, 2},
                           {4, 8, 3},
                           {4, 8, 4},
                           {8, 16, 2},
                           {8, 32, 2},
                           {8, 16, 3}}) {
      auto il = simulate(shape(p, m, v, 1, b), "interleaved_1f1b");
      REQUIRE(il);
      for (int r = 0; r < p; ++r) {
        CAPTURE(b);
        CAPTURE(p);
        CAPTURE(m);
        CAPTURE(v);
        CAPTURE(r);
        CHECK(il->orders[r] == *interleaved_order(r, p, m, v));
        CHECK(il->peak_in_flight[r] <= interleaved_in_flight_limit(r, p, m, v));
      }
    }
}

TEST_CASE("no rule policy holds an order list, and one object serves steps of any microbatch count") {
  for (std::string name : {"gpipe", "1f1b", "zb_h1", "interleaved_1f1b"}) {
    int v = name == "interleaved_1f1b" ? 2 : 1;
    std::vector<policy_ptr> kept; // one policy per rank, reused for every step
    for (int r = 0; r < 4; ++r) {
      policy_params params;
      params.rank = r, params.ranks = 4, params.chunks = v;
      auto made = make_policy(name, params);
      REQUIRE(made);
      CHECK((*made)->canonical_order().empty());
      kept.push_back(std::move(*made));
    }
    for (int m : {8, 4, 12, 8}) {
      auto r = simulate(shape(4, m, v), [&](int rank) -> expected<policy_ptr> {
        struct borrowed : stage_policy { // forwards to the kept object
          stage_policy* p;
          explicit borrowed(stage_policy* x) : p(x) {}
          std::string_view name() const override { return p->name(); }
          bool splits_backward() const override { return p->splits_backward(); }
          int in_flight_limit() const override { return p->in_flight_limit(); }
          std::optional<action> next(const stage_queue& q) override { return p->next(q); }
        };
        return policy_ptr{new borrowed(kept[rank].get())};
      });
      REQUIRE(r);
      auto fresh = simulate(shape(4, m, v), name);
      REQUIRE(fresh);
      CAPTURE(name);
      CAPTURE(m);
      CHECK(r->orders == fresh->orders);
      if (name == "1f1b")
        for (int rank = 0; rank < 4; ++rank)
          CHECK(r->orders[rank] == one_f_one_b_order(rank, 4, m));
    }
  }
}

TEST_CASE("the in-flight bound and ZB-H1's deferred-W bound hold at every instant, also under stragglers") {
  for (const char* policy : {"1f1b", "interleaved_1f1b", "zb_h1"}) {
    for (std::uint64_t seed = 0; seed < 20; ++seed) {
      sim_config c = shape(4, 8, std::string_view{policy} == "interleaved_1f1b" ? 2 : 1);
      c.jitter = 0.3;
      c.seed = seed;
      c.latency = 0.05;
      c.rank_slowdown = {1, 1, 1.5, 1};
      auto r = simulate(c, policy);
      REQUIRE(r);
      auto peaks = peak_from_timeline(*r);
      for (int rank = 0; rank < 4; ++rank) {
        CAPTURE(policy);
        CAPTURE(rank);
        CHECK(peaks[rank] <= r->in_flight_limit[rank]);
        CHECK(peaks[rank] == r->peak_in_flight[rank]);
        if (std::string_view{policy} != "interleaved_1f1b")
          CHECK(r->in_flight_limit[rank] == 4 - rank);
        if (std::string_view{policy} == "zb_h1")
          CHECK(deferred_peak_from_timeline(*r)[rank] <= rank + 1);
      }
    }
  }
}

TEST_CASE("the same seed gives the same run, and jitter stays within its bounds") {
  sim_config c = shape(4, 8);
  c.jitter = 0.3;
  c.seed = 7;
  auto a = simulate(c, "zb_h1");
  auto b = simulate(c, "zb_h1");
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->makespan == b->makespan);
  CHECK(a->orders == b->orders);
  for (int mb = 0; mb < 8; ++mb) {
    double f = operation_cost(c, 0, fwd(0, mb));
    CHECK(f >= 0.7);
    CHECK(f <= 1.3);
  }
  c.seed = 8;
  auto other = simulate(c, "zb_h1");
  REQUIRE(other);
  CHECK(other->makespan != a->makespan);
}

TEST_CASE("slow ranks, slow microbatches and latency stretch the step") {
  auto base = simulate(shape(4, 8), "1f1b");
  REQUIRE(base);
  sim_config slow = shape(4, 8);
  slow.rank_slowdown = {1, 1, 1.5, 1};
  auto r = simulate(slow, "1f1b");
  REQUIRE(r);
  CHECK(r->makespan > base->makespan);
  CHECK(operation_cost(slow, 2, bwd(2, 0)) == doctest::Approx(3.0));
  sim_config mb = shape(4, 8);
  mb.microbatch_slowdown = {1, 1, 1, 4};
  CHECK(operation_cost(mb, 1, fwd(1, 3)) == doctest::Approx(4.0));
  sim_config lat = shape(4, 8);
  lat.latency = 0.5;
  auto l = simulate(lat, "1f1b");
  REQUIRE(l);
  CHECK(l->makespan >= base->makespan + 2 * 3 * 0.5); // the first microbatch crosses 3 links twice
}

namespace {

// Holds every activation it can and never runs a backward: the pipeline stalls.
struct hoarding_policy : stage_policy {
  std::string_view name() const override { return "hoarding"; }
  int in_flight_limit() const override { return 0; }
  std::optional<action> next(const stage_queue& q) override {
    if (!q.ready_forward(0).empty())
      return fwd(q.rank(), *q.ready_forward(0).begin());
    return std::nullopt;
  }
};

// Starts nothing before t = 5 and asks to be woken then (wake_at); GPipe's rule after.
struct patient_policy : stage_policy {
  std::string_view name() const override { return "patient"; }
  int in_flight_limit() const override { return 0; }
  std::optional<action> next(const stage_queue& q) override {
    if (q.now() < 5)
      return std::nullopt;
    if (!q.ready_forward(0).empty())
      return fwd(q.rank(), *q.ready_forward(0).begin());
    if (!q.ready_backward(0).empty())
      return bwd(q.rank(), *q.ready_backward(0).begin());
    return std::nullopt;
  }
  std::optional<double> wake_at(const stage_queue& q) const override {
    return q.now() < 5 ? std::optional<double>{5.0} : std::nullopt;
  }
};

} // namespace

TEST_CASE("a policy that asks to be woken is asked again then, though no message arrives") {
  // No built-in policy reads the clock; a plugin's may, and only wake_at lets it act without a message.
  auto r = simulate(shape(2, 2), [](int) -> expected<policy_ptr> { return policy_ptr{new patient_policy}; });
  REQUIRE(r);
  auto plain = simulate(shape(2, 2), "gpipe");
  REQUIRE(plain);
  CHECK(r->timeline[0].front().start == 5);
  CHECK(r->orders == plain->orders);
  CHECK(r->makespan == doctest::Approx(5 + plain->makespan));
}

TEST_CASE("the harness reports a stalled pipeline instead of hanging") {
  auto r = simulate(shape(2, 2), [](int) -> expected<policy_ptr> { return policy_ptr{new hoarding_policy}; });
  REQUIRE(!r);
  CHECK(r.error().message.find("stalled") != std::string::npos);
  CHECK(r.error().message.find("rank 0") != std::string::npos);
}

TEST_CASE("bad pipeline shapes and costs are rejected before anything runs") {
  CHECK(!simulate(shape(0, 8), "1f1b"));
  CHECK(!simulate(shape(4, 8, 1, -1), "1f1b"));
  CHECK(!simulate(shape(4, 8, 1, 1, 1, 1), "zb_h1")); // I = B - W would be 0
}

TEST_CASE("the interleaved rule runs microbatch counts that are not a multiple of the stages") {
  auto r = simulate(shape(4, 6, 2), "interleaved_1f1b"); // Megatron's list needs m % p == 0; the rule does not
  REQUIRE(r);
  for (int rank = 0; rank < 4; ++rank)
    CHECK(r->peak_in_flight[rank] <= r->in_flight_limit[rank]);
}
