// Llama's attention input: rotary positions on q and k, and grouped-query attention's
// k and v repeated for every head of their group, packed into the qkv [B, T, 3C]
// layout core attention takes, so core attention, attention servers and document
// masks serve both model families unchanged.
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// cos and sin of every (position, frequency) pair up to `positions`, built once per model.
struct rope_table {
  tensor_handle cos, sin; ///< [positions, head_dim / 2]
  long head_dim = 0;
  double theta = 0;
};

/// The table for heads of `head_dim` (even) with base `theta`, for positions [0, positions).
rope_table make_rope_table(double theta, long head_dim, long positions);

/// Each token's rotary position, i32 [B·T]: its index in the row, or with `documents`
/// (i32 [B, T], each token's document start, ops/core_attention.hpp) its index in its
/// document, so positions restart per document as in packed-document training.
tensor_handle rope_positions(long batch, long seq, const tensor_handle& documents = {});

/// proj [B, T, C + 2·KV] (q, then k and v of `kv_heads` heads, the fused projection's
/// output) → qkv [B, T, 3C]: q and k turned by `positions`, each k and v head repeated
/// for the heads/kv_heads query heads of its group (Hugging Face's repeat_kv).
tensor_handle rope_pack_forward(const tensor_handle& proj, int heads, int kv_heads, const tensor_handle& positions,
                                const rope_table& table);

/// d proj [B, T, C + 2·KV] from d qkv [B, T, 3C]: each group's k and v gradients summed
/// back to their one head, q and k turned back.
tensor_handle rope_pack_backward(const tensor_handle& dqkv, int heads, int kv_heads, const tensor_handle& positions,
                                 const rope_table& table);

} // namespace troupe::ops
