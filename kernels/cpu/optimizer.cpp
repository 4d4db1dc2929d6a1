// Optimizer kernels: one streaming pass over parameter, gradient and state.
#include "kernels/cpu/optimizer.hpp"

#include <cmath>

namespace troupe::kernels::cpu {

void adamw_update(float* param, const float* grad, float* m, float* v, long n, adamw_args a) {
  const float decay = 1.0f - a.lr * a.weight_decay;
  const float step = a.lr / a.bias_correction1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(a.bias_correction2);
  const float b1 = a.beta1, b2 = a.beta2, c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2;
  for (long i = 0; i < n; ++i) {
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
