// The row reductions of simd-inl.h behind run-time dispatch, for callers that are not
// per-target kernels themselves (cross entropy, sum of squares).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/reduce.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {
float row_sum_t(const float* x, long n) {
  return row_sum(x, n);
}
float row_dot_t(const float* x, const float* y, long n) {
  return row_dot(x, y, n);
}
float row_max_t(const float* x, long n) {
  return row_max(x, n);
}
float row_exp_sum_t(const float* x, float c, float* y, long n) {
  return row_exp_sum(x, c, y, n);
}
} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/reduce.hpp"
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

HWY_EXPORT(row_sum_t);
HWY_EXPORT(row_dot_t);
HWY_EXPORT(row_max_t);
HWY_EXPORT(row_exp_sum_t);

float row_sum(const float* x, long n) {
  return TROUPE_DISPATCH(row_sum_t)(x, n);
}
float row_dot(const float* x, const float* y, long n) {
  return TROUPE_DISPATCH(row_dot_t)(x, y, n);
}
float row_max(const float* x, long n) {
  return TROUPE_DISPATCH(row_max_t)(x, n);
}
float row_exp_sum(const float* x, float c, float* y, long n) {
  return TROUPE_DISPATCH(row_exp_sum_t)(x, c, y, n);
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
