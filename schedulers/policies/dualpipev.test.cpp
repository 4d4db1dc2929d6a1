// DualPipeV as a rule: DeepSeek's per-rank phases, its published bubble and
// memory, the F&B action, and its refusal of too few microbatches.
#include "schedulers/policies/v_policies.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "schedulers/sim/harness.hpp"

using namespace troupe::sched;

namespace {

/// Per chunk F = 1, B = 2 (I = W = 1), as DeepSeek's table counts them.
sim_config costs(int ranks, int microbatches, double overlap = 0) {
  sim_config c;
  c.ranks = ranks, c.microbatches = microbatches, c.chunks = 2;
  c.forward_cost = 2, c.backward_cost = 4, c.weight_cost = 2, c.overlap_cost = overlap; // a chunk costs half
  return c;
}

sim_result run(const sim_config& c) {
  auto r = simulate(c, "dualpipev");
  REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
  return *r;
}

/// A rank's actions as DeepSeek names its phases' parts: F0, F1, B0, B1 (a
/// whole backward or its I), W, and an F&B as F0B1 or F1B0.
std::vector<std::string> tokens(const std::vector<action>& order, int ranks) {
  std::vector<std::string> out;
  auto chunk = [&](int stage) { return stage < ranks ? 0 : 1; };
  for (const auto& a : order)
    switch (a.kind) {
    case op_kind::forward:
      out.push_back(fmt::format("F{}", chunk(a.stage)));
      break;
    case op_kind::backward:
    case op_kind::input_grad:
      out.push_back(fmt::format("B{}", chunk(a.stage)));
      break;
    case op_kind::weight_grad:
      out.push_back("W");
      break;
    case op_kind::overlap:
      out.push_back(fmt::format("F{}B{}", chunk(a.stage), chunk(a.back_stage)));
      break;
    }
  return out;
}

/// DeepSeek's DualPipeV phases of rank r (REFERENCES.md): each phase's parts, repeated its count.
std::vector<std::string> deepseek_phases(int r, int R, int M) {
  std::vector<std::string> out;
  auto add = [&](std::vector<std::string> phase, int times) {
    for (int i = 0; i < times; ++i)
      out.insert(out.end(), phase.begin(), phase.end());
  };
  add({"F0"}, 2 * (R - r - 1));
  add({"F0", "F1"}, r + 1);
  add({"B1", "W", "F1"}, R - r - 1);
  add({"F0B1", "F1B0"}, M - 2 * R + r + 1);
  add({"B1", "F1B0"}, R - r - 1);
  add({"B1", "B0"}, r + 1);
  add({"W", "B0"}, R - r - 1);
  add({"W"}, r + 1);
  return out;
}

} // namespace

TEST_CASE("dualpipev at 4 ranks x 16 microbatches runs DeepSeek's phases on every rank") {
  auto r = run(costs(4, 16));
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    CHECK(fmt::format("{}", fmt::join(tokens(r.orders[rank], 4), " ")) ==
          fmt::format("{}", fmt::join(deepseek_phases(rank, 4, 16), " ")));
  }
}

TEST_CASE("dualpipev's idle time is DeepSeek's (PP/2 - 1)(F&B + B - 3W) where it runs DeepSeek's phases") {
  // Measured: with F = I = W the rule gives DeepSeek's phases up to 4 ranks
  // (at 6 and 8 ranks, or I != W at 4, arrivals drift from them and rank 0
  // idles up to 2-4x the formula; see the README's schedule table).
  for (int ranks : {2, 3, 4})
    for (int m : {2 * ranks, 4 * ranks}) {
      CAPTURE(ranks);
      CAPTURE(m);
      auto r = run(costs(ranks, m));
      for (int rank = 0; rank < ranks; ++rank)
        CHECK(tokens(r.orders[rank], ranks) == deepseek_phases(rank, ranks, m));
      // Rank 0, which runs the longest span: time in it not spent computing.
      double idle = r.timeline[0].back().end - r.timeline[0].front().start;
      for (const auto& t : r.timeline[0])
        idle -= t.end - t.start;
      double f_and_b = 3, b = 2, w = 1; // per chunk: F&B = F + B here
      CHECK(idle == doctest::Approx((ranks - 1) * (f_and_b + b - 3 * w)).epsilon(0.01));
    }
}

TEST_CASE("dualpipev fuses a forward with the other chunk's backward into one action and holds 2p + 1 activations") {
  auto r = run(costs(4, 16));
  for (int rank = 0; rank < 4; ++rank) {
    CAPTURE(rank);
    int fused = 0;
    for (const auto& a : r.orders[rank])
      if (a.kind == op_kind::overlap) {
        ++fused;
        CHECK((a.stage < 4) != (a.back_stage < 4)); // one chunk's forward, the other's backward
        CHECK(a.microbatch != a.back_microbatch);
      }
    CHECK(fused == 2 * (16 - 8 + rank + 1) + (4 - rank - 1)); // the F0B1/F1B0 pairs and B1 F1B0's
    CHECK(r.peak_in_flight[rank] == 2 * 4 + 1);
  }
  // An F&B costs what --costs says, not F + B, when given.
  auto cheaper = run(costs(4, 16, 4.5));
  CHECK(cheaper.makespan < r.makespan);
  for (const auto& t : cheaper.timeline[0])
    if (t.what.kind == op_kind::overlap)
      CHECK(t.end - t.start == doctest::Approx(4.5 / 2));
}

TEST_CASE("dualpipev refuses fewer than 2 x ranks microbatches and more or fewer than two chunks") {
  auto few = simulate(costs(4, 7), "dualpipev");
  REQUIRE(!few);
  CHECK(few.error().message.find("at least 2 x stages = 8 microbatches") != std::string::npos);
  policy_params p;
  p.ranks = 4, p.chunks = 1;
  auto one = make_dualpipev(p);
  REQUIRE(!one);
  CHECK(one.error().message.find("two model chunks") != std::string::npos);
  p.chunks = 2, p.microbatches = 8;
  CHECK(make_dualpipev(p));
}
