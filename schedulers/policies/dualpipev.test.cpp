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
