// Causal core attention on the GPU, softmax(Q K^T * scale) V with a causal
// mask, as fused flash-style kernels: scores are never written to memory; the
// forward keeps a log-sum-exp per row and the backward recomputes the scores.
#pragma once

#include <cstddef>

#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// Sizes of one attention call. Q, K, V, O and their gradients are contiguous
/// [batch, heads, seq_len, head_dim]; head_dim must be 32, 64 or 128.
struct attention_shape {
  int batch = 0, heads = 0, seq_len = 0, head_dim = 0;
  float scale = 0.0f; ///< score scale; 0 means 1/sqrt(head_dim)
  /// Document masks, or null for causal: a device array [batch, seq_len] giving
  /// each token the position of its document's first token (shared by the heads),
  /// so query i attends keys doc_start[i] <= j <= i, as the CPU kernel
  /// (kernels/cpu/attention.hpp). Masked calls run on the CUDA-core kernels.
  const int* doc_start = nullptr;
};

/// o = causal softmax(q k^T * scale) v; lse[batch*heads*seq_len] (f32) receives
/// each row's log-sum-exp of the scaled scores, which the backward needs.
status attention_forward(float* o, float* lse, const float* q, const float* k, const float* v, const attention_shape& s,
                         cudaStream_t stream);
status attention_forward(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                         const __nv_bfloat16* v, const attention_shape& s, cudaStream_t stream);

/// Floats of device scratch attention_backward needs for `s`: batch*heads*seq_len*(head_dim+1).
std::size_t attention_backward_workspace(const attention_shape& s);

/// dq, dk, dv from dout and the forward's inputs, output and lse (all written,
/// not accumulated). `workspace` is f32 scratch of attention_backward_workspace(s)
/// elements, 16-byte aligned (cudaMalloc and the storage pool give that).
status attention_backward(float* dq, float* dk, float* dv, float* workspace, const float* dout, const float* q,
                          const float* k, const float* v, const float* o, const float* lse, const attention_shape& s,
                          cudaStream_t stream);
status attention_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* workspace,
                          const __nv_bfloat16* dout, const __nv_bfloat16* q, const __nv_bfloat16* k,
                          const __nv_bfloat16* v, const __nv_bfloat16* o, const float* lse, const attention_shape& s,
                          cudaStream_t stream);

} // namespace troupe::gpu
