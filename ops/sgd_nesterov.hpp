// SGD with Nesterov momentum: the outer optimizer of DiLoCo-style training.
#pragma once

#include <vector>

#include "ops/optimizer.hpp"

namespace troupe::ops {

/// PyTorch's SGD(nesterov=True, dampening=0): g += wd·p; buf = μ·buf + g (buf = g
/// on the first step: the buffer starts at zero); p -= lr·(g + μ·buf). State per
/// parameter: `momentum_buffer` (torch's name). CPU parameters only for now.
class sgd_nesterov final : public optimizer {
public:
  explicit sgd_nesterov(const std::vector<named_tensor>& params, float momentum = 0.9f, float weight_decay = 0.0f);

private:
  void update(std::size_t i, const tensor_handle& param, const tensor_handle& grad, float lr) override;
  float momentum_, weight_decay_;
};

} // namespace troupe::ops
