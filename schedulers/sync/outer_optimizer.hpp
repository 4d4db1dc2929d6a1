// The outer step of DiLoCo-style training as plain arithmetic on flat f32
// values: pseudo-gradients, torch's SGD over them, and mixing (#13).
#pragma once

#include <span>
#include <vector>

#include "runtime/graph/local_update_spec.hpp"

namespace troupe::sched {

/// torch.optim.SGD(lr, momentum, nesterov, dampening 0) over one flat list of
/// values: `buf = g` on the first step, else `buf = μ·buf + g`; the step is
/// `g + μ·buf` with Nesterov, `buf` without, `g` when μ is 0;
/// `p -= lr·step`. The outer optimizer of DiLoCo (Douillard et al. 2023,
/// arXiv 2311.08105, Algorithm 1) and torchft's outer optimizers.
class outer_sgd {
public:
  outer_sgd(outer_optimizer_spec spec, std::size_t size) : spec_(spec), buf_(size, 0.0f) {}

  /// One step of `params` along `grad` (both of the size it was made for).
  void step(std::span<float> params, std::span<const float> grad);
  /// Steps taken so far.
  long steps() const noexcept { return steps_; }
  /// The momentum buffer (zero before the first step).
  const std::vector<float>& momentum() const noexcept { return buf_; }
  /// Takes up a saved momentum buffer and step count (a resumed run).
  void load(std::vector<float> momentum, long steps);

private:
  outer_optimizer_spec spec_;
  std::vector<float> buf_;
  long steps_ = 0;
};

/// DiLoCo's pseudo-gradient of one replica: `global − local` (torchft's
/// `_save_grads`: the saved global parameters minus the current local ones).
void pseudo_gradient(std::span<const float> global, std::span<const float> local, std::span<float> out);

/// `local ← global + α·(local − global)`, lerped from the global as torch's
/// lerp in torchft's `_merge_parameters` is: α = 0 takes the new global bit for
/// bit (on every replica alike), α = 1 keeps the local values.
void mix(std::span<const float> global, std::span<float> local, double alpha);

/// The element-wise mean of `parts` (all of one size), summed in f32 in the
/// order given and divided by their count.
std::vector<float> mean(const std::vector<std::vector<float>>& parts);

} // namespace troupe::sched
