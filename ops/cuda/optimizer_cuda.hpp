// The CUDA kernels behind ops/optimizer.hpp, registered when the CUDA library is
// in the process: the CPU libraries never link them.
#pragma once

namespace troupe::ops {

/// Registers the optimizers' CUDA kernels for device::kind_t::cuda: AdamW's
/// fused kernel (kernels/cuda/adamw), zeroing and the copies of checkpoints, on
/// the stream each optimizer was given. Idempotent; gpt_cuda::init and the CUDA
/// stage-model backend call it.
void register_cuda_optimizer_kernels();

} // namespace troupe::ops
