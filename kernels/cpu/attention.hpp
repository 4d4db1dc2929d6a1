// Causal core attention, softmax(Q Kᵀ / √d) V per head, on a packed QKV tensor.
#pragma once

namespace troupe::kernels::cpu {

/// Shapes of one core-attention call: qkv is [batch, seq, 3·heads·head_dim] (q, k, v
/// blocks of heads·head_dim each), out is [batch, seq, heads·head_dim] and probs is
/// [batch, heads, seq, seq] (softmax rows, zero above the diagonal).
struct attention_shape {
  long batch, seq, heads, head_dim;
};

/// Floats of scratch the forward needs (a transposed key block).
long attention_forward_scratch(attention_shape s);
/// Floats of scratch the backward needs (score gradients and a transposed value block).
long attention_backward_scratch(attention_shape s);

/// Forward: writes out and probs (kept for backward).
void attention_forward(const float* qkv, float* out, float* probs, float* scratch, attention_shape s);

/// Backward: overwrites dqkv from dout, qkv and probs.
void attention_backward(const float* dout, const float* qkv, const float* probs, float* dqkv, float* scratch,
                        attention_shape s);

/// Triple-loop forward in double precision, the reference the kernel is checked against.
void attention_forward_reference(const float* qkv, float* out, float* probs, attention_shape s);

} // namespace troupe::kernels::cpu
