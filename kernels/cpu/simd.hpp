// Small SIMD helpers shared by the CPU kernels: AVX-512 when the compiler
// targets it, with scalar fallbacks that give the same results to ~1 ulp.
#pragma once

#include <cmath>

#if defined(__AVX512F__)
#include <immintrin.h>
#define TROUPE_AVX512 1
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_ps() as maybe
// uninitialised wherever they inline; the kernel sources that include this header
// turn that false positive off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace troupe::kernels::cpu::simd {

#if TROUPE_AVX512
/// exp(x) for 16 floats: range reduction by ln 2 and a degree-6 polynomial (rel. error < 2e-7).
inline __m512 exp512(__m512 x) {
  // Operand order matters: min/max return their second operand when either is NaN,
  // so `x` goes second and a NaN input stays NaN (a NaN loss must never pass).
  x = _mm512_max_ps(_mm512_set1_ps(-87.0f), _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 r2 = _mm512_mul_ps(r, r);
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

/// tanh(x) for 16 floats via 1 - 2 / (exp(2x) + 1); accurate to a few 1e-7 absolute.
inline __m512 tanh512(__m512 x) {
  __m512 e = exp512(_mm512_add_ps(x, x));
  __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

/// Sum of the 16 lanes (GCC 12's _mm512_reduce_add_ps trips -Wmaybe-uninitialized).
inline float hsum(__m512 v) {
  __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  b = _mm_add_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

/// Largest of the 16 lanes.
inline float hmax(__m512 v) {
  __m256 a = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_max_ps(b, _mm_movehl_ps(b, b));
  b = _mm_max_ss(b, _mm_movehdup_ps(b));
  return _mm_cvtss_f32(b);
}

/// Mask selecting the first `n` lanes (none when n <= 0, all when n >= 16).
inline __mmask16 tail_mask(long n) {
  if (n <= 0)
    return 0;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}
#endif

/// Scalar tanh matching tanh512's formula closely enough for reference checks.
inline float tanh1(float x) { return std::tanh(x); }

} // namespace troupe::kernels::cpu::simd
