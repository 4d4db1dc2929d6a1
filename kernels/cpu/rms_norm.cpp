// RMSNorm kernels: one pass for the row's statistic, one to write, the row kept in
// cache; written once with Highway for every SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/rms_norm.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {

void rms_norm_forward_t(const float* x, const float* w, float* y, float* rstd, long rows, long cols, float eps) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const float rs = 1.0f / std::sqrt(row_sq_dev(xr, 0.0f, cols) / static_cast<float>(cols) + eps);
    rstd[r] = rs;
    const auto vrs = hn::Set(d, rs);
    for (long i = 0; i < cols; i += N) {
      const long n = std::min(N, cols - i);
      store_n(hn::Mul(hn::Mul(load_n(d, xr + i, n), vrs), load_n(d, w + i, n)), d, yr + i, n);
    }
  }
}

void rms_norm_backward_input_t(const float* dy, const float* x, const float* rstd, const float* w, float* dx, long rows,
                               long cols, const float* add) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  const float inv_n = 1.0f / static_cast<float>(cols);
  for (long r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    const float* ar = add ? add + r * cols : nullptr;
    float* dxr = dx + r * cols;
    const float rs = rstd[r];
    // Pass 1: Σ g·x with g = dy·w (lanes past the row's end load as zero).
    auto sgx = hn::Zero(d);
    for (long i = 0; i < cols; i += N) {
      const long n = std::min(N, cols - i);
      sgx = hn::MulAdd(hn::Mul(load_n(d, dyr + i, n), load_n(d, w + i, n)), load_n(d, xr + i, n), sgx);
    }
    // Pass 2: dx = rs·g - x·rs³·mean(g·x) (+ add).
    const auto vrs = hn::Set(d, rs), vk = hn::Set(d, rs * rs * rs * hsum(d, sgx) * inv_n);
    for (long i = 0; i < cols; i += N) {
      const long n = std::min(N, cols - i);
      const auto g = hn::Mul(load_n(d, dyr + i, n), load_n(d, w + i, n));
      auto dv = hn::NegMulAdd(load_n(d, xr + i, n), vk, hn::Mul(g, vrs));
      if (ar)
        dv = hn::Add(dv, load_n(d, ar + i, n));
      store_n(dv, d, dxr + i, n);
    }
  }
}

void rms_norm_backward_weight_t(const float* dy, const float* x, const float* rstd, float* dw, long rows, long cols) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  for (long r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    const auto vrs = hn::Set(d, rstd[r]);
    for (long i = 0; i < cols; i += N) {
      const long n = std::min(N, cols - i);
      const auto xn = hn::Mul(load_n(d, xr + i, n), vrs);
      store_n(hn::MulAdd(load_n(d, dyr + i, n), xn, load_n(d, dw + i, n)), d, dw + i, n);
    }
  }
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cmath>

#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

HWY_EXPORT(rms_norm_forward_t);
HWY_EXPORT(rms_norm_backward_input_t);
HWY_EXPORT(rms_norm_backward_weight_t);

void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, long rows, long cols, float eps) {
  TROUPE_DISPATCH(rms_norm_forward_t)(x, w, y, rstd, rows, cols, eps);
}

void rms_norm_backward_input(const float* dy, const float* x, const float* rstd, const float* w, float* dx, long rows,
                             long cols, const float* add) {
  TROUPE_DISPATCH(rms_norm_backward_input_t)(dy, x, rstd, w, dx, rows, cols, add);
}

void rms_norm_backward_weight(const float* dy, const float* x, const float* rstd, float* dw, long rows, long cols) {
  TROUPE_DISPATCH(rms_norm_backward_weight_t)(dy, x, rstd, dw, rows, cols);
}

void rms_norm_forward_reference(const float* x, const float* w, float* y, float* rstd, long rows, long cols,
                                float eps) {
  for (long r = 0; r < rows; ++r) {
    double ss = 0;
    for (long i = 0; i < cols; ++i)
      ss += double(x[r * cols + i]) * x[r * cols + i];
    const double rs = 1.0 / std::sqrt(ss / double(cols) + eps);
    rstd[r] = float(rs);
    for (long i = 0; i < cols; ++i)
      y[r * cols + i] = float(x[r * cols + i] * rs * w[i]);
  }
}

void rms_norm_backward_input_reference(const float* dy, const float* x, const float* rstd, const float* w, float* dx,
                                       long rows, long cols, const float* add) {
  for (long r = 0; r < rows; ++r) {
    const double rs = rstd[r];
    double sgx = 0;
    for (long i = 0; i < cols; ++i)
      sgx += double(dy[r * cols + i]) * w[i] * x[r * cols + i];
    const double k = rs * rs * rs * sgx / double(cols);
    for (long i = 0; i < cols; ++i) {
      const long j = r * cols + i;
      dx[j] = float(rs * dy[j] * w[i] - x[j] * k + (add ? add[j] : 0.0));
    }
  }
}

void rms_norm_backward_weight_reference(const float* dy, const float* x, const float* rstd, float* dw, long rows,
                                        long cols) {
  for (long i = 0; i < cols; ++i) {
    double acc = 0;
    for (long r = 0; r < rows; ++r)
      acc += double(dy[r * cols + i]) * x[r * cols + i] * rstd[r];
    dw[i] = float(dw[i] + acc);
  }
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
