// Core attention on one shard of one document, the unit of work an attention
// server runs (DistCA, Zhuang et al. 2025, arXiv:2510.18121): the last q queries
// of a document prefix of kv tokens, over the whole prefix.
#pragma once

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// What a shard's forward keeps for its backward: each query row's log Σ exp per head [heads, q].
struct shard_attention_saved {
  tensor_handle lse;
};

/// A shard's gradients: dq [q, C] for its queries, and dk, dv [kv, C] — this
/// shard's part of the prefix's key and value gradients, which the document's
/// owner sums over the shards that read them.
struct shard_attention_grads {
  tensor_handle dq, dk, dv;
};

/// q [q, C] are the queries at positions kv − q … kv − 1 of a document whose
/// keys and values k, v are [kv, C] (positions 0 … kv − 1); query i attends keys
/// 0 … kv − q + i. Returns out [q, C]: exactly the rows of the whole document's
/// causal attention (core_attention_forward) for those queries.
tensor_handle shard_attention_forward(const tensor_handle& q, const tensor_handle& k, const tensor_handle& v, int heads,
                                      shard_attention_saved& saved);

/// The backward of shard_attention_forward from dout [q, C].
shard_attention_grads shard_attention_backward(const tensor_handle& dout, const tensor_handle& q,
                                               const tensor_handle& k, const tensor_handle& v,
                                               const shard_attention_saved& saved, int heads);

} // namespace troupe::ops
