// Layer norm kernels: two passes over each row, kept in cache.
#include "kernels/cpu/layer_norm.hpp"

#include <cmath>

#include "kernels/cpu/reduce.hpp"

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
                               const float* gamma, float* dx, long rows, long cols) {
  float inv_n = 1.0f / static_cast<float>(cols);
  for (long r = 0; r < rows; ++r) {
    const float* dyr = dy + r * cols;
    const float* xr = x + r * cols;
    float* dxr = dx + r * cols;
    float mu = mean[r], rs = rstd[r];
    // g = dy * gamma lands in dx first; then the two row means, then the final formula.
    float sum_g = 0, sum_gx = 0;
    for (long i = 0; i < cols; ++i) {
      float g = dyr[i] * gamma[i];
      dxr[i] = g;
      sum_g += g;
      sum_gx += g * (xr[i] - mu);
    }
    float mg = sum_g * inv_n, mgx = sum_gx * rs * inv_n;
    for (long i = 0; i < cols; ++i)
      dxr[i] = rs * (dxr[i] - mg - (xr[i] - mu) * rs * mgx);
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
