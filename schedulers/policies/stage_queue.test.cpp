// The stage queue tracks what is ready, running, in flight and done on one rank.
#include "schedulers/policies/stage_queue.hpp"

#include <doctest/doctest.h>

using namespace troupe::sched;

TEST_CASE("a forward is ready once its input arrives and counts as in flight until its backward ends") {
  stage_queue q(1, 4, 3);
  CHECK(!q.is_ready(fwd(1, 0)));
  REQUIRE(q.push_forward(1, 0));
  CHECK(q.is_ready(fwd(1, 0)));
  CHECK(q.ready_forward(0).count(0) == 1);
  REQUIRE(q.start(fwd(1, 0)));
  CHECK(q.in_flight() == 1);
  CHECK(!q.is_ready(fwd(1, 0)));
  REQUIRE(q.finish(fwd(1, 0)));
  CHECK(!q.is_ready(bwd(1, 0))); // not the last stage: the gradient comes from downstream
  REQUIRE(q.push_backward(1, 0));
  REQUIRE(q.start(bwd(1, 0)));
  REQUIRE(q.finish(bwd(1, 0)));
  CHECK(q.in_flight() == 0);
  CHECK(q.is_done(bwd(1, 0)));
  CHECK(q.completed(0) == 1);
  CHECK(!q.step_complete());
}

TEST_CASE("the last stage's backward is ready as soon as its forward finishes") {
  stage_queue q(1, 2, 1);
  REQUIRE(q.push_forward(1, 0));
  REQUIRE(q.start(fwd(1, 0)));
  REQUIRE(q.finish(fwd(1, 0)));
  CHECK(q.is_ready(bwd(1, 0)));
  CHECK(q.is_ready(igrad(1, 0)));
}

TEST_CASE("a split backward frees the activation at I and leaves W deferred") {
  stage_queue q(0, 1, 1);
  REQUIRE(q.push_forward(0, 0));
  REQUIRE(q.start(fwd(0, 0)));
  REQUIRE(q.finish(fwd(0, 0)));
  REQUIRE(q.start(igrad(0, 0)));
  REQUIRE(q.finish(igrad(0, 0)));
  CHECK(q.in_flight() == 0);
  CHECK(q.deferred_weight_count() == 1);
  CHECK(!q.step_complete());
  REQUIRE(q.start(wgrad(0, 0)));
  REQUIRE(q.finish(wgrad(0, 0)));
  CHECK(q.deferred_weight_count() == 0);
  CHECK(q.step_complete());
}

TEST_CASE("interleaved chunks map to virtual stages rank + chunk * ranks") {
  stage_queue q(1, 4, 8, 2);
  CHECK(q.stage_of(0) == 1);
  CHECK(q.stage_of(1) == 5);
  CHECK(q.chunk_of(5) == 1);
  CHECK(q.owns(5));
  CHECK(!q.owns(2));
  REQUIRE(q.push_forward(5, 3));
  CHECK(q.ready_forward(1).count(3) == 1);
  CHECK(q.ready_forward(0).empty());
}

TEST_CASE("the queue refuses impossible bookkeeping with a message naming the rank") {
  stage_queue q(1, 4, 2);
  auto foreign = q.push_forward(2, 0);
  REQUIRE(!foreign);
  CHECK(foreign.error().message.find("rank 1") != std::string::npos);
  CHECK(!q.push_forward(1, 5));
  REQUIRE(q.push_forward(1, 0));
  CHECK(!q.push_forward(1, 0));  // duplicate
  CHECK(!q.push_backward(1, 1)); // gradient before its forward
  CHECK(!q.start(fwd(1, 1)));    // not ready
  REQUIRE(q.start(fwd(1, 0)));
  REQUIRE(q.push_forward(1, 1));
  CHECK(!q.start(fwd(1, 1)));  // something runs already
  CHECK(!q.finish(fwd(1, 1))); // not the running action
}

TEST_CASE("reset starts a new step and measured costs survive it") {
  stage_queue q(0, 1, 1);
  q.set_now(1.0);
  REQUIRE(q.push_forward(0, 0));
  REQUIRE(q.start(fwd(0, 0)));
  q.set_now(3.0);
  REQUIRE(q.finish(fwd(0, 0)));
  CHECK(q.mean_cost(op_kind::forward) == doctest::Approx(2.0));
  CHECK(q.mean_cost(op_kind::weight_grad) == doctest::Approx(2.0)); // falls back to the overall mean
  auto step = q.step();
  q.reset();
  CHECK(q.step() == step + 1);
  CHECK(q.in_flight() == 0);
  CHECK(!q.is_done(fwd(0, 0)));
  CHECK(q.mean_cost(op_kind::forward) == doctest::Approx(2.0));
}
