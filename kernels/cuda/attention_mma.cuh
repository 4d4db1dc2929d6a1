// Tensor-core (mma.sync m16n8k16, bf16 in, f32 accumulate) causal attention
// kernels behind attention.hpp, for bf16 with head_dim 64 or 128.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu::detail {

/// True when the tensor-core kernels take this call: head_dim 64 or 128 and
/// every pointer 16-byte aligned (they load 8 bf16 at a time).
bool attention_mma_supported(int head_dim, const void* const* ptrs, int count);

/// Forward: o and lse (natural log of the row sums of exp(scaled scores)).
status attention_mma_forward(__nv_bfloat16* o, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                             const __nv_bfloat16* v, int batch_heads, int n, int d, float scale, cudaStream_t s);

/// Backward: dq, dk, dv given delta[row] = dot(dout[row], o[row]) already
/// computed; dq_acc is f32 scratch of batch_heads * n * d elements (8-byte aligned).
status attention_mma_backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dq_acc,
                              const float* delta, const __nv_bfloat16* dout, const __nv_bfloat16* q,
                              const __nv_bfloat16* k, const __nv_bfloat16* v, const float* lse, int batch_heads, int n,
                              int d, float scale, cudaStream_t s);

} // namespace troupe::gpu::detail
