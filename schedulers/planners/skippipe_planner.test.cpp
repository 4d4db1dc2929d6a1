// SkipPipe's planner: every plan keeps the path rules, node memory and stage
// capacity; one agent alone costs the closed form, and A* finds the cheapest path.
#include "schedulers/planners/skippipe_planner.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <numeric>
#include <random>

using namespace troupe::sched;

namespace {

/// `nodes` nodes on `locations` random locations, SkipPipe-like delays (0.1 to 3 s
/// between locations, 10 ms within one) and forwards of 0.5 to 1 s.
path_problem random_problem(int nodes, int stages, int locations, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_real_distribution<double> far{0.1, 3.0}, work{0.5, 1.0};
  std::vector<std::vector<double>> between(locations, std::vector<double>(locations, 0.01));
  for (int a = 0; a < locations; ++a)
    for (int b = a + 1; b < locations; ++b)
      between[a][b] = between[b][a] = far(rng);
  path_problem pr;
  pr.stages = stages;
  pr.delay.assign(nodes, std::vector<double>(nodes, 0));
  for (int a = 0; a < nodes; ++a) {
    pr.forward.push_back(work(rng));
    for (int b = 0; b < nodes; ++b)
      pr.delay[a][b] = a == b ? 0 : between[a % locations][b % locations];
  }
  return pr;
}

/// Every path an agent may take: brute force over node sequences.
void each_path(const path_problem& pr, const placement& p, const path_rules& rules, int start,
               const std::function<void(const std::vector<int>&)>& f) {
  std::vector<int> nodes{start};
  std::function<void()> grow = [&] {
    if (static_cast<int>(nodes.size()) == rules.path_length) {
      if (!check_path(p, rules, nodes, start, pr.nodes()))
        f(nodes);
      return;
    }
    for (int v = 0; v < pr.nodes(); ++v) {
      nodes.push_back(v);
      grow();
      nodes.pop_back();
    }
  };
  grow();
}

void check_plan(const path_problem& pr, const placement& p, const path_rules& rules,
                const std::vector<path_agent>& agents, const std::vector<planned_path>& paths) {
  REQUIRE(paths.size() == agents.size());
  for (const auto& path : paths) {
    auto why = check_path(p, rules, path.nodes, agents[path.agent].start, pr.nodes());
    CHECK_MESSAGE(!why, *why);
  }
  auto why = check_capacity(p, rules, paths, pr.nodes());
  CHECK_MESSAGE(!why, *why);
}

} // namespace

TEST_CASE("the path rules refuse repeats, wrong lengths, long jumps and swaps past their limits") {
  placement p{{0}, {1}, {2}, {3}, {4}, {5}, {6}};
  path_rules r;
  r.path_length = 4;
  CHECK(!check_path(p, r, {0, 1, 2, 3}, 0, 7));
  CHECK(!check_path(p, r, {0, 2, 1, 3}, 0, 7)); // one swap of distance 1
  CHECK(check_path(p, r, {0, 1, 1, 3}, 0, 7)->find("twice") != std::string::npos);
  CHECK(check_path(p, r, {0, 1, 2}, 0, 7)->find("visits 3 stages") != std::string::npos);
  CHECK(check_path(p, r, {1, 0, 2, 3}, 1, 7)->find("not stage 0") != std::string::npos);
  CHECK(!check_path(p, r, {0, 4, 5, 6}, 0, 7)); // a hop 4 past the furthest reached
  CHECK(check_path(p, r, {0, 5, 6, 4}, 0, 7)->find("jumps") != std::string::npos);
  CHECK(check_path(p, r, {0, 3, 1, 2}, 0, 7)->find("swaps") != std::string::npos); // distance 2
  r.path_length = 6;
  CHECK(!check_path(p, r, {0, 2, 1, 4, 3, 5}, 0, 7));
  r.swaps = 1;
  CHECK(check_path(p, r, {0, 2, 1, 4, 3, 5}, 0, 7)->find("swaps") != std::string::npos);
}

TEST_CASE("one agent alone costs exactly the closed form, on the cheapest path the rules allow") {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    auto pr = random_problem(11, 6, 5, seed);
    auto p = search_placement(pr, 0.1, seed, 2);
    path_rules rules;
    rules.path_length = 4;
    std::vector<path_agent> one{{0, p[0][1], 0.25}};
    auto plan = plan_skippipe(pr, p, rules, one, true);
    REQUIRE(plan);
    REQUIRE(plan->paths.size() == 1);
    const auto& nodes = plan->paths[0].nodes;
    double closed = alone_time(pr, one[0], nodes);
    CHECK(plan->planned_s == doctest::Approx(closed).epsilon(1e-12));
    // SkipPipe's factors written out: dt + 2.75·w0 + 2.5·Σ wi + 2·Σ e over the cycle.
    double by_hand = 0.25 + 2.75 * pr.forward[nodes[0]];
    for (std::size_t i = 1; i < nodes.size(); ++i)
      by_hand += 2.5 * pr.forward[nodes[i]];
    for (std::size_t i = 0; i < nodes.size(); ++i)
      by_hand += 2 * pr.delay[nodes[i]][nodes[(i + 1) % nodes.size()]];
    CHECK(closed == doctest::Approx(by_hand).epsilon(1e-12));
    double best = 1e300;
    each_path(pr, p, rules, one[0].start,
              [&](const std::vector<int>& v) { best = std::min(best, alone_time(pr, one[0], v)); });
    CHECK(plan->planned_s == doctest::Approx(best).epsilon(1e-12));
  }
}

/// A random instance: `nodes` nodes on `locations` locations, `stages` positions,
/// paths of `path_length`, memory 3, stage capacity 9, `per_start` microbatches
/// per stage-0 node.
struct instance {
  path_problem pr;
  placement p;
  path_rules rules;
  std::vector<path_agent> agents;
  instance(std::uint64_t seed, int nodes, int stages, int locations, int path_length, int per_start)
      : pr(random_problem(nodes, stages, locations, seed)), p(search_placement(pr, 0.1, seed, 4)) {
    rules.path_length = path_length;
    rules.memory = 3;
    rules.max_per_stage = 9;
    agents = make_agents(pr, p, per_start);
  }
};

/// 20 nodes on 12 locations, 6 positions, paths of 4, three microbatches per
/// stage-0 node (15 agents, 45 visits: every stage full).
instance tight_instance(std::uint64_t seed) {
  return {seed, 20, 6, 12, 4, 3};
}

/// 14 nodes on 6 locations, 4 positions, paths of 3, two microbatches per stage-0 node.
instance small_instance(std::uint64_t seed) {
  return {seed, 14, 4, 6, 3, 2};
}

TEST_CASE("every plan keeps the path rules, node memory and stage capacity") {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    auto [pr, p, rules, agents] = tight_instance(seed);
    for (bool aware : {false, true}) {
      CAPTURE(seed);
      CAPTURE(aware);
      auto plan = plan_skippipe(pr, p, rules, agents, aware, 600);
      REQUIRE_MESSAGE(plan, plan.error().message);
      check_plan(pr, p, rules, agents, plan->paths);
      CHECK(plan->planned_s == simulate_iteration(pr, agents, plan->paths).time);
    }
    auto random = plan_random(pr, p, rules, agents, seed);
    REQUIRE(random);
    check_plan(pr, p, rules, agents, *random);
  }
}

TEST_CASE("the collision-aware plan is never slower than the plan that ignores collisions") {
  for (std::uint64_t seed = 11; seed <= 14; ++seed) {
    auto [pr, p, rules, agents] = small_instance(seed);
    auto blind = plan_skippipe(pr, p, rules, agents, false, 400);
    auto aware = plan_skippipe(pr, p, rules, agents, true, 400);
    REQUIRE(blind);
    REQUIRE(aware);
    CHECK(aware->planned_s <= blind->planned_s);
  }
}

TEST_CASE("no microbatch of a collision-aware plan can take another path and shorten the iteration") {
  for (std::uint64_t seed = 21; seed <= 23; ++seed) {
    CAPTURE(seed);
    auto [pr, p, rules, agents] = small_instance(seed);
    auto plan = plan_skippipe(pr, p, rules, agents, true, 400);
    REQUIRE(plan);
    for (std::size_t a = 0; a < plan->paths.size(); ++a)
      each_path(pr, p, rules, agents[plan->paths[a].agent].start, [&](const std::vector<int>& v) {
        auto paths = plan->paths;
        paths[a].nodes = v;
        if (!check_capacity(p, rules, paths, pr.nodes()))
          CHECK(simulate_iteration(pr, agents, paths).time >= plan->planned_s - 1e-9);
      });
  }
}

TEST_CASE("a search past its deadline stops with a valid plan no better than the full search's, and says so") {
  for (std::uint64_t seed = 31; seed <= 33; ++seed) {
    CAPTURE(seed);
    auto [pr, p, rules, agents] = tight_instance(seed);
    auto full = plan_skippipe(pr, p, rules, agents, true, 600);
    REQUIRE(full);
    CHECK_FALSE(full->cut_short);
    // A deadline already past: phase 1 falls back to prioritized planning, the
    // other phases stop at once. Every phase reports before it checks the clock.
    search_limits limits;
    limits.deadline = std::chrono::steady_clock::now();
    std::vector<int> phases;
    limits.progress = [&](const search_progress& pg) {
      if (phases.empty() || phases.back() != pg.phase)
        phases.push_back(pg.phase);
      CHECK(pg.done >= 0);
      CHECK((pg.of == 0 || pg.done <= pg.of));
    };
    auto cut = plan_skippipe(pr, p, rules, agents, true, 600, limits);
    REQUIRE_MESSAGE(cut, cut.error().message);
    CHECK(cut->cut_short);
    check_plan(pr, p, rules, agents, cut->paths);
    CHECK(cut->planned_s == simulate_iteration(pr, agents, cut->paths).time);
    CHECK(cut->planned_s >= full->planned_s - 1e-9);
    CHECK(cut->expansions < full->expansions);
    REQUIRE_FALSE(phases.empty());
    CHECK(phases.front() == 1);
    CHECK(phases.back() == 2); // stopped at phase 2's first check
  }
}

TEST_CASE("the iteration simulation runs one pass at a time per node") {
  // Two agents on the same two nodes, released together: the second waits for the first.
  path_problem pr;
  pr.stages = 2;
  pr.forward = {1, 2};
  pr.delay = {{0, 0.5}, {0.5, 0}};
  std::vector<path_agent> agents{{0, 0, 0}, {1, 0, 0}};
  std::vector<planned_path> paths{{0, {0, 1}}, {1, {0, 1}}};
  auto alone = simulate_iteration(pr, {agents[0]}, {paths[0]});
  CHECK(alone.time == doctest::Approx(alone_time(pr, agents[0], paths[0].nodes)));
  auto both = simulate_iteration(pr, agents, paths);
  CHECK(both.time > alone.time);
  CHECK(both.passes == std::vector<int>{6, 4}); // F, loss, B on node 0; F, B on node 1; twice
  // Node 0: F0 [0,1], F1 [1,2]; node 1: F0 [1.5,3.5], F1 [3.5,5.5]; loss0 at 4 on node 0 ...
  CHECK(both.time >= 2 * (1 + 2) + 0.5);
}

TEST_CASE("the placement search scores no worse than its ordered start or any of 200 random placements") {
  auto pr = random_problem(20, 6, 12, 7);
  auto found = search_placement(pr, 0.2, 7);
  double score = placement_score(pr, found, 0.2);
  auto sizes = stage_sizes(20, 6);
  CHECK(sizes == std::vector<int>{5, 3, 3, 3, 3, 3});
  std::mt19937_64 rng{99};
  std::vector<int> order(20);
  for (int trial = 0; trial <= 200; ++trial) {
    std::iota(order.begin(), order.end(), 0);
    if (trial > 0)
      std::shuffle(order.begin(), order.end(), rng);
    placement p(6);
    std::size_t next = 0;
    for (std::size_t s = 0; s < 6; ++s)
      for (int k = 0; k < sizes[s]; ++k)
        p[s].push_back(order[next++]);
    CHECK(score <= placement_score(pr, p, 0.2) + 1e-12);
  }
  auto stage = stage_of(found, 20);
  CHECK(std::count(stage.begin(), stage.end(), -1) == 0);
}

TEST_CASE("DT-FM's full pipeline: C fixed chains through every position, matched by delay, microbatches "
          "dealt evenly") {
  // Two locations far apart: nodes 0, 2, 4, 6 in one, 1, 3, 5, 7 in the other; stage 0
  // holds 4 nodes, stages 1 and 2 two each, so C = 2 chains that each stay home.
  path_problem pr;
  pr.stages = 3;
  pr.forward.assign(8, 1.0);
  pr.delay.assign(8, std::vector<double>(8, 0));
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      pr.delay[a][b] = a == b ? 0 : a % 2 == b % 2 ? 0.01 : 5.0;
  placement p{{0, 1, 2, 3}, {5, 4}, {7, 6}};
  auto full = plan_dtfm(pr, p, 5);
  REQUIRE(full.paths.size() == 5);
  REQUIRE(full.agents.size() == 5);
  std::map<std::vector<int>, int> chains;
  for (std::size_t m = 0; m < 5; ++m) {
    const auto& nodes = full.paths[m].nodes;
    REQUIRE(nodes.size() == 3);
    CHECK(full.agents[m].start == nodes[0]);
    CHECK(stage_of(p, 8)[nodes[0]] == 0);
    CHECK(stage_of(p, 8)[nodes[1]] == 1);
    CHECK(stage_of(p, 8)[nodes[2]] == 2);
    CHECK(nodes[0] % 2 == nodes[1] % 2); // no slow link inside a chain
    CHECK(nodes[1] % 2 == nodes[2] % 2);
    ++chains[nodes];
  }
  CHECK(chains.size() == 2);
  for (const auto& [nodes, n] : chains)
    CHECK((n == 2 || n == 3)); // 5 microbatches over 2 chains
  // The j-th microbatch of a chain is released after j forwards of its first node.
  std::map<int, int> seen;
  for (const auto& a : full.agents)
    CHECK(a.release == doctest::Approx(seen[a.start]++ * 1.0));
}

TEST_CASE("a node holds at most path_problem::memory microbatches at once, whatever the plan") {
  // One chain: start node 0, then node 1. Five microbatches released together.
  path_problem pr;
  pr.stages = 2;
  pr.forward = {1.0, 1.0};
  pr.delay = {{0, 2.0}, {2.0, 0}};
  std::vector<path_agent> agents;
  std::vector<planned_path> paths;
  for (int k = 0; k < 5; ++k)
    agents.push_back({k, 0, 0.0}), paths.push_back({k, {0, 1}});
  // Node 1's slots: from each microbatch's forward there to its backward there.
  auto most_held = [&](const iteration_result& r) {
    std::vector<std::pair<double, int>> events;
    for (const auto& runs : r.runs) {
      std::vector<iteration_result::pass_time> on1;
      for (const auto& p : runs)
        if (p.node == 1)
          on1.push_back(p);
      REQUIRE(on1.size() == 2); // its forward and its backward
      events.emplace_back(on1[0].begin, +1);
      events.emplace_back(on1[1].end, -1);
    }
    std::sort(events.begin(), events.end()); // a slot given back at t is free for a forward at t
    int held = 0, most = 0;
    for (auto [t, d] : events)
      most = std::max(most, held += d);
    return most;
  };
  auto free = simulate_iteration(pr, agents, paths);
  CHECK(most_held(free) == 5); // unbounded, all five are in flight at node 1 together
  for (int memory : {1, 2, 4}) {
    CAPTURE(memory);
    pr.memory = memory;
    auto capped = simulate_iteration(pr, agents, paths);
    CHECK(most_held(capped) == memory);
    CHECK(capped.time > free.time); // the fifth forward waited for a slot
  }
  pr.memory = 5;
  CHECK(simulate_iteration(pr, agents, paths).time == free.time); // a bound that never binds changes nothing
}
