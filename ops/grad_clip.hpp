// Gradient clipping by global norm, across any number of gradient lists.
#pragma once

#include <vector>

#include "ops/named_tensor.hpp"

namespace troupe::ops {

/// Σ g² over every tensor of `grads`.
double grad_sq_norm(const std::vector<named_tensor>& grads);

/// Scales every gradient by `factor`.
void scale_grads(const std::vector<named_tensor>& grads, float factor);

/// The factor that brings a global norm down to `max_norm`: min(1, max_norm / (norm + 1e-6)).
float clip_factor(double global_norm, double max_norm);

/// Clips `grads` to global norm `max_norm` in place; returns the norm before clipping.
double clip_grad_norm(const std::vector<named_tensor>& grads, double max_norm);

} // namespace troupe::ops
