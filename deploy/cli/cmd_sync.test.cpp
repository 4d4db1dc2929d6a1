// `troupe sync` end to end: the command line reproduces torchft's six
// DiLoCo regression fixtures to 1e-5 (tests/fixtures/torchft_diloco), and the
// streaming rules are refused with exit code 2 and the flag at fault.
#include <algorithm>
#include <cmath>
#include <vector>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/troupe_command.hpp"

using troupe::testing::run_troupe;

TEST_CASE("troupe sync --json equals torchft's regression fixtures for every (delay, alpha)") {
  const std::pair<int, const char*> cases[6] = {{0, "0"}, {0, "0.5"}, {0, "1"}, {1, "0"}, {1, "0.5"}, {1, "1"}};
  for (int n = 0; n < 6; ++n) {
    CAPTURE(n);
    auto r = run_troupe(fmt::format("sync --algorithm streaming_diloco --replicas 2 --fragments 2 --sync-every 6 "
                                    "--delay {} --alpha {} --inner-lr 1 --grad 2 --outer-lr 2 --outer-momentum 0 "
                                    "--steps 16 --json",
                                    cases[n].first, cases[n].second));
    REQUIRE(r.code == 0);
    auto got = nlohmann::json::parse(r.out);
    std::ifstream in(fmt::format("tests/fixtures/torchft_diloco/test_diloco_mocked_updates_{}.json", n));
    REQUIRE(in.good());
    auto want = nlohmann::json::parse(in);
    REQUIRE(got["history"].size() == want.size());
    for (std::size_t rep = 0; rep < want.size(); ++rep) {
      const auto& rec = want[rep][0];
      REQUIRE(got["history"][rep].size() == rec["history"].size());
      for (const auto& [step, layers] : rec["history"].items())
        for (int f = 0; f < 2; ++f) {
          double w = layers[fmt::format("layers.{}.weight", f)][0][0];
          double g = got["history"][rep][std::stoul(step)][f];
          CHECK_MESSAGE(std::fabs(g - w) <= 1e-5, "replica ", rep, " step ", step, " fragment ", f);
        }
      for (const auto& [step, layers] : rec["global_parameter_history"].items())
        for (int f = 0; f < 2; ++f) {
          double w = layers[fmt::format("layers.{}.weight", f)][0][0];
          double g = got["global"][rep].at(step)[f];
          CHECK(std::fabs(g - w) <= 1e-5);
        }
    }
  }
}

TEST_CASE("troupe sync refuses the streaming rules with exit code 2, naming the flag") {
  auto delay = run_troupe("sync --algorithm streaming_diloco --sync-every 6 --fragments 2 --delay 3");
  CHECK(delay.code == 2);
  CHECK(delay.has("troupe sync: --delay: delay (3) must be from 0 to below sync_every / fragments (3)"));
  auto divide = run_troupe("sync --algorithm streaming_diloco --sync-every 7 --fragments 2");
  CHECK(divide.code == 2);
  CHECK(divide.has("--sync-every: sync_every (7) must divide by fragments (2)"));
  auto one_at_a_time = run_troupe("sync --algorithm streaming_diloco --sync-every 2 --fragments 3");
  CHECK(one_at_a_time.code == 2);
  CHECK(one_at_a_time.has("--fragments: 3 fragments need sync_every of at least 3"));
  for (const char* alpha : {"-0.5", "1.5"}) {
    auto a = run_troupe(fmt::format("sync --algorithm streaming_diloco --alpha {}", alpha));
    CHECK(a.code == 2);
    CHECK(a.has(fmt::format("--alpha: must be from 0 to 1 (0: the new global, 1: the local parameters), got {}",
                            alpha))); // the method's own rule
  }
  // A flag maps onto a key of the chosen method's schema, checked by it; another method's key is refused.
  auto typed = run_troupe("sync --algorithm streaming_diloco --set fragments=two");
  CHECK(typed.code == 2);
  CHECK(typed.has("--set fragments: expected an integer from 1 to 1048576, got 'two'"));
  auto foreign = run_troupe("sync --algorithm diloco --group 2");
  CHECK(foreign.code == 2);
  CHECK(foreign.has("--group: 'group' is not a setting of diloco (its settings: sync_every, outer.lr, "
                    "outer.momentum, outer.nesterov, quantize)"));
  auto set = run_troupe("sync --algorithm streaming_diloco --set fragments=2 --set delay=1 --steps 4");
  CHECK(set.code == 0);
  CHECK(set.has("2 fragments of 1 weight, sync_every 6 (a fragment every 3 steps), alpha 0, delay 1, fragments 2"));
  for (const char* none : {"desloc", "sparseloco"}) {
    auto no_toy = run_troupe(fmt::format("sync --algorithm {}", none));
    CHECK(no_toy.code == 2);
    CHECK(no_toy.has(fmt::format("--algorithm: '{}' has no toy run yet (troupe sync runs diloco, "
                                 "streaming_diloco, noloco)",
                                 none)));
  }
  auto lr = run_troupe("sync --outer-lr 0");
  CHECK(lr.code == 2);
  CHECK(lr.has("--outer-lr: must be above 0"));
  auto algo = run_troupe("sync --algorithm dilocco");
  CHECK(algo.code == 2);
}

TEST_CASE("troupe sync prints plain DiLoCo as text, each replica's weights and the bytes sent") {
  auto r = run_troupe("sync --algorithm diloco --sync-every 4 --quantize int8 --values 8 --steps 9");
  REQUIRE(r.code == 0);
  CHECK(r.has("sync: diloco, 2 replicas, 1 fragment of 8 weights, sync_every 4"));
  CHECK(r.has("  step 4: -15\n")); // 1 − 2·2·4: the outer step of lr 2 doubles the pseudo-gradient of 8
  CHECK(r.has("exchanges: 2; bytes sent per replica: 24 24")); // 2 × (8 int8 values + a row scale)
}

TEST_CASE("troupe sync runs NoLoCo and prints the groups of each exchange") {
  auto r = run_troupe("sync --algorithm noloco --replicas 4 --group 2 --sync-every 3 --grad-spread 0.5 --steps 9 "
                      "--outer-lr 0.7 --outer-momentum 0.5 --json");
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["groups"].size() == 3);
  for (const auto& [step, groups] : j["groups"].items()) {
    CAPTURE(step);
    std::vector<int> all;
    for (const auto& g : groups) {
      CHECK(g.size() == 2);
      for (int x : g)
        all.push_back(x);
    }
    std::sort(all.begin(), all.end());
    CHECK(all == std::vector<int>{0, 1, 2, 3});
  }
  auto text = run_troupe("sync --algorithm noloco --replicas 4 --sync-every 3 --steps 4");
  CHECK(text.code == 0);
  CHECK(text.has("groups after step 3: ["));
  auto bad = run_troupe("sync --algorithm noloco --replicas 3 --group 2");
  CHECK(bad.code == 2);
  CHECK(bad.has("--group: groups of 2 must partition the 3 replicas"));
}
