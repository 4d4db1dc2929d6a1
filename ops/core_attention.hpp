// Core attention: softmax(Q Kᵀ / √d) V with a causal or document-causal mask, no
// parameters. Kept apart from the projections so it can run on another actor
// (attention disaggregation).
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// What the forward saves for backward: each softmax row's log Σ exp [B, heads, T],
/// from which backward recomputes the probabilities (no [T, T] matrix per head is kept).
struct core_attention_saved {
  tensor_handle lse;
  tensor_handle documents; ///< the forward's document mask (undefined: causal), reused by backward
};

/// qkv [B, T, 3C] (q, k, v blocks, each split into `heads` heads) → out [B, T, C].
/// `documents`, when defined, is i32 [B, T]: each token's position of its document's
/// first token in the row (kernels/cpu/attention.hpp); no token attends across a
/// document boundary. Undefined: plain causal attention over the whole row.
tensor_handle core_attention_forward(const tensor_handle& qkv, int heads, core_attention_saved& saved,
                                     const tensor_handle& documents = {});

/// dqkv [B, T, 3C] from dout [B, T, C].
tensor_handle core_attention_backward(const tensor_handle& dout, const tensor_handle& qkv,
                                      const core_attention_saved& saved, int heads);

} // namespace troupe::ops
