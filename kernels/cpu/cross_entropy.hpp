// Softmax cross-entropy over rows of logits with integer targets and an ignore index.
#pragma once

#include <cstdint>

namespace troupe::kernels::cpu {

/// Mean over rows whose target != ignore_index of logsumexp(row) - row[target];
/// `counted` receives how many rows were counted (the loss is 0 when none are).
float cross_entropy_forward(const float* logits, const std::int32_t* targets, long rows, long vocab,
                            std::int32_t ignore_index, long* counted);

/// dlogits = dloss / counted * (softmax(row) - onehot(target)), zero for ignored rows.
/// dlogits may alias logits. Returns the loss as the forward would.
float cross_entropy_backward(const float* logits, const std::int32_t* targets, float* dlogits, long rows, long vocab,
                             std::int32_t ignore_index, float dloss);

/// Double-precision reference of the forward.
double cross_entropy_forward_reference(const float* logits, const std::int32_t* targets, long rows, long vocab,
                                       std::int32_t ignore_index);

} // namespace troupe::kernels::cpu
