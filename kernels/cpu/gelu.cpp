// GELU kernels (tanh form), one vector of lanes at a time with a tail that never
// reads or writes past n; written once with Highway for every SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gelu.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {
namespace {

constexpr float gelu_k0 = 0.7978845608028654f; // √(2/π)
constexpr float gelu_k1 = 0.044715f;

template <class D>
HWY_INLINE hn::Vec<D> tanh_arg(D d, hn::Vec<D> x) {
  const auto inner = hn::MulAdd(hn::Mul(hn::Mul(x, x), hn::Set(d, gelu_k1)), x, x);
  return hn::Mul(inner, hn::Set(d, gelu_k0));
}

template <class D>
HWY_INLINE hn::Vec<D> gelu(D d, hn::Vec<D> x) {
  const auto t = tanh(d, tanh_arg(d, x));
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.0f), t));
}

template <class D>
HWY_INLINE hn::Vec<D> gelu_grad(D d, hn::Vec<D> x) {
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  const auto t = tanh(d, tanh_arg(d, x));
  const auto du = hn::Mul(hn::Set(d, gelu_k0), hn::MulAdd(hn::Set(d, 3.0f * gelu_k1), hn::Mul(x, x), one));
  const auto sech2 = hn::NegMulAdd(t, t, one);
  const auto a = hn::Mul(half, hn::Add(one, t));
  return hn::MulAdd(hn::Mul(hn::Mul(half, x), sech2), du, a);
}

} // namespace

void gelu_forward_t(const float* x, float* y, long n) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  long i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(gelu(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n)
    store_n(gelu(d, load_n(d, x + i, n - i)), d, y + i, n - i);
}

void gelu_backward_t(const float* dy, const float* x, float* dx, long n) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  long i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::LoadU(d, dy + i), gelu_grad(d, hn::LoadU(d, x + i))), d, dx + i);
  if (i < n)
    store_n(hn::Mul(load_n(d, dy + i, n - i), gelu_grad(d, load_n(d, x + i, n - i))), d, dx + i, n - i);
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>

#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

namespace {
constexpr float k0 = 0.7978845608028654f; // √(2/π)
constexpr float k1 = 0.044715f;

float gelu1(float x) {
  return 0.5f * x * (1.0f + std::tanh(k0 * (x + k1 * x * x * x)));
}
float gelu_grad1(float x) {
  float t = std::tanh(k0 * (x + k1 * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k0 * (1.0f + 3.0f * k1 * x * x);
}
} // namespace

HWY_EXPORT(gelu_forward_t);
HWY_EXPORT(gelu_backward_t);

void gelu_forward(const float* x, float* y, long n) {
  TROUPE_DISPATCH(gelu_forward_t)(x, y, n);
}

void gelu_backward(const float* dy, const float* x, float* dx, long n) {
  TROUPE_DISPATCH(gelu_backward_t)(dy, x, dx, n);
}

void gelu_forward_reference(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i)
    y[i] = gelu1(x[i]);
}

void gelu_backward_reference(const float* dy, const float* x, float* dx, long n) {
  for (long i = 0; i < n; ++i)
    dx[i] = dy[i] * gelu_grad1(x[i]);
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
