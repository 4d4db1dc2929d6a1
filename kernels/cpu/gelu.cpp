// GELU kernels: 16 lanes at a time with a masked tail.
#include "kernels/cpu/gelu.hpp"

#include <cmath>

#include "kernels/cpu/simd.hpp"

namespace troupe::kernels::cpu {

namespace {
constexpr float k0 = 0.7978845608028654f; // √(2/π)
constexpr float k1 = 0.044715f;

inline float gelu1(float x) {
  return 0.5f * x * (1.0f + std::tanh(k0 * (x + k1 * x * x * x)));
}
inline float gelu_grad1(float x) {
  float t = std::tanh(k0 * (x + k1 * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k0 * (1.0f + 3.0f * k1 * x * x);
}

#if TROUPE_AVX512
inline __m512 tanh_arg(__m512 x) {
  __m512 x2 = _mm512_mul_ps(x, x);
  __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(x2, _mm512_set1_ps(k1)), x, x);
  return _mm512_mul_ps(inner, _mm512_set1_ps(k0));
}
inline __m512 gelu16(__m512 x) {
  __m512 t = simd::tanh512(tanh_arg(x));
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), t));
}
inline __m512 gelu_grad16(__m512 x) {
  __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
  __m512 t = simd::tanh512(tanh_arg(x));
  __m512 x2 = _mm512_mul_ps(x, x);
  __m512 du = _mm512_mul_ps(_mm512_set1_ps(k0), _mm512_fmadd_ps(_mm512_set1_ps(3.0f * k1), x2, one));
  __m512 sech2 = _mm512_fnmadd_ps(t, t, one);
  __m512 a = _mm512_mul_ps(half, _mm512_add_ps(one, t));
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(half, x), sech2), du, a);
}
#endif
} // namespace

void gelu_forward(const float* x, float* y, long n) {
  long i = 0;
#if TROUPE_AVX512
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    auto m = simd::tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
    return;
  }
#endif
  for (; i < n; ++i)
    y[i] = gelu1(x[i]);
}

void gelu_backward(const float* dy, const float* x, float* dx, long n) {
  long i = 0;
#if TROUPE_AVX512
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dx + i, _mm512_mul_ps(_mm512_loadu_ps(dy + i), gelu_grad16(_mm512_loadu_ps(x + i))));
  if (i < n) {
    auto m = simd::tail_mask(n - i);
    __m512 g = gelu_grad16(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
    return;
  }
#endif
  for (; i < n; ++i)
    dx[i] = dy[i] * gelu_grad1(x[i]);
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
