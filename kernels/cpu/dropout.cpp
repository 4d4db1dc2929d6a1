// Dropout kernels: a splitmix64 hash of (seed, index) decides each element.
#include "kernels/cpu/dropout.hpp"

namespace troupe::kernels::cpu {

namespace {
inline std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
} // namespace

void dropout_forward(const float* x, float* y, std::uint8_t* mask, long n, float p, std::uint64_t seed) {
  const float scale = 1.0f / (1.0f - p);
  const auto threshold = static_cast<std::uint32_t>(double(p) * 4294967296.0);
  const std::uint64_t base = mix(seed);
  for (long i = 0; i < n; ++i) {
    bool keep = static_cast<std::uint32_t>(mix(base + std::uint64_t(i)) >> 32) >= threshold;
    mask[i] = keep;
    y[i] = keep ? x[i] * scale : 0.0f;
  }
}

void dropout_backward(const float* dy, const std::uint8_t* mask, float* dx, long n, float p) {
  const float scale = 1.0f / (1.0f - p);
  for (long i = 0; i < n; ++i)
    dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

} // namespace troupe::kernels::cpu
