// SwiGLU kernels: sigmoid through the shared exp, one vector of lanes at a time with
// a tail that never touches memory past a row; written once with Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/swiglu.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {
namespace {

/// 1 / (1 + exp(-g)); exp's clamp at 88 keeps it finite (and ≈ 0) for g < -88.
template <class D>
HWY_INLINE hn::Vec<D> sigmoid(D d, hn::Vec<D> g) {
  const auto one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, exp(d, hn::Neg(g))));
}

} // namespace

void swiglu_forward_t(const float* gu, float* y, long rows, long hidden) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  for (long r = 0; r < rows; ++r) {
    const float* g = gu + r * 2 * hidden;
    const float* u = g + hidden;
    float* yr = y + r * hidden;
    for (long i = 0; i < hidden; i += N) {
      const long n = std::min(N, hidden - i);
      const auto vg = load_n(d, g + i, n);
      store_n(hn::Mul(hn::Mul(vg, sigmoid(d, vg)), load_n(d, u + i, n)), d, yr + i, n);
    }
  }
}

void swiglu_backward_t(const float* dy, const float* gu, float* dgu, long rows, long hidden) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  for (long r = 0; r < rows; ++r) {
    const float* g = gu + r * 2 * hidden;
    const float* u = g + hidden;
    const float* dyr = dy + r * hidden;
    float* dg = dgu + r * 2 * hidden;
    float* du = dg + hidden;
    for (long i = 0; i < hidden; i += N) {
      const long n = std::min(N, hidden - i);
      const auto vg = load_n(d, g + i, n), vdy = load_n(d, dyr + i, n);
      const auto s = sigmoid(d, vg);
      const auto silu = hn::Mul(vg, s);
      store_n(hn::Mul(vdy, silu), d, du + i, n);
      const auto dsilu = hn::Mul(s, hn::MulAdd(vg, hn::Sub(one, s), one)); // s (1 + g (1 - s))
      store_n(hn::Mul(hn::Mul(vdy, load_n(d, u + i, n)), dsilu), d, dg + i, n);
    }
  }
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>

#include "kernels/cpu/swiglu.hpp"
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

HWY_EXPORT(swiglu_forward_t);
HWY_EXPORT(swiglu_backward_t);

void swiglu_forward(const float* gu, float* y, long rows, long hidden) {
  TROUPE_DISPATCH(swiglu_forward_t)(gu, y, rows, hidden);
}

void swiglu_backward(const float* dy, const float* gu, float* dgu, long rows, long hidden) {
  TROUPE_DISPATCH(swiglu_backward_t)(dy, gu, dgu, rows, hidden);
}

void swiglu_forward_reference(const float* gu, float* y, long rows, long hidden) {
  for (long r = 0; r < rows; ++r)
    for (long i = 0; i < hidden; ++i) {
      const double g = gu[r * 2 * hidden + i], u = gu[r * 2 * hidden + hidden + i];
      y[r * hidden + i] = float(g / (1.0 + std::exp(-g)) * u);
    }
}

void swiglu_backward_reference(const float* dy, const float* gu, float* dgu, long rows, long hidden) {
  for (long r = 0; r < rows; ++r)
    for (long i = 0; i < hidden; ++i) {
      const long k = r * 2 * hidden + i;
      const double g = gu[k], u = gu[k + hidden], s = 1.0 / (1.0 + std::exp(-g)), dy1 = dy[r * hidden + i];
      dgu[k] = float(dy1 * u * s * (1.0 + g * (1.0 - s)));
      dgu[k + hidden] = float(dy1 * g * s);
    }
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
