// The outer step's arithmetic against hand-worked values of torch's SGD, and
// the pseudo-gradient, mixing and mean DiLoCo builds on.
#include "schedulers/sync/outer_optimizer.hpp"

#include <doctest/doctest.h>

#include "schedulers/sync/streaming_diloco.hpp"

using namespace troupe;
using namespace troupe::sched;

TEST_CASE("outer SGD with Nesterov momentum takes torch's steps") {
  // torch.optim.SGD(lr=0.7, momentum=0.9, nesterov=True), grads 1 then 2, from 0:
  // buf 1, p -= 0.7·(1 + 0.9·1) = 1.33; buf 0.9 + 2 = 2.9, p -= 0.7·(2 + 2.61) = 3.227.
  outer_sgd o({.lr = 0.7, .momentum = 0.9, .nesterov = true}, 1);
  std::vector<float> p{0.0f};
  o.step(p, std::vector<float>{1.0f});
  CHECK(p[0] == doctest::Approx(-1.33).epsilon(1e-6));
  o.step(p, std::vector<float>{2.0f});
  CHECK(p[0] == doctest::Approx(-1.33 - 3.227).epsilon(1e-6));
  CHECK(o.momentum()[0] == doctest::Approx(2.9));
}

TEST_CASE("outer SGD without Nesterov steps along the buffer, and without momentum along the gradient") {
  outer_sgd heavy({.lr = 0.5, .momentum = 0.5, .nesterov = false}, 1);
  std::vector<float> p{0.0f};
  heavy.step(p, std::vector<float>{2.0f}); // buf 2: p -= 1
  heavy.step(p, std::vector<float>{2.0f}); // buf 3: p -= 1.5
  CHECK(p[0] == -2.5f);
  outer_sgd plain({.lr = 2, .momentum = 0, .nesterov = true}, 2);
  std::vector<float> q{1.0f, 1.0f};
  plain.step(q, std::vector<float>{6.0f, -1.0f});
  CHECK(q == std::vector<float>{-11.0f, 3.0f});
}

TEST_CASE("the pseudo-gradient is global minus local, averaged over replicas, mixed by alpha") {
  std::vector<float> global{1.0f, 1.0f}, a{-1.0f, 3.0f}, b{-3.0f, 1.0f}, ga(2), gb(2);
  pseudo_gradient(global, a, ga);
  pseudo_gradient(global, b, gb);
  CHECK(ga == std::vector<float>{2.0f, -2.0f});
  auto m = mean({ga, gb});
  CHECK(m == std::vector<float>{3.0f, -1.0f});
  std::vector<float> p{2.0f, 0.0f}; // local values, mixed toward the global {0, 4}
  mix(std::vector<float>{0.0f, 4.0f}, p, 0.25);
  CHECK(p == std::vector<float>{0.5f, 3.0f});
}

TEST_CASE("DiLoCo applies the replicas' mean pseudo-gradient to the saved global, not to the local values") {
  local_update_spec s;
  s.algorithm = "diloco", s.sync_every = 2, s.outer = {.lr = 1, .momentum = 0, .nesterov = false};
  streaming_diloco r0(s, {{1.0f}}), r1(s, {{1.0f}});
  CHECK(r0.after_inner_step().empty());
  auto ev = r0.after_inner_step();
  REQUIRE(ev.size() == 2);                                 // prepare and perform in one step when τ = 0
  std::vector<float> l0{0.0f}, l1{4.0f};                   // the replicas drifted apart
  auto avg = mean({r0.prepare(0, l0), r1.prepare(0, l1)}); // (1 − 0 + 1 − 4) / 2 = −1
  r0.perform(0, avg, l0);
  CHECK(r0.global(0)[0] == 2.0f); // 1 − 1·(−1)
  CHECK(l0[0] == 2.0f);           // α = 0: the local values become the new global
  CHECK(r0.exchanges() == 1);
}
