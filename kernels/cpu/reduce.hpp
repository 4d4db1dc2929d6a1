// Row reductions (sums, dot products, max, exp-sum) for code outside Highway's
// per-target kernels; each call dispatches to the best SIMD target once per row.
#pragma once

namespace troupe::kernels::cpu {

/// Sum of x[0..n).
float row_sum(const float* x, long n);

/// Sum of x[i] * y[i] over [0..n).
float row_dot(const float* x, const float* y, long n);

/// Largest of x[0..n) (n ≥ 1).
float row_max(const float* x, long n);

/// y[i] = exp(x[i] - c) and returns their sum, over [0..n).
float row_exp_sum(const float* x, float c, float* y, long n);

} // namespace troupe::kernels::cpu
