// RMSNorm over the last dimension (Llama's norm: scale only, no mean, no shift):
// forward, input gradient, weight gradient.
#pragma once

namespace troupe::kernels::cpu {

/// y = x * rstd * w per row of `cols`, rstd = 1/√(mean(x²) + eps); saves rstd per row.
void rms_norm_forward(const float* x, const float* w, float* y, float* rstd, long rows, long cols, float eps);

/// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w and xhat = x * rstd, plus
/// `add` when non-null (a residual branch's gradient, fused); overwrites dx.
void rms_norm_backward_input(const float* dy, const float* x, const float* rstd, const float* w, float* dx, long rows,
                             long cols, const float* add = nullptr);

/// dw += Σ dy * x * rstd over rows.
void rms_norm_backward_weight(const float* dy, const float* x, const float* rstd, float* dw, long rows, long cols);

/// Scalar reference versions (double accumulation) the vectorised kernels are checked against.
void rms_norm_forward_reference(const float* x, const float* w, float* y, float* rstd, long rows, long cols, float eps);
void rms_norm_backward_input_reference(const float* dy, const float* x, const float* rstd, const float* w, float* dx,
                                       long rows, long cols, const float* add = nullptr);
void rms_norm_backward_weight_reference(const float* dy, const float* x, const float* rstd, float* dw, long rows,
                                        long cols);

} // namespace troupe::kernels::cpu
