// Layer norm over the last dimension with learned scale and shift; split backward.
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// Per-row statistics the forward saves for backward: mean and 1/√(var + eps), [rows].
struct layer_norm_saved {
  tensor_handle mean, rstd;
};

/// y = (x - mean) / √(var + eps) · gamma + beta over the last dimension.
tensor_handle layer_norm_forward(const tensor_handle& x, const tensor_handle& gamma, const tensor_handle& beta,
                                 layer_norm_saved& saved, float eps = 1e-5f);

/// dx from dy (the input-gradient half); when `add` is given (same shape as x) it is
/// added to dx in the same pass: how a residual branch's gradient joins.
tensor_handle layer_norm_backward_input(const tensor_handle& dy, const tensor_handle& x, const layer_norm_saved& saved,
                                        const tensor_handle& gamma, const tensor_handle& add = {});

/// dgamma += Σ dy · xhat and dbeta += Σ dy (the weight-gradient half).
void layer_norm_backward_weight(const tensor_handle& dy, const tensor_handle& x, const layer_norm_saved& saved,
                                tensor_handle& dgamma, tensor_handle& dbeta);

/// Both halves.
tensor_handle layer_norm_backward(const tensor_handle& dy, const tensor_handle& x, const layer_norm_saved& saved,
                                  const tensor_handle& gamma, tensor_handle& dgamma, tensor_handle& dbeta);

} // namespace troupe::ops
