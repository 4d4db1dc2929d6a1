// Elementwise kernels; plain loops the compiler vectorises at -O3.
#include "kernels/cpu/elementwise.hpp"

#include "kernels/cpu/reduce.hpp"

namespace troupe::kernels::cpu {

void add(const float* a, const float* b, float* out, long n) {
  for (long i = 0; i < n; ++i)
    out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, long n) {
  for (long i = 0; i < n; ++i)
    acc[i] += x[i];
}

void broadcast_rows(const float* row, float* out, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    float* o = out + r * cols;
    for (long i = 0; i < cols; ++i)
      o[i] = row[i];
  }
}

void add_rows(const float* row, const float* residual, float* out, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    const float* x = residual + r * cols;
    float* o = out + r * cols;
    for (long i = 0; i < cols; ++i)
      o[i] = x[i] + row[i];
  }
}

void column_sum_add(const float* x, float* acc, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    for (long i = 0; i < cols; ++i)
      acc[i] += xr[i];
  }
}

void scale(float* x, float a, long n) {
  for (long i = 0; i < n; ++i)
    x[i] *= a;
}

double sum_squares(const float* x, long n) {
  double total = 0;
  constexpr long chunk = 4096; // float partial sums per chunk, double across chunks
  for (long i = 0; i < n; i += chunk)
    total += double(row_dot(x + i, x + i, n - i < chunk ? n - i : chunk));
  return total;
}

} // namespace troupe::kernels::cpu
