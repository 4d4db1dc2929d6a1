// AdamW (decoupled weight decay, bias correction) over a list of parameters.
#pragma once

#include <vector>

#include "ops/named_tensor.hpp"

namespace troupe::ops {

/// AdamW hyper-parameters (the learning rate is passed to each step).
struct adamw_options {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

/// AdamW with moment state per parameter, created (zeroed) on the first step.
/// Parameters of rank ≥ 2 get weight decay; vectors (biases, norms) do not.
class adamw {
public:
  explicit adamw(adamw_options opt = {}) : opt_(opt) {}
  /// params and grads match by position (same shapes); updates params in place.
  void step(const std::vector<named_tensor>& params, const std::vector<named_tensor>& grads, float lr);
  /// Steps taken so far (the t of the bias corrections).
  long steps() const noexcept { return t_; }
  adamw_options& options() noexcept { return opt_; }
  /// First and second moments, in parameter order (empty before the first step).
  const std::vector<tensor_handle>& first_moments() const noexcept { return m_; }
  const std::vector<tensor_handle>& second_moments() const noexcept { return v_; }
  /// Replaces the whole state, as a checkpoint saved it: `steps` taken and the
  /// moments in parameter order (the optimizer keeps the handles). Throws
  /// std::invalid_argument when the lists differ in length or shapes, or hold
  /// something other than f32 CPU tensors.
  void load_state(long steps, std::vector<tensor_handle> m, std::vector<tensor_handle> v);

private:
  adamw_options opt_;
  long t_ = 0;
  std::vector<tensor_handle> m_, v_;
};

} // namespace troupe::ops
