// The router core and its routing policies: routes by layer order or by paths,
// plans that count each stage's hops, and emission gated by credits.
#include "schedulers/routing/router.hpp"

#include <map>
#include <set>

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace troupe;
using namespace troupe::sched;

namespace {

/// Stage actors 1..p (actor 0 is the router), `chunks` each, round-robin layers.
routing_params stages(int p, int chunks = 1, std::vector<std::vector<std::string>> paths = {}) {
  routing_params rp;
  rp.layers = p * chunks;
  for (int r = 0; r < p; ++r) {
    route_stage s{r + 1, fmt::format("s{}", r), {}};
    for (int c = 0; c < chunks; ++c)
      s.chunks.emplace_back(r + c * p, r + c * p + 1);
    rp.stages.push_back(s);
  }
  rp.paths = std::move(paths);
  return rp;
}

} // namespace

TEST_CASE("chain routes visit every chunk in layer order, wrapping around for interleaved chunks") {
  auto r = (*make_routing("chain", stages(2, 2)))->route(0, 0, 0);
  CHECK(r == route_t{{1, 0}, {2, 0}, {1, 1}, {2, 1}});
}

TEST_CASE("paths routes take path k mod n and may skip and reorder stages") {
  auto p = make_routing("paths", stages(4, 1, {{"s0", "s2", "s1", "s3"}, {"s0", "s3"}}));
  REQUIRE(p);
  CHECK((*p)->route(0, 0, 0) == route_t{{1, 0}, {3, 0}, {2, 0}, {4, 0}});
  CHECK((*p)->route(0, 1, 1) == route_t{{1, 0}, {4, 0}});
  CHECK((*p)->route(1, 0, 2) == route_t{{1, 0}, {3, 0}, {2, 0}, {4, 0}});
}

TEST_CASE("a path must start with the embedding, end with the head and visit no chunk twice") {
  auto no_head = make_routing("paths", stages(3, 1, {{"s0", "s1"}}));
  REQUIRE(!no_head);
  CHECK(no_head.error().message.find("must end at the stage holding layer 2") != std::string::npos);
  auto no_embedding = make_routing("paths", stages(3, 1, {{"s1", "s2"}}));
  REQUIRE(!no_embedding);
  CHECK(no_embedding.error().message.find("must start at the stage holding layer 0") != std::string::npos);
  auto twice = make_routing("paths", stages(3, 1, {{"s0", "s1", "s1", "s2"}}));
  REQUIRE(!twice);
  CHECK(twice.error().message.find("visits s1 twice") != std::string::npos);
  auto unknown = make_routing("paths", stages(3, 1, {{"s0", "s7", "s2"}}));
  REQUIRE(!unknown);
  CHECK(unknown.error().message.find("no pipeline stage 's7' (known: s0, s1, s2)") != std::string::npos);
  auto policy = make_routing("chian", stages(3));
  REQUIRE(!policy);
  CHECK(policy.error().message.find("known: chain, paths") != std::string::npos);
}

TEST_CASE("the router emits only what its receivers' credits allow, tokens and targets alike") {
  router_config c{{1, 2, 3}, 4, 2, 0, 10};
  auto policy = make_routing("chain", stages(3));
  router_core r(c, std::move(*policy));
  CHECK(!r.next()); // no credit yet
  r.grant(1, 2);
  CHECK(!r.next()); // the first hop has credit, the loss hop (targets) not
  r.grant(3, 1);
  auto e = r.next();
  REQUIRE(e);
  CHECK(e->microbatch == 0);
  CHECK(!r.next()); // the targets' credit is spent
  r.grant(3, 5);
  REQUIRE(r.next());
  CHECK(!r.next()); // the first hop's two credits are spent
  CHECK(r.credits(1) == 0);
  CHECK(r.credits(3) == 4);
}

TEST_CASE("each step's first microbatch carries every stage's plan, counting the hops its routes make there") {
  router_config c{{1, 2, 3, 4}, 3, 2, 0, 16};
  auto policy = make_routing("paths", stages(4, 1, {{"s0", "s1", "s3"}, {"s0", "s2", "s3"}}));
  router_core r(c, std::move(*policy));
  r.grant(1, 100), r.grant(4, 100);
  std::vector<std::map<int, int>> hops;
  while (auto e = r.next()) {
    if (!e->plans.empty())
      hops.emplace_back();
    for (auto [actor, plan] : e->plans) {
      hops.back()[actor] = plan.hops;
      CHECK(plan.tokens == 3 * 16);
      CHECK(plan.participants == 4);
      CHECK(plan.reducer == 1);
    }
  }
  CHECK(r.done());
  REQUIRE(hops.size() == 2);
  CHECK(hops[0] == std::map<int, int>{{1, 3}, {2, 2}, {3, 1}, {4, 3}}); // paths 0, 1, 0
  CHECK(hops[1] == std::map<int, int>{{1, 3}, {2, 1}, {3, 2}, {4, 3}}); // paths 1, 0, 1
}

TEST_CASE("with replicas a step goes round them: replica k mod R, microbatch k div R, global tokens in the plans") {
  routing_params rp;
  rp.layers = 2;
  rp.replicas = 2;
  // r0s0 = 1, r0s1 = 2, r1s0 = 3, r1s1 = 4
  for (int r = 0; r < 2; ++r)
    for (int s = 0; s < 2; ++s)
      rp.stages.push_back({1 + 2 * r + s, fmt::format("r{}s{}", r, s), {{s, s + 1}}, r});
  auto policy = make_routing("chain", rp);
  REQUIRE(policy);
  router_config rc{{1, 2, 3, 4}, 3, 2, 0, 10, 2}; // 3 microbatches a replica, 2 steps, 10 tokens each, 2 replicas
  router_core router(rc, std::move(*policy));
  for (int a : {1, 2, 3, 4})
    router.grant(a, 100);
  for (int k = 0; k < 6; ++k) {
    auto e = router.next();
    REQUIRE(e);
    CHECK(e->microbatch == k / 2);
    CHECK(e->sequence == k);
    CHECK(e->route.front().actor == (k % 2 == 0 ? 1 : 3));
    CHECK(e->route.back().actor == (k % 2 == 0 ? 2 : 4));
    CHECK(e->plans.size() == (k == 0 ? 4u : 0u));
    for (const auto& [actor, plan] : e->plans) {
      CHECK(plan.hops == 3);
      CHECK(plan.tokens == 60);
      CHECK(plan.participants == 4);
      CHECK(plan.reducer == 1);
    }
  }
  auto next_step = router.next();
  REQUIRE(next_step);
  CHECK(next_step->step == 1);
  CHECK(next_step->microbatch == 0);
}

namespace {
/// Local-update training's router over `replicas` replicas of 2 stages (r0s0 =
/// 1, r0s1 = 2, r1s0 = 3, r1s1 = 4, ...), 2 microbatches a replica, `steps` steps.
router_core local_update_router(int replicas, std::int64_t steps, bool redeal = false, bool ddp = false) {
  routing_params rp;
  rp.layers = 2;
  rp.replicas = replicas;
  std::vector<int> actors;
  for (int r = 0; r < replicas; ++r)
    for (int s = 0; s < 2; ++s) {
      rp.stages.push_back({1 + 2 * r + s, fmt::format("r{}s{}", r, s), {{s, s + 1}}, r});
      actors.push_back(1 + 2 * r + s);
    }
  router_config rc{actors, 2, steps, 0, 10, replicas};
  rc.independent_replicas = !ddp;
  rc.replica_norms = ddp; // elastic DDP (#26)
  rc.redeal = redeal;
  auto policy = make_routing("chain", rp);
  REQUIRE(policy);
  return router_core(rc, std::move(*policy));
}

router_core two_replicas(std::int64_t steps) {
  return local_update_router(2, steps);
}
} // namespace

TEST_CASE("a replica that leaves local-update training: its microbatches and plans stop, steps still end") {
  auto router = two_replicas(3);
  for (int a : {1, 2, 3, 4})
    router.grant(a, 100);
  auto first = router.next(); // step 0, replica 0: plans for both replicas
  REQUIRE(first);
  CHECK(first->plans.size() == 4);
  router.drop_replica(0); // evaluation moves to replica 1's chain
  CHECK(router.eval_route().front().actor == 3);
  int made = 0, ends = 0;
  while (auto e = router.next()) {
    ++made;
    ends += e->step_end;
    CHECK(e->route.front().actor == 3); // replica 1 only
    for (const auto& [actor, plan] : e->plans)
      CHECK(actor >= 3); // no plans for the stages that left
  }
  CHECK(router.done());
  CHECK(made == 2 + 2 + 2); // replica 1's 2 of step 0, then of steps 1 and 2
  CHECK(ends == 3);         // every step still ends, on replica 1's last microbatch
  CHECK_THROWS_AS(router.drop_replica(1), std::invalid_argument); // not the last one
}

TEST_CASE("a replica that rejoins is dealt microbatches and plans again from its step, on the credits it grants anew") {
  auto router = two_replicas(5);
  for (int a : {1, 2, 3, 4})
    router.grant(a, 100);
  REQUIRE(router.next()); // step 0, replica 0
  router.drop_replica(1);
  CHECK(router.credits(3) == 0);                                    // the lost stages' credits are gone
  CHECK_THROWS_AS(router.add_replica(0, 3), std::invalid_argument); // never left
  CHECK_THROWS_AS(router.add_replica(1, 0), std::invalid_argument); // step 0 is being dealt
  CHECK_THROWS_AS(router.add_replica(1, 5), std::invalid_argument); // past the run's end
  router.add_replica(1, 2);
  router.grant(3, 1); // the new stages' first credits: one microbatch so far
  router.grant(4, 100);
  std::map<std::int64_t, std::vector<int>> heads; // step -> first hops dealt
  std::map<std::int64_t, std::set<int>> planned;  // step -> stages planned
  while (auto e = router.next()) {
    heads[e->step].push_back(e->route.front().actor);
    for (const auto& [actor, plan] : e->plans)
      planned[e->step].insert(actor);
  }
  CHECK(heads[0] == std::vector<int>{1});    // the rest of step 0: replica 0 only
  CHECK(heads[1] == std::vector<int>{1, 1}); // replica 1 still out
  CHECK(planned[1] == std::set<int>{1, 2});
  CHECK(heads[2] == std::vector<int>{1, 3, 1}); // back at step 2, until its one credit is spent
  CHECK(planned[2] == std::set<int>{1, 2, 3, 4});
  CHECK(!router.done()); // waits on replica 1's credit
  router.grant(3, 100);
  while (auto e = router.next())
    heads[e->step].push_back(e->route.front().actor);
  CHECK(heads[2] == std::vector<int>{1, 3, 1, 3});
  CHECK(heads[4] == std::vector<int>{1, 3, 1, 3});
  CHECK(router.done());
}

TEST_CASE("with redeal, a step keeps its batch: a lost replica's microbatches go to the replicas left, plans and "
          "tokens counting them") {
  // 3 replicas (stages 1-2, 3-4, 5-6), 2 microbatches each; replica 1 leaves
  // after step 0's first microbatch (replica 0's), when step 0's plans have gone
  // out: its share of step 0 is lost. It comes back at step 4.
  const int replicas = 3, n = replicas * 2;
  auto router = local_update_router(replicas, 7, true);
  for (int a = 1; a <= 2 * replicas; ++a)
    router.grant(a, 1000);
  std::map<std::int64_t, std::vector<emission>> dealt; // step -> emissions in order
  auto first = router.next();
  REQUIRE(first);
  dealt[0].push_back(*first);
  router.drop_replica(1);
  bool back = false;
  while (auto e = router.next()) {
    dealt[e->step].push_back(*e);
    if (!back && e->step == 1)
      router.add_replica(1, 4), router.grant(3, 1000), router.grant(4, 1000), back = true; // its new stages' credits
  }
  REQUIRE(router.done());
  auto replica_of = [](int actor) { return (actor - 1) / 2; };
  for (const auto& [step, es] : dealt) {
    INFO("step ", step);
    std::set<std::int64_t> sequences;
    std::map<int, std::vector<int>> indices; // replica -> its microbatch indices, in order
    std::map<int, int> hops;                 // stage -> hops dealt to it
    std::map<int, step_plan_msg> plans;      // stage -> its plan
    for (const auto& e : es) {
      sequences.insert(e.sequence);
      int r = replica_of(e.route.front().actor);
      for (const auto& h : e.route) {
        CHECK(replica_of(h.actor) == r); // a replica's own chain
        ++hops[h.actor];
      }
      indices[r].push_back(e.microbatch);
      for (const auto& [actor, plan] : e.plans)
        plans[actor] = plan;
    }
    bool out = step < 4; // replica 1 is out, its share dealt to 0 and 2 from step 1
    if (step == 0)
      CHECK(sequences.size() == n - 2); // dealt before it left: its two are lost
    else
      for (std::int64_t q = step * n; q < (step + 1) * n; ++q)
        CHECK(sequences.count(q) == 1); // every sequence of the step, as with every replica in
    CHECK(indices.count(1) == static_cast<std::size_t>(!out));
    for (const auto& [r, idx] : indices) {
      for (std::size_t i = 0; i < idx.size(); ++i)
        CHECK(idx[i] == static_cast<int>(i)); // 0, 1, ... in the order dealt
      if (step > 0)
        CHECK(idx.size() == (out ? 3u : 2u));
    }
    for (const auto& [actor, plan] : plans) {
      if (step == 0 && replica_of(actor) == 1)
        continue;                      // its plan went out before it left
      CHECK(plan.hops == hops[actor]); // the plan counts what the stage is dealt
      if (step > 0)
        CHECK(plan.tokens == 10 * static_cast<std::int64_t>(indices[replica_of(actor)].size()));
    }
    if (step > 0)
      CHECK(plans.size() == static_cast<std::size_t>(out ? 4 : 6));
  }
}

TEST_CASE("without redeal a lost replica's microbatches are not made: the step shrinks") {
  auto router = local_update_router(3, 3);
  for (int a = 1; a <= 6; ++a)
    router.grant(a, 1000);
  router.drop_replica(2); // before anything went out: step 0 is dealt without it
  std::map<std::int64_t, int> made;
  while (auto e = router.next()) {
    ++made[e->step];
    CHECK(e->route.front().actor < 5);
  }
  CHECK(made == std::map<std::int64_t, int>{{0, 4}, {1, 4}, {2, 4}});
}

TEST_CASE("elastic DDP: each replica's stages reduce their own norm, with the whole step's tokens, before and after "
          "a loss") {
  // 3 replicas (stages 1-2, 3-4, 5-6), 2 microbatches each, 10 tokens a
  // microbatch; replica 1 leaves once step 0's plans are out, before step 1's.
  auto router = local_update_router(3, 3, true, true);
  for (int a = 1; a <= 6; ++a)
    router.grant(a, 1000);
  std::map<std::int64_t, std::map<int, step_plan_msg>> plans; // step -> stage actor -> its plan
  std::map<std::int64_t, std::map<int, int>> made;            // step -> first stage -> microbatches
  bool dropped = false;
  while (auto e = router.next()) {
    for (const auto& [actor, plan] : e->plans)
      plans[e->step][actor] = plan;
    ++made[e->step][e->route.front().actor];
    if (e->step_end && e->step == 0 && !dropped) {
      router.drop_replica(1);
      dropped = true;
    }
  }
  REQUIRE(plans.size() == 3);
  for (int a = 1; a <= 6; ++a) { // step 0: every replica, a reduction of its own two stages rooted at its first
    const auto& p = plans[0].at(a);
    CHECK(p.participants == 2);
    CHECK(p.reducer == (a % 2 == 1 ? a : a - 1));
    CHECK(p.tokens == 60); // the sum over the replicas: the whole step's tokens
    CHECK(p.hops == 2);
  }
  for (std::int64_t step : {1, 2}) { // replicas 0 and 2 take replica 1's microbatches: the step keeps its 60 tokens
    CHECK(plans[step].size() == 4);
    CHECK(plans[step].count(3) == 0);
    CHECK(made[step].at(1) + made[step].at(5) == 6);
    for (int a : {1, 2, 5, 6}) {
      const auto& p = plans[step].at(a);
      CHECK(p.participants == 2);
      CHECK(p.reducer == (a <= 2 ? 1 : 5));
      CHECK(p.tokens == 60);
      CHECK(p.hops == made[step].at(a <= 2 ? 1 : 5));
    }
  }
}
