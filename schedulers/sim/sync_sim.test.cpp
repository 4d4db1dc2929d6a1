// The streaming DiLoCo policy on torchft's mocked regression setup reproduces
// torchft's fixtures (tests/fixtures/torchft_diloco/README.md) to 1e-5.
#include "schedulers/sim/sync_sim.hpp"

#include <cmath>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "schedulers/sync/streaming_diloco.hpp"

using namespace troupe;
using namespace troupe::sched;

namespace {

/// torchft's test_diloco_mocked_updates_N parameters: (delay, alpha).
const std::pair<int, double> fixture_cases[6] = {{0, 0}, {0, 0.5}, {0, 1}, {1, 0}, {1, 0.5}, {1, 1}};

sync_sim_config torchft_mock(int delay, double alpha) {
  sync_sim_config c;
  c.spec.algorithm = "streaming_diloco";
  c.spec.options = {
    {"sync_every", "6"}, {"fragments", "2"},      {"delay", std::to_string(delay)}, {"alpha", fmt::format("{}", alpha)},
    {"outer.lr", "2"},   {"outer.momentum", "0"}, {"outer.nesterov", "false"}};
  REQUIRE(settle_method_options(c.spec));
  c.replicas = 2;
  c.inner_lr = 1;
  c.grad = 2;
  c.steps = 16;
  return c;
}

nlohmann::json fixture(int n) {
  std::ifstream in(fmt::format("tests/fixtures/torchft_diloco/test_diloco_mocked_updates_{}.json", n));
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

} // namespace

TEST_CASE("streaming DiLoCo's histories equal torchft's six regression fixtures to 1e-5") {
  for (int n = 0; n < 6; ++n) {
    auto [delay, alpha] = fixture_cases[n];
    CAPTURE(n);
    auto fx = fixture(n);
    auto r = run_sync_sim(torchft_mock(delay, alpha));
    REQUIRE(fx.size() == 2);
    for (std::size_t rep = 0; rep < 2; ++rep) {
      const auto& rec = fx[rep][0];
      REQUIRE(rec["history"].size() == r.history[rep].size());
      for (const auto& [step, layers] : rec["history"].items())
        for (int f = 0; f < 2; ++f) {
          double want = layers[fmt::format("layers.{}.weight", f)][0][0];
          double got = r.history[rep][static_cast<std::size_t>(std::stoi(step))][static_cast<std::size_t>(f)];
          CHECK_MESSAGE(std::fabs(got - want) <= 1e-5, "replica ", rep, " step ", step, " fragment ", f);
        }
      for (const auto& [step, layers] : rec["global_parameter_history"].items()) {
        auto at = r.global[rep].find(std::stoi(step));
        REQUIRE_MESSAGE(at != r.global[rep].end(), "no global recorded at step ", step);
        for (int f = 0; f < 2; ++f) {
          double want = layers[fmt::format("layers.{}.weight", f)][0][0];
          CHECK(std::fabs(at->second[static_cast<std::size_t>(f)] - want) <= 1e-5);
        }
      }
    }
  }
}

TEST_CASE("one fragment goes every H/P steps, round robin, each prepared tau steps before it is applied") {
  auto c = torchft_mock(1, 0);
  c.spec.options["sync_every"] = "12", c.spec.options["fragments"] = "3", c.spec.options["delay"] = "2";
  settle_method_options(c.spec);
  streaming_diloco p(c.spec, {{1.0f}, {1.0f}, {1.0f}});
  std::vector<std::string> seen;
  std::vector<float> local{0.0f}, zero{0.0f};
  for (int step = 1; step <= 24; ++step)
    for (auto e : p.after_inner_step()) {
      seen.push_back(fmt::format("{}{}@{}", e.what == fragment_event::kind::prepare ? "P" : "A", e.fragment, step));
      if (e.what == fragment_event::kind::perform)
        p.perform(e.fragment, zero,
                  local); // the round robin moves on with each exchange applied (torchft's manager step)
    }
  CHECK(fmt::format("{}", fmt::join(seen, " ")) ==
        "P0@2 A0@4 P1@6 A1@8 P2@10 A2@12 P0@14 A0@16 P1@18 A1@20 P2@22 A2@24");
}

TEST_CASE("DiLoCo with one replica, H = 1 and outer SGD lr 1 without momentum is plain training") {
  auto c = torchft_mock(0, 0);
  c.spec.algorithm = "diloco", c.spec.options.clear(); // one fragment: no streaming settings
  c.spec.sync_every = 1, c.spec.outer = {.lr = 1, .momentum = 0, .nesterov = true};
  c.replicas = 1, c.steps = 9, c.grad = 0.375f;
  auto r = run_sync_sim(c);
  for (int s = 0; s < c.steps; ++s)
    CHECK(r.history[0][static_cast<std::size_t>(s)][0] == 1.0f - 0.375f * static_cast<float>(s)); // exact
  CHECK(r.exchanges == 9);
}

TEST_CASE("the quantized exchange sends fewer bytes and stays within its rounding") {
  auto c = torchft_mock(0, 0);
  c.values = 1000, c.steps = 6;
  auto plain = run_sync_sim(c);
  for (const char* q : {"bf16", "int8", "fp8"}) {
    c.spec.quantize = q;
    auto r = run_sync_sim(c);
    CAPTURE(q);
    CHECK(r.bytes_sent[0] < plain.bytes_sent[0]);
    // Every replica's pseudo-gradient is 6, a value each format holds exactly.
    CHECK(r.history[0].back()[0] == doctest::Approx(plain.history[0].back()[0]).epsilon(1e-5));
  }
  c.spec.quantize = "int8";
  CHECK(run_sync_sim(c).bytes_sent[0] == 2 * (1000 + 4)); // 2 exchanges of 1000 int8 values and a row scale
}

TEST_CASE("troupe sync's engine refuses what the policy cannot run") {
  auto c = torchft_mock(0, 0);
  c.spec.options["delay"] = "3"; // not below H/P = 3
  settle_method_options(c.spec);
  CHECK_THROWS_AS(run_sync_sim(c), std::invalid_argument);
  c = torchft_mock(0, 0);
  c.spec.algorithm = "sparseloco";
  CHECK_THROWS_AS(run_sync_sim(c), std::invalid_argument);
}

namespace {

sync_sim_config noloco(int replicas, int steps) {
  sync_sim_config c;
  c.spec.algorithm = "noloco";
  c.spec.options = {{"sync_every", "3"}, {"group", "2"}, {"outer.lr", "0.7"}, {"outer.momentum", "0.5"}};
  settle_method_options(c.spec); // the NoLoCo paper's outer values
  c.replicas = replicas, c.values = 4, c.steps = steps;
  c.grad = 1, c.grad_spread = 0.5f; // replicas drift apart
  return c;
}

} // namespace

TEST_CASE("NoLoCo uses no collective: a replica sends only to its group, the same bytes at any replica count") {
  auto small = run_sync_sim(noloco(4, 12)), big = run_sync_sim(noloco(16, 12));
  CHECK(small.exchanges == 4);
  CHECK(small.groups.size() == 4);
  for (auto b : small.bytes_sent)
    CHECK(b == 4 * 2 * 4 * 4); // 4 exchanges x (fast + slow) x 4 values x 4 bytes, to 1 partner
  for (auto b : big.bytes_sent)
    CHECK(b == small.bytes_sent.front());
}

TEST_CASE("a NoLoCo replica's values after an exchange depend on its group alone") {
  auto c = noloco(8, 4);
  auto base = run_sync_sim(c);
  const auto& g = base.groups.at(3);
  int me = g[0][0], partner = g[0][1], outsider = g[1][0];
  c.grad_of[outsider] = 100; // another group's member takes wild steps
  auto changed_outside = run_sync_sim(c);
  CHECK(changed_outside.groups.at(3) == g); // the groups come from the step and the seed alone
  CHECK(changed_outside.history[static_cast<std::size_t>(me)] == base.history[static_cast<std::size_t>(me)]);
  c.grad_of.clear();
  c.grad_of[partner] = 100; // my own partner's steps do reach me
  auto changed_inside = run_sync_sim(c);
  CHECK(changed_inside.history[static_cast<std::size_t>(me)].back() !=
        base.history[static_cast<std::size_t>(me)].back());
}
