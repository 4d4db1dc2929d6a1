// The stage core's global-norm reduction, driven by hand on a chain of two
// stages: when each stage applies its update (synchronous clipping, or
// post-validation's early step) and what waits for the total.
#include "schedulers/policies/stage_core.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "schedulers/routing/router.hpp"

using namespace troupe;
using namespace troupe::sched;

namespace {

/// Router 0 and stages 1 -> 2 (one chunk each, gpipe), one microbatch a step.
/// Messages wait in `mail` until settle() delivers them; the reducer's totals
/// wait in `verdicts` until the test delivers them.
struct chain {
  const route_t route{{1, 0}, {2, 0}};
  std::deque<std::function<void()>> mail, verdicts;
  std::vector<std::string> log[3]; ///< by actor: "early S" and "update S"
  std::unique_ptr<stage_core> stages[3];

  explicit chain(bool post_validate) {
    for (int a = 1; a <= 2; ++a) {
      stage_core_config cc;
      cc.name = "s" + std::to_string(a - 1);
      cc.actor = a, cc.rank = a - 1, cc.ranks = 2, cc.router = 0, cc.steps = 2;
      cc.reduce_norm = true, cc.post_validate = post_validate;
      cc.input_credits = chain_input_credits(route, a, 0, 2);
      policy_params pp;
      pp.rank = a - 1, pp.ranks = 2;
      auto policy = make_policy("gpipe", pp);
      REQUIRE(policy);
      stage_core_hooks h;
      h.forward = [this](int to, const msg_meta& m) { deliver(to, m, true); };
      h.backward = [this](int to, const msg_meta& m) { deliver(to, m, false); };
      h.credit = [this, a](int to, int n) {
        if (to > 0)
          mail.push_back([this, to, a, n] { stage(to).on_credit(a, n); });
      };
      h.norm = [this, a](int reducer, std::int64_t step, double sq) {
        mail.push_back([this, reducer, step, sq, a] { stage(reducer).on_norm(step, sq, a); });
      };
      h.clip = [this](int to, std::int64_t step, double total) {
        verdicts.push_back([this, to, step, total] { stage(to).on_clip(step, total); });
      };
      h.gradients_complete = [](std::int64_t) { return 1.0; };
      h.update = [this, a](std::int64_t step, double) { log[a].push_back("update " + std::to_string(step)); };
      h.update_early = [this, a](std::int64_t step) { log[a].push_back("early " + std::to_string(step)); };
      stages[a] = std::make_unique<stage_core>(std::move(cc), std::move(*policy), std::move(h));
    }
    for (int a = 1; a <= 2; ++a)
      stage(a).start();
  }
  stage_core& stage(int a) { return *stages[a]; }

  /// A message as the actor takes it: held by admit() when it belongs to a later step.
  void deliver(int to, const msg_meta& m, bool activation) {
    mail.push_back([this, to, m, activation] {
      auto run = [this, to, m, activation] { activation ? stage(to).on_activation(m) : stage(to).on_gradient(m); };
      if (stage(to).admit(m.step, false, run))
        run();
    });
  }
  /// The router's plans and batch of `step`.
  void emit(std::int64_t step) {
    for (int a = 1; a <= 2; ++a)
      stage(a).on_plan({step, 1, 16, 2, 1}); // the route's head reduces
    msg_meta m{step, 0, 0, route};
    auto tokens = [this, m] { stage(1).on_batch(m, true, false); };
    auto targets = [this, m] { stage(2).on_batch(m, false, true); };
    if (stage(1).admit(step, false, tokens))
      tokens();
    if (stage(2).admit(step, false, targets))
      targets();
  }
  /// Delivers mail and runs every action that can start, until nothing moves.
  void settle() {
    for (bool moved = true; moved;) {
      moved = false;
      while (!mail.empty()) {
        auto f = std::move(mail.front());
        mail.pop_front();
        f();
        moved = true;
      }
      for (int a = 1; a <= 2; ++a)
        if (auto t = stage(a).begin()) {
          stage(a).finish(*t);
          moved = true;
        }
    }
  }
};

} // namespace

TEST_CASE("with post_validate a stage steps before the global norm is back, and runs no later step until it is") {
  chain c(true);
  c.emit(0);
  c.settle();
  // s1 finished first: it sent its norm and stepped at once; s0 (the reducer) heard it, stepped and validated.
  CHECK(c.log[2] == std::vector<std::string>{"early 0"});
  CHECK(c.log[1] == std::vector<std::string>{"early 0", "update 0"});
  CHECK(c.stage(2).awaiting_total());
  CHECK(c.stage(1).step() == 1);
  c.emit(1);
  c.settle();
  // Step 1's activation reached s1 and waits there with its targets: the early update may still be rolled back.
  CHECK(c.stage(2).step() == 0);
  CHECK(c.stage(2).held_count() >= 1);
  CHECK(!c.stage(2).begin());
  REQUIRE(c.verdicts.size() == 1);
  c.verdicts.front()();
  c.verdicts.pop_front();
  CHECK(c.log[2] == std::vector<std::string>{"early 0", "update 0"});
  c.settle();
  while (!c.verdicts.empty()) { // step 1's total
    c.verdicts.front()();
    c.verdicts.pop_front();
    c.settle();
  }
  CHECK(c.log[2] == std::vector<std::string>{"early 0", "update 0", "early 1", "update 1"});
  CHECK(c.stage(1).training_done());
  CHECK(c.stage(2).training_done());
}

TEST_CASE("with synchronous clipping a stage applies its update only once the global norm is back") {
  chain c(false);
  c.emit(0);
  c.settle();
  CHECK(c.log[2].empty());
  CHECK(c.log[1] == std::vector<std::string>{"update 0"});
  CHECK(c.stage(2).awaiting_total());
  REQUIRE(c.verdicts.size() == 1);
  c.verdicts.front()();
  c.verdicts.pop_front();
  CHECK(c.log[2] == std::vector<std::string>{"update 0"});
}

TEST_CASE("the reducer sums the stages' norms in actor order, so reducers that hear them in other orders agree") {
  // Elastic DDP's replicas each reduce the same norms (#26): the totals must be
  // the same bits. 1e16 + 1 + 1 is 1e16 in doubles, 1 + 1 + 1e16 is 1e16 + 2.
  auto total_heard = [](const std::vector<std::pair<int, double>>& order) {
    stage_core_config cc;
    cc.name = "s0", cc.actor = 1, cc.rank = 0, cc.ranks = 3, cc.router = 0, cc.steps = 1, cc.reduce_norm = true;
    policy_params pp;
    pp.rank = 0, pp.ranks = 3;
    auto policy = make_policy("gpipe", pp);
    REQUIRE(policy);
    double total = -1;
    stage_core_hooks h;
    h.clip = [&](int, std::int64_t, double t) { total = t; };
    stage_core core(std::move(cc), std::move(*policy), std::move(h));
    core.start();
    core.on_plan({0, 1, 16, 3, 1});
    for (auto [from, sq] : order)
      core.on_norm(0, sq, from);
    return total;
  };
  double a = total_heard({{2, 1e16}, {3, 1.0}, {1, 1.0}}), b = total_heard({{1, 1.0}, {3, 1.0}, {2, 1e16}});
  CHECK(a >= 1e16);
  CHECK(std::memcmp(&a, &b, sizeof a) == 0);
}

namespace {

/// Routed around stragglers (least_loaded): router 0; replica 0's stages 1 -> 2
/// and replica 1's 3 -> 4, each first-position stage choosing either second
/// one. Messages wait in `mail` with their sender; a lost sender's are dropped
/// on delivery, and nothing is sent to a lost actor, as stage_engine does.
struct mesh {
  std::deque<std::pair<int, std::function<void()>>> mail;
  std::set<int> lost;
  std::vector<std::string> log[5]; ///< by actor: "update S"
  std::vector<int> forwards[5];    ///< by actor: the microbatches it ran forwards of
  std::unique_ptr<stage_core> stages[5];

  explicit mesh(std::int64_t steps = 2) {
    for (int a = 1; a <= 4; ++a)
      make(a, steps);
    for (int a = 1; a <= 4; ++a)
      stage(a).start();
    deliver(); // the second position's credits to the first's
  }
  /// Stage `a`, new (a rejoining one's start: `resume_at` steps done).
  void make(int a, std::int64_t steps, std::int64_t resume_at = 0) {
    bool first = a % 2 == 1;
    stage_core_config cc;
    cc.name = fmt::format("r{}s{}", (a - 1) / 2, first ? 0 : 1);
    cc.actor = a, cc.rank = first ? 0 : 1, cc.ranks = 2, cc.router = 0, cc.steps = steps;
    cc.input_credits = first ? std::map<int, int>{{0, 0}} : std::map<int, int>{{1, 0}, {3, 0}};
    if (first)
      cc.next_replicas = {2, 4};
    else
      cc.hop_reporters = 2, cc.targets_travel = true;
    policy_params pp;
    pp.rank = cc.rank, pp.ranks = 2;
    auto policy = make_policy("gpipe", pp);
    REQUIRE(policy);
    stage_core_hooks h;
    h.forward = [this, a](int to, const msg_meta& m) { post(a, to, [this, a, to, m] { take(a, to, m, true); }); };
    h.backward = [this, a](int to, const msg_meta& m) { post(a, to, [this, a, to, m] { take(a, to, m, false); }); };
    h.credit = [this, a](int to, int n) {
      if (to > 0)
        post(a, to, [this, to, a, n] { stage(to).on_credit(a, n); });
    };
    h.hops = [this, a](int to, std::int64_t step, int n) {
      post(a, to, [this, to, a, step, n] {
        if (!stage(to).drops_from(a, step))
          stage(to).on_hops(step, a, n);
      });
    };
    h.update = [this, a](std::int64_t step, double) { log[a].push_back("update " + std::to_string(step)); };
    stages[a] = std::make_unique<stage_core>(std::move(cc), std::move(*policy), std::move(h));
    stages[a]->resume_at(resume_at);
  }
  stage_core& stage(int a) { return *stages[a]; }
  void post(int from, int to, std::function<void()> f) {
    if (to != from && !lost.contains(to) && !stage(from).is_lost(to))
      mail.emplace_back(from, std::move(f));
  }
  void take(int from, int to, const msg_meta& m, bool activation) {
    if (stage(to).drops_from(from, m.step))
      return;
    auto run = [this, to, m, activation] { activation ? stage(to).on_activation(m) : stage(to).on_gradient(m); };
    if (stage(to).admit(m.step, false, run))
      run();
  }
  void plan(int a, std::int64_t step) { stage(a).on_plan({step, a % 2 == 1 ? 1 : -1, 32, 1, a}); }
  /// The router's plans (to `planned`) and batches of `step`: microbatch 0 for replica 0, 1 for replica 1
  /// (to the replicas whose first stage has a plan).
  void emit(std::int64_t step, const std::vector<int>& planned = {1, 2, 3, 4}) {
    for (int a : planned)
      plan(a, step);
    for (int r = 0; r < 2; ++r) {
      if (std::find(planned.begin(), planned.end(), 1 + 2 * r) == planned.end())
        continue;
      route_t route{{1 + 2 * r, 0}, {2 + 2 * r, 0}};
      msg_meta m{step, r, 0, route};
      auto tokens = [this, m, r] { stage(1 + 2 * r).on_batch(m, true, false); };
      if (stage(1 + 2 * r).admit(step, false, tokens))
        tokens();
    }
  }
  /// Delivers the mail of senders still in the run.
  void deliver() {
    while (!mail.empty()) {
      auto [from, f] = std::move(mail.front());
      mail.pop_front();
      if (!lost.contains(from))
        f();
    }
  }
  /// Runs one action at `a`, if it has one to start.
  bool run(int a) {
    auto t = stage(a).begin();
    if (t && t->what.kind == op_kind::forward)
      forwards[a].push_back(t->what.microbatch);
    if (t)
      stage(a).finish(*t);
    return t.has_value();
  }
  /// Delivers and runs every survivor's work until nothing moves.
  void settle() {
    for (bool moved = true; moved;) {
      moved = !mail.empty();
      deliver();
      for (int a = 1; a <= 4; ++a)
        if (!lost.contains(a))
          moved = run(a) || moved;
    }
  }
  /// Replica 1 leaves: each survivor drops its stages and backs out, with a
  /// (here empty) gradient, each microbatch that went to one of them.
  int lose_replica_1() {
    lost = {3, 4};
    int backed_out = 0;
    for (int a : {1, 2})
      for (const auto& m : stage(a).drop_actors(lost)) {
        ++backed_out;
        stage(a).on_gradient({m.step, m.microbatch, m.hop, m.route});
      }
    return backed_out;
  }
};

} // namespace

TEST_CASE("a lost replica leaves routes across replicas: what it sent counts, what went to it is backed out") {
  mesh g;
  // Loads that cross the routes: stage 1 sends its microbatch to 4, stage 3 to 2.
  g.stage(1).on_credit(2, 0, {5.0, 1.0}), g.stage(1).on_credit(4, 0, {0.0, 1.0});
  g.stage(3).on_credit(4, 0, {5.0, 1.0}), g.stage(3).on_credit(2, 0, {0.0, 1.0});
  g.emit(0);
  CHECK(g.run(1));
  CHECK(g.run(3));
  // Stage 3's activation reaches 2, but its node is lost before its count does.
  std::deque<std::pair<int, std::function<void()>>> rest;
  bool activation_in = false;
  for (auto& [from, f] : g.mail)
    if (from == 3 && !activation_in)
      f(), activation_in = true;
    else if (from != 3)
      rest.emplace_back(from, std::move(f));
  g.mail = std::move(rest);
  REQUIRE(activation_in);

  SUBCASE("backed out and counted: the step completes on the replica left") {
    CHECK(g.lose_replica_1() == 1); // stage 1's microbatch 0, which went to 4
    CHECK(g.stage(1).is_lost(4));
    g.settle();
    CHECK(g.log[1] == std::vector<std::string>{"update 0"});
    CHECK(g.log[2] == std::vector<std::string>{"update 0"}); // waited for no count of 3's
    CHECK(g.forwards[2] == std::vector<int>{1});             // and ran the microbatch 3 sent
    // The next step goes to the stages left only.
    g.emit(1);
    g.settle();
    CHECK(g.log[1] == std::vector<std::string>{"update 0", "update 1"});
    CHECK(g.log[2] == std::vector<std::string>{"update 0", "update 1"});
    CHECK(g.stage(1).training_done());
    CHECK(g.stage(2).training_done());
  }
  SUBCASE("without the leave the survivors wait: for 4's gradient, and for 3's count") {
    g.lost = {3, 4};
    g.settle();
    CHECK(g.log[1].empty());
    CHECK(g.log[2].empty());
  }
}

// The router's plan holds the step's tokens, which the loss hop scales its
// gradient by; with routes across replicas the activation and its targets come
// from another stage, and may overtake the plan (they did, one launch in three
// over node processes). The stage holds them until the plan is in.
TEST_CASE("with targets that travel, the loss hop's work of a step waits for the step's plan") {
  mesh g;
  g.emit(0, {1, 3}); // the second position's plans are still on their way
  CHECK(g.run(1));
  CHECK(g.run(3));
  g.deliver();
  CHECK_FALSE(g.run(2));
  CHECK_FALSE(g.run(4));
  CHECK(g.stage(2).held_count() + g.stage(4).held_count() == 2);
  g.plan(2, 0), g.plan(4, 0);
  g.settle();
  CHECK(g.forwards[2].size() + g.forwards[4].size() == 2);
  for (int a = 1; a <= 4; ++a)
    CHECK(g.log[a] == std::vector<std::string>{"update 0"});
}

// A lost replica comes back (#26): the survivors learn its step before its new
// stages start, keep the credits those grant until then, and from that step
// route to them, count their reports and grant them credits.
TEST_CASE("a rejoining replica is routed to again from its step, with the credits it granted before it") {
  mesh g(3);
  g.emit(0);
  g.settle();
  for (int a = 1; a <= 4; ++a)
    REQUIRE(g.log[a] == std::vector<std::string>{"update 0"});
  CHECK(g.lose_replica_1() == 0);
  g.emit(1, {1, 2}); // the router deals replica 0 alone
  // The loader's rejoin reaches the survivors during step 1: in again from step 2.
  for (int a : {1, 2})
    g.stage(a).add_actors({3, 4}, 2);
  CHECK(g.stage(1).is_lost(4));
  // The joiner's stages start at step 2 and grant their credits now, in step 1.
  g.lost.clear();
  g.make(3, 3, 2), g.make(4, 3, 2);
  g.stage(3).start(), g.stage(4).start();
  g.settle();
  CHECK(g.log[1] == std::vector<std::string>{"update 0", "update 1"});
  CHECK(g.log[2] == std::vector<std::string>{"update 0", "update 1"});
  CHECK_FALSE(g.stage(1).is_lost(4));
  CHECK_FALSE(g.stage(2).drops_from(3, 2));
  // Loads that cross the routes, as in the leave's test: 1 sends to 4, 3 to 2.
  g.stage(1).on_credit(2, 0, {5.0, 1.0}), g.stage(1).on_credit(4, 0, {0.0, 1.0});
  g.stage(3).on_credit(4, 0, {5.0, 1.0}), g.stage(3).on_credit(2, 0, {0.0, 1.0});
  g.forwards[2].clear(), g.forwards[4].clear();
  g.emit(2);
  g.settle();
  for (int a = 1; a <= 4; ++a)
    CHECK(g.stage(a).training_done());
  CHECK(g.log[3] == std::vector<std::string>{"update 0", "update 2"}); // its first life, then its second
  CHECK(g.log[4] == std::vector<std::string>{"update 0", "update 2"});
  CHECK(g.forwards[4] == std::vector<int>{0}); // 1 routed to the joiner on the credits it kept for it
  CHECK(g.forwards[2] == std::vector<int>{1}); // and 2 waited for the joiner's count
}

TEST_CASE("a rejoin of an actor in the run, or at a step passed, is refused with the stage's name") {
  mesh g;
  CHECK_THROWS_WITH(g.stage(1).add_actors({3}, 1), doctest::Contains("r0s0: actor 3 rejoins at step 1, but it has"));
  g.lose_replica_1();
  g.emit(0, {1, 2});
  g.settle();
  CHECK_THROWS_WITH(g.stage(1).add_actors({3}, 0), doctest::Contains("which this stage has passed"));
}
