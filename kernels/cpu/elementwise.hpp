// Elementwise and broadcast kernels: residual adds, bias rows, column sums, scaling.
#pragma once

namespace troupe::kernels::cpu {

/// out = a + b over n elements; out may alias a or b.
void add(const float* a, const float* b, float* out, long n);

/// acc += x over n elements.
void add_inplace(float* acc, const float* x, long n);

/// Every row of out[rows, cols] = row.
void broadcast_rows(const float* row, float* out, long rows, long cols);

/// out[r, :] = residual[r, :] + row for every row (a bias plus a residual branch).
void add_rows(const float* row, const float* residual, float* out, long rows, long cols);

/// acc[cols] += Σ over rows of x[rows, cols].
void column_sum_add(const float* x, float* acc, long rows, long cols);

/// x *= a over n elements.
void scale(float* x, float a, long n);

/// Σ x² over n elements, accumulated in double.
double sum_squares(const float* x, long n);

} // namespace troupe::kernels::cpu
