// Causal core attention, softmax(Q Kᵀ / √d) V per head, on a packed QKV tensor,
// optionally document-causal: no token attends across a document boundary.
#pragma once

#include <cstdint>

namespace troupe::kernels::cpu {

/// Shapes of one core-attention call: qkv is [batch, seq, 3·heads·head_dim] (q, k, v
/// blocks of heads·head_dim each), out is [batch, seq, heads·head_dim] and lse is
/// [batch, heads, seq]: each row's log Σ exp of its scaled scores, from which the
/// backward recomputes the softmax instead of keeping [seq, seq] probabilities per
/// head (FlashAttention's recomputation, Dao et al. 2022, arXiv:2205.14135).
struct attention_shape {
  long batch, seq, heads, head_dim;
};

/// Floats of scratch the forward needs (a transposed key block, a block of score rows).
long attention_forward_scratch(attention_shape s);
/// Floats of scratch the backward needs (one head's probabilities and score
/// gradients, transposed key and value blocks).
long attention_backward_scratch(attention_shape s);

/// Document masks: `doc_start` is null (one causal sequence per row) or [batch, seq],
/// each token's position of its document's first token within the row, so token i
/// attends keys doc_start[i] ≤ j ≤ i. A row's documents are then independent causal
/// sequences: the kernels run each as its own causal attention (documents that share
/// no keys cost no products), which is also what a core-attention shard is (DistCA,
/// arXiv:2510.18121). Well formed: doc_start[0] = 0 and each next value repeats the
/// previous one or equals its own position (documents_well_formed checks it).
bool documents_well_formed(const std::int32_t* doc_start, long batch, long seq);

/// Forward: writes out and lse (kept for backward).
void attention_forward(const float* qkv, float* out, float* lse, float* scratch, attention_shape s,
                       const std::int32_t* doc_start = nullptr);

/// Backward: overwrites dqkv from dout, qkv and the forward's lse (the same doc_start).
void attention_backward(const float* dout, const float* qkv, const float* lse, float* dqkv, float* scratch,
                        attention_shape s, const std::int32_t* doc_start = nullptr);

/// A core-attention shard (DistCA, arXiv:2510.18121): the last `nq` queries of a
/// document prefix of `nkv` keys, query i at position nkv − nq + i attending keys
/// 0 … nkv − nq + i. q is [nq, C], k and v are [nkv, C] (C = heads·head_dim, rows
/// contiguous), out [nq, C], lse [heads, nq]. Keys before the first query form a
/// full rectangle, the rest a causal triangle: the products cost the shard's
/// pairs, not the prefix's.
long attention_shard_forward_scratch(long nq, long nkv, long head_dim);
long attention_shard_backward_scratch(long nq, long nkv, long head_dim);
void attention_shard_forward(const float* q, const float* k, const float* v, float* out, float* lse, float* scratch,
                             long nq, long nkv, long heads, long head_dim);
/// Its backward: overwrites dq [nq, C], dk and dv [nkv, C] from dout [nq, C].
void attention_shard_backward(const float* dout, const float* q, const float* k, const float* v, const float* lse,
                              float* dq, float* dk, float* dv, float* scratch, long nq, long nkv, long heads,
                              long head_dim);

/// Triple-loop forward in double precision, the reference the kernel is checked
/// against: the mask applied per score (j < doc_start[i] or j > i is skipped).
void attention_forward_reference(const float* qkv, float* out, float* lse, attention_shape s,
                                 const std::int32_t* doc_start = nullptr);

/// Triple-loop backward in double precision: dqkv from dout and qkv.
void attention_backward_reference(const float* dout, const float* qkv, float* dqkv, attention_shape s,
                                  const std::int32_t* doc_start = nullptr);

} // namespace troupe::kernels::cpu
