// Fused softmax + cross-entropy on the GPU: the loss (mean over the tokens whose
// target is not ignored) and the gradient of the logits in one pass over them.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// Buffers of one cross-entropy call (all device memory).
struct cross_entropy_out {
  float* loss = nullptr;         ///< [1]: mean of row_loss over counted rows (0 when none counts)
  float* row_loss = nullptr;     ///< [rows]: -log softmax(logits)[target], 0 for ignored rows
  std::int32_t* count = nullptr; ///< [1]: rows whose target is not ignore_index
};

/// For logits [rows, vocab] and targets [rows]: fills `out`, and when dlogits is
/// not null writes d(loss * dloss_scale)/dlogits (it may alias logits). A target
/// outside [0, vocab) that is not ignore_index makes that row's loss NaN.
status cross_entropy_forward_backward(const cross_entropy_out& out, float* dlogits, const float* logits,
                                      const std::int32_t* targets, int rows, int vocab, int ignore_index,
                                      float dloss_scale, cudaStream_t stream);
status cross_entropy_forward_backward(const cross_entropy_out& out, __nv_bfloat16* dlogits, const __nv_bfloat16* logits,
                                      const std::int32_t* targets, int rows, int vocab, int ignore_index,
                                      float dloss_scale, cudaStream_t stream);

} // namespace troupe::gpu
