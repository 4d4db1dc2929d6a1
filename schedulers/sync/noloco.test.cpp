// NoLoCo's groups and routes: groups partition the replicas, have the
// configured size, are the same whichever replica derives them and change with
// the step; each boundary's route is a bijection; the outer step touches only
// the group's values (no collective).
#include "schedulers/sync/noloco.hpp"

#include <map>
#include <set>
#include <string>
#include <stdexcept>

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace troupe::sched;

TEST_CASE("NoLoCo's groups partition the replicas into groups of the configured size") {
  for (auto [replicas, group] : {std::pair{4, 2}, {8, 2}, {8, 4}, {12, 3}, {6, 6}}) {
    CAPTURE(replicas);
    CAPTURE(group);
    for (std::int64_t step = 0; step < 200; step += 50) {
      auto groups = noloco_groups(replicas, group, step, 1);
      CHECK(static_cast<int>(groups.size()) == replicas / group);
      std::set<int> seen;
      for (const auto& g : groups) {
        CHECK(static_cast<int>(g.size()) == group);
        for (int r : g) {
          CHECK(r >= 0);
          CHECK(r < replicas);
          CHECK(seen.insert(r).second); // in exactly one group
        }
      }
      CHECK(static_cast<int>(seen.size()) == replicas);
    }
  }
  CHECK_THROWS_AS(noloco_groups(6, 4, 0, 1), std::invalid_argument);
}

TEST_CASE("every replica derives the same groups, and they change with the step") {
  // Each replica calls the function on its own (in its own process, in a run):
  // nothing but the step and the seed goes in, so the answers agree.
  auto mine = noloco_groups(8, 2, 150, 7);
  for (int replica = 0; replica < 8; ++replica)
    CHECK(noloco_groups(8, 2, 150, 7) == mine);
  int changed = 0;
  for (std::int64_t step = 50; step <= 1000; step += 50)
    changed += noloco_groups(8, 2, step, 7) != noloco_groups(8, 2, step - 50, 7);
  CHECK(changed >= 15); // of 20 exchanges; 105 ways to pair 8 replicas
  // Each replica meets every other one over time: the averaging mixes the whole population.
  std::set<std::pair<int, int>> met;
  for (std::int64_t step = 0; step < 5000; step += 50)
    for (const auto& g : noloco_groups(8, 2, step, 7))
      met.insert({g[0], g[1]});
  CHECK(met.size() == 28);
}

TEST_CASE("each stage boundary's random route is a bijection, different per boundary and microbatch") {
  int differ = 0;
  for (std::int64_t seq = 0; seq < 50; ++seq)
    for (int boundary = 0; boundary < 3; ++boundary) {
      auto r = noloco_route(8, boundary, seq, 3);
      std::set<int> to(r.begin(), r.end());
      CHECK(to.size() == 8); // no two replicas send to the same next replica
      CHECK(*to.begin() == 0);
      CHECK(*to.rbegin() == 7);
      differ += boundary > 0 && r != noloco_route(8, boundary - 1, seq, 3);
      CHECK(noloco_route(8, boundary, seq, 3) == r); // the sender and the receiver agree
    }
  CHECK(differ >= 95);
}

TEST_CASE("NoLoCo's outer step moves the slow weights by the group's deltas and resets the fast ones") {
  // Two members, one value: θ = (3, 5), φ = (1, 2); replica 0, lr 0.5, μ 0.5, m = 1.
  std::vector<float> t0{3}, t1{5}, s0{1}, s1{2}, m{1};
  std::vector<std::span<const float>> fast{t0, t1}, slow{s0, s1};
  std::vector<float> slow_i{1}, fast_i{3};
  noloco_outer_step(fast, slow, m, slow_i, fast_i, 0.5, 0.5);
  // m = 0.5·1 + 0.5·mean(2, 3) + 0.5·(1.5 − 1) = 0.5 + 1.25 + 0.25 = 2
  CHECK(m[0] == 2.0f);
  CHECK(slow_i[0] == 3.0f);
  CHECK(fast_i[0] == 3.0f);
}

TEST_CASE("NoLoCo's routing policy: each round of microbatches crosses every boundary by a bijection") {
  // 3 replicas of 3 stages, actors numbered replica * 3 + position.
  routing_params p;
  p.layers = 6, p.replicas = 3;
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 3; ++s)
      p.stages.push_back({r * 3 + s, fmt::format("r{}s{}", r, s), {{2 * s, 2 * s + 2}}, r});
  p.options.emplace("seed", std::string("5"));
  auto policy = make_noloco_routing(p);
  REQUIRE(policy.has_value());
  const int microbatches = 4, per_step = 3 * microbatches;
  int crossed = 0;
  for (std::int64_t step = 0; step < 3; ++step) {
    std::map<int, int> hops; // actor -> microbatches it sees this step
    for (int k = 0; k < per_step; ++k) {
      auto seq = step * per_step + k;
      auto r = (*policy)->route(step, k, seq);
      REQUIRE(r.size() == 3);
      CHECK(r.front().actor == (k % 3) * 3); // it starts on its own replica's first stage
      for (int b = 0; b < 3; ++b) {
        CHECK(r[static_cast<std::size_t>(b)].actor % 3 == b); // position b, some replica
        ++hops[r[static_cast<std::size_t>(b)].actor];
      }
      crossed += r.back().actor / 3 != k % 3;
      CHECK((*policy)->route(step, k, seq) == r); // the same on every call: the gradient returns this way
    }
    for (auto [actor, n] : hops)
      CHECK(n == microbatches); // a bijection per round: every stage gets its own share
    CHECK(hops.size() == 9);
  }
  CHECK(crossed > 0); // the routes do leave their replica
}

TEST_CASE("NoLoCo's routes over interleaved chunks cross replicas on the first lap and retrace it on the later ones") {
  // 2 replicas of 2 positions x 2 chunks (interleaved: position s holds layers
  // [2s, 2s+2) and [4+2s, 6+2s)); actors numbered replica * 2 + position.
  routing_params p;
  p.layers = 8, p.replicas = 2;
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < 2; ++s)
      p.stages.push_back({r * 2 + s, fmt::format("r{}s{}", r, s), {{2 * s, 2 * s + 2}, {4 + 2 * s, 6 + 2 * s}}, r});
  p.options.emplace("seed", std::string("5"));
  auto policy = make_noloco_routing(p);
  REQUIRE(policy.has_value());
  const int microbatches = 4, per_step = 2 * microbatches;
  int crossed = 0;
  std::set<std::vector<int>> shapes; // the replicas a route visits, hop by hop
  for (std::int64_t step = 0; step < 8; ++step) {
    std::map<std::pair<int, int>, int> hops; // (actor, chunk) -> microbatches it sees this step
    for (int k = 0; k < per_step; ++k) {
      auto seq = step * per_step + k;
      auto r = (*policy)->route(step, k, seq);
      REQUIRE(r.size() == 4);
      std::vector<int> replicas;
      for (int b = 0; b < 4; ++b) {
        const auto& h = r[static_cast<std::size_t>(b)];
        CHECK(h.actor % 2 == b % 2); // position b mod 2, some replica
        CHECK(h.chunk == b / 2);     // chunk 0 on the first lap, 1 on the second
        ++hops[{h.actor, h.chunk}];
        replicas.push_back(h.actor / 2);
      }
      CHECK(replicas[0] == k % 2);       // it starts on its own replica's first stage
      CHECK(replicas[2] == replicas[0]); // chunk 1 of position 0 where chunk 0 ran
      CHECK(replicas[3] == replicas[1]); // and of position 1
      crossed += replicas[1] != replicas[0];
      shapes.insert(replicas);
    }
    for (auto [where, n] : hops)
      CHECK(n == microbatches); // a bijection per round: every chunk of every stage gets its own share
    CHECK(hops.size() == 8);
  }
  CHECK(crossed > 0);            // the first lap leaves its replica,
  CHECK(crossed < 8 * per_step); // and not always
  CHECK(shapes.size() == 4);     // both starts, each staying or crossing
}
