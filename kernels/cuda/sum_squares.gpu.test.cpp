// Checks the GPU Σ x² against a host loop in double, across calls into one
// accumulator, and that a NaN element is never summed away.
#include <cmath>
#include <memory>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/sum_squares.hpp"
#include "kernels/cuda/test_support.hpp"

namespace {

using namespace troupe::gpu;
using namespace troupe::gpu::testing;

/// Zeroes a device double, runs `f` on it and reads it back.
template <class F>
double accumulate_into_zero(F&& f) {
  double* acc = nullptr;
  REQUIRE(cudaMalloc(&acc, sizeof(double)) == cudaSuccess);
  REQUIRE(cudaMemset(acc, 0, sizeof(double)) == cudaSuccess);
  f(acc);
  double out = NAN;
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(&out, acc, sizeof out, cudaMemcpyDeviceToHost) == cudaSuccess);
  (void)cudaFree(acc);
  return out;
}

} // namespace

TEST_CASE("sum_squares adds the sum of squares of several arrays in double, as the host does") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  // Sizes below one block, odd, and past the grid cap (grid-stride loop).
  std::vector<std::size_t> sizes{1, 255, 10007, 3'000'001};
  std::vector<std::vector<float>> xs;
  double ref = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    xs.push_back(random_normal(sizes[k], 20 + unsigned(k), 0.01f * float(k + 1)));
    for (float v : xs.back())
      ref += double(v) * v;
  }
  std::vector<std::unique_ptr<device_buffer<float>>> bufs;
  for (const auto& x : xs)
    bufs.push_back(std::make_unique<device_buffer<float>>(x));
  double got = accumulate_into_zero([&](double* acc) {
    for (const auto& b : bufs)
      TROUPE_REQUIRE_OK(sum_squares(acc, b->get(), (std::int64_t)b->size(), nullptr));
  });
  // Double sums of f32 squares in another order agree to about 1e-16 · n.
  MESSAGE("sum_squares over 4 arrays: relative error " << std::abs(got - ref) / ref);
  CHECK(std::abs(got - ref) <= 1e-12 * ref);
}

TEST_CASE("sum_squares of an array holding a NaN or an infinity is not finite") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  for (float bad : {NAN, INFINITY}) {
    auto x = random_normal(5000, 30);
    x[4321] = bad;
    device_buffer<float> d(x);
    double got = accumulate_into_zero(
      [&](double* acc) { TROUPE_REQUIRE_OK(sum_squares(acc, d.get(), (std::int64_t)x.size(), nullptr)); });
    CAPTURE(bad);
    CHECK(!std::isfinite(got));
  }
  double empty = accumulate_into_zero([&](double* acc) { TROUPE_REQUIRE_OK(sum_squares(acc, nullptr, 0, nullptr)); });
  CHECK(empty == 0.0);
  CHECK(!sum_squares(nullptr, nullptr, -1, nullptr).ok());
}
