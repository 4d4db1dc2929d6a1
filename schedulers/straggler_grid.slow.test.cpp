// The straggler requirement over a wider grid than the quick test: pipeline
// shapes, interleaving, latencies and F:B:W cost ratios, 100 seeds each.
#include "schedulers/straggler.hpp"

#include <string>

#include <doctest/doctest.h>

using namespace troupe::sched;

TEST_CASE("no policy loses to its replayed canonical order on any shape, latency or cost ratio") {
  struct shape {
    int p, m;
    double latency;
  };
  struct costs {
    double f, b, w;
  };
  const shape shapes[] = {{2, 8, 0}, {4, 8, 0}, {4, 8, 0.1}, {4, 16, 0}, {4, 32, 0}, {6, 12, 0}, {8, 16, 0.2}};
  const costs ratios[] = {{1, 2, 1}, {1, 2, 0.5}, {1, 3, 1}};
  for (const char* policy : {"1f1b", "interleaved_1f1b", "zb_h1"})
    for (auto s : shapes)
      for (auto k : ratios) {
        sim_config base;
        base.ranks = s.p;
        base.microbatches = s.m;
        base.chunks = std::string_view{policy} == "interleaved_1f1b" ? 2 : 1;
        base.latency = s.latency;
        base.forward_cost = k.f;
        base.backward_cost = k.b;
        base.weight_cost = k.w;
        if (base.microbatches % base.ranks != 0 && base.chunks > 1)
          continue;
        for (const auto& scenario : standard_scenarios()) {
          auto r = compare_with_replay(base, policy, scenario, 100);
          REQUIRE(r);
          CAPTURE(std::string{policy});
          CAPTURE(s.p);
          CAPTURE(s.m);
          CAPTURE(s.latency);
          CAPTURE(k.w);
          CAPTURE(scenario.name);
          CHECK(r->policy_mean <= r->replay_mean + 1e-9);
          CHECK(r->losses == 0);
        }
      }
}
