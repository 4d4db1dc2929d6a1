// Routing around stragglers under the deterministic clock: with one replica's
// stage 2x slower, `own` routing runs at the slow replica's pace while
// `least_loaded` keeps most of the unslowed throughput, every microbatch still
// visiting every position once.
#include "schedulers/routing/least_loaded.hpp"

#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "schedulers/sim/cluster_sim.hpp"

using namespace troupe::sched;

namespace {

/// 4 replicas of a 2-stage pipeline (2 layers a stage), free links, 1F1B.
cluster_config four_replicas(const char* route, int microbatches = 8, int steps = 4) {
  auto c = equal_stage_cluster(2, 4, microbatches, steps);
  c.route = route;
  return c;
}

} // namespace

TEST_CASE("least_loaded keeps a microbatch on its own replica unless another finishes it half a microbatch sooner") {
  least_loaded_chooser c({10, 11, 12});
  CHECK(c.pick(11) == -1); // no credit anywhere
  for (int a : {10, 11, 12})
    c.grant(a, 2, {});
  CHECK(c.pick(11) == 11); // nothing measured: the route's own hop
  c.grant(10, 0, {4.0, 1.0});
  c.grant(12, 0, {1.0, 1.0});
  c.grant(11, 0, {0.5, 2.0});
  CHECK(c.pick(11) == 11); // 0.5 + 2 = 2.5 is within half a microbatch (1) of 12's 1 + 1 = 2
  c.grant(11, 0, {3.0, 2.0});
  CHECK(c.pick(11) == 12); // 3 + 2 = 5 is not: 12 finishes it at 2
  c.take(12);              // one more sent there since its report: 1 + 2 = 3
  CHECK(c.pick(11) == 12);
  c.take(12);
  CHECK(c.credits(12) == 0);
  CHECK(c.pick(11) == 11); // 12 has no credit left; 10 (4 + 1 = 5) is no sooner than the own 5
  CHECK(c.pick(10) == 10);
}

TEST_CASE("least_loaded: a stage that leaves is never picked again, and its credits are forgotten") {
  least_loaded_chooser c({10, 11, 12});
  for (int a : {10, 11, 12})
    c.grant(a, 2, {});
  c.grant(10, 0, {5.0, 1.0});
  c.grant(11, 0, {4.0, 1.0});
  c.grant(12, 0, {0.0, 1.0});
  CHECK(c.pick(11) == 12);
  CHECK(c.leave(12) == 2);
  CHECK(c.holds(12)); // still a replica of the position: routes naming it are retraced, not refused
  CHECK(c.pick(11) == 11);
  c.grant(12, 3, {0.0, 0.1}); // a late credit of the lost stage changes nothing
  CHECK(c.pick(11) == 11);
  CHECK(c.leave(11) == 2);
  CHECK(c.pick(11) == 10); // its own replica gone too: the one left
}

// The first position's stages may hold 4 activations (1F1B's own bound is
// p - r = 2): with 2 each, only 8 microbatches are in flight over the 4
// last-position stages, too few to keep 3.5 stages' worth of work queued
// (Little's law), and least_loaded keeps 75% (own 53%). The bound is memory
// the user grants per stage (`policy: {max_in_flight: 4}`); it changes nothing
// for `own` without a straggler, which the test checks too.
TEST_CASE("one replica's stage 2x slower: own routing falls to about half, least_loaded keeps >= 80%") {
  auto make = [](const char* route, const char* slow) {
    auto c = four_replicas(route, 32, 4);
    c.stage_policy_options[0]["max_in_flight"] = std::string{"4"};
    if (slow)
      c.slowdown[slow] = 2.0;
    return c;
  };
  auto plain = simulate_cluster(make("own", nullptr));
  REQUIRE_MESSAGE(plain, (plain ? std::string{} : plain.error().message));
  auto own = simulate_cluster(make("own", "r1s1"));
  REQUIRE_MESSAGE(own, (own ? std::string{} : own.error().message));
  auto ll = simulate_cluster(make("least_loaded", "r1s1"));
  REQUIRE_MESSAGE(ll, (ll ? std::string{} : ll.error().message));
  auto unslowed_ll = simulate_cluster(make("least_loaded", nullptr));
  REQUIRE_MESSAGE(unslowed_ll, (unslowed_ll ? std::string{} : unslowed_ll.error().message));
  auto default_own = four_replicas("own", 32, 4);
  auto plain_default = simulate_cluster(default_own);
  REQUIRE(plain_default);

  double own_share = own->tokens_per_s() / plain->tokens_per_s();
  double ll_share = ll->tokens_per_s() / plain->tokens_per_s();
  MESSAGE("unslowed ", plain->iteration_s, " s/step; slowed own ", own_share, ", least_loaded ", ll_share,
          "; unslowed least_loaded ", unslowed_ll->tokens_per_s() / plain->tokens_per_s());
  CHECK(plain->tokens_per_s() == doctest::Approx(plain_default->tokens_per_s()).epsilon(1e-9));
  CHECK(own_share < 0.55);
  CHECK(ll_share >= 0.80);
  CHECK(ll_share <= 0.875 + 1e-9); // the slow stage does at most its share of the last position's work
  CHECK(unslowed_ll->tokens_per_s() >= 0.95 * plain->tokens_per_s()); // without a straggler it costs little

  // Every microbatch visits each position once; the slow stage took fewer, the others more.
  const int per_actor = 32 * 4;
  int s0 = 0, s1 = 0;
  for (int r = 0; r < 4; ++r) {
    s0 += ll->forwards.at(fmt::format("r{}s0", r));
    s1 += ll->forwards.at(fmt::format("r{}s1", r));
    CHECK(own->forwards.at(fmt::format("r{}s1", r)) == per_actor);
  }
  CHECK(s0 == 4 * per_actor);
  CHECK(s1 == 4 * per_actor);
  CHECK(ll->forwards.at("r1s1") < per_actor * 3 / 4);
  for (int r : {0, 2, 3})
    CHECK(ll->forwards.at(fmt::format("r{}s1", r)) > per_actor);
}

TEST_CASE("with 1F1B's own bounds least_loaded still gains over own on a slow last stage") {
  auto c = four_replicas("own");
  auto plain = simulate_cluster(c);
  c.slowdown["r1s1"] = 2.0;
  auto own = simulate_cluster(c);
  c.route = "least_loaded";
  auto ll = simulate_cluster(c);
  REQUIRE(plain);
  REQUIRE(own);
  REQUIRE(ll);
  MESSAGE("own ", own->tokens_per_s() / plain->tokens_per_s(), ", least_loaded ",
          ll->tokens_per_s() / plain->tokens_per_s());
  CHECK(ll->tokens_per_s() >= 1.3 * own->tokens_per_s());
}

TEST_CASE("least_loaded routes a straggler's work away wherever it sits after the first position") {
  for (int p : {3, 4}) {
    auto c = equal_stage_cluster(p, 4, 8, 4);
    c.route = "least_loaded";
    auto plain = simulate_cluster(c);
    REQUIRE_MESSAGE(plain, (plain ? std::string{} : plain.error().message));
    c.slowdown[fmt::format("r2s{}", p - 2)] = 2.0;
    auto ll = simulate_cluster(c);
    REQUIRE_MESSAGE(ll, (ll ? std::string{} : ll.error().message));
    MESSAGE(p, " stages: least_loaded keeps ", ll->tokens_per_s() / plain->tokens_per_s());
    auto own_c = c;
    own_c.route = "own";
    auto own = simulate_cluster(own_c);
    REQUIRE(own);
    MESSAGE(p, " stages: own keeps ", own->tokens_per_s() / plain->tokens_per_s());
    CHECK(ll->tokens_per_s() >= 0.80 * plain->tokens_per_s());
    CHECK(ll->tokens_per_s() > own->tokens_per_s());
  }
}

TEST_CASE("an unknown route is refused, naming the known ones") {
  auto r = simulate_cluster(four_replicas("fastest"));
  REQUIRE_FALSE(r);
  CHECK(r.error().message == "simulate: unknown route 'fastest' (known: own, least_loaded)");
}
