// The GPT of ops/gpt.hpp on one CUDA device and one stream, in mixed precision:
// bf16 weights and activations for compute, f32 master weights and gradients
// (an optimizer outside updates the masters). Same parameters, names and
// initialisation as gpt_range.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/cuda/check.hpp"
#include "ops/gpt.hpp"
#include "ops/named_tensor.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// Layers [begin, end) of a GPT on `cuda:device`, as gpt_range computes them
/// (embeddings when begin == 0; final norm, head and loss when end == layers).
///
/// Weights are drawn on the host by gpt_range's own initialisation and copied up,
/// so CPU and GPU start from identical weights. All work is queued on stream();
/// nothing waits for the GPU except the calls that return host values.
///
/// Memory: parameters and gradients are allocated by init();
/// each microbatch slot (one per microbatch in flight) and the backward scratch
/// are allocated at their first use for the largest [max_batch, context] input
/// and then reused, so a steady state allocates nothing.
///
/// Inputs: the first range takes i32 tokens [B, T]; others take bf16 activations
/// [B, T, d_model]; either may be on the host or on this device. The last range
/// needs i32 targets [B, T]. Outputs are device tensors owned by the model: a
/// forward's output lives until that microbatch's backward, a backward's input
/// gradient until the next backward.
class gpt_cuda {
public:
  gpt_cuda(const gpt_config& cfg, int begin, int end, int max_batch, int device = 0);
  gpt_cuda(const gpt_cuda&) = delete;
  gpt_cuda& operator=(const gpt_cuda&) = delete;
  ~gpt_cuda();

  /// Registers the CUDA allocator, creates the stream and cuBLAS handle, and
  /// uploads the initial weights. Call once, first; fails without a GPU.
  gpu::status init();

  const gpt_config& config() const noexcept;
  int begin() const noexcept;
  int end() const noexcept;
  cudaStream_t stream() const noexcept;

  /// Training forward of microbatch `mb`. `out` receives the loss, f32 [1] on the
  /// device (last range), or the bf16 activations [B, T, d_model].
  gpu::status forward(int mb, const tensor_handle& input, const tensor_handle& targets, tensor_handle& out);

  /// Forward of one batch for evaluation, holding no microbatch slot: `out` is
  /// set as forward sets it, in a buffer of its own that the next evaluate reuses.
  /// The last range needs `targets`.
  gpu::status evaluate(const tensor_handle& input, const tensor_handle& targets, tensor_handle& out);

  /// Microbatches whose forward ran and whose backward has not finished.
  int in_flight() const noexcept;

  /// Backward of `mb`: accumulates the f32 weight gradients and sets `dx` to the
  /// bf16 gradient of the input (left empty for the first range). The last range
  /// scales the loss by `loss_scale` (e.g. 1/microbatches); others take `grad_out`.
  gpu::status backward(int mb, const tensor_handle& grad_out, float loss_scale, tensor_handle& dx);

  /// Whether the projections run through cuBLASLt with fused epilogues (bias,
  /// GELU, residual; the default) or as plain products plus separate kernels.
  void set_fused_epilogues(bool on) noexcept;

  /// Input-gradient half of backward (zero-bubble "I"): sets `dx` as backward does
  /// (it stays valid until a forward reuses the slot) and keeps what backward_weight
  /// needs in the microbatch's slot (per-layer buffers allocated at the first use).
  gpu::status backward_input(int mb, const tensor_handle& grad_out, float loss_scale, tensor_handle& dx);
  /// Weight-gradient half (zero-bubble "W") after backward_input of the same `mb`;
  /// the two halves accumulate what backward does. Releases the microbatch.
  gpu::status backward_weight(int mb);

  /// Sets every gradient to zero (queued on the stream).
  gpu::status zero_grads();
  /// Σ g² over this range's f32 gradients, reduced on the device in double and
  /// read back (waits for the stream). Combine across ranges for global-norm clipping.
  gpu::status grad_sq_norm(double& out);
  /// Multiplies every gradient by `factor` (queued on the stream).
  gpu::status scale_grads(float factor);

  /// The f32 master weights and f32 gradients as device tensors, in gpt_range's
  /// order with its names and shapes (views into the model's buffers, valid
  /// after init() for the model's life). An optimizer made over them
  /// (ops/adamw.hpp, on stream()) updates the masters; params_updated() then
  /// refreshes the bf16 compute copy.
  const std::vector<named_tensor>& params() const noexcept;
  const std::vector<named_tensor>& grads() const noexcept;
  /// Rounds the f32 master weights into the bf16 weights the products read,
  /// queued on the stream: after anything wrote the masters in place.
  gpu::status params_updated();

  /// Waits for the stream, then reads a value back: the loss of the last forward
  /// (`loss`), or a parameter's f32 master weights / f32 gradient by name.
  gpu::status loss(float& out);
  gpu::status download_param(const std::string& name, std::vector<float>& out);
  gpu::status download_grad(const std::string& name, std::vector<float>& out);
  /// The f32 arrays kept per parameter: master weights and gradient.
  enum class buffer { master, grad };
  /// Waits for the stream, then copies parameter `name`'s elements of `which`
  /// (as many as the parameter has) into host memory at `out`.
  gpu::status download(buffer which, const std::string& name, float* out);
  /// Copies parameter `name`'s elements of `which` from host memory at `in` and
  /// waits until they are written; writing the master weights also refreshes
  /// their bf16 compute copy. For checkpoints, between steps.
  gpu::status upload(buffer which, const std::string& name, const float* in);
  /// Parameter names in gpt_range's order, and their shapes in the same order.
  std::vector<std::string> param_names() const;
  std::vector<shape_t> param_shapes() const;
  /// Number of parameters (elements) of this range.
  std::int64_t param_count() const noexcept;
  /// Waits until all queued work is done.
  gpu::status synchronize();

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace troupe::ops
