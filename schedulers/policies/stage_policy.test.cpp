// Policies are made by name from a registry that plugins can extend.
#include "schedulers/policies/stage_policy.hpp"

#include <doctest/doctest.h>

#include "schedulers/sim/harness.hpp"

using namespace troupe::sched;

TEST_CASE("an unknown policy name fails with the list of valid ones") {
  auto p = make_policy("1f1c", {});
  REQUIRE(!p);
  CHECK(p.error().message.find("unknown policy '1f1c'") != std::string::npos);
  for (const char* name : {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "table"})
    CHECK(p.error().message.find(name) != std::string::npos);
}

TEST_CASE("built-in policies report their memory bound and whether they split backward") {
  policy_params params;
  params.ranks = 4;
  params.rank = 1;
  auto one = make_policy("1f1b", params);
  REQUIRE(one);
  CHECK((*one)->name() == "1f1b");
  CHECK((*one)->in_flight_limit() == 3);
  CHECK(!(*one)->splits_backward());
  auto zb = make_policy("zb_h1", params);
  REQUIRE(zb);
  CHECK((*zb)->splits_backward());
  CHECK((*zb)->in_flight_limit() == 3);
  auto gp = make_policy("gpipe", params);
  REQUIRE(gp);
  CHECK((*gp)->in_flight_limit() == 0);
  CHECK(!policy_summary("zb_h1").empty());
}

TEST_CASE("bad policy parameters are refused with the reason") {
  policy_params params;
  params.ranks = 4;
  params.rank = 4;
  CHECK(make_policy("1f1b", params).error().message.find("rank 4 is outside 0..3") != std::string::npos);
  params.rank = 0;
  params.chunks = 2;
  CHECK(make_policy("1f1b", params).error().message.find("interleaved_1f1b") != std::string::npos);
  params.chunks = 1;
  params.options = {{"max_in_flight", "0"}};
  CHECK(make_policy("1f1b", params).error().message.find("max_in_flight must be an integer of at least 1, not '0'") !=
        std::string::npos);
  params.options = {{"patience", "2"}};
  auto unknown = make_policy("zb_h1", params);
  REQUIRE(!unknown);
  CHECK(unknown.error().message == "zb_h1: unknown option 'patience' (known: max_in_flight, max_deferred_weight)");
}

namespace {

// Backward first, whatever is ready, within 1F1B's bound: the naive rule.
struct backward_first : stage_policy {
  int limit;
  explicit backward_first(int l) : limit(l) {}
  std::string_view name() const override { return "backward_first"; }
  int in_flight_limit() const override { return limit; }
  std::optional<action> next(const stage_queue& q) override {
    if (!q.ready_backward(0).empty())
      return bwd(q.rank(), *q.ready_backward(0).begin());
    if (!q.ready_forward(0).empty() && q.in_flight() < limit)
      return fwd(q.rank(), *q.ready_forward(0).begin());
    return std::nullopt;
  }
};

} // namespace

TEST_CASE("a registered policy is made by name like the built-in ones") {
  register_policy("backward_first", "test policy", [](const policy_params& p) -> expected<policy_ptr> {
    return policy_ptr{new backward_first(p.ranks - p.rank)};
  });
  auto names = policy_names();
  CHECK(std::find(names.begin(), names.end(), "backward_first") != names.end());
  sim_config c;
  auto r = simulate(c, "backward_first");
  REQUIRE(r);
  CHECK(to_string(std::span<const action>(r->orders[0])) ==
        "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7");
}

namespace {

policy_ptr policy(const std::string& name, int rank, int ranks, int chunks = 1) {
  policy_params params;
  params.rank = rank, params.ranks = ranks, params.chunks = chunks;
  auto p = make_policy(name, params);
  REQUIRE(p);
  return std::move(*p);
}

// Runs `a` on `q` to completion.
void run(stage_queue& q, const action& a) {
  REQUIRE(q.start(a));
  REQUIRE(q.finish(a));
}

} // namespace

// Each case below is a state no published order passes through: a policy that
// replayed its list would wait for the action the list names next.

TEST_CASE("every rule policy runs microbatch 3 when its input came before microbatch 2's") {
  for (std::string name : {"gpipe", "1f1b", "zb_h1"}) {
    stage_queue q(1, 4, 8);
    for (int mb : {0, 1})
      REQUIRE(q.push_forward(1, mb));
    auto p = policy(name, 1, 4);
    for (int mb : {0, 1}) {
      auto a = p->next(q);
      REQUIRE(a);
      CHECK(*a == fwd(1, mb));
      run(q, *a);
    }
    REQUIRE(q.push_forward(1, 3)); // 2 was routed elsewhere, or is late
    auto a = p->next(q);
    CAPTURE(name);
    REQUIRE(a);
    CHECK(*a == fwd(1, 3)); // the list says 1F2 next, and would wait for it
  }
  stage_queue q(0, 4, 8, 2); // interleaved: the first chunk's inputs come from the router
  REQUIRE(q.push_forward(0, 1));
  auto a = policy("interleaved_1f1b", 0, 4, 2)->next(q);
  REQUIRE(a);
  CHECK(*a == fwd(0, 1)); // Megatron's list starts with 0F0
}

TEST_CASE("interleaved 1F1B runs the forward whose input arrived first, whatever Megatron's groups say") {
  // Rank 1 of 4 with two chunks has run its first chunk for microbatches 0-3.
  // Megatron's order runs 5F0 (group 0's second chunk) before 1F4 (group 1);
  // the rule runs whichever input is here first.
  for (bool later_chunk_first : {true, false}) {
    stage_queue q(1, 4, 8, 2);
    auto p = policy("interleaved_1f1b", 1, 4, 2);
    for (int mb = 0; mb < 4; ++mb) {
      REQUIRE(q.push_forward(1, mb));
      run(q, fwd(1, mb));
    }
    if (later_chunk_first) {
      REQUIRE(q.push_forward(5, 0));
      REQUIRE(q.push_forward(1, 4));
    } else {
      REQUIRE(q.push_forward(1, 4));
      REQUIRE(q.push_forward(5, 0));
    }
    CHECK(q.arrival(fwd(1, 4)) == (later_chunk_first ? 5 : 4));
    CHECK(q.arrival(fwd(5, 1)) == -1);
    auto a = p->next(q);
    REQUIRE(a);
    CAPTURE(later_chunk_first);
    CHECK(*a == (later_chunk_first ? fwd(5, 0) : fwd(1, 4)));
  }
}

TEST_CASE("1F1B holds a ready backward for a forward the step's plan still announces, and runs it once none is") {
  stage_queue q(1, 4, 0); // rank 1 warms up with three forwards in the published order
  q.expect(3);            // the router's plan: three microbatches visit this rank this step
  REQUIRE(q.push_forward(1, 0));
  REQUIRE(q.push_forward(1, 1));
  auto p = policy("1f1b", 1, 4);
  run(q, *p->next(q)); // 1F0
  run(q, *p->next(q)); // 1F1
  REQUIRE(q.push_backward(1, 0));
  CHECK(q.forwards_to_come() == 1);
  CHECK(!p->next(q)); // 1B0 would delay 1F2, which ranks 2 and 3 wait on
  q.expect(2);        // a step of two: nothing else comes, so the backward runs
  auto a = p->next(q);
  REQUIRE(a);
  CHECK(*a == bwd(1, 0)); // the list of a 3-microbatch step says 1F2 before 1B0
}

TEST_CASE("ZB-H1 holds a ready I for a coming forward, and runs a W in that wait once r + 1 are deferred") {
  stage_queue q(2, 4, 0); // rank 2: at most 2 in flight, 3 W deferred
  q.expect(5);
  auto p = policy("zb_h1", 2, 4);
  auto next_is = [&](const action& want) {
    auto a = p->next(q);
    REQUIRE(a);
    CHECK(*a == want);
    run(q, *a);
  };
  REQUIRE(q.push_forward(2, 0));
  REQUIRE(q.push_forward(2, 1));
  next_is(fwd(2, 0));
  next_is(fwd(2, 1)); // the bound is reached
  REQUIRE(q.push_backward(2, 0));
  next_is(igrad(2, 0)); // at the bound the I runs
  REQUIRE(q.push_backward(2, 1));
  CHECK(!p->next(q)); // 2I1 and 2W0 would delay 2F2, still to come
  REQUIRE(q.push_forward(2, 2));
  next_is(fwd(2, 2));
  next_is(igrad(2, 1));
  REQUIRE(q.push_forward(2, 3));
  next_is(fwd(2, 3));
  REQUIRE(q.push_backward(2, 2));
  next_is(igrad(2, 2)); // W0, W1 and W2 are deferred now: r + 1
  // 2F4 is still to come, and 2I3 cannot start before a W: the W runs in the
  // wait, where the published order runs it after 2F4.
  next_is(wgrad(2, 0));
  REQUIRE(q.push_backward(2, 3));
  CHECK(!p->next(q)); // two deferred: 2I3 waits for 2F4 again, and no W is due
}

TEST_CASE("GPipe runs a backward while a forward is late, and the interleaved rule a later group's") {
  stage_queue q(3, 4, 8); // the last stage: its backward is ready when its forward ends
  REQUIRE(q.push_forward(3, 0));
  auto gp = policy("gpipe", 3, 4);
  run(q, *gp->next(q)); // 3F0
  auto a = gp->next(q);
  REQUIRE(a);
  CHECK(*a == bwd(3, 0)); // the list has every forward first and would wait for 3F1

  stage_queue iq(3, 4, 0, 2); // rank 3: chunk 1 is the last virtual stage
  iq.expect(2);               // this step routes only microbatch 0 here (both chunks)
  auto il = policy("interleaved_1f1b", 3, 4, 2);
  REQUIRE(iq.push_forward(3, 0));
  run(iq, *il->next(iq)); // 3F0, then its chunk-1 input arrives
  REQUIRE(iq.push_forward(7, 0));
  run(iq, *il->next(iq)); // 7F0: the loss; 7B0 is ready
  a = il->next(iq);
  REQUIRE(a);
  CHECK(*a == bwd(7, 0)); // Megatron's list runs 3F1 3F2 3F3 7F1 first; none of them comes
}

namespace {

/// Starts and finishes `a` on `q`, which must be what the policy chose.
void run_action(stage_queue& q, const std::optional<action>& a) {
  REQUIRE(a);
  REQUIRE(q.start(*a));
  REQUIRE(q.finish(*a));
}

} // namespace

TEST_CASE("1F1B on SkipPipe's stage 0 holds at most a path's hops of microbatches, and the head never waits") {
  // Stage 0 of 4 holds the embedding (stage 0) and the head (stage 4); paths of
  // 3 stages: the embedding's forward has 4 hops left (3 stages and the head).
  policy_params params;
  params.ranks = 4, params.rank = 0, params.chunks = 2;
  CHECK_FALSE(make_policy("1f1b", params)); // two chunks on a chain: interleaved's, not 1F1B's
  params.paths = true;
  auto made = make_policy("1f1b", params);
  REQUIRE(made);
  auto& policy = **made;
  CHECK(policy.in_flight_limit() == 0); // credits do not bind: bounds differ per microbatch
  stage_queue q(0, 4, 0, 2);
  q.expect(12);
  for (int mb = 0; mb < 6; ++mb)
    REQUIRE(q.push_forward(0, mb, hop_info{0, 4, -1}));
  for (int mb = 0; mb < 4; ++mb)
    run_action(q, policy.next(q));
  CHECK(q.held_within(4) == 4);
  CHECK_FALSE(policy.next(q)); // microbatch 4 waits: 4 are held
  // Microbatch 0 comes back for its head: held already, so it runs at the bound.
  REQUIRE(q.push_forward(4, 0, hop_info{3, 1, -1}));
  auto head = policy.next(q);
  REQUIRE(head);
  CHECK(*head == fwd(4, 0));
  run_action(q, head);
  CHECK(q.held_within(4) == 4);  // one microbatch on two chunks counts once
  run_action(q, policy.next(q)); // the head's backward (the loss is computed here)
  CHECK_FALSE(policy.next(q));   // still 4 held until the embedding's backward
  REQUIRE(q.push_backward(0, 0));
  auto back = policy.next(q);
  REQUIRE(back);
  CHECK(back->kind == op_kind::backward);
  run_action(q, back);
  CHECK(policy.next(q) == fwd(0, 4)); // a slot is free again
}

TEST_CASE("1F1B on paths lets a microbatch near its end pass those that started here early") {
  // A node at position 1 holds two microbatches for which it is the first hop
  // after stage 0 (3 hops left); one for which it is the last before the head
  // (2 hops left) still starts: only held microbatches as close to their end
  // count, or paths crossing in opposite orders would wait on each other.
  policy_params params;
  params.ranks = 4, params.rank = 1, params.paths = true;
  auto made = make_policy("1f1b", params);
  REQUIRE(made);
  stage_queue q(1, 4, 0, 1);
  q.expect(6);
  REQUIRE(q.push_forward(1, 0, hop_info{1, 3, -1}));
  REQUIRE(q.push_forward(1, 1, hop_info{1, 3, -1}));
  run_action(q, (*made)->next(q));
  run_action(q, (*made)->next(q));
  CHECK(q.in_flight() == 2);
  REQUIRE(q.push_forward(1, 2, hop_info{2, 2, -1}));
  CHECK((*made)->next(q) == fwd(1, 2));
  // With three held as close to their ends as it is, a microbatch with 3 hops left waits.
  REQUIRE(q.push_forward(1, 3, hop_info{1, 3, -1}));
  run_action(q, (*made)->next(q));
  CHECK(q.held_within(3) == 3);
  CHECK_FALSE((*made)->next(q));
}
