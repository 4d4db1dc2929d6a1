// Token + position embedding on the GPU, forward and backward.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// out[i,:] = wte[ids[i],:] + wpe[i % seq_len,:] for i < rows (rows = batch * seq_len),
/// with the position term left out when wpe is null. An id outside [0, vocab)
/// gives a NaN row, so a bad token cannot pass unnoticed.
status embedding_forward(float* out, const std::int32_t* ids, const float* wte, const float* wpe, int rows, int seq_len,
                         int vocab, int dim, cudaStream_t stream);
status embedding_forward(__nv_bfloat16* out, const std::int32_t* ids, const __nv_bfloat16* wte,
                         const __nv_bfloat16* wpe, int rows, int seq_len, int vocab, int dim, cudaStream_t stream);

/// dwte[ids[i],:] += dout[i,:] and, when dwpe is not null, dwpe[i % seq_len,:] += dout[i,:]
/// (f32 gradients, accumulated; ids outside [0, vocab) are skipped).
status embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* ids, int rows, int seq_len,
                          int vocab, int dim, cudaStream_t stream);
status embedding_backward(float* dwte, float* dwpe, const __nv_bfloat16* dout, const std::int32_t* ids, int rows,
                          int seq_len, int vocab, int dim, cudaStream_t stream);

} // namespace troupe::gpu
