// The straggler report: step-time statistics, the EWMA verdict that tells a
// chronic straggler from a one-off stall, the top-k order, and step times from spans.
#include "runtime/trace/step_stats.hpp"

#include <doctest/doctest.h>

using namespace troupe;

namespace {

/// Four stages of `steps` steps at 10 ms; `slow` takes `factor` times as long
/// in every step, `stalled` takes `stall` times as long in step `at` only.
std::vector<step_times> four_stages(int steps, int slow, double factor, int stalled, int at, double stall) {
  std::vector<step_times> out;
  for (int a = 0; a < 4; ++a) {
    step_times t{"s" + std::to_string(a), "stage", -1, {}};
    for (int s = 0; s < steps; ++s) {
      double ms = 10 * (a == slow ? factor : 1) * (a == stalled && s == at ? stall : 1);
      t.busy[s] = static_cast<std::int64_t>(ms * 1e6);
    }
    out.push_back(std::move(t));
  }
  return out;
}

} // namespace

TEST_CASE("a stage 3x slower every step is chronic and ranked first; a 20x stall of one step is not chronic") {
  auto r = analyze_step_times(four_stages(30, 2, 3.0, 1, 10, 20.0));
  REQUIRE(r.actors.size() == 4);
  REQUIRE(!r.top.empty());
  CHECK(r.actors[r.top[0]].actor == "s2");
  const auto& slow = r.actors[2];
  CHECK(slow.chronic);
  CHECK(slow.ewma == doctest::Approx(3.0).epsilon(0.01));
  CHECK(slow.median_ms == doctest::Approx(30.0));
  REQUIRE(!slow.stalls.empty()); // spikes at its onset only (the EWMA climbs), then slow at its own level
  CHECK(slow.stalls.back() <= 1);
  const auto& stalled = r.actors[1];
  CHECK_FALSE(stalled.chronic);
  CHECK(stalled.max_ms == doctest::Approx(200.0));
  CHECK(stalled.min_ms == doctest::Approx(10.0));
  CHECK(stalled.median_ms == doctest::Approx(10.0));
  CHECK(stalled.peak_ratio == doctest::Approx(20.0));
  CHECK(stalled.stalls == std::vector<std::int32_t>{10});
  CHECK(stalled.ewma < 1.05); // the stall entered the EWMA clipped, and decayed
  CHECK(!r.actors[0].chronic);
  CHECK(r.actors[0].stalls.empty());
  CHECK(r.actors[0].ewma == doctest::Approx(1.0).epsilon(0.05));
}

TEST_CASE("a stall however long moves the EWMA by one clipped step; a lasting slowdown makes it chronic") {
  // A 1000x stall at the last of 30 steps: the actor ranks first now, by an
  // EWMA of 1.3 at most, and is not chronic.
  auto r = analyze_step_times(four_stages(30, -1, 1.0, 3, 29, 1000.0));
  CHECK(r.actors[r.top[0]].actor == "s3");
  CHECK(r.actors[3].ewma == doctest::Approx(1.3));
  CHECK(r.actors[3].above <= 1);
  CHECK(r.actors[3].peak_ratio == doctest::Approx(1000.0));
  CHECK_FALSE(r.actors[3].chronic);
  // The same actor slow from step 10 on (two thirds of the run) is chronic.
  auto later = four_stages(30, -1, 1.0, -1, 0, 1.0);
  for (int s = 10; s < 30; ++s)
    later[0].busy[s] *= 2;
  auto r2 = analyze_step_times(later);
  CHECK(r2.actors[0].chronic);
  CHECK(r2.actors[r2.top[0]].actor == "s0");
}

TEST_CASE("top-k keeps the k slowest, chronic first, and every stat goes to JSON") {
  step_stats_options o;
  o.top_k = 2;
  auto r = analyze_step_times(four_stages(20, 0, 2.0, 3, 5, 50.0), o);
  REQUIRE(r.top.size() == 2);
  CHECK(r.actors[r.top[0]].actor == "s0");
  auto j = to_json(r);
  CHECK(j["top"] == nlohmann::json::array({"s0", r.actors[r.top[1]].actor}));
  CHECK(j["actors"].size() == 4);
  CHECK(j["actors"]["s0"]["chronic"] == true);
  CHECK(j["actors"]["s3"]["chronic"] == false);
  CHECK(j["actors"]["s3"]["stalls"] == nlohmann::json::array({5}));
  CHECK(j["actors"]["s3"]["max_ms"].get<double>() == doctest::Approx(500.0));
  CHECK(j["actors"]["s0"]["median_ms"].get<double>() == doctest::Approx(20.0));
  o.top_k = 4;
  auto text = to_text(analyze_step_times(four_stages(20, 0, 2.0, 3, 5, 50.0), o));
  CHECK(text.find("one-off stall at step 6") != std::string::npos);
  CHECK(text.find("chronic") != std::string::npos);
}

TEST_CASE("peers are the actors of the same role: an actor alone in its role has ratio 1") {
  auto in = four_stages(10, 1, 4.0, -1, 0, 1.0);
  in[1].role = "other";
  auto r = analyze_step_times(in);
  CHECK(r.actors[1].ewma == doctest::Approx(1.0));
  CHECK_FALSE(r.actors[1].chronic);
}

TEST_CASE("step times from spans: forward and backward per step, steps cut by the window left out") {
  trace_snapshot t;
  t.actors.push_back({0, "s0", "pipeline_stage", 0, "stage"});
  t.actors.push_back({1, "loader", "data_loader", 0, ""});
  auto add = [&](std::uint16_t actor, span_kind k, std::int32_t step, std::int64_t b, std::int64_t e) {
    span s;
    s.actor = actor, s.kind = k, s.step = step, s.begin_ns = b, s.end_ns = e;
    t.spans.push_back(s);
  };
  add(0, span_kind::forward, 0, 0, 100);
  add(0, span_kind::backward, 0, 100, 300);
  add(0, span_kind::send, 0, 300, 350); // not an action
  add(0, span_kind::forward, 1, 400, 500);
  add(0, span_kind::backward, 1, 500, 700);
  add(1, span_kind::forward, 1, 400, 500); // no role: not compared
  auto all = step_times_of(t);
  REQUIRE(all.size() == 1);
  CHECK(all[0].actor == "s0");
  CHECK(all[0].busy == std::map<std::int32_t, std::int64_t>{{0, 300}, {1, 300}});
  auto late = step_times_of(t, 50, 1000); // step 0 began before the window
  REQUIRE(late.size() == 1);
  CHECK(late[0].busy == std::map<std::int32_t, std::int64_t>{{1, 300}});
}

TEST_CASE("with replicas a stage is compared with its own position's replicas, not with the other positions") {
  // Two replicas of two positions: position 1 costs 3x position 0 by design
  // (the head), and r1s1 is 2x its replica r0s1.
  std::vector<step_times> in;
  for (int replica = 0; replica < 2; ++replica)
    for (int pos = 0; pos < 2; ++pos) {
      step_times t{"r" + std::to_string(replica) + "s" + std::to_string(pos), "stage", pos, {}};
      for (int s = 0; s < 20; ++s)
        t.busy[s] = (pos == 1 ? 30 : 10) * (replica == 1 && pos == 1 ? 2 : 1) * 1'000'000;
      in.push_back(std::move(t));
    }
  auto r = analyze_step_times(in);
  CHECK(r.actors[r.top[0]].actor == "r1s1");
  CHECK(r.actors[3].chronic);
  CHECK(r.actors[3].ewma == doctest::Approx(2.0).epsilon(0.01));
  CHECK_FALSE(r.actors[1].chronic); // r0s1: slower than position 0, as fast as its peer
  CHECK(r.actors[1].ewma < 1.0);
  CHECK_FALSE(r.actors[0].chronic);
}
