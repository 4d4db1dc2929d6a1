// Optimizer kernels: one streaming pass over parameter, gradient and state,
// written once with Highway for every SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/optimizer.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/optimizer.hpp"
#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {

/// The same operations in the same order as the scalar tail, a vector at a time
/// (std::sqrt with errno keeps the compiler from vectorising that loop itself).
void adamw_update_t(float* param, const float* grad, float* m, float* v, long n, const adamw_args& a) {
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float step = a.lr / a.bias_correction1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(a.bias_correction2);
  const float b1 = a.beta1, b2 = a.beta2, c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2;
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  const auto vb1 = hn::Set(d, b1), vb2 = hn::Set(d, b2), vc1 = hn::Set(d, c1), vc2 = hn::Set(d, c2),
             vdecay = hn::Set(d, decay), vstep = hn::Set(d, step), vbc2 = hn::Set(d, inv_sqrt_bc2),
             veps = hn::Set(d, a.eps);
  long i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, grad + i);
    const auto mi = hn::Add(hn::Mul(vb1, hn::LoadU(d, m + i)), hn::Mul(vc1, g));
    const auto vi = hn::Add(hn::Mul(vb2, hn::LoadU(d, v + i)), hn::Mul(hn::Mul(vc2, g), g));
    hn::StoreU(mi, d, m + i);
    hn::StoreU(vi, d, v + i);
    const auto denom = hn::Add(hn::Mul(hn::Sqrt(vi), vbc2), veps);
    const auto p = hn::Mul(hn::LoadU(d, param + i), vdecay);
    hn::StoreU(hn::Sub(p, hn::Div(hn::Mul(vstep, mi), denom)), d, param + i);
  }
  for (; i < n; ++i) {
    float g = grad[i];
    float mi = b1 * m[i] + c1 * g;
    float vi = b2 * v[i] + c2 * g * g;
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) * inv_sqrt_bc2 + a.eps;
    param[i] = param[i] * decay - step * mi / denom;
  }
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

HWY_EXPORT(adamw_update_t);

void adamw_update(float* param, const float* grad, float* m, float* v, long n, adamw_args a) {
  TROUPE_DISPATCH(adamw_update_t)(param, grad, m, v, n, a);
}

void sgd_nesterov_update(float* param, const float* grad, float* buf, long n, float lr, float momentum,
                         float weight_decay) {
  for (long i = 0; i < n; ++i) {
    float g = grad[i] + weight_decay * param[i];
    float b = momentum * buf[i] + g;
    buf[i] = b;
    param[i] -= lr * (g + momentum * b);
  }
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
