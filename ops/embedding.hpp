// Token + position embedding: out[b, t] = wte[token] + wpe[t]; gradients go to the tables.
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// tokens i32 [B, T], wte [vocab, C], wpe [context ≥ T, C] → f32 [B, T, C]. An undefined
/// wpe adds no position term (Llama: positions are rotary, ops/rope.hpp).
tensor_handle embedding_forward(const tensor_handle& tokens, const tensor_handle& wte, const tensor_handle& wpe);

/// dwte and dwpe (when defined) += the scattered dout (the only backward: tokens have no gradient).
void embedding_backward_weight(const tensor_handle& dout, const tensor_handle& tokens, tensor_handle& dwte,
                               tensor_handle& dwpe);

} // namespace troupe::ops
