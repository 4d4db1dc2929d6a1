// Host-side helpers for the GPU kernel tests: device buffers that round-trip
// through f32 vectors, NaN poisoning, random inputs and a NaN-proof error measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu::testing {

/// Ends the test case with a message (a pass) when no GPU is present.
#define TROUPE_REQUIRE_GPU_OR_SKIP()                                                                                   \
  do {                                                                                                                 \
    if (!::troupe::gpu::cuda_available()) {                                                                            \
      MESSAGE("no CUDA device: GPU check skipped");                                                                    \
      return;                                                                                                          \
    }                                                                                                                  \
  } while (0)

/// Fails the test with the status message when a GPU call failed.
#define TROUPE_REQUIRE_OK(expr)                                                                                        \
  do {                                                                                                                 \
    ::troupe::gpu::status troupe_st_ = (expr);                                                                         \
    INFO(troupe_st_.message());                                                                                        \
    REQUIRE(troupe_st_.ok());                                                                                          \
  } while (0)

inline float to_float(float x) {
  return x;
}
inline float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return __float2bfloat16_rn(x);
}

/// `x` rounded to what T can hold (identity for f32).
template <typename T>
float round_to(float x) {
  return to_float(from_float<T>(x));
}

template <typename T>
std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v)
    x = round_to<T>(x);
  return v;
}

/// Device memory for n elements of T, freed on destruction.
template <typename T>
class device_buffer {
public:
  explicit device_buffer(std::size_t n) : n_(n) {
    auto e = cudaMalloc(&p_, (n ? n : 1) * sizeof(T));
    INFO("cudaMalloc of " << n << " elements: " << cudaGetErrorString(e));
    REQUIRE(e == cudaSuccess);
    poison();
  }
  explicit device_buffer(const std::vector<float>& host) : device_buffer(host.size()) { upload(host); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { (void)cudaFree(p_); }

  T* get() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }

  /// Fills every byte with 0xFF: a NaN in f32 and in bf16, so unwritten output shows.
  void poison() { REQUIRE(cudaMemset(p_, 0xFF, n_ * sizeof(T)) == cudaSuccess); }

  void upload(const std::vector<float>& host) {
    REQUIRE(host.size() == n_);
    std::vector<T> tmp(n_);
    for (std::size_t i = 0; i < n_; ++i)
      tmp[i] = from_float<T>(host[i]);
    REQUIRE(cudaMemcpy(p_, tmp.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }

  /// Waits for the device and copies the contents back as f32.
  std::vector<float> download() const {
    auto e = cudaDeviceSynchronize();
    INFO("kernel failed: " << cudaGetErrorString(e));
    REQUIRE(e == cudaSuccess);
    std::vector<T> tmp(n_);
    REQUIRE(cudaMemcpy(tmp.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    std::vector<float> out(n_);
    for (std::size_t i = 0; i < n_; ++i)
      out[i] = to_float(tmp[i]);
    return out;
  }

private:
  T* p_ = nullptr;
  std::size_t n_;
};

/// n normal(0, stddev) values from a fixed seed.
inline std::vector<float> random_normal(std::size_t n, std::uint32_t seed, float stddev = 1.0f) {
  std::mt19937 gen{seed};
  std::normal_distribution<float> dist{0.0f, stddev};
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(gen);
  return v;
}

/// max |got - ref| / max(max |ref|, scale); infinity when sizes differ or any
/// value is NaN or infinite. `scale` sets the size of values for an output
/// whose exact answer is zero (a softmax over one element has zero gradient).
inline double rel_error(const std::vector<float>& got, const std::vector<double>& ref, double scale = 0.0) {
  if (got.size() != ref.size() || got.empty())
    return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i]))
      return std::numeric_limits<double>::infinity();
    num = std::max(num, std::abs(static_cast<double>(got[i]) - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return num / std::max({den, scale, 1e-30});
}

/// Σ|a - b| / Σ|b|: how far two runs of the same computation drifted apart, as a
/// whole. The CUDA backward sums with atomicAdd (bias, layer-norm and embedding
/// gradients, attention's dQ), so two identical runs agree to rounding, not to the
/// bit, and AdamW's first steps turn a near-zero gradient whose sign flipped into a
/// full lr-sized step for that one element; a state that was not carried over
/// (moments, master weights, an activation overwritten) moves every element instead.
/// Infinity on NaN or a size mismatch.
inline double mean_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty())
    return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i]))
      return std::numeric_limits<double>::infinity();
    num += std::abs(double(a[i]) - double(b[i]));
    den += std::abs(double(b[i]));
  }
  return num / std::max(den, 1e-30);
}

/// Checks that two runs of one computation agree as mean_rel_diff measures, printing
/// the measure either way so a GPU run's log records it. On an H200 the largest of
/// these tests' 278 comparisons was 1.0e-7 (40 were not bit-equal): the bound keeps
/// 100× of margin and is still 1000× below what a lost moment or master would give.
inline void check_same_run(const std::string& what, const std::vector<float>& a, const std::vector<float>& b,
                           double bound = 1e-5) {
  const double d = mean_rel_diff(a, b);
  char nums[80];
  std::snprintf(nums, sizeof nums, "%.2e (bound %.0e; bit-equal: %s)", d, bound, a == b ? "yes" : "no");
  std::string line = what + ": mean relative difference " + nums;
  INFO(line);
  CHECK(d <= bound);
  MESSAGE(line);
}

/// The bound the issue sets: about 1e-2 for bf16 paths, 1e-5 for f32 paths.
template <typename T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-2;
}

template <typename T>
std::string type_name() {
  return std::is_same_v<T, float> ? "f32" : "bf16";
}

/// Checks got against ref within T's tolerance, naming what was compared.
template <typename T>
void check_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref,
                 double tol = tolerance<T>(), double scale = 0.0) {
  double err = rel_error(got, ref, scale);
  char nums[64];
  std::snprintf(nums, sizeof nums, "%.2e, bound %.0e", err, tol);
  std::string line = what + " (" + type_name<T>() + "): relative error " + nums;
  INFO(line);
  CHECK(err <= tol);
  MESSAGE(line);
}

} // namespace troupe::gpu::testing
