// AdamW's state as a checkpoint carries it: read out, loaded into a fresh
// optimizer, and the updates that follow are bit for bit the same.
#include <cstring>

#include <doctest/doctest.h>

#include "ops/adamw.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;

namespace {

tensor_handle copy_of(const tensor_handle& t) {
  auto c = tensor_handle::empty(t.shape(), t.type());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

std::vector<named_tensor> copies(const std::vector<named_tensor>& xs) {
  std::vector<named_tensor> out;
  for (const auto& x : xs)
    out.push_back({x.name, copy_of(x.value)});
  return out;
}

} // namespace

TEST_CASE("AdamW state loaded into a fresh optimizer continues with identical updates") {
  std::mt19937 rng(7);
  std::vector<named_tensor> params{{"w", randn({4, 5}, rng)}, {"b", randn({5}, rng)}};
  std::vector<std::vector<named_tensor>> grads;
  for (int s = 0; s < 6; ++s)
    grads.push_back({{"w", randn({4, 5}, rng)}, {"b", randn({5}, rng)}});
  adamw a({.weight_decay = 0.1f});
  for (int s = 0; s < 3; ++s)
    a.step(params, grads[std::size_t(s)], 1e-2f);
  // What a checkpoint holds: parameters, moments and the step count, as copies.
  auto saved = copies(params);
  auto restart = copies(params);
  std::vector<tensor_handle> m, v;
  for (std::size_t i = 0; i < params.size(); ++i)
    m.push_back(copy_of(a.first_moments()[i])), v.push_back(copy_of(a.second_moments()[i]));
  adamw b({.weight_decay = 0.1f});
  b.load_state(a.steps(), m, v);
  CHECK(b.steps() == 3);
  for (int s = 3; s < 6; ++s) {
    a.step(params, grads[std::size_t(s)], 1e-2f);
    b.step(saved, grads[std::size_t(s)], 1e-2f);
  }
  for (std::size_t i = 0; i < params.size(); ++i)
    CHECK(std::memcmp(params[i].value.raw(), saved[i].value.raw(), params[i].value.nbytes()) == 0);
  adamw fresh({.weight_decay = 0.1f}); // without the state the same steps land elsewhere
  for (int s = 3; s < 6; ++s)
    fresh.step(restart, grads[std::size_t(s)], 1e-2f);
  CHECK(std::memcmp(restart[0].value.raw(), params[0].value.raw(), params[0].value.nbytes()) != 0);
}

TEST_CASE("AdamW rejects state whose moments do not line up") {
  adamw opt;
  auto a = tensor_handle::zeros({2, 3}), b = tensor_handle::zeros({3, 2});
  CHECK_THROWS_AS(opt.load_state(1, {a}, {}), std::invalid_argument);
  CHECK_THROWS_AS(opt.load_state(1, {a}, {b}), std::invalid_argument);
  CHECK_THROWS_AS(opt.load_state(-1, {a}, {a}), std::invalid_argument);
  CHECK_THROWS_AS(opt.load_state(1, {tensor_handle::zeros({2}, dtype::i32)}, {tensor_handle::zeros({2}, dtype::i32)}),
                  std::invalid_argument);
  opt.load_state(4, {a}, {a});
  CHECK(opt.steps() == 4);
}
