// Layer norm over the last dimension: forward, input gradient, weight gradient.
#pragma once

namespace troupe::kernels::cpu {

/// y = (x - mean) * rstd * gamma + beta per row of `cols`; saves mean and rstd per row.
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        long rows, long cols, float eps);

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma, plus `add`
/// when non-null (a residual branch's gradient, fused); overwrites dx.
void layer_norm_backward_input(const float* dy, const float* x, const float* mean, const float* rstd,
                               const float* gamma, float* dx, long rows, long cols, const float* add = nullptr);

/// dgamma += Σ dy * xhat, dbeta += Σ dy over rows.
void layer_norm_backward_weight(const float* dy, const float* x, const float* mean, const float* rstd, float* dgamma,
                                float* dbeta, long rows, long cols);

} // namespace troupe::kernels::cpu
