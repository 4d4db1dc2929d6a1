// Optimizers against hand-computed updates: AdamW, SGD with Nesterov momentum,
// global-norm clipping and the warmup + cosine schedule.
#include <cmath>

#include <doctest/doctest.h>

#include "ops/adamw.hpp"
#include "ops/grad_clip.hpp"
#include "ops/lr_schedule.hpp"
#include "ops/sgd_nesterov.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;

TEST_CASE("AdamW decays matrices only and follows the bias-corrected update for 3 steps") {
  std::mt19937 rng(1);
  std::vector<named_tensor> params{{"w", randn({3, 7}, rng)}, {"b", randn({7}, rng)}};
  std::vector<named_tensor> grads{{"w", randn({3, 7}, rng)}, {"b", randn({7}, rng)}};
  adamw opt({.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f});
  std::vector<vec> p{to_vec(params[0].value), to_vec(params[1].value)}, m(2), v(2);
  for (int k = 0; k < 2; ++k)
    m[std::size_t(k)] = v[std::size_t(k)] = vec(p[std::size_t(k)].size(), 0.0);
  const double lr = 1e-2;
  for (int t = 1; t <= 3; ++t) {
    opt.step(params, grads, float(lr));
    for (std::size_t k = 0; k < 2; ++k) {
      auto g = to_vec(grads[k].value);
      double wd = k == 0 ? 0.1 : 0.0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        p[k][i] *= 1 - lr * wd;
        m[k][i] = 0.9 * m[k][i] + 0.1 * g[i];
        v[k][i] = 0.95 * v[k][i] + 0.05 * g[i] * g[i];
        double mh = m[k][i] / (1 - std::pow(0.9, t)), vh = v[k][i] / (1 - std::pow(0.95, t));
        p[k][i] -= lr * mh / (std::sqrt(vh) + 1e-8);
      }
      CHECK(compare(to_vec(params[k].value), p[k]).max_rel < 1e-6);
    }
  }
  CHECK(opt.steps() == 3);
  std::vector<named_tensor> fewer{params[0]};
  CHECK_THROWS_AS(opt.step(fewer, grads, 0.1f), std::invalid_argument);
}

TEST_CASE("SGD with Nesterov momentum matches PyTorch's update rule") {
  std::mt19937 rng(2);
  std::vector<named_tensor> params{{"w", randn({5, 3}, rng)}}, grads{{"w", randn({5, 3}, rng)}};
  sgd_nesterov opt(0.9f);
  vec p = to_vec(params[0].value), buf(p.size(), 0.0);
  for (int t = 0; t < 3; ++t) {
    opt.step(params, grads, 0.7f);
    auto g = to_vec(grads[0].value);
    for (std::size_t i = 0; i < p.size(); ++i) {
      buf[i] = 0.9 * buf[i] + g[i];
      p[i] -= 0.7 * (g[i] + 0.9 * buf[i]);
    }
    CHECK(compare(to_vec(params[0].value), p).max_rel < 1e-6);
  }
}

TEST_CASE("clipping scales gradients to the global norm only when it is exceeded") {
  std::vector<named_tensor> g{{"a", tensor_handle::zeros({2})}, {"b", tensor_handle::zeros({1})}};
  g[0].value.data<float>()[0] = 3;
  g[0].value.data<float>()[1] = 0;
  g[1].value.data<float>()[0] = 4;
  CHECK(grad_sq_norm(g) == doctest::Approx(25.0));
  CHECK(clip_grad_norm(g, 10.0) == doctest::Approx(5.0));
  CHECK(g[1].value.data<float>()[0] == 4.0f);
  CHECK(clip_grad_norm(g, 1.0) == doctest::Approx(5.0));
  CHECK(std::sqrt(grad_sq_norm(g)) == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(g[0].value.data<float>()[0] == doctest::Approx(0.6).epsilon(1e-5));
}

TEST_CASE("the learning rate warms up linearly and decays along a cosine to the floor") {
  warmup_cosine s{.max_lr = 1.0f, .min_lr = 0.1f, .warmup = 10, .total = 110};
  CHECK(s.at(0) == doctest::Approx(0.1));
  CHECK(s.at(9) == doctest::Approx(1.0));
  CHECK(s.at(10) == doctest::Approx(1.0));
  CHECK(s.at(60) == doctest::Approx(0.55));
  CHECK(s.at(110) == doctest::Approx(0.1));
  CHECK(s.at(500) == doctest::Approx(0.1));
  CHECK(s.at(30) > s.at(40));
}
