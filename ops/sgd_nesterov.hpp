// SGD with Nesterov momentum: the outer optimizer of DiLoCo-style training.
#pragma once

#include <vector>

#include "ops/named_tensor.hpp"

namespace troupe::ops {

/// PyTorch's SGD(nesterov=True, dampening=0): buf = μ·buf + g; p -= lr·(g + μ·buf).
class sgd_nesterov {
public:
  explicit sgd_nesterov(float momentum = 0.9f, float weight_decay = 0.0f)
    : momentum_(momentum), weight_decay_(weight_decay) {}
  /// params and grads match by position; updates params in place.
  void step(const std::vector<named_tensor>& params, const std::vector<named_tensor>& grads, float lr);

private:
  float momentum_, weight_decay_;
  std::vector<tensor_handle> buf_;
};

} // namespace troupe::ops
