// Optimizers against hand-computed updates: AdamW, SGD with Nesterov momentum
// (PyTorch's semantics), global-norm clipping and the warmup + cosine schedule.
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
  adamw opt(params, {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f});
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
  // The state is torch's: exp_avg and exp_avg_sq per parameter, in parameter order.
  auto st = opt.state();
  REQUIRE(st.tensors.size() == 4);
  CHECK(st.tensors[0].name == "exp_avg.w");
  CHECK(st.tensors[1].name == "exp_avg_sq.w");
  CHECK(st.tensors[3].name == "exp_avg_sq.b");
  CHECK(compare(to_vec(st.tensors[2].value), m[1]).max_rel < 1e-5);
  CHECK(compare(to_vec(st.tensors[3].value), v[1]).max_rel < 1e-5);
  std::vector<named_tensor> fewer{params[0]};
  CHECK_THROWS_AS(opt.step(fewer, grads, 0.1f), std::invalid_argument);
  std::vector<named_tensor> wrong{{"w", randn({3, 7}, rng)}, {"b", randn({6}, rng)}};
  CHECK_THROWS_AS(opt.step(params, wrong, 0.1f), std::invalid_argument);
  CHECK(opt.steps() == 3); // a refused step changes nothing
}

TEST_CASE("SGD with Nesterov momentum matches PyTorch's update rule, weight decay included") {
  std::mt19937 rng(2);
  std::vector<named_tensor> params{{"w", randn({5, 3}, rng)}};
  std::vector<std::vector<named_tensor>> grads;
  for (int t = 0; t < 3; ++t)
    grads.push_back({{"w", randn({5, 3}, rng)}});
  const double mu = 0.9, lr = 0.7, wd = 0.01;
  sgd_nesterov opt(params, float(mu), float(wd));
  CHECK(opt.state_kinds() == std::vector<std::string>{"momentum_buffer"});
  vec p = to_vec(params[0].value), buf;
  for (int t = 0; t < 3; ++t) {
    opt.step(params, grads[std::size_t(t)], float(lr));
    auto g = to_vec(grads[std::size_t(t)][0].value);
    for (std::size_t i = 0; i < p.size(); ++i)
      g[i] += wd * p[i];
    if (t == 0)
      buf = g; // torch: the buffer is the first gradient itself
    else
      for (std::size_t i = 0; i < p.size(); ++i)
        buf[i] = mu * buf[i] + g[i];
    for (std::size_t i = 0; i < p.size(); ++i)
      p[i] -= lr * (g[i] + mu * buf[i]);
    CHECK(compare(to_vec(params[0].value), p).max_rel < 1e-5);
  }
  auto st = opt.state();
  REQUIRE(st.tensors.size() == 1);
  CHECK(st.tensors[0].name == "momentum_buffer.w");
  CHECK(compare(to_vec(st.tensors[0].value), buf).max_rel < 1e-5);
}

TEST_CASE("SGD with Nesterov momentum on 1x1 weights gives the hand-computed values") {
  // One weight 1.0, gradients 1 then 2, lr 0.5, μ 0.9: buf 1, then 0.9 + 2 = 2.9;
  // p = 1 - 0.5·(1 + 0.9) = 0.05, then 0.05 - 0.5·(2 + 0.9·2.9) = -2.255.
  std::vector<named_tensor> params{{"w", tensor_handle::zeros({1, 1})}};
  params[0].value.data<float>()[0] = 1.0f;
  std::vector<named_tensor> g{{"w", tensor_handle::zeros({1, 1})}};
  sgd_nesterov opt(params, 0.9f);
  g[0].value.data<float>()[0] = 1.0f;
  opt.step(params, g, 0.5f);
  CHECK(params[0].value.data<float>()[0] == doctest::Approx(0.05).epsilon(1e-5));
  g[0].value.data<float>()[0] = 2.0f;
  opt.step(params, g, 0.5f);
  CHECK(params[0].value.data<float>()[0] == doctest::Approx(-2.255).epsilon(1e-5));
  CHECK(opt.state().tensors[0].value.data<float>()[0] == doctest::Approx(2.9).epsilon(1e-5));
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
