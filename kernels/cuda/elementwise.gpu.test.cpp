// Checks GELU, residual add, accumulation and conversion against host loops.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/test_support.hpp"

namespace {

using namespace troupe::gpu;
using namespace troupe::gpu::testing;
using bf16 = __nv_bfloat16;

double gelu_ref(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  double t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

} // namespace

TEST_CASE_TEMPLATE("GELU forward and backward match the tanh formula", T, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  std::size_t n = 10007;
  auto x = rounded<T>(random_normal(n, 1, 2.0f));
  auto dy = rounded<T>(random_normal(n, 2));
  device_buffer<T> dx_in(x), y(n), ddy(dy), dx(n);
  TROUPE_REQUIRE_OK(gelu_forward(y.get(), dx_in.get(), (std::int64_t)n, nullptr));
  TROUPE_REQUIRE_OK(gelu_backward(dx.get(), dx_in.get(), ddy.get(), (std::int64_t)n, nullptr));
  std::vector<double> ry(n), rdx(n);
  for (std::size_t i = 0; i < n; ++i) {
    ry[i] = gelu_ref(x[i]);
    rdx[i] = dy[i] * gelu_grad_ref(x[i]);
  }
  check_close<T>("gelu_forward", y.download(), ry);
  check_close<T>("gelu_backward", dx.download(), rdx);
}

TEST_CASE_TEMPLATE("residual add, accumulate and fill match host arithmetic", T, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  std::size_t n = 5000;
  auto a = rounded<T>(random_normal(n, 3));
  auto b = rounded<T>(random_normal(n, 4));
  device_buffer<T> da(a), db(b), out(n);
  TROUPE_REQUIRE_OK(residual_add(out.get(), da.get(), db.get(), (std::int64_t)n, nullptr));
  std::vector<double> ref(n);
  for (std::size_t i = 0; i < n; ++i)
    ref[i] = (double)a[i] + b[i];
  check_close<T>("residual_add", out.download(), ref);

  auto acc0 = random_normal(n, 5);
  device_buffer<float> acc(acc0);
  TROUPE_REQUIRE_OK(accumulate(acc.get(), da.get(), (std::int64_t)n, nullptr));
  for (std::size_t i = 0; i < n; ++i)
    ref[i] = (double)acc0[i] + a[i];
  check_close<float>("accumulate into f32", acc.download(), ref);

  TROUPE_REQUIRE_OK(fill(out.get(), 0.25f, (std::int64_t)n, nullptr));
  check_close<T>("fill", out.download(), std::vector<double>(n, 0.25));
}

TEST_CASE("bf16 accumulate and f32<->bf16 conversion round to nearest") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  std::size_t n = 4096;
  auto x = random_normal(n, 6);
  device_buffer<float> f(x), back(n);
  device_buffer<bf16> h(n);
  TROUPE_REQUIRE_OK(convert(h.get(), f.get(), (std::int64_t)n, nullptr));
  TROUPE_REQUIRE_OK(convert(back.get(), h.get(), (std::int64_t)n, nullptr));
  auto got = back.download();
  std::vector<double> ref(n);
  for (std::size_t i = 0; i < n; ++i)
    ref[i] = round_to<bf16>(x[i]); // exact: conversion must round like the host
  check_close<float>("convert f32->bf16->f32", got, ref, 0.0);

  auto y = rounded<bf16>(random_normal(n, 7));
  device_buffer<bf16> dy(y);
  TROUPE_REQUIRE_OK(accumulate(h.get(), dy.get(), (std::int64_t)n, nullptr));
  for (std::size_t i = 0; i < n; ++i)
    ref[i] = (double)round_to<bf16>(x[i]) + y[i];
  check_close<bf16>("accumulate bf16", h.download(), ref);
}

TEST_CASE("scale multiplies every f32 element by the factor, as the host does") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  std::size_t n = 10007; // not a multiple of any block size
  auto x = random_normal(n, 8);
  device_buffer<float> d(x);
  TROUPE_REQUIRE_OK(scale(d.get(), 0.3f, (std::int64_t)n, nullptr));
  std::vector<double> ref(n);
  for (std::size_t i = 0; i < n; ++i)
    ref[i] = x[i] * 0.3f; // the same single f32 multiply: exact
  check_close<float>("scale", d.download(), ref, 0.0);
}
