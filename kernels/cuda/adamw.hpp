// Fused AdamW step on the GPU: f32 master weights and moments, gradients in
// f32 or bf16, and the bf16 copy of the weights used for compute written in the same pass.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// Hyper-parameters of one AdamW step (PyTorch's AdamW: decoupled weight decay).
struct adamw_config {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f; ///< multiplies the gradient first (1 / microbatches, unscaling)
  long step = 1;           ///< 1-based step number, for the bias corrections
};

/// One step over n parameters: m, v and master are updated in place, and
/// when `copy` is not null it receives the new weights rounded to bf16.
status adamw_step(float* master, float* m, float* v, __nv_bfloat16* copy, const float* grad, std::int64_t n,
                  const adamw_config& cfg, cudaStream_t stream);
status adamw_step(float* master, float* m, float* v, __nv_bfloat16* copy, const __nv_bfloat16* grad, std::int64_t n,
                  const adamw_config& cfg, cudaStream_t stream);

} // namespace troupe::gpu
