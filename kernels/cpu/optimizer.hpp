// Optimizer update kernels: AdamW and SGD with Nesterov momentum, in place.
#pragma once

namespace troupe::kernels::cpu {

/// Hyper-parameters of one AdamW update; bias corrections are 1 - beta^t.
struct adamw_args {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2;
};

/// PyTorch's AdamW: p *= 1 - lr·wd; m, v moments; p -= lr/bc1 · m / (√v / √bc2 + eps).
void adamw_update(float* param, const float* grad, float* m, float* v, long n, adamw_args a);

/// PyTorch's SGD with Nesterov momentum (no dampening): buf = μ·buf + g (+ wd·p);
/// p -= lr · (g + μ·buf).
void sgd_nesterov_update(float* param, const float* grad, float* buf, long n, float lr, float momentum,
                         float weight_decay);

} // namespace troupe::kernels::cpu
