// RoPE kernel: each head's two halves turned by a table of cos and sin, a vector of
// pairs at a time; written once with Highway for every SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/rope.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {

void rope_rotate_t(float* x, long rows, long ld, long heads, long head_dim, const std::int32_t* pos, const float* cos,
                   const float* sin, bool inverse) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d)), half = head_dim / 2;
  for (long r = 0; r < rows; ++r) {
    const float* cr = cos + long(pos[r]) * half;
    const float* sr = sin + long(pos[r]) * half;
    for (long h = 0; h < heads; ++h) {
      float* a = x + r * ld + h * head_dim;
      float* b = a + half;
      for (long i = 0; i < half; i += N) {
        const long n = std::min(N, half - i);
        const auto c = load_n(d, cr + i, n), s0 = load_n(d, sr + i, n);
        const auto s = inverse ? hn::Neg(s0) : s0;
        const auto va = load_n(d, a + i, n), vb = load_n(d, b + i, n);
        store_n(hn::NegMulAdd(vb, s, hn::Mul(va, c)), d, a + i, n); // a c - b s
        store_n(hn::MulAdd(va, s, hn::Mul(vb, c)), d, b + i, n);    // b c + a s
      }
    }
  }
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>

#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

HWY_EXPORT(rope_rotate_t);

namespace {
double rope_angle(double theta, long head_dim, long pos, long i) {
  return double(pos) * std::pow(theta, -2.0 * double(i) / double(head_dim));
}
} // namespace

void rope_table(double theta, long head_dim, long positions, float* cos, float* sin) {
  const long half = head_dim / 2;
  for (long p = 0; p < positions; ++p)
    for (long i = 0; i < half; ++i) {
      const double a = rope_angle(theta, head_dim, p, i);
      cos[p * half + i] = float(std::cos(a));
      sin[p * half + i] = float(std::sin(a));
    }
}

void rope_rotate(float* x, long rows, long ld, long heads, long head_dim, const std::int32_t* pos, const float* cos,
                 const float* sin, bool inverse) {
  TROUPE_DISPATCH(rope_rotate_t)(x, rows, ld, heads, head_dim, pos, cos, sin, inverse);
}

void rope_rotate_reference(float* x, long rows, long ld, long heads, long head_dim, const std::int32_t* pos,
                           double theta, bool inverse) {
  const long half = head_dim / 2;
  for (long r = 0; r < rows; ++r)
    for (long h = 0; h < heads; ++h)
      for (long i = 0; i < half; ++i) {
        const double t = rope_angle(theta, head_dim, pos[r], i) * (inverse ? -1.0 : 1.0);
        float* a = x + r * ld + h * head_dim + i;
        const double va = a[0], vb = a[half];
        a[0] = float(va * std::cos(t) - vb * std::sin(t));
        a[half] = float(vb * std::cos(t) + va * std::sin(t));
      }
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
