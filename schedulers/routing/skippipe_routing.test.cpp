// The `skippipe` routing policy: planned paths become routes that start and end
// on stage 0, and paths that break SkipPipe's invariants are refused by name.
#include "schedulers/routing/skippipe_routing.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "schedulers/routing/router.hpp"

using namespace troupe;
using namespace troupe::sched;

namespace {

/// 4 positions × 2 replicas, actor 1 + 4r + s for `r{r}s{s}` (actor 0 is the
/// router); each holds one layer, and stage 0 also the head, [4, 4).
routing_params grid(std::vector<std::vector<std::string>> paths, int length = 3) {
  routing_params rp;
  rp.layers = 4, rp.replicas = 2;
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < 4; ++s) {
      route_stage st{1 + 4 * r + s, fmt::format("r{}s{}", r, s), {{s, s + 1}}, r};
      if (s == 0)
        st.chunks.emplace_back(4, 4);
      rp.stages.push_back(st);
    }
  rp.paths = std::move(paths);
  rp.options["path_length"] = std::to_string(length);
  return rp;
}

std::string refusal(const routing_params& rp) {
  auto p = make_skippipe_routing(rp);
  REQUIRE_FALSE(p);
  return p.error().message;
}

} // namespace

TEST_CASE("skippipe routes follow the planned path of each microbatch of a step, back to its start's head") {
  auto p = make_skippipe_routing(grid({{"r0s0.0", "r1s2", "r0s1", "r0s0.1"}, {"r1s0.0", "r0s3", "r1s1", "r1s0.1"}}));
  REQUIRE(p);
  CHECK((*p)->route(0, 0, 0) == route_t{{1, 0}, {7, 0}, {2, 0}, {1, 1}});
  CHECK((*p)->route(0, 1, 1) == route_t{{5, 0}, {4, 0}, {6, 0}, {5, 1}});
  CHECK((*p)->route(3, 0, 6) == (*p)->route(0, 0, 0)); // every step takes the same plan
  // Validation: the full model on replica 0's chain, then path 0 (fewer layers).
  auto evals = (*p)->eval_routes();
  REQUIRE(evals.size() == 2);
  CHECK(evals[0] == route_t{{1, 0}, {2, 0}, {3, 0}, {4, 0}, {1, 1}});
  CHECK(evals[1] == (*p)->route(0, 0, 0));
}

TEST_CASE("a router on skippipe routes plans every stage's hops, the unvisited ones none") {
  auto p = make_skippipe_routing(grid({{"r0s0.0", "r1s2", "r0s1", "r0s0.1"}, {"r1s0.0", "r0s3", "r1s1", "r1s0.1"}}));
  REQUIRE(p);
  router_config cfg;
  for (int a = 1; a <= 8; ++a)
    cfg.stage_actors.push_back(a);
  cfg.replicas = 2, cfg.across_replicas = true;
  router_core router{cfg, std::move(*p)};
  router.grant(1, 4), router.grant(5, 4);
  auto first = router.next(), second = router.next();
  REQUIRE(first);
  REQUIRE(second);
  CHECK(first->microbatch == 0);
  CHECK(second->microbatch == 1); // numbered in the whole step: r0s1 and r1s1 see 0 and 1, never both 0
  std::map<int, int> hops;
  for (const auto& [actor, plan] : first->plans)
    hops[actor] = plan.hops;
  CHECK(hops == std::map<int, int>{{1, 2}, {2, 1}, {3, 0}, {4, 1}, {5, 2}, {6, 1}, {7, 1}, {8, 0}});
}

TEST_CASE("skippipe refuses paths that break SkipPipe's invariants, naming the path") {
  CHECK(refusal(grid({{"r0s0.0", "r0s1", "r0s0.1"}})).find("visits 2 stages, path_length is 3") != std::string::npos);
  CHECK(refusal(grid({{"r0s1", "r0s2", "r0s3", "r0s0.1"}})).find("must start at stage 0") != std::string::npos);
  CHECK(
    refusal(grid({{"r0s0.0", "r0s1", "r0s2", "r1s0.1"}})).find("must end at the head of the stage 0 it started on") !=
    std::string::npos);
  CHECK(refusal(grid({{"r0s0.0", "r0s2", "r1s2", "r0s0.1"}})).find("visits stage 2 twice") != std::string::npos);
  CHECK(refusal(grid({{"r0s0.0", "r1s0.0", "r0s2", "r0s0.1"}})).find("visits stage 0 twice") != std::string::npos);
  CHECK(refusal(grid({{"r0s0.0", "r0s9", "r0s2", "r0s0.1"}})).find("no pipeline stage 'r0s9'") != std::string::npos);
  CHECK(refusal(grid({})).find("no planned paths") != std::string::npos);
}
