// Vectorised row reductions (sums, dot products) used by several CPU kernels.
#pragma once

#include "kernels/cpu/simd.hpp"

namespace troupe::kernels::cpu {

/// Sum of x[0..n).
inline float row_sum(const float* x, long n) {
#if TROUPE_AVX512
  __m512 acc = _mm512_setzero_ps();
  long i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + i));
  if (i < n)
    acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(simd::tail_mask(n - i), x + i));
  return simd::hsum(acc);
#else
  float s = 0;
  for (long i = 0; i < n; ++i)
    s += x[i];
  return s;
#endif
}

/// Sum of x[i] * y[i] over [0..n).
inline float row_dot(const float* x, const float* y, long n) {
#if TROUPE_AVX512
  __m512 acc = _mm512_setzero_ps();
  long i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc);
  if (i < n) {
    auto m = simd::tail_mask(n - i);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), acc);
  }
  return simd::hsum(acc);
#else
  float s = 0;
  for (long i = 0; i < n; ++i)
    s += x[i] * y[i];
  return s;
#endif
}

/// Sum of (x[i] - c)^2 over [0..n).
inline float row_sq_dev(const float* x, float c, long n) {
#if TROUPE_AVX512
  __m512 acc = _mm512_setzero_ps();
  __m512 vc = _mm512_set1_ps(c);
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), vc);
    acc = _mm512_fmadd_ps(d, d, acc);
  }
  if (i < n) {
    auto m = simd::tail_mask(n - i);
    __m512 d = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, x + i), vc);
    acc = _mm512_fmadd_ps(d, d, acc);
  }
  return simd::hsum(acc);
#else
  float s = 0;
  for (long i = 0; i < n; ++i)
    s += (x[i] - c) * (x[i] - c);
  return s;
#endif
}

/// Largest of x[0..n) (n >= 1).
inline float row_max(const float* x, long n) {
#if TROUPE_AVX512
  __m512 acc = _mm512_set1_ps(-INFINITY);
  long i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_max_ps(acc, _mm512_loadu_ps(x + i));
  if (i < n)
    acc = _mm512_mask_max_ps(acc, simd::tail_mask(n - i), acc, _mm512_maskz_loadu_ps(simd::tail_mask(n - i), x + i));
  return simd::hmax(acc);
#else
  float s = x[0];
  for (long i = 1; i < n; ++i)
    s = x[i] > s ? x[i] : s;
  return s;
#endif
}

/// y[i] = exp(x[i] - c) and returns their sum, over [0..n).
inline float row_exp_sum(const float* x, float c, float* y, long n) {
#if TROUPE_AVX512
  __m512 acc = _mm512_setzero_ps();
  __m512 vc = _mm512_set1_ps(c);
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = simd::exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vc));
    _mm512_storeu_ps(y + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    auto m = simd::tail_mask(n - i);
    __m512 e = simd::exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vc));
    e = _mm512_maskz_mov_ps(m, e);
    _mm512_mask_storeu_ps(y + i, m, e);
    acc = _mm512_add_ps(acc, e);
  }
  return simd::hsum(acc);
#else
  float s = 0;
  for (long i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - c);
    s += y[i];
  }
  return s;
#endif
}

} // namespace troupe::kernels::cpu
