// RMSNorm over the last dimension with a learned scale (Llama's norm); split backward.
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// What the forward saves for backward: 1/√(mean(x²) + eps) per row, [rows].
struct rms_norm_saved {
  tensor_handle rstd;
};

/// y = x / √(mean(x²) + eps) · w over the last dimension.
tensor_handle rms_norm_forward(const tensor_handle& x, const tensor_handle& w, rms_norm_saved& saved,
                               float eps = 1e-5f);

/// dx from dy (the input-gradient half); `add` (shaped like x), when given, joins dx
/// in the same pass: a residual branch's gradient.
tensor_handle rms_norm_backward_input(const tensor_handle& dy, const tensor_handle& x, const rms_norm_saved& saved,
                                      const tensor_handle& w, const tensor_handle& add = {});

/// dw += Σ dy · x · rstd (the weight-gradient half).
void rms_norm_backward_weight(const tensor_handle& dy, const tensor_handle& x, const rms_norm_saved& saved,
                              tensor_handle& dw);

} // namespace troupe::ops
