// Layer norm kernels: two passes over each row, kept in cache; written once with
// Highway for every SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/layer_norm.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {

void layer_norm_forward_t(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                          long rows, long cols, float eps) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float mu = row_sum(xr, cols) / static_cast<float>(cols);
    const float var = row_sq_dev(xr, mu, cols) / static_cast<float>(cols);
    const float rs = 1.0f / std::sqrt(var + eps);
    mean[r] = mu;
    rstd[r] = rs;
    const auto vmu = hn::Set(d, mu), vrs = hn::Set(d, rs);
    for (long i = 0; i < cols; i += N) {
      const long w = std::min(N, cols - i);
      const auto xn = hn::Mul(hn::Sub(load_n(d, xr + i, w), vmu), vrs);
      store_n(hn::MulAdd(xn, load_n(d, gamma + i, w), load_n(d, beta + i, w)), d, yr + i, w);
    }
  }
}

void layer_norm_backward_input_t(const float* dy, const float* x, const float* mean, const float* rstd,
                                 const float* gamma, float* dx, long rows, long cols, const float* add) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (long r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    const float* ar = add ? add + r * cols : nullptr;
    float* dxr = dx + r * cols;
    const float mu = mean[r], rs = rstd[r];
    // Pass 1: g = dy * gamma and the row sums of g and g * (x - mean). Lanes past the
    // row's end load as zero, so they add nothing.
    auto sg = hn::Zero(d), sgx = hn::Zero(d);
    const auto vmu = hn::Set(d, mu);
    for (long i = 0; i < cols; i += N) {
      const long w = std::min(N, cols - i);
      const auto g = hn::Mul(load_n(d, dyr + i, w), load_n(d, gamma + i, w));
      sg = hn::Add(sg, g);
      sgx = hn::MulAdd(g, hn::Sub(load_n(d, xr + i, w), vmu), sgx);
    }
    const float mg = hsum(d, sg) * inv_n, mgx = hsum(d, sgx) * rs * inv_n;
    // Pass 2: dx = rs * (g - mg - (x - mu) * rs * mgx) (+ add).
    const auto vrs = hn::Set(d, rs), vmg = hn::Set(d, mg), vk = hn::Set(d, rs * mgx);
    for (long i = 0; i < cols; i += N) {
      const long w = std::min(N, cols - i);
      const auto g = hn::Mul(load_n(d, dyr + i, w), load_n(d, gamma + i, w));
      const auto xc = hn::Sub(load_n(d, xr + i, w), vmu);
      auto dv = hn::Mul(vrs, hn::Sub(hn::Sub(g, vmg), hn::Mul(xc, vk)));
      if (ar)
        dv = hn::Add(dv, load_n(d, ar + i, w));
      store_n(dv, d, dxr + i, w);
    }
  }
}

void layer_norm_backward_weight_t(const float* dy, const float* x, const float* mean, const float* rstd, float* dgamma,
                                  float* dbeta, long rows, long cols) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  for (long r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    const auto vmu = hn::Set(d, mean[r]), vrs = hn::Set(d, rstd[r]);
    for (long i = 0; i < cols; i += N) {
      const long w = std::min(N, cols - i);
      const auto g = load_n(d, dyr + i, w);
      const auto xn = hn::Mul(hn::Sub(load_n(d, xr + i, w), vmu), vrs);
      store_n(hn::MulAdd(g, xn, load_n(d, dgamma + i, w)), d, dgamma + i, w);
      store_n(hn::Add(g, load_n(d, dbeta + i, w)), d, dbeta + i, w);
    }
  }
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/layer_norm.hpp"
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

HWY_EXPORT(layer_norm_forward_t);
HWY_EXPORT(layer_norm_backward_input_t);
HWY_EXPORT(layer_norm_backward_weight_t);

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        long rows, long cols, float eps) {
  TROUPE_DISPATCH(layer_norm_forward_t)(x, gamma, beta, y, mean, rstd, rows, cols, eps);
}

void layer_norm_backward_input(const float* dy, const float* x, const float* mean, const float* rstd,
                               const float* gamma, float* dx, long rows, long cols, const float* add) {
  TROUPE_DISPATCH(layer_norm_backward_input_t)(dy, x, mean, rstd, gamma, dx, rows, cols, add);
}

void layer_norm_backward_weight(const float* dy, const float* x, const float* mean, const float* rstd, float* dgamma,
                                float* dbeta, long rows, long cols) {
  TROUPE_DISPATCH(layer_norm_backward_weight_t)(dy, x, mean, rstd, dgamma, dbeta, rows, cols);
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
