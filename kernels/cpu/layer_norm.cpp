// Layer norm kernels: two passes over each row, kept in cache.
#include "kernels/cpu/layer_norm.hpp"

#include <cmath>

#include "kernels/cpu/reduce.hpp"
#include "kernels/cpu/simd.hpp"

namespace troupe::kernels::cpu {

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                        float* rstd, long rows, long cols, float eps) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float mu = row_sum(xr, cols) / static_cast<float>(cols);
    float var = row_sq_dev(xr, mu, cols) / static_cast<float>(cols);
    float rs = 1.0f / std::sqrt(var + eps);
    mean[r] = mu;
    rstd[r] = rs;
    for (long i = 0; i < cols; ++i)
      yr[i] = (xr[i] - mu) * rs * gamma[i] + beta[i];
  }
}

void layer_norm_backward_input(const float* dy, const float* x, const float* mean, const float* rstd,
                               const float* gamma, float* dx, long rows, long cols, const float* add) {
  float inv_n = 1.0f / static_cast<float>(cols);
  for (long r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    const float* ar = add ? add + r * cols : nullptr;
    float* dxr = dx + r * cols;
    const float mu = mean[r], rs = rstd[r];
    long i = 0;
#if TROUPE_AVX512
    // Pass 1: g = dy * gamma and the row sums of g and g * (x - mean).
    __m512 sg = _mm512_setzero_ps(), sgx = _mm512_setzero_ps(), vmu = _mm512_set1_ps(mu);
    for (; i < cols; i += 16) {
      auto m = simd::tail_mask(cols - i);
      __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dyr + i), _mm512_maskz_loadu_ps(m, gamma + i));
      sg = _mm512_add_ps(sg, g);
      sgx = _mm512_fmadd_ps(g, _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, xr + i), vmu), sgx);
    }
    const float mg = simd::hsum(sg) * inv_n, mgx = simd::hsum(sgx) * rs * inv_n;
    // Pass 2: dx = rs * (g - mg - (x - mu) * rs * mgx) (+ add).
    const __m512 vrs = _mm512_set1_ps(rs), vmg = _mm512_set1_ps(mg), vk = _mm512_set1_ps(rs * mgx);
    for (i = 0; i < cols; i += 16) {
      auto m = simd::tail_mask(cols - i);
      __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dyr + i), _mm512_maskz_loadu_ps(m, gamma + i));
      __m512 xc = _mm512_sub_ps(_mm512_maskz_loadu_ps(m, xr + i), vmu);
      __m512 d = _mm512_mul_ps(vrs, _mm512_sub_ps(_mm512_sub_ps(g, vmg), _mm512_mul_ps(xc, vk)));
      if (ar)
        d = _mm512_add_ps(d, _mm512_maskz_loadu_ps(m, ar + i));
      _mm512_mask_storeu_ps(dxr + i, m, d);
    }
#else
    float sum_g = 0, sum_gx = 0;
    for (; i < cols; ++i) {
      float g = dyr[i] * gamma[i];
      sum_g += g;
      sum_gx += g * (xr[i] - mu);
    }
    const float mg = sum_g * inv_n, mgx = sum_gx * rs * inv_n;
    for (i = 0; i < cols; ++i) {
      float d = rs * (dyr[i] * gamma[i] - mg - (xr[i] - mu) * (rs * mgx));
      dxr[i] = ar ? d + ar[i] : d;
    }
#endif
  }
}

void layer_norm_backward_weight(const float* dy, const float* x, const float* mean, const float* rstd,
                                float* dgamma, float* dbeta, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    float mu = mean[r], rs = rstd[r];
    for (long i = 0; i < cols; ++i) {
      dgamma[i] += dyr[i] * (xr[i] - mu) * rs;
      dbeta[i] += dyr[i];
    }
  }
}

} // namespace troupe::kernels::cpu
