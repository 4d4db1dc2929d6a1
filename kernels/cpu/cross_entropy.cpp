// Cross-entropy kernels: one pass for max, one for exp-sum (stored), one to scale.
#include "kernels/cpu/cross_entropy.hpp"

#include <cmath>

#include "kernels/cpu/reduce.hpp"

namespace troupe::kernels::cpu {

namespace {
long count_valid(const std::int32_t* targets, long rows, std::int32_t ignore_index) {
  long n = 0;
  for (long r = 0; r < rows; ++r)
    n += targets[r] != ignore_index;
  return n;
}
} // namespace

float cross_entropy_forward(const float* logits, const std::int32_t* targets, long rows, long vocab,
                            std::int32_t ignore_index, long* counted) {
  double total = 0;
  long n = 0;
  for (long r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index)
      continue;
    const float* x = logits + r * vocab;
    float mx = row_max(x, vocab);
    double sum = 0;
    for (long j = 0; j < vocab; ++j)
      sum += std::exp(double(x[j] - mx));
    total += std::log(sum) + mx - x[targets[r]];
    ++n;
  }
  if (counted)
    *counted = n;
  return n == 0 ? 0.0f : float(total / double(n));
}

float cross_entropy_backward(const float* logits, const std::int32_t* targets, float* dlogits, long rows, long vocab,
                             std::int32_t ignore_index, float dloss) {
  long n = count_valid(targets, rows, ignore_index);
  float scale = n == 0 ? 0.0f : dloss / float(n);
  double total = 0;
  for (long r = 0; r < rows; ++r) {
    const float* x = logits + r * vocab;
    float* d = dlogits + r * vocab;
    std::int32_t t = targets[r];
    if (t == ignore_index) {
      for (long j = 0; j < vocab; ++j)
        d[j] = 0.0f;
      continue;
    }
    float mx = row_max(x, vocab);
    float xt = x[t];
    float sum = row_exp_sum(x, mx, d, vocab);
    total += double(std::log(sum)) + mx - xt;
    float k = scale / sum;
    for (long j = 0; j < vocab; ++j)
      d[j] *= k;
    d[t] -= scale;
  }
  return n == 0 ? 0.0f : float(total / double(n));
}

double cross_entropy_forward_reference(const float* logits, const std::int32_t* targets, long rows, long vocab,
                                       std::int32_t ignore_index) {
  double total = 0;
  long n = 0;
  for (long r = 0; r < rows; ++r) {
    if (targets[r] == ignore_index)
      continue;
    const float* x = logits + r * vocab;
    double mx = x[0];
    for (long j = 1; j < vocab; ++j)
      mx = std::max(mx, double(x[j]));
    double sum = 0;
    for (long j = 0; j < vocab; ++j)
      sum += std::exp(double(x[j]) - mx);
    total += std::log(sum) + mx - double(x[targets[r]]);
    ++n;
  }
  return n == 0 ? 0.0 : total / double(n);
}

} // namespace troupe::kernels::cpu
