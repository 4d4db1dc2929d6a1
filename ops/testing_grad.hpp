// Test helpers: random tensors, conversions to double, and a central-difference
// gradient check with relative-error reporting (NaN never passes).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "ops/testing_reference.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops::testing {

using reference::vec;

inline tensor_handle randn(shape_t shape, std::mt19937& rng, float scale = 1.0f) {
  auto t = tensor_handle::empty(shape);
  std::normal_distribution<float> d(0.0f, scale);
  for (long i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = d(rng);
  return t;
}

/// i32 token ids [b, t], uniform in [0, vocab), from a fixed seed.
inline tensor_handle random_tokens(int b, int t, int vocab, unsigned seed) {
  auto x = tensor_handle::empty({b, t}, dtype::i32);
  std::mt19937 rng(seed);
  for (long i = 0; i < x.numel(); ++i)
    x.data<std::int32_t>()[i] = std::int32_t(rng() % unsigned(vocab));
  return x;
}

inline vec to_vec(const tensor_handle& t) {
  return vec(t.data<float>(), t.data<float>() + t.numel());
}

inline tensor_handle from_vec(const vec& v, shape_t shape) {
  auto t = tensor_handle::empty(shape);
  for (long i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = float(v[std::size_t(i)]);
  return t;
}

/// Σ r·y in double.
inline double dot(const vec& r, const vec& y) {
  double s = 0;
  for (std::size_t i = 0; i < r.size(); ++i)
    s += r[i] * y[i];
  return s;
}

/// Largest |a - b| over max |b|, and ‖a - b‖ / ‖b‖, in double.
struct rel_error {
  double max_rel = 0, norm_rel = 0;
};

inline rel_error compare(const vec& a, const vec& b) {
  double max_diff = 0, max_b = 0, diff2 = 0, b2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double d = std::abs(a[i] - b[i]);
    if (!(d == d))
      return {INFINITY, INFINITY};
    max_diff = std::max(max_diff, d);
    max_b = std::max(max_b, std::abs(b[i]));
    diff2 += d * d;
    b2 += b[i] * b[i];
  }
  return {max_diff / std::max(max_b, 1e-30), std::sqrt(diff2 / std::max(b2, 1e-60))};
}

/// Checks the analytic gradient of `objective` wrt `input` by central differences on
/// up to `samples` entries (all of them when fewer). `input` is perturbed in place.
inline void check_grad(const std::string& what, const vec& analytic, vec& input,
                       const std::function<double()>& objective, std::size_t samples = 64, double tol = 2e-4) {
  REQUIRE(analytic.size() == input.size());
  std::mt19937 rng(7);
  std::vector<std::size_t> idx;
  if (input.size() <= samples)
    for (std::size_t i = 0; i < input.size(); ++i)
      idx.push_back(i);
  else
    for (std::size_t i = 0; i < samples; ++i)
      idx.push_back(std::uniform_int_distribution<std::size_t>(0, input.size() - 1)(rng));
  vec a, fd;
  for (auto i : idx) {
    double v = input[i], h = 1e-4 * std::max(1.0, std::abs(v));
    input[i] = v + h;
    double fp = objective();
    input[i] = v - h;
    double fm = objective();
    input[i] = v;
    a.push_back(analytic[i]);
    fd.push_back((fp - fm) / (2 * h));
  }
  auto e = compare(a, fd);
  INFO(what << ": max error " << e.max_rel << " of the largest gradient, norm error " << e.norm_rel);
  CHECK(e.max_rel <= tol);
  CHECK(e.norm_rel <= tol);
}

} // namespace troupe::ops::testing
