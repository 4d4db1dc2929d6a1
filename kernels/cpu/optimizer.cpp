// Optimizer kernels: one streaming pass over parameter, gradient and state.
#include "kernels/cpu/optimizer.hpp"

#include <cmath>

#include "kernels/cpu/simd.hpp"

namespace troupe::kernels::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, long n, adamw_args a) {
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float step = a.lr / a.bias_correction1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(a.bias_correction2);
  const float b1 = a.beta1, b2 = a.beta2, c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2;
  long i = 0;
#if TROUPE_AVX512
  // The same operations in the same order as the scalar loop, 16 lanes at a time
  // (std::sqrt with errno keeps the compiler from vectorising that loop itself).
  const __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2), vc1 = _mm512_set1_ps(c1),
               vc2 = _mm512_set1_ps(c2), vdecay = _mm512_set1_ps(decay), vstep = _mm512_set1_ps(step),
               vbc2 = _mm512_set1_ps(inv_sqrt_bc2), veps = _mm512_set1_ps(a.eps);
  for (; i + 16 <= n; i += 16) {
    __m512 g = _mm512_loadu_ps(grad + i);
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_loadu_ps(m + i)), _mm512_mul_ps(vc1, g));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_loadu_ps(v + i)), _mm512_mul_ps(_mm512_mul_ps(vc2, g), g));
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vi), vbc2), veps);
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(param + i), vdecay);
    _mm512_storeu_ps(param + i, _mm512_sub_ps(p, _mm512_div_ps(_mm512_mul_ps(vstep, mi), denom)));
  }
#endif
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
