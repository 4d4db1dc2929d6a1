// AdamW (decoupled weight decay, bias correction) over a list of parameters.
#pragma once

#include <string>
#include <vector>

#include "ops/optimizer.hpp"

namespace troupe::ops {

/// AdamW hyper-parameters (the learning rate is passed to each step).
struct adamw_options {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

/// PyTorch's AdamW. Parameters of rank ≥ 2 get weight decay; vectors (biases,
/// norms) do not. State per parameter: `exp_avg` and `exp_avg_sq` (torch's names).
/// CPU parameters use kernels/cpu; device ones the kernel their backend
/// registered (CUDA: kernels/cuda/adamw), queued on `stream`.
class adamw final : public optimizer {
public:
  explicit adamw(const std::vector<named_tensor>& params, adamw_options opt = {}, device_stream stream = nullptr);
  adamw_options& options() noexcept { return opt_; }
  /// The state kinds it keeps per parameter, known before one is made (what a checkpoint must hold).
  static const std::vector<std::string>& kinds();

private:
  void update(std::size_t i, const tensor_handle& param, const tensor_handle& grad, float lr) override;
  adamw_options opt_;
};

} // namespace troupe::ops
